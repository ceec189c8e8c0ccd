"""The kernels of the seven passes, of the surface pass, of the SVO build and of the winding
fill, declared once (gpu/kernels.py says how; tests/gpu/test_kernels.py checks each against its
GLSL), and the pass kernels of one variant built (`PassPipelines`).

Variants that change a kernel's buffers (INDEXED, FROM_HISTOGRAM, CLASSIFY_STAGE,
WRITE_STAGE, FACE_IDS) or its binning (CONSERVATIVE) are declarations of their own; the
pass kernels get the variant's other defines (BRANCHLESS) and the device's subgroup paths
from `pass_defines`, the SVO kernels gpu.kernels.COMMON_DEFINES. The fill and the SVO
kernels are cpu_shaped: they also get the device's CPU_DEVICE (gpu.kernels.cpu_defines). The
scan is gpu/scan.py's.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..choices import VARIANTS, is_indexed
from ..gpu.device import Device
from ..gpu.kernels import COMMON_DEFINES, Kernel, Struct, subgroup_defines
from ..gpu.pipelines import ComputePipeline
from ..placement import FINE_LATTICE_MAX, FIXED_BITS, LARGE_LATTICE_SHIFT

# Pairs of one tile per fill dispatch (shaders/fill.comp: the pair loop and the near ties of
# a round stay under llvmpipe's 65,535-iteration guard).
FILL_PAIRS_PER_ROUND = 1 << 15

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
_SETUP_PUSH = (
    ("triangle_count", "uint"),
    ("window", WINDOW),
    ("tile_limit", "uint"),
    ("fixed_error", "uint"),
)
SETUP_SOUP = Kernel("setup", {"soup": 0, **_SETUP_OUTPUTS}, _SETUP_PUSH, {"INDEXED": 0})
SETUP_INDEXED = Kernel(
    "setup", {"vertices": 0, "indices": 1, **_SETUP_OUTPUTS}, _SETUP_PUSH, {"INDEXED": 1}
)

# -- pass 3, pair emission --------------------------------------------------------------------

EMIT = Kernel(
    "emit",
    {"records": 0, "offsets": 1, "pairs": 2},
    (("triangle_count", "uint"), ("window", WINDOW), ("fixed_error", "uint")),
)

# -- pass 4, grouping by tile: the bitonic sort, or counting (histogram, then scatter) --------

_SORT_PUSH = (("k", "uint"), ("j", "uint"))
SORT_BLOCKS = Kernel("sort", {"pairs": 0}, _SORT_PUSH, {"SORT_MODE": 0})
SORT_STEP = Kernel("sort", {"pairs": 0}, _SORT_PUSH, {"SORT_MODE": 1})
SORT_MERGE = Kernel("sort", {"pairs": 0}, _SORT_PUSH, {"SORT_MODE": 2})

_COUNT_SORT_BINDINGS = {"pairs": 0, "counters": 1, "grouped": 2, "pair_total": 3}
COUNT_PAIRS = Kernel("count_sort", _COUNT_SORT_BINDINGS, (), {"COUNT_MODE": 0})
SCATTER_PAIRS = Kernel("count_sort", _COUNT_SORT_BINDINGS, (), {"COUNT_MODE": 1})

# -- between the scan and emission, when one submission runs a part: the dispatch sizes -------

PAIR_DISPATCH = Kernel(
    "pair_dispatch",
    {"pair_total": 0, "wrap_flag": 1, "pair_dispatch": 2},
    (("triangle_count", "uint"), ("capacity", "uint"), ("max_groups_x", "uint")),
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

# -- pass 7, the bit-flip fill: flips (with the parity and the column counts when the slab has
# one part), parity and counts after several parts -------------------------------------------

_TILE_PASS_BINDINGS = {"records": 0, "pairs": 1, "tiles": 2, "fill_dispatch": 3, "grid": 4}
# The fine coordinates per vertex and the batch's vertex indices: the near ties' (fill.comp).
_FINE_BINDINGS = {"fine_vertices": 7, "indices": 8}
_FILL_BINDINGS = {**_TILE_PASS_BINDINGS, "column_counts": 5, "column_sums": 6, **_FINE_BINDINGS}
# The flips stage's dispatch arguments of the rounds after the first (fill.comp).
_ROUND_BINDINGS = {"round_dispatch": 9}
_FILL_PUSH = (
    ("window", WINDOW),
    ("fill_round", "uint"),
    ("fill_rounds", "uint"),
    ("finish", "uint"),
    ("fixed_error", "uint"),
)
_FLIPS_DEFINES = {"FILL_STAGE": 0, "PAIRS_PER_ROUND": FILL_PAIRS_PER_ROUND}
FILL_FLIPS = Kernel(
    "fill",
    {**_FILL_BINDINGS, **_ROUND_BINDINGS},
    _FILL_PUSH,
    {**_FLIPS_DEFINES, "MARK_CROSSINGS": 0},
    cpu_shaped=True,
)
# shaders/common.glsl: the voxels whose centres lie inside the surface's bounding box.
COLUMN_BOX = Struct(
    "ColumnBox",
    (
        ("i_lo", "int"),
        ("i_hi", "int"),
        ("j_lo", "int"),
        ("j_hi", "int"),
        ("k_lo", "int"),
        ("k_hi", "int"),
    ),
)
# fill_mode="winding": the flips stage with OR, marking every crossing and recording its
# sign, flagging the tiles where two crossings share a mark; then, once the columns are cut
# into segments at the marks, for the flagged tiles, adding each crossing's sign to its
# segment.
_TILE_FLAG_BINDINGS = {"tile_flags": 11}
FILL_MARKS = Kernel(
    "fill",
    {**_FILL_BINDINGS, **_ROUND_BINDINGS, "signs": 10, **_TILE_FLAG_BINDINGS},
    _FILL_PUSH,
    {**_FLIPS_DEFINES, "MARK_CROSSINGS": 1},
    cpu_shaped=True,
)
FILL_SIGNED = Kernel(
    "fill",
    {
        **_TILE_PASS_BINDINGS,
        "offsets": 5,
        "crossings": 6,
        **_FINE_BINDINGS,
        **_ROUND_BINDINGS,
        **_TILE_FLAG_BINDINGS,
    },
    (*_FILL_PUSH, ("box", COLUMN_BOX)),
    # the words of the deepest column: the signed fill's shared counts of marks (fill.comp)
    {**_FLIPS_DEFINES, "SIGNED_CROSSINGS": 1, "MAX_COLUMN_WORDS": FINE_LATTICE_MAX // 32},
    cpu_shaped=True,
)
FILL_PARITY = Kernel(
    "fill",
    _FILL_BINDINGS,
    _FILL_PUSH,
    {"FILL_STAGE": 1, "PAIRS_PER_ROUND": FILL_PAIRS_PER_ROUND},
    cpu_shaped=True,
)

# -- surface voxelization: conservative binning (passes 1 and 3), then the surface pass ---------

# Setup counts the pairs of each tile key (tile_pairs) instead of each triangle's; emission
# places each pair at its tile's cursor in that count's scan: the pairs come out grouped by
# tile, with no pass 4.
_CONSERVATIVE_SETUP_OUTPUTS = {"records": 2, "wrap_flag": 4, "tile_pairs": 5}
SETUP_SOUP_CONSERVATIVE = Kernel(
    "setup",
    {"soup": 0, **_CONSERVATIVE_SETUP_OUTPUTS},
    _SETUP_PUSH,
    {"INDEXED": 0, "CONSERVATIVE": 1},
)
SETUP_INDEXED_CONSERVATIVE = Kernel(
    "setup",
    {"vertices": 0, "indices": 1, **_CONSERVATIVE_SETUP_OUTPUTS},
    _SETUP_PUSH,
    {"INDEXED": 1, "CONSERVATIVE": 1},
)
EMIT_CONSERVATIVE = Kernel(
    "emit", {"records": 0, "tile_cursors": 3, "pairs": 2}, EMIT.push, {"CONSERVATIVE": 1}
)

# The surface pass (shaders/surface.comp): each workgroup takes SURFACE_GROUP_PAIRS pairs of
# the grouped list with SURFACE_GROUP_THREADS threads (each thread tests a pair's column per
# step: TILE_COLUMNS candidates per pair, CANDIDATES_PER_THREAD steps).
SURFACE_GROUP_PAIRS = 32
SURFACE_GROUP_THREADS = 128
_SURFACE_PUSH = (
    ("window", WINDOW),
    ("grid_nx", "int"),
    ("grid_ny", "int"),
    ("pair_count", "uint"),
    ("triangle_offset", "uint"),
)


def _surface_kernel(thin: bool, face_ids: bool) -> Kernel:
    bindings = {"records": 0, "pairs": 1, "grid": 4, **({"face_ids": 5} if face_ids else {})}
    defines = {
        "THIN": int(thin),
        "FACE_IDS": int(face_ids),
        "GROUP_PAIRS": SURFACE_GROUP_PAIRS,
        "GROUP_THREADS": SURFACE_GROUP_THREADS,
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

# -- face ids for the SVO: the voxels of a slab's face-id grid that hold one, gathered ----------

_GATHER_PUSH = (("threads", "uint"),)
GATHER_ITEMS = 16  # ids per thread: a multiple of 4 that divides every grid's size
COUNT_FACES = Kernel(
    "face_gather",
    {"face_ids": 0, "counts": 1},
    _GATHER_PUSH,
    {"GATHER_STAGE": 0, "GATHER_ITEMS": GATHER_ITEMS},
)
GATHER_FACES = Kernel(
    "face_gather",
    {"face_ids": 0, "counts": 1, "marked": 2},
    _GATHER_PUSH,
    {"GATHER_STAGE": 1, "GATHER_ITEMS": GATHER_ITEMS},
)
FACE_GATHER_KERNELS = (COUNT_FACES, GATHER_FACES)

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
    PAIR_DISPATCH,
    FILL_MARKS,
    FILL_SIGNED,
    *SURFACE_KERNELS,
)

# -- the SVO build: classification bottom-up, a scan, then compaction (svo_build.py) ---------

CLASSIFY_GRID = Kernel(
    "svo_classify",
    {"grid": 0, "masks": 1, "counts": 2},
    (
        ("source", BRICK_SOURCE),
        ("chunk_words", "uint"),
        ("blocks_across", "uint"),
        ("chunks", "uint"),
    ),
    {"CLASSIFY_STAGE": 0},
    cpu_shaped=True,
)
CLASSIFY_NODES = Kernel(
    "svo_classify",
    {"masks": 1, "counts": 2},
    (("source", BRICK_SOURCE), ("level_high", "uint"), ("level_low", "uint")),
    {"CLASSIFY_STAGE": 1},
    cpu_shaped=True,
)

_WRITE_PUSH = (
    ("source", BRICK_SOURCE),
    ("node_capacity", "uint"),
    ("brick_capacity", "uint"),
    ("max_groups_x", "uint"),
)
WRITE_NODES = Kernel(
    "svo_write",
    {
        "counts": 0,
        "masks": 1,
        "nodes": 2,
        "leaves": 3,
        "totals": 4,
        "brick_dispatch": 5,
        "download_dispatch": 6,
    },
    _WRITE_PUSH,
    {"WRITE_STAGE": 0},
    cpu_shaped=True,
)
WRITE_BRICKS = Kernel(
    "svo_write",
    {"counts": 0, "grid": 1, "nodes": 2, "leaves": 3, "bricks": 4},
    _WRITE_PUSH,
    {"WRITE_STAGE": 1},
    cpu_shaped=True,
)
DOWNLOAD_ARRAYS = Kernel(
    "svo_write",
    {"counts": 0, "nodes": 2, "bricks": 4, "host_nodes": 5, "host_bricks": 6},
    _WRITE_PUSH,
    {"WRITE_STAGE": 2},
    cpu_shaped=True,
)

SVO_KERNELS = (CLASSIFY_GRID, CLASSIFY_NODES, WRITE_NODES, WRITE_BRICKS, DOWNLOAD_ARRAYS)

# -- fill_mode="winding": segments between crossing marks, s per segment, runs decided ------

_COLUMNS_PUSH = (("window", WINDOW), ("box", COLUMN_BOX))
# the columns that s alone decides, from the boundary edges (before the segments), with
# BOUND_LANES lanes per column in workgroups of BOUND_GROUP
BOUND_LANES = 2
BOUND_GROUP = 64
WINDING_BOUND = Kernel(
    "winding_bound",
    {"edges": 0, "bounds": 1},
    (("window", WINDOW), ("box", COLUMN_BOX), ("edge_count", "uint")),
    {"BOUND_LANES": BOUND_LANES, "BOUND_GROUP": BOUND_GROUP},
)
# tiles per workgroup of winding_columns' count, emission and sum: one tile's 16 threads
# leave a GPU mostly idle
COLUMN_TILES = 4
WINDING_COUNT = Kernel(
    "winding_columns",
    {"grid": 0, "offsets": 1, "tile_flags": 5, "bounds": 6},
    _COLUMNS_PUSH,
    {"COLUMNS_STAGE": 0, "COLUMN_TILES": COLUMN_TILES},
)
WINDING_EMIT = Kernel(
    "winding_columns",
    {
        "grid": 0,
        "offsets": 1,
        "runs": 2,
        "crossings": 3,
        "signs": 4,
        "tile_flags": 5,
        "bounds": 6,
    },
    _COLUMNS_PUSH,
    {"COLUMNS_STAGE": 1, "COLUMN_TILES": COLUMN_TILES},
)
WINDING_SUM = Kernel(
    "winding_columns",
    {"grid": 0, "offsets": 1, "crossings": 2, "tile_flags": 5},
    _COLUMNS_PUSH,
    {"COLUMNS_STAGE": 2, "COLUMN_TILES": COLUMN_TILES},
)
# points per workgroup of winding_evaluate: whole warps of 32 (wider hardware waves too)
CURTAIN_GROUP = 64
WINDING_CURTAIN = Kernel(
    "winding_evaluate",
    {
        "edges": 0,
        "runs": 1,
        "curtain": 2,
        "offsets": 3,
        "columns": 4,
        "counts": 5,
        "bounds": 6,
    },
    (
        ("window", WINDOW),
        ("item_count", "uint"),
        ("edge_first", "uint"),
        ("edge_end", "uint"),
        ("stage", "uint"),
        ("column_lo", "int"),
        ("column_hi", "int"),
        ("point_spread", "uint"),
    ),
    {"CURTAIN_GROUP": CURTAIN_GROUP},
)
WINDING_DECIDE = Kernel(
    "winding_decide",
    {
        "grid": 0,
        "runs": 1,
        "curtain": 2,
        "crossings": 3,
        "next": 4,
        "next_count": 5,
        "next_curtain": 6,
    },
    (("window", WINDOW), ("run_count", "uint"), ("stage", "uint")),
)
# halves a run may leave to the next winding_bisect dispatch: its buffers hold as many per run
BISECT_LEFT = 4
# boundary edges up to which a winding_bisect lane keeps its edges' x-y parts for the whole
# run (its registers hold 4 edges)
BISECT_CACHED_EDGES = 4 * CURTAIN_GROUP
WINDING_BISECT = Kernel(
    "winding_bisect",
    {
        "edges": 0,
        "grid": 1,
        "runs": 2,
        "curtain": 3,
        "crossings": 4,
        "next": 5,
        "counts": 6,
        "next_curtain": 7,
    },
    (("window", WINDOW), ("run_count", "uint"), ("edge_count", "uint"), ("step_budget", "uint")),
    {"CURTAIN_GROUP": CURTAIN_GROUP, "STACK_LEFT": BISECT_LEFT, "CACHE_EDGES": BISECT_CACHED_EDGES},
)

WINDING_KERNELS = (
    WINDING_BOUND,
    WINDING_COUNT,
    WINDING_EMIT,
    WINDING_SUM,
    WINDING_CURTAIN,
    WINDING_DECIDE,
    WINDING_BISECT,
)


# -- the sparse grid of the large voxelizations (cubes.py, sparse_pass.py) -------------------

# shaders/sparse.glsl: one slab of the grid cut into cubes of 32^3 voxels (cubes.CubeSpace).
CUBE_SPACE = Struct(
    "CubeSpace",
    (
        ("nx", "int"),
        ("ny", "int"),
        ("nz", "int"),
        ("cube_row", "int"),
        ("cube_rows", "int"),
        ("cubes_x", "int"),
        ("cubes_z", "int"),
        ("stack_words", "int"),
        ("batch_shift", "uint"),
    ),
)
SPARSE_MARK = Kernel(
    "sparse_cubes",
    {"records": 0, "pairs": 1, "cube_bits": 2},
    (("window", WINDOW), ("space", CUBE_SPACE), ("pair_count", "uint"), ("fixed_error", "uint")),
    {"SPARSE_STAGE": 0},
)
SPARSE_WORDS = Kernel(
    "sparse_cubes",
    {"cube_bits": 2, "word_slots": 3},
    (("space", CUBE_SPACE), ("word_count", "uint")),
    {"SPARSE_STAGE": 1},
)
SPARSE_PARITY = Kernel(
    "sparse_cubes",
    {"cube_bits": 2, "word_slots": 3, "cubes": 4, "gap_counts": 5, "cube_list": 6},
    (("space", CUBE_SPACE),),
    {"SPARSE_STAGE": 2},
)
SPARSE_REPLICATE = Kernel(
    "sparse_cubes",
    {"cubes": 4, "replicas": 7, "jobs": 8},
    (("space", CUBE_SPACE), ("replica_shift", "uint"), ("job_count", "uint")),
    {"SPARSE_STAGE": 3},
)
# Built in its CPU shape on every device (CPU_DEVICE 1: pairs two at a time, the flips a
# plain XOR, right on a GPU too as a thread owns its column's words): one module per lattice
# and variant, for the shipped SPIR-V's size (tests/gpu/test_spirv.py).
SPARSE_FILL = Kernel(
    "sparse_fill",
    {
        "records": 0,
        "pairs": 1,
        "tiles": 2,
        "fill_dispatch": 3,
        "cubes": 4,
        "cube_bits": 5,
        "word_slots": 6,
        **_FINE_BINDINGS,
        "fill_state": 9,
    },
    (("window", WINDOW), ("space", CUBE_SPACE), ("fill_round", "uint"), ("fixed_error", "uint")),
    {"PAIRS_PER_ROUND": FILL_PAIRS_PER_ROUND, "CPU_DEVICE": 1},
)
SPARSE_KERNELS = (SPARSE_MARK, SPARSE_WORDS, SPARSE_PARITY, SPARSE_REPLICATE, SPARSE_FILL)
# The pass kernels that read FIXED_BITS: PassPipelines builds them on the grid's lattice, the
# others as on the finer one (the same modules). The sparse path bins with the first three on
# the coarser lattice of the grids it takes.
SPARSE_BINNING_KERNELS = (SETUP_SOUP, SETUP_INDEXED, EMIT)
LATTICE_KERNELS = (*SPARSE_BINNING_KERNELS, FILL_FLIPS, FILL_PARITY, FILL_MARKS, FILL_SIGNED)
LATTICE_SHIFTS = (LARGE_LATTICE_SHIFT,)
# The sparse path's kernels are built for one variant (the shipped SPIR-V stays within its
# size: tests/gpu/test_spirv.py); a job of any variant runs as it, with the same voxels.
SPARSE_VARIANTS = ("branchless",)


# -- the pass kernels of one variant, built -----------------------------------------------------


def pass_defines(variant: str, subgroups: Mapping[str, int], shift: int = 0) -> dict[str, int]:
    """What every pass kernel of `variant` is compiled with besides its own defines, given
    the device's subgroup paths (gpu.kernels.subgroup_defines), on the lattice of a grid of
    placement.lattice_shift `shift` (its FIXED_BITS)."""
    return {**VARIANTS[variant], **COMMON_DEFINES, "FIXED_BITS": FIXED_BITS - shift, **subgroups}


class PassPipelines:
    """The pass kernels of one variant on one device, compiled once and reused for every mesh
    (the scan they share with the SVO build is gpu.scan.Scan; the surface pass's are
    surface_pass.SurfacePipelines)."""

    def __init__(self, device: Device, variant: str, shift: int = 0):
        self.variant = variant  # one of VARIANTS (checked by the caller's Options)
        self.indexed = is_indexed(variant)
        self.shift = shift  # placement.lattice_shift of the grids it takes
        subgroups = subgroup_defines(device)
        defines = pass_defines(variant, subgroups, shift)
        # (the kernels that do not read FIXED_BITS are the same modules on every lattice)
        plain = pass_defines(variant, subgroups)

        def build(kernel: Kernel) -> ComputePipeline:
            return ComputePipeline(device, kernel, defines if kernel in LATTICE_KERNELS else plain)

        self.setup = build(SETUP_INDEXED if self.indexed else SETUP_SOUP)
        self.emit = build(EMIT)
        self.sort_blocks = build(SORT_BLOCKS)
        self.sort_step = build(SORT_STEP)
        self.sort_merge = build(SORT_MERGE)
        self.mark = build(MARK_PAIRS)
        self.compact = build(COMPACT_PAIRS)
        self.count_pairs = build(COUNT_PAIRS)
        self.scatter_pairs = build(SCATTER_PAIRS)
        self.mark_counts = build(MARK_COUNTS)
        self.compact_counts = build(COMPACT_COUNTS)
        self.fill_flips = build(FILL_FLIPS)
        self.fill_parity = build(FILL_PARITY)
        self.pair_dispatch = build(PAIR_DISPATCH)
        self.fill_marks = build(FILL_MARKS)  # fill_mode="winding"
        self.fill_signed = build(FILL_SIGNED)

    def all(self) -> list[ComputePipeline]:
        return [
            self.setup,
            self.emit,
            self.sort_blocks,
            self.sort_step,
            self.sort_merge,
            self.mark,
            self.compact,
            self.count_pairs,
            self.scatter_pairs,
            self.mark_counts,
            self.compact_counts,
            self.fill_flips,
            self.fill_parity,
            self.pair_dispatch,
            self.fill_marks,
            self.fill_signed,
        ]

    def destroy(self) -> None:
        for pipeline in self.all():
            pipeline.destroy()
