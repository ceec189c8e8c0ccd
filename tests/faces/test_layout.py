"""The package's layout, read from the source with ast (nothing is imported): every rule that
docs/developers/architecture.md states. Module-level imports inside voxelizer (those for type
checking too) form no cycle; no module imports another's private names; each module imports
only from its layer and those below; inside the pipeline, from its level and those below;
the CPU references reach neither the pipeline nor the GPU; the data model (svo, grid, mesh,
placement) neither imports voxelizer.io nor opens a file; the vocabulary is defined in
choices.py alone; classes create their attributes in __init__; and modules and functions
stay under their size limits."""

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


# The methods that build an object: __init__, __post_init__ (which a dataclass's __init__ calls)
# and __setstate__ (which restores what pickling took). Only they may set attributes whose
# name the source does not spell (setattr(self, name, value), self.__dict__.update(state)),
# as a frozen dataclass's __post_init__ does, converting its fields in a loop.
BUILDERS = {"__init__", "__post_init__", "__setstate__"}


def attributes_set_outside_init(cls: ast.ClassDef) -> set[str]:
    """Attributes of self a class's methods set that neither its __init__ nor its body (class
    attributes, dataclass fields) creates: by assignment, setattr(self, "a", v),
    object.__setattr__(self, "a", v) or self.__dict__["a"] = v. A frozen dataclass's
    __post_init__ sets its fields through object.__setattr__: they are declared in its body,
    so they pass, and an attribute it adds beside them does not. A form that does not spell
    the name is reported as itself ("setattr(self, ...)") outside BUILDERS."""
    in_init: set[str] = set()
    elsewhere: set[str] = set()
    for method in cls.body:
        if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(method):
            for name in attributes_set(node):
                if name.isidentifier():
                    (in_init if method.name == "__init__" else elsewhere).add(name)
                elif method.name not in BUILDERS:
                    elsewhere.add(name)
    return elsewhere - in_init - module_level_names(ast.Module(body=cls.body, type_ignores=[]))


def attributes_set(node: ast.AST) -> Iterator[str]:
    """The attributes of self that one statement or call sets: their names, or where the
    source does not spell a name, the form that sets it."""
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    elif isinstance(node, ast.Call):
        yield from attributes_called(node)
    for target in targets:
        for part in assigned(target):
            if isinstance(part, ast.Attribute) and is_self(part.value):
                yield part.attr
            elif isinstance(part, ast.Subscript) and is_self_dict(part.value):
                yield spelled(part.slice, "self.__dict__[...]")


def attributes_called(call: ast.Call) -> Iterator[str]:
    """The attributes of self a call sets: setattr(self, ...), object.__setattr__(self, ...),
    self.__dict__.setdefault(...) and self.__dict__.update(...) (vars(self) as __dict__)."""
    func, args = call.func, call.args
    if len(args) >= 2 and is_self(args[0]):
        if isinstance(func, ast.Name) and func.id == "setattr":
            yield spelled(args[1], "setattr(self, ...)")
        elif (
            isinstance(func, ast.Attribute)
            and func.attr == "__setattr__"
            and isinstance(func.value, ast.Name)
            and func.value.id == "object"
        ):
            yield spelled(args[1], "object.__setattr__(self, ...)")
    if isinstance(func, ast.Attribute) and is_self_dict(func.value):
        if func.attr == "setdefault" and args:
            yield spelled(args[0], "self.__dict__.setdefault(...)")
        elif func.attr == "update":
            yield "self.__dict__.update(...)"


def is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def is_self_dict(node: ast.expr) -> bool:
    """self.__dict__, or vars(self)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "__dict__" and is_self(node.value)
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "vars"
        and len(node.args) == 1
        and is_self(node.args[0])
    )


def spelled(name: ast.expr, form: str) -> str:
    """The attribute's name where the source spells it as a string, else `form`."""
    if isinstance(name, ast.Constant) and isinstance(name.value, str):
        return name.value
    return form


def assigned(target: ast.expr) -> Iterator[ast.Attribute | ast.Subscript]:
    """What an assignment to `target` binds: an attribute or an item (`x.a`, `x[k]`), or those
    inside a tuple or list target. The caller keeps `self.a` and `self.__dict__[k]`, not
    `self.a[i]` or `self.f().b` (those change what an attribute holds)."""
    if isinstance(target, (ast.Attribute, ast.Subscript)):
        yield target
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from assigned(element)
    elif isinstance(target, ast.Starred):
        yield from assigned(target.value)


def test_classes_create_every_attribute_in_init():
    """Every class of the package creates every attribute in __init__ or declares it in its
    body: what an object holds is read in one place, and stages hand results on as records."""
    found = [
        f"{module}.{cls.name}: {sorted(names)}"
        for module, tree in trees().items()
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for names in [attributes_set_outside_init(cls)]
        if names
    ]
    assert not found, "; ".join(found)


def test_attributes_set_outside_init_are_found():
    tree = ast.parse(
        "class A:\n    x = 0\n    def __init__(self):\n        self.a = 1\n"
        "        setattr(self, name, 0)\n"
        "    def later(self):\n        self.a = self.b = 2\n        self.x += 1\n"
        "        self.c[0] = self.d().e = 3\n        (self.f, *self.g) = 4, 5\n"
        "        setattr(self, 'h', 6)\n        object.__setattr__(self, 'i', 7)\n"
        "        self.__dict__['j'] = vars(self)['k'] = 8\n"
        "        self.__dict__.setdefault('l', 9)\n        setattr(self, name, 10)\n"
        "        self.__dict__.update({})\n        self.__dict__.get('m')\n"
        "        setattr(other, 'n', 11)\n        other.__dict__['o'] = 12\n"
        "    def __post_init__(self):\n        object.__setattr__(self, 'x', 13)\n"
        "        object.__setattr__(self, name, 14)\n        object.__setattr__(self, 'p', 15)\n"
        "    def __setstate__(self, state):\n        self.__dict__.update(state)\n"
        "        self.q = 16\n"
    )
    cls = tree.body[0]
    assert isinstance(cls, ast.ClassDef)
    assert attributes_set_outside_init(cls) == {
        *"bfghijklpq",
        "setattr(self, ...)",
        "self.__dict__.update(...)",
    }


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
