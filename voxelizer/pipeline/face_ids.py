"""Face ids back from the device: each slab's face-id grid (shaders/surface.comp, FACE_IDS)
as the sparse list of the voxels that hold an id.

For the SVO, shaders/face_gather.comp counts the marked voxels of every run of GATHER_ITEMS
ids, the scan places each run's, and only those (voxel, id) pairs come back: 8 bytes per
marked voxel instead of 4 per voxel of the slab. When more than about a quarter of the slab is marked (tiny grids of
dense meshes), the pairs would need more memory than the plan gave the ids' staging copy,
and the whole grid comes back instead (`download_marked`); the result is the same.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..gpu.buffers import Binding, BufferPool
from ..gpu.commands import Sequence, workgroups
from ..gpu.device import Device
from ..gpu.kernels import COMMON_DEFINES, WG_SIZE
from ..gpu.pipelines import ComputePipeline
from ..gpu.scan import Scan
from ..stats import Stats
from . import kernels
from .layout import FACE_ID_BYTES, Window

MARKED_BYTES = 8  # per gathered voxel: its index in the slab and its id (uvec2)


@dataclass(frozen=True)
class MarkedVoxels:
    """The surface voxels that carry a face id, sparse: int64 (M, 3) [i, j, k] and int32 (M,)
    ids, the smallest index of the triangles that mark each."""

    voxels: np.ndarray
    ids: np.ndarray

    @staticmethod
    def of_grid(faces: np.ndarray) -> MarkedVoxels:
        """The marked voxels of int32 face ids [i, j, k] (-1: none)."""
        flat = np.flatnonzero(faces.reshape(-1) >= 0)
        voxels = np.stack(np.unravel_index(flat, faces.shape), axis=1).astype(np.int64)
        return MarkedVoxels(voxels, faces.reshape(-1)[flat].astype(np.int32))

    @staticmethod
    def of_slab(indices: np.ndarray, ids: np.ndarray, slab: Window) -> MarkedVoxels:
        """Voxels given by their index in the slab's face-id grid ((row * nx + i) * nz + k,
        rows counted from slab.row_lo), with their ids."""
        column, k = np.divmod(indices.astype(np.int64), slab.nz)
        row, i = np.divmod(column, slab.nx)
        voxels = np.stack([i, row + slab.row_lo, k], axis=1)
        return MarkedVoxels(voxels, ids.astype(np.int32))

    @staticmethod
    def joined(parts: list[MarkedVoxels]) -> MarkedVoxels:
        if not parts:
            return MarkedVoxels(np.zeros((0, 3), np.int64), np.zeros(0, np.int32))
        return MarkedVoxels(
            np.concatenate([part.voxels for part in parts]),
            np.concatenate([part.ids for part in parts]),
        )

    def scatter(self, faces: np.ndarray) -> None:
        """Write the ids into int32 face ids [i, j, k]."""
        faces[tuple(self.voxels.T)] = self.ids


class FaceGather:
    """The two gathering kernels, built once per device (the scan between them is Scan)."""

    def __init__(self, device: Device):
        self.count = ComputePipeline(device, kernels.COUNT_FACES, COMMON_DEFINES)
        self.gather = ComputePipeline(device, kernels.GATHER_FACES, COMMON_DEFINES)

    def destroy(self) -> None:
        self.count.destroy()
        self.gather.destroy()


def gather_marked(
    sequence: Sequence,
    pool: BufferPool,
    scan: Scan,
    gather: FaceGather,
    slab: Window,
    ids: Binding,
    stats: Stats,
) -> MarkedVoxels:
    """The slab's marked voxels, gathered on the device (two submissions: count and scan,
    whose total sizes the pairs; then the pairs)."""
    voxel_count = slab.nx * (slab.row_hi - slab.row_lo) * slab.nz
    grid_bytes = voxel_count * FACE_ID_BYTES
    threads = voxel_count // kernels.GATHER_ITEMS  # nx and nz are multiples of 4
    push = {"threads": threads}
    groups = workgroups(threads, WG_SIZE)
    counts_bytes = workgroups(threads, 4) * 16  # whole quads: the scan moves quads
    counts = pool.binding("face_counts", counts_bytes)
    sequence.begin()
    sequence.mark("start")
    sequence.dispatch(gather.count, {"face_ids": ids, "counts": counts}, push, groups)
    sequence.barrier()
    total = scan.record(sequence, pool, counts.buffer, threads, "face_counts")
    sequence.mark("face_count")
    total_staging = sequence.download(total, 4)
    stats.add_gpu(sequence.submit())
    marked_count = int(total_staging.read(np.uint32, 1)[0])
    if 2 * MARKED_BYTES * marked_count + counts_bytes > grid_bytes:
        return download_marked(sequence, slab, ids, stats)  # within the plan's staging copy
    stats.count(face_ids=marked_count)
    if marked_count == 0:
        return MarkedVoxels.joined([])
    started = time.perf_counter()
    marked = pool.binding("marked_faces", marked_count * MARKED_BYTES)
    sequence.begin()
    sequence.mark("start")
    bound = {"face_ids": ids, "counts": counts, "marked": marked}
    sequence.dispatch(gather.gather, bound, push, groups)
    sequence.barrier()
    sequence.mark("face_gather")
    staging = sequence.download(marked.buffer, marked_count * MARKED_BYTES)
    sequence.mark("download")
    stats.add_gpu(sequence.submit())
    pairs = staging.read(np.uint32, 2 * marked_count).reshape(-1, 2)
    result = MarkedVoxels.of_slab(pairs[:, 0], pairs[:, 1].view(np.int32), slab)
    stats.add_host(download=(time.perf_counter() - started) * 1e3)
    return result


def download_marked(sequence: Sequence, slab: Window, ids: Binding, stats: Stats) -> MarkedVoxels:
    """The slab's marked voxels from its whole face-id grid, read back."""
    started = time.perf_counter()
    size = slab.nx * (slab.row_hi - slab.row_lo) * slab.nz
    sequence.begin()
    sequence.mark("start")
    staging = sequence.download(ids.buffer, size * FACE_ID_BYTES)
    sequence.mark("download")
    stats.add_gpu(sequence.submit())
    words = staging.read(np.int32, size)
    indices = np.flatnonzero(words >= 0)
    result = MarkedVoxels.of_slab(indices, words[indices], slab)
    stats.count(face_ids=len(indices))
    stats.add_host(download=(time.perf_counter() - started) * 1e3)
    return result
