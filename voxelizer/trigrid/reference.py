"""CPU references of triangle grids, in numpy: the build, cell by cell, and brute-force
queries over all triangles. The tests compare the GPU with them.

* The build: a cell lists a triangle iff the triangle touches the cell's closed box, decided
  on the fixed-point corners (placement.py) by the surface reference's exact 13-axis test
  (voxelizer/reference/surface.py, conservative_marks), which shares no code with the GPU.
  A two-level grid's leaves are the same decision on the lattice of each top cell's
  resolution (the corners scaled by it, exactly).
* First hit and any hit: every triangle against every ray, with the arithmetic of
  shaders/traverse.comp (float32, each operation rounded as the GPU rounds it; see
  `woop_hits`), so that hits and misses agree exactly and the distances to within the
  rounding of one division.
* Triangles in a box: every triangle against the box, exactly (`box_touches`).
"""

from __future__ import annotations

import numpy as np

from ..placement import FIXED_BITS
from ..reference.solid import to_fixed
from ..reference.surface import conservative_marks

ONE = 1 << FIXED_BITS
RAYS_PER_STEP = 1 << 18  # (ray, triangle) pairs tested at once


def fixed_corners(
    grid_vertices: np.ndarray, faces: np.ndarray, shape: tuple[int, int, int]
) -> np.ndarray:
    """int64 (T, 3, 3): each triangle's fixed-point corners, as given (the build's Records)."""
    faces = np.asarray(faces, np.int64).reshape(-1, 3)
    return to_fixed(grid_vertices, faces, shape)[faces]


def grouped(keys: np.ndarray, triangles: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR of (key, triangle) pairs over `count` keys: int64 offsets (count + 1) and int32
    triangles, sorted within each key."""
    order = np.lexsort((triangles, keys))
    offsets = np.zeros(count + 1, np.int64)
    np.cumsum(np.bincount(keys, minlength=count), out=offsets[1:])
    return offsets, triangles[order].astype(np.int32)


def reference_cells(
    corners: np.ndarray, shape: tuple[int, int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """The uniform grid: offsets (cells + 1) and triangle ids, each cell's sorted."""
    pairs = list(conservative_marks(corners, shape))
    triangles = np.concatenate([t for t, _ in pairs]) if pairs else np.zeros(0, np.int64)
    keys = np.concatenate([k for _, k in pairs]) if pairs else np.zeros(0, np.int64)
    return grouped(keys, triangles, int(np.prod(shape)))


def reference_leaves(
    corners: np.ndarray, shape: tuple[int, int, int], resolutions: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The leaves of a two-level grid whose top cells (C order) have `resolutions` (int
    (cells, 3); 0 for none): each top cell's first leaf (int64 (cells,)), the leaves' offsets
    and their triangle ids (sorted within each leaf)."""
    resolutions = np.asarray(resolutions, np.int64).reshape(-1, 3)
    counts = resolutions.prod(axis=1)
    base = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    keys, triangles = [], []
    for scale in np.unique(resolutions[counts > 0], axis=0):
        nx, ny, nz = (int(n) for n in np.array(shape) * scale)
        scaled = (nx, ny, nz)
        chosen = np.flatnonzero((resolutions == scale).all(axis=1))
        for tri, flat in conservative_marks(corners * scale, scaled):
            cell = np.stack(np.unravel_index(flat, scaled), axis=1)
            top = cell // scale
            top_key = np.ravel_multi_index(tuple(top.T), shape)
            keep = np.isin(top_key, chosen)
            local = cell[keep] - top[keep] * scale
            leaf = (local[:, 0] * scale[1] + local[:, 1]) * scale[2] + local[:, 2]
            keys.append(base[top_key[keep]] + leaf)
            triangles.append(tri[keep])
    all_keys = np.concatenate(keys) if keys else np.zeros(0, np.int64)
    all_triangles = np.concatenate(triangles) if triangles else np.zeros(0, np.int64)
    offsets, ids = grouped(all_keys, all_triangles, int(counts.sum()))
    return base, offsets, ids


# -- rays: every triangle, the arithmetic of shaders/traverse.comp ---------------------------

HIT_DTYPE = np.dtype([("t", "<f4"), ("triangle", "<i4"), ("u", "<f4"), ("v", "<f4")])
_UNIT = np.float32(1.0 / ONE)


def reference_trace(
    corners: np.ndarray,
    origins: np.ndarray,
    directions: np.ndarray,
    t_min: float = 0.0,
    t_max: float = float("inf"),
    any_hit: bool = False,
) -> np.ndarray:
    """HIT_DTYPE (R,): each grid-space ray (float32) against every triangle (fixed-point
    corners (T, 3, 3)): the least t, then the least triangle, among the hits with
    t_min <= t <= t_max (any_hit: the same hit; the GPU may report another one)."""
    origins = np.asarray(origins, np.float32).reshape(-1, 3)
    directions = np.asarray(directions, np.float32).reshape(-1, 3)
    points = np.asarray(corners).reshape(-1, 3, 3).astype(np.float32) * _UNIT  # exact
    result = np.zeros(len(origins), HIT_DTYPE)
    result["t"], result["triangle"] = np.inf, -1
    step = max(1, RAYS_PER_STEP // max(len(points), 1))
    for start in range(0, len(origins), step):
        chunk = slice(start, start + step)
        result[chunk] = _trace_chunk(points, origins[chunk], directions[chunk], t_min, t_max)
    return result


def _trace_chunk(
    points: np.ndarray, o: np.ndarray, d: np.ndarray, t_min: float, t_max: float
) -> np.ndarray:
    result = np.zeros(len(o), HIT_DTYPE)
    result["t"], result["triangle"] = np.inf, -1
    largest = np.abs(d).max(axis=1)
    live = largest > 0
    exponent = np.frexp(np.where(live, largest, np.float32(1)))[1]
    d = np.ldexp(d, -exponent[:, None]).astype(np.float32)
    m = np.abs(d)
    kz = np.where(
        (m[:, 0] >= m[:, 1]) & (m[:, 0] >= m[:, 2]), 0, np.where(m[:, 1] >= m[:, 2], 1, 2)
    )
    for axis in range(3):  # the rays sheared along each axis, together
        rays = np.flatnonzero(live & (kz == axis))
        if len(rays):
            t_lo = np.ldexp(np.float32(t_min), exponent[rays]).astype(np.float32)
            t_hi = np.ldexp(np.float32(t_max), exponent[rays]).astype(np.float32)
            t, triangle, u, v = _woop(points, o[rays], d[rays], axis, t_lo, t_hi)
            result["t"][rays] = np.ldexp(t, -exponent[rays])
            result["triangle"][rays], result["u"][rays], result["v"][rays] = triangle, u, v
    return result


def _woop(
    points: np.ndarray, o: np.ndarray, d: np.ndarray, kz: int, t_lo: np.ndarray, t_hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """traverse.comp's test_triangle for rays sheared along axis kz, against every
    triangle: the least t (then triangle) of each ray's hits, with u and v (inf, -1, 0, 0
    for none). float32 throughout, each operation in the shader's order."""
    kx = (kz + 1) % 3
    ky = (kx + 1) % 3
    dx, dy, dz = (d[:, axis, None, None] for axis in (kx, ky, kz))  # (R, 1, 1)
    shifted = points[None, :, :, :] - o[:, None, None, :]  # (R, T, corner, axis), rounded
    along_z = shifted[..., kz]
    sheared_x = shifted[..., kx] * dz - dx * along_z  # (R, T, corner)
    sheared_y = shifted[..., ky] * dz - dy * along_z
    ax, bx, cx = sheared_x[..., 0], sheared_x[..., 1], sheared_x[..., 2]
    ay, by, cy = sheared_y[..., 0], sheared_y[..., 1], sheared_y[..., 2]
    u = cx * by - cy * bx
    v = ax * cy - ay * cx
    w = bx * ay - by * ax
    mixed = ((u < 0) | (v < 0) | (w < 0)) & ((u > 0) | (v > 0) | (w > 0))
    det = u + v + w
    along = u * along_z[..., 0] + v * along_z[..., 1] + w * along_z[..., 2]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        t = along / (det * dz[:, :, 0])
        hit = ~mixed & (det != 0) & (t >= t_lo[:, None]) & (t <= t_hi[:, None])
        t = np.where(hit, t, np.float32(np.inf))
        best = np.argmin(t, axis=1)  # the first least t: the least triangle among ties
        rows = np.arange(len(o))
        found = hit[rows, best]
        pick = best[found]
        chosen = rows[found]
        t_best = np.full(len(o), np.inf, np.float32)
        triangle = np.full(len(o), -1, np.int32)
        u_best = np.zeros(len(o), np.float32)
        v_best = np.zeros(len(o), np.float32)
        t_best[chosen] = t[chosen, pick]
        triangle[chosen] = pick
        u_best[chosen] = v[chosen, pick] / det[chosen, pick]
        v_best[chosen] = w[chosen, pick] / det[chosen, pick]
    return t_best, triangle, u_best, v_best


# -- boxes: every triangle, exactly ----------------------------------------------------------


def box_touches(corners: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """bool (T,): the closed triangles (fixed-point corners (T, 3, 3)) that meet the closed
    fixed-point box [lo, hi]: the 13-axis separating test, in integers (Python integers
    for the normal's axis, whose products pass 2^63)."""
    tri = np.asarray(corners, np.int64).reshape(-1, 3, 3)
    lo = np.asarray(lo, np.int64)
    hi = np.asarray(hi, np.int64)
    touched = (tri.min(axis=1) <= hi).all(axis=1) & (tri.max(axis=1) >= lo).all(axis=1)
    size = hi - lo
    for p, q in ((0, 1), (1, 2), (2, 0)):
        edge = tri[:, q] - tri[:, p]
        for axis in range(3):
            a, b = (axis + 1) % 3, (axis + 2) % 3
            direction = np.zeros_like(edge)
            direction[:, a] = -edge[:, b]
            direction[:, b] = edge[:, a]
            projected = np.einsum("tc,tvc->tv", direction, tri - lo)
            low = (np.minimum(direction, 0) * size).sum(axis=1)
            high = (np.maximum(direction, 0) * size).sum(axis=1)
            touched &= (projected.min(axis=1) <= high) & (projected.max(axis=1) >= low)
    u = tri[:, 1] - tri[:, 0]
    v = tri[:, 2] - tri[:, 0]
    for index in np.flatnonzero(touched):
        n = [int(x) for x in np.cross(u[index].astype(object), v[index].astype(object))]
        if not any(n):
            continue
        anchor = [int(x) for x in tri[index, 0]]
        least = [int(lo[k]) + (int(size[k]) if n[k] < 0 else 0) for k in range(3)]
        most = [int(lo[k]) + (int(size[k]) if n[k] > 0 else 0) for k in range(3)]
        below = sum(n[k] * (least[k] - anchor[k]) for k in range(3))
        above = sum(n[k] * (most[k] - anchor[k]) for k in range(3))
        touched[index] = below <= 0 <= above
    return touched


def reference_box(corners: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """int32, increasing: the triangles that touch the fixed-point box [lo, hi]."""
    return np.flatnonzero(box_touches(corners, lo, hi)).astype(np.int32)
