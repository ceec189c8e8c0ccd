"""The seven GPU passes of tile-based solid voxelization, recorded on the thin Vulkan layer.

Data flow (all device-resident; the host reads back only the pair count):

  geometry --setup--> records + tile counts --scan--> offsets --emit--> (tile, triangle)
  pairs --sort--> sorted pairs --mark--> first-of-tile flags --scan + compact--> tiles and
  the fill's dispatch size --fill--> dense bit grid

Shader variants come from the same GLSL sources through two defines: BRANCHLESS (arithmetic
selection instead of data-dependent branches) and INDEXED (a vertex buffer plus an index
buffer instead of a triangle soup).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import vulkan as vk

from ..errors import VariantError, VoxelizerError
from ..gpu.buffers import INDIRECT, BufferPool
from ..gpu.commands import Binding, Sequence, pack
from ..gpu.compiler import compile_shader
from ..gpu.device import Device
from ..gpu.pipelines import ComputePipeline
from ..grid import column_words
from ..parallel import for_row_chunks
from ..placement import FIXED_BITS

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
TILE_SIDE = 1 << TILE_SHIFT
SCAN_ITEMS = 16  # values per thread in the scan (a multiple of 4): fewer workgroups
SCAN_BLOCK = WG_SIZE * SCAN_ITEMS  # values one scan workgroup handles
SORT_BLOCK = 2 * WG_SIZE  # values one sort workgroup holds in shared memory
RECORD_BYTES = 48  # TriangleRecord
TILE_BYTES = 16  # Tile in compact.comp / fill.comp
PAIR_BYTES = 8
FILL_PAIRS_PER_ROUND = 1 << 17  # pairs of one tile per fill dispatch (shaders/fill.comp)
COUNT_RANGE = 1 << 32  # pair totals the 32-bit scan of the tile counts can hold


def check_variant(variant: str) -> str:
    if variant not in VARIANTS:
        raise VariantError(f"unknown variant {variant!r} (choose from {', '.join(VARIANTS)})")
    return variant


def check_sort(sort: str) -> str:
    if sort not in SORTS:
        raise VariantError(f"unknown sort {sort!r} (choose from {', '.join(SORTS)})")
    return sort


def subgroup_defines(device: Device) -> dict[str, int]:
    """The subgroup paths a device can take (shaders/scan.comp, shaders/fill.comp)."""
    return {
        "SUBGROUP_SCAN": int(device.has_subgroup(vk.VK_SUBGROUP_FEATURE_ARITHMETIC_BIT)),
        "SHARED_RECORDS": int(
            device.has_subgroup(vk.VK_SUBGROUP_FEATURE_BALLOT_BIT) and device.subgroup_size >= 8
        ),
    }


def _groups(items: int, per_group: int) -> int:
    return -(-items // per_group)


class PassPipelines:
    """Every pipeline of one variant on one device, compiled once and reused for every mesh."""

    def __init__(self, device: Device, variant: str):
        self.variant = check_variant(variant)
        self.indexed = bool(VARIANTS[variant]["INDEXED"])
        base = dict(
            VARIANTS[variant],
            WG_SIZE=WG_SIZE,
            TILE_SHIFT=TILE_SHIFT,
            FIXED_BITS=FIXED_BITS,
            SCAN_ITEMS=SCAN_ITEMS,
            **subgroup_defines(device),
        )

        def build(name: str, bindings: tuple, push_size: int, **extra: int) -> ComputePipeline:
            spirv = compile_shader(name, {**base, **extra})
            return ComputePipeline(device, spirv, bindings, push_size, f"{name}{extra or ''}")

        geometry = (0, 1) if self.indexed else (0,)
        self.setup = build("setup", geometry + (2, 3, 4), 28)
        self.scan_blocks = build("scan", (0, 1), 4, SCAN_ADD=0)
        self.scan_add = build("scan", (0, 1), 4, SCAN_ADD=1)
        self.emit = build("emit", (0, 1, 2), 24)
        self.sort_blocks = build("sort", (0,), 8, SORT_MODE=0)
        self.sort_step = build("sort", (0,), 8, SORT_MODE=1)
        self.sort_merge = build("sort", (0,), 8, SORT_MODE=2)
        self.mark = build("mark", (0, 1), 4, FROM_HISTOGRAM=0)
        self.compact = build("compact", (0, 1, 2, 3), 8, FROM_HISTOGRAM=0)
        self.count_pairs = build("count_sort", (0, 1, 2), 4, COUNT_MODE=0)
        self.scatter_pairs = build("count_sort", (0, 1, 2), 4, COUNT_MODE=1)
        self.mark_counts = build("mark", (0, 1), 4, FROM_HISTOGRAM=1)
        self.compact_counts = build("compact", (0, 1, 2, 3, 4), 8, FROM_HISTOGRAM=1)
        self.fill_flips = build(
            "fill", (0, 1, 2, 3, 4), 32, FILL_STAGE=0, PAIRS_PER_ROUND=FILL_PAIRS_PER_ROUND
        )
        self.fill_parity = build(
            "fill", (0, 1, 2, 3, 4), 32, FILL_STAGE=1, PAIRS_PER_ROUND=FILL_PAIRS_PER_ROUND
        )

    def all(self) -> list[ComputePipeline]:
        return [
            self.setup,
            self.scan_blocks,
            self.scan_add,
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
        ]

    def destroy(self) -> None:
        for pipeline in self.all():
            pipeline.destroy()


@dataclass(frozen=True)
class Window:
    """Column rows [row_lo, row_hi) of an (nx, ny, nz) grid, whole tile rows, written into a
    grid buffer that starts at row buffer_row (shaders/common.glsl, Window)."""

    nx: int
    nz: int
    row_lo: int
    row_hi: int
    buffer_row: int

    @property
    def tiles(self) -> int:
        return (self.nx >> TILE_SHIFT) * ((self.row_hi - self.row_lo) >> TILE_SHIFT)

    @property
    def grid_bytes(self) -> int:
        return self.nx * (self.row_hi - self.row_lo) * column_words(self.nz) * 4

    def push(self) -> bytes:
        return pack("5i", self.nx, self.nz, self.row_lo, self.row_hi, self.buffer_row)

    def halves(self) -> tuple[Window, Window]:
        tile_rows = (self.row_hi - self.row_lo) >> TILE_SHIFT
        middle = self.row_lo + (tile_rows // 2 << TILE_SHIFT)
        return (
            Window(self.nx, self.nz, self.row_lo, middle, self.buffer_row),
            Window(self.nx, self.nz, middle, self.row_hi, self.buffer_row),
        )


@dataclass
class PassStats:
    """Times and counts summed over every window and batch of one voxelization."""

    gpu_ms: dict[str, float] = field(default_factory=dict)
    host_ms: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def add_times(self, gpu_ms: dict[str, float] | None = None, **host_ms: float) -> None:
        for total, times in ((self.gpu_ms, gpu_ms or {}), (self.host_ms, host_ms)):
            for label, ms in times.items():
                total[label] = total.get(label, 0.0) + ms

    def count(self, **counts: int) -> None:
        for label, value in counts.items():
            self.counts[label] = self.counts.get(label, 0) + value


class PassRunner:
    """Runs the passes over one window of rows at a time, for one mesh in grid space.

    Triangles go up in batches of at most `batch_triangles` (each batch's records must fit a
    buffer and the budget); a window whose pairs would not fit `pair_budget` bytes is split
    into halves of tile rows, and a single tile row into halves of its batch. Every part
    XORs its crossings into the same grid, so the result does not depend on the split.
    """

    def __init__(
        self,
        device: Device,
        pipelines: PassPipelines,
        pool: BufferPool,
        sequence: Sequence,
        vertices: np.ndarray,
        faces: np.ndarray,
        sort: str = DEFAULT_SORT,
        batch_triangles: int | None = None,
        pair_budget: int | None = None,
    ):
        self.device, self.pipelines, self.pool, self.sequence = device, pipelines, pool, sequence
        self.vertices = np.ascontiguousarray(vertices, np.float32)
        self.faces = np.ascontiguousarray(faces, np.uint32)
        self.sort = check_sort(sort)
        self.triangles = len(self.faces)
        self.batch_triangles = max(1, min(batch_triangles or self.triangles, self.triangles))
        self.pair_budget = pair_budget
        self.stats = PassStats()
        self._uploaded: tuple[int, int] | None = None
        self._bindings: dict[int, Binding] = {}
        self._tile_boxes: np.ndarray | None = None
        started = time.perf_counter()
        # Soup variants gather once for a single batch, per batch otherwise; the indexed ones
        # upload the vertices once and the indices batch by batch.
        one_gather = not pipelines.indexed and self.batch_triangles == self.triangles
        self._soup = self._gather(0, self.triangles) if one_gather else None
        self.stats.add_times(prepare=(time.perf_counter() - started) * 1e3)
        self.stats.count(triangles=self.triangles)

    def voxelize(self, slab: Window, grid: Binding) -> None:
        """Leave the solid bits of the slab's rows in `grid` (cleared first)."""
        batches = [
            (first, min(first + self.batch_triangles, self.triangles))
            for first in range(0, self.triangles, self.batch_triangles)
        ]
        work = [(slab, batch) for batch in batches]
        fills, clear = 0, True
        while work:
            window, batch = work.pop(0)
            pair_count, may_wrap = self._count_pairs(window, batch, grid if clear else None)
            clear = False
            if may_wrap and self._pair_bound(window, batch) >= COUNT_RANGE:
                work[:0] = self._split(window, batch)  # the 32-bit total may have wrapped
                continue
            if not self._pairs_fit(window, pair_count):
                work[:0] = self._split(window, batch)
                continue
            alone = fills == 0 and not work  # no other part flips bits in this slab
            self._fill(window, pair_count, grid, parity=alone)
            fills += 1
        if fills != 1:  # several parts (or none: the grid is still cleared below)
            self._parity_all(slab, grid, clear)
        self.stats.count(slabs=1, parts=fills)

    # -- one part: count, then emit, group, compact and fill ---------------------------------

    def _count_pairs(
        self, window: Window, batch: tuple[int, int], clear_grid: Binding | None
    ) -> tuple[int, bool]:
        """Submission 1: upload (if another batch is up), setup, scan; read back the total,
        and whether some triangle touches so many tiles that the 32-bit total may have wrapped
        (more than 2^32 / triangles each; the host then bounds the total itself)."""
        started = time.perf_counter()
        sequence = self.sequence
        sequence.begin()
        sequence.mark("start")
        if clear_grid is not None:
            sequence.fill(clear_grid.buffer, 0, clear_grid.size)
        upload_ms = self._upload(batch)
        sequence.barrier()
        sequence.mark("upload")
        count = batch[1] - batch[0]
        records = Binding(self.pool.get("records", count * RECORD_BYTES), count * RECORD_BYTES)
        offsets = Binding(self.pool.get("tile_counts", count * 4), count * 4)
        wrap_flag = Binding(self.pool.get("wrap_flag", 16), 16)
        sequence.fill(wrap_flag.buffer, 0, 16)
        sequence.barrier()
        tile_limit = (
            (COUNT_RANGE - 1) // count if count * window.tiles >= COUNT_RANGE else 2**32 - 1
        )
        sequence.dispatch(
            self.pipelines.setup,
            {**self._bindings, 2: records, 3: offsets, 4: wrap_flag},
            pack("I", count) + window.push() + pack("I", tile_limit),
            _groups(count, WG_SIZE),
        )
        sequence.barrier()
        sequence.mark("setup")
        total = _record_scan(
            sequence, self.pipelines, self.pool, offsets.buffer, count, "tile_counts"
        )
        sequence.mark("scan")
        total_staging = sequence.download(total, 4)
        wrap_staging = sequence.download(wrap_flag.buffer, 4)
        self.stats.add_times(sequence.submit())
        pair_count = int(total_staging.read(np.uint32, 1)[0])
        may_wrap = bool(wrap_staging.read(np.uint32, 1)[0])
        self._records, self._offsets, self._count = records, offsets, count
        self.stats.add_times(
            upload=upload_ms, setup_submission=(time.perf_counter() - started) * 1e3 - upload_ms
        )
        return pair_count, may_wrap

    def _upload(self, batch: tuple[int, int]) -> float:
        if self._uploaded == batch:
            return 0.0
        started = time.perf_counter()
        first, end = batch
        if self.pipelines.indexed:
            arrays = {1: self.faces[first:end]}
            if self._uploaded is None:
                arrays[0] = self.vertices
        else:
            soup = self._soup[first:end] if self._soup is not None else self._gather(first, end)
            arrays = {0: soup}
        for slot, array in arrays.items():
            name = ("vertices", "indices")[slot] if self.pipelines.indexed else "soup"
            self._bindings[slot] = Binding(self.pool.get(name, array.nbytes), array.nbytes)
            self.sequence.upload(self._bindings[slot].buffer, array)
        self._uploaded = batch
        return (time.perf_counter() - started) * 1e3  # into staging memory

    def _gather(self, first: int, end: int) -> np.ndarray:
        """The triangle soup of faces [first, end): (count, 3, 3) float32."""
        soup = np.empty((end - first, 3, 3), np.float32)

        def gather(start: int, stop: int) -> None:  # np.take: about twice faster than []
            np.take(
                self.vertices,
                self.faces[first + start : first + stop],
                axis=0,
                out=soup[start:stop],
            )

        for_row_chunks(end - first, gather)
        return soup

    def _pair_slots(self, pair_count: int) -> int:
        if self.sort == "bitonic":
            return max(SORT_BLOCK, 1 << max(pair_count - 1, 0).bit_length())
        return pair_count

    def _pairs_fit(self, window: Window, pair_count: int) -> bool:
        slots = self._pair_slots(pair_count)
        if slots * PAIR_BYTES > self.device.max_storage_range:
            return False
        return (
            self.pair_budget is None
            or pair_bytes(pair_count, window.tiles, self.sort) <= self.pair_budget
        )

    def _split(self, window: Window, batch: tuple[int, int]) -> list:
        if window.row_hi - window.row_lo > TILE_SIDE:
            return [(half, batch) for half in window.halves()]
        first, end = batch
        if end - first > 1:
            middle = (first + end) // 2
            return [(window, (first, middle)), (window, (middle, end))]
        raise VoxelizerError(
            "one triangle makes more tile-triangle pairs than the memory "
            "budget holds; raise max_memory"
        )

    def _fill(self, window: Window, pair_count: int, grid: Binding, parity: bool) -> None:
        """Submission 2: emission, grouping by tile, marking, compaction, fill."""
        started = time.perf_counter()
        sequence, pipelines = self.sequence, self.pipelines
        sequence.begin()
        sequence.mark("start")
        fill_args = self.pool.get("fill_args", 16, INDIRECT)
        slots = self._pair_slots(pair_count)
        tiles = 0
        if pair_count:
            pairs = Binding(self.pool.get("pairs", slots * PAIR_BYTES), slots * PAIR_BYTES)
            sequence.fill(
                pairs.buffer,
                0xFFFFFFFF,
                (slots - pair_count) * PAIR_BYTES,
                offset=pair_count * PAIR_BYTES,
            )  # bitonic padding sorts last
            sequence.barrier()
            sequence.dispatch(
                pipelines.emit,
                {0: self._records, 1: self._offsets, 2: pairs},
                pack("I", self._count) + window.push(),
                _groups(self._count, WG_SIZE),
            )
            sequence.barrier()
            sequence.mark("emit")
            record_tiles = (
                _record_bitonic_tiles if self.sort == "bitonic" else _record_counting_tiles
            )
            grouped, tile_list = record_tiles(
                sequence,
                pipelines,
                self.pool,
                pairs,
                pair_count,
                slots,
                window.tiles,
                fill_args,
                self.device.max_groups_x,
            )
            fill_bindings = {0: self._records, 1: grouped, 2: tile_list, 3: fill_args, 4: grid}
            rounds = _groups(pair_count, FILL_PAIRS_PER_ROUND)
            finish = parity and rounds == 1  # the flips stage computes the parity itself
            for fill_round in range(rounds):
                sequence.dispatch_indirect(
                    pipelines.fill_flips,
                    fill_bindings,
                    window.push() + pack("III", fill_round, 0, finish),
                    fill_args,
                )
                sequence.barrier()
            if parity and not finish:
                sequence.dispatch_indirect(
                    pipelines.fill_parity,
                    fill_bindings,
                    window.push() + pack("III", 0, 0, 0),
                    fill_args,
                )
                sequence.barrier()
            sequence.mark("fill")
            tile_staging = sequence.download(fill_args, 16)
        self.stats.add_times(
            sequence.submit(), fill_submission=(time.perf_counter() - started) * 1e3
        )
        if pair_count:
            tiles = int(tile_staging.read(np.uint32, 4)[3])
        self.stats.count(pairs=pair_count, tiles=tiles)
        self.stats.counts["sort_size"] = max(
            self.stats.counts.get("sort_size", 0), slots if pair_count else 0
        )

    def _parity_all(self, slab: Window, grid: Binding, clear: bool) -> None:
        """Parity over every tile of the slab, after several parts flipped bits."""
        sequence = self.sequence
        sequence.begin()
        sequence.mark("start")
        if clear:
            sequence.fill(grid.buffer, 0, grid.size)
            sequence.barrier()
        unused = Binding(self.pool.get("unused", 16), 16)
        fill_args = self.pool.get("fill_args", 16, INDIRECT)
        sequence.dispatch(
            self.pipelines.fill_parity,
            {0: unused, 1: unused, 2: unused, 3: fill_args, 4: grid},
            slab.push() + pack("III", 0, 1, 0),
            slab.tiles,
        )
        sequence.barrier()
        sequence.mark("fill")
        self.stats.add_times(sequence.submit())

    def _pair_bound(self, window: Window, batch: tuple[int, int]) -> int:
        """An upper bound of the part's pair count, from the tiles of the triangles' bounding
        boxes inside the window: asked only when the setup pass saw a triangle with many tiles."""
        first, end = batch
        if self._tile_boxes is None:
            self._tile_boxes = _tile_boxes(self.vertices, self.faces)
        x_tiles, ty_lo, ty_hi = self._tile_boxes[:, first:end]
        rows = (
            np.minimum(ty_hi, (window.row_hi >> TILE_SHIFT) - 1)
            - np.maximum(ty_lo, window.row_lo >> TILE_SHIFT)
            + 1
        )
        return int((x_tiles * np.maximum(rows, 0)).sum())


def pair_bytes(pair_count: int, window_tiles: int, sort: str) -> int:
    """Device bytes the grouping and fill of one part need beyond the triangle records."""
    if sort == "bitonic":
        slots = max(SORT_BLOCK, 1 << max(pair_count - 1, 0).bit_length())
        return slots * PAIR_BYTES + pair_count * 4 + min(pair_count, window_tiles) * TILE_BYTES
    return 2 * pair_count * PAIR_BYTES + window_tiles * (4 * 4 + TILE_BYTES)


def _tile_boxes(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """(3, T) int64: per triangle, the tiles its bounding box can touch along x, and its
    first and last tile row (one tile of margin each way: float only widens the bound)."""
    boxes = []
    for axis in (0, 1):
        a, b, c = (vertices[:, axis][faces[:, k]] for k in range(3))
        low = np.minimum(np.minimum(a, b), c)
        high = np.maximum(np.maximum(a, b), c)
        boxes.append(
            (
                np.floor(low / TILE_SIDE).astype(np.int64) - 1,
                np.floor(high / TILE_SIDE).astype(np.int64) + 1,
            )
        )
    (x_lo, x_hi), (y_lo, y_hi) = boxes
    return np.stack([x_hi - x_lo + 1, y_lo, y_hi])


def _record_bitonic_tiles(
    sequence: Sequence,
    pipelines: PassPipelines,
    pool: BufferPool,
    pairs: Binding,
    pair_count: int,
    padded: int,
    keys: int,
    fill_args,
    max_groups_x: int,
) -> tuple[Binding, Binding]:
    """Passes 4-6 as designed: bitonic sort, first-of-tile flags, compaction over the pairs."""
    _record_sort(sequence, pipelines, pairs, padded)
    sequence.mark("sort")
    flags = Binding(pool.get("flags", pair_count * 4), pair_count * 4)
    sequence.dispatch(
        pipelines.mark, {0: pairs, 1: flags}, pack("I", pair_count), _groups(pair_count, WG_SIZE)
    )
    sequence.barrier()
    sequence.mark("mark")
    _record_scan(sequence, pipelines, pool, flags.buffer, pair_count, "flags")
    tiles_bytes = min(pair_count, keys) * TILE_BYTES
    tiles = Binding(pool.get("tiles", tiles_bytes), tiles_bytes)
    sequence.dispatch(
        pipelines.compact,
        {0: pairs, 1: flags, 2: tiles, 3: fill_args},
        pack("II", pair_count, max_groups_x),
        _groups(pair_count, WG_SIZE),
    )
    sequence.barrier()
    sequence.mark("compact")
    return pairs, tiles


def _record_counting_tiles(
    sequence: Sequence,
    pipelines: PassPipelines,
    pool: BufferPool,
    pairs: Binding,
    pair_count: int,
    padded: int,
    keys: int,
    fill_args,
    max_groups_x: int,
) -> tuple[Binding, Binding]:
    """Passes 4-6 by counting: a histogram of the pairs over all tile keys of the window,
    its scan, a scatter into tile order; then flags and compaction over the tile keys."""
    counts = Binding(pool.get("tile_pair_counts", keys * 4), keys * 4)
    starts = Binding(pool.get("tile_starts", keys * 4), keys * 4)
    cursors = Binding(pool.get("tile_cursors", keys * 4), keys * 4)
    grouped = Binding(pool.get("grouped_pairs", pair_count * PAIR_BYTES), pair_count * PAIR_BYTES)
    sequence.fill(counts.buffer, 0, keys * 4)
    sequence.barrier()
    sequence.dispatch(
        pipelines.count_pairs,
        {0: pairs, 1: counts, 2: grouped},
        pack("I", pair_count),
        _groups(pair_count, WG_SIZE),
    )
    sequence.barrier()
    sequence.copy(counts.buffer, starts.buffer, keys * 4)
    sequence.barrier()
    _record_scan(sequence, pipelines, pool, starts.buffer, keys, "tile_starts")
    sequence.copy(starts.buffer, cursors.buffer, keys * 4)
    sequence.barrier()
    sequence.dispatch(
        pipelines.scatter_pairs,
        {0: pairs, 1: cursors, 2: grouped},
        pack("I", pair_count),
        _groups(pair_count, WG_SIZE),
    )
    sequence.barrier()
    sequence.mark("sort")
    flags = Binding(pool.get("flags", keys * 4), keys * 4)
    sequence.dispatch(
        pipelines.mark_counts, {0: counts, 1: flags}, pack("I", keys), _groups(keys, WG_SIZE)
    )
    sequence.barrier()
    sequence.mark("mark")
    _record_scan(sequence, pipelines, pool, flags.buffer, keys, "flags")
    tiles_bytes = min(pair_count, keys) * TILE_BYTES
    tiles = Binding(pool.get("tiles", tiles_bytes), tiles_bytes)
    sequence.dispatch(
        pipelines.compact_counts,
        {0: counts, 1: flags, 2: tiles, 3: fill_args, 4: starts},
        pack("II", keys, max_groups_x),
        _groups(keys, WG_SIZE),
    )
    sequence.barrier()
    sequence.mark("compact")
    return grouped, tiles


def _record_scan(
    sequence: Sequence,
    pipelines: PassPipelines,
    pool: BufferPool,
    values,
    count: int,
    name: str,
    level: int = 0,
):
    """Record an exclusive scan of `count` uints in place; returns the buffer whose first
    value will be their total."""
    blocks = _groups(count, SCAN_BLOCK)
    sums = Binding(pool.get(f"{name}_sums{level}", blocks * 4), blocks * 4)
    bound = {0: Binding(values, _groups(count, 4) * 16), 1: sums}  # whole quads (BufferPool)
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
            sequence.dispatch(
                pipelines.sort_step, {0: pairs}, pack("II", stage, distance), padded // 2 // WG_SIZE
            )
            sequence.barrier()
            distance //= 2
        sequence.dispatch(pipelines.sort_merge, {0: pairs}, pack("II", stage, 0), blocks)
        sequence.barrier()
        stage *= 2
