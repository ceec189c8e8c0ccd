"""The Python API: a Voxelizer holds a device and its pipelines; voxelize_dense uses a shared one."""

from __future__ import annotations

import atexit
import threading
import time
from typing import TYPE_CHECKING

import numpy as np

from .errors import MeshError
from .grid import DenseGrid, unpack_columns
from .gpu.buffers import BufferPool
from .gpu.commands import Sequence
from .gpu.device import Device
from .mesh import MeshLike, load_mesh
from .passes import DEFAULT_VARIANT, PassPipelines, check_variant, run_passes
from .placement import GridPlacement, check_resolution
from .svo_gpu import SVOPipelines, build_svo_on_gpu

if TYPE_CHECKING:
    from .svo import SVO


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
        self._svo_pipelines: SVOPipelines | None = None
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

    def voxelize(self, mesh: MeshLike, grid: int = 512, variant: str = DEFAULT_VARIANT) -> "SVO":
        """Solid voxelization as a sparse voxel octree, built on the GPU from the bit grid
        (which never leaves the device)."""
        loaded, placement, load_ms = self._prepare(mesh, grid, variant)
        arrays, stats = self._run(placement.grid_vertices(loaded.vertices), loaded.faces,
                                  placement.resolution, variant, build_svo=True)
        stats["host_ms"] = {"load": load_ms, **stats["host_ms"]}
        from .svo import SVO  # the object module imports trimesh-heavy exports lazily too

        svo = SVO(arrays.nodes, arrays.bricks, arrays.level_offsets, placement, stats)
        stats["counts"]["solid_voxels"] = svo.count()
        return svo

    def voxelize_dense(self, mesh: MeshLike, grid: int = 512,
                       variant: str = DEFAULT_VARIANT) -> DenseGrid:
        """Solid voxelization on an N^3 grid: voxel set iff its centre is inside the mesh."""
        loaded, placement, load_ms = self._prepare(mesh, grid, variant)
        n = placement.resolution
        words, stats = self._run(placement.grid_vertices(loaded.vertices), loaded.faces, n, variant)
        started = time.perf_counter()
        voxels = unpack_columns(words, n)
        stats["host_ms"] = {"load": load_ms, **stats["host_ms"],
                            "unpack": (time.perf_counter() - started) * 1e3}
        stats["counts"]["solid_voxels"] = int(np.count_nonzero(voxels))
        return DenseGrid(voxels, placement, stats)

    def voxelize_grid(self, grid_vertices: np.ndarray, faces: np.ndarray, grid: int,
                      variant: str = DEFAULT_VARIANT) -> np.ndarray:
        """The same voxelization for vertices already in grid space (float32 in [0, N]):
        bool[i, j, k]. This is where the placement rule ends and the exact contract begins."""
        check_variant(variant)
        n = check_resolution(grid)
        vertices = np.asarray(grid_vertices, np.float32)
        if vertices.ndim != 2 or vertices.shape[1] != 3 or not np.isfinite(vertices).all() \
                or vertices.min(initial=0) < 0 or vertices.max(initial=0) > n:
            raise MeshError(f"grid-space vertices must be a finite (V, 3) array inside [0, {n}]")
        checked = load_mesh((vertices.astype(np.float64), faces))  # validates the faces
        words, _ = self._run(vertices, checked.faces, n, variant)
        return unpack_columns(words, n)

    def _prepare(self, mesh: MeshLike, grid: int, variant: str):
        check_variant(variant)
        n = check_resolution(grid)
        started = time.perf_counter()
        loaded = load_mesh(mesh)
        load_ms = (time.perf_counter() - started) * 1e3
        return loaded, GridPlacement.fit(loaded, n), load_ms

    def _run(self, vertices: np.ndarray, faces: np.ndarray, n: int, variant: str,
             build_svo: bool = False):
        with self._lock:
            if self._closed:
                raise RuntimeError("this Voxelizer is closed")
            pipelines = self.pipelines(variant)
            result = run_passes(self.device, pipelines, self._pool, self._sequence, vertices,
                                faces, n, download_grid=not build_svo)
            output = result.words
            if build_svo:
                if self._svo_pipelines is None:
                    self._svo_pipelines = SVOPipelines(self.device)
                output = build_svo_on_gpu(self.device, pipelines, self._svo_pipelines,
                                          self._pool, self._sequence, n)
                result.gpu_ms.update(output.gpu_ms)
                result.host_ms.update(output.host_ms)
        stats = {
            "device": self.device.name,
            "variant": variant,
            "grid": n,
            "gpu_ms": result.gpu_ms,
            "host_ms": result.host_ms,
            "counts": result.counts,
            "memory": {
                "device_buffers": self._pool.sizes(host_visible=False),
                "staging_buffers": self._pool.sizes(host_visible=True),
            },
        }
        memory = stats["memory"]
        memory["device_peak_bytes"] = sum(memory["device_buffers"].values())
        memory["staging_peak_bytes"] = sum(memory["staging_buffers"].values())
        return output, stats

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.device.wait_idle()
            for pipelines in self._pipelines.values():
                pipelines.destroy()
            if self._svo_pipelines is not None:
                self._svo_pipelines.destroy()
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
            _shared[key] = Voxelizer(device)
            if len(_shared) == 1:
                atexit.register(close_shared)  # after the instance's handler, so it runs first
        return _shared[key]


def close_shared() -> None:
    with _shared_lock:
        for voxelizer in _shared.values():
            voxelizer.close()
        _shared.clear()


def voxelize(mesh: MeshLike, grid: int = 512, variant: str = DEFAULT_VARIANT,
             device: "str | int | None" = None) -> "SVO":
    """Solid voxelization of `mesh` on the GPU as a sparse voxel octree (see Voxelizer.voxelize)."""
    return shared_voxelizer(device).voxelize(mesh, grid, variant)


def voxelize_dense(mesh: MeshLike, grid: int = 512, variant: str = DEFAULT_VARIANT,
                   device: "str | int | None" = None) -> DenseGrid:
    """Solid voxelization of `mesh` on the GPU as a DenseGrid (see Voxelizer.voxelize_dense)."""
    return shared_voxelizer(device).voxelize_dense(mesh, grid, variant)
