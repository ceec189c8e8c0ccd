"""What a fill mode's strategy is (`Fill`), what each call of it is given (`FillCall`), and the
passes and plan it asks for (`plan_passes`): the variant chosen, the kernels built, the mesh
taken as the passes read it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from ...choices import is_indexed, variant_candidates
from ...errors import MemoryBudgetError
from ...gpu.buffers import Binding
from ...grid import ColumnBits
from ...octree import OctreeSink, octree_solid
from ...placement import Shape, lattice_shift
from ...stats import Stats
from ..geometry import Geometry
from ..job import Job
from ..layout import Window
from ..passes import PassRunner
from ..plan import Plan, make_plan
from ..resources import Resources
from ..slabs import svo_of_voxels
from ..svo_build import OctreeArrays


@dataclass(frozen=True)
class FillCall:
    """One voxelization as a fill strategy runs it: the pipeline's resources on the device,
    the job, and the stats the work adds to."""

    resources: Resources
    job: Job
    stats: Stats

    def with_job(self, job: Job) -> FillCall:
        """The same call for another job (a part of the mesh, another mode), adding to the
        same stats."""
        return replace(self, job=job)

    def with_fresh_stats(self) -> FillCall:
        """The same call with stats of its own (a run whose counts are not all wanted)."""
        return replace(self, stats=job_stats(self.job, self.resources.device.name))


def job_stats(job: Job, device_name: str) -> Stats:
    """Empty stats that name the job's device, choices and grid."""
    return Stats(
        device=device_name,
        variant=job.variant,
        sort=job.sort,
        fill_mode=job.fill_mode,
        shape=job.shape,
        mode=job.mode,
        surface=job.surface if job.mode == "surface" else "",
    )


class Fill:
    """A fill mode: how the job's mesh becomes a solid, as the grid's bits (`dense`: the
    GPU's column words, or bools where the host combined several runs) or as SVO arrays.

    A new fill mode is a subclass in a file of its own under pipeline/fills/ and one line in
    FILLS (fills/__init__.py). It needs `dense` at least; the SVO defaults to the dense
    result uploaded slab by slab and converted on the device. A fill that leaves each slab's
    solid in the slab's grid with the passes that also run the surface pass (`in_slab`,
    `fill_slab`) lets mode "both" add the surface slab by slab on the device; otherwise the
    surface is united with its dense result on the host."""

    in_slab = False

    def dense(self, call: FillCall) -> ColumnBits | np.ndarray:
        raise NotImplementedError

    def svo(self, call: FillCall) -> OctreeArrays:
        job = call.job
        voxels = self.dense(call)
        return svo_of_voxels(
            call.resources, voxels, job.shape, call.stats, max_memory=job.max_memory
        )

    def svo_into(self, call: FillCall, sink: OctreeSink) -> None:
        """The SVO written into `sink` as it is made (an .svo file, for octrees larger than
        memory); by default the arrays of `svo`, handed over whole."""
        nodes, bricks, level_offsets = self.svo(call)
        sink.begin(level_offsets, len(bricks), octree_solid(nodes, bricks, level_offsets))
        sink.nodes(nodes)
        sink.bricks(bricks)

    def fill_slab(self, passes: PassRunner, slab: Window, grid: Binding) -> None:
        """Leave the solid of the slab's rows in `grid` (a fill that is `in_slab`)."""
        raise NotImplementedError(f"{type(self).__name__} fills no slab in place")


@dataclass(frozen=True)
class PlannedPasses:
    """The passes over a job's mesh and the memory plan they run by."""

    runner: PassRunner
    plan: Plan


def plan_passes(
    call: FillCall,
    *,
    shape: Shape,
    budget: int | None,
    dense: bool,
    vertices: np.ndarray | None = None,
    fine: np.ndarray | None = None,
    surface_kind: str | None = None,
    whole_only: bool = False,
    voxel_bytes: int = 0,
    exact: bool = True,
    grid_planes: int = 1,
) -> PlannedPasses:
    """The passes over the job's mesh (or over other grid-space `vertices` and their `fine`
    ones, e.g. mirrored) on a grid of `shape`, with the surface kernels of `surface_kind` if
    given, and their plan (make_plan's, for a dense result or an SVO). The variant is the
    first of the job's candidates whose plan fits the budget (the last one's plan says what
    fits nowhere); it is the one the stats name."""
    job, resources, stats = call.job, call.resources, call.stats

    def plan(variant: str) -> Plan:
        return make_plan(
            resources.device, shape, triangles=job.mesh.triangle_count,
            vertices=len(job.vertices), indexed=is_indexed(variant), budget=budget,
            svo=not dense, dense=dense, whole_only=whole_only, voxel_bytes=voxel_bytes,
            exact=exact, grid_planes=grid_planes,
        )  # fmt: skip

    candidates = variant_candidates(job.variant, resources.device.is_cpu)
    for variant in candidates[:-1]:
        try:
            made = plan(variant)
        except MemoryBudgetError:
            continue  # the next candidate holds less
        break
    else:
        variant = candidates[-1]
        made = plan(variant)
    passes = resources.passes(variant)
    stats.variant = variant
    stats.memory.budget_bytes = made.budget
    stats.count_max(slab_rows=made.slab_rows, triangle_batch=made.batch_triangles)
    surface = None if surface_kind is None else resources.surface(variant, surface_kind)
    geometry = job_geometry(call, vertices, fine, indexed=passes.indexed)
    runner = PassRunner(
        resources.device, passes, resources.scan(), resources.pool, resources.sequence,
        geometry, sort=job.sort, batch_triangles=made.batch_triangles,
        pair_budget=made.pair_budget, stats=stats, surface=surface,
        replays=resources.replays if len(made.slabs()) == 1 else None,
    )  # fmt: skip
    return PlannedPasses(runner, made)


def job_geometry(
    call: FillCall, vertices: np.ndarray | None, fine: np.ndarray | None, *, indexed: bool
) -> Geometry:
    """The job's mesh as the passes take it (or its other `vertices` and `fine` ones): the
    faces as the variant takes them (uint32 for the indexed variants, which upload them,
    converted once per Mesh; the int64 faces themselves for the soup gather, with their
    read-only view standing for them, or the uint32 ones where the soup was made before),
    and the per-Mesh caches the exact fill reads."""
    job, stats = call.job, call.stats
    mesh = job.mesh
    own = vertices is None and fine is None
    soup = job.soup if own and not indexed else None
    faces, faces_key = mesh.faces, mesh.frozen_faces
    if indexed or (soup is not None and mesh.made_indices is not None):
        # (with a soup made, the faces serve only as the fill's uint32 indices: copied as
        # they are from the uint32 ones where those were made with the mesh)
        faces = faces_key = mesh.indices
    fine = job.fine_vertices() if fine is None else fine
    started = time.perf_counter()
    geometry = Geometry(
        job.vertices if vertices is None else vertices, faces, indexed=indexed, fine=fine,
        used=mesh.used, faces_key=faces_key, known_gap=job.fixed_gap if own else None,
        soup=soup, shift=lattice_shift(job.shape),
    )  # fmt: skip
    stats.add_host(prepare=(time.perf_counter() - started) * 1e3)
    stats.count(triangles=geometry.triangles)
    return geometry
