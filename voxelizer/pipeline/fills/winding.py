"""fill_mode="winding": solid where the generalized winding number exceeds 1/2 (winding.py
in the pipeline says how): slab by slab, the passes mark every crossing with its sign,
WindingFill cuts the columns into segments there and sums the signs, the passes run again
only for the tiles where two crossings share a mark (to add each crossing's sign to its
segment), and WindingFill replaces the marks by the winding bits, which then go the way
parity bits go (download, or the SVO build on the device)."""

from __future__ import annotations

import time

from ...grid import ColumnBits
from ..plan import Plan, default_budget
from ..slabs import FilledSlab, SlabFill, SlabWork, run_slabs
from ..svo_build import OctreeArrays
from ..winding import WindingFill, mesh_boundary
from .base import Fill, FillCall, plan_passes

WINDING_COLUMN_RESERVE = 40  # bytes per grid column kept out of the plan for winding's lists


class Winding(Fill):
    """The plan counts the signs' plane beside the grid; the boundary and the segment lists
    are kept out of its budget."""

    def dense(self, call: FillCall) -> ColumnBits:
        plan, fill = winding_slabs(call, dense=True)
        return run_slabs(
            call.resources, plan, call.stats, fill, dense=True, progress=call.job.progress
        )

    def svo(self, call: FillCall) -> OctreeArrays:
        plan, fill = winding_slabs(call, dense=False)
        return run_slabs(
            call.resources, plan, call.stats, fill, dense=False, progress=call.job.progress
        )


def winding_slabs(call: FillCall, *, dense: bool) -> tuple[Plan, SlabFill]:
    """The plan of the job's winding solid, and the fill of one slab."""
    job, resources, stats = call.job, call.resources, call.stats
    started = time.perf_counter()
    boundary = mesh_boundary(job.mesh, job.vertices)
    stats.add_host(winding_boundary=(time.perf_counter() - started) * 1e3)
    budget = default_budget(resources.device) if job.max_memory is None else job.max_memory
    nx, ny, _ = job.shape
    edges = boundary.nbytes if boundary is not None else 0
    # the segment lists grow with a slab's columns: a share of the budget, at most a quarter
    reserve = 2 * edges + min(WINDING_COLUMN_RESERVE * nx * ny, budget // 4)
    planned = plan_passes(
        call, shape=job.shape, budget=max(budget - reserve, 0), dense=dense,
        grid_planes=2,  # the marks and their signs
    )  # fmt: skip
    stats.memory.budget_bytes = budget
    runner = planned.runner
    winding = WindingFill(
        resources.winding(), resources.scan(), resources.pool, resources.sequence, boundary,
        job.shape, stats,
    )  # fmt: skip

    def fill(work: SlabWork) -> FilledSlab:
        slab, grid = work.window, work.grid
        marks = winding.marks(slab)
        runner.voxelize(slab, grid, marks=marks)
        signed = winding.segments(slab, grid, marks)
        if signed is not None:
            if signed.flagged_tiles:  # two crossings share a mark there
                runner.voxelize(slab, grid, signed=signed)
            winding.finish(slab, grid, signed)
        return FilledSlab()

    return planned.plan, fill
