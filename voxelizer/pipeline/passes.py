"""The part loop: the passes over one slab of the grid, part by part, as submissions.

A part is a window of the slab's rows and a batch of the mesh's triangles. Each is binned
(binning.py, passes 1-6) and filled (fill_pass.py, pass 7), or binned conservatively and run
through the surface pass (surface_pass.py); those modules record, this one submits and reads
back what the host needs between submissions (the pair count, the column counts, the grid).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import VoxelizerError
from ..gpu.buffers import Binding, Buffer, BufferPool
from ..gpu.commands import Sequence
from ..gpu.device import Device
from ..gpu.pipelines import ComputePipeline
from ..gpu.scan import Scan
from ..stats import Stats
from .binning import Binning, Counted
from .fill_pass import FillPass, RecordedFill, SlabGrid
from .geometry import Batch, Geometry, PaddedUpload
from .kernels import PassPipelines
from .layout import (
    FINE_VERTEX_BYTES,
    RECORD_BYTES,
    TILE_SIDE,
    CrossingMarks,
    SignedCrossings,
    Window,
    geometry_bytes,
    pair_bytes,
    triangle_bytes,
    vertex_bytes,
)
from .replay import PartReads, PartRecording, PartReplays
from .slabs import FilledSlab
from .surface_pass import SurfacePass, SurfacePipelines
from .svo_build import RecordedSVO

Part = tuple[Window, Batch]


@dataclass(frozen=True)
class PartCount:
    """A part after its first submission: what its passes 1-2 left on the device, its pair
    count as read back, and whether some triangle touches so many tiles that the 32-bit
    total may have wrapped (more than 2^32 / triangles each; the host then bounds the total
    itself)."""

    counted: Counted
    pairs: int
    may_wrap: bool


@dataclass(frozen=True)
class OneSubmission:
    """What the one-submission path made of a part: its count, and the slab's result where
    the part was done (None: it runs as the general path does, its records kept)."""

    count: PartCount
    filled: FilledSlab | None = None


class PassRunner:
    """Runs the passes over one window of rows at a time, for one mesh in grid space.

    Triangles go up in batches of at most `batch_triangles` (each batch's records must fit a
    buffer and the budget); a window whose pairs would not fit `pair_budget` bytes is split
    into halves of tile rows, and a single tile row into halves of its batch. Every part
    XORs its crossings into the same grid, so the result does not depend on the split.

    A slab that is one part (the usual case) goes to the GPU in one submission with the
    counting sort: the pair buffers are recorded at a capacity chosen before the pair count
    is known (Binning.capacity), the GPU sizes the dispatches from the count
    (shaders/pair_dispatch.comp), and only a part whose pairs do not fit (or whose tiles need
    more fill rounds) is run again, as the general path does it: a submission that counts,
    then one that groups and fills with exact sizes. The fill's column counts
    (shaders/fill.comp) come back with the last submission of each slab and are added to the
    stats (`open_columns`, `overlap_columns`).

    It owns its stages (the binning, the fill, the surface pass) and, between the marking
    and the signed fill of fill_mode="winding", the marking fill it kept; the buffers are
    the pool's, the submissions the shared sequence's.
    """

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
        batch_triangles: int | None,
        pair_budget: int | None,
        stats: Stats,
        surface: SurfacePipelines | None = None,
        replays: PartReplays | None = None,
    ):
        self.device, self.pool, self.sequence, self.stats = device, pool, sequence, stats
        # Where given, the slab's only part is recorded once and replayed (replay.py).
        self.replays = replays
        self.geometry, self.sort = geometry, sort
        triangles = geometry.triangles
        self.batch_triangles = max(1, min(batch_triangles or triangles, triangles))
        self.binning = Binning(
            device, pipelines, scan, pool, sequence, geometry, sort=sort, pair_budget=pair_budget
        )
        self.fill = FillPass(pipelines, pool, sequence, geometry.fixed_error)
        self.surface = None if surface is None else SurfacePass(surface, pool, sequence)
        # The marking fill of the last slab, where the slab was one part: its signed fill
        # reuses the grouped pairs (fill_mode="winding").
        self._kept_fill: RecordedFill | None = None

    def voxelize(
        self,
        slab: Window,
        grid: Binding,
        *,
        download: bool = False,
        marks: CrossingMarks | None = None,
        signed: SignedCrossings | None = None,
        then: Callable[[], RecordedSVO] | None = None,
    ) -> FilledSlab:
        """Leave the solid bits of the slab's rows in `grid` (cleared first). With `download`,
        the last submission also copies them into a staging buffer (FilledSlab.staging). For
        fill_mode="winding": with `marks`, instead a bit at the first voxel above every
        crossing, with its sign and the tiles' flags in `marks`; with `signed`, the grid
        (those marks) is left as it is and, in the flagged tiles, each crossing's sign is
        added to its segment (shaders/fill.comp, MARK_CROSSINGS and SIGNED_CROSSINGS).
        Neither computes the parity or the column counts, nor downloads.

        `then` records more work on the finished grid (the SVO build) into the same
        submission, where the slab is done in one (its only part, counted and filled at
        once): what it recorded is then FilledSlab.recorded, which is None otherwise (the
        caller does that work itself)."""
        kept, self._kept_fill = self._kept_fill, None
        if signed is not None and kept is not None and kept.window == slab:
            self._signed_again(kept, signed)
            self.stats.count(parts=1, parts_regrouped=0)
            return FilledSlab()
        batches = self._batches()
        work: list[Part] = [(slab, batch) for batch in batches]
        winding = marks is not None or signed is not None
        slab_grid = SlabGrid(
            self.pool, self.sequence, slab, grid, clear=signed is None, marks=marks
        )
        fills, filled, last = 0, FilledSlab(), None
        while work:
            window, batch = work.pop(0)
            alone = fills == 0 and not work  # no other part flips bits in this slab
            if alone and self.sort == "counting" and not winding:
                outcome = self._count_and_fill(window, batch, slab_grid, download, then)
                if outcome.filled is not None:
                    fills, filled = 1, outcome.filled
                    break
                count = outcome.count
            else:
                count = self._count_pairs(window, batch, slab_grid)
            if not self._fits(count):
                work[:0] = split_part(window, batch)
                continue
            finish = alone and not winding
            last, staging = self._fill(count, slab_grid, finish, download, marks, signed)
            filled = FilledSlab(staging)
            fills += 1
        if (fills != 1 and not winding) or (marks is not None and fills == 0):
            # several parts, or none (the grid is still cleared there)
            filled = FilledSlab(self._parity_all(slab_grid, download and not winding))
        one_part = fills == 1 and len(batches) == 1 and last is not None and last.window == slab
        if marks is not None and one_part:
            self._kept_fill = last  # the signed fill of the slab reuses its grouped pairs
        self.stats.count(slabs=int(signed is None), parts=fills)
        if signed is not None:
            self.stats.count(parts_regrouped=fills)
        return filled

    def voxelize_surface(
        self,
        slab: Window,
        grid: Binding,
        *,
        grid_columns: tuple[int, int],
        clear: bool,
        face_ids: Binding | None = None,
    ) -> None:
        """OR the surface voxels of the slab's rows into `grid`: cleared first with `clear`
        (mode "surface"), else holding what the fill left there (mode "both"). With
        `face_ids` (FACE_ID_BYTES per voxel of the slab, column by column as the bits), also
        set each voxel's smallest marking triangle index there (NO_FACE where none). Parts
        split as in voxelize; each ORs its marks and lowers the ids, so the split does not
        show. `grid_columns`: the grid's own columns along x and y (its far faces, where the
        thin surface marks the last column; the tile padding beyond is never marked)."""
        if self.surface is None:
            raise VoxelizerError("this PassRunner was built without surface kernels")
        work: list[Part] = [(slab, batch) for batch in self._batches()]
        slab_grid = SlabGrid(self.pool, self.sequence, slab, grid, clear=clear)
        parts = 0
        while work:
            window, batch = work.pop(0)
            count = self._count_pairs(window, batch, slab_grid, self.surface.setup)
            if not self._fits(count):
                work[:0] = split_part(window, batch)
                continue
            clear_ids = face_ids if parts == 0 else None
            self._surface_part(count, grid, grid_columns, face_ids, clear_ids)
            parts += 1
        self.stats.count(surface_parts=parts)

    # -- the submissions of a part -----------------------------------------------------------

    def _count_pairs(
        self,
        window: Window,
        batch: Batch,
        slab: SlabGrid,
        setup: ComputePipeline | None = None,
    ) -> PartCount:
        """Submission 1: upload (if another batch is up), setup, scan; read back the total
        and the wrap flag. `setup` replaces the variant's setup kernel (the conservative
        binning of surfaces)."""
        started = time.perf_counter()
        sequence = self.sequence
        sequence.begin()
        sequence.mark("start")
        slab.record_clear()
        counted = self.binning.record_count(window, batch, setup)
        total_staging = sequence.download(counted.total, 4)
        wrap_staging = sequence.download(counted.wrap_flag.buffer, 4)
        self.stats.add_gpu(sequence.submit())
        pair_count = int(total_staging.read(np.uint32, 1)[0])
        may_wrap = bool(wrap_staging.read(np.uint32, 1)[0])
        upload_ms = counted.upload_ms
        self.stats.add_host(
            upload=upload_ms, setup_submission=(time.perf_counter() - started) * 1e3 - upload_ms
        )
        return PartCount(counted=counted, pairs=pair_count, may_wrap=may_wrap)

    def _count_and_fill(
        self,
        window: Window,
        batch: Batch,
        slab: SlabGrid,
        download: bool,
        then: Callable[[], RecordedSVO] | None,
    ) -> OneSubmission:
        """The slab's only part in one submission, its pair buffers sized before the count is
        known. A part not done keeps its records on the device for _fill (and its grid is
        cleared again if the fill ran). `then` is recorded after the fill (see voxelize); its
        work is wasted where the part is not done. Where the runner has `replays` and the
        part is the whole mesh, the submission is recorded at capacities and replayed for
        the next mesh that fits them (replay.py)."""
        started = time.perf_counter()
        capacity = self.binning.capacity(window, batch[1] - batch[0])
        if capacity == 0:
            return OneSubmission(self._count_pairs(window, batch, slab))
        replayable = None
        if self.replays is not None and batch == (0, self.geometry.triangles):
            replayable = self._replayable(window, batch, slab, download, then, capacity)
        if replayable is not None:
            counted, reads, capacity = replayable
        else:
            self.sequence.begin()
            counted, reads = self._record_one(window, batch, slab, download, then, capacity)
            self.stats.add_gpu(self.sequence.submit())
        svo_ms = 0.0 if reads.svo is None else reads.svo.record_ms  # (charged by `then`)
        self.stats.add_host(
            upload=counted.upload_ms,
            passes_submission=(time.perf_counter() - started) * 1e3 - counted.upload_ms - svo_ms,
        )
        return self._one_result(counted, reads, capacity, slab)

    def _record_one(
        self,
        window: Window,
        batch: Batch,
        slab: SlabGrid,
        download: bool,
        then: Callable[[], RecordedSVO] | None,
        capacity: int,
        padded: PaddedUpload | None = None,
    ) -> tuple[Counted, PartReads]:
        """Record the one submission of _count_and_fill into the begun sequence."""
        sequence = self.sequence
        sequence.mark("start")
        slab.record_clear()
        counted = self.binning.record_count(window, batch, padded=padded)
        dispatch = self.binning.record_pair_dispatch(counted, capacity)
        binned = self.binning.record_grouping(counted, capacity, dispatch)
        self.fill.record(binned, slab, finish=True)
        total_staging = sequence.download(counted.total, 4)
        wrap_staging = sequence.download(counted.wrap_flag.buffer, 4)
        tile_staging = sequence.download(binned.fill_args, 16)
        counts_staging, grid_staging = slab.record_results(download)
        recorded = None if then is None else then()
        reads = PartReads(
            total=total_staging, wrap=wrap_staging, tiles=tile_staging, counts=counts_staging,
            grid=grid_staging, svo=recorded,
        )  # fmt: skip
        return counted, reads

    def _replayable(
        self,
        window: Window,
        batch: Batch,
        slab: SlabGrid,
        download: bool,
        then: Callable[[], RecordedSVO] | None,
        capacity: int,
    ) -> tuple[Counted, PartReads, int] | None:
        """The one submission with the mesh staged at capacities: the recording kept from
        an earlier mesh replayed where it is still valid for this one, else recorded afresh
        (reusable) and kept. Returns it with the pair capacity it was recorded for; None
        where the padding would not keep to the plan (the caller records as ever)."""
        replays, geometry, pool, sequence = self.replays, self.geometry, self.pool, self.sequence
        assert replays is not None
        fixed = (self.binning.pipelines, self.sort, window, slab.grid, download, then,
                 geometry.fixed_error, geometry.indexed)  # fmt: skip
        kept = replays.kept(fixed)
        vertices = len(geometry.vertices)
        capacities = replays.capacities(kept, geometry.triangles, vertices)
        triangles, vertex_capacity = capacities
        found = kept.get(capacities)
        pairs = capacity if found is None else max(capacity, found.capacity)
        if not self._padding_fits(window, triangles, vertex_capacity, pairs):
            return None
        generation = pool.generation
        padded = geometry.stage_padded(pool, triangles, vertex_capacity, replays.padding)
        recording = replays.find(kept, capacities, pool) if pool.generation == generation else None
        if recording is not None:
            self.stats.add_gpu(sequence.replay(recording.recording))
            slab.cleared()
            self.stats.count(replayed=1)
            counted = recording.counted.replayed(batch, padded.upload_ms)
            return counted, recording.replayed_reads, recording.capacity
        sequence.begin(reusable=True)
        counted, reads = self._record_one(window, batch, slab, download, then, capacity, padded)
        self.stats.add_gpu(sequence.submit())
        if sequence.replayable:
            made = PartRecording(
                fixed, capacities, pool.generation, sequence.keep(), counted, capacity, reads
            )
            replays.keep(made, sequence)
        return counted, reads, capacity

    def _padding_fits(self, window: Window, triangles: int, vertices: int, pairs: int) -> bool:
        """Whether the mesh padded to these capacities keeps to the plan: every buffer within
        one buffer's range, and the padding's bytes within what room for `pairs` pairs
        leaves of the pairs' budget (the plan counted the mesh's own triangles)."""
        geometry, indexed = self.geometry, self.geometry.indexed
        largest = max(
            triangles * max(RECORD_BYTES, geometry_bytes(indexed)),
            vertices * FINE_VERTEX_BYTES,
        )
        if largest > self.device.max_storage_range:
            return False
        extra = (triangles - geometry.triangles) * triangle_bytes(indexed) + vertex_bytes(
            indexed, vertices - len(geometry.vertices)
        )
        budget = self.binning.pair_budget
        return budget is None or pair_bytes(pairs, window.tiles, self.sort) + extra <= budget

    def _one_result(
        self, counted: Counted, reads: PartReads, capacity: int, slab: SlabGrid
    ) -> OneSubmission:
        """What the one submission's reads say: the slab done, or the part to run again."""
        count = PartCount(
            counted=counted,
            pairs=int(reads.total.read(np.uint32, 1)[0]),
            may_wrap=bool(reads.wrap.read(np.uint32, 1)[0]),
        )
        counts = reads.counts.read(np.uint32, 4)
        if count.may_wrap or count.pairs > capacity:
            return OneSubmission(count)  # nothing emitted: the grid is still clear
        if counts[2]:  # a tile needs more fill rounds: the part runs again
            slab.clear_again()
            return OneSubmission(count)
        self._count_columns(counts)
        self.stats.count(pairs=count.pairs, tiles=int(reads.tiles.read(np.uint32, 4)[3]))
        self.stats.count_max(sort_size=count.pairs)
        return OneSubmission(count, FilledSlab(staging=reads.grid, recorded=reads.svo))

    def _fill(
        self,
        count: PartCount,
        slab: SlabGrid,
        finish: bool,
        download: bool,
        marks: CrossingMarks | None,
        signed: SignedCrossings | None,
    ) -> tuple[RecordedFill, Buffer | None]:
        """Submission 2: emission, grouping by tile, marking, compaction, fill, of the
        counted part. With `finish` (the slab's only part) also the parity, and the column
        counts (and the grid, with `download`) come back: the grid's staging buffer is
        returned with the recorded fill."""
        started = time.perf_counter()
        sequence, pairs = self.sequence, count.pairs
        sequence.begin()
        sequence.mark("start")
        slab.record_clear()
        tile_staging = None
        recorded = RecordedFill(
            window=count.counted.window, bindings=None, fill_args=None, rounds=0
        )
        if pairs:
            binned = self.binning.record_grouping(count.counted, pairs)
            recorded = self.fill.record(binned, slab, finish=finish, marks=marks, signed=signed)
            tile_staging = sequence.download(binned.fill_args, 16)
        counts_staging, grid_staging = slab.record_results(download) if finish else (None, None)
        self.stats.add_gpu(sequence.submit())
        self.stats.add_host(fill_submission=(time.perf_counter() - started) * 1e3)
        tiles = int(tile_staging.read(np.uint32, 4)[3]) if tile_staging is not None else 0
        self.stats.count(pairs=pairs, tiles=tiles)
        self.stats.count_max(sort_size=self.binning.pair_slots(pairs) if pairs else 0)
        if counts_staging is not None:
            counts = counts_staging.read(np.uint32, 4)
            if counts[2]:  # exact rounds: the fill takes every tile whole
                raise VoxelizerError("internal error: fill rounds recorded for too few pairs")
            self._count_columns(counts)
        return recorded, grid_staging

    def _signed_again(self, kept: RecordedFill, signed: SignedCrossings) -> None:
        """The signed fill of fill_mode="winding" over the pairs the marking fill of the same
        slab grouped (its only part): no binning again, one submission."""
        started = time.perf_counter()
        self.sequence.begin()
        self.sequence.mark("start")
        self.fill.record_signed_again(kept, signed)
        self.stats.add_gpu(self.sequence.submit())
        self.stats.add_host(fill_submission=(time.perf_counter() - started) * 1e3)

    def _parity_all(self, slab: SlabGrid, download: bool) -> Buffer | None:
        """Parity and column counts over every tile of the slab, after several parts flipped
        bits. Returns the grid's staging copy with `download`."""
        started = time.perf_counter()
        sequence = self.sequence
        sequence.begin()
        sequence.mark("start")
        slab.record_clear()
        self.fill.record_parity(slab)
        counts_staging, grid_staging = slab.record_results(download)
        self.stats.add_gpu(sequence.submit())
        self.stats.add_host(fill_submission=(time.perf_counter() - started) * 1e3)
        self._count_columns(counts_staging.read(np.uint32, 4))
        return grid_staging

    def _surface_part(
        self,
        count: PartCount,
        grid: Binding,
        grid_columns: tuple[int, int],
        face_ids: Binding | None,
        clear_ids: Binding | None,
    ) -> None:
        """Submission 2 of a surface part: conservative emission, then the surface pass."""
        assert self.surface is not None  # voxelize_surface checked it
        started = time.perf_counter()
        sequence = self.sequence
        sequence.begin()
        sequence.mark("start")
        self.surface.record(
            count.counted, count.pairs, grid,
            grid_columns=grid_columns, face_ids=face_ids, clear_ids=clear_ids,
        )  # fmt: skip
        self.stats.add_gpu(sequence.submit())
        self.stats.add_host(surface_submission=(time.perf_counter() - started) * 1e3)
        self.stats.count(surface_pairs=count.pairs)

    # -- parts -------------------------------------------------------------------------------

    def _batches(self) -> list[Batch]:
        triangles = self.geometry.triangles
        return [
            (first, min(first + self.batch_triangles, triangles))
            for first in range(0, triangles, self.batch_triangles)
        ]

    def _fits(self, count: PartCount) -> bool:
        counted = count.counted
        return self.binning.fits(
            counted.window, counted.batch, count.pairs, may_wrap=count.may_wrap
        )

    def _count_columns(self, counts: np.ndarray) -> None:
        self.stats.count(open_columns=int(counts[0]), overlap_columns=int(counts[1]))


def split_part(window: Window, batch: Batch) -> list[Part]:
    """A part whose pairs overflow the budget as two: its window's halves, or (a window of
    one tile row) its batch's halves; a single triangle that still overflows is an error."""
    if window.rows > TILE_SIDE:
        return [(half, batch) for half in window.halves()]
    first, end = batch
    if end - first > 1:
        middle = (first + end) // 2
        return [(window, (first, middle)), (window, (middle, end))]
    raise VoxelizerError(
        "one triangle makes more tile-triangle pairs than the memory budget holds; raise max_memory"
    )
