"""Every kernel declaration against its GLSL, for every define combination the host builds.

The GLSL is run through glslang's preprocessor with the defines the host compiles it with;
then its storage-buffer blocks (binding slot, block name in snake_case) and its push-constant
block (member names and GLSL types, std430 offsets, nested structs such as Window) are
compared with the declaration, and the declaration's packed bytes are read back at the GLSL
offsets. No device is needed.
"""

from __future__ import annotations

import itertools
import re
import struct
import subprocess
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import cache

import pytest

from voxelizer.choices import VARIANTS
from voxelizer.gpu import scan
from voxelizer.gpu.compiler import find_glslang, shader_dir
from voxelizer.gpu.kernels import COMMON_DEFINES, Kernel, Struct, cpu_choices
from voxelizer.pipeline import kernels
from voxelizer.pipeline.kernels import pass_defines
from voxelizer.pipeline.winding import winding_defines
from voxelizer.trigrid import kernels as trigrid_kernels

# Every value subgroup_defines can give: the kernels must match whatever the device has.
SUBGROUP_CHOICES = [
    {"SUBGROUP_SCAN": subgroup_scan, "SHARED_RECORDS": shared_records}
    for subgroup_scan, shared_records in itertools.product((0, 1), repeat=2)
]


def families() -> list[tuple[tuple[Kernel, ...], list[dict[str, int]]]]:
    """Each family of kernels with every set of shared defines the host builds it with."""
    return [
        (
            kernels.PASS_KERNELS,
            [pass_defines(variant, groups) for variant in VARIANTS for groups in SUBGROUP_CHOICES],
        ),
        (
            (*kernels.SPARSE_BINNING_KERNELS, *kernels.SPARSE_KERNELS),
            [
                pass_defines(variant, groups, shift)
                for variant in kernels.SPARSE_VARIANTS
                for groups in SUBGROUP_CHOICES
                for shift in kernels.LATTICE_SHIFTS
            ],
        ),
        (kernels.SVO_KERNELS, [dict(COMMON_DEFINES)]),  # as SVOPipelines builds them
        (kernels.FACE_GATHER_KERNELS, [dict(COMMON_DEFINES)]),  # as FaceGather builds them
        (kernels.WINDING_KERNELS, [winding_defines()]),  # as WindingPipelines builds them
        (  # as trigrid.build.GridEngine builds them
            trigrid_kernels.TRIGRID_KERNELS,
            [trigrid_kernels.trigrid_defines(b) for b in trigrid_kernels.BRANCHLESS_CHOICES],
        ),
        (
            (scan.SCAN_BLOCKS, scan.ADD_BLOCK_OFFSETS),
            [scan.scan_defines(groups) for groups in SUBGROUP_CHOICES],
        ),
    ]


def builds(kernel: Kernel) -> list[dict[str, int]]:
    """The full defines of every build of `kernel` (shared sets that clash with its own
    defines, e.g. INDEXED=1 for the soup setup, are builds the host never makes), a
    cpu_shaped kernel's for GPU and CPU devices."""
    found = []
    for members, shared_sets in families():
        if any(member is kernel for member in members):
            for shared in shared_sets:
                if all(shared.get(name, value) == value for name, value in kernel.defines.items()):
                    for cpu in cpu_choices() if kernel.cpu_shaped else [{}]:
                        found.append(kernel.compile_defines({**shared, **cpu}))
    return found


def declared_kernels() -> list[Kernel]:
    """Every Kernel the host's modules declare, whether or not a family lists it."""
    return [
        value
        for module in (kernels, scan, trigrid_kernels)
        for value in vars(module).values()
        if isinstance(value, Kernel)
    ]


# -- the GLSL side ----------------------------------------------------------------------------


def _without_comments(glsl: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", glsl, flags=re.S)


@cache
def _shader_texts() -> str:
    """The code of every shared .glsl file, which any kernel may include."""
    return "\n".join(
        _without_comments(path.read_text()) for path in sorted(shader_dir().glob("*.glsl"))
    )


def preprocess(source: str, defines: Mapping[str, int]) -> str:
    """The preprocessed GLSL of shaders/<source>.comp, as glslang compiles it."""
    text = _without_comments((shader_dir() / f"{source}.comp").read_text()) + _shader_texts()
    # Defines that no shader code mentions cannot change the output: one run serves them all.
    relevant = tuple(
        sorted((name, value) for name, value in defines.items() if re.search(rf"\b{name}\b", text))
    )
    return _preprocess(source, relevant)


@cache
def _preprocess(source: str, defines: tuple[tuple[str, int], ...]) -> str:
    command = [find_glslang(), "-E", f"-I{shader_dir()}"]
    command += [f"-D{name}={value}" for name, value in defines]
    command.append(str(shader_dir() / f"{source}.comp"))
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{source} {defines}: {result.stdout}{result.stderr}"
    return result.stdout


BUFFER = re.compile(
    r"layout\s*\(([^)]*)\)\s*(?:\w+\s+)*?buffer\s+(\w+)\s*\{[^}]*\}\s*(\w*)\s*;", re.S
)
PUSH_BLOCK = re.compile(r"layout\s*\(\s*push_constant\s*\)\s*uniform\s+\w+\s*\{([^}]*)\}", re.S)
STRUCT = re.compile(r"\bstruct\s+(\w+)\s*\{([^}]*)\}\s*;", re.S)
MEMBER = re.compile(r"^\s*(\w+)\s+(\w+(?:\s*,\s*\w+)*)\s*$")


def snake_case(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def glsl_bindings(glsl: str) -> dict[str, int]:
    """Storage-buffer block name (snake_case) -> binding slot, all in descriptor set 0."""
    bindings: dict[str, int] = {}
    for qualifiers, block, _instance in BUFFER.findall(glsl):
        assert "set" not in re.findall(r"\w+", qualifiers), f"{block}: descriptor set given"
        slot = re.search(r"\bbinding\s*=\s*(\d+)", qualifiers)
        assert slot is not None, f"buffer {block} has no binding"
        bindings[snake_case(block)] = int(slot.group(1))
    return bindings


def members(body: str) -> list[tuple[str, str]]:
    """(name, type) of every member of a block or struct body, in order."""
    found = []
    for declaration in body.split(";"):
        if not declaration.strip():
            continue
        match = MEMBER.match(declaration)
        assert match, f"cannot read member declaration {declaration.strip()!r}"
        kind, names = match.groups()
        found += [(name.strip(), kind) for name in names.split(",")]
    return found


def std430(kind: str, structs: Mapping[str, str]) -> tuple[int, int]:
    """(size, alignment) of a GLSL type in std430."""
    vector = re.fullmatch(r"([uibd]?)vec([234])", kind)
    if kind in ("uint", "int", "float", "bool"):
        return 4, 4
    if kind in ("int64_t", "uint64_t", "double"):
        return 8, 8
    if vector:
        scalar = 8 if vector.group(1) == "d" else 4
        count = int(vector.group(2))
        return scalar * count, scalar * (4 if count == 3 else count)
    if kind in structs:
        end, alignment = 0, 1
        for _, member_kind in members(structs[kind]):
            size, align = std430(member_kind, structs)
            end = -(-end // align) * align + size
            alignment = max(alignment, align)
        return -(-end // alignment) * alignment, alignment
    raise AssertionError(f"type {kind} is not handled")


def glsl_push(glsl: str) -> tuple[list[tuple[str, str]], list[tuple[str, str, int]], int]:
    """The push-constant block: its members (name, type), its scalar leaves (dotted path,
    type, byte offset) and its size (the end of the last member)."""
    blocks = PUSH_BLOCK.findall(glsl)
    assert len(blocks) <= 1, "more than one push-constant block"
    if not blocks:
        return [], [], 0
    structs = dict(STRUCT.findall(glsl))
    leaves: list[tuple[str, str, int]] = []

    def place(prefix: str, kind: str, offset: int) -> None:
        if kind in structs:
            end = offset
            for name, member_kind in members(structs[kind]):
                size, align = std430(member_kind, structs)
                end = -(-end // align) * align
                place(f"{prefix}.{name}", member_kind, end)
                end += size
        else:
            leaves.append((prefix, kind, offset))

    top = members(blocks[0])
    end = 0
    for name, kind in top:
        size, align = std430(kind, structs)
        end = -(-end // align) * align
        place(name, kind, end)
        end += size
    return top, leaves, end


# -- the comparison ---------------------------------------------------------------------------

FORMATS = {"uint": "<I", "int": "<i", "float": "<f"}


def declared_leaves(kernel: Kernel) -> list[tuple[str, str]]:
    """(dotted path, GLSL type) of every scalar the declaration packs, in order."""
    leaves = []
    for name, kind in kernel.push:
        if isinstance(kind, Struct):
            leaves += [(f"{name}.{member}", member_kind) for member, member_kind in kind.fields]
        else:
            leaves.append((name, kind))
    return leaves


def mismatches(kernel: Kernel, defines: Mapping[str, int]) -> list[str]:
    """What differs between the declaration and the GLSL compiled with `defines`."""
    glsl = preprocess(kernel.source, defines)
    problems = []
    bindings = glsl_bindings(glsl)
    if bindings != dict(kernel.bindings):
        problems.append(f"bindings: GLSL {bindings}, declared {dict(kernel.bindings)}")
    top, leaves, size = glsl_push(glsl)
    declared_top = [(n, k.name if isinstance(k, Struct) else k) for n, k in kernel.push]
    if declared_top != top:
        problems.append(f"push fields: GLSL {top}, declared {declared_top}")
    glsl_leaves = [(path, kind) for path, kind, _ in leaves]
    mine = declared_leaves(kernel)
    if mine != glsl_leaves:
        problems.append(f"push members: GLSL {glsl_leaves}, declared {mine}")
        return problems
    if kernel.push_size != size:
        problems.append(f"push size: GLSL {size} bytes, declared {kernel.push_size}")
    # Pack a distinct marker into every scalar and read each back at its GLSL offset.
    markers = iter(range(1, len(leaves) + 1))
    values = {
        name: {member: next(markers) for member, _ in kind.fields}
        if isinstance(kind, Struct)
        else next(markers)
        for name, kind in kernel.push
    }
    packed = kernel.pack(values)
    for marker, (path, kind, offset) in enumerate(leaves, 1):
        read = (
            struct.unpack_from(FORMATS[kind], packed, offset)[0] if offset < len(packed) else None
        )
        if read != marker:
            problems.append(f"push {path}: packed elsewhere than GLSL offset {offset}")
    return problems


# Slow: each kernel runs glslang's preprocessor over every build (1-1.5 s a kernel on
# lavapipe's 2 cores, 40 s in all), a check that matters where a shader or a declaration
# changed; test_a_wrong_declaration_is_caught keeps the check itself in the quick run.
@pytest.mark.slow
@pytest.mark.parametrize("kernel", declared_kernels(), ids=lambda kernel: kernel.label)
def test_declaration_matches_the_glsl_of_every_build(kernel):
    defines_of_builds = builds(kernel)
    assert defines_of_builds, f"{kernel.label}: no family builds it (tests/gpu/test_kernels.py)"
    with ThreadPoolExecutor() as workers:  # glslang runs in parallel; the results are cached
        list(workers.map(lambda defines: preprocess(kernel.source, defines), defines_of_builds))
    for defines in defines_of_builds:
        problems = mismatches(kernel, defines)
        assert not problems, f"{kernel.label} with {defines}:\n" + "\n".join(problems)


@pytest.mark.slow  # glslang's preprocessor per kernel, as above
@pytest.mark.parametrize("kernel", declared_kernels(), ids=lambda kernel: kernel.label)
def test_kernels_whose_glsl_has_a_cpu_shape_are_declared_cpu_shaped(kernel):
    """A kernel is compiled with CPU_DEVICE (gpu.kernels.cpu_defines) iff its GLSL reads it:
    a shape for CPU devices that a kernel not declared cpu_shaped would never get, and no
    shipped module twice for a kernel whose code does not change. A kernel whose own defines
    fix CPU_DEVICE (one shape on every device, e.g. sparse_fill) is not cpu_shaped."""
    if "CPU_DEVICE" in kernel.defines:
        assert not kernel.cpu_shaped, f"{kernel.label}: fixes CPU_DEVICE, so not cpu_shaped"
        return
    differs = False
    for defines in builds(kernel):
        texts = {preprocess(kernel.source, {**defines, "CPU_DEVICE": cpu}) for cpu in (0, 1)}
        differs = differs or len(texts) == 2
    assert differs == kernel.cpu_shaped, f"{kernel.label}: cpu_shaped is wrong"


def test_every_shader_has_a_declaration():
    sources = {path.stem for path in shader_dir().glob("*.comp")}
    assert sources - {kernel.source for kernel in declared_kernels()} == set()


@pytest.mark.parametrize(
    "broken",
    [
        Kernel("emit", {"records": 0, "offsets": 2, "pairs": 1}, kernels.EMIT.push),
        Kernel("emit", {"records": 0, "offsets": 1}, kernels.EMIT.push),
        Kernel("emit", kernels.EMIT.bindings, (("triangle_count", "uint"),)),
        Kernel("emit", kernels.EMIT.bindings, (("window", kernels.WINDOW), ("count", "uint"))),
        Kernel(
            "emit",
            kernels.EMIT.bindings,
            (("triangle_count", "int"), ("window", kernels.WINDOW)),
        ),
        Kernel(
            "setup",
            {"soup": 0, "records": 2, "tile_counts": 3, "wrap_flag": 4},
            (
                ("triangle_count", "uint"),
                ("window", Struct("Window", (("nx", "int"), ("nz", "int")))),
                ("tile_limit", "uint"),
            ),
            {"INDEXED": 0},
        ),
    ],
    ids=["slots", "missing-buffer", "missing-field", "field-order", "field-type", "struct"],
)
def test_a_wrong_declaration_is_caught(broken):
    defines = pass_defines("branchless", SUBGROUP_CHOICES[0])
    assert mismatches(broken, broken.compile_defines(defines))


def test_push_values_and_bindings_are_checked_by_name():
    with pytest.raises(ValueError, match="missing \\['tile_limit'\\]"):
        kernels.SETUP_SOUP.pack({"triangle_count": 1, "window": {}, "fixed_error": 0})
    window = dict(nx=8, nz=8, row_lo=0, row_hi=8, buffer_row=0)
    with pytest.raises(ValueError, match="unexpected \\['extra'\\]"):
        kernels.EMIT.pack({"triangle_count": 1, "window": window, "fixed_error": 0, "extra": 0})
    with pytest.raises(ValueError, match="struct Window"):
        kernels.EMIT.pack({"triangle_count": 1, "window": {**window, "ny": 8}, "fixed_error": 0})
    emit = {"triangle_count": 3, "window": window, "fixed_error": 5}
    assert kernels.EMIT.pack(emit) == struct.pack("<I5iI", 3, 8, 8, 0, 8, 0, 5)
    with pytest.raises(ValueError, match="bindings missing \\['pairs'\\]"):
        kernels.EMIT.check_bindings({"records": None, "offsets": None})
    with pytest.raises(ValueError, match="INDEXED=1"):
        kernels.SETUP_SOUP.compile_defines(pass_defines("indexed", SUBGROUP_CHOICES[0]))
