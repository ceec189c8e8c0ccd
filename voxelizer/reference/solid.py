"""Exact CPU voxelization: the oracle the GPU passes are checked against, bit for bit.

The contract (the GPU implements the same one: a fixed-point fast path, and exact integer
arithmetic on the fine coordinates near ties, shaders/exact.glsl and shaders/fine.glsl):

1. Grid-space vertices g (float64 from the placement, or float32 as given; each coordinate in
   [0, n] for its axis's side n of the grid shape (nx, ny, nz); for a grid that crops the
   mesh, of the lattice that holds both, placement.WorkGrid) become fine coordinates
   F = rint(g * 2**FINE_BITS) (round half to even; exact for g >= 8, within 2**-50 below).
   int64 arrays given to the functions here are taken as such fine coordinates already.
   Grids with a side over 8192 take FINE_BITS - 3 (placement.fine_bits): the same bounds.
2. Column (i, j), 0 <= i < nx and 0 <= j < ny, has its centre at
   ((2i + 1) * 2**(FINE_BITS - 1), (2j + 1) * 2**(FINE_BITS - 1)).
3. A triangle (A, B, C) with D = (B - A) x (C - A) (z component) == 0 adds nothing; with D < 0,
   B and C are swapped so that D > 0.
4. A centre is covered iff for every edge a->b (AB, BC, CA) the edge function
   E = dx * (Py - ay) - dy * (Px - ax) is > 0, or == 0 with dy < 0 or (dy == 0 and dx > 0)
   (top-left rule: the centre is nudged by (+eps, +eps**2), so a closed mesh covers every
   centre an even number of times).
5. The crossing height z* = (wA ZA + wB ZB + wC ZC) / (D * 2**FINE_BITS), with wA = E_BC,
   wB = E_CA, wC = E_AB, gives kfirst = floor(z* + 1/2) in [0, nz]: the first voxel whose
   centre lies strictly above the crossing.
6. Voxel (i, j, k) is solid iff an odd number of the triangles covering column (i, j) have
   kfirst <= k.

The values reach 2**190, so every sign and floor is estimated in float64 with a bound of its
error and settled with Python integers where the estimate is too close to call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import cast

import numpy as np

from ..components import Components, mesh_components, split_components
from ..grid import DenseGrid
from ..grid_spec import PadLike, VoxelSizeLike
from ..mesh import Mesh
from ..placement import (
    COLUMN_AXIS_ORDERS,
    FINE_BITS,
    FIXED_BITS,
    MAX_RESOLUTION,
    GridLike,
    GridPlacement,
    Shape,
    fine_bits,
    lattice_shift,
    to_fine,
)

ONE = 1 << FIXED_BITS  # one voxel in fixed point (the surface's coordinates)
U = 2.0**-53  # the unit roundoff of float64

# Candidate (triangle, column) pairs tested per batch: bounds memory to a few hundred MiB
# however large the triangles are.
CHUNK = 1 << 20

# Slab of i-planes per step of the parity prefix, so the prefix needs no full-size temporary.
SLAB_CELLS = 1 << 24


def voxelize_reference(
    mesh: Mesh,
    grid: GridLike | None = None,
    fill_mode: str = "parity",
    *,
    voxel_size: VoxelSizeLike | None = None,
    bounds: np.typing.ArrayLike | None = None,
    box_fit: str = "cover",
    pad: PadLike = 0,
) -> DenseGrid:
    """Voxelize on the CPU with the exact contract: slow, simple, and the ground truth.

    The grid is placed as the GPU path places it (GridPlacement.fit)."""
    placement = GridPlacement.fit(mesh, grid, voxel_size, bounds, box_fit=box_fit, pad=pad)
    if fill_mode not in ("parity", "vote", "union"):
        raise ValueError(f"unknown fill mode {fill_mode!r}")

    def solid(_: np.ndarray, fine: np.ndarray, shape: Shape) -> np.ndarray:
        if fill_mode == "parity":
            return solid_columns(fine, mesh.faces, shape)
        if fill_mode == "vote":
            return vote_columns(fine, mesh.faces, shape)
        # (the parts as the GPU path finds them: mesh_components, from the mesh's vertices)
        return union_columns(fine, mesh.faces, shape, mesh_components(mesh))

    return on_work_lattice(mesh, placement, solid)


def on_work_lattice(
    mesh: Mesh,
    placement: GridPlacement,
    voxels_of: Callable[[np.ndarray, np.ndarray, Shape], np.ndarray],
) -> DenseGrid:
    """The grid's voxels, voxels_of(grid vertices, fine vertices, shape) on the lattice the
    grid is voxelized on (placement.work: the grid itself unless it crops the mesh), cut to
    the grid; every voxel empty where the grid holds no part of the mesh."""
    if not placement.holds_part_of(mesh):
        return DenseGrid(np.zeros(placement.shape, bool), placement)
    work = placement.work(mesh)
    grid_vertices, fine = placement.placed_vertices(mesh)
    voxels = voxels_of(grid_vertices, fine, work.shape)
    return DenseGrid(np.ascontiguousarray(work.cut(voxels)), placement)


def vote_columns(grid_vertices: np.ndarray, faces: np.ndarray, shape: int | Shape) -> np.ndarray:
    """fill_mode="vote": solid where at least 4 of the 6 axis-direction parities say inside.

    Parity along axis d runs on the coordinates and the shape rotated so that d comes last.
    Direction -d is parity along +d of the mesh mirrored along d (F -> n_d 2**FINE_BITS - F,
    exact on the fine coordinates)."""
    shape = _shape(shape)
    faces = np.asarray(faces, np.int64).reshape(-1, 3)
    g = fine_coordinates(grid_vertices, faces, shape)
    votes = np.zeros(shape, np.uint8)
    for order in COLUMN_AXIS_ORDERS:
        rotated: Shape = (shape[order[0]], shape[order[1]], shape[order[2]])
        for mirrored in (False, True):
            h = g[:, order]
            if mirrored:
                h[:, 2] = (rotated[2] << FINE_BITS) - h[:, 2]
            solid = solid_columns(h, faces, rotated)
            votes += (solid[:, :, ::-1] if mirrored else solid).transpose(np.argsort(order))
    return votes >= 4


def union_columns(
    grid_vertices: np.ndarray,
    faces: np.ndarray,
    shape: int | Shape,
    parts: Components | None = None,
) -> np.ndarray:
    """fill_mode="union": solid where the winding, summed over the closed components (each
    by its own parity, +1 outward, -1 inward), plus the parity of all open components
    together, is positive. One component at a time, unlike the pipeline's grouped runs,
    so that the grouping is checked too. `parts` defaults to the split of these vertices
    (float ones; fine ones as float64)."""
    faces = np.asarray(faces, np.int64).reshape(-1, 3)
    g = fine_coordinates(grid_vertices, faces, shape)
    if parts is None:
        positions = np.asarray(grid_vertices)
        if np.issubdtype(positions.dtype, np.integer):
            positions = np.ldexp(positions.astype(np.float64), -FINE_BITS)
        parts = split_components(positions, faces)
    winding = np.zeros(_shape(shape), np.int64)
    closed = parts.closed[parts.labels]
    for part in np.flatnonzero(parts.closed):
        solid = solid_columns(g, faces[parts.labels == part], shape)
        winding += int(parts.signs[part]) * solid
    if not closed.all():
        winding += solid_columns(g, faces[~closed], shape)
    return winding > 0


def solid_columns(grid_vertices: np.ndarray, faces: np.ndarray, shape: int | Shape) -> np.ndarray:
    """bool[i, j, k] of shape (nx, ny, nz) (an int n: (n, n, n)) for grid-space vertices:
    float32 or float64 values in [0, n] on each axis, or int64 fine coordinates (see the
    contract above). Columns run along z."""
    shape = _shape(shape)
    faces = np.asarray(faces, dtype=np.int64).reshape(-1, 3)
    tris = _oriented_triangles(fine_coordinates(grid_vertices, faces, shape), faces, shape)
    keys = [_crossings(tris, batch, shape) for batch in _candidate_batches(tris, shape)]
    return _parity_fill(np.concatenate(keys) if keys else np.zeros(0, np.int64), shape)


def solid_column_samples(
    grid_vertices: np.ndarray, faces: np.ndarray, shape: int | Shape, columns: np.ndarray
) -> np.ndarray:
    """bool (M, nz): the voxels of the columns (M, 2) [i, j] as solid_columns has them,
    computed for those columns alone: the check of grids too large to hold whole."""
    shape = _shape(shape)
    faces = np.asarray(faces, dtype=np.int64).reshape(-1, 3)
    tris = _oriented_triangles(fine_coordinates(grid_vertices, faces, shape), faces, shape)
    columns = np.asarray(columns, np.int64).reshape(-1, 2)
    out = np.zeros((len(columns), shape[2]), bool)
    for row, (i, j) in enumerate(columns.tolist()):
        near = (tris["i0"] <= i) & (i <= tris["i1"]) & (tris["j0"] <= j) & (j <= tris["j1"])
        t = np.flatnonzero(near)
        _, _, _, k = _covered(tris, (t, np.full_like(t, i), np.full_like(t, j)), shape[2])
        flips = np.bincount(k[k < shape[2]], minlength=shape[2]) % 2
        out[row] = np.logical_xor.accumulate(flips.astype(bool))
    return out


def column_counts(
    grid_vertices: np.ndarray, faces: np.ndarray, shape: int | Shape, fill_mode: str = "parity"
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
        shape = _shape(shape)
        g = fine_coordinates(grid_vertices, np.asarray(faces, np.int64).reshape(-1, 3), shape)
        totals = np.zeros(2, np.int64)
        for order in COLUMN_AXIS_ORDERS:
            rotated: Shape = (shape[order[0]], shape[order[1]], shape[order[2]])
            totals += column_counts(g[:, order], faces, rotated)
        return int(totals[0]), int(totals[1])
    shape = _shape(shape)
    _, ny, nz = shape
    faces = np.asarray(faces, dtype=np.int64).reshape(-1, 3)
    tris = _oriented_triangles(fine_coordinates(grid_vertices, faces, shape), faces, shape)
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
    grid_vertices: np.ndarray, faces: np.ndarray, shape: int | Shape
) -> np.ndarray:
    """int32[i, j, k]: the crossings of the downward ray from each voxel centre, each counted
    -1 for a triangle facing up (projected area > 0, counter-clockwise) and +1 for one facing
    down: the integer part of fill_mode="winding" (winding.py). Its parity is
    solid_columns: the same crossings, decided by the same exact rules."""
    shape = _shape(shape)
    faces = np.asarray(faces, dtype=np.int64).reshape(-1, 3)
    tris = _oriented_triangles(fine_coordinates(grid_vertices, faces, shape), faces, shape)
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


def fine_coordinates(
    grid_vertices: np.ndarray, faces: np.ndarray, shape: int | Shape
) -> np.ndarray:
    """int64 (V, 3) fine coordinates: int64 input as it is, float input rounded once
    (placement.to_fine); the used vertices checked to lie in [0, n] per axis."""
    shape = _shape(shape)
    g = np.asarray(grid_vertices)
    if np.issubdtype(g.dtype, np.integer):
        fine = g.astype(np.int64).reshape(-1, 3)
        top = np.array(shape, np.int64) << fine_bits(shape)
    else:
        fine = None
        g = g.astype(np.float64).reshape(-1, 3)
        top = np.array(shape, np.float64)
    used = g.reshape(-1, 3)[np.unique(faces)] if len(faces) else g.reshape(-1, 3)[:0]
    if not np.isfinite(used).all() or (used < 0).any() or (used > top).any():
        raise ValueError(f"grid-space vertices must lie in [0, n] per axis, n = {shape}")
    return to_fine(g, lattice_shift(shape)) if fine is None else fine


def to_fixed(grid_vertices_f32: np.ndarray, faces: np.ndarray, shape: int | Shape) -> np.ndarray:
    """int64 (V, 3) fixed-point coordinates: the single rounding from float32 to the integers."""
    shape = _shape(shape)
    g = np.asarray(grid_vertices_f32, dtype=np.float32).reshape(-1, 3)
    used = g[np.unique(faces)] if len(faces) else g[:0]
    if not np.isfinite(used).all() or (used < 0).any() or (used > np.array(shape)).any():
        raise ValueError(f"grid-space vertices must lie in [0, n] per axis, n = {shape}")
    return np.rint(g * np.float32(ONE)).astype(np.int64)


def _oriented_triangles(
    fine: np.ndarray, faces: np.ndarray, shape: Shape = (1, 1, 1)
) -> dict[str, np.ndarray]:
    """Per-triangle fine corners A, B, C with D > 0 (degenerate projections dropped), the
    winding step, the columns of the bounding box, and the lattice's bits (of `shape`'s
    grid: placement.fine_bits)."""
    a, b, c = fine[faces[:, 0]], fine[faces[:, 1]], fine[faces[:, 2]]
    orientation = _det2_sign(
        b[:, 0] - a[:, 0], b[:, 1] - a[:, 1], c[:, 0] - a[:, 0], c[:, 1] - a[:, 1]
    )
    keep = orientation != 0
    a, b, c, orientation = a[keep], b[keep], c[keep], orientation[keep]
    flip = orientation < 0
    b, c = np.where(flip[:, None], c, b), np.where(flip[:, None], b, c)
    # The winding number's change going up across it: +1 where the triangle as given faces
    # down (clockwise in xy: the column enters), -1 where it faces up (column_counts, and
    # signed_crossings: the triangle's share of the winding number below its crossing).
    step = np.where(flip, 1, -1).astype(np.int64)
    tris = {"A": a, "B": b, "C": c, "step": step, "bits": np.array(fine_bits(shape))}
    # The plane's normal N = (B - A) x (C - A) in float64, each component with a bound of its
    # error (u = 2**-53: two conversions and a product per term, u each, and the difference:
    # 4u of the two terms' sizes covers it).
    u_, v_ = (b - a).astype(np.float64), (c - a).astype(np.float64)
    for name, (p, q) in {"Nx": (1, 2), "Ny": (2, 0), "Nz": (0, 1)}.items():
        t1, t2 = u_[:, p] * v_[:, q], u_[:, q] * v_[:, p]
        tris[name] = t1 - t2
        tris["e" + name] = 4 * U * (np.abs(t1) + np.abs(t2))
    xs = np.stack([a[:, 0], b[:, 0], c[:, 0]])
    ys = np.stack([a[:, 1], b[:, 1], c[:, 1]])
    bits = int(tris["bits"])
    tris["i0"], tris["i1"] = _centre_range(xs.min(axis=0), xs.max(axis=0), bits)
    tris["j0"], tris["j1"] = _centre_range(ys.min(axis=0), ys.max(axis=0), bits)
    return tris


def _det2_sign(a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray) -> np.ndarray:
    """sign(a d - b c), exactly, for int64 arrays of magnitude up to 2**63: float64 where the
    estimate is farther from 0 than its error bound (4u of the terms' sizes), Python ints
    for the rest (ties above all)."""
    t1 = a.astype(np.float64) * d.astype(np.float64)
    t2 = b.astype(np.float64) * c.astype(np.float64)
    estimate = t1 - t2
    sign = np.sign(estimate).astype(np.int64)
    near = np.flatnonzero(np.abs(estimate) <= 4 * U * (np.abs(t1) + np.abs(t2)))
    for n in near:
        exact = int(a[n]) * int(d[n]) - int(b[n]) * int(c[n])
        sign[n] = (exact > 0) - (exact < 0)
    return sign


def _centre_range(
    lo: np.ndarray, hi: np.ndarray, bits: int = FINE_BITS
) -> tuple[np.ndarray, np.ndarray]:
    """First and last column index whose centre lies in [lo, hi] (fine, inclusive)."""
    one, half = 1 << bits, 1 << (bits - 1)
    first = -((half - lo) // one)  # ceil((lo - half) / one)
    last = (hi - half) // one
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


_EDGES = (("B", "C"), ("C", "A"), ("A", "B"))  # opposite A, B, C: the barycentric weights


def _covered(
    tris: dict[str, np.ndarray], batch: tuple[np.ndarray, np.ndarray, np.ndarray], nz: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(triangle, i, j, kfirst) of the candidates whose column centre the triangle covers;
    kfirst in [0, nz] (nz: the crossing lies above every voxel centre)."""
    t, i, j = batch
    bits = int(tris["bits"])
    px = i * (1 << bits) + (1 << (bits - 1))
    py = j * (1 << bits) + (1 << (bits - 1))
    covered = np.ones(len(t), dtype=bool)
    for first, second in _EDGES:
        p, q = tris[first][t], tris[second][t]
        dx, dy = q[:, 0] - p[:, 0], q[:, 1] - p[:, 1]
        # E = dx (Py - py) - dy (Px - px) >= 0, or > 0 where the top-left rule does not give
        # ties to the triangle (not dy < 0, nor dy == 0 < dx)
        sign = _det2_sign(dx, dy, px - p[:, 0], py - p[:, 1])
        wins = (dy < 0) | ((dy == 0) & (dx > 0))
        covered &= (sign > 0) | ((sign == 0) & wins)
    t, i, j = t[covered], i[covered], j[covered]
    return t, i, j, _first_voxel(tris, t, px[covered], py[covered], nz)


def _first_voxel(
    tris: dict[str, np.ndarray], t: np.ndarray, px: np.ndarray, py: np.ndarray, nz: int
) -> np.ndarray:
    """kfirst = floor(z* + 1/2), clipped to [0, nz], of covered candidates: z* is the plane's
    height at the fine centre (px, py), z* = Az - (Nx (px - Ax) + Ny (py - Ay)) / Nz.

    Estimated in float64 with a bound of its error, first order in u = 2**-53 and taken 1.25
    times: N's components are within eN (_oriented_triangles); the differences to the centre
    convert within u; the numerator is then within e_num = (eNx + 4u |Nx|) |dx| + (eNy +
    4u |Ny|) |dy|, the quotient q within (e_num + |q| eNz) / (Nz - eNz) + u |q|, and Az and
    the sum add u each of |Az| and |z|. Where Nz <= 2 eNz (a nearly vertical triangle) or
    z* - 1/2 lies within the bound (plus 2**-39 for the subtraction of 1/2) of an integer,
    kfirst is computed with Python integers from the exact barycentric weights.
    """
    a = tris["A"][t]
    dx = (px - a[:, 0]).astype(np.float64)
    dy = (py - a[:, 1]).astype(np.float64)
    nx, ny, nz_ = tris["Nx"][t], tris["Ny"][t], tris["Nz"][t]
    enx, eny, enz = tris["eNx"][t], tris["eNy"][t], tris["eNz"][t]
    numerator = nx * dx + ny * dy
    with np.errstate(divide="ignore", invalid="ignore"):
        q = numerator / nz_
        e_num = (enx + 4 * U * np.abs(nx)) * np.abs(dx) + (eny + 4 * U * np.abs(ny)) * np.abs(dy)
        az = a[:, 2].astype(np.float64)
        z = az - q
        bound = 1.25 * (
            (e_num + np.abs(q) * enz) / (nz_ - enz) + U * np.abs(q) + U * (np.abs(az) + np.abs(z))
        )
    bits = int(tris["bits"])
    r = np.ldexp(z, -bits) - 0.5
    bound_voxels = np.ldexp(bound, -bits) + 2.0 ** (-39 + FINE_BITS - bits)
    k = np.floor(r) + 1
    m = np.rint(r)
    near = ~(nz_ > 2 * enz) | ~(np.abs(r - m) > bound_voxels)
    k = np.where(near, 0, k).astype(np.int64)
    for n in np.flatnonzero(near):
        k[n] = _exact_first_voxel(tris, int(t[n]), int(px[n]), int(py[n]))
    return np.clip(k, 0, nz)


def _exact_first_voxel(tris: dict[str, np.ndarray], t: int, px: int, py: int) -> int:
    """floor(z* + 1/2) in Python integers: z* 2**FINE_BITS = sum(w Z) / sum(w), w the edge
    functions opposite each corner (barycentric weights times D)."""
    corners = {name: [int(x) for x in tris[name][t]] for name in "ABC"}
    weights = []
    for first, second in _EDGES:
        p, q = corners[first], corners[second]
        weights.append((q[0] - p[0]) * (py - p[1]) - (q[1] - p[1]) * (px - p[0]))
    numerator = sum(w * corners[name][2] for w, name in zip(weights, "ABC"))
    d = sum(weights)
    one = 1 << int(tris["bits"])
    return (2 * numerator + d * one) // (2 * d * one)


def _parity_fill(keys: np.ndarray, shape: Shape) -> np.ndarray:
    """Toggle each voxel where an odd number of crossings start, then prefix-XOR along k."""
    flips, counts = np.unique(keys, return_counts=True)
    voxels = np.zeros(shape, dtype=bool)
    voxels.reshape(-1)[flips[counts % 2 == 1]] = True
    step = max(1, SLAB_CELLS // (shape[1] * shape[2]))
    for s in range(0, shape[0], step):
        voxels[s : s + step] = np.logical_xor.accumulate(voxels[s : s + step], axis=2)
    return voxels
