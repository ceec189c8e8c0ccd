"""Pipeline: one voxelization's GPU work, from a mesh in grid space to voxels and stats.

plan -> slabs -> passes -> download (dense) or SVO build (svo) -> merge of slab forests.
A dense result comes back as the GPU's column words (grid.ColumnBits) where the GPU wrote
the whole grid (parity, winding, the surface modes), as a bool array where the host
combined several runs (vote, union).
The API hands a `Job` (a checked mesh already placed in grid space, checked options) to
`Pipeline.dense` or `Pipeline.svo` and gets the voxels and a `Stats` back; nothing in here
reads files, validates user input or knows the world placement.

A Pipeline owns the device's buffers, its command sequence and the kernels built so far
(per variant, on first use). It runs one job at a time: callers serialize (the Voxelizer
holds a lock).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, overload

import numpy as np

from ..choices import is_indexed, variant_candidates
from ..components import Run, mesh_components, union_runs
from ..errors import MemoryBudgetError
from ..gpu.buffers import Buffer, BufferPool
from ..gpu.commands import Binding, Sequence, build_in_background
from ..gpu.device import Device
from ..gpu.scan import Scan
from ..grid import ColumnBits, pack_columns
from ..log import get_logger
from ..mesh import Mesh
from ..placement import COLUMN_AXIS_ORDERS, FINE_BITS, Shape
from ..stats import Stats
from .face_ids import FaceGather, MarkedVoxels, download_marked, gather_marked
from .merge import merge_forests
from .passes import (
    FACE_ID_BYTES,
    PassPipelines,
    PassRunner,
    SurfacePipelines,
    Window,
    fine_vertices_of,
)
from .plan import Plan, default_budget, make_plan
from .svo_build import (
    Forest,
    OctreeArrays,
    RecordedSVO,
    SVOArrays,
    SVOPipelines,
    build_svo_on_gpu,
    record_svo,
)
from .winding import WindingFill, WindingPipelines, mesh_boundary

_log = get_logger(__name__)
WINDING_COLUMN_RESERVE = 40  # bytes per grid column kept out of the plan for winding's lists
VOTES_NEEDED = 4  # of six ray directions, in fill_mode="vote"
COLUMN_COUNTS = ("open_columns", "overlap_columns")  # the fill's mesh check (shaders/fill.comp)
# Progress of long jobs: (stage, done, total), e.g. ("slabs", 3, 8); the CLI draws it.
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, eq=False)
class Job:
    """What the GPU work needs: a checked mesh, its vertices in grid space, the grid shape and
    the checked options that shape the work."""

    mesh: Mesh
    vertices: np.ndarray  # float32 (V, 3), grid space: [0, shape] per axis
    shape: Shape
    variant: str
    sort: str
    fill_mode: str = "parity"
    max_memory: int | None = None
    progress: Progress | None = None
    mode: str = "solid"
    surface: str = "conservative"  # with mode "surface" ("both" always adds the conservative)
    # int64 (V, 3) fine grid-space vertices (placement.fine_vertices), which the solid
    # decisions are exact for; None: those of the float32 vertices as given.
    fine: np.ndarray | None = None
    # placement.fixed_gap of `vertices` and `fine` over the mesh's used vertices, where the
    # placement found it (placed_fixed_gap); None: the passes compute it.
    fixed_gap: int | None = None
    # The triangle soup of `vertices` and the mesh's faces, (T, 3, 3) float32, where it was
    # made before the call (placement.make_soup, in a reading process); None: gathered.
    soup: np.ndarray | None = None

    def fine_vertices(self) -> np.ndarray:
        return fine_vertices_of(self.vertices) if self.fine is None else self.fine


class Pipeline:
    """The GPU side of a Voxelizer: buffers, command sequence and kernels, reused per job."""

    def __init__(self, device: Device):
        self.device = device
        self._pool = BufferPool(device)
        self._growth_at_start = 0.0  # the pool's growth_ms when the current call began
        self._sequence = Sequence(device, self._pool)
        self._passes: dict[str, PassPipelines] = {}
        self._surfaces: dict[tuple[str, str], SurfacePipelines] = {}
        self._scan: Scan | None = None
        self._svo: SVOPipelines | None = None
        self._face_gather: FaceGather | None = None
        self._winding_pipelines: WindingPipelines | None = None
        self._builders: list[threading.Thread] = []  # prepare's threads, joined by close

    # -- the two results ---------------------------------------------------------------------

    def dense(self, job: Job) -> tuple[ColumnBits | np.ndarray, Stats]:
        """The voxels of the job's mode (solid: set iff the centre is inside the mesh) of
        shape job.shape: the GPU's column words, or bool[i, j, k] (vote, union of several runs)."""
        stats = self._stats(job)
        if job.mode != "solid":
            voxels, _ = self._surface_dense(job, stats, face_ids=False)
        elif job.fill_mode == "vote":
            voxels = self._vote(job, stats)
        elif job.fill_mode == "union":
            voxels = self._union_dense(job, stats)
        elif job.fill_mode == "winding":
            voxels = self._winding_fill(job, stats, dense=True)
        else:
            voxels = self._parity(
                job, job.vertices, job.fine_vertices(), job.shape, stats, dense=True
            )
        self._finish(stats)
        return voxels, stats

    def svo(self, job: Job) -> tuple[OctreeArrays, Stats]:
        """The SVO arrays (nodes, bricks, level_offsets) of docs/svo-format.md, built on the
        device from the bit grid (which never leaves it in parity mode)."""
        stats = self._stats(job)
        if job.mode != "solid":
            octree = self._surface_svo(job, stats)
        elif job.fill_mode == "vote":
            words = pack_columns(self._vote(job, stats))
            grid = self._pool.binding("grid", len(words) * 4)
            arrays = self._build_svo(Forest.whole_grid(job.shape), grid, stats, words)
            octree = arrays.octree()
        elif job.fill_mode == "union":
            octree = self._union_svo(job, stats)
        elif job.fill_mode == "winding":
            octree = self._winding_fill(job, stats, dense=False)
        else:
            octree = self._parity(
                job, job.vertices, job.fine_vertices(), job.shape, stats, dense=False
            )
        self._finish(stats)
        return octree, stats

    def dense_faces(self, job: Job) -> tuple[ColumnBits | np.ndarray, np.ndarray, Stats]:
        """Modes "surface" and "both": the grid as `dense`, and int32[i, j, k] face
        ids: the smallest index of the triangles whose surface marks the voxel, -1 where
        none does (solid voxels of "both" inside the surface too)."""
        stats = self._stats(job)
        voxels, faces = self._surface_dense(job, stats, face_ids=True)
        self._finish(stats)
        assert faces is not None  # asked for
        return voxels, faces, stats

    def svo_faces(self, job: Job) -> tuple[OctreeArrays, MarkedVoxels, Stats]:
        """Modes "surface" and "both": the SVO arrays as `svo`, and the voxels that carry a
        face id with their ids, gathered slab by slab from the device's face-id grid."""
        stats = self._stats(job)
        if job.mode == "both" and job.fill_mode != "parity":
            voxels, faces = self._surface_dense(job, stats, face_ids=True)
            assert faces is not None  # asked for
            octree = self._svo_of_voxels(job, voxels, stats)
            marked = MarkedVoxels.of_grid(faces)
        else:
            octree, parts = self._surface_slabs(job, stats, dense=False, face_ids=True)
            marked = MarkedVoxels.joined(parts)
        self._finish(stats)
        return octree, marked, stats

    # -- parity: slabs of the grid through the passes ----------------------------------------

    @overload
    def _parity(
        self,
        job: Job,
        vertices: np.ndarray,
        fine: np.ndarray,
        shape: Shape,
        stats: Stats,
        dense: Literal[True],
        whole_only: bool = False,
    ) -> ColumnBits: ...

    @overload
    def _parity(
        self,
        job: Job,
        vertices: np.ndarray,
        fine: np.ndarray,
        shape: Shape,
        stats: Stats,
        dense: Literal[False],
        whole_only: bool = False,
    ) -> OctreeArrays: ...

    def _parity(
        self,
        job: Job,
        vertices: np.ndarray,
        fine: np.ndarray,
        shape: Shape,
        stats: Stats,
        dense: bool,
        whole_only: bool = False,
    ) -> ColumnBits | OctreeArrays:
        """Voxelize grid-space `vertices` (the job's faces) on a grid of `shape`, slab by slab
        as the plan says: the grid's words (`dense`) or the SVO arrays."""
        passes, plan = self._kernels_and_plan(
            job, stats, shape, job.max_memory, svo=not dense, dense=dense, whole_only=whole_only
        )
        stats.memory.budget_bytes = plan.budget
        stats.count_max(slab_rows=plan.slab_rows, triangle_batch=plan.batch_triangles)
        runner = self._pass_runner(job, passes, plan, stats, vertices=vertices, fine=fine)
        outputs = _SlabOutputs(self, plan, shape, job, stats, dense)
        for slab in plan.slabs():
            grid = self._pool.binding("grid", slab.grid_bytes)
            then = None if dense else outputs.svo_recorder(slab, grid)
            staging = runner.voxelize(slab, grid, download=dense, then=then)
            recorded = runner.followed if isinstance(runner.followed, RecordedSVO) else None
            outputs.keep(slab, grid, staging, recorded)
        return outputs.result()

    def _merge(
        self, plan: Plan, shape: Shape, forests: list[tuple[int, SVOArrays]], stats: Stats
    ) -> OctreeArrays:
        started = time.perf_counter()
        if plan.whole:
            octree = forests[0][1].octree()
        else:
            octree = merge_forests(shape, plan.slab_rows, forests)
        stats.add_host(svo_merge=(time.perf_counter() - started) * 1e3)
        return octree

    def _download(self, slab: Window, grid: Binding, stats: Stats) -> np.ndarray:
        """The slab's words in a submission of their own (after the surface pass)."""
        sequence = self._sequence
        sequence.begin()
        sequence.mark("start")
        staging = sequence.download(grid.buffer, slab.grid_bytes)
        sequence.mark("download")
        stats.add_gpu(sequence.submit())
        return self._read_words(slab, staging, stats)

    def _read_words(self, slab: Window, staging: Buffer, stats: Stats) -> np.ndarray:
        """The slab's words, copied back with the passes' last submission (the GPU layout:
        rows j in [row_lo, row_hi) of the grid's words)."""
        started = time.perf_counter()
        words = staging.read(np.uint32, slab.grid_bytes // 4)
        stats.add_host(download=(time.perf_counter() - started) * 1e3)
        return words

    def _build_svo(
        self, forest: Forest, grid: Binding, stats: Stats, words: np.ndarray | None = None
    ) -> SVOArrays:
        return build_svo_on_gpu(
            self._scan_kernels(), self._svo_kernels(), self._pool, self._sequence, forest, grid,
            stats, words,
        )  # fmt: skip

    # -- vote: parity along six directions ---------------------------------------------------

    def _vote(self, job: Job, stats: Stats) -> np.ndarray:
        """Parity along the six axis directions; a voxel is kept where at least four agree.

        Counting crossings from the other end of a column (the mesh mirrored along it) gives a
        different answer exactly where a ray passes through a hole, so the six rays out of a
        voxel near a hole mostly outvote the few that leak. The counts are those of the first
        direction, except the column counts, summed over the three axes (a mirrored run
        crosses the same columns); the times are summed over all six."""
        votes = np.zeros(job.shape, np.uint8)
        first = True
        for order in COLUMN_AXIS_ORDERS:
            for mirrored in (False, True):
                vertices = job.vertices[:, order]  # a copy
                fine = job.fine_vertices()[:, order]
                shape: Shape = (job.shape[order[0]], job.shape[order[1]], job.shape[order[2]])
                if mirrored:
                    vertices[:, 2] = np.float32(shape[2]) - vertices[:, 2]
                    fine[:, 2] = (shape[2] << FINE_BITS) - fine[:, 2]  # exact
                run = stats if first else self._stats(job)
                solid = self._parity(
                    job, vertices, fine, shape, run, dense=True, whole_only=True
                ).to_numpy()
                votes += (solid[:, :, ::-1] if mirrored else solid).transpose(np.argsort(order))
                if not first:
                    stats.add_times_of(run)
                    if not mirrored:
                        stats.count(**{name: run.counts.get(name, 0) for name in COLUMN_COUNTS})
                first = False
        return votes >= VOTES_NEEDED

    # -- union: closed components summed by their winding -----------------------------------

    def _union_dense(self, job: Job, stats: Stats) -> ColumnBits | np.ndarray:
        """fill_mode="union" as a grid (components.py says what it means): parity's words
        for one run of sign +1, else the bools of the summed runs."""
        runs = self._union_runs(job, stats)
        if len(runs) == 1 and runs[0].sign == 1:
            return self._parity(
                job, job.vertices, job.fine_vertices(), job.shape, stats, dense=True
            )
        return self._winding(job, runs, stats) > 0

    def _union_svo(self, job: Job, stats: Stats) -> OctreeArrays:
        """fill_mode="union" as SVO arrays. One run of sign +1 (one closed part, closed parts
        apart, only open parts) is parity, bit for bit, and keeps the grid on the device;
        otherwise the summed grid goes back up, slab by slab, to be converted there."""
        runs = self._union_runs(job, stats)
        if len(runs) == 1 and runs[0].sign == 1:
            return self._parity(
                job, job.vertices, job.fine_vertices(), job.shape, stats, dense=False
            )
        return self._svo_of_voxels(job, self._winding(job, runs, stats) > 0, stats)

    def _svo_of_voxels(
        self, job: Job, voxels: ColumnBits | np.ndarray, stats: Stats
    ) -> OctreeArrays:
        """SVO arrays of a grid on the host (words or bools): uploaded slab by slab,
        converted there."""
        plan = make_plan(self.device, job.shape, 1, 0, False, job.max_memory, True, False)
        forests: list[tuple[int, SVOArrays]] = []
        for slab in plan.slabs():
            if isinstance(voxels, ColumnBits):
                words = voxels.rows(slab.row_lo, slab.row_hi)
            else:
                words = pack_columns(voxels[:, slab.row_lo : slab.row_hi])
            grid = self._pool.binding("grid", slab.grid_bytes)
            forest = plan.forest(slab)
            forests.append((forest.cube_y, self._build_svo(forest, grid, stats, words)))
        return self._merge(plan, job.shape, forests, stats)

    def _union_runs(self, job: Job, stats: Stats) -> list[Run]:
        started = time.perf_counter()
        runs = union_runs(mesh_components(job.mesh), job.vertices, job.mesh.faces)
        stats.add_host(union_components=(time.perf_counter() - started) * 1e3)
        stats.count(union_runs=len(runs))
        return runs

    def _winding(self, job: Job, runs: list[Run], stats: Stats) -> np.ndarray:
        """Sum over the runs of sign * parity, each run through the dense parity path (slabs
        as the plan says). One run adds at most one per voxel (its components' interiors are
        disjoint), so |winding| <= runs: a byte per voxel on the host up to 127 runs. Counts
        and times of the runs are summed (`triangles`: each triangle once; `open_columns`
        too, as closed parts balance every column), but `overlap_columns` is the mesh's own:
        the columns where the summed winding leaves {0, 1} (where parity would differ from
        the union), counted here exactly."""
        dtype = np.int8 if len(runs) < 1 << 7 else np.int16 if len(runs) < 1 << 15 else np.int32
        winding = np.zeros(job.shape, dtype)
        for index, run in enumerate(runs):
            used, corners = np.unique(job.mesh.faces[run.faces], return_inverse=True)
            part = replace(
                job,
                mesh=Mesh(job.mesh.vertices[used], corners.reshape(-1, 3)),
                vertices=job.vertices[used],
                fine=job.fine_vertices()[used],
                fixed_gap=None,  # (the part's own, computed by its passes)
                soup=None,  # (the part's own, gathered by its passes)
                progress=None,
            )
            solid = self._parity(
                part, part.vertices, part.fine_vertices(), job.shape, stats, dense=True
            ).to_numpy()
            add = np.add if run.sign > 0 else np.subtract
            add(winding, solid, out=winding, casting="unsafe")
            if job.progress is not None:
                job.progress("runs", index + 1, len(runs))
        stats.counts["overlap_columns"] = _overlap_columns(winding)
        return winding

    # -- surface and both: the surface pass after (or instead of) the fill, slab by slab -----

    def _surface_dense(
        self, job: Job, stats: Stats, face_ids: bool
    ) -> tuple[ColumnBits | np.ndarray, np.ndarray | None]:
        """Modes "surface" and "both" as a grid (words, or bools where the solid came
        back as bools), with face ids if asked. "both" with
        parity runs the fill and then the surface pass on each slab's grid; with vote, union
        or winding the solid comes back whole and the surface is united with it here."""
        if job.mode == "both" and job.fill_mode != "parity":
            solid_job = replace(job, mode="solid")
            solid: ColumnBits | np.ndarray
            if job.fill_mode == "vote":
                solid = self._vote(solid_job, stats)
            elif job.fill_mode == "winding":
                solid = self._winding_fill(solid_job, stats, dense=True)
            else:
                solid = self._union_dense(solid_job, stats)
            surface = replace(job, mode="surface", surface="conservative")
            bits, parts = self._surface_slabs(surface, stats, dense=True, face_ids=face_ids)
            union = bits | solid if isinstance(solid, ColumnBits) else bits.to_numpy() | solid
            return union, _dense_faces(job, parts) if face_ids else None
        voxels, parts = self._surface_slabs(job, stats, dense=True, face_ids=face_ids)
        return voxels, _dense_faces(job, parts) if face_ids else None

    def _surface_svo(self, job: Job, stats: Stats) -> OctreeArrays:
        if job.mode == "both" and job.fill_mode != "parity":
            voxels, _ = self._surface_dense(job, stats, face_ids=False)
            return self._svo_of_voxels(job, voxels, stats)
        octree, _ = self._surface_slabs(job, stats, dense=False, face_ids=False)
        return octree

    @overload
    def _surface_slabs(
        self, job: Job, stats: Stats, dense: Literal[True], face_ids: bool
    ) -> tuple[ColumnBits, list[MarkedVoxels]]: ...

    @overload
    def _surface_slabs(
        self, job: Job, stats: Stats, dense: Literal[False], face_ids: bool
    ) -> tuple[OctreeArrays, list[MarkedVoxels]]: ...

    def _surface_slabs(
        self, job: Job, stats: Stats, dense: bool, face_ids: bool
    ) -> tuple[ColumnBits | OctreeArrays, list[MarkedVoxels]]:
        """The job's mode ("surface", or "both" with parity) slab by slab as the plan says:
        the grid's words (`dense`) or the SVO arrays, and with `face_ids` each slab's voxels
        that carry one (sparse, so an SVO's never need the dense grid on the host)."""
        kind = "conservative" if job.mode == "both" else job.surface
        passes, plan = self._kernels_and_plan(
            job,
            stats,
            job.shape,
            job.max_memory,
            svo=not dense,
            dense=dense,
            voxel_bytes=FACE_ID_BYTES if face_ids else 0,
            exact=job.mode == "both",  # the fill runs too
        )
        stats.memory.budget_bytes = plan.budget
        stats.count_max(slab_rows=plan.slab_rows, triangle_batch=plan.batch_triangles)
        runner = self._pass_runner(
            job, passes, plan, stats, surface=self._surface_kernels(passes.variant, kind)
        )
        outputs = _SlabOutputs(self, plan, job.shape, job, stats, dense)
        marked: list[MarkedVoxels] = []
        for slab in plan.slabs():
            grid = self._pool.binding("grid", slab.grid_bytes)
            rows = slab.row_hi - slab.row_lo
            ids = None
            if face_ids:
                ids = self._pool.binding("face_ids", slab.nx * rows * slab.nz * FACE_ID_BYTES)
            if job.mode == "both":
                runner.voxelize(slab, grid)
            else:
                stats.count(slabs=1)
            runner.voxelize_surface(slab, grid, job.shape[1], job.mode != "both", ids)
            if ids is not None and dense:
                marked.append(download_marked(self._sequence, slab, ids, stats))
            elif ids is not None:
                marked.append(self._gather_faces(slab, ids, stats))
            outputs.keep(slab, grid)
        return outputs.result(), marked

    # -- winding: crossing marks, then the winding number per segment -----------------------

    @overload
    def _winding_fill(self, job: Job, stats: Stats, dense: Literal[True]) -> ColumnBits: ...

    @overload
    def _winding_fill(self, job: Job, stats: Stats, dense: Literal[False]) -> OctreeArrays: ...

    def _winding_fill(self, job: Job, stats: Stats, dense: bool) -> ColumnBits | OctreeArrays:
        """fill_mode="winding" (pipeline/winding.py): slab by slab, the passes mark every
        crossing with its sign, WindingFill cuts the columns into segments there and sums
        the signs, the passes run again only for the tiles where two crossings share a mark
        (to add each crossing's sign to its segment), and WindingFill replaces the marks by
        the winding bits, which then go the way parity bits go (download, or the SVO build
        on the device). The plan counts the signs' plane beside the grid; the boundary and
        the segment lists are kept out of its budget."""
        started = time.perf_counter()
        boundary = mesh_boundary(job.mesh, job.vertices)
        stats.add_host(winding_boundary=(time.perf_counter() - started) * 1e3)
        budget = default_budget(self.device) if job.max_memory is None else job.max_memory
        nx, ny, _ = job.shape
        edges = boundary.nbytes if boundary is not None else 0
        # the segment lists grow with a slab's columns: a share of the budget, at most a quarter
        reserve = 2 * edges + min(WINDING_COLUMN_RESERVE * nx * ny, budget // 4)
        passes, plan = self._kernels_and_plan(
            job,
            stats,
            job.shape,
            max(budget - reserve, 0),
            svo=not dense,
            dense=dense,
            grid_planes=2,  # the marks and their signs
        )
        stats.memory.budget_bytes = budget
        stats.count_max(slab_rows=plan.slab_rows, triangle_batch=plan.batch_triangles)
        runner = self._pass_runner(job, passes, plan, stats)
        if self._winding_pipelines is None:
            self._winding_pipelines = WindingPipelines(self.device)
        fill = WindingFill(
            self._winding_pipelines, self._scan_kernels(), self._pool, self._sequence, boundary,
            job.shape, stats,
        )  # fmt: skip
        outputs = _SlabOutputs(self, plan, job.shape, job, stats, dense)
        for slab in plan.slabs():
            grid = self._pool.binding("grid", slab.grid_bytes)
            marks = fill.marks(slab)
            runner.voxelize(slab, grid, marks=marks)
            signed = fill.segments(slab, grid, marks)
            if signed is not None:
                if signed.flagged_tiles:  # two crossings share a mark there
                    runner.voxelize(slab, grid, signed=signed)
                fill.finish(slab, grid, signed)
            outputs.keep(slab, grid)
        return outputs.result()

    # -- kernels, stats, lifetime ------------------------------------------------------------

    def _pass_runner(
        self,
        job: Job,
        passes: PassPipelines,
        plan: Plan,
        stats: Stats,
        vertices: np.ndarray | None = None,
        fine: np.ndarray | None = None,
        surface: SurfacePipelines | None = None,
    ) -> PassRunner:
        """The passes over the job's mesh (or over other grid-space `vertices` and their
        `fine` ones, e.g. mirrored): the faces as the variant takes them (uint32 for the
        indexed variants, which upload them, converted once per Mesh; the int64 faces
        themselves for the soup gather, with their read-only view standing for them), and the
        per-Mesh caches the exact fill reads."""
        mesh = job.mesh
        own = (vertices is None or vertices is job.vertices) and (fine is None or fine is job.fine)
        faces, faces_key = (
            (mesh.indices, mesh.indices) if passes.indexed else (mesh.faces, mesh.frozen_faces)
        )
        return PassRunner(
            self.device, passes, self._scan_kernels(), self._pool, self._sequence,
            job.vertices if vertices is None else vertices, faces,
            job.sort, plan.batch_triangles, plan.pair_budget, stats, surface=surface,
            fine=job.fine_vertices() if fine is None else fine, used=mesh.used,
            faces_key=faces_key, known_gap=job.fixed_gap if own else None,
            soup=job.soup if own and not passes.indexed else None,
        )  # fmt: skip

    def _kernels_and_plan(
        self, job: Job, stats: Stats, shape: Shape, budget: int | None, **options: Any
    ) -> tuple[PassPipelines, Plan]:
        """The job's pass kernels and their plan (make_plan's `options` for a grid of
        `shape`), the variant that ran in `stats`: the first of the job's variant candidates
        whose plan fits the budget (the last one's plan says what fits nowhere)."""

        def plan(variant: str) -> Plan:
            indexed = is_indexed(variant)
            triangles, vertices = job.mesh.triangle_count, len(job.vertices)
            return make_plan(self.device, shape, triangles, vertices, indexed, budget, **options)

        choices = variant_candidates(job.variant, self.device.is_cpu)
        for variant in choices[:-1]:
            try:
                made = plan(variant)
            except MemoryBudgetError:
                continue  # the next choice holds less
            break
        else:
            variant = choices[-1]
            made = plan(variant)
        passes = self._pass_kernels(variant)
        stats.variant = passes.variant
        return passes, made

    def _pass_kernels(self, variant: str) -> PassPipelines:
        if variant not in self._passes:
            self._passes[variant] = PassPipelines(self.device, variant)
        return self._passes[variant]

    def _surface_kernels(self, variant: str, surface: str) -> SurfacePipelines:
        if (variant, surface) not in self._surfaces:
            self._surfaces[variant, surface] = SurfacePipelines(self.device, variant, surface)
        return self._surfaces[variant, surface]

    def _scan_kernels(self) -> Scan:
        if self._scan is None:
            self._scan = Scan(self.device)
        return self._scan

    def _gather_faces(self, slab: Window, ids: Binding, stats: Stats) -> MarkedVoxels:
        if self._face_gather is None:
            self._face_gather = FaceGather(self.device)
        scan = self._scan_kernels()
        return gather_marked(self._sequence, self._pool, scan, self._face_gather, slab, ids, stats)

    def _svo_kernels(self) -> SVOPipelines:
        if self._svo is None:
            self._svo = SVOPipelines(self.device)
        return self._svo

    def prepare(self, variant: str, sort: str, svo: bool) -> None:
        """Start building the kernels a parity job of this kind dispatches, in the order it
        dispatches them, on a background thread (on a CPU device each also gets its first
        dispatch there, which compiles it: commands.FirstDispatches): the caller reads and
        checks the mesh meanwhile. Those built already cost nothing; a job needing others
        builds them."""
        passes = self._pass_kernels(variant)
        scan = self._scan_kernels()
        wanted = [passes.setup, scan.scan_blocks, scan.add_offsets]
        if sort == "counting":  # one submission: the pair count sizes the later dispatches
            wanted += [passes.pair_dispatch, passes.emit, passes.count_pairs]
            wanted += [passes.scatter_pairs, passes.mark_counts, passes.compact_counts]
        else:
            wanted += [passes.emit, passes.sort_blocks, passes.sort_step, passes.sort_merge]
            wanted += [passes.mark, passes.compact]
        wanted.append(passes.fill_flips)
        if svo:
            tree = self._svo_kernels()
            wanted += [tree.classify_grid, tree.classify_nodes]
            wanted += [tree.write_nodes, tree.write_bricks, tree.download]
        self._builders = [thread for thread in self._builders if thread.is_alive()]
        thread = build_in_background(wanted)
        if thread is not None:
            self._builders.append(thread)

    def _stats(self, job: Job) -> Stats:
        self._growth_at_start = self._pool.growth_ms
        return Stats(
            device=self.device.name,
            variant=job.variant,
            sort=job.sort,
            fill_mode=job.fill_mode,
            shape=job.shape,
            mode=job.mode,
            surface=job.surface if job.mode == "surface" else "",
        )

    def _finish(self, stats: Stats) -> None:
        growth = self._pool.growth_ms - self._growth_at_start
        if growth:  # (within the steps that grew them: upload, the submissions)
            stats.add_host(buffer_growth=growth)
        stats.memory.device_buffers = self._pool.sizes(host_visible=False)
        stats.memory.staging_buffers = self._pool.sizes(host_visible=True)
        _log.debug("GPU ms: %s, total %.3f", _ms(stats.gpu_ms), stats.gpu_total_ms)

    def close(self) -> None:
        """Wait for the background builds and the device, then free every kernel and buffer
        (the device stays open)."""
        for thread in self._builders:
            thread.join()
        self._builders.clear()
        self.device.wait_idle()
        for kernels in self._passes.values():
            kernels.destroy()
        self._passes.clear()
        for surface in self._surfaces.values():
            surface.destroy()
        self._surfaces.clear()
        for primitive in (self._scan, self._svo, self._face_gather, self._winding_pipelines):
            if primitive is not None:
                primitive.destroy()
        self._scan = None
        self._svo = None
        self._face_gather = None
        self._winding_pipelines = None
        self._sequence.destroy()
        self._pool.destroy()


def _overlap_columns(winding: np.ndarray) -> int:
    """Columns (i, j) where the winding leaves {0, 1} at some voxel, an i-plane at a time."""
    columns = 0
    for plane in winding:
        columns += int(np.count_nonzero(((plane < 0) | (plane > 1)).any(axis=1)))
    return columns


def _dense_faces(job: Job, parts: list[MarkedVoxels]) -> np.ndarray:
    """int32[i, j, k] face ids of the marked voxels, -1 elsewhere."""
    faces = np.full(job.shape, -1, np.int32)
    for part in parts:
        part.scatter(faces)
    return faces


def _ms(times: dict[str, float]) -> str:
    """Milliseconds by label on one line, for the log."""
    return ", ".join(f"{label} {ms:.3f}" for label, ms in times.items())


class _SlabOutputs:
    """What each slab leaves once its passes are done: its rows of the dense grid's words
    (`dense`; a slab's rows are contiguous words, so the grid's are theirs end to end), or
    its SVO forest, merged into one octree at the end; with the progress over slabs."""

    def __init__(
        self, pipeline: Pipeline, plan: Plan, shape: Shape, job: Job, stats: Stats, dense: bool
    ) -> None:
        self._pipeline, self._plan, self._shape = pipeline, plan, shape
        self._progress, self._stats = job.progress, stats
        self._slab_count = len(plan.slabs())
        self._dense = dense
        self._words: list[np.ndarray] = []
        self._forests: list[tuple[int, SVOArrays]] = []
        self._kept = 0

    def svo_recorder(self, slab: Window, grid: Binding) -> Callable[[], RecordedSVO]:
        """What records the slab's SVO conversion into the passes' last submission."""
        pipeline = self._pipeline
        forest = self._plan.forest(slab)
        return lambda: record_svo(
            pipeline._scan_kernels(), pipeline._svo_kernels(), pipeline._pool,
            pipeline._sequence, forest, grid,
        )  # fmt: skip

    def keep(
        self,
        slab: Window,
        grid: Binding,
        staging: Buffer | None = None,
        recorded: RecordedSVO | None = None,
    ) -> None:
        """The slab's result from `grid`, or from `staging` where the passes' last submission
        already copied the bits back, or from the SVO conversion `recorded` into it (run:
        its arrays are read now)."""
        pipeline, stats = self._pipeline, self._stats
        if self._dense:
            if staging is not None:
                self._words.append(pipeline._read_words(slab, staging, stats))
            else:
                self._words.append(pipeline._download(slab, grid, stats))
        else:
            forest = self._plan.forest(slab)
            if recorded is not None:
                arrays = recorded.finish(stats)
            else:
                arrays = pipeline._build_svo(forest, grid, stats)
            self._forests.append((forest.cube_y, arrays))
        self._kept += 1
        if self._progress is not None and self._slab_count > 1:
            self._progress("slabs", self._kept, self._slab_count)

    def result(self) -> ColumnBits | OctreeArrays:
        if self._dense:  # the slabs come in row order
            words = self._words[0] if len(self._words) == 1 else np.concatenate(self._words)
            return ColumnBits(words, self._shape)
        return self._pipeline._merge(self._plan, self._shape, self._forests, self._stats)
