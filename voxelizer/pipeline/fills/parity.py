"""fill_mode="parity": a voxel is solid where an odd number of the mesh's crossings lie below
its centre in its column, the passes' XOR of every crossing into the grid, slab by slab."""

from __future__ import annotations

from typing import Literal, overload

import numpy as np

from ...gpu.buffers import Binding
from ...grid import ColumnBits
from ...placement import Shape
from ..layout import Window
from ..passes import PassRunner
from ..slabs import FilledSlab, SlabWork, run_slabs
from ..svo_build import OctreeArrays
from .base import Fill, FillCall, plan_passes


class Parity(Fill):
    """The passes alone: the grid never leaves the device for an SVO, and mode "both" adds
    the surface pass to each slab's grid."""

    in_slab = True

    def dense(self, call: FillCall) -> ColumnBits:
        return parity(call, dense=True)

    def svo(self, call: FillCall) -> OctreeArrays:
        return parity(call, dense=False)

    def fill_slab(self, passes: PassRunner, slab: Window, grid: Binding) -> None:
        passes.voxelize(slab, grid)


@overload
def parity(
    call: FillCall,
    *,
    dense: Literal[True],
    vertices: np.ndarray | None = None,
    fine: np.ndarray | None = None,
    shape: Shape | None = None,
    whole_only: bool = False,
) -> ColumnBits: ...


@overload
def parity(
    call: FillCall,
    *,
    dense: Literal[False],
    vertices: np.ndarray | None = None,
    fine: np.ndarray | None = None,
    shape: Shape | None = None,
    whole_only: bool = False,
) -> OctreeArrays: ...


def parity(
    call: FillCall,
    *,
    dense: bool,
    vertices: np.ndarray | None = None,
    fine: np.ndarray | None = None,
    shape: Shape | None = None,
    whole_only: bool = False,
) -> ColumnBits | OctreeArrays:
    """The job's mesh (or other grid-space `vertices` and their `fine` ones, of the job's
    faces, on a grid of `shape`) through the passes, slab by slab as the plan says: the
    grid's words (`dense`) or the SVO arrays. `whole_only`: the grid in one slab, or
    MemoryBudgetError."""
    job = call.job
    planned = plan_passes(
        call, shape=job.shape if shape is None else shape, budget=job.max_memory,
        dense=dense, vertices=vertices, fine=fine, whole_only=whole_only,
    )  # fmt: skip
    runner = planned.runner

    def fill(work: SlabWork) -> FilledSlab:
        return runner.voxelize(work.window, work.grid, download=work.download, then=work.then)

    return run_slabs(
        call.resources, planned.plan, call.stats, fill, dense=dense, progress=job.progress
    )
