"""The Python API: input handling, placement, and wrapping the pipeline's voxels as results.

`Voxelizer` holds a device and its `Pipeline`; the module functions use one shared Voxelizer
per device. A call checks its options once (`Options`), loads and checks the mesh, places
the grid, hands the pipeline a `Job`, wraps what comes back as an `SVO` or a `DenseGrid`
with its `Stats`, and warns from the fill's column counts where parity may not mean what
the user wants (an open surface, overlapping parts). The edge-level report of a mesh is
`check_mesh`, asked for explicitly: it is a host pass over every edge.

A Voxelizer belongs to the process that created it: Vulkan objects do not survive a fork, so
in another process it raises a DeviceError instead of hanging, and a forked child forgets the
shared Voxelizers (without a Vulkan call) and creates its own on first use.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing

from .api_runs import (
    PipelineRuns,
    attributed_svo,
    empty_stats,
    face_grid,
    merged_stats,
    part_name,
    voxel_count_label,
    writes_after_work,
)
from .attributes.run import Attributed
from .budget import check_dense_fits
from .choices import (
    AUTO_FILL,
    DEFAULT_SORT,
    DEFAULT_SURFACE,
    DEFAULT_VARIANT,
    variant_candidates,
)
from .errors import (
    ColorWarning,
    DeviceError,
    MeshError,
    ReentrantCallError,
    VoxelizerError,
)
from .gpu.device import Device
from .grid import ColumnBits, DenseGrid
from .interrupts import interrupts_deferred
from .io.meshes import MeshLike, load_mesh, load_meshes
from .mesh import Mesh, Topology, real_array
from .mesh_warnings import mesh_warnings
from .normalize import fit_mesh
from .options import Options, VoxelizeOptions, option_keywords
from .pipeline.job import Job
from .pipeline.runner import Pipeline
from .placement import GridLike, GridPlacement, check_resolution, lattice_shift
from .placement_kept import kept_holds_part_of, kept_placement
from .stats import Stats
from .svo import SVO
from .thin import needs_surface_count

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .trigrid import GridEngine, TriangleGrid

R = TypeVar("R", SVO, DenseGrid)
# One mesh, or a list of meshes voxelized together on one grid (each mesh a part).
MeshesLike = MeshLike | list[MeshLike]


class Voxelizer:
    """A Vulkan device with the voxelization pipeline, for voxelizing many meshes in one process.

    Kernels are built on first use of a variant and reused; buffers grow as needed and are
    reused. One voxelization runs at a time per instance: calls from several threads are
    serialized by a lock (use one Voxelizer per thread for parallel work). It works in the
    process that created it only (after a fork, create one in the child).
    """

    def __init__(self, device: str | int | None = None):
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._owner: int | None = None  # the thread whose call holds the lock
        self._closed = False
        opened: Device | None = None
        try:  # a Ctrl-C or an error while opening leaves no Vulkan object behind
            with interrupts_deferred():  # (held until `opened` holds the device)
                opened = Device(device)
            self.device = opened
            self._pipeline = Pipeline(opened)
            self._grid_engine: GridEngine | None = None  # triangle grids, on first use
        except BaseException:
            if opened is not None:
                opened.close()
            raise

    @property
    def device_name(self) -> str:
        return self.device.name

    @option_keywords(VoxelizeOptions)
    def voxelize(
        self,
        mesh: MeshesLike,
        grid: GridLike | None = None,
        *,
        warn: bool = True,
        count_voxels: bool = True,
        out: str | os.PathLike | None = None,
        overwrite: bool = False,
        **options: Unpack[VoxelizeOptions],
    ) -> SVO:
        """Voxelization as a sparse voxel octree, built on the GPU from the bit grid, slab by
        slab where the grid is larger than a buffer or the budget.

        grid: N (the cube N^3) or (nx, ny, nz), each side from 1 to 65536 (over 8192: sparsely,
        docs/guide/large-grids.md); or voxel_size= (h, or (hx, hy, hz)); neither: 512^3.

        - mode: "solid" (default: the voxels whose centres are inside), "surface" (the
          voxels the triangles touch, of the kind `surface`: "conservative", the default,
          or "thin") or "both" (the solid united with the conservative surface).
        - fill_mode, how the solid's inside is counted: "parity" (default: exact for closed
          meshes; where two parts overlap, the overlap comes out empty), "winding" (the
          generalized winding number: for open meshes, scans and overlapping parts; it
          bridges holes), "auto" (parity, or winding where the parity fill finds the mesh
          open or overlapping), "vote" (parity along six ray directions, four must agree)
          or "union" (closed parts counted by their winding: overlapping parts give their
          union).
        - variant, sort: the shader variant and the pairs' sort (the same voxels with each).
        - voxel_size, bounds ([[xmin, ymin, zmin], [xmax, ymax, zmax]], default the mesh's
          box: the grid is this box exactly, and a box that cuts the mesh crops it), box_fit
          ("cover" or "inside": bounds that are not a whole number of voxels), pad (empty
          voxels added around: k, (kx, ky, kz) or ((x_lo, x_hi), (y_lo, y_hi), (z_lo,
          z_hi))); docs/guide/grids.md states the rules.
        - max_memory (bytes or "2GiB"), progress (a callable (stage, done, total)).
        - attributes: ["face"] (modes "surface" and "both"): the SVO also stores each surface
          voxel's face id, SVO.to_numpy(attribute="face").
        - labels=True: the part of every set voxel, SVO.to_numpy(attribute="label"), named
          by SVO.label_names; overlap ("last" or "smallest"): the part an overlap belongs to.
          colors=True: every set voxel's RGBA, SVO.to_numpy(attribute="color"); fill_color:
          the inside's colour (default: the nearest surface voxel's along the column).
          A list of meshes is voxelized together on one grid around them all, each mesh a
          part (docs/guide/colours-and-labels.md).
        - warn=False: no OpenMeshWarning or OverlapWarning through the warnings module (not
          thread-safe); mesh_warnings(result.stats.counts, fill_mode) gives them as data.
        - count_voxels=False: no count of the set voxels in stats.counts (result.count() gives
          it), for a caller that counts them on another thread (a batch, its writer thread).
        - out="x.svo": the octree written to this file as it is made, the result the file
          mapped (load(out, mmap=True)); overwrite=True replaces a file (large-grids.md)."""
        checked = Options.create(grid, **options)
        if out is not None and writes_after_work(checked, out):
            svo = self.voxelize(mesh, grid, warn=warn, count_voxels=count_voxels, **options)
            return self._streamed(out, overwrite, svo)
        if checked.fill_mode == AUTO_FILL:
            return self._auto(self.voxelize, mesh, grid, warn, count_voxels, options)
        return self._svo(mesh, checked, warn, count_voxels, out=out, overwrite=overwrite)

    def _svo(
        self,
        mesh: MeshesLike,
        checked: Options,
        warn: bool,
        count_voxels: bool,
        *,
        out: str | os.PathLike | None = None,
        overwrite: bool = False,
    ) -> SVO:
        """voxelize's work once its options are checked (and fill_mode is not "auto")."""
        self._start_kernels(checked, svo=True)
        loaded, placement, stats = self._prepare(mesh, checked)
        if not kept_holds_part_of(loaded, placement):
            empty = SVO.empty(placement, empty_stats(loaded, placement, checked, stats, warn))
            return empty if out is None else self._streamed(out, overwrite, empty)
        if checked.labels or checked.colors:
            check_dense_fits(placement.shape, "labels and colours")
            found = self._attributed(loaded, placement, stats, checked, part_name(mesh))
            svo = attributed_svo(found, placement, stats, checked)
            return self._finished(loaded, svo, checked, warn, count_voxels, found.problems)
        job = self._job(loaded, placement, checked)
        marked = None
        if out is not None:
            svo = self._streamed(out, overwrite, (job, placement, stats))
            return self._finished(loaded, svo, checked, warn, count_voxels)
        with self._locked():
            if "face" in checked.attributes:
                (nodes, bricks, level_offsets), marked, run = self._pipeline.svo_faces(job)
            else:
                (nodes, bricks, level_offsets), run = self._pipeline.svo(job)
        svo = SVO(nodes, bricks, level_offsets, placement, merged_stats(stats, run), verify=False)
        if marked is not None:
            started = time.perf_counter()
            svo = svo.with_face_ids(marked.voxels, marked.ids)
            svo.stats.add_host(face_ids=(time.perf_counter() - started) * 1e3)
        return self._finished(loaded, svo, checked, warn, count_voxels)

    def _streamed(
        self, out: str | os.PathLike, overwrite: bool, made: SVO | tuple[Job, GridPlacement, Stats]
    ) -> SVO:
        """The .svo file `out`: an SVO `made` in memory written, or a job's octree written as
        it is made and read back mapped. (A format's modules load on use: test_startup.py.)"""
        from .io.output import open_output
        from .io.svo_file import SVOFileSink, read_svo, write_svo

        if isinstance(made, SVO):
            write_svo(made, out, overwrite=overwrite)
            return made
        job, placement, before = made
        with self._locked(), open_output(out, overwrite) as fh:
            sink = SVOFileSink(fh, placement)
            run = self._pipeline.svo_into(job, sink)
            sink.finish()
        svo = read_svo(out, mmap=True)
        svo.stats = merged_stats(before, run)
        return svo

    @option_keywords(VoxelizeOptions)
    def voxelize_dense(
        self,
        mesh: MeshesLike,
        grid: GridLike | None = None,
        *,
        warn: bool = True,
        count_voxels: bool = True,
        **options: Unpack[VoxelizeOptions],
    ) -> DenseGrid:
        """Voxelization on a dense grid (mode "solid", the default: a voxel is set iff its
        centre is inside the mesh). Arguments as for voxelize; attributes=["face"] (modes
        "surface" and "both") also fills DenseGrid.face_ids, labels=True DenseGrid.labels,
        colors=True DenseGrid.colors."""
        checked = Options.create(grid, **options)
        if checked.fill_mode == AUTO_FILL:
            return self._auto(self.voxelize_dense, mesh, grid, warn, count_voxels, options)
        return self._dense(mesh, checked, warn, count_voxels)

    def _dense(
        self, mesh: MeshesLike, checked: Options, warn: bool, count_voxels: bool
    ) -> DenseGrid:
        """voxelize_dense's work once its options are checked (fill_mode not "auto")."""
        self._start_kernels(checked, svo=False)
        loaded, placement, stats = self._prepare(mesh, checked)
        check_dense_fits(placement.shape, "voxelize_dense")  # before the GPU work
        if not kept_holds_part_of(loaded, placement):
            empty = ColumnBits.empty(placement.shape)
            stats = empty_stats(loaded, placement, checked, stats, warn)
            return DenseGrid.of_columns(empty, placement, stats)
        if checked.labels or checked.colors:
            found = self._attributed(loaded, placement, stats, checked, part_name(mesh))
            result = DenseGrid(
                found.voxels, placement, stats, face_ids=face_grid(found, placement, checked)
            ).with_attributes(found.labels, found.colors, found.label_names)
            return self._finished(loaded, result, checked, warn, count_voxels, found.problems)
        job = self._job(loaded, placement, checked)
        faces = None
        with self._locked():
            if "face" in checked.attributes:
                voxels, faces, run = self._pipeline.dense_faces(job)
            else:
                voxels, run = self._pipeline.dense(job)
        merged = merged_stats(stats, run)
        if isinstance(voxels, ColumnBits):  # kept as the GPU's words until asked for bools
            result = DenseGrid.of_columns(voxels, placement, merged, face_ids=faces)
        else:
            result = DenseGrid(voxels, placement, merged, face_ids=faces)
        return self._finished(loaded, result, checked, warn, count_voxels)

    def _finished(
        self,
        mesh: Mesh,
        result: R,
        options: Options,
        warn: bool,
        count_voxels: bool,
        problems: Sequence[str] = (),
    ) -> R:
        """The result with its voxel count (and the thin check's), after the warnings its
        column counts call for and those of its colours (`problems`)."""
        if count_voxels:
            result.stats.counts[voxel_count_label(options.mode)] = result.count()
            self.count_thin_surface(mesh, result, options)
        if warn:
            _warn_from_counts(result.stats.counts, options.fill_mode, options.mode, stacklevel=6)
        for problem in problems:  # (not warn's: colours the user asked for, not the mesh's)
            warnings.warn(ColorWarning(problem), stacklevel=5)
        return result

    def _attributed(
        self, mesh: Mesh, placement: GridPlacement, stats: Stats, options: Options, name: str
    ) -> Attributed:
        """The voxels with labels and colours, from the pipeline runs they need (api_runs)."""
        runs = PipelineRuns(
            self._pipeline, self._job, placement=placement, options=options, stats=stats
        )
        with self._locked():
            return runs.attributed(mesh, name)

    def voxelize_grid(
        self,
        grid_vertices: np.ndarray,
        faces: np.ndarray,
        grid: int,
        *,
        variant: str = DEFAULT_VARIANT,
        sort: str = DEFAULT_SORT,
        max_memory: int | str | None = None,
        mode: str = "solid",
        surface: str | None = None,
    ) -> np.ndarray:
        """The same voxelization for vertices already in grid space (float32 in [0, N]):
        bool[i, j, k]. This is where the placement rule ends and the exact contract begins."""
        n = check_resolution(grid)
        checked = Options.create(
            variant=variant, sort=sort, max_memory=max_memory, mode=mode, surface=surface
        )
        vertices = real_array(grid_vertices, np.float32, "grid-space vertices", MeshError)
        if (
            vertices.ndim != 2
            or vertices.shape[1] != 3
            or not np.isfinite(vertices).all()
            or vertices.min(initial=0) < 0
            or vertices.max(initial=0) > n
        ):
            raise MeshError(f"grid-space vertices must be a finite (V, 3) array inside [0, {n}]")
        mesh = load_mesh((vertices.astype(np.float64), faces))  # checks the faces
        job = Job(
            mesh=mesh,
            vertices=vertices,
            shape=(n, n, n),
            variant=checked.variant,
            sort=checked.sort,
            max_memory=checked.max_memory,
            mode=checked.mode,
            surface=checked.surface or DEFAULT_SURFACE,
        )
        with self._locked():
            voxels, _ = self._pipeline.dense(job)
        return voxels.to_numpy() if isinstance(voxels, ColumnBits) else voxels

    def triangle_grid(
        self,
        mesh: MeshLike,
        resolution: int | Sequence[int] | None = None,
        *,
        cell_size: float | Sequence[float] | None = None,
        density: float | None = None,
        levels: int = 1,
        bounds: numpy.typing.ArrayLike | None = None,
    ) -> TriangleGrid:
        """The uniform grid of the mesh's triangles, built on the GPU: every cell lists the
        triangles that touch its closed box, exactly (docs/guide/triangle-grid.md).

        One of: resolution (cells along x, y, z, or one number for all three; the grid is
        the mesh's box), cell_size (one side or three; the fewest cells that cover the box),
        density (cells per triangle, Kalojanov's heuristic; default 4). levels=2: a
        two-level grid (a coarse top level, 1/16 cell per triangle unless a resolution or a
        cell size says otherwise, each top cell cut by its own triangles into about
        `density` leaves per reference). bounds: place the grid on this box instead of the
        mesh's (it must contain the mesh)."""
        from .trigrid import build_triangle_grid  # (triangle grids: on first use only)

        loaded = load_mesh(mesh)
        return build_triangle_grid(
            self._grids(), loaded, resolution, cell_size=cell_size, density=density,
            levels=levels, bounds=bounds,
        )  # fmt: skip

    def load_triangle_grid(self, path: str | os.PathLike) -> TriangleGrid:
        """A triangle grid from an .npz file of voxelizer.save_triangle_grid; its queries
        upload it to this Voxelizer's device on first use."""
        from .trigrid import TriangleGrid, files, queries  # (on first use only, as below)

        placement, levels, arrays = files.read_triangle_grid(path)
        engine = self._grids()
        return TriangleGrid(
            placement,
            levels,
            arrays=arrays,
            uploader=lambda: queries.upload(engine, placement, levels, arrays),
        )

    def _grids(self) -> GridEngine:
        """The triangle grids' engine on this device (made on first use)."""
        self._check_process()
        with self._lock:
            if self._closed:
                raise VoxelizerError("this Voxelizer is closed")
            if self._grid_engine is None:
                from .trigrid import GridEngine

                self._grid_engine = GridEngine(self.device)
            return self._grid_engine

    def _auto(
        self,
        call: Callable[..., R],
        mesh: MeshesLike,
        grid: GridLike | None,
        warn: bool,
        count_voxels: bool,
        options: VoxelizeOptions,
    ) -> R:
        """fill_mode="auto": parity, then winding where the parity fill's column counts find
        the surface open or parts overlapping (counts["auto_winding"] says which ran: 0 or
        1). A closed, consistently oriented mesh costs one parity run; others a second run."""
        loaded = load_meshes(mesh) if isinstance(mesh, list) else load_mesh(mesh)
        parity = call(
            loaded,
            grid,
            warn=False,
            count_voxels=count_voxels,
            **{**options, "fill_mode": "parity"},
        )
        counts = parity.stats.counts
        if not (counts.get("open_columns", 0) or counts.get("overlap_columns", 0)):
            counts["auto_winding"] = 0
            result = parity
        else:
            result = call(
                loaded, grid, warn=False, count_voxels=count_voxels,
                **{**options, "fill_mode": "winding"},
            )  # fmt: skip
            result.stats.counts["auto_winding"] = 1
        if warn:
            _warn_from_counts(result.stats.counts, AUTO_FILL, options.get("mode", "solid"))
        return result

    def count_thin_surface(self, mesh: Mesh, result: SVO | DenseGrid, options: Options) -> None:
        """For a solid result whose count is in its stats (`solid_voxels`): where it may be
        thin (voxelizer.thin: empty, or small beside the estimated surface), count the voxels
        the surface touches on the same grid with the surface pass, as `surface_voxels`, for
        the ThinResultWarning. A plainly thick result costs a host comparison only. Called
        by voxelize after counting; a batch, which counts on its writer threads, calls it
        there."""
        counts = result.stats.counts
        if options.mode != "solid" or "solid_voxels" not in counts:
            return
        if lattice_shift(result.placement.shape):  # (no surface pass on the sparse path)
            return
        if not needs_surface_count(counts["solid_voxels"], mesh, result.placement):
            return
        started = time.perf_counter()
        surface = replace(
            options, mode="surface", surface="conservative", fill_mode="parity", progress=None
        )
        job = self._job(mesh, result.placement, surface)
        with self._locked():
            (nodes, bricks, level_offsets), run = self._pipeline.svo(job)
        counted = SVO(nodes, bricks, level_offsets, result.placement, run, verify=False)
        counts["surface_voxels"] = counted.count()
        result.stats.add_host(thin_check=(time.perf_counter() - started) * 1e3)

    def prepare(self, options: Options, *, dense: bool = False) -> threading.Thread | None:
        """Start building the kernels of calls with `options` (checked; voxelize_dense's with
        `dense`) on a thread, before the first call, waiting while another thread voxelizes:
        that thread (join it to know when they are built), or None where they are built."""
        return self._start_kernels(options, svo=not dense, wait=True)

    def _start_kernels(
        self, options: Options, svo: bool, wait: bool = False
    ) -> threading.Thread | None:
        """Have the kernels of this call built in the background while the mesh is read and
        checked (the first call of a process gains most). Skipped while another thread
        voxelizes (unless `wait`): a closed or foreign Voxelizer is refused later, by _locked."""
        if self._pid != os.getpid() or not self._lock.acquire(blocking=wait):
            return None
        try:
            if self._closed:
                return None
            return self._pipeline.prepare(self.likely_variant(options.variant), options.sort, svo)
        finally:
            self._lock.release()

    def likely_variant(self, variant: str) -> str:
        """The variant a call given `variant` runs unless its budget is tight: "auto" as this
        device resolves it (choices.variant_candidates)."""
        return variant_candidates(variant, self.device.is_cpu)[0]

    def _prepare(self, mesh: MeshesLike, options: Options) -> tuple[Mesh, GridPlacement, Stats]:
        """Load and check the mesh (several: one mesh of them, each a part), place the grid."""
        started = time.perf_counter()
        loaded = load_meshes(mesh) if isinstance(mesh, list) else load_mesh(mesh)
        if options.fit is not None:  # placed on the unit cube: Options.create derived bounds
            loaded = fit_mesh(loaded, options.fit)
        load_ms = (time.perf_counter() - started) * 1e3
        placement = kept_placement(
            loaded,
            options.shape,
            options.voxel_size,
            options.bounds,
            box_fit=options.box_fit,
            pad=options.pad,
        )
        stats = Stats()
        stats.add_host(load=load_ms)
        return loaded, placement, stats

    @staticmethod
    def _job(mesh: Mesh, placement: GridPlacement, options: Options) -> Job:
        grid_vertices, fine_vertices = placement.placed_vertices(mesh)
        return Job(
            mesh=mesh,
            vertices=grid_vertices,
            shape=placement.shape,
            variant=options.variant,
            sort=options.sort,
            fill_mode=options.fill_mode,
            max_memory=options.max_memory,
            progress=options.progress,
            mode=options.mode,
            surface=options.surface or DEFAULT_SURFACE,
            fine=fine_vertices,
            fixed_gap=placement.placed_fixed_gap(mesh),
            soup=placement.placed_soup(mesh),
            lattice=placement.work(mesh),
        )

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the lock for one voxelization; refuse a closed Voxelizer, or one inherited
        from another process (checked first: the lock itself may have been held at the fork).
        A context manager of the lock's own: released however the work ends (Ctrl-C too)."""
        self._check_process()
        self._refuse_reentry("voxelize")
        with self._lock:
            if self._closed:
                raise VoxelizerError("this Voxelizer is closed")
            self._owner = threading.get_ident()
            try:
                yield
            finally:
                self._owner = None

    def _refuse_reentry(self, what: str) -> None:
        """ReentrantCallError if this thread is inside a call of this Voxelizer already (its
        progress callback calls back): waiting for the lock would wait for itself."""
        if self._owner == threading.get_ident():
            raise ReentrantCallError(
                f"Voxelizer: {what} called from inside a voxelization of the same Voxelizer "
                "(from its progress callback?), which would wait for itself: call it after "
                "the voxelization returns, or use another Voxelizer"
            )

    def _check_process(self) -> None:
        if self._pid != os.getpid():
            raise DeviceError(
                f"this Voxelizer was created in process {self._pid}; create a new one in this "
                "process (after fork, Vulkan objects cannot be shared)"
            )

    def close(self) -> None:
        if self._pid != os.getpid():
            self._closed = True  # the parent's Vulkan objects: forget them, destroy nothing
            return
        self._refuse_reentry("close")
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._grid_engine is not None:
                self._grid_engine.close()
            self._pipeline.close()
            self.device.close()

    def __enter__(self) -> Voxelizer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _warn_from_counts(
    counts: dict[str, int], fill_mode: str, mode: str, stacklevel: int = 4
) -> None:
    """mesh_warnings, warned. Called by the Voxelizer methods, so the warning points at their
    caller's caller (the module functions' user)."""
    for warning in mesh_warnings(counts, fill_mode, mode):
        warnings.warn(warning, stacklevel=stacklevel)


def check_mesh(mesh: MeshLike) -> Topology:
    """The edge-level report of a mesh (a file path, a Mesh, a trimesh.Trimesh or (vertices,
    faces)): boundary and non-manifold edges, degenerate and duplicate triangles, edges and
    triangles compared by vertex position. A host pass over every edge (several times the
    GPU's work: docs/benchmarks.md, "Figures behind the code"), so voxelizing never runs it: a voxelization warns from
    the column counts its fill pass makes instead (OpenMeshWarning, OverlapWarning)."""
    return load_mesh(mesh).topology


def voxelize_checked(
    voxelizer: Voxelizer, mesh: MeshesLike, options: Options, *, dense: bool, count_voxels: bool
) -> SVO | DenseGrid:
    """Voxelizer.voxelize (`dense`: voxelize_dense) with options checked once already by the
    caller (Options.create: a batch, for all its meshes), without warnings (warn=False):
    the same result, without checking them again per mesh."""
    if options.fill_mode == AUTO_FILL:  # (its two runs take the options as keywords)
        call = voxelizer.voxelize_dense if dense else voxelizer.voxelize
        grid = options.shape
        return call(mesh, grid, warn=False, count_voxels=count_voxels, **options.keywords())
    if dense:
        return voxelizer._dense(mesh, options, False, count_voxels)
    return voxelizer._svo(mesh, options, False, count_voxels)


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


def _forget_shared_after_fork() -> None:
    """In a forked child: drop the parent's shared Voxelizers without a Vulkan call (they
    cannot work here), so the module functions create fresh ones; replace the lock, which
    another thread may have held at the fork."""
    global _shared_lock
    _shared.clear()
    _shared_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_shared_after_fork)


@option_keywords(VoxelizeOptions)
def voxelize(
    mesh: MeshesLike,
    grid: GridLike | None = None,
    *,
    device: str | int | None = None,
    out: str | os.PathLike | None = None,
    overwrite: bool = False,
    **options: Unpack[VoxelizeOptions],
) -> SVO:
    """Voxelization of `mesh` on the GPU as a sparse voxel octree, on the process's shared
    Voxelizer of `device` (see Voxelizer.voxelize for the options and `out`)."""
    return shared_voxelizer(device).voxelize(mesh, grid, out=out, overwrite=overwrite, **options)


@option_keywords(VoxelizeOptions)
def voxelize_dense(
    mesh: MeshesLike,
    grid: GridLike | None = None,
    *,
    device: str | int | None = None,
    **options: Unpack[VoxelizeOptions],
) -> DenseGrid:
    """Voxelization of `mesh` on the GPU as a DenseGrid, on the process's shared Voxelizer of
    `device` (see Voxelizer.voxelize for the options)."""
    return shared_voxelizer(device).voxelize_dense(mesh, grid, **options)


def triangle_grid(
    mesh: MeshLike,
    resolution: int | Sequence[int] | None = None,
    *,
    device: str | int | None = None,
    cell_size: float | Sequence[float] | None = None,
    density: float | None = None,
    levels: int = 1,
    bounds: numpy.typing.ArrayLike | None = None,
) -> TriangleGrid:
    """The uniform grid of `mesh`'s triangles, built on the GPU (see Voxelizer.triangle_grid)."""
    return shared_voxelizer(device).triangle_grid(
        mesh, resolution, cell_size=cell_size, density=density, levels=levels, bounds=bounds
    )


def load_triangle_grid(path: str | os.PathLike, *, device: str | int | None = None) -> TriangleGrid:
    """A triangle grid saved by voxelizer.save_triangle_grid (see Voxelizer.load_triangle_grid)."""
    return shared_voxelizer(device).load_triangle_grid(path)
