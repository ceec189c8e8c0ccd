"""fill_mode="winding": solid where the generalized winding number w of the mesh exceeds 1/2,
on the GPU, with work in proportion to the surface rather than the volume.

w is never summed over the triangles (shaders/winding.glsl): it is s - w_C, where s counts
the surface's crossings below the point with their signs (the parity passes' exact integer
predicates) and w_C is the solid angle of the vertical curtain hanging up from the mesh's
boundary, a sum over the boundary edges only. A mesh whose boundary cancels (closed, or
closed parts in any orientation, overlapping or not) has no boundary edge: w = s exactly.

Along a voxel column w jumps by an integer only where the column crosses the surface and is
continuous in between. The fill pass, with MARK_CROSSINGS, marks the first voxel above every
crossing (shaders/fill.comp); the runs of voxels between marks, inside the mesh's bounding
box, are the segments (shaders/winding_columns.comp). Each segment is evaluated once, at its
middle voxel, with a bound on how much w_C can change along it; where that bound does not
keep w on one side of 1/2 the segment is evaluated voxel by voxel (winding_refine.comp). So
every voxel gets the rule's answer; only w_C is rounded (float32, its error is in the bound).

s is found by walking a hierarchy of boxes over the triangles (a complete binary tree over
leaves of WINDING_LEAF triangles in Morton order), built on the host with numpy, once per Mesh
and grid placement (kept with the Mesh while it lives), and uploaded once per voxelization.
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
from .passes import TILE_SIDE, Window

WINDING_LEAF = 8  # triangles per leaf of the hierarchy
EDGE_CHUNK = 1 << 14  # boundary edges per evaluation dispatch (llvmpipe's loop budget)
TILE_COLUMNS = TILE_SIDE * TILE_SIDE  # points a workgroup evaluates together
NODE_FLOATS = 8  # WindingNode in shaders/winding_evaluate.comp: low, high
_ONE = 1 << FIXED_BITS
_HALF = _ONE >> 1
_EMPTY = np.float32(3.0e38)


def winding_defines() -> dict[str, int]:
    """What the winding kernels are compiled with besides their own defines."""
    return {
        **COMMON_DEFINES,
        "FIXED_BITS": FIXED_BITS,
        "BRANCHLESS": 0,  # exact.glsl's coverage test, plain branches
        "WINDING_LEAF": WINDING_LEAF,
    }


# -- the hierarchy and the boundary -------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class WindingTree:
    """What the evaluation reads: the triangles a vertical ray can cross, in Morton order,
    with a complete binary tree of boxes over leaves of WINDING_LEAF of them (node n at row n,
    row 0 unused), and the boundary edges with their net counts."""

    nodes: np.ndarray  # float32 (2^(depth + 1), NODE_FLOATS): box low xyz, 0, high xyz, 0
    corners: np.ndarray  # int32 (T, 9): fixed-point corners as given (the orientation counts)
    edges: np.ndarray  # int32 (B, 8): x0 xyz, m, x1 xyz, 0 (fixed point)
    depth: int
    box: np.ndarray  # int64 (2, 3): fixed-point bounding box of the surface

    @property
    def triangle_count(self) -> int:
        return len(self.corners)

    @property
    def edge_count(self) -> int:
        return len(self.edges)

    @property
    def nbytes(self) -> int:
        return self.nodes.nbytes + self.corners.nbytes + self.edges.nbytes


_trees: weakref.WeakKeyDictionary[Mesh, tuple[np.ndarray, WindingTree | None]] = (
    weakref.WeakKeyDictionary()
)


def winding_tree(mesh: Mesh, grid_vertices: np.ndarray) -> WindingTree | None:
    """The hierarchy of `mesh` at these grid-space vertices (None: no triangle has area),
    built once and kept with the Mesh for the next call with the same vertices."""
    cached = _trees.get(mesh)
    if cached is not None and np.array_equal(cached[0], grid_vertices):
        return cached[1]
    tree = build_tree(grid_vertices, mesh.faces)
    _trees[mesh] = (np.array(grid_vertices, np.float32), tree)
    return tree


def fixed_corners(grid_vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """(T, 3, 3) int64: each triangle's corners in fixed point, as the passes compute them."""
    g = np.asarray(grid_vertices, np.float32).astype(np.float64)
    fixed = np.rint(g * _ONE).astype(np.int64)
    return fixed[np.asarray(faces, np.int64)]


def triangle_normals(corners: np.ndarray) -> np.ndarray:
    """(T, 3) int64: (b - a) x (c - a) of fixed-point corners, exact (|.| < 2^60)."""
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


def _morton_order(centroids: np.ndarray) -> np.ndarray:
    """Triangle order along a Morton curve of their centroids (16 bits per axis)."""
    low, high = centroids.min(axis=0), centroids.max(axis=0)
    scaled = (centroids - low) / np.maximum(high - low, 1e-300) * 65535
    q = np.clip(scaled, 0, 65535).astype(np.int64)
    code = np.zeros(len(q), np.int64)
    for bit in range(16):
        for axis in range(3):
            code |= ((q[:, axis] >> bit) & 1) << (3 * bit + axis)
    return np.argsort(code, kind="stable")


def _outwards(values: np.ndarray, direction: float) -> np.ndarray:
    """float64 -> float32, rounded towards `direction` (-inf or +inf) where inexact."""
    rounded = values.astype(np.float32)
    inexact = rounded.astype(np.float64) != values
    rounded[inexact] = np.nextafter(rounded[inexact], np.float32(direction))
    return rounded


def build_tree(grid_vertices: np.ndarray, faces: np.ndarray) -> WindingTree | None:
    """The hierarchy and boundary of a mesh whose vertices are in grid space (numpy)."""
    corners = fixed_corners(grid_vertices, faces)
    normals = triangle_normals(corners)
    surface = corners[np.any(normals != 0, axis=1)]  # zero area: no solid angle anywhere
    if not len(surface):
        return None
    edges = boundary_edges(surface)
    crossable = surface[triangle_normals(surface)[:, 2] != 0]  # vertical: no ray crosses it
    box = np.array([surface.min(axis=(0, 1)), surface.max(axis=(0, 1))])
    order = _morton_order(crossable.mean(axis=1).astype(np.float64))
    crossable = crossable[order]
    count = len(crossable)
    leaves = max(1, -(-count // WINDING_LEAF))
    depth = max(0, (leaves - 1).bit_length())
    low = np.full((2 << depth, 3), np.inf)
    high = np.full((2 << depth, 3), -np.inf)
    if count:
        starts = np.arange(0, count, WINDING_LEAF)
        leaf = slice(1 << depth, (1 << depth) + len(starts))
        low[leaf] = np.minimum.reduceat(crossable.min(axis=1), starts, axis=0) / _ONE
        high[leaf] = np.maximum.reduceat(crossable.max(axis=1), starts, axis=0) / _ONE
    for d in range(depth - 1, -1, -1):
        nodes = slice(1 << d, 2 << d)
        low[nodes] = np.minimum(low[2 << d : 4 << d : 2], low[(2 << d) + 1 : 4 << d : 2])
        high[nodes] = np.maximum(high[2 << d : 4 << d : 2], high[(2 << d) + 1 : 4 << d : 2])
    nodes_array = np.zeros((2 << depth, NODE_FLOATS), np.float32)
    empty = ~np.isfinite(low[:, 0])
    nodes_array[:, 0:3] = np.where(empty[:, None], _EMPTY, _outwards(np.where(empty[:, None], 0, low), -np.inf))
    nodes_array[:, 4:7] = np.where(empty[:, None], -_EMPTY, _outwards(np.where(empty[:, None], 0, high), np.inf))
    edge_rows = np.zeros((len(edges), 8), np.int32)
    edge_rows[:, 0:3], edge_rows[:, 3] = edges[:, 0:3], edges[:, 6]
    edge_rows[:, 4:7] = edges[:, 3:6]
    flat = np.ascontiguousarray(crossable.reshape(count, 9), np.int32)
    return WindingTree(nodes_array, flat, edge_rows, depth, box)


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


class WindingPipelines:
    """The winding kernels, built once per device (on the first winding call)."""

    def __init__(self, device: Device):
        defines = winding_defines()
        self.count = ComputePipeline(device, kernels.WINDING_COUNT, defines)
        self.emit = ComputePipeline(device, kernels.WINDING_EMIT, defines)
        self.write = ComputePipeline(device, kernels.WINDING_WRITE, defines)
        self.evaluate = ComputePipeline(device, kernels.WINDING_EVALUATE, defines)
        self.refine_count = ComputePipeline(device, kernels.WINDING_REFINE_COUNT, defines)
        self.refine_emit = ComputePipeline(device, kernels.WINDING_REFINE_EMIT, defines)

    def destroy(self) -> None:
        for pipeline in (
            self.count,
            self.emit,
            self.write,
            self.evaluate,
            self.refine_count,
            self.refine_emit,
        ):
            pipeline.destroy()


class WindingFill:
    """Turns the crossing marks of one slab at a time into winding bits, in place. One per
    voxelization: it uploads the hierarchy with the first slab."""

    def __init__(
        self,
        pipelines: WindingPipelines,
        scan: Scan,
        pool: BufferPool,
        sequence: Sequence,
        tree: WindingTree | None,
        shape: tuple[int, int, int],
        stats: Stats,
    ):
        self.pipelines, self.scan, self.pool, self.sequence = pipelines, scan, pool, sequence
        self.tree, self.stats = tree, stats
        names = ("i_lo", "i_hi", "j_lo", "j_hi", "k_lo", "k_hi")
        self.box = column_box(tree.box, shape) if tree is not None else dict.fromkeys(names, 0)
        self._tree_buffers: dict[str, Binding] = {}
        self._started = 0.0
        if tree is not None:
            stats.count(winding_boundary_edges=tree.edge_count)

    def fill(self, slab: Window, grid: Binding) -> None:
        """Replace the marks in `grid` (the slab's rows) by the winding bits."""
        tiles = slab.tiles
        offsets = self.pool.binding("winding_offsets", (tiles + 1) * 4)
        push = {"window": slab, "box": self.box, "refined": 0}
        # 1: groups of slots per tile, their scan, the total.
        sequence = self._begin()
        self._upload_tree()
        sequence.fill(offsets.buffer, 0, offsets.size)
        sequence.barrier()
        sequence.dispatch(self.pipelines.count, {"grid": grid, "offsets": offsets}, push, tiles)
        sequence.barrier()
        total = self.scan.record(sequence, self.pool, offsets.buffer, tiles + 1, "winding")
        sequence.mark("winding_segments")
        staging = sequence.download(total, 4)
        self._submit("winding_count_submission")
        slots = int(staging.read(np.uint32, 1)[0]) * TILE_COLUMNS if self.tree else 0

        empty = self.pool.binding("winding_unused", 16)
        segments, values, refine_offsets, refine_values = empty, empty, empty, empty
        sequence = self._begin()
        if slots:
            # 2: every segment's point, and w there (with the bound of its change).
            segments = self.pool.binding("winding_segments", slots * 8)
            points = self.pool.binding("winding_points", slots * 8)
            sequence.dispatch(
                self.pipelines.emit,
                {"grid": grid, "offsets": offsets, "segments": segments, "points": points},
                push,
                tiles,
            )
            sequence.barrier()
            sequence.mark("winding_segments")
            values, changes = self._evaluate(points, segments, slots, "winding", True)
            self.stats.count(winding_points=slots)
            if self.tree is not None and self.tree.edge_count:
                # 3: segments that one point cannot decide, voxel by voxel.
                push["refined"] = 1
                refine_offsets = self.pool.binding("winding_refine_offsets", (slots + 1) * 4)
                sequence.dispatch(
                    self.pipelines.refine_count,
                    {
                        "segments": segments,
                        "values": values,
                        "changes": changes,
                        "offsets": refine_offsets,
                    },
                    {"slot_count": slots},
                    workgroups(slots + 1, WG_SIZE),
                )
                sequence.barrier()
                total = self.scan.record(
                    sequence, self.pool, refine_offsets.buffer, slots + 1, "winding_refine"
                )
                sequence.mark("winding_refine")
                staging = sequence.download(total, 4)
                self._submit("winding_refine_submission")
                voxels = int(staging.read(np.uint32, 1)[0])
                sequence = self._begin()
                if voxels:
                    refine_points = self.pool.binding("winding_refine_points", voxels * 8)
                    sequence.dispatch(
                        self.pipelines.refine_emit,
                        {"segments": segments, "offsets": refine_offsets, "points": refine_points},
                        {"slot_count": slots},
                        workgroups(slots, WG_SIZE),
                    )
                    sequence.barrier()
                    sequence.mark("winding_refine")
                    refine_values, _ = self._evaluate(
                        refine_points, empty, voxels, "winding_refine", False
                    )
                    self.stats.count(winding_refined_voxels=voxels)
        # 4: the bits.
        sequence.dispatch(
            self.pipelines.write,
            {
                "grid": grid,
                "offsets": offsets,
                "segments": segments,
                "values": values,
                "refine_offsets": refine_offsets,
                "refine_values": refine_values,
            },
            push,
            tiles,
        )
        sequence.barrier()
        sequence.mark("winding_write")
        self._submit("winding_write_submission")

    def _begin(self) -> Sequence:
        self._started = time.perf_counter()
        self.sequence.begin()
        self.sequence.mark("start")
        return self.sequence

    def _submit(self, label: str) -> None:
        self.stats.add_gpu(self.sequence.submit())
        self.stats.add_host({label: (time.perf_counter() - self._started) * 1e3})

    def _upload_tree(self) -> None:
        if self._tree_buffers or self.tree is None:
            return
        tree = self.tree
        for name, array in (("nodes", tree.nodes), ("corners", tree.corners), ("edges", tree.edges)):
            self._tree_buffers[name] = self.pool.binding(f"winding_{name}", max(array.nbytes, 16))
            if array.nbytes:
                self.sequence.upload(self._tree_buffers[name].buffer, array)
        self.sequence.barrier()
        self.sequence.mark("upload")

    def _evaluate(
        self, points: Binding, segments: Binding, count: int, name: str, with_change: bool
    ) -> tuple[Binding, Binding]:
        """w at `count` points (and the bound of its change along each point's segment):
        records the walks and the boundary edges' share, submits, and resumes the walks that
        stopped at the loop budget. Ends with a new sequence begun."""
        assert self.tree is not None
        tree, sequence = self.tree, self.sequence
        values = self.pool.binding(f"{name}_values", count * 4)
        changes = self.pool.binding(f"{name}_changes", count * 4)
        walks = self.pool.binding(f"{name}_walks", count * 8)
        walk_count = self.pool.binding("winding_walk_count", 16)
        bindings = {
            **self._tree_buffers,
            "points": points,
            "segments": segments,
            "values": values,
            "changes": changes,
            "walks": walks,
            "walk_count": walk_count,
        }
        push = {
            "point_count": count,
            "depth": tree.depth,
            "triangle_count": tree.triangle_count,
            "edge_first": 0,
            "edge_end": 0,
            "walk": 1,
            "with_change": int(with_change),
        }
        groups = workgroups(count, TILE_COLUMNS)
        for buffer in (values, changes, walk_count):
            sequence.fill(buffer.buffer, 0, buffer.size)
        sequence.barrier()
        for first in range(0, max(tree.edge_count, 1), EDGE_CHUNK):
            push.update(edge_first=first, edge_end=min(first + EDGE_CHUNK, tree.edge_count))
            sequence.dispatch(self.pipelines.evaluate, bindings, push, groups)
            sequence.barrier()
            push["walk"] = 0
        sequence.mark("winding_evaluate")
        self.stats.count(winding_evaluations=count)
        push.update(edge_first=0, edge_end=0, walk=2)
        while True:
            staging = sequence.download(walk_count.buffer, 4)
            self._submit("winding_evaluate_submission")
            sequence = self._begin()
            if not int(staging.read(np.uint32, 1)[0]):
                return values, changes
            self.stats.count(winding_walk_resumes=1)
            sequence.fill(walk_count.buffer, 0, walk_count.size)
            sequence.barrier()
            sequence.dispatch(self.pipelines.evaluate, bindings, push, groups)
            sequence.barrier()
            sequence.mark("winding_evaluate")
