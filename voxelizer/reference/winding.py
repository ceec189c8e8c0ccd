"""CPU reference of fill_mode="winding": solid where the generalized winding number of the
mesh at the voxel centre exceeds 1/2 (small meshes and grids: vectorized numpy, float64).

The rule, on the fixed-point corners of solid.py (zero-area triangles dropped):

1. Only voxels whose centre lies in the surface's bounding box can be solid, the box being
   closed on the low side in x and y and on the high side in z (the parity passes' tie
   nudge (+e, +e^2, -E)): X0 <= X < X1, Y0 <= Y < Y1, Z0 < Z <= Z1.
2. w = s - c. s is the signed count of the crossings below the centre (solid.py,
   signed_crossings: the parity passes' exact predicates). c is the solid angle, over 4 pi,
   of the curtain that hangs from the boundary up to infinity: each boundary edge x0 -> x1
   (edges compared by position, m = uses x0 -> x1 minus uses x1 -> x0, kept where m != 0)
   sweeps the vertical strip above it, seen from the centre P under the solid angle
   2 atan2(det, den) of the spherical triangle (x1 - P, x0 - P, +z) (Van Oosterom and
   Strackee), times m. When P's column lies in the strip's vertical plane (det == 0 exactly)
   the nudged centre is in the strip (+-2 pi, the sign of det at the nudge) or not (0).
3. Solid iff w > 1/2.

The surface S closed by the curtain is a closed surface whose winding number at P counts
the downward ray's crossings (the ray never meets the curtain above), so w equals the sum
of the triangles' solid angles over 4 pi wherever that is defined (direct_winding_numbers,
checked against this in tests/pipeline/test_winding.py). A mesh without boundary has c = 0: w = s.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from ..grid import DenseGrid
from ..grid_spec import PadLike, VoxelSizeLike
from ..mesh import Mesh
from ..placement import FIXED_BITS, GridLike, GridPlacement, Shape
from .solid import on_work_lattice, signed_crossings, to_fixed

ONE = 1 << FIXED_BITS
HALF = ONE >> 1
_PAIRS_PER_STEP = 1 << 22  # (point, edge) pairs evaluated at once


def voxelize_winding_reference(
    mesh: Mesh,
    grid: GridLike | None = None,
    *,
    voxel_size: VoxelSizeLike | None = None,
    bounds: np.typing.ArrayLike | None = None,
    box_fit: str = "cover",
    pad: PadLike = 0,
) -> DenseGrid:
    """fill_mode="winding" on the CPU, placed as the GPU path places the grid (on the
    lattice that holds the whole mesh too where the grid crops it: every triangle counts)."""
    placement = GridPlacement.fit(mesh, grid, voxel_size, bounds, box_fit=box_fit, pad=pad)

    def voxels_of(g: np.ndarray, fine: np.ndarray, shape: Shape) -> np.ndarray:
        return winding_columns(g, mesh.faces, shape, fine)

    return on_work_lattice(mesh, placement, voxels_of)


def winding_columns(
    grid_vertices_f32: np.ndarray, faces: np.ndarray, shape: Shape, fine: np.ndarray | None = None
) -> np.ndarray:
    """bool[i, j, k]: the rule above."""
    return winding_numbers(grid_vertices_f32, faces, shape, fine) > 0.5


def winding_numbers(
    grid_vertices_f32: np.ndarray, faces: np.ndarray, shape: Shape, fine: np.ndarray | None = None
) -> np.ndarray:
    """float64[i, j, k]: w at every voxel centre inside the box of rule 1, 0 elsewhere. s is
    decided on the fine coordinates (those of the float32 vertices when not given), the
    curtain on the fixed-point ones, as on the GPU."""
    faces = np.asarray(faces, np.int64).reshape(-1, 3)
    corners = surface_corners(grid_vertices_f32, faces, shape)
    w = np.zeros(shape, np.float64)
    if not len(corners):
        return w
    low, high = corners.min(axis=(0, 1)), corners.max(axis=(0, 1))
    ranges = [_centres_in(low[axis], high[axis], shape[axis], upper=axis == 2) for axis in range(3)]
    if any(len(r) == 0 for r in ranges):
        return w
    i, j, k = np.meshgrid(*ranges, indexing="ij")
    crossing_vertices = grid_vertices_f32 if fine is None else fine
    s = signed_crossings(crossing_vertices, faces, shape)[i, j, k].astype(np.float64)
    points = np.stack([i, j, k], axis=-1).reshape(-1, 3) * ONE + HALF
    curtain = curtain_winding(points, boundary_edges(corners)).reshape(s.shape)
    w[i, j, k] = s - curtain
    return w


def surface_corners(grid_vertices_f32: np.ndarray, faces: np.ndarray, shape: Shape) -> np.ndarray:
    """int64 (T, 3, 3): the fixed-point corners of the triangles with area (in fixed point)."""
    fixed = to_fixed(grid_vertices_f32, faces, shape)
    corners = fixed[faces]
    normal = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    return corners[np.any(normal != 0, axis=1)]


def _centres_in(low: int, high: int, n: int, upper: bool) -> np.ndarray:
    """Voxel indices whose centre C satisfies low <= C < high (or low < C <= high: upper)."""
    centres = np.arange(n, dtype=np.int64) * ONE + HALF
    inside = (centres > low) & (centres <= high) if upper else (centres >= low) & (centres < high)
    return np.flatnonzero(inside)


def boundary_edges(corners: np.ndarray) -> np.ndarray:
    """int64 (B, 7): x0 xyz, x1 xyz, m for every edge whose uses do not cancel (a dict of
    position pairs: independent of the pipeline's sort-based count)."""
    net: Counter[tuple[tuple[int, ...], tuple[int, ...]]] = Counter()
    for triangle in corners.tolist():
        for a, b in ((0, 1), (1, 2), (2, 0)):
            x0, x1 = tuple(triangle[a]), tuple(triangle[b])
            if x0 < x1:
                net[x0, x1] += 1
            else:
                net[x1, x0] -= 1
    rows = [[*x0, *x1, m] for (x0, x1), m in net.items() if m != 0]
    return np.array(rows, np.int64).reshape(-1, 7)


def curtain_winding(points: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """float64 (N,): c of rule 2 at fixed-point points (N, 3) int64."""
    total = np.zeros(len(points), np.float64)
    if not len(edges) or not len(points):
        return total
    step = max(1, _PAIRS_PER_STEP // len(edges))
    x0, x1, m = edges[None, :, 0:3], edges[None, :, 3:6], edges[None, :, 6].astype(np.float64)
    for first in range(0, len(points), step):
        p = points[first : first + step, None, :]
        a, b = x1 - p, x0 - p  # exact int64
        det = a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]  # |.| < 2^61
        af, bf = a / ONE, b / ONE
        la, lb = np.linalg.norm(af, axis=-1), np.linalg.norm(bf, axis=-1)
        den = la * lb + (af * bf).sum(axis=-1) + bf[..., 2] * la + af[..., 2] * lb
        omega = 2.0 * np.arctan2(det / float(ONE * ONE), den)
        tie = det == 0
        omega[tie] = _in_plane(x0[0], x1[0], p[:, 0], tie)[tie]
        total[first : first + step] = (m * omega).sum(axis=1) / (4 * np.pi)
    return total


def _in_plane(x0: np.ndarray, x1: np.ndarray, p: np.ndarray, tie: np.ndarray) -> np.ndarray:
    """(N, B) float64: the strip's solid angle where P's column lies in its vertical plane:
    +-2 pi if P nudged by (+e, +e^2, -E) lies in the strip (within the edge's span and above
    it), with the sign of det at the nudge; 0 otherwise and for vertical edges."""
    d = (x1 - x0)[None, :, :]  # (1, B, 3)
    offset = p[:, None, :] - x0[None, :, :]  # (N, B, 3)
    along_x = d[..., 0] != 0
    run = np.where(along_x, d[..., 0], d[..., 1])
    position = np.where(along_x, offset[..., 0], offset[..., 1])  # P = x0 + position / run d
    direction = np.where(run > 0, 1, -1)
    forward = (d[..., 0] > 0) | ((d[..., 0] == 0) & (d[..., 1] > 0))  # the nudge along d
    start, end = position * direction, (run - position) * direction
    within = ((start > 0) | ((start == 0) & forward)) & ((end > 0) | ((end == 0) & ~forward))
    height = offset[..., 2] * run - position * d[..., 2]
    above = height * direction > 0
    gradient_x, gradient_y = d[..., 1], -d[..., 0]  # of det with respect to P.x, P.y
    positive = np.where(gradient_x != 0, gradient_x > 0, gradient_y > 0)
    vertical = (d[..., 0] == 0) & (d[..., 1] == 0)
    inside = within & above & ~vertical & tie
    return np.where(inside, np.where(positive, 2 * np.pi, -2 * np.pi), 0.0)


def direct_winding_numbers(corners: np.ndarray, points: np.ndarray) -> np.ndarray:
    """float64 (N,): the definition, the sum of the triangles' signed solid angles at the
    points over 4 pi (Van Oosterom and Strackee), in grid units. Undefined on the surface."""
    total = np.zeros(len(points), np.float64)
    c = corners.astype(np.float64)
    step = max(1, _PAIRS_PER_STEP // max(len(c), 1))
    for first in range(0, len(points), step):
        p = points[first : first + step, None, :]
        a, b, cc = c[None, :, 0] - p, c[None, :, 1] - p, c[None, :, 2] - p
        la, lb, lc = (np.linalg.norm(v, axis=-1) for v in (a, b, cc))
        det = (a * np.cross(b, cc)).sum(axis=-1)
        den = (
            la * lb * lc
            + (a * b).sum(axis=-1) * lc
            + (b * cc).sum(axis=-1) * la
            + (cc * a).sum(axis=-1) * lb
        )
        total[first : first + step] = (2 * np.arctan2(det, den)).sum(axis=1) / (4 * np.pi)
    return total
