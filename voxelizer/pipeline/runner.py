"""Pipeline: one voxelization's GPU work, from a mesh in grid space to voxels and stats.

The API hands a `Job` (a checked mesh already placed in grid space, checked options) to
`Pipeline.dense` or `Pipeline.svo` (or, with face ids, `dense_faces` and `svo_faces`) and
gets the voxels and a `Stats` back; nothing in here reads files, validates user input or
knows the world placement.

The job's mode and fill mode choose its strategy (fills/: FILLS, fill_for), which runs plan
-> slabs -> passes -> download (dense) or SVO build (svo) -> merge of slab forests. A dense
result comes back as the GPU's column words (grid.ColumnBits) where the GPU wrote the whole
grid (parity, winding, the surface modes), as a bool array where the host combined several
runs (vote, union).

A Pipeline owns the device's resources (buffers, command sequence, the kernels built so far:
resources.py). It runs one job at a time: callers serialize (the Voxelizer holds a lock).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from ..gpu.device import Device
from ..grid import ColumnBits
from ..log import get_logger
from ..octree import OctreeSink, octree_solid
from ..stats import Stats
from .face_ids import MarkedVoxels
from .fills import FillCall, fill_for, surface_for
from .fills.base import job_stats
from .gpu_grid import GpuGrid, on_gpu_grid, result_padding
from .job import Job
from .resources import Resources
from .slabs import svo_of_voxels
from .svo_build import OctreeArrays

_log = get_logger(__name__)
Result = TypeVar("Result")


class Pipeline:
    """The GPU side of a Voxelizer: its resources on the device, reused per job."""

    def __init__(self, device: Device):
        self.device = device
        self._resources = Resources(device)

    def dense(self, job: Job) -> tuple[ColumnBits | np.ndarray, Stats]:
        """The voxels of the job's mode (solid: set iff the centre is inside the mesh) of
        shape job.shape: the GPU's column words, or bool[i, j, k] (vote, union of several runs).
        The passes run on the grid gpu_grid.on_gpu_grid gives; the result is cut from it."""
        grid, inner = on_gpu_grid(job)
        voxels, stats = self._run(inner, fill_for(inner).dense)
        return grid.cut(voxels), _result_stats(stats, job)

    def svo(self, job: Job) -> tuple[OctreeArrays, Stats]:
        """The SVO arrays (nodes, bricks, level_offsets) of docs/svo-format.md, built on the
        device from the bit grid (which never leaves it in parity mode). A grid padded to
        whole tiles has the same octree (its padding stays empty); a crop's, and a vote's
        (whose padding may fill), is built from the result's voxels."""
        grid, inner = on_gpu_grid(job)
        if grid.same:
            return self._run(job, fill_for(job).svo)
        if not (grid.crops or job.fill_mode == "vote"):
            octree, stats = self._run(inner, fill_for(inner).svo)
            return octree, _result_stats(stats, job)

        def from_result(call: FillCall) -> OctreeArrays:
            voxels = grid.cut(fill_for(inner).dense(call))
            return _svo_of_result(call, job, grid, voxels)

        octree, stats = self._run(inner, from_result)
        return octree, _result_stats(stats, job)

    def svo_into(self, job: Job, sink: OctreeSink) -> Stats:
        """The SVO written into `sink` as it is made (an .svo file, where the octree is to stay
        out of memory: the sparse path of large grids streams it there level by level)."""
        grid, inner = on_gpu_grid(job)
        if not inner.sparse_grid or grid.crops:
            (nodes, bricks, level_offsets), stats = self.svo(job)
            sink.begin(level_offsets, len(bricks), octree_solid(nodes, bricks, level_offsets))
            sink.nodes(nodes)
            sink.bricks(bricks)
            return stats
        _, stats = self._run(inner, lambda call: fill_for(inner).svo_into(call, sink))
        return _result_stats(stats, job)

    def dense_faces(self, job: Job) -> tuple[ColumnBits | np.ndarray, np.ndarray, Stats]:
        """Modes "surface" and "both": the grid as `dense`, and int32[i, j, k] face
        ids: the smallest index of the triangles whose surface marks the voxel, -1 where
        none does (solid voxels of "both" inside the surface too)."""
        grid, inner = on_gpu_grid(job)
        (voxels, faces), stats = self._run(inner, surface_for(inner).dense_faces)
        return grid.cut(voxels), grid.cut_array(faces), _result_stats(stats, job)

    def svo_faces(self, job: Job) -> tuple[OctreeArrays, MarkedVoxels, Stats]:
        """Modes "surface" and "both": the SVO arrays as `svo`, and the voxels that carry a
        face id with their ids, gathered slab by slab from the device's face-id grid (a
        crop's, and a vote's, from the result's voxels)."""
        grid, inner = on_gpu_grid(job)
        if not (grid.crops or job.fill_mode == "vote"):  # the surface pass marks no padding
            (octree, marked), stats = self._run(inner, surface_for(inner).svo_faces)
            return octree, marked, _result_stats(stats, job)

        def from_result(call: FillCall) -> tuple[OctreeArrays, MarkedVoxels]:
            voxels, faces = surface_for(inner).dense_faces(call)
            octree = _svo_of_result(call, job, grid, grid.cut(voxels))
            return octree, MarkedVoxels.of_grid(grid.cut_array(faces))

        (octree, marked), stats = self._run(inner, from_result)
        return octree, marked, _result_stats(stats, job)

    def prepare(self, variant: str, sort: str, svo: bool) -> threading.Thread | None:
        """Start building the kernels a parity job of this kind dispatches, on a background
        thread (Resources.prepare): that thread, None where they are built."""
        return self._resources.prepare(variant, sort, svo)

    def close(self) -> None:
        """Wait for the background builds and the device, then free every kernel and buffer
        (the device stays open)."""
        self._resources.close()

    def _run(self, job: Job, work: Callable[[FillCall], Result]) -> tuple[Result, Stats]:
        """`work` on the job, with its stats: the buffers' growth during the call too."""
        pool = self._resources.pool
        growth_at_start = pool.growth_ms
        stats = job_stats(job, self.device.name)
        result = work(FillCall(self._resources, job, stats))
        growth = pool.growth_ms - growth_at_start
        if growth:  # (within the steps that grew them: upload, the submissions)
            stats.add_host(buffer_growth=growth)
        stats.memory.device_buffers = pool.sizes(host_visible=False)
        stats.memory.staging_buffers = pool.sizes(host_visible=True)
        if _log.isEnabledFor(logging.DEBUG):  # (reading the GPU times costs a device read)
            _log.debug("GPU ms: %s, total %.3f", _ms(stats.gpu_ms), stats.gpu_total_ms)
        return result, stats


def _result_stats(stats: Stats, job: Job) -> Stats:
    """The run's stats, naming the result's shape (the passes may have run on a larger)."""
    stats.shape = job.shape
    return stats


def _svo_of_result(
    call: FillCall, job: Job, grid: GpuGrid, voxels: ColumnBits | np.ndarray
) -> OctreeArrays:
    """The octree of the result's voxels (of job.shape), built on the device from them
    padded to whole tiles: the same tree (the same P, the padding empty)."""
    shape = result_padding(job.shape)
    clean = not isinstance(voxels, ColumnBits) or voxels.clean_padding
    words = ColumnBits(grid.padded_words(voxels), shape, clean_padding=clean)
    return svo_of_voxels(call.resources, words, shape, call.stats, max_memory=job.max_memory)


def _ms(times: dict[str, float]) -> str:
    """Milliseconds by label on one line, for the log."""
    return ", ".join(f"{label} {ms:.3f}" for label, ms in times.items())
