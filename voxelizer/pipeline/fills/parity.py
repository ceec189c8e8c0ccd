"""fill_mode="parity": a voxel is solid where an odd number of the mesh's crossings lie below
its centre in its column, the passes' XOR of every crossing into the grid, slab by slab; or,
for a grid over FINE_LATTICE_MAX a side, the sparse path's, into the
surface cubes alone (sparse_slabs.py)."""

from __future__ import annotations

from typing import Literal, overload

import numpy as np

from ...choices import is_indexed
from ...gpu.buffers import Binding
from ...grid import ColumnBits
from ...octree import ArraysSink, OctreeSink
from ...placement import GridPlacement, Shape, lattice_shift
from ...svo import SVO
from ..geometry import tile_boxes
from ..kernels import SPARSE_VARIANTS
from ..layout import Window
from ..passes import PassRunner
from ..plan import make_sparse_plan
from ..slabs import FilledSlab, SlabWork, run_slabs
from ..sparse_slabs import SparseRunner, write_sparse
from ..svo_build import OctreeArrays
from .base import Fill, FillCall, job_geometry, plan_passes


class Parity(Fill):
    """The passes alone: the grid never leaves the device for an SVO, and mode "both" adds
    the surface pass to each slab's grid."""

    in_slab = True

    def dense(self, call: FillCall) -> ColumnBits | np.ndarray:
        if call.job.sparse_grid:  # (what the caller checked fits memory)
            nodes, bricks, level_offsets = self.svo(call)
            placement = GridPlacement(call.job.shape, np.zeros(3), 1.0)
            return SVO(nodes, bricks, level_offsets, placement, verify=False).to_numpy()
        return parity(call, dense=True)

    def svo(self, call: FillCall) -> OctreeArrays:
        if call.job.sparse_grid:
            sink = ArraysSink()
            sparse_parity(call, sink)
            return sink.arrays()
        return parity(call, dense=False)

    def svo_into(self, call: FillCall, sink: OctreeSink) -> None:
        if call.job.sparse_grid:
            sparse_parity(call, sink)
        else:
            super().svo_into(call, sink)

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


def sparse_parity(call: FillCall, sink: OctreeSink) -> None:
    """The job's mesh through the sparse path (sparse_slabs.py), its octree into `sink`, with
    the one variant its kernels are built for (kernels.SPARSE_VARIANTS)."""
    job, resources, stats = call.job, call.resources, call.stats
    shift = lattice_shift(job.shape)
    (variant,) = SPARSE_VARIANTS
    widest = (1, 1)
    if resources.device.is_cpu:  # (the loop guard: shaders/tiles.glsl, plan.LOOP_GUARD)
        across, low, high = tile_boxes(job.vertices, job.mesh.faces)
        widest = (int(across.max(initial=1)), int((high - low + 1).max(initial=1)))
    made = make_sparse_plan(
        resources.device, job.shape, triangles=job.mesh.triangle_count,
        vertices=len(job.vertices), indexed=is_indexed(variant), budget=job.max_memory,
        largest_triangle_tiles=widest,
    )  # fmt: skip
    stats.variant = variant
    stats.memory.budget_bytes = made.budget
    geometry = job_geometry(call, None, None, indexed=is_indexed(variant))
    runner = SparseRunner(
        resources, made, geometry, variant=variant, sort=job.sort, shift=shift, stats=stats,
        progress=job.progress,
    )  # fmt: skip
    write_sparse(runner.run(), sink, stats)
