"""fill_mode="winding": solid where the generalized winding number w of the mesh exceeds 1/2,
on the GPU, with work in proportion to the surface rather than the volume.

w is never summed over the triangles (shaders/winding.glsl): it is s - c, where s counts
the surface's crossings below the point with their signs (the parity passes' exact integer
predicates) and c is the solid angle of the vertical curtain hanging up from the mesh's
boundary, a sum over the boundary edges only. A mesh whose boundary cancels (closed, or
closed parts in any orientation, overlapping or not) has no boundary edge: w = s exactly.

Per slab: the passes mark the first voxel above every crossing (fill.comp, MARK_CROSSINGS)
and record its sign in a second plane; the runs of voxels between marks inside the surface's
bounding box are the segments, on which s is one integer (winding_columns.comp), summed from
the signs up each column. Where two crossings share a mark (rare: coincident or nearly
coincident sheets), one sign cannot hold their sum: the marking fill flags the tile, and
for the flagged tiles only the passes run again and add each crossing's sign to its segment
(fill.comp, SIGNED_CROSSINGS), summed up each column. Then each segment is a run.

Before the segments, a bound on c over whole tiles and columns (the angles the boundary
edges subtend, winding_bound.comp) decides the columns far from the boundary: there s alone
decides (solid iff s >= 1), and outside the flagged tiles their voxels are written at once,
with no segment listed (every column of a closed mesh). First round: the other columns
evaluate c at the two ends of their range, which bounds c on all of it (each edge's term is
monotonic along the column). A run not decided is evaluated at its own two ends (most are
decided there), then halved, each half carrying c at its two ends, so each halving
evaluates one new point (winding_evaluate.comp, winding_decide.comp). Points of one column
share each edge's x-y part of its term (winding.glsl, StripColumn). The halvings run in one
dispatch, a workgroup per run going depth first (winding_bisect.comp), where every edge fits
in one; otherwise round after round. A closed mesh needs no round beyond the first and
evaluates no solid angle.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass

import numpy as np

from ..gpu.buffers import Binding, BufferPool
from ..gpu.commands import Sequence, workgroups
from ..gpu.device import Device
from ..gpu.kernels import COMMON_DEFINES, WG_SIZE
from ..gpu.pipelines import ComputePipeline
from ..gpu.scan import Scan
from ..mesh import Mesh
from ..placement import FIXED_BITS
from ..stats import Stats
from . import kernels
from .layout import TILE_SIDE, CrossingMarks, SignedCrossings, Window

EDGE_CHUNK = 1 << 14  # boundary edges per curtain dispatch (llvmpipe's loop budget)
# Evaluations per run in one winding_bisect dispatch: a run of 2^16 voxels takes 16 to come
# down to single voxels along one path; with EDGE_CHUNK edges a lane's loops stay within
# llvmpipe's budget.
BISECT_STEPS = 24
# Lanes a later curtain round aims to keep busy: with fewer points than this, a workgroup
# takes fewer points and gives each more lanes (the same on every device, so that the sums
# round the same everywhere).
CURTAIN_LANES = 1 << 18
TILE_COLUMNS = TILE_SIDE * TILE_SIDE  # columns of a tile: slots per group of segments
# The rounds' buffers: a round reads one of each pair and writes the other (3 per run)
_RUN_NAMES = ("winding_runs", "winding_runs_next")
_CURTAIN_NAMES = ("winding_curtain_next", "winding_curtain_carried")
_ONE = 1 << FIXED_BITS
_HALF = _ONE >> 1
_UNDECIDED = 0x7F7F7F7F  # a float bound of 3.4e38: no column decided by it


def winding_defines() -> dict[str, int]:
    """What the winding kernels are compiled with besides their own defines."""
    return {**COMMON_DEFINES, "FIXED_BITS": FIXED_BITS}


# -- the boundary ---------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Boundary:
    """What the winding kernels read of the mesh: its boundary edges with their net counts,
    and the box of the surface (the triangles with area)."""

    edges: np.ndarray  # int32 (B, 8): x0 xyz, m, x1 xyz, 0 (fixed point)
    box: np.ndarray  # int64 (2, 3): fixed-point bounding box of the surface

    @property
    def edge_count(self) -> int:
        return len(self.edges)

    @property
    def nbytes(self) -> int:
        return self.edges.nbytes


_boundaries: weakref.WeakKeyDictionary[Mesh, tuple[np.ndarray, Boundary | None]] = (
    weakref.WeakKeyDictionary()
)


def mesh_boundary(mesh: Mesh, grid_vertices: np.ndarray) -> Boundary | None:
    """The boundary of `mesh` at these grid-space vertices (None: no triangle has area),
    found once and kept with the Mesh for the next call with the same vertices."""
    cached = _boundaries.get(mesh)
    if cached is not None and np.array_equal(cached[0], grid_vertices):
        return cached[1]
    boundary = find_boundary(grid_vertices, mesh.faces)
    _boundaries[mesh] = (np.array(grid_vertices, np.float32), boundary)
    return boundary


def fixed_corners(grid_vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """(T, 3, 3) int64: each triangle's corners in fixed point, as the passes compute them."""
    g = np.asarray(grid_vertices, np.float32).astype(np.float64)
    fixed = np.rint(g * _ONE).astype(np.int64)
    return fixed[np.asarray(faces, np.int64)]


def triangle_normals(corners: np.ndarray) -> np.ndarray:
    """(T, 3) int64: (b - a) x (c - a) of fixed-point corners, exact (|.| < 2^62)."""
    u = corners[:, 1] - corners[:, 0]
    v = corners[:, 2] - corners[:, 0]
    return np.stack(
        [
            u[:, 1] * v[:, 2] - u[:, 2] * v[:, 1],
            u[:, 2] * v[:, 0] - u[:, 0] * v[:, 2],
            u[:, 0] * v[:, 1] - u[:, 1] * v[:, 0],
        ],
        axis=1,
    )


def boundary_edges(corners: np.ndarray) -> np.ndarray:
    """(B, 7) int64: the boundary of the triangles as a chain, x0 xyz, x1 xyz, m: each edge
    (compared by position, x0 < x1 in position order) used m times more x0 -> x1 than
    x1 -> x0, where m != 0. Empty when the boundary cancels (closed surfaces)."""
    flat = corners.reshape(-1, 3)
    positions, ids = np.unique(flat, axis=0, return_inverse=True)
    ids = ids.reshape(-1, 3)
    start, end = ids.reshape(-1), ids[:, [1, 2, 0]].reshape(-1)
    low, high = np.minimum(start, end), np.maximum(start, end)
    keys = low * len(positions) + high
    unique, inverse = np.unique(keys, return_inverse=True)
    net = np.zeros(len(unique), np.int64)
    np.add.at(net, inverse, np.where(start < end, 1, -1))
    open_edges = np.flatnonzero(net)
    first, second = unique[open_edges] // len(positions), unique[open_edges] % len(positions)
    return np.concatenate(
        [positions[first], positions[second], net[open_edges, None]], axis=1
    ).astype(np.int64)


def find_boundary(grid_vertices: np.ndarray, faces: np.ndarray) -> Boundary | None:
    """The boundary and box of a mesh whose vertices are in grid space (numpy)."""
    corners = fixed_corners(grid_vertices, faces)
    surface = corners[np.any(triangle_normals(corners) != 0, axis=1)]  # no area: no angle
    if not len(surface):
        return None
    edges = boundary_edges(surface)
    box = np.array([surface.min(axis=(0, 1)), surface.max(axis=(0, 1))])
    rows = np.zeros((len(edges), 8), np.int32)
    rows[:, 0:3], rows[:, 3], rows[:, 4:7] = edges[:, 0:3], edges[:, 6], edges[:, 3:6]
    return Boundary(rows, box)


def column_box(box: np.ndarray, shape: tuple[int, int, int]) -> dict[str, int]:
    """The voxels whose centres, nudged by (+e, +e^2, -E), lie inside the fixed-point box:
    columns i_lo <= i < i_hi (Xmin <= centre < Xmax), the same in j, and voxels
    k_lo <= k < k_hi (Zmin < centre <= Zmax)."""
    (x0, y0, z0), (x1, y1, z1) = (tuple(int(v) - _HALF for v in row) for row in box)

    def ceil(value: int) -> int:
        return -(-value // _ONE)

    nx, ny, nz = shape
    return {
        "i_lo": min(max(ceil(x0), 0), nx),
        "i_hi": min(max(ceil(x1), 0), nx),
        "j_lo": min(max(ceil(y0), 0), ny),
        "j_hi": min(max(ceil(y1), 0), ny),
        "k_lo": min(max(z0 // _ONE + 1, 0), nz),
        "k_hi": min(max(z1 // _ONE + 1, 0), nz),
    }


# -- the GPU work -----------------------------------------------------------------------------


def point_spread(items: int) -> int:
    """How thinly a curtain round spreads its items (columns or runs, one or two points
    each): a workgroup takes CURTAIN_GROUP / this many (a power of two, 1 to CURTAIN_GROUP)."""
    spread = max(CURTAIN_LANES // max(items, 1), 1)
    return min(1 << (spread.bit_length() - 1), kernels.CURTAIN_GROUP)


class WindingPipelines:
    """The winding kernels, built once per device (on the first winding call)."""

    def __init__(self, device: Device):
        defines = winding_defines()
        self.bound = ComputePipeline(device, kernels.WINDING_BOUND, defines)
        self.count = ComputePipeline(device, kernels.WINDING_COUNT, defines)
        self.emit = ComputePipeline(device, kernels.WINDING_EMIT, defines)
        self.sum = ComputePipeline(device, kernels.WINDING_SUM, defines)
        self.curtain = ComputePipeline(device, kernels.WINDING_CURTAIN, defines)
        self.decide = ComputePipeline(device, kernels.WINDING_DECIDE, defines)
        self.bisect = ComputePipeline(device, kernels.WINDING_BISECT, defines)

    def destroy(self) -> None:
        columns = (self.bound, self.count, self.emit, self.sum)
        for pipeline in (*columns, self.curtain, self.decide, self.bisect):
            pipeline.destroy()


class WindingFill:
    """Turns the crossing marks of one slab at a time into winding bits, in place: `marks`
    for the marking passes, `segments` after them, `finish` after the signed ones (if any
    tile is flagged). One per voxelization: it uploads the boundary with the first slab."""

    def __init__(
        self,
        pipelines: WindingPipelines,
        scan: Scan,
        pool: BufferPool,
        sequence: Sequence,
        boundary: Boundary | None,
        shape: tuple[int, int, int],
        stats: Stats,
    ):
        self.pipelines, self.scan, self.pool, self.sequence = pipelines, scan, pool, sequence
        self.boundary, self.stats = boundary, stats
        names = ("i_lo", "i_hi", "j_lo", "j_hi", "k_lo", "k_hi")
        self.box = column_box(boundary.box, shape) if boundary else dict.fromkeys(names, 0)
        self._edges: Binding | None = None
        self._bounds: Binding | None = None
        self._started = 0.0
        self._slots = 0
        if boundary is not None:
            stats.count(winding_boundary_edges=boundary.edge_count)

    def marks(self, slab: Window) -> CrossingMarks:
        """The buffers the marking passes of `slab` write besides its grid (the passes clear
        the tile flags; the signs need no clearing)."""
        return CrossingMarks(
            self.pool.binding("winding_signs", slab.grid_bytes),
            self.pool.binding("winding_tile_flags", (slab.tiles + 1) * 4),
        )

    def segments(self, slab: Window, grid: Binding, marks: CrossingMarks) -> SignedCrossings | None:
        """Cut the slab's columns into segments at the marks in `grid`, with s of the
        unflagged tiles' segments: what the signed passes need for the flagged tiles. The
        columns decided by the bound are written in place of their marks (None: no segment
        is left, and the grid holds the slab's voxels)."""
        tiles = slab.tiles
        offsets = self.pool.binding("winding_offsets", (tiles + 1) * 4)
        push = {"window": slab, "box": self.box}
        sequence = self._begin()
        bounds = self._bound_columns(slab)
        sequence.fill(offsets.buffer, 0, offsets.size)
        sequence.barrier()
        groups = workgroups(tiles, kernels.COLUMN_TILES)
        flags = marks.tile_flags
        sequence.dispatch(
            self.pipelines.count,
            {"grid": grid, "offsets": offsets, "tile_flags": flags, "bounds": bounds},
            push,
            groups,
        )
        sequence.barrier()
        total = self.scan.record(sequence, self.pool, offsets.buffer, tiles + 1, "winding")
        sequence.mark("winding_segments")
        staging = sequence.download(total, 4)
        flagged_staging = sequence.download(marks.tile_flags.buffer, 4)
        self._submit("winding_count_submission")
        slots = int(staging.read(np.uint32, 1)[0]) * TILE_COLUMNS if self.boundary else 0
        flagged = int(flagged_staging.read(np.uint32, 1)[0])
        self.stats.count(winding_flagged_tiles=flagged)
        self._slots = slots
        sequence = self._begin()
        runs = self.pool.binding("winding_runs", max(slots, 1) * 16)
        crossings = self.pool.binding("winding_crossings", max(slots, 1) * 4)
        sequence.dispatch(
            self.pipelines.emit,
            {
                "grid": grid,
                "offsets": offsets,
                "runs": runs,
                "crossings": crossings,
                "signs": marks.signs,
                "tile_flags": flags,
                "bounds": bounds,
            },
            push,
            workgroups(tiles, kernels.COLUMN_TILES),
        )
        sequence.barrier()
        sequence.mark("winding_segments")
        self._submit("winding_segments_submission")
        self.stats.count(winding_segments=slots)
        if not slots:
            return None
        return SignedCrossings(offsets, crossings, self.box, flags, flagged)

    def finish(self, slab: Window, grid: Binding, signed: SignedCrossings) -> None:
        """After the signed passes (if any tile is flagged): s per segment, the flagged
        tiles' marks cleared, the runs decided."""
        sequence = self._begin()
        self._upload_edges()
        if signed.flagged_tiles:
            sequence.dispatch(
                self.pipelines.sum,
                {
                    "grid": grid,
                    "offsets": signed.offsets,
                    "crossings": signed.crossings,
                    "tile_flags": signed.tile_flags,
                },
                {"window": slab, "box": self.box},
                workgroups(slab.tiles, kernels.COLUMN_TILES),
            )
        sequence.barrier()
        sequence.mark("winding_segments")
        runs = self.pool.binding("winding_runs", self._slots * 16)
        self._decide(slab, grid, runs, self._slots, signed)

    def _begin(self) -> Sequence:
        self._started = time.perf_counter()
        self.sequence.begin()
        self.sequence.mark("start")
        return self.sequence

    def _submit(self, label: str) -> None:
        self.stats.add_gpu(self.sequence.submit())
        self.stats.add_host({label: (time.perf_counter() - self._started) * 1e3})

    def _end_round(self, label: str, next_count: Binding) -> tuple[int, int]:
        """Mark the round's last pass, submit, and read what it left: (runs for the next
        round, points whose c was evaluated)."""
        self.sequence.barrier()
        self.sequence.mark(label)
        staging = self.sequence.download(next_count.buffer, 8)
        self._submit("winding_decide_submission")
        left, evaluations = (int(v) for v in staging.read(np.uint32, 2))
        return left, evaluations

    def _upload_edges(self) -> Binding:
        if self._edges is None:
            edges = self.boundary.edges if self.boundary is not None else np.zeros(0, np.int32)
            self._edges = self.pool.binding("winding_edges", max(edges.nbytes, 16))
            if edges.nbytes:
                self.sequence.upload(self._edges.buffer, edges)
                self.sequence.barrier()
                self.sequence.mark("upload")
        return self._edges

    def _bound_columns(self, slab: Window) -> Binding:
        """Record winding_bound.comp over the slab's tiles, where one dispatch holds every
        edge (otherwise every column stays undecided: the bounds are set above 0.49)."""
        bounds = self.pool.binding("winding_bounds", slab.tiles * TILE_COLUMNS * 8)
        self._bounds = bounds
        edge_count = self.boundary.edge_count if self.boundary is not None else 0
        if edge_count > EDGE_CHUNK:
            self.sequence.fill(bounds.buffer, _UNDECIDED)
            return bounds
        self.sequence.dispatch(
            self.pipelines.bound,
            {"edges": self._upload_edges(), "bounds": bounds},
            {"window": slab, "box": self.box, "edge_count": edge_count},
            workgroups(slab.tiles * kernels.BOUND_LANES * TILE_COLUMNS, kernels.BOUND_GROUP),
        )
        self.sequence.mark("winding_bound")
        return bounds

    def _decide(
        self, slab: Window, grid: Binding, runs: Binding, count: int, signed: SignedCrossings
    ) -> None:
        """Rounds of winding_evaluate and winding_decide until no run is left. Continues the
        sequence begun and submits it."""
        assert self.boundary is not None
        rounds = 0
        columns = self.pool.binding("winding_curtain", count * 32)  # 2 per column's first run
        curtain = columns
        bisect = self.boundary.edge_count <= EDGE_CHUNK  # the later rounds in one dispatch each
        while count:
            # stage 0: the columns' ends; 1: each run's own ends (a run of one voxel: it);
            # 2: the middles
            stage = min(rounds, 2)
            if stage == 2 and bisect:
                runs, curtain, count = self._bisect(
                    slab, grid, runs, curtain, count, signed, rounds
                )
            else:
                if stage == 1:
                    curtain = self.pool.binding(_CURTAIN_NAMES[0], count * 48)
                runs, curtain, count = self._curtain_round(
                    slab, grid, runs, curtain, count, signed,
                    columns=columns, stage=stage, round_index=rounds,
                )  # fmt: skip
            rounds += 1
        self.stats.count_max(winding_rounds=rounds)

    def _curtain_round(
        self,
        slab: Window,
        grid: Binding,
        runs: Binding,
        curtain: Binding,
        count: int,
        signed: SignedCrossings,
        *,
        columns: Binding,
        stage: int,
        round_index: int,
    ) -> tuple[Binding, Binding, int]:
        """One round of winding_evaluate (c at the points of `stage`, edges in chunks) and
        winding_decide over `count` runs, writing what it leaves into the buffers the round
        does not read. The sequence is begun, and is submitted (and begun again where runs
        are left). Returns what it left: runs, their curtain and their count."""
        assert self.boundary is not None and self._edges is not None
        assert self._bounds is not None
        edge_count, sequence = self.boundary.edge_count, self.sequence
        next_count = self.pool.binding("winding_next_count", 16)
        # items: a column (stage 0) or a run, with up to two points (one in stage 2)
        items = (TILE_COLUMNS * slab.tiles, count, count)[stage]
        points = (2 * items, 3 * count, count)[stage]  # the most it may evaluate
        spread = point_spread(items)
        if stage < 2:
            sequence.fill(curtain.buffer, 0, curtain.size)
        following = self.pool.binding(
            _RUN_NAMES[(round_index + 1) % 2], count * (32 if stage else 16)
        )
        carried = self.pool.binding(_CURTAIN_NAMES[round_index % 2], count * 96 if stage else 16)
        sequence.fill(next_count.buffer, 0, next_count.size)
        sequence.barrier()
        for first in range(0, edge_count, EDGE_CHUNK):
            sequence.dispatch(
                self.pipelines.curtain,
                {
                    "edges": self._edges,
                    "runs": runs,
                    "curtain": curtain,
                    "offsets": signed.offsets,
                    "columns": columns if stage == 1 else signed.offsets,  # read in stage 1 only
                    "counts": next_count,
                    "bounds": self._bounds,  # read in stage 0 only
                },
                {
                    "window": slab,
                    "item_count": items,
                    "edge_first": first,
                    "edge_end": min(first + EDGE_CHUNK, edge_count),
                    "stage": stage,
                    "column_lo": self.box["k_lo"],
                    "column_hi": self.box["k_hi"],
                    "point_spread": spread,
                },
                workgroups(items * spread, kernels.CURTAIN_GROUP),
            )
            sequence.barrier()
        sequence.mark("winding_curtain")
        sequence.dispatch(
            self.pipelines.decide,
            {
                "grid": grid,
                "runs": runs,
                "curtain": curtain,
                "crossings": signed.crossings,
                "next": following,
                "next_count": next_count,
                "next_curtain": carried,
            },
            {"window": slab, "run_count": count, "stage": stage},
            workgroups(count, WG_SIZE),
        )
        left, evaluations = self._end_round("winding_decide", next_count)
        self.stats.count(winding_runs=count, winding_points=points, winding_evaluations=evaluations)
        if left:
            self._begin()
        return following, carried, left

    def _bisect(
        self,
        slab: Window,
        grid: Binding,
        runs: Binding,
        curtain: Binding,
        count: int,
        signed: SignedCrossings,
        round_index: int,
    ) -> tuple[Binding, Binding, int]:
        """One winding_bisect dispatch over `count` runs with c at their ends (3 per run in
        `curtain`), writing what it leaves into the buffers the round does not read (as
        _decide's rounds alternate them). The sequence is begun, and is submitted. Returns
        what it left: runs, their curtain and their count."""
        assert self.boundary is not None and self._edges is not None
        sequence, left = self.sequence, kernels.BISECT_LEFT
        next_count = self.pool.binding("winding_next_count", 16)
        following = self.pool.binding(_RUN_NAMES[(round_index + 1) % 2], count * left * 16)
        carried = self.pool.binding(_CURTAIN_NAMES[round_index % 2], count * left * 48)
        sequence.fill(next_count.buffer, 0, next_count.size)
        sequence.barrier()
        sequence.dispatch(
            self.pipelines.bisect,
            {
                "edges": self._edges,
                "grid": grid,
                "runs": runs,
                "curtain": curtain,
                "crossings": signed.crossings,
                "next": following,
                "counts": next_count,
                "next_curtain": carried,
            },
            {
                "window": slab,
                "run_count": count,
                "edge_count": self.boundary.edge_count,
                "step_budget": BISECT_STEPS,
            },
            count,
        )
        left_count, evaluations = self._end_round("winding_bisect", next_count)
        self.stats.count(
            winding_runs=count, winding_points=evaluations, winding_evaluations=evaluations
        )
        if left_count:
            self._begin()
        return following, carried, left_count
