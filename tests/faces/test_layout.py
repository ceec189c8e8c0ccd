"""The package's layout, read from the source with ast (nothing is imported): every rule that
docs/developers/architecture.md states. Module-level imports inside voxelizer (those for type
checking too) form no cycle; no module imports another's private names; each module imports
only from its layer and those below; inside the pipeline, from its level and those below;
the CPU references reach neither the pipeline nor the GPU; the data model (svo, grid, mesh,
placement) neither imports voxelizer.io nor opens a file; the vocabulary is defined in
choices.py alone; the pipeline's classes, Device, Instance and DenseGrid create their
attributes in __init__; and modules and functions stay under their size limits."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "voxelizer"
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


@cache
def trees() -> dict[str, ast.Module]:
    """Each module's syntax tree, parsed once, by the first test that reads one (not at
    collection, which every process of a run does)."""
    return {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


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
        for module, tree in trees().items()
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
        for module, tree in trees().items()
        for node in all_imports(tree)
        for target, name in imported(module, node)
        if target != module and name and name.startswith("_") and not name.startswith("__")
    ]
    assert not found, "; ".join(found)


@pytest.mark.parametrize("module", DATA_MODEL)
def test_the_data_model_imports_no_file_io(module):
    targets = {
        target for node in all_imports(trees()[module]) for target, _ in imported(module, node)
    }
    assert not {t for t in targets if t == "voxelizer.io" or t.startswith("voxelizer.io.")}
    plain = {alias.name for node in all_imports(trees()[module]) for alias in node.names}
    assert not plain & {"open_output", "save", "load", "load_mesh"}


@pytest.mark.parametrize("module", DATA_MODEL)
def test_the_data_model_opens_no_files(module):
    calls = []
    for node in ast.walk(trees()[module]):
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
    for node in all_imports(trees()[module]):  # deferred imports too
        graph[module] |= {target for target, _ in imported(module, node) if target != module}
    reached = reached_from(graph, module)
    assert not {m for m in reached if m.startswith(("voxelizer.pipeline", "voxelizer.gpu"))}


# -- the rules of docs/developers/architecture.md ------------------------------------------

BASE = {"errors", "log", "parallel", "stats", "progress", "interrupts", "choices", "console"}
MODEL = {
    "thin",
    "mesh",
    "grid_spec",
    "placement_rules",
    "placement",
    "placement_kept",
    "components",
    "budget",
    "grid",
    "octree",
    "svo",
    "svo_arrays",
    "surface",
    "render",
    "convert",
}
FACES = {
    "options",
    "api",
    "api_runs",
    "mesh_warnings",
    "cli",
    "cli_attributes",
    "grid_arguments",
    "ray",
    "normalize",
    "torch",
    "__main__",
    "version",
    "command_words",
}
IO = {"shards"}  # the shard store as an output format, beside io/ (whose writers it extends)
FOLDERS = {
    "gpu": "gpu",
    "pipeline": "pipeline",
    "io": "io",
    "reference": "reference",
    "attributes": "model",
    "benchmarks": "faces",
    "tools": "faces",
    "batch": "faces",
    "trigrid": "faces",  # triangle grids: their passes, queries, files and references, for users
}
ALLOWED = {
    "base": {"base"},
    "gpu": {"base", "gpu"},
    "model": {"base", "model"},
    "reference": {"base", "model", "reference"},
    "pipeline": {"base", "gpu", "model", "pipeline"},
    "io": {"base", "model", "io"},
    "faces": {"base", "gpu", "model", "reference", "pipeline", "io", "faces"},
}


def layer_of(module: str) -> str | None:
    """The layer of the architecture page a module belongs to (None: none yet)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "faces"  # the package's own __init__
    name = parts[1]
    if name in FOLDERS:
        return FOLDERS[name]
    for layer, names in (("base", BASE), ("model", MODEL), ("io", IO), ("faces", FACES)):
        if name in names:
            return layer
    return None


def test_every_module_belongs_to_a_layer():
    assert not [module for module in MODULES if layer_of(module) is None]


def test_no_module_imports_from_a_layer_above_its_own():
    found = [
        f"{module} ({layer_of(module)}) imports {target} ({layer_of(target)})"
        for module, tree in trees().items()
        for node in all_imports(tree)  # deferred imports too
        for target, _ in imported(module, node)
        if layer_of(target) not in ALLOWED[str(layer_of(module))]
    ]
    assert not found, "; ".join(found)


PIPELINE_LEVELS = {
    "layout": 0,
    "kernels": 0,
    "geometry": 0,
    "job": 0,
    "gpu_grid": 0,
    "cubes": 0,
    "binning": 1,
    "fill_pass": 1,
    "surface_pass": 1,
    "svo_build": 1,
    "face_ids": 1,
    "winding": 1,
    "merge": 1,
    "plan": 1,
    "sparse_pass": 1,
    "sparse_merge": 1,
    "passes": 2,
    "replay": 2,
    "slabs": 2,
    "sparse_slabs": 2,
    "resources": 2,
    "fills": 3,
    "runner": 4,
}


def pipeline_level(module: str) -> int:
    """The pipeline level of a module of voxelizer.pipeline (its own __init__: the entry)."""
    parts = module.split(".")
    return PIPELINE_LEVELS[parts[2]] if len(parts) > 2 else PIPELINE_LEVELS["runner"]


def test_inside_the_pipeline_nothing_imports_a_level_above_its_own():
    pipeline = [module for module in MODULES if module.startswith("voxelizer.pipeline")]
    assert {module.split(".")[2] for module in pipeline if module.count(".") > 1} == set(
        PIPELINE_LEVELS
    )
    found = [
        f"{module} imports {target}"
        for module in pipeline
        for node in all_imports(trees()[module])
        for target, _ in imported(module, node)
        if target.startswith("voxelizer.pipeline")
        and pipeline_level(target) > pipeline_level(module)
    ]
    assert not found, "; ".join(found)


def test_the_fill_strategies_are_imported_by_the_runner_alone():
    importers = {
        module
        for module, tree in trees().items()
        for node in all_imports(tree)
        for target, _ in imported(module, node)
        if target.startswith("voxelizer.pipeline.fills") and not module.startswith(target)
    }
    assert importers - {m for m in MODULES if m.startswith("voxelizer.pipeline.fills")} == {
        "voxelizer.pipeline.runner"
    }


def module_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        names |= {target.id for target in targets if isinstance(target, ast.Name)}
    return names


def test_the_vocabulary_is_defined_in_choices_alone():
    vocabulary = {
        name for name in module_level_names(trees()["voxelizer.choices"]) if name.isupper()
    }
    assert {"VARIANTS", "SORTS", "FILL_MODES", "MODES", "SURFACES", "DEFAULT_VARIANT"} <= vocabulary
    elsewhere = [
        f"{module} defines {name}"
        for module, tree in trees().items()
        if module != "voxelizer.choices"
        for name in module_level_names(tree) & vocabulary
    ]
    assert not elsewhere, "; ".join(elsewhere)
    assert not [target for node in all_imports(trees()["voxelizer.choices"])
                for target, _ in imported("voxelizer.choices", node)]  # fmt: skip


def attributes_set_outside_init(cls: ast.ClassDef) -> set[str]:
    """Attributes of self a class's methods assign that neither its __init__ nor its body
    (class attributes) creates."""
    in_init: set[str] = set()
    elsewhere: set[str] = set()
    for method in cls.body:
        if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(method):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets = [node.target]
            for target in targets:
                for part in assigned(target):
                    if isinstance(part.value, ast.Name) and part.value.id == "self":
                        (in_init if method.name == "__init__" else elsewhere).add(part.attr)
    return elsewhere - in_init - module_level_names(ast.Module(body=cls.body, type_ignores=[]))


def assigned(target: ast.expr) -> Iterator[ast.Attribute]:
    """The attributes an assignment to `target` binds: `self.a`, or those inside a tuple or
    list target, not `self.a[i]` or `self.f().b` (those change what an attribute holds)."""
    if isinstance(target, ast.Attribute):
        yield target
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from assigned(element)
    elif isinstance(target, ast.Starred):
        yield from assigned(target.value)


# Modules beyond the pipeline whose classes create every attribute in __init__ (not yet:
# gpu.commands' Sequence, mesh's Mesh and two classes of batch/).
ATTRIBUTES_IN_INIT = {"voxelizer.gpu.device", "voxelizer.gpu.buffers", "voxelizer.grid"}


def test_classes_create_every_attribute_in_init():
    found = [
        f"{module}.{cls.name}: {sorted(names)}"
        for module, tree in trees().items()
        if module.startswith("voxelizer.pipeline") or module in ATTRIBUTES_IN_INIT
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for names in [attributes_set_outside_init(cls)]
        if names
    ]
    assert not found, "; ".join(found)


def test_attributes_set_outside_init_are_found():
    tree = ast.parse(
        "class A:\n    x = 0\n    def __init__(self):\n        self.a = 1\n"
        "    def later(self):\n        self.a = self.b = 2\n        self.x += 1\n"
        "        self.c[0] = self.d().e = 3\n        (self.f, *self.g) = 4, 5\n"
    )
    cls = tree.body[0]
    assert isinstance(cls, ast.ClassDef)
    assert attributes_set_outside_init(cls) == {"b", "f", "g"}


MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80


def functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(qualified name, node) of every function and method, nested ones too."""

    def visit(
        node: ast.AST, prefix: str
    ) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{prefix}{child.name}", child
                yield from visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, f"{prefix}{child.name}.")

    yield from visit(tree, "")


def test_no_module_and_no_function_is_too_long():
    long_modules = {
        module
        for module, path in MODULES.items()
        if len(path.read_text().splitlines()) > MAX_MODULE_LINES
    }
    long_functions = {
        f"{module}.{name}"
        for module, tree in trees().items()
        for name, node in functions(tree)
        if (node.end_lineno or node.lineno) - node.lineno + 1 > MAX_FUNCTION_LINES
    }
    assert not long_modules, f"over {MAX_MODULE_LINES} lines: {sorted(long_modules)}"
    assert not long_functions, f"over {MAX_FUNCTION_LINES} lines: {sorted(long_functions)}"
