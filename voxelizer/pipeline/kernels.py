"""The kernels of the seven passes, of the surface pass and of the SVO build, declared once
(gpu/kernels.py says how; tests/test_kernels.py checks each against its GLSL).

Variants that change a kernel's buffers (INDEXED, FROM_HISTOGRAM, CLASSIFY_BRICKS,
WRITE_BRICKS, FACE_IDS) or its binning (CONSERVATIVE) are declarations of their own; the pass kernels get the variant's other
defines (BRANCHLESS) and the device's subgroup paths from passes.pass_defines, the SVO
kernels gpu.kernels.COMMON_DEFINES. The scan is gpu/scan.py's.
"""

from __future__ import annotations

from ..gpu.kernels import Kernel, Struct

FILL_PAIRS_PER_ROUND = 1 << 17  # pairs of one tile per fill dispatch (shaders/fill.comp)

# shaders/common.glsl: the rows of the grid one run of the passes covers (passes.Window).
WINDOW = Struct(
    "Window",
    (("nx", "int"), ("nz", "int"), ("row_lo", "int"), ("row_hi", "int"), ("buffer_row", "int")),
)
# shaders/svo.glsl: the slab and the forest of cubes bricks come from (svo_build.Forest).
BRICK_SOURCE = Struct(
    "BrickSource",
    (
        ("cube_levels", "uint"),
        ("cubes_per_row", "uint"),
        ("cube_y", "uint"),
        ("buffer_row", "uint"),
        ("nx", "uint"),
        ("ny", "uint"),
        ("nz", "uint"),
    ),
)

# -- pass 1, triangle setup -------------------------------------------------------------------

_SETUP_OUTPUTS = {"records": 2, "tile_counts": 3, "wrap_flag": 4}
_SETUP_PUSH = (("triangle_count", "uint"), ("window", WINDOW), ("tile_limit", "uint"))
SETUP_SOUP = Kernel("setup", {"soup": 0, **_SETUP_OUTPUTS}, _SETUP_PUSH, {"INDEXED": 0})
SETUP_INDEXED = Kernel(
    "setup", {"vertices": 0, "indices": 1, **_SETUP_OUTPUTS}, _SETUP_PUSH, {"INDEXED": 1}
)

# -- pass 3, pair emission --------------------------------------------------------------------

EMIT = Kernel(
    "emit",
    {"records": 0, "offsets": 1, "pairs": 2},
    (("triangle_count", "uint"), ("window", WINDOW)),
)

# -- pass 4, grouping by tile: the bitonic sort, or counting (histogram, then scatter) --------

_SORT_PUSH = (("k", "uint"), ("j", "uint"))
SORT_BLOCKS = Kernel("sort", {"pairs": 0}, _SORT_PUSH, {"SORT_MODE": 0})
SORT_STEP = Kernel("sort", {"pairs": 0}, _SORT_PUSH, {"SORT_MODE": 1})
SORT_MERGE = Kernel("sort", {"pairs": 0}, _SORT_PUSH, {"SORT_MODE": 2})

_COUNT_SORT_BINDINGS = {"pairs": 0, "counters": 1, "grouped": 2}
COUNT_PAIRS = Kernel(
    "count_sort", _COUNT_SORT_BINDINGS, (("pair_count", "uint"),), {"COUNT_MODE": 0}
)
SCATTER_PAIRS = Kernel(
    "count_sort", _COUNT_SORT_BINDINGS, (("pair_count", "uint"),), {"COUNT_MODE": 1}
)

# -- passes 5 and 6, unique-marking and compaction: over sorted pairs, or the histogram -------

MARK_PAIRS = Kernel("mark", {"pairs": 0, "flags": 1}, (("count", "uint"),), {"FROM_HISTOGRAM": 0})
MARK_COUNTS = Kernel("mark", {"counts": 0, "flags": 1}, (("count", "uint"),), {"FROM_HISTOGRAM": 1})

_COMPACT_OUTPUTS = {"slots": 1, "tiles": 2, "fill_dispatch": 3}
_COMPACT_PUSH = (("count", "uint"), ("max_groups_x", "uint"))
COMPACT_PAIRS = Kernel(
    "compact", {"pairs": 0, **_COMPACT_OUTPUTS}, _COMPACT_PUSH, {"FROM_HISTOGRAM": 0}
)
COMPACT_COUNTS = Kernel(
    "compact",
    {"counts": 0, **_COMPACT_OUTPUTS, "starts": 4},
    _COMPACT_PUSH,
    {"FROM_HISTOGRAM": 1},
)

# -- pass 7, the bit-flip fill: flips (with the parity when one round finishes it), parity ----

_FILL_BINDINGS = {"records": 0, "pairs": 1, "tiles": 2, "fill_dispatch": 3, "grid": 4}
_FILL_PUSH = (
    ("window", WINDOW),
    ("fill_round", "uint"),
    ("all_tiles", "uint"),
    ("finish", "uint"),
)
FILL_FLIPS = Kernel(
    "fill",
    _FILL_BINDINGS,
    _FILL_PUSH,
    {"FILL_STAGE": 0, "PAIRS_PER_ROUND": FILL_PAIRS_PER_ROUND},
)
FILL_PARITY = Kernel(
    "fill",
    _FILL_BINDINGS,
    _FILL_PUSH,
    {"FILL_STAGE": 1, "PAIRS_PER_ROUND": FILL_PAIRS_PER_ROUND},
)

# -- surface voxelization: conservative binning (passes 1 and 3), then the surface pass ---------

SETUP_SOUP_CONSERVATIVE = Kernel(
    "setup", {"soup": 0, **_SETUP_OUTPUTS}, _SETUP_PUSH, {"INDEXED": 0, "CONSERVATIVE": 1}
)
SETUP_INDEXED_CONSERVATIVE = Kernel(
    "setup",
    {"vertices": 0, "indices": 1, **_SETUP_OUTPUTS},
    _SETUP_PUSH,
    {"INDEXED": 1, "CONSERVATIVE": 1},
)
EMIT_CONSERVATIVE = Kernel("emit", EMIT.bindings, EMIT.push, {"CONSERVATIVE": 1})

SURFACE_PAIRS_PER_ROUND = FILL_PAIRS_PER_ROUND  # pairs of one tile per surface dispatch
SURFACE_CHUNK_VOXELS = 512  # voxels of a column one surface dispatch marks (shaders/surface.comp)
FACE_ID_CHUNK_VOXELS = 32  # the same with FACE_IDS 1
_SURFACE_PUSH = (
    ("window", WINDOW),
    ("ny", "int"),
    ("fill_round", "uint"),
    ("chunk", "uint"),
    ("triangle_offset", "uint"),
)


def _surface_kernel(thin: bool, face_ids: bool) -> Kernel:
    bindings = {**_FILL_BINDINGS, **({"face_ids": 5} if face_ids else {})}
    defines = {
        "THIN": int(thin),
        "FACE_IDS": int(face_ids),
        "PAIRS_PER_ROUND": SURFACE_PAIRS_PER_ROUND,
    }
    return Kernel("surface", bindings, _SURFACE_PUSH, defines)


SURFACE_CONSERVATIVE = _surface_kernel(thin=False, face_ids=False)
SURFACE_THIN = _surface_kernel(thin=True, face_ids=False)
SURFACE_CONSERVATIVE_FACES = _surface_kernel(thin=False, face_ids=True)
SURFACE_THIN_FACES = _surface_kernel(thin=True, face_ids=True)
SURFACE_KERNELS = (
    SETUP_SOUP_CONSERVATIVE,
    SETUP_INDEXED_CONSERVATIVE,
    EMIT_CONSERVATIVE,
    SURFACE_CONSERVATIVE,
    SURFACE_THIN,
    SURFACE_CONSERVATIVE_FACES,
    SURFACE_THIN_FACES,
)

PASS_KERNELS = (
    SETUP_SOUP,
    SETUP_INDEXED,
    EMIT,
    SORT_BLOCKS,
    SORT_STEP,
    SORT_MERGE,
    COUNT_PAIRS,
    SCATTER_PAIRS,
    MARK_PAIRS,
    MARK_COUNTS,
    COMPACT_PAIRS,
    COMPACT_COUNTS,
    FILL_FLIPS,
    FILL_PARITY,
    *SURFACE_KERNELS,
)

# -- the SVO build: classification bottom-up, then compaction ---------------------------------

_CLASSIFY_BINDINGS = {"grid": 0, "child_states": 1, "states": 2, "stored": 3}
_CLASSIFY_PUSH = (("source", BRICK_SOURCE), ("count", "uint"))
CLASSIFY_BRICKS = Kernel(
    "svo_classify",
    {**_CLASSIFY_BINDINGS, "run_mixed": 4},
    _CLASSIFY_PUSH,
    {"CLASSIFY_BRICKS": 1},
)
CLASSIFY_NODES = Kernel("svo_classify", _CLASSIFY_BINDINGS, _CLASSIFY_PUSH, {"CLASSIFY_BRICKS": 0})

_WRITE_BINDINGS = {
    "grid": 0,
    "states": 1,
    "positions": 2,
    "child_states": 3,
    "child_positions": 4,
    "output": 5,
}
_WRITE_PUSH = (
    ("source", BRICK_SOURCE),
    ("count", "uint"),
    ("level_start", "uint"),
    ("child_start", "uint"),
    ("is_root", "uint"),
)
WRITE_NODES = Kernel("svo_write", _WRITE_BINDINGS, _WRITE_PUSH, {"WRITE_BRICKS": 0})
WRITE_BRICKS = Kernel(
    "svo_write", {**_WRITE_BINDINGS, "run_mixed": 6}, _WRITE_PUSH, {"WRITE_BRICKS": 1}
)

SVO_KERNELS = (CLASSIFY_BRICKS, CLASSIFY_NODES, WRITE_NODES, WRITE_BRICKS)
