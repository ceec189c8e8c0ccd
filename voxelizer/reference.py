"""Exact CPU voxelization: the oracle the GPU passes are checked against, bit for bit.

The contract (the GPU implements the same one in integer arithmetic):

1. Grid-space float32 vertices g, each coordinate in [0, n] for its axis's side n of the grid
   shape (nx, ny, nz), become fixed point with F = 16 fraction bits: X = rint(g * 2**16)
   (exact in float32, round half to even). Same for Y and Z.
2. Column (i, j), 0 <= i < nx and 0 <= j < ny, has its centre at
   (i * 2**16 + 2**15, j * 2**16 + 2**15).
3. A triangle (A, B, C) with D = (B - A) x (C - A) (z component) == 0 adds nothing; with D < 0,
   B and C are swapped so that D > 0.
4. A centre is covered iff for every edge a->b (AB, BC, CA) the edge function
   E = dx * (Py - ay) - dy * (Px - ax) is > 0, or == 0 with dy < 0 or (dy == 0 and dx > 0)
   (top-left rule: the centre is nudged by (+eps, +eps**2), so a closed mesh covers every
   centre an even number of times).
5. The crossing height z* = (wA ZA + wB ZB + wC ZC) / (D * 2**16), with wA = E_BC, wB = E_CA,
   wC = E_AB, gives kfirst = floor(z* + 1/2) in [0, nz]: the first voxel whose centre lies
   strictly above the crossing.
6. Voxel (i, j, k) is solid iff an odd number of the triangles covering column (i, j) have
   kfirst <= k.

Everything except the crossing height is exact int64 arithmetic; the crossing height is
estimated in float64 and settled with Python integers where the estimate is too close to call.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import numpy as np

from .components import Components, mesh_components, split_components
from .grid import DenseGrid
from .mesh import Mesh
from .placement import (
    COLUMN_AXIS_ORDERS,
    FIXED_BITS,
    MAX_RESOLUTION,
    GridLike,
    GridPlacement,
    Shape,
)

ONE = 1 << FIXED_BITS  # one voxel in fixed point
HALF = ONE >> 1

# Candidate (triangle, column) pairs tested per batch: bounds memory to a few hundred MiB
# however large the triangles are.
CHUNK = 1 << 20

# Slab of i-planes per step of the parity prefix, so the prefix needs no full-size temporary.
SLAB_CELLS = 1 << 24

# |estimated - exact| of z* - 1/2 is below 8 * 2**-40 grid units (see _first_voxel); estimates
# closer than this to an integer are decided exactly.
TIE_MARGIN = 2.0**-24


def voxelize_reference(
    mesh: Mesh,
    grid: GridLike | None = None,
    fill_mode: str = "parity",
    *,
    voxel_size: float | None = None,
    bounds: np.typing.ArrayLike | None = None,
) -> DenseGrid:
    """Voxelize on the CPU with the exact contract: slow, simple, and the ground truth.

    The grid is placed as the GPU path places it (GridPlacement.fit)."""
    placement = GridPlacement.fit(mesh, grid, voxel_size, bounds)
    grid_vertices = placement.grid_vertices(mesh.vertices)
    if fill_mode == "parity":
        voxels = solid_columns(grid_vertices, mesh.faces, placement.shape)
    elif fill_mode == "vote":
        voxels = vote_columns(grid_vertices, mesh.faces, placement.shape)
    elif fill_mode == "union":
        parts = mesh_components(mesh)
        voxels = union_columns(grid_vertices, mesh.faces, placement.shape, parts)
    else:
        raise ValueError(f"unknown fill mode {fill_mode!r}")
    return DenseGrid(voxels, placement)


def vote_columns(
    grid_vertices_f32: np.ndarray, faces: np.ndarray, shape: int | Shape
) -> np.ndarray:
    """fill_mode="vote": solid where at least 4 of the 6 axis-direction parities say inside.

    Parity along axis d runs on the coordinates and the shape rotated so that d comes last.
    Direction -d is parity along +d of the mesh mirrored along d (g -> n_d - g, in float32)."""
    g = np.asarray(grid_vertices_f32, np.float32)
    shape = _shape(shape)
    votes = np.zeros(shape, np.uint8)
    for order in COLUMN_AXIS_ORDERS:
        rotated: Shape = (shape[order[0]], shape[order[1]], shape[order[2]])
        for mirrored in (False, True):
            h = g[:, order]
            if mirrored:
                h[:, 2] = np.float32(rotated[2]) - h[:, 2]
            solid = solid_columns(h, faces, rotated)
            votes += (solid[:, :, ::-1] if mirrored else solid).transpose(np.argsort(order))
    return votes >= 4


def union_columns(
    grid_vertices_f32: np.ndarray,
    faces: np.ndarray,
    shape: int | Shape,
    parts: Components | None = None,
) -> np.ndarray:
    """fill_mode="union": solid where the winding, summed over the closed components (each
    by its own parity, +1 outward, -1 inward), plus the parity of all open components
    together, is positive. One component at a time, unlike the pipeline's grouped runs,
    so that the grouping is checked too. `parts` defaults to the split of these vertices."""
    g = np.asarray(grid_vertices_f32, np.float32)
    faces = np.asarray(faces, np.int64).reshape(-1, 3)
    if parts is None:
        parts = split_components(g, faces)
    winding = np.zeros(_shape(shape), np.int64)
    closed = parts.closed[parts.labels]
    for part in np.flatnonzero(parts.closed):
        solid = solid_columns(g, faces[parts.labels == part], shape)
        winding += int(parts.signs[part]) * solid
    if not closed.all():
        winding += solid_columns(g, faces[~closed], shape)
    return winding > 0


def solid_columns(
    grid_vertices_f32: np.ndarray, faces: np.ndarray, shape: int | Shape
) -> np.ndarray:
    """bool[i, j, k] of shape (nx, ny, nz) (an int n: (n, n, n)) for float32 grid-space
    vertices (values in [0, n] on each axis). Columns run along z."""
    shape = _shape(shape)
    faces = np.asarray(faces, dtype=np.int64).reshape(-1, 3)
    fixed = to_fixed(grid_vertices_f32, faces, shape)
    tris = _oriented_triangles(fixed, faces)
    keys = [_crossings(tris, batch, shape) for batch in _candidate_batches(tris, shape)]
    return _parity_fill(np.concatenate(keys) if keys else np.zeros(0, np.int64), shape)


def column_counts(
    grid_vertices_f32: np.ndarray, faces: np.ndarray, shape: int | Shape, fill_mode: str = "parity"
) -> tuple[int, int]:
    """(open_columns, overlap_columns): the mesh check the fill pass makes (shaders/fill.comp),
    from each column's winding numbers at its voxel centres, written out here.

    Along column (i, j), a covering triangle changes the winding number by +1 where it faces
    down (the column enters) and -1 where it faces up, at its crossing height; w(k) at voxel
    centre k sums the changes below it, and the voxel is solid iff w(k) is odd (the parity
    rule). A column is open where the changes do not sum to 0 (crossings above the top voxel
    centre included); a balanced column is an overlap where the sum of w(k) over its voxels
    differs from its number of solid voxels. In "vote" mode the counts are summed over the
    columns along x, y and z; in "parity" (and "union" with one run) they are along z."""
    if fill_mode == "vote":
        g = np.asarray(grid_vertices_f32, np.float32)
        shape = _shape(shape)
        totals = np.zeros(2, np.int64)
        for order in COLUMN_AXIS_ORDERS:
            rotated: Shape = (shape[order[0]], shape[order[1]], shape[order[2]])
            totals += column_counts(g[:, order], faces, rotated)
        return int(totals[0]), int(totals[1])
    shape = _shape(shape)
    _, ny, nz = shape
    faces = np.asarray(faces, dtype=np.int64).reshape(-1, 3)
    tris = _oriented_triangles(to_fixed(grid_vertices_f32, faces, shape), faces)
    found = [_covered(tris, batch, nz) for batch in _candidate_batches(tris, shape)]
    if not found:
        return 0, 0
    t, i, j, k = (np.concatenate(parts) for parts in zip(*found))
    columns, column = np.unique(i * ny + j, return_inverse=True)
    # Winding changes at each voxel index (index nz: above every centre), then w(k).
    changes = np.zeros((len(columns), nz + 1), np.int64)
    np.add.at(changes, (column, k), tris["step"][t])
    balance = changes.sum(axis=1)
    winding = np.cumsum(changes[:, :nz], axis=1)
    solid = np.count_nonzero(winding % 2, axis=1)
    overlap = (balance == 0) & (winding.sum(axis=1) != solid)
    return int(np.count_nonzero(balance)), int(np.count_nonzero(overlap))


def signed_crossings(
    grid_vertices_f32: np.ndarray, faces: np.ndarray, shape: int | Shape
) -> np.ndarray:
    """int32[i, j, k]: the crossings of the downward ray from each voxel centre, each counted
    -1 for a triangle facing up (projected area > 0, counter-clockwise) and +1 for one facing
    down: the integer part of fill_mode="winding" (reference_winding.py). Its parity is
    solid_columns: the same crossings, decided by the same exact rules."""
    shape = _shape(shape)
    faces = np.asarray(faces, dtype=np.int64).reshape(-1, 3)
    fixed = to_fixed(grid_vertices_f32, faces, shape)
    tris = _oriented_triangles(fixed, faces)
    counts = np.zeros(shape[0] * shape[1] * shape[2], np.int64)
    for batch in _candidate_batches(tris, shape):
        keys, t = _crossing_keys(tris, batch, shape)
        counts += np.bincount(keys, tris["step"][t], minlength=len(counts)).astype(np.int64)
    return np.cumsum(counts.reshape(shape), axis=2).astype(np.int32)


def _shape(shape: int | Shape) -> Shape:
    """(nx, ny, nz) from an int (a cube) or three ints, each in [1, MAX_RESOLUTION]."""
    if np.ndim(shape) == 0:
        sides: tuple[int, ...] = (int(cast(int, shape)),) * 3
    else:
        sides = tuple(int(n) for n in cast(Shape, shape))
    if len(sides) != 3 or not all(1 <= n <= MAX_RESOLUTION for n in sides):
        raise ValueError(f"grid sides must be three values in [1, {MAX_RESOLUTION}], not {shape}")
    return sides[0], sides[1], sides[2]


def to_fixed(grid_vertices_f32: np.ndarray, faces: np.ndarray, shape: int | Shape) -> np.ndarray:
    """int64 (V, 3) fixed-point coordinates: the single rounding from float32 to the integers."""
    shape = _shape(shape)
    g = np.asarray(grid_vertices_f32, dtype=np.float32).reshape(-1, 3)
    used = g[np.unique(faces)] if len(faces) else g[:0]
    if not np.isfinite(used).all() or (used < 0).any() or (used > np.array(shape)).any():
        raise ValueError(f"grid-space vertices must lie in [0, n] per axis, n = {shape}")
    return np.rint(g * np.float32(ONE)).astype(np.int64)


def _oriented_triangles(fixed: np.ndarray, faces: np.ndarray) -> dict[str, np.ndarray]:
    """Per-triangle data with D > 0 (degenerate projections dropped), edges AB, BC, CA."""
    a, b, c = fixed[faces[:, 0]], fixed[faces[:, 1]], fixed[faces[:, 2]]
    d = (b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (b[:, 1] - a[:, 1]) * (c[:, 0] - a[:, 0])
    keep = d != 0
    a, b, c, d = a[keep], b[keep], c[keep], d[keep]
    flip = d < 0
    b, c = np.where(flip[:, None], c, b), np.where(flip[:, None], b, c)
    d = np.abs(d)

    # The winding number's change going up across it: +1 where the triangle as given faces
    # down (clockwise in xy: the column enters), -1 where it faces up (column_counts, and
    # signed_crossings: the triangle's share of the winding number below its crossing).
    step = np.where(flip, 1, -1).astype(np.int64)
    tris = {"D": d, "ZA": a[:, 2], "ZB": b[:, 2], "ZC": c[:, 2], "step": step}
    for name, p, q in (("AB", a, b), ("BC", b, c), ("CA", c, a)):
        dx, dy = q[:, 0] - p[:, 0], q[:, 1] - p[:, 1]
        tris["dx" + name] = dx
        tris["dy" + name] = dy
        # E(P) = dx * Py - dy * Px + c0, the same value as dx * (Py - ay) - dy * (Px - ax).
        tris["c" + name] = dy * p[:, 0] - dx * p[:, 1]
        # Covered along this edge iff E >= threshold: 0 where the top-left rule gives ties to
        # the triangle, 1 where it does not.
        wins = (dy < 0) | ((dy == 0) & (dx > 0))
        tris["t" + name] = np.where(wins, 0, 1).astype(np.int64)

    xs = np.stack([a[:, 0], b[:, 0], c[:, 0]])
    ys = np.stack([a[:, 1], b[:, 1], c[:, 1]])
    tris["i0"], tris["i1"] = _centre_range(xs.min(axis=0), xs.max(axis=0))
    tris["j0"], tris["j1"] = _centre_range(ys.min(axis=0), ys.max(axis=0))
    return tris


def _centre_range(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First and last column index whose centre lies in [lo, hi] (fixed point, inclusive)."""
    first = -((HALF - lo) // ONE)  # ceil((lo - HALF) / ONE)
    last = (hi - HALF) // ONE
    return first, last


def _candidate_batches(
    tris: dict[str, np.ndarray], shape: Shape
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Yield (triangle, i, j) arrays covering every column centre in each triangle's box.

    Each triangle owns a contiguous run of candidate numbers; a batch is a range of those
    numbers, so one huge triangle is split across batches as readily as many small ones.
    """
    i0, i1 = np.maximum(tris["i0"], 0), np.minimum(tris["i1"], shape[0] - 1)
    j0, j1 = np.maximum(tris["j0"], 0), np.minimum(tris["j1"], shape[1] - 1)
    width = np.maximum(i1 - i0 + 1, 0)
    count = width * np.maximum(j1 - j0 + 1, 0)
    end = np.cumsum(count)
    total = int(end[-1]) if len(end) else 0
    for start in range(0, total, CHUNK):
        cand = np.arange(start, min(start + CHUNK, total), dtype=np.int64)
        t = np.searchsorted(end, cand, side="right")
        local = cand - (end[t] - count[t])
        w = width[t]
        yield t, i0[t] + local % w, j0[t] + local // w


def _crossings(
    tris: dict[str, np.ndarray], batch: tuple[np.ndarray, np.ndarray, np.ndarray], shape: Shape
) -> np.ndarray:
    """Flat voxel indices (i*ny + j)*nz + kfirst of the covered candidates with kfirst < nz."""
    return _crossing_keys(tris, batch, shape)[0]


def _crossing_keys(
    tris: dict[str, np.ndarray], batch: tuple[np.ndarray, np.ndarray, np.ndarray], shape: Shape
) -> tuple[np.ndarray, np.ndarray]:
    """_crossings' flat voxel indices and the triangle of each."""
    _, ny, nz = shape
    t, i, j, k = _covered(tris, batch, nz)
    inside = k < nz
    return ((i[inside] * ny + j[inside]) * nz) + k[inside], t[inside]


def _covered(
    tris: dict[str, np.ndarray], batch: tuple[np.ndarray, np.ndarray, np.ndarray], nz: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(triangle, i, j, kfirst) of the candidates whose column centre the triangle covers;
    kfirst in [0, nz] (nz: the crossing lies above every voxel centre)."""
    t, i, j = batch
    px = i * ONE + HALF
    py = j * ONE + HALF
    e = {}
    covered = np.ones(len(t), dtype=bool)
    for name in ("AB", "BC", "CA"):
        e[name] = tris["dx" + name][t] * py - tris["dy" + name][t] * px + tris["c" + name][t]
        covered &= e[name] >= tris["t" + name][t]
    t, i, j = t[covered], i[covered], j[covered]
    k = _first_voxel(
        e["BC"][covered],
        e["CA"][covered],
        e["AB"][covered],
        tris["ZA"][t],
        tris["ZB"][t],
        tris["ZC"][t],
        tris["D"][t],
        nz,
    )
    return t, i, j, k


def _first_voxel(
    wa: np.ndarray,
    wb: np.ndarray,
    wc: np.ndarray,
    za: np.ndarray,
    zb: np.ndarray,
    zc: np.ndarray,
    d: np.ndarray,
    nz: int,
) -> np.ndarray:
    """kfirst = smallest k >= 0 with wa*za + wb*zb + wc*zc < (2k+1) * 2**15 * d, else nz.

    The numerator reaches about 2**88, beyond int64, so it is estimated in float64 first.
    Error bound, u = 2**-53: w <= d < 2**59 and Z <= 2**29 (sides <= 8192). Converting w and d to
    float64 costs a relative u each, each product another u, and the two additions of
    non-negative terms (no cancellation) u each, so the numerator is within (1+u)**4 - 1 < 4.01u
    and q = num / d within 6.1u, relative. As q <= max Z <= 2**29, |q - exact| < 6.1 * 2**-24
    fixed-point units, i.e. < 6.1 * 2**-40 grid units after the exact division by 2**16;
    subtracting 1/2 from a value below 2**13 adds at most 2**-40. So r = z* - 1/2 is known to
    within 8 * 2**-40 < 1e-11, and floor(r) is right wherever r is farther than TIE_MARGIN
    (about 6e-8) from an integer. The rest (exact ties above all) are decided with Python ints.
    """
    num = wa.astype(np.float64) * za + wb.astype(np.float64) * zb + wc.astype(np.float64) * zc
    r = (num / d.astype(np.float64)) / ONE - 0.5
    k = np.floor(r).astype(np.int64) + 1
    m = np.rint(r)
    near = np.flatnonzero(np.abs(r - m) < TIE_MARGIN)
    if len(near):
        mi = m[near].astype(np.int64)
        exact = (
            wa[near].astype(object) * za[near].astype(object)
            + wb[near].astype(object) * zb[near].astype(object)
            + wc[near].astype(object) * zc[near].astype(object)
        )
        bound = (2 * mi.astype(object) + 1) * HALF * d[near].astype(object)
        k[near] = np.where((exact < bound).astype(bool), mi, mi + 1)
    return np.clip(k, 0, nz)


def _parity_fill(keys: np.ndarray, shape: Shape) -> np.ndarray:
    """Toggle each voxel where an odd number of crossings start, then prefix-XOR along k."""
    flips, counts = np.unique(keys, return_counts=True)
    voxels = np.zeros(shape, dtype=bool)
    voxels.reshape(-1)[flips[counts % 2 == 1]] = True
    step = max(1, SLAB_CELLS // (shape[1] * shape[2]))
    for s in range(0, shape[0], step):
        voxels[s : s + step] = np.logical_xor.accumulate(voxels[s : s + step], axis=2)
    return voxels
