"""Passes 1-6, the binning of one part (a window of grid rows and a batch of triangles): the
triangles' records and their (tile, triangle) pairs, grouped by tile, with the list of tiles
that have any: what the per-tile passes (the fill, the surface pass) read.

  geometry --setup--> records + tile counts --scan--> offsets --emit--> (tile, triangle)
  pairs --sort--> sorted pairs --mark--> first-of-tile flags --scan + compact--> tiles and
  the fill's dispatch size

Recorded in two steps, as the host must know the pair count to size the pair buffers:
`record_count` (passes 1-2; the host reads the total back), then `record_grouping` (passes
3-6) for that count, or, in one submission, for a capacity chosen before the count is known
with the dispatches sized on the device (`record_pair_dispatch`, shaders/pair_dispatch.comp).
Pass 4 is the bitonic sort of the original design or, by default, a counting sort.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..gpu.buffers import INDIRECT, Binding, Buffer, BufferPool
from ..gpu.commands import Sequence, workgroups
from ..gpu.device import Device
from ..gpu.kernels import WG_SIZE
from ..gpu.pipelines import ComputePipeline
from ..gpu.scan import Scan
from .geometry import Batch, Geometry, PaddedUpload, Uploaded
from .kernels import PassPipelines
from .layout import (
    PAIR_BYTES,
    RECORD_BYTES,
    SORT_BLOCK,
    TILE_BYTES,
    Window,
    pair_bytes,
    pair_slots,
)

COUNT_RANGE = 1 << 32  # pair totals the 32-bit scan of the tile counts can hold
# Pairs the one-submission path records room for at least (Binning.capacity): 2 MiB in
# each of the two pair buffers; more where the pool's buffers have grown.
SPECULATIVE_PAIRS = 1 << 18
# A guess of a part's pairs, so that a new large mesh's first call is one submission too: a
# triangle smaller than a tile makes at most a few pairs, and a pair needs a covered column
# centre, which few surfaces cross more than twice on average over a window (a closed mesh:
# at most its depth complexity). A count above the guess only costs the general path's
# second submission.
GUESSED_PAIRS_PER_TRIANGLE = 4
GUESSED_PAIRS_PER_COLUMN = 2


@dataclass(frozen=True)
class Counted:
    """Passes 1-2 of a part as recorded: what stays on the device for the next passes (the
    batch's uploads, the triangle records, the scanned tile counts of each triangle or, for
    the conservative binning, the per-tile cursors, the pair total and the wrap flag) and
    the host milliseconds its upload took."""

    window: Window
    batch: Batch
    uploaded: Uploaded
    records: Binding
    offsets: Binding  # scanned tile counts per triangle, or per tile (conservative)
    total: Buffer
    wrap_flag: Binding
    upload_ms: float
    # The triangles the setup ran over, where the upload was padded to a capacity (its
    # padding makes no pair); 0: the batch's own.
    padded_to: int = 0

    @property
    def triangles(self) -> int:
        return self.padded_to or self.batch[1] - self.batch[0]

    def replayed(self, batch: Batch, upload_ms: float) -> Counted:
        """The same part for a replay's mesh (its batch, its upload's milliseconds): made
        directly, as dataclasses.replace looks up the fields on every call."""
        return Counted(
            window=self.window,
            batch=batch,
            uploaded=self.uploaded,
            records=self.records,
            offsets=self.offsets,
            total=self.total,
            wrap_flag=self.wrap_flag,
            upload_ms=upload_ms,
            padded_to=self.padded_to,
        )


@dataclass(frozen=True)
class Binned:
    """Passes 1-6 of a part: its pairs grouped by tile, the tiles that have any and the
    per-tile passes' dispatch arguments (compact.comp writes them), for `pair_count` pairs,
    or, `sized_on_device`, for at most that many (the GPU's count sized the dispatches)."""

    counted: Counted
    pairs: Binding
    tiles: Binding
    fill_args: Buffer
    pair_count: int
    sized_on_device: bool


class Binning:
    """Records passes 1-6 of one mesh's parts into the shared command sequence, and sizes
    them: whether a part's pairs fit (`fits`), how many the one-submission path makes room
    for (`capacity`). It owns nothing of the device: its buffers are the pool's, named per
    pass."""

    def __init__(
        self,
        device: Device,
        pipelines: PassPipelines,
        scan: Scan,
        pool: BufferPool,
        sequence: Sequence,
        geometry: Geometry,
        *,
        sort: str,
        pair_budget: int | None,
    ):
        self.device, self.pipelines, self.scan = device, pipelines, scan
        self.pool, self.sequence, self.geometry = pool, sequence, geometry
        self.sort, self.pair_budget = sort, pair_budget

    def record_count(
        self,
        window: Window,
        batch: Batch,
        setup: ComputePipeline | None = None,
        padded: PaddedUpload | None = None,
    ) -> Counted:
        """Record upload (if another batch is up), setup (the variant's kernel, or `setup`:
        the conservative binning's, which counts the pairs of each tile key instead of each
        triangle's tiles) and the scan of those counts. `padded`: the whole mesh staged at a
        capacity (Geometry.stage_padded), whose copies are recorded instead, and the passes
        run over the capacity."""
        sequence = self.sequence
        if padded is None:
            uploaded, upload_ms = self.geometry.upload(
                sequence, self.pool, batch, exact=setup is None
            )
            count = batch[1] - batch[0]
        else:
            uploaded, upload_ms, count = padded.uploaded, padded.upload_ms, padded.triangles
            for staging, target, size in padded.copies:
                sequence.copy(staging, target, size)
        sequence.barrier()
        sequence.mark("upload")
        records = self.pool.binding("records", count * RECORD_BYTES)
        wrap_flag = self.pool.binding("wrap_flag", 16)
        sequence.fill(wrap_flag.buffer, 0, size=16)
        if setup is None:
            offsets, keys, label = self.pool.binding("tile_counts", count * 4), count, "tile_counts"
            outputs = {"records": records, "wrap_flag": wrap_flag, "tile_counts": offsets}
        else:
            # Conservative emission needs only the per-key cursors, whose total is the pairs'.
            offsets, keys, label = (
                self.pool.binding("tile_pairs", window.tiles * 4),
                window.tiles,
                "tiles",
            )
            outputs = {"records": records, "wrap_flag": wrap_flag, "tile_pairs": offsets}
            sequence.fill(offsets.buffer, 0, window.tiles * 4)
        sequence.barrier()
        tile_limit = (
            (COUNT_RANGE - 1) // count if count * window.tiles >= COUNT_RANGE else 2**32 - 1
        )
        sequence.dispatch(
            setup or self.pipelines.setup,
            {**uploaded.geometry, **outputs},
            {
                "triangle_count": count,
                "window": window,
                "tile_limit": tile_limit,
                "fixed_error": self.geometry.fixed_error,
            },
            workgroups(count, WG_SIZE),
        )
        sequence.barrier()
        sequence.mark("setup")
        total = self.scan.record(sequence, self.pool, offsets.buffer, keys, label)
        sequence.mark("scan")
        return Counted(
            window=window, batch=batch, uploaded=uploaded, records=records, offsets=offsets,
            total=total, wrap_flag=wrap_flag, upload_ms=upload_ms,
            padded_to=0 if padded is None else count,
        )  # fmt: skip

    def record_pair_dispatch(self, counted: Counted, capacity: int) -> Buffer:
        """Record the dispatch sizes of passes 3-6 from the GPU's pair count, for at most
        `capacity` pairs (shaders/pair_dispatch.comp)."""
        dispatch = self.pool.get("pair_dispatch", 32, INDIRECT)
        self.sequence.dispatch(
            self.pipelines.pair_dispatch,
            {
                "pair_total": counted.total,
                "wrap_flag": counted.wrap_flag,
                "pair_dispatch": dispatch,
            },
            {
                "triangle_count": counted.triangles,
                "capacity": capacity,
                "max_groups_x": self.device.max_groups_x,
            },
            1,
        )
        self.sequence.barrier()
        return dispatch

    def record_grouping(
        self, counted: Counted, pairs: int, dispatch: Buffer | None = None
    ) -> Binned:
        """Record emission, grouping, marking and compaction of the counted part: for
        exactly `pairs` pairs, or, with `dispatch` (record_pair_dispatch's), for however
        many the GPU counted, up to `pairs`."""
        sequence, pipelines, window = self.sequence, self.pipelines, counted.window
        fill_args = self.pool.get("fill_args", 16, INDIRECT)
        slots = self.pair_slots(pairs)
        pair_buffer = self.pool.binding("pairs", slots * PAIR_BYTES)
        if self.sort == "bitonic":  # (never with `dispatch`: the network needs the count)
            sequence.fill(
                pair_buffer.buffer,
                0xFFFFFFFF,
                (slots - pairs) * PAIR_BYTES,
                offset=pairs * PAIR_BYTES,
            )  # padding sorts last
            sequence.barrier()
        emit = (
            {"records": counted.records, "offsets": counted.offsets, "pairs": pair_buffer},
            {
                "triangle_count": counted.triangles,
                "window": window,
                "fixed_error": self.geometry.fixed_error,
            },
        )
        if dispatch is None:
            sequence.dispatch(pipelines.emit, *emit, workgroups(counted.triangles, WG_SIZE))
        else:
            sequence.dispatch_indirect(pipelines.emit, *emit, dispatch, offset=0)
        sequence.barrier()
        sequence.mark("emit")
        if self.sort == "bitonic":
            grouped, tiles = self._record_bitonic_tiles(
                pair_buffer, pairs, slots, window, fill_args
            )
        else:
            grouped, tiles = self._record_counting_tiles(
                pair_buffer, pairs, counted.total, dispatch, window, fill_args
            )
        return Binned(
            counted=counted, pairs=grouped, tiles=tiles, fill_args=fill_args, pair_count=pairs,
            sized_on_device=dispatch is not None,
        )  # fmt: skip

    def pair_slots(self, pair_count: int) -> int:
        return pair_slots(pair_count, self.sort)

    def fits(self, window: Window, batch: Batch, pair_count: int, *, may_wrap: bool) -> bool:
        """Whether a counted part can go on: its 32-bit total cannot have wrapped (where the
        setup saw a triangle with many tiles, the host bounds the total itself), and its
        pairs fit one buffer and the pairs' budget."""
        if may_wrap and self.geometry.pair_bound(window, batch) >= COUNT_RANGE:
            return False
        if self.pair_slots(pair_count) * PAIR_BYTES > self.device.max_storage_range:
            return False
        budget = self.pair_budget
        return budget is None or pair_bytes(pair_count, window.tiles, self.sort) <= budget

    def capacity(self, window: Window, triangles: int) -> int:
        """Pairs the one-submission path records room for: what the pool's pair buffers hold
        already, at least SPECULATIVE_PAIRS and the guess for a part of `triangles` in the
        window, within the budget and a buffer (0: do not try)."""
        held = min(self.pool.capacity("pairs"), self.pool.capacity("grouped_pairs"))
        columns = window.nx * window.rows
        guess = min(GUESSED_PAIRS_PER_TRIANGLE * triangles, GUESSED_PAIRS_PER_COLUMN * columns)
        capacity = max(held // PAIR_BYTES, SPECULATIVE_PAIRS, guess)
        capacity = min(capacity, self.device.max_storage_range // PAIR_BYTES)
        if self.pair_budget is not None:
            room = self.pair_budget - pair_bytes(0, window.tiles, "counting")
            capacity = min(capacity, room // (2 * PAIR_BYTES))
        return max(capacity, 0)

    def _record_bitonic_tiles(
        self, pairs: Binding, pair_count: int, padded: int, window: Window, fill_args: Buffer
    ) -> tuple[Binding, Binding]:
        """Passes 4-6 as designed: bitonic sort, first-of-tile flags, compaction over the
        pairs."""
        sequence, pipelines, pool = self.sequence, self.pipelines, self.pool
        self._record_sort(pairs, padded)
        sequence.mark("sort")
        flags = pool.binding("flags", pair_count * 4)
        sequence.dispatch(
            pipelines.mark,
            {"pairs": pairs, "flags": flags},
            {"count": pair_count},
            workgroups(pair_count, WG_SIZE),
        )
        sequence.barrier()
        sequence.mark("mark")
        self.scan.record(sequence, pool, flags.buffer, pair_count, "flags")
        tiles = pool.binding("tiles", min(pair_count, window.tiles) * TILE_BYTES)
        sequence.dispatch(
            pipelines.compact,
            {"pairs": pairs, "slots": flags, "tiles": tiles, "fill_dispatch": fill_args},
            {"count": pair_count, "max_groups_x": self.device.max_groups_x},
            workgroups(pair_count, WG_SIZE),
        )
        sequence.barrier()
        sequence.mark("compact")
        return pairs, tiles

    def _record_counting_tiles(
        self,
        pairs: Binding,
        pair_count: int,
        total: Buffer,
        dispatch: Buffer | None,
        window: Window,
        fill_args: Buffer,
    ) -> tuple[Binding, Binding]:
        """Passes 4-6 by counting: a histogram of the pairs over all tile keys of the window,
        its scan, a scatter into tile order; then flags and compaction over the tile keys.
        The pair kernels read the count from `total` (the tile-count scan's); they run over
        `pair_count` pairs, or, with `dispatch`, as many as pair_dispatch.comp sized them
        for."""
        sequence, pipelines, pool, keys = self.sequence, self.pipelines, self.pool, window.tiles
        counts = pool.binding("tile_pair_counts", keys * 4)
        starts = pool.binding("tile_starts", keys * 4)
        cursors = pool.binding("tile_cursors", keys * 4)
        grouped = pool.binding("grouped_pairs", pair_count * PAIR_BYTES)

        def over_pairs(pipeline: ComputePipeline, counters: Binding) -> None:
            bindings: dict[str, Binding | Buffer] = {
                "pairs": pairs,
                "counters": counters,
                "grouped": grouped,
                "pair_total": total,
            }
            if dispatch is None:
                sequence.dispatch(pipeline, bindings, {}, workgroups(pair_count, WG_SIZE))
            else:
                sequence.dispatch_indirect(pipeline, bindings, {}, dispatch, offset=16)
            sequence.barrier()

        sequence.fill(counts.buffer, 0, keys * 4)
        sequence.barrier()
        over_pairs(pipelines.count_pairs, counts)
        sequence.copy(counts.buffer, starts.buffer, keys * 4)
        sequence.barrier()
        self.scan.record(sequence, pool, starts.buffer, keys, "tile_starts")
        sequence.copy(starts.buffer, cursors.buffer, keys * 4)
        sequence.barrier()
        over_pairs(pipelines.scatter_pairs, cursors)
        sequence.mark("sort")
        flags = pool.binding("flags", keys * 4)
        sequence.dispatch(
            pipelines.mark_counts,
            {"counts": counts, "flags": flags},
            {"count": keys},
            workgroups(keys, WG_SIZE),
        )
        sequence.barrier()
        sequence.mark("mark")
        self.scan.record(sequence, pool, flags.buffer, keys, "flags")
        tiles = pool.binding("tiles", min(pair_count, keys) * TILE_BYTES)
        sequence.dispatch(
            pipelines.compact_counts,
            {
                "counts": counts,
                "slots": flags,
                "tiles": tiles,
                "fill_dispatch": fill_args,
                "starts": starts,
            },
            {"count": keys, "max_groups_x": self.device.max_groups_x},
            workgroups(keys, WG_SIZE),
        )
        sequence.barrier()
        sequence.mark("compact")
        return grouped, tiles

    def _record_sort(self, pairs: Binding, padded: int) -> None:
        """Bitonic sort of `padded` (a power of two, >= SORT_BLOCK) pairs; see
        shaders/sort.comp."""
        sequence, pipelines = self.sequence, self.pipelines
        blocks = padded // SORT_BLOCK
        sequence.dispatch(pipelines.sort_blocks, {"pairs": pairs}, {"k": 0, "j": 0}, blocks)
        sequence.barrier()
        stage = 2 * SORT_BLOCK
        while stage <= padded:
            distance = stage // 2
            while distance >= SORT_BLOCK:
                sequence.dispatch(
                    pipelines.sort_step,
                    {"pairs": pairs},
                    {"k": stage, "j": distance},
                    padded // 2 // WG_SIZE,
                )
                sequence.barrier()
                distance //= 2
            sequence.dispatch(pipelines.sort_merge, {"pairs": pairs}, {"k": stage, "j": 0}, blocks)
            sequence.barrier()
            stage *= 2
