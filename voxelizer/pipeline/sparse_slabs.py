"""The sparse loop: a grid too large for the dense passes (over FINE_LATTICE_MAX a side), as
an SVO at a cost that follows its surface, beside a floor that follows the grid's cubes (the
parity walks up every stack, surface or not: docs/benchmarks.md, "Large grids"). The grid is
cut into cubes of 32^3 voxels (cubes.py) and voxelized slab by slab, a slab being some rows
of cubes:

1. mark: each part of the slab (a window of its rows and a batch of triangles) is binned as
   the dense passes bin it (binning.py, passes 1-6, on the grid's lattice), and the cubes its
   crossings may reach are marked (sparse_pass.py); their scan gives every surface cube a
   slot. A slab with more surface cubes than the budget holds is halved and marked again;
2. fill: every part's crossings flip bits in the surface cubes' words, then the parity runs
   up each stack of cubes, counting the columns that carry a solid voxel through each gap
   between two surface cubes;
3. the surface cubes go through the SVO build (svo_build.py) a batch of A x A cubes at a time,
   forests whose subtrees the octree takes as they are; a gap whose columns all carry 1 is a
   run of full cubes, one whose columns differ (an open surface) a run of one replica's cubes.

No interior voxel is ever touched: runs of full cubes are filled at the octree's level from
the gaps' counts (sparse_merge.py), which then writes the octree into an OctreeSink.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..errors import MemoryBudgetError, VoxelizerError
from ..gpu.buffers import Binding, Buffer
from ..log import get_logger
from ..octree import OctreeSink
from ..progress import Progress
from ..stats import Stats
from .binning import COUNT_RANGE, Binned, Binning, Counted
from .cubes import (
    CUBE_COLUMNS,
    CUBE_SIDE,
    MAX_BATCH_SHIFT,
    CubeSpace,
    batch_shift_for,
    cubes_along,
)
from .geometry import Batch, Geometry
from .layout import PAIR_BYTES, Window, pair_bytes
from .merge import FULL, MIXED
from .passes import split_part
from .plan import SparsePlan
from .resources import Resources
from .sparse_merge import SparseOctree
from .sparse_pass import SlabCubes, SparsePass, fill_rounds, slab_cubes
from .svo_build import Forest, build_svo_on_gpu

_log = get_logger(__name__)
Part = tuple[Window, Batch]
FIRST_SLAB_CUBE_ROWS = 8  # cube rows of the first slab; later slabs follow the cubes found


@dataclass
class MarkedSlab:
    """A slab after its marking: its space, its parts with their pair counts, and its surface
    cubes; the only part's binning where the slab was one (its fill reuses it)."""

    space: CubeSpace
    parts: list[tuple[Part, int]]
    slots: int
    binned: Binned | None = None


@dataclass
class FilledSlab:
    """A filled slab on the host: each slot's place (stack, cz) and gap count."""

    cubes: SlabCubes
    places: np.ndarray  # uint32 (slots, 2)
    gap_counts: np.ndarray  # uint32 (slots,)
    timings: dict[str, float] = field(default_factory=dict)


class SparseRunner:
    """Voxelizes one mesh's grid sparsely, slab after slab, into a SparseOctree; owns its
    stages (the binning, the sparse pass) and the octree it fills."""

    def __init__(
        self,
        resources: Resources,
        plan: SparsePlan,
        geometry: Geometry,
        *,
        variant: str,
        sort: str,
        shift: int,
        stats: Stats,
        progress: Progress | None = None,
    ):
        self.resources, self.plan, self.geometry, self.stats = resources, plan, geometry, stats
        self.progress = progress
        device, pool, sequence = resources.device, resources.pool, resources.sequence
        passes = resources.passes(variant, shift)
        self.binning = Binning(
            device, passes, resources.scan(), pool, sequence, geometry, sort=sort,
            pair_budget=plan.pair_budget,
        )  # fmt: skip
        self.sparse = SparsePass(
            resources.sparse(variant, shift), resources.scan(), pool, sequence,
            geometry.fixed_error,
        )  # fmt: skip
        self.octree = SparseOctree(plan.shape)
        self._cube_rows = cubes_along(plan.shape[1])
        self._slab_rows = FIRST_SLAB_CUBE_ROWS

    def run(self) -> SparseOctree:
        """Every slab, in row order; the octree of all of them."""
        row = 0
        while row < self._cube_rows:
            rows = min(self._slab_rows, self._cube_rows - row)
            marked = self._mark(CubeSpace.of(self.plan.shape, row, rows))
            if marked is None:  # too many surface cubes for the budget: a smaller slab
                if rows == 1:
                    raise MemoryBudgetError(
                        f"one row of cubes of the {self.plan.shape} grid has more surface "
                        f"than a budget of {self.plan.budget:,} bytes holds; raise max_memory"
                    )
                self._slab_rows = max(1, rows // 2)
                continue
            self._keep(self._fill(marked))
            self._plan_next(marked)
            row += rows
            self.stats.count(slabs=1)
            if self.progress is not None:
                self.progress("cube rows", row, self._cube_rows)
        return self.octree

    def _plan_next(self, marked: MarkedSlab) -> None:
        """The next slab's rows: as many as the cubes found per row let the budget hold."""
        per_row = max(1, -(-marked.slots // marked.space.cube_rows))
        fit = self.plan.max_slots(marked.space) // per_row
        self._slab_rows = max(1, min(fit * 3 // 4, 4 * marked.space.cube_rows, self._cube_rows))

    # -- 1. mark ----------------------------------------------------------------------------

    def _mark(self, space: CubeSpace) -> MarkedSlab | None:
        """Mark the slab's surface cubes, part by part; None where they are more than the
        plan's budget holds (nothing of the slab is kept)."""
        work = self._parts(space.window)
        parts: list[tuple[Part, int]] = []
        binned: Binned | None = None
        total: Buffer | None = None
        while work:
            window, batch = work.pop(0)
            counted, pairs = self._count(window, batch, clear=space if not parts else None)
            if not self._fits(counted, pairs):
                work[:0] = split_part(window, batch)
                continue
            last = not work
            total, binned = self._group_and_mark(counted, pairs, space, last)
            parts.append(((window, batch), pairs))
        assert total is not None
        slots = int(total.read(np.uint32, 1)[0])
        self.stats.count(parts=len(parts), pairs=sum(pairs for _, pairs in parts))
        if not self.plan.holds(space, slots):
            return None
        one = binned if len(parts) == 1 else None
        return MarkedSlab(space=space, parts=parts, slots=slots, binned=one)

    def _count(self, window: Window, batch: Batch, clear: CubeSpace | None) -> tuple[Counted, int]:
        """Passes 1-2 of a part in a submission; its pair count (COUNT_RANGE where the 32-bit
        total may have wrapped)."""
        sequence = self.resources.sequence
        sequence.begin()
        sequence.mark("start")
        if clear is not None:
            self.sparse.record_clear_bits(clear)
        counted = self.binning.record_count(window, batch)
        total = sequence.download(counted.total, 4)
        wrap = sequence.download(counted.wrap_flag.buffer, 4)
        self.stats.add_gpu(sequence.submit())
        pairs = int(total.read(np.uint32, 1)[0])
        if wrap.read(np.uint32, 1)[0] and self.geometry.pair_bound(window, batch) >= COUNT_RANGE:
            pairs = COUNT_RANGE
        return counted, pairs

    def _fits(self, counted: Counted, pairs: int) -> bool:
        if pairs >= COUNT_RANGE:
            return False
        if self.binning.pair_slots(pairs) * PAIR_BYTES > self.resources.device.max_storage_range:
            return False
        return pair_bytes(pairs, counted.window.tiles, self.binning.sort) <= self.plan.pair_budget

    def _group_and_mark(
        self, counted: Counted, pairs: int, space: CubeSpace, last: bool
    ) -> tuple[Buffer | None, Binned]:
        """Passes 3-6 and the marking of a counted part in a submission; after the slab's last
        part also the slots (returns the staging copy of their total)."""
        sequence = self.resources.sequence
        sequence.begin()
        sequence.mark("start")
        binned = self.binning.record_grouping(counted, pairs)
        self.sparse.record_mark(binned, space)
        total = None
        if last:
            total = sequence.download(self.sparse.record_slots(space), 4)
        self.stats.add_gpu(sequence.submit())
        return total, binned

    def _parts(self, window: Window) -> list[Part]:
        """The slab's rows in windows of at most the plan's part rows, times the batches."""
        rows = self.plan.part_rows
        triangles, step = self.geometry.triangles, self.plan.batch_triangles
        batches = [(first, min(first + step, triangles)) for first in range(0, triangles, step)]
        windows = [
            Window(
                nx=window.nx,
                nz=window.nz,
                row_lo=lo,
                row_hi=min(lo + rows, window.row_hi),
                buffer_row=window.buffer_row,
            )
            for lo in range(window.row_lo, window.row_hi, rows)
        ]
        return [(w, batch) for w in windows for batch in batches]

    # -- 2. fill ------------------------------------------------------------------------------

    def _fill(self, marked: MarkedSlab) -> FilledSlab:
        """The flips of every part, the parity and the gaps; run again with more rounds where
        a tile has more pairs than one round takes."""
        shift = batch_shift_for(min(marked.slots, 1 << (2 * MAX_BATCH_SHIFT)))
        space = marked.space.with_batches(shift)
        cubes = slab_cubes(self.resources.pool, space, marked.slots)
        rounds = 1
        while True:
            largest, lost, filled = self._fill_parts(marked, cubes, rounds)
            if lost:
                raise VoxelizerError(
                    f"internal error: {lost} crossings of the slab at cube row "
                    f"{space.cube_row} fell outside its surface cubes"
                )
            if fill_rounds(largest) <= rounds:
                return filled
            rounds = fill_rounds(largest)

    def _fill_parts(
        self, marked: MarkedSlab, cubes: SlabCubes, rounds: int
    ) -> tuple[int, int, FilledSlab]:
        """The fill in a submission per part (the only part's binning reused), the parity and
        the downloads with the last; (largest tile, lost crossings, the filled slab)."""
        sequence = self.resources.sequence
        results: tuple[Buffer, Buffer, Buffer] | None = None
        for index, ((window, batch), pairs) in enumerate(marked.parts):
            sequence.begin()
            sequence.mark("start")
            if index == 0:
                self.sparse.record_clear_cubes(cubes)
            binned = marked.binned
            if binned is None:
                counted = self.binning.record_count(window, batch)
                binned = self.binning.record_grouping(counted, pairs)
            self.sparse.record_fill(binned, cubes, rounds)
            if index + 1 == len(marked.parts):
                self.sparse.record_parity(cubes)
                results = (
                    sequence.download(cubes.fill_state.buffer, 16),
                    sequence.download(cubes.gap_counts.buffer, 4 * max(cubes.slots, 1)),
                    sequence.download(cubes.cube_list.buffer, 8 * max(cubes.slots, 1)),
                )
            self.stats.add_gpu(sequence.submit())
        assert results is not None
        state, gaps, places = results
        largest, lost = (int(v) for v in state.read(np.uint32, 2))
        filled = FilledSlab(
            cubes=cubes,
            places=places.read(np.uint32, 2 * cubes.slots).reshape(-1, 2).copy(),
            gap_counts=gaps.read(np.uint32, cubes.slots).copy(),
        )
        return largest, lost, filled

    # -- 3. the SVO build and the runs ------------------------------------------------------------

    def _keep(self, filled: FilledSlab) -> None:
        """The slab's cubes into the octree: the surface cubes' forests and runs, the gaps'
        runs (full, or a replica's)."""
        cubes, space = filled.cubes, filled.cubes.space
        slots = cubes.slots
        if not slots:
            return
        forests = [
            self._build(cubes.cubes, space.batch_shift, batch)
            for batch in range(space.batches(slots))
        ]
        slot = np.arange(slots)
        per_batch = space.batch_cubes
        forest = np.array(forests, np.int64)[slot // per_batch]
        local = slot % per_batch
        states = np.concatenate([self.octree.cube_states(f) for f in forests])[:slots]
        stack, cz = filled.places[:, 0].astype(np.int64), filled.places[:, 1].astype(np.int64)
        x, y = stack % space.cubes_x, space.cube_row + stack // space.cubes_x
        self.octree.add_runs(x, y, cz, cz + 1, states.astype(np.int64), forest, local)
        self._keep_gaps(filled, x, y, stack, cz)
        self.stats.count(surface_cubes=slots)

    def _keep_gaps(
        self, filled: FilledSlab, x: np.ndarray, y: np.ndarray, stack: np.ndarray, cz: np.ndarray
    ) -> None:
        """The gap above each surface cube up to the next one of its stack (or the grid's
        top): full where all its columns carry 1, a replica's where only some do."""
        space = filled.cubes.space
        next_cz = np.full(len(cz), space.cubes_z, np.int64)
        same = stack[1:] == stack[:-1]
        next_cz[:-1][same] = cz[1:][same]
        count = filled.gap_counts.astype(np.int64)
        gap = next_cz > cz + 1
        full = gap & (count == CUBE_COLUMNS)
        none = np.full(int(full.sum()), -1, np.int64)
        self.octree.add_runs(x[full], y[full], cz[full] + 1, next_cz[full],
                             np.full(len(none), FULL), none, none)  # fmt: skip
        replicated = np.flatnonzero(gap & (count > 0) & (count < CUBE_COLUMNS))
        if len(replicated):
            self._keep_replicas(filled, replicated, x, y, cz, next_cz)

    def _keep_replicas(
        self, filled: FilledSlab, sources: np.ndarray, x: np.ndarray, y: np.ndarray,
        cz: np.ndarray, next_cz: np.ndarray,
    ) -> None:  # fmt: skip
        """The replicas of the gaps above `sources` (slots), built and kept as their runs."""
        cubes = filled.cubes
        shift = batch_shift_for(min(len(sources), 1 << (2 * MAX_BATCH_SHIFT)))
        per_batch = 1 << (2 * shift)
        batches = -(-len(sources) // per_batch)
        replicas = self.resources.pool.binding(
            "sparse_replicas", batches * per_batch * CUBE_COLUMNS * 4
        )
        jobs = np.stack([sources, np.arange(len(sources))], axis=1).astype(np.uint32)
        sequence = self.resources.sequence
        sequence.begin()
        sequence.mark("start")
        self.sparse.record_replicas(cubes, jobs, replicas, shift)
        self.stats.add_gpu(sequence.submit())
        forests = [self._build(replicas.buffer, shift, batch) for batch in range(batches)]
        index = np.arange(len(sources))
        forest = np.array(forests, np.int64)[index // per_batch]
        rows = sources
        self.octree.add_runs(x[rows], y[rows], cz[rows] + 1, next_cz[rows],
                             np.full(len(rows), MIXED), forest, index % per_batch)  # fmt: skip
        self.stats.count(replica_cubes=len(sources))

    def _build(self, buffer: Binding | Buffer, batch_shift: int, batch: int) -> int:
        """The SVO build of one batch of cubes (a forest of A x A cubes); its forest's index."""
        side = CUBE_SIDE << batch_shift
        size = CUBE_COLUMNS * 4 << (2 * batch_shift)
        target = buffer.buffer if isinstance(buffer, Binding) else buffer
        grid = Binding(target, size, offset=batch * size)
        forest = Forest((side, CUBE_SIDE, side), cube_side=CUBE_SIDE, cube_y=0, buffer_row=0,
                        buffer_rows=CUBE_SIDE)  # fmt: skip
        resources = self.resources
        arrays = build_svo_on_gpu(
            resources.scan(), resources.svo(), resources.pool, resources.sequence, forest,
            grid, self.stats,
        )  # fmt: skip
        return self.octree.add_forest(arrays)


def write_sparse(octree: SparseOctree, sink: OctreeSink, stats: Stats) -> None:
    """The octree into the sink, timed as the SVO's merge."""
    started = time.perf_counter()
    octree.write(sink)
    stats.add_host(svo_merge=(time.perf_counter() - started) * 1e3)
