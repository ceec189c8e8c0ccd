"""The seven GPU passes of tile-based solid voxelization, recorded on the thin Vulkan layer.

Data flow (all device-resident; the host reads back only the pair count, then the grid):

  geometry --setup--> records + tile counts --scan--> offsets --emit--> (tile, triangle)
  pairs --sort--> sorted pairs --mark--> first-of-tile flags --scan + compact--> tiles and
  the fill's dispatch size --fill--> dense bit grid

Shader variants come from the same GLSL sources through two defines: BRANCHLESS (arithmetic
selection instead of data-dependent branches) and INDEXED (a vertex buffer plus an index
buffer instead of a triangle soup).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .errors import GridError, VariantError, VoxelizerError
from .gpu.buffers import INDIRECT, BufferPool
from .gpu.commands import Binding, Sequence, pack
from .gpu.compiler import compile_shader
from .gpu.device import Device
from .gpu.pipelines import ComputePipeline
from .grid import column_words
from .placement import FIXED_BITS

VARIANTS = {
    "naive": {"BRANCHLESS": 0, "INDEXED": 0},
    "branchless": {"BRANCHLESS": 1, "INDEXED": 0},
    "indexed": {"BRANCHLESS": 0, "INDEXED": 1},
    "combined": {"BRANCHLESS": 1, "INDEXED": 1},
}
DEFAULT_VARIANT = "branchless"
# Pass 4 groups the pairs by tile: "bitonic" is the sort of the original design, "counting"
# a histogram over the tile keys with a scatter (no sorting network, far fewer dispatches).
SORTS = ("counting", "bitonic")
DEFAULT_SORT = "counting"

WG_SIZE = 256  # threads per 1-D workgroup
TILE_SHIFT = 2  # tiles of 4 x 4 columns
SCAN_ITEMS = 16  # values per thread in the scan: fewer workgroups, fewer barriers
SCAN_BLOCK = WG_SIZE * SCAN_ITEMS  # values one scan workgroup handles
SORT_BLOCK = 2 * WG_SIZE  # values one sort workgroup holds in shared memory
RECORD_BYTES = 48  # TriangleRecord
TILE_BYTES = 16  # Tile in compact.comp / fill.comp
PAIR_BYTES = 8
FILL_PAIRS_PER_ROUND = 1 << 17  # pairs of one tile per fill dispatch (shaders/fill.comp)


def check_variant(variant: str) -> str:
    if variant not in VARIANTS:
        raise VariantError(f"unknown variant {variant!r} (choose from {', '.join(VARIANTS)})")
    return variant


def check_sort(sort: str) -> str:
    if sort not in SORTS:
        raise VariantError(f"unknown sort {sort!r} (choose from {', '.join(SORTS)})")
    return sort


def _groups(items: int, per_group: int) -> int:
    return -(-items // per_group)


class PassPipelines:
    """Every pipeline of one variant on one device, compiled once and reused for every mesh."""

    def __init__(self, device: Device, variant: str):
        self.variant = check_variant(variant)
        self.indexed = bool(VARIANTS[variant]["INDEXED"])
        base = dict(VARIANTS[variant], WG_SIZE=WG_SIZE, TILE_SHIFT=TILE_SHIFT, FIXED_BITS=FIXED_BITS,
                    SCAN_ITEMS=SCAN_ITEMS)

        def build(name: str, bindings: tuple, push_size: int, **extra: int) -> ComputePipeline:
            spirv = compile_shader(name, {**base, **extra})
            return ComputePipeline(device, spirv, bindings, push_size, f"{name}{extra or ''}")

        geometry = (0, 1) if self.indexed else (0,)
        self.setup = build("setup", geometry + (2, 3), 8)
        self.scan_blocks = build("scan", (0, 1), 4, SCAN_ADD=0)
        self.scan_add = build("scan", (0, 1), 4, SCAN_ADD=1)
        self.emit = build("emit", (0, 1, 2), 8)
        self.sort_blocks = build("sort", (0,), 8, SORT_MODE=0)
        self.sort_step = build("sort", (0,), 8, SORT_MODE=1)
        self.sort_merge = build("sort", (0,), 8, SORT_MODE=2)
        self.mark = build("mark", (0, 1), 4, FROM_HISTOGRAM=0)
        self.compact = build("compact", (0, 1, 2, 3), 8, FROM_HISTOGRAM=0)
        self.count_pairs = build("count_sort", (0, 1, 2), 4, COUNT_MODE=0)
        self.scatter_pairs = build("count_sort", (0, 1, 2), 4, COUNT_MODE=1)
        self.mark_counts = build("mark", (0, 1), 4, FROM_HISTOGRAM=1)
        self.compact_counts = build("compact", (0, 1, 2, 3, 4), 8, FROM_HISTOGRAM=1)
        self.fill_flips = build("fill", (0, 1, 2, 3, 4), 8, FILL_STAGE=0,
                                PAIRS_PER_ROUND=FILL_PAIRS_PER_ROUND)
        self.fill_parity = build("fill", (0, 1, 2, 3, 4), 8, FILL_STAGE=1,
                                 PAIRS_PER_ROUND=FILL_PAIRS_PER_ROUND)

    def all(self) -> list[ComputePipeline]:
        return [self.setup, self.scan_blocks, self.scan_add, self.emit, self.sort_blocks,
                self.sort_step, self.sort_merge, self.mark, self.compact, self.count_pairs,
                self.scatter_pairs, self.mark_counts, self.compact_counts, self.fill_flips,
                self.fill_parity]

    def destroy(self) -> None:
        for pipeline in self.all():
            pipeline.destroy()


@dataclass
class PassResult:
    words: np.ndarray | None  # the dense grid in the GPU layout (shaders/fill.comp), if downloaded
    gpu_ms: dict[str, float]
    host_ms: dict[str, float]
    counts: dict[str, int]


def run_passes(device: Device, pipelines: PassPipelines, pool: BufferPool, sequence: Sequence,
               vertices: np.ndarray, faces: np.ndarray, n: int,
               download_grid: bool = True, sort: str = DEFAULT_SORT) -> PassResult:
    """Voxelize float32 grid-space `vertices` indexed by `faces` into an n^3 bit grid.

    The grid stays in the pool's "grid" buffer (for the SVO passes); `download_grid` also
    copies it to the host."""
    host_ms: dict[str, float] = {}
    started = time.perf_counter()
    triangles = int(faces.shape[0])
    if pipelines.indexed:
        geometry = {0: np.ascontiguousarray(vertices, np.float32),
                    1: np.ascontiguousarray(faces, np.uint32)}
    else:
        geometry = {0: np.ascontiguousarray(vertices[faces], np.float32)}  # one gather
    host_ms["prepare"] = (time.perf_counter() - started) * 1e3

    grid_bytes = n * n * column_words(n) * 4
    if grid_bytes > device.max_storage_range:
        raise GridError(f"a {n}^3 grid needs {grid_bytes:,} bytes in one buffer; "
                        f"{device.name} binds at most {device.max_storage_range:,}")
    soup = None if pipelines.indexed else geometry[0].reshape(-1, 3, 3)
    if _pair_bound(vertices, faces, n, soup) >= 1 << 32:
        raise GridError(f"{triangles:,} triangles on a {n}^3 grid may make more than 2^32 "
                        "tile-triangle pairs; use a smaller grid")

    # Submission 1: upload, triangle setup, scan of the tile counts; read back the total.
    started = time.perf_counter()
    sequence.begin()
    sequence.mark("start")
    bindings = {}
    copy_started = time.perf_counter()
    for slot, array in geometry.items():
        name = ("vertices", "indices")[slot] if pipelines.indexed else "soup"
        bindings[slot] = Binding(pool.get(name, array.nbytes), array.nbytes)
        sequence.upload(bindings[slot].buffer, array)
    host_ms["upload"] = (time.perf_counter() - copy_started) * 1e3  # into staging memory
    sequence.barrier()
    sequence.mark("upload")
    records = Binding(pool.get("records", triangles * RECORD_BYTES), triangles * RECORD_BYTES)
    offsets = Binding(pool.get("tile_counts", triangles * 4), triangles * 4)
    sequence.dispatch(pipelines.setup, {**bindings, 2: records, 3: offsets},
                      pack("Ii", triangles, n), _groups(triangles, WG_SIZE))
    sequence.barrier()
    sequence.mark("setup")
    total = _record_scan(sequence, pipelines, pool, offsets.buffer, triangles, "tile_counts")
    sequence.mark("scan")
    total_staging = sequence.download(total, 4)
    gpu_ms = sequence.submit()
    pair_count = int(total_staging.read(np.uint32, 1)[0])
    host_ms["setup_submission"] = (time.perf_counter() - started) * 1e3 - host_ms["upload"]

    padded = max(SORT_BLOCK, 1 << max(pair_count - 1, 0).bit_length())
    pair_slots = padded if sort == "bitonic" else pair_count
    if pair_slots * PAIR_BYTES > device.max_storage_range:
        raise VoxelizerError(f"{pair_count:,} tile-triangle pairs exceed what {device.name} can "
                             "hold in one buffer; use a smaller grid")

    # Submission 2: emission, grouping by tile, marking, compaction, fill; download the grid.
    started = time.perf_counter()
    sequence.begin()
    sequence.mark("start")
    grid = Binding(pool.get("grid", grid_bytes), grid_bytes)
    sequence.fill(grid.buffer, 0, grid_bytes)
    fill_args = pool.get("fill_args", 16, INDIRECT)
    if pair_count:
        pairs = Binding(pool.get("pairs", pair_slots * PAIR_BYTES), pair_slots * PAIR_BYTES)
        sequence.fill(pairs.buffer, 0xFFFFFFFF, (pair_slots - pair_count) * PAIR_BYTES,
                      offset=pair_count * PAIR_BYTES)  # bitonic padding sorts last
        sequence.barrier()
        sequence.dispatch(pipelines.emit, {0: records, 1: offsets, 2: pairs},
                          pack("Ii", triangles, n), _groups(triangles, WG_SIZE))
        sequence.barrier()
        sequence.mark("emit")
        record_tiles = _record_bitonic_tiles if sort == "bitonic" else _record_counting_tiles
        grouped, tiles = record_tiles(sequence, pipelines, pool, pairs, pair_count, padded, n,
                                      fill_args, device.max_groups_x)
        fill_bindings = {0: records, 1: grouped, 2: tiles, 3: fill_args, 4: grid}
        for fill_round in range(_groups(pair_count, FILL_PAIRS_PER_ROUND)):
            sequence.dispatch_indirect(pipelines.fill_flips, fill_bindings,
                                       pack("iI", n, fill_round), fill_args)
            sequence.barrier()
        sequence.dispatch_indirect(pipelines.fill_parity, fill_bindings, pack("iI", n, 0),
                                   fill_args)
        sequence.barrier()
        sequence.mark("fill")
    staging = sequence.download(grid.buffer, grid_bytes) if download_grid else None
    tile_staging = sequence.download(fill_args, 16)
    sequence.mark("download")
    for label, ms in sequence.submit().items():
        gpu_ms[label] = gpu_ms.get(label, 0.0) + ms
    host_ms["fill_submission"] = (time.perf_counter() - started) * 1e3

    started = time.perf_counter()
    words = staging.read(np.uint32, grid_bytes // 4) if download_grid else None
    tile_count = int(tile_staging.read(np.uint32, 4)[3]) if pair_count else 0
    host_ms["download"] = (time.perf_counter() - started) * 1e3
    counts = {"triangles": triangles, "pairs": pair_count,
              "sort_size": pair_slots if pair_count else 0, "tiles": tile_count}
    return PassResult(words, gpu_ms, host_ms, counts)


def _pair_bound(vertices: np.ndarray, faces: np.ndarray, n: int,
                soup: np.ndarray | None = None) -> int:
    """An upper bound of the pair count, so the 32-bit scan of the tile counts cannot wrap.

    Every triangle covers at most all (N/4)^2 tiles; only when that bound is too large are
    the triangles' bounding boxes in tiles summed (from the soup when there is one, else one
    gather over the faces)."""
    tiles_per_side = n >> TILE_SHIFT
    if len(faces) * tiles_per_side**2 < 1 << 32:
        return len(faces) * tiles_per_side**2
    tiles = np.ones(len(faces), np.float64)
    for axis in (0, 1):
        a, b, c = ((soup[:, k, axis] if soup is not None else vertices[:, axis][faces[:, k]])
                   for k in range(3))
        extent = np.maximum(np.maximum(a, b), c) - np.minimum(np.minimum(a, b), c)
        tiles *= np.floor(extent * np.float32(1 / (1 << TILE_SHIFT))) + 2  # tiles it can touch
    return int(tiles.sum())


def _record_bitonic_tiles(sequence: Sequence, pipelines: PassPipelines, pool: BufferPool,
                          pairs: Binding, pair_count: int, padded: int, n: int, fill_args,
                          max_groups_x: int) -> tuple[Binding, Binding]:
    """Passes 4-6 as designed: bitonic sort, first-of-tile flags, compaction over the pairs."""
    _record_sort(sequence, pipelines, pairs, padded)
    sequence.mark("sort")
    flags = Binding(pool.get("flags", pair_count * 4), pair_count * 4)
    sequence.dispatch(pipelines.mark, {0: pairs, 1: flags}, pack("I", pair_count),
                      _groups(pair_count, WG_SIZE))
    sequence.barrier()
    sequence.mark("mark")
    _record_scan(sequence, pipelines, pool, flags.buffer, pair_count, "flags")
    tiles_bytes = min(pair_count, (n >> TILE_SHIFT) ** 2) * TILE_BYTES
    tiles = Binding(pool.get("tiles", tiles_bytes), tiles_bytes)
    sequence.dispatch(pipelines.compact, {0: pairs, 1: flags, 2: tiles, 3: fill_args},
                      pack("II", pair_count, max_groups_x), _groups(pair_count, WG_SIZE))
    sequence.barrier()
    sequence.mark("compact")
    return pairs, tiles


def _record_counting_tiles(sequence: Sequence, pipelines: PassPipelines, pool: BufferPool,
                           pairs: Binding, pair_count: int, padded: int, n: int, fill_args,
                           max_groups_x: int) -> tuple[Binding, Binding]:
    """Passes 4-6 by counting: a histogram of the pairs over all tile keys, its scan, a
    scatter into tile order; then flags and compaction over the tile keys, not the pairs."""
    keys = (n >> TILE_SHIFT) ** 2
    counts = Binding(pool.get("tile_pair_counts", keys * 4), keys * 4)
    starts = Binding(pool.get("tile_starts", keys * 4), keys * 4)
    cursors = Binding(pool.get("tile_cursors", keys * 4), keys * 4)
    grouped = Binding(pool.get("grouped_pairs", pair_count * PAIR_BYTES), pair_count * PAIR_BYTES)
    sequence.fill(counts.buffer, 0, keys * 4)
    sequence.barrier()
    sequence.dispatch(pipelines.count_pairs, {0: pairs, 1: counts, 2: grouped},
                      pack("I", pair_count), _groups(pair_count, WG_SIZE))
    sequence.barrier()
    sequence.copy(counts.buffer, starts.buffer, keys * 4)
    sequence.barrier()
    _record_scan(sequence, pipelines, pool, starts.buffer, keys, "tile_starts")
    sequence.copy(starts.buffer, cursors.buffer, keys * 4)
    sequence.barrier()
    sequence.dispatch(pipelines.scatter_pairs, {0: pairs, 1: cursors, 2: grouped},
                      pack("I", pair_count), _groups(pair_count, WG_SIZE))
    sequence.barrier()
    sequence.mark("sort")
    flags = Binding(pool.get("flags", keys * 4), keys * 4)
    sequence.dispatch(pipelines.mark_counts, {0: counts, 1: flags}, pack("I", keys),
                      _groups(keys, WG_SIZE))
    sequence.barrier()
    sequence.mark("mark")
    _record_scan(sequence, pipelines, pool, flags.buffer, keys, "flags")
    tiles_bytes = min(pair_count, keys) * TILE_BYTES
    tiles = Binding(pool.get("tiles", tiles_bytes), tiles_bytes)
    sequence.dispatch(pipelines.compact_counts,
                      {0: counts, 1: flags, 2: tiles, 3: fill_args, 4: starts},
                      pack("II", keys, max_groups_x), _groups(keys, WG_SIZE))
    sequence.barrier()
    sequence.mark("compact")
    return grouped, tiles


def _record_scan(sequence: Sequence, pipelines: PassPipelines, pool: BufferPool, values,
                 count: int, name: str, level: int = 0):
    """Record an exclusive scan of `count` uints in place; returns the buffer whose first
    value will be their total."""
    blocks = _groups(count, SCAN_BLOCK)
    sums = Binding(pool.get(f"{name}_sums{level}", blocks * 4), blocks * 4)
    bound = {0: Binding(values, count * 4), 1: sums}
    sequence.dispatch(pipelines.scan_blocks, bound, pack("I", count), blocks)
    sequence.barrier()
    if blocks == 1:
        return sums.buffer
    top = _record_scan(sequence, pipelines, pool, sums.buffer, blocks, name, level + 1)
    sequence.dispatch(pipelines.scan_add, bound, pack("I", count), blocks)
    sequence.barrier()
    return top


def _record_sort(sequence: Sequence, pipelines: PassPipelines, pairs: Binding, padded: int) -> None:
    """Bitonic sort of `padded` (a power of two, >= SORT_BLOCK) pairs; see shaders/sort.comp."""
    blocks = padded // SORT_BLOCK
    sequence.dispatch(pipelines.sort_blocks, {0: pairs}, pack("II", 0, 0), blocks)
    sequence.barrier()
    stage = 2 * SORT_BLOCK
    while stage <= padded:
        distance = stage // 2
        while distance >= SORT_BLOCK:
            sequence.dispatch(pipelines.sort_step, {0: pairs}, pack("II", stage, distance),
                              padded // 2 // WG_SIZE)
            sequence.barrier()
            distance //= 2
        sequence.dispatch(pipelines.sort_merge, {0: pairs}, pack("II", stage, 0), blocks)
        sequence.barrier()
        stage *= 2
