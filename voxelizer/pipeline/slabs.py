"""The slab loop: the plan's slabs of the grid, one after another, each filled by a fill mode's
work and then either copied back (a dense result: the slabs' rows of the grid's words, end to
end) or converted to an SVO forest on the device (merged into one octree at the end).

Every fill runs its slabs through `run_slabs`; what differs is the `SlabFill` it passes: the
work that leaves a slab's voxels in its grid buffer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, overload

import numpy as np

from ..gpu.buffers import Binding, Buffer
from ..grid import ColumnBits, pack_columns
from ..placement import Shape
from ..progress import Progress
from ..stats import Stats
from .layout import Window
from .merge import merge_forests
from .plan import Plan, make_plan
from .resources import Resources
from .svo_build import (
    Forest,
    OctreeArrays,
    RecordedSVO,
    SVOArrays,
    build_svo_on_gpu,
    record_svo,
)


@dataclass(frozen=True)
class SlabWork:
    """A slab to fill: its rows, its grid buffer, and what the fill may fold into its last
    submission: the copy of the bits back (`download`, for a dense result) or the SVO
    conversion (`then` records it, for an SVO)."""

    window: Window
    grid: Binding
    download: bool
    then: Callable[[], RecordedSVO] | None


@dataclass(frozen=True)
class FilledSlab:
    """What a slab's fill leaves besides the bits in its grid: the grid's staging copy where
    its last submission copied them back, the SVO conversion recorded into that submission,
    or the bits on the host (`words`, GPU layout), to go up with the conversion."""

    staging: Buffer | None = None
    recorded: RecordedSVO | None = None
    words: np.ndarray | None = None


SlabFill = Callable[[SlabWork], FilledSlab]


@dataclass(frozen=True)
class SVORecorder:
    """Records a slab's SVO conversion (record_svo) into the submission under way. Equal
    recorders record the same commands: a recording that holds one may be replayed for
    another (replay.py)."""

    resources: Resources
    forest: Forest
    grid: Binding

    def __call__(self) -> RecordedSVO:
        resources = self.resources
        return record_svo(
            resources.scan(), resources.svo(), resources.pool, resources.sequence, self.forest,
            self.grid,
        )  # fmt: skip


@overload
def run_slabs(
    resources: Resources,
    plan: Plan,
    stats: Stats,
    fill: SlabFill,
    *,
    dense: Literal[True],
    progress: Progress | None,
) -> ColumnBits: ...


@overload
def run_slabs(
    resources: Resources,
    plan: Plan,
    stats: Stats,
    fill: SlabFill,
    *,
    dense: Literal[False],
    progress: Progress | None,
) -> OctreeArrays: ...


@overload
def run_slabs(
    resources: Resources,
    plan: Plan,
    stats: Stats,
    fill: SlabFill,
    *,
    dense: bool,
    progress: Progress | None,
) -> ColumnBits | OctreeArrays: ...


def run_slabs(
    resources: Resources,
    plan: Plan,
    stats: Stats,
    fill: SlabFill,
    *,
    dense: bool,
    progress: Progress | None,
) -> ColumnBits | OctreeArrays:
    """Fill every slab of the plan in row order: the grid's words (`dense`) or the SVO
    arrays, reporting ("slabs", done, total) to `progress` where there are several."""
    outputs = _SlabOutputs(resources, plan, stats, dense=dense, progress=progress)
    for slab in plan.slabs():
        grid = resources.pool.binding("grid", slab.grid_bytes)
        then = None if dense else outputs.svo_recorder(slab, grid)
        outputs.keep(slab, grid, fill(SlabWork(slab, grid, dense, then)))
    return outputs.result()


def svo_of_voxels(
    resources: Resources,
    voxels: ColumnBits | np.ndarray,
    shape: Shape,
    stats: Stats,
    *,
    max_memory: int | None,
) -> OctreeArrays:
    """SVO arrays of a grid of `shape` on the host (words or bools): uploaded slab by slab,
    converted there."""
    plan = make_plan(
        resources.device, shape, triangles=1, vertices=0, indexed=False, budget=max_memory,
        svo=True, dense=False,
    )  # fmt: skip

    def upload(work: SlabWork) -> FilledSlab:
        slab = work.window
        if isinstance(voxels, ColumnBits):
            return FilledSlab(words=voxels.rows(slab.row_lo, slab.row_hi))
        return FilledSlab(words=pack_columns(voxels[:, slab.row_lo : slab.row_hi]))

    return run_slabs(resources, plan, stats, upload, dense=False, progress=None)


def build_svo(
    resources: Resources,
    forest: Forest,
    grid: Binding,
    stats: Stats,
    words: np.ndarray | None = None,
) -> SVOArrays:
    """The SVO conversion of the bits in `grid` (or of `words`, uploaded into it first) in
    a submission of its own."""
    return build_svo_on_gpu(
        resources.scan(), resources.svo(), resources.pool, resources.sequence, forest, grid,
        stats, words,
    )  # fmt: skip


class _SlabOutputs:
    """What each slab leaves once its fill is done: its rows of the dense grid's words
    (`dense`; a slab's rows are contiguous words, so the grid's are theirs end to end), or
    its SVO forest, merged into one octree at the end; with the progress over slabs. It
    owns the words and forests kept so far."""

    def __init__(
        self,
        resources: Resources,
        plan: Plan,
        stats: Stats,
        *,
        dense: bool,
        progress: Progress | None,
    ) -> None:
        self._resources, self._plan, self._stats = resources, plan, stats
        self._dense, self._progress = dense, progress
        self._slab_count = len(plan.slabs())
        self._words: list[np.ndarray] = []
        self._forests: list[tuple[int, SVOArrays]] = []
        self._kept = 0

    def svo_recorder(self, slab: Window, grid: Binding) -> SVORecorder:
        """What records the slab's SVO conversion into the fill's last submission."""
        return SVORecorder(self._resources, self._plan.forest(slab), grid)

    def keep(self, slab: Window, grid: Binding, filled: FilledSlab) -> None:
        """The slab's result from `grid`, or from the staging copy or the SVO conversion
        that the fill's last submission already made (its arrays are read now)."""
        stats = self._stats
        if self._dense:
            if filled.staging is not None:
                self._words.append(_read_words(slab, filled.staging, stats))
            else:
                self._words.append(self._download(slab, grid))
        else:
            forest = self._plan.forest(slab)
            if filled.recorded is not None:
                arrays = filled.recorded.finish(stats)
            else:
                arrays = build_svo(self._resources, forest, grid, stats, filled.words)
            self._forests.append((forest.cube_y, arrays))
        self._kept += 1
        if self._progress is not None and self._slab_count > 1:
            self._progress("slabs", self._kept, self._slab_count)

    def result(self) -> ColumnBits | OctreeArrays:
        plan = self._plan
        if self._dense:  # the slabs come in row order
            words = self._words[0] if len(self._words) == 1 else np.concatenate(self._words)
            return ColumnBits(words, plan.shape, clean_padding=True)  # (the passes' words)
        started = time.perf_counter()
        if plan.whole:
            octree = self._forests[0][1].octree()
        else:
            octree = merge_forests(plan.shape, plan.slab_rows, self._forests)
        self._stats.add_host(svo_merge=(time.perf_counter() - started) * 1e3)
        return octree

    def _download(self, slab: Window, grid: Binding) -> np.ndarray:
        """The slab's words in a submission of their own (after the surface pass)."""
        sequence = self._resources.sequence
        sequence.begin()
        sequence.mark("start")
        staging = sequence.download(grid.buffer, slab.grid_bytes)
        sequence.mark("download")
        self._stats.add_gpu(sequence.submit())
        return _read_words(slab, staging, self._stats)


def _read_words(slab: Window, staging: Buffer, stats: Stats) -> np.ndarray:
    """The slab's words, copied back with the fill's last submission (the GPU layout: rows
    j in [row_lo, row_hi) of the grid's words)."""
    started = time.perf_counter()
    words = staging.read(np.uint32, slab.grid_bytes // 4)
    stats.add_host(download=(time.perf_counter() - started) * 1e3)
    return words
