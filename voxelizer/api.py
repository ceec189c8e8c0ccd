"""The Python API: a Voxelizer holds a device and its pipelines; voxelize_dense uses a shared one."""

from __future__ import annotations

import atexit
import dataclasses
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .errors import FillModeError, MeshError, OpenMeshWarning
from .gpu.buffers import BufferPool
from .gpu.commands import Binding, Sequence
from .gpu.device import Device
from .grid import DenseGrid, pack_columns, unpack_columns
from .mesh import Mesh, MeshLike, load_mesh
from .pipeline.merge import merge_forests
from .pipeline.passes import (
    DEFAULT_SORT,
    DEFAULT_VARIANT,
    PassPipelines,
    PassRunner,
    PassStats,
    Window,
    check_sort,
    check_variant,
)
from .pipeline.plan import make_plan, parse_budget
from .pipeline.svo_build import Forest, SVOArrays, SVOPipelines, build_svo_on_gpu
from .placement import COLUMN_AXIS_ORDERS, GridLike, GridPlacement, check_resolution, check_shape
from .svo import SVO

FILL_MODES = ("parity", "vote")
VOTES_NEEDED = 4  # of six ray directions, in fill_mode="vote"
# Progress of long jobs: (stage, done, total), e.g. ("slabs", 3, 8); the CLI draws it.
Progress = Callable[[str, int, int], None]


class Voxelizer:
    """A Vulkan device with the voxelization pipelines, for voxelizing many meshes in one process.

    Pipelines are compiled on first use of a variant and reused; buffers grow as needed and are
    reused. One voxelization runs at a time per instance: calls from several threads are
    serialized by a lock (use one Voxelizer per thread for parallel work).
    """

    def __init__(self, device: str | int | None = None):
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

    def voxelize(
        self,
        mesh: MeshLike,
        grid: GridLike | None = None,
        variant: str = DEFAULT_VARIANT,
        fill_mode: str = "parity",
        sort: str = DEFAULT_SORT,
        *,
        voxel_size: float | None = None,
        bounds: np.typing.ArrayLike | None = None,
        max_memory: int | str | None = None,
        progress: Progress | None = None,
    ) -> SVO:
        """Solid voxelization as a sparse voxel octree, built on the GPU from the bit grid
        (which never leaves the device in parity mode). Grids larger than one buffer or the
        memory budget are voxelized and converted slab by slab.

        grid: N (the cube N^3) or (nx, ny, nz); or voxel_size instead (world units); neither:
        512^3. bounds: the box to place the grid on, [[xmin, ymin, zmin], [xmax, ymax, zmax]]
        (default: the mesh's bounding box; it must contain the mesh)."""
        job = self._prepare(
            mesh, grid, variant, fill_mode, sort, voxel_size, bounds, max_memory, progress
        )
        if fill_mode == "parity":
            arrays, stats = self._run(job, job.vertices, "svo")
        else:
            voxels, stats = self._vote(job)
            with self._lock:
                svo_arrays = self._build_svo(Forest.whole_grid(job.shape), pack_columns(voxels))
            arrays = (svo_arrays.nodes, svo_arrays.bricks, svo_arrays.level_offsets)
            _add_times(stats["gpu_ms"], svo_arrays.gpu_ms)
            _add_times(stats["host_ms"], svo_arrays.host_ms)
        svo = SVO(*arrays, job.placement, job.finish(stats), verify=False)
        stats["counts"]["solid_voxels"] = svo.count()
        return svo

    def voxelize_dense(
        self,
        mesh: MeshLike,
        grid: GridLike | None = None,
        variant: str = DEFAULT_VARIANT,
        fill_mode: str = "parity",
        sort: str = DEFAULT_SORT,
        *,
        voxel_size: float | None = None,
        bounds: np.typing.ArrayLike | None = None,
        max_memory: int | str | None = None,
        progress: Progress | None = None,
    ) -> DenseGrid:
        """Solid voxelization on a dense grid: voxel set iff its centre is inside the mesh.
        Arguments as for voxelize."""
        job = self._prepare(
            mesh, grid, variant, fill_mode, sort, voxel_size, bounds, max_memory, progress
        )
        if fill_mode == "parity":
            voxels, stats = self._run(job, job.vertices, "dense")
        else:
            voxels, stats = self._vote(job)
        stats["counts"]["solid_voxels"] = int(np.count_nonzero(voxels))
        return DenseGrid(voxels, job.placement, job.finish(stats))

    def voxelize_grid(
        self,
        grid_vertices: np.ndarray,
        faces: np.ndarray,
        grid: int,
        variant: str = DEFAULT_VARIANT,
        sort: str = DEFAULT_SORT,
        *,
        max_memory: int | str | None = None,
    ) -> np.ndarray:
        """The same voxelization for vertices already in grid space (float32 in [0, N]):
        bool[i, j, k]. This is where the placement rule ends and the exact contract begins."""
        check_variant(variant)
        check_sort(sort)
        n = check_resolution(grid)
        vertices = np.asarray(grid_vertices, np.float32)
        if (
            vertices.ndim != 2
            or vertices.shape[1] != 3
            or not np.isfinite(vertices).all()
            or vertices.min(initial=0) < 0
            or vertices.max(initial=0) > n
        ):
            raise MeshError(f"grid-space vertices must be a finite (V, 3) array inside [0, {n}]")
        checked = load_mesh((vertices.astype(np.float64), faces))  # validates the faces
        job = _Job(
            checked,
            None,
            vertices,
            (n, n, n),
            variant,
            sort,
            "parity",
            {},
            {},
            parse_budget(max_memory),
            None,
        )
        voxels, _ = self._run(job, vertices, "dense")
        return voxels

    def _prepare(
        self,
        mesh: MeshLike,
        grid: GridLike | None,
        variant: str,
        fill_mode: str,
        sort: str,
        voxel_size: float | None = None,
        bounds=None,
        max_memory=None,
        progress=None,
    ) -> _Job:
        check_variant(variant)
        check_sort(sort)
        if grid is not None:
            check_shape(grid)  # before loading the mesh
        if fill_mode not in FILL_MODES:
            raise FillModeError(
                f"unknown fill mode {fill_mode!r} (choose from {', '.join(FILL_MODES)})"
            )
        started = time.perf_counter()
        loaded = load_mesh(mesh)
        load_ms = (time.perf_counter() - started) * 1e3
        started = time.perf_counter()
        topology = loaded.topology
        check_ms = (time.perf_counter() - started) * 1e3
        if not topology.closed:
            boundary, nonmanifold = topology.boundary_edges, topology.nonmanifold_edges
            advice = (
                "voting between six ray directions decides the voxels near the gaps"
                if fill_mode == "vote"
                else "voxels near the gaps follow the parity rule "
                "but may not be what you want; fill_mode='vote' repairs small holes"
            )
            warnings.warn(
                f"the mesh is not closed ({boundary:,} boundary and {nonmanifold:,} "
                f"non-manifold edges): {advice}",
                OpenMeshWarning,
                stacklevel=3,
            )
        placement = GridPlacement.fit(loaded, grid, voxel_size, bounds)
        return _Job(
            loaded,
            placement,
            placement.grid_vertices(loaded.vertices),
            placement.shape,
            variant,
            sort,
            fill_mode,
            {"load": load_ms, "check_topology": check_ms},
            dataclasses.asdict(topology),
            parse_budget(max_memory),
            progress,
        )

    def _vote(self, job: _Job) -> tuple[np.ndarray, dict]:
        """Parity along the six axis directions; a voxel is kept where at least four agree.

        Counting crossings from the other end of a column (the mesh mirrored along it) gives a
        different answer exactly where a ray passes through a hole, so the six rays out of a
        voxel near a hole mostly outvote the few that leak."""
        votes = np.zeros(job.shape, np.uint8)
        stats: dict = {}
        for order in COLUMN_AXIS_ORDERS:
            for mirrored in (False, True):
                vertices = job.vertices[:, order]  # a copy
                shape = tuple(job.shape[axis] for axis in order)
                if mirrored:
                    vertices[:, 2] = np.float32(shape[2]) - vertices[:, 2]
                solid, axis_stats = self._run(job, vertices, "dense", shape, whole_only=True)
                votes += (solid[:, :, ::-1] if mirrored else solid).transpose(np.argsort(order))
                if not stats:
                    stats = axis_stats
                else:
                    _add_times(stats["gpu_ms"], axis_stats["gpu_ms"])
                    _add_times(stats["host_ms"], axis_stats["host_ms"])
        return votes >= VOTES_NEEDED, stats

    def _run(
        self,
        job: _Job,
        vertices: np.ndarray,
        output: str,
        shape: tuple[int, int, int] | None = None,
        whole_only: bool = False,
    ):
        """Voxelize grid-space `vertices` (job's faces) into the bool grid (output "dense") or
        the SVO arrays ("svo"), slab by slab when the plan says so."""
        shape = job.shape if shape is None else shape
        with self._lock:
            if self._closed:
                raise RuntimeError("this Voxelizer is closed")
            pipelines = self.pipelines(job.variant)
            plan = make_plan(
                self.device,
                shape,
                len(job.mesh.faces),
                len(vertices),
                pipelines.indexed,
                job.max_memory,
                svo=output == "svo",
                dense=output == "dense",
                whole_only=whole_only,
            )
            runner = PassRunner(
                self.device,
                pipelines,
                self._pool,
                self._sequence,
                vertices,
                job.mesh.indices,
                job.sort,
                plan.batch_triangles,
                plan.pair_budget,
            )
            slabs = plan.slabs()
            voxels = np.zeros(shape, bool) if output == "dense" else None
            forests = []
            for index, slab in enumerate(slabs):
                grid = Binding(self._pool.get("grid", slab.grid_bytes), slab.grid_bytes)
                runner.voxelize(slab, grid)
                if output == "dense":
                    voxels[:, slab.row_lo : slab.row_hi] = self._download(runner.stats, slab, grid)
                else:
                    forest = plan.forest(slab)
                    arrays = self._build_svo(forest)
                    runner.stats.add_times(arrays.gpu_ms, **arrays.host_ms)
                    forests.append((forest.cube_y, arrays))
                if job.progress is not None and len(slabs) > 1:
                    job.progress("slabs", index + 1, len(slabs))
        result = voxels
        if output == "svo":
            started = time.perf_counter()
            if plan.whole:
                arrays = forests[0][1]
                result = (arrays.nodes, arrays.bricks, arrays.level_offsets)
            else:
                result = merge_forests(shape, plan.slab_rows, forests)
            runner.stats.add_times(svo_merge=(time.perf_counter() - started) * 1e3)
        counts = runner.stats.counts
        counts["slab_rows"] = plan.slab_rows
        counts["triangle_batch"] = plan.batch_triangles
        stats = {
            "device": self.device.name,
            "variant": job.variant,
            "sort": job.sort,
            "shape": list(shape),
            "gpu_ms": runner.stats.gpu_ms,
            "host_ms": runner.stats.host_ms,
            "counts": counts,
            "memory": {
                "budget_bytes": plan.budget,
                "device_buffers": self._pool.sizes(host_visible=False),
                "staging_buffers": self._pool.sizes(host_visible=True),
            },
        }
        memory = stats["memory"]
        memory["device_peak_bytes"] = sum(memory["device_buffers"].values())
        memory["staging_peak_bytes"] = sum(memory["staging_buffers"].values())
        return result, stats

    def _download(self, stats: PassStats, slab: Window, grid: Binding) -> np.ndarray:
        """The slab's bits, unpacked to bool[i, j - row_lo, k]."""
        started = time.perf_counter()
        self._sequence.begin()
        self._sequence.mark("start")
        staging = self._sequence.download(grid.buffer, slab.grid_bytes)
        self._sequence.mark("download")
        stats.add_times(self._sequence.submit())
        words = staging.read(np.uint32, slab.grid_bytes // 4)
        voxels = unpack_columns(words, (slab.nx, slab.row_hi - slab.row_lo, slab.nz))
        stats.add_times(download=(time.perf_counter() - started) * 1e3)
        return voxels

    def _build_svo(self, forest: Forest, words: np.ndarray | None = None) -> SVOArrays:
        """SVO arrays of the grid on the device (or `words`, uploaded); caller holds the lock."""
        if self._svo_pipelines is None:
            self._svo_pipelines = SVOPipelines(self.device)
        scan = self.pipelines(DEFAULT_VARIANT)  # the scan pipelines are the same in every variant
        return build_svo_on_gpu(
            self.device, scan, self._svo_pipelines, self._pool, self._sequence, forest, words
        )

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

    def __enter__(self) -> Voxelizer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class _Job:
    """A loaded, checked and placed mesh, ready for the passes."""

    mesh: Mesh
    placement: GridPlacement | None
    vertices: np.ndarray  # float32 grid space
    shape: tuple[int, int, int]
    variant: str
    sort: str
    fill_mode: str
    host_ms: dict
    counts: dict
    max_memory: int | None
    progress: Progress | None

    def finish(self, stats: dict) -> dict:
        stats["host_ms"] = {**self.host_ms, **stats["host_ms"]}
        stats["counts"].update(self.counts)
        stats["fill_mode"] = self.fill_mode
        stats["shape"] = list(self.shape)  # the job's, also after vote's rotated runs
        return stats


def _add_times(total: dict[str, float], times: dict[str, float]) -> None:
    for label, ms in times.items():
        total[label] = total.get(label, 0.0) + ms


_shared: dict[str, Voxelizer] = {}
_shared_lock = threading.Lock()


def shared_voxelizer(device: str | int | None = None) -> Voxelizer:
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


def voxelize(
    mesh: MeshLike,
    grid: GridLike | None = None,
    variant: str = DEFAULT_VARIANT,
    device: str | int | None = None,
    fill_mode: str = "parity",
    sort: str = DEFAULT_SORT,
    *,
    voxel_size: float | None = None,
    bounds: np.typing.ArrayLike | None = None,
    max_memory: int | str | None = None,
    progress: Progress | None = None,
) -> SVO:
    """Solid voxelization of `mesh` on the GPU as a sparse voxel octree (see Voxelizer.voxelize)."""
    return shared_voxelizer(device).voxelize(
        mesh,
        grid,
        variant,
        fill_mode,
        sort,
        voxel_size=voxel_size,
        bounds=bounds,
        max_memory=max_memory,
        progress=progress,
    )


def voxelize_dense(
    mesh: MeshLike,
    grid: GridLike | None = None,
    variant: str = DEFAULT_VARIANT,
    device: str | int | None = None,
    fill_mode: str = "parity",
    sort: str = DEFAULT_SORT,
    *,
    voxel_size: float | None = None,
    bounds: np.typing.ArrayLike | None = None,
    max_memory: int | str | None = None,
    progress: Progress | None = None,
) -> DenseGrid:
    """Solid voxelization of `mesh` on the GPU as a DenseGrid (see Voxelizer.voxelize_dense)."""
    return shared_voxelizer(device).voxelize_dense(
        mesh,
        grid,
        variant,
        fill_mode,
        sort,
        voxel_size=voxel_size,
        bounds=bounds,
        max_memory=max_memory,
        progress=progress,
    )
