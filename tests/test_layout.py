"""The package's layout, read from the source with ast (nothing is imported): module-level
imports inside voxelizer (those for type checking too) form no cycle, no module imports
another's private names, and the data model (svo, grid, mesh, placement) neither imports
voxelizer.io nor opens a file."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "voxelizer"
DATA_MODEL = ("voxelizer.svo", "voxelizer.grid", "voxelizer.mesh", "voxelizer.placement")
# Calls that read or write files: builtin open, and the file methods of pathlib, numpy, trimesh.
FILE_CALLS = {
    "open",
    "read_bytes",
    "read_text",
    "write_bytes",
    "write_text",
    "load",
    "save",
    "savez",
    "savez_compressed",
    "fromfile",
    "tofile",
    "export",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def module_level_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The module's own imports: top-level ones, also inside if/try (so under `if
    TYPE_CHECKING:`: a cycle of type hints is still a cycle of the design), but not the
    deferred ones inside functions or classes."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            yield from module_level_imports(node.body)
            yield from module_level_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from module_level_imports(block)
            for handler in node.handlers:
                yield from module_level_imports(handler.body)


def all_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node


def imported(module: str, node: ast.Import | ast.ImportFrom) -> Iterator[tuple[str, str | None]]:
    """(module of voxelizer, name taken from it or None) for each thing `node` imports from
    the package. `from .x import y` names module x.y when that is a module, else x."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name in MODULES:
                yield alias.name, None
        return
    if node.level:
        package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{node.module}" if node.module else package
    else:
        base = node.module or ""
    if base not in MODULES:
        return
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        yield (submodule, None) if submodule in MODULES else (base, alias.name)


def import_graph() -> dict[str, set[str]]:
    """Edges of module-level imports between the package's modules. Importing a.b also runs
    a/__init__.py, but that edge is Python's, not the module's: it is left out."""
    return {
        module: {
            target
            for node in module_level_imports(tree.body)
            for target, _ in imported(module, node)
            if target != module
        }
        for module, tree in TREES.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle as a list of modules (first == last), or [] when there is none."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str]:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return []
        path.append(module)
        for target in sorted(graph.get(module, ())):
            cycle = visit(target)
            if cycle:
                return cycle
        path.pop()
        done.add(module)
        return []

    for module in sorted(graph):
        cycle = visit(module)
        if cycle:
            return cycle
    return []


def test_the_package_is_parsed():
    assert {"voxelizer", "voxelizer.svo", "voxelizer.io", "voxelizer.io.writers"} <= set(MODULES)
    graph = import_graph()
    assert "voxelizer.svo" in graph["voxelizer.io.svo_file"]
    assert "voxelizer.io.writers" in graph["voxelizer.io"]


def test_find_cycle_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_no_module_imports_another_modules_private_names():
    found = [
        f"{module} imports {name} from {target}"
        for module, tree in TREES.items()
        for node in all_imports(tree)
        for target, name in imported(module, node)
        if target != module and name and name.startswith("_") and not name.startswith("__")
    ]
    assert not found, "; ".join(found)


@pytest.mark.parametrize("module", DATA_MODEL)
def test_the_data_model_imports_no_file_io(module):
    targets = {
        target for node in all_imports(TREES[module]) for target, _ in imported(module, node)
    }
    assert not {t for t in targets if t == "voxelizer.io" or t.startswith("voxelizer.io.")}
    plain = {alias.name for node in all_imports(TREES[module]) for alias in node.names}
    assert not plain & {"open_output", "save", "load", "load_mesh"}


@pytest.mark.parametrize("module", DATA_MODEL)
def test_the_data_model_opens_no_files(module):
    calls = []
    for node in ast.walk(TREES[module]):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in FILE_CALLS:
                calls.append(f"line {node.lineno}: {name}()")
    assert not calls, f"{module} touches files: {', '.join(calls)}"


def reached_from(graph: dict[str, set[str]], start: str) -> set[str]:
    """The modules `start` imports, directly or through others (module-level imports)."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


REFERENCE_MODULES = [name for name in MODULES if name.split(".")[:2] == ["voxelizer", "reference"]]


@pytest.mark.parametrize("module", REFERENCE_MODULES)
def test_the_reference_never_reaches_the_pipeline_or_the_gpu(module):
    """The CPU references are the oracle the GPU is checked against: written apart, they
    import neither the pipeline nor the Vulkan layer, not even through another module (nor
    by a deferred import of their own)."""
    graph = import_graph()
    for node in all_imports(TREES[module]):  # deferred imports too
        graph[module] |= {target for target, _ in imported(module, node) if target != module}
    reached = reached_from(graph, module)
    assert not {m for m in reached if m.startswith(("voxelizer.pipeline", "voxelizer.gpu"))}
