"""The Python API: a Voxelizer holds a device and its pipelines; voxelize_dense uses a shared one."""

from __future__ import annotations

import atexit
import threading
import time

from .grid import DenseGrid, unpack_columns
from .gpu.buffers import BufferPool
from .gpu.commands import Sequence
from .gpu.device import Device
from .mesh import MeshLike, load_mesh
from .passes import DEFAULT_VARIANT, PassPipelines, check_variant, run_passes
from .placement import GridPlacement, check_resolution


class Voxelizer:
    """A Vulkan device with the voxelization pipelines, for voxelizing many meshes in one process.

    Pipelines are compiled on first use of a variant and reused; buffers grow as needed and are
    reused. One voxelization runs at a time per instance: calls from several threads are
    serialized by a lock (use one Voxelizer per thread for parallel work).
    """

    def __init__(self, device: "str | int | None" = None):
        self.device = Device(device)
        self._pool = BufferPool(self.device)
        self._sequence = Sequence(self.device, self._pool)
        self._pipelines: dict[str, PassPipelines] = {}
        self._lock = threading.Lock()
        self._closed = False

    @property
    def device_name(self) -> str:
        return self.device.name

    def pipelines(self, variant: str) -> PassPipelines:
        check_variant(variant)
        if variant not in self._pipelines:
            self._pipelines[variant] = PassPipelines(self.device, variant)
        return self._pipelines[variant]

    def voxelize_dense(self, mesh: MeshLike, grid: int = 512,
                       variant: str = DEFAULT_VARIANT) -> DenseGrid:
        """Solid voxelization on an N^3 grid: voxel set iff its centre is inside the mesh."""
        check_variant(variant)
        n = check_resolution(grid)
        started = time.perf_counter()
        loaded = load_mesh(mesh)
        load_ms = (time.perf_counter() - started) * 1e3
        placement = GridPlacement.fit(loaded, n)
        vertices = placement.grid_vertices(loaded.vertices)
        with self._lock:
            if self._closed:
                raise RuntimeError("this Voxelizer is closed")
            result = run_passes(self.device, self.pipelines(variant), self._pool,
                                self._sequence, vertices, loaded.faces, n)
        started = time.perf_counter()
        voxels = unpack_columns(result.words, n)
        unpack_ms = (time.perf_counter() - started) * 1e3
        stats = {
            "device": self.device.name,
            "variant": variant,
            "grid": n,
            "gpu_ms": result.gpu_ms,
            "host_ms": {"load": load_ms, **result.host_ms, "unpack": unpack_ms},
            "counts": result.counts,
            "buffer_bytes": result.buffer_bytes,
        }
        return DenseGrid(voxels, placement, stats)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.device.wait_idle()
            for pipelines in self._pipelines.values():
                pipelines.destroy()
            self._sequence.destroy()
            self._pool.destroy()
            self.device.close()

    def __enter__(self) -> "Voxelizer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_shared: dict[str, Voxelizer] = {}
_shared_lock = threading.Lock()


def shared_voxelizer(device: "str | int | None" = None) -> Voxelizer:
    """One Voxelizer per device selector per process, closed at exit."""
    key = "" if device is None else str(device)
    with _shared_lock:
        if key not in _shared:
            if not _shared:
                atexit.register(close_shared)
            _shared[key] = Voxelizer(device)
        return _shared[key]


def close_shared() -> None:
    with _shared_lock:
        for voxelizer in _shared.values():
            voxelizer.close()
        _shared.clear()


def voxelize_dense(mesh: MeshLike, grid: int = 512, variant: str = DEFAULT_VARIANT,
                   device: "str | int | None" = None) -> DenseGrid:
    """Solid voxelization of `mesh` on the GPU as a DenseGrid (see Voxelizer.voxelize_dense)."""
    return shared_voxelizer(device).voxelize_dense(mesh, grid, variant)
