"""Modes "surface" and "both": the voxels the triangles touch (conservative or thin), alone or
united with a fill's solid, with face ids if asked for.

"both" with a fill that fills slabs in place (parity) runs the fill and then the surface pass
on each slab's grid; with any other fill the solid comes back whole and the surface is
united with it on the host.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...grid import ColumnBits
from ..face_ids import MarkedVoxels, download_marked, gather_marked
from ..layout import FACE_ID_BYTES
from ..slabs import FilledSlab, SlabWork, run_slabs, svo_of_voxels
from ..svo_build import OctreeArrays
from .base import Fill, FillCall, PlannedPasses, plan_passes

Voxels = ColumnBits | np.ndarray  # words, or bools where the solid came back as bools


class Surface(Fill):
    """The surface pass slab by slab, after `solid`'s fill in each slab (mode "both" with a
    fill that is in_slab), or alone (mode "surface", and the surface of "both" with any
    other fill, united with that fill's dense solid)."""

    def __init__(self, solid: Fill | None):
        self.solid = solid  # mode "both": the fill the surface is added to; "surface": None

    def dense(self, call: FillCall) -> Voxels:
        voxels, _ = self._dense(call, face_ids=False)
        return voxels

    def svo(self, call: FillCall) -> OctreeArrays:
        if self._solid_apart():
            return self._svo_of(call, self.dense(call))
        slabs = self._slabs(call, dense=False, face_ids=False)
        return slabs.run_svo()

    def dense_faces(self, call: FillCall) -> tuple[Voxels, np.ndarray]:
        """The voxels as `dense`, and int32[i, j, k] face ids: the smallest index of the
        triangles whose surface marks the voxel, -1 where none does (solid voxels of "both"
        inside the surface too)."""
        voxels, faces = self._dense(call, face_ids=True)
        assert faces is not None  # asked for
        return voxels, faces

    def svo_faces(self, call: FillCall) -> tuple[OctreeArrays, MarkedVoxels]:
        """The SVO arrays as `svo`, and the voxels that carry a face id with their ids,
        gathered slab by slab from the device's face-id grid."""
        if self._solid_apart():
            voxels, faces = self.dense_faces(call)
            return self._svo_of(call, voxels), MarkedVoxels.of_grid(faces)
        slabs = self._slabs(call, dense=False, face_ids=True)
        octree = slabs.run_svo()
        return octree, MarkedVoxels.joined(slabs.marked)

    def _solid_apart(self) -> bool:
        """Whether the solid of "both" comes back whole, to be united on the host."""
        return self.solid is not None and not self.solid.in_slab

    def _dense(self, call: FillCall, *, face_ids: bool) -> tuple[Voxels, np.ndarray | None]:
        """The grid (words, or bools where the solid came back as bools), with face ids if
        asked."""
        job = call.job
        if self.solid is not None and not self.solid.in_slab:
            solid = self.solid.dense(call.with_job(replace(job, mode="solid")))
            alone = call.with_job(replace(job, mode="surface", surface="conservative"))
            slabs = Surface(None)._slabs(alone, dense=True, face_ids=face_ids)
            bits = slabs.run_dense()
            union = bits | solid if isinstance(solid, ColumnBits) else bits.to_numpy() | solid
            return union, _dense_faces(job.shape, slabs.marked) if face_ids else None
        slabs = self._slabs(call, dense=True, face_ids=face_ids)
        voxels = slabs.run_dense()
        return voxels, _dense_faces(job.shape, slabs.marked) if face_ids else None

    def _slabs(self, call: FillCall, *, dense: bool, face_ids: bool) -> _SurfaceSlabs:
        """The surface (after the solid's fill, where there is one) slab by slab as the plan
        says, with `face_ids` each slab's voxels that carry one (sparse, so an SVO's never
        need the dense grid on the host)."""
        job, solid = call.job, self.solid
        planned = plan_passes(
            call, shape=job.shape, budget=job.max_memory, dense=dense,
            surface_kind="conservative" if solid is not None else job.surface,
            voxel_bytes=FACE_ID_BYTES if face_ids else 0,
            exact=solid is not None,  # the fill runs too
        )  # fmt: skip
        return _SurfaceSlabs(call, planned, solid, face_ids=face_ids)

    def _svo_of(self, call: FillCall, voxels: Voxels) -> OctreeArrays:
        job = call.job
        return svo_of_voxels(
            call.resources, voxels, job.shape, call.stats, max_memory=job.max_memory
        )


class _SurfaceSlabs:
    """The slabs of one surface run: each slab's fill (the solid's, if any) and surface pass,
    and the face ids marked so far (`marked`, one entry per slab, with face ids)."""

    def __init__(
        self, call: FillCall, planned: PlannedPasses, solid: Fill | None, *, face_ids: bool
    ):
        self.call, self.planned, self.solid, self.face_ids = call, planned, solid, face_ids
        self.marked: list[MarkedVoxels] = []

    def run_dense(self) -> ColumnBits:
        call = self.call
        plan, progress = self.planned.plan, call.job.progress
        return run_slabs(call.resources, plan, call.stats, self.fill, dense=True, progress=progress)

    def run_svo(self) -> OctreeArrays:
        call = self.call
        plan, progress = self.planned.plan, call.job.progress
        return run_slabs(
            call.resources, plan, call.stats, self.fill, dense=False, progress=progress
        )

    def fill(self, work: SlabWork) -> FilledSlab:
        """One slab: the solid's fill, the surface pass, the face ids back."""
        job, resources, stats = self.call.job, self.call.resources, self.call.stats
        runner, slab, grid = self.planned.runner, work.window, work.grid
        ids = None
        if self.face_ids:
            size = slab.nx * slab.rows * slab.nz * FACE_ID_BYTES
            ids = resources.pool.binding("face_ids", size)
        if self.solid is not None:
            self.solid.fill_slab(runner, slab, grid)
        else:
            stats.count(slabs=1)
        columns = job.columns or (job.shape[0], job.shape[1])
        runner.voxelize_surface(
            slab, grid, grid_columns=columns, clear=self.solid is None, face_ids=ids
        )
        if ids is not None and work.download:
            self.marked.append(download_marked(resources.sequence, slab, ids, stats))
        elif ids is not None:
            scan, gather = resources.scan(), resources.face_gather()
            self.marked.append(
                gather_marked(resources.sequence, resources.pool, scan, gather, slab, ids, stats)
            )
        return FilledSlab()


def _dense_faces(shape: tuple[int, int, int], parts: list[MarkedVoxels]) -> np.ndarray:
    """int32[i, j, k] face ids of the marked voxels, -1 elsewhere."""
    faces = np.full(shape, -1, np.int32)
    for part in parts:
        part.scatter(faces)
    return faces
