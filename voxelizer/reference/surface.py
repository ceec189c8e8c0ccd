"""Exact CPU surface voxelization: the oracle the surface pass is checked against, bit for bit.

The contract (modes "surface" and "both"; the GPU implements it per column, in integers):

1. Vertices become fixed point as for the solid (solid.py, 1): X = rint(g * 2**16). A
   triangle T is the closed set conv{A, B, C}: a segment or a point when it is degenerate.
   Voxel (i, j, k) is the closed cube [i, i+1] x [j, j+1] x [k, k+1] (times 2**16): two
   neighbouring voxels share their common face.
2. Conservative: the voxel is set iff some triangle T meets its closed cube (touching
   counts: a triangle on the plane x = i sets voxels on both sides of it). Decided by the
   separating-axis test on the 13 axes (the cube's 3, the normal N = (B - A) x (C - A), the
   9 cross products of the cube's axes with the edges; zero axes separate nothing, so
   degenerate triangles need no special case), all in integers.
3. Thin (6-separating): a triangle with N != 0 has a dominant axis c, the one with the largest
   |N_c| (ties go to z, then y, then x); a, b are the other two. Voxel v is set iff the
   point (v_a + 1/2, v_b + 1/2) lies in the closed projection of T along c (edges included),
   and v_c = min(floor(h), n_c - 1) for the height h along c where the line through that
   point meets T's plane. A triangle with N = 0 sets its conservative voxels.
4. Face ids: for every set voxel, the smallest index (row of the face array) of the
   triangles that set it; -1 where none does.
5. "both" is the solid (solid.py, any fill mode) united with the conservative surface.

Integers up to 2**61 are exact int64 arithmetic; the normal's tests and the thin heights
(up to about 2**90) are estimated in float64 with a bound on the error and settled with
Python integers where the estimate is too close to call. This module does not share code
with the GPU's per-column ranges: it tests candidate voxels one by one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import numpy as np
import numpy.typing

from ..choices import SURFACES
from ..components import mesh_components
from ..grid import DenseGrid
from ..grid_spec import PadLike, VoxelSizeLike
from ..mesh import Mesh
from ..placement import MAX_RESOLUTION, GridLike, GridPlacement, Shape
from .solid import (
    ONE,
    on_work_lattice,
    solid_columns,
    to_fixed,
    union_columns,
    vote_columns,
)

HALF = ONE >> 1

# Candidate (triangle, voxel) pairs tested per batch: bounds memory however large a
# triangle is.
CHUNK = 1 << 20

# float64 unit roundoff; the sums below are settled exactly within 32 of them per unit of
# the magnitudes that went into them.
_U = 2.0**-53
_MARGIN = 32 * _U


def surface_columns(
    grid_vertices_f32: np.ndarray,
    faces: np.ndarray,
    shape: int | Shape,
    surface: str = "conservative",
) -> np.ndarray:
    """bool[i, j, k] of shape (nx, ny, nz): the surface voxels (contract 2 or 3) of float32
    grid-space vertices (values in [0, n] on each axis)."""
    shape = _sides(shape)
    voxels = np.zeros(shape, bool)
    for _, flat in _marks(grid_vertices_f32, faces, shape, surface):
        voxels.reshape(-1)[flat] = True
    return voxels


def surface_face_ids(
    grid_vertices_f32: np.ndarray,
    faces: np.ndarray,
    shape: int | Shape,
    surface: str = "conservative",
) -> np.ndarray:
    """int32[i, j, k]: the smallest index of the triangles that set each voxel, -1 where
    none does (contract 4)."""
    shape = _sides(shape)
    count = shape[0] * shape[1] * shape[2]
    ids = np.full(count, np.iinfo(np.int64).max, np.int64)
    for triangles, flat in _marks(grid_vertices_f32, faces, shape, surface):
        np.minimum.at(ids, flat, triangles)
    ids[ids == np.iinfo(np.int64).max] = -1
    return ids.astype(np.int32).reshape(shape)


def conservative_marks(
    corners: np.ndarray, shape: int | Shape
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(triangle indices, flat voxel indices (i * ny + j) * nz + k) of every pair of contract
    2, in batches, for fixed-point corners (T, 3 corners, 3 axes) int64 already on a grid of
    `shape` (a triangle grid's cells: voxelizer/trigrid/reference.py)."""
    corners = np.asarray(corners, np.int64).reshape(-1, 3, 3)
    triangles = np.arange(len(corners), dtype=np.int64)
    yield from _conservative_marks(corners, triangles, _normals(corners), _sides(shape))


def voxelize_surface_reference(
    mesh: Mesh,
    grid: GridLike | None = None,
    mode: str = "surface",
    surface: str = "conservative",
    fill_mode: str = "parity",
    *,
    voxel_size: VoxelSizeLike | None = None,
    bounds: numpy.typing.ArrayLike | None = None,
    box_fit: str = "cover",
    pad: PadLike = 0,
) -> DenseGrid:
    """The voxels of `mode` ("surface" with `surface`, or "both": the solid of `fill_mode`
    united with the conservative surface), placed as the GPU path places them (on the
    lattice that holds the mesh too where the grid crops it: reference.on_work_lattice)."""
    if mode not in ("surface", "both") or surface not in SURFACES:
        raise ValueError(f"unknown mode {mode!r} or surface {surface!r}")
    if fill_mode not in ("parity", "vote", "union", "winding"):
        raise ValueError(f"unknown fill mode {fill_mode!r}")
    placement = GridPlacement.fit(mesh, grid, voxel_size, bounds, box_fit=box_fit, pad=pad)

    def voxels_of(g: np.ndarray, fine: np.ndarray, shape: Shape) -> np.ndarray:
        if mode == "surface":
            return surface_columns(g, mesh.faces, shape, surface)
        if fill_mode == "parity":
            solid = solid_columns(fine, mesh.faces, shape)
        elif fill_mode == "vote":
            solid = vote_columns(fine, mesh.faces, shape)
        elif fill_mode == "union":
            solid = union_columns(fine, mesh.faces, shape, mesh_components(mesh))
        else:
            from .winding import winding_columns

            solid = winding_columns(g, mesh.faces, shape, fine)
        return solid | surface_columns(g, mesh.faces, shape, "conservative")

    return on_work_lattice(mesh, placement, voxels_of)


# -- marks: (triangle indices, flat voxel indices) in batches -----------------------------------


def _marks(
    grid_vertices_f32: np.ndarray, faces: np.ndarray, shape: Shape, surface: str
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    if surface not in SURFACES:
        raise ValueError(f"unknown surface {surface!r}")
    faces = np.asarray(faces, dtype=np.int64).reshape(-1, 3)
    fixed = to_fixed(grid_vertices_f32, faces, shape)
    corners = fixed[faces]  # (T, 3 corners, 3 axes)
    normals = _normals(corners)
    triangles = np.arange(len(faces), dtype=np.int64)
    if surface == "thin":
        flat_triangle = ~normals.any(axis=1)
        yield from _conservative_marks(corners, triangles[flat_triangle], normals, shape)
        yield from _thin_marks(corners, triangles[~flat_triangle], normals, shape)
    else:
        yield from _conservative_marks(corners, triangles, normals, shape)


def _normals(corners: np.ndarray) -> np.ndarray:
    """(T, 3) int64 N = (B - A) x (C - A): exact, each component below 2**60."""
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


def _boxes(first: np.ndarray, last: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(item, (M, D) integer points) of every point of each item's box [first, last]
    (inclusive, (T, D)), CHUNK points at a time."""
    sizes = np.maximum(last - first + 1, 0)
    count = np.prod(sizes, axis=1)
    end = np.cumsum(count)
    total = int(end[-1]) if len(end) else 0
    for start in range(0, total, CHUNK):
        candidate = np.arange(start, min(start + CHUNK, total), dtype=np.int64)
        item = np.searchsorted(end, candidate, side="right")
        local = candidate - (end[item] - count[item])
        points = np.empty((len(item), first.shape[1]), np.int64)
        for axis in range(first.shape[1]):
            size = sizes[item, axis]
            points[:, axis] = first[item, axis] + local % size
            local = local // size
        yield item, points


def _flat(points: np.ndarray, shape: Shape) -> np.ndarray:
    return (points[:, 0] * shape[1] + points[:, 1]) * shape[2] + points[:, 2]


# -- conservative: the 13-axis separating test per candidate voxel ------------------------------


def _conservative_marks(
    corners: np.ndarray, triangles: np.ndarray, normals: np.ndarray, shape: Shape
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Candidates: the voxels whose closed cubes the triangle's bounding box touches (the
    cube's own three axes), i from ceil(min) - 1 to floor(max); then the other ten axes."""
    if not len(triangles):
        return
    tri = corners[triangles]
    low, high = tri.min(axis=1), tri.max(axis=1)
    first = np.maximum(-((-low) // ONE) - 1, 0)
    last = np.minimum(high // ONE, np.array(shape) - 1)
    for item, voxels in _boxes(first, last):
        touched = _touches(tri[item], normals[triangles[item]], voxels * ONE)
        yield triangles[item[touched]], _flat(voxels[touched], shape)


def _touches(tri: np.ndarray, normal: np.ndarray, corner: np.ndarray) -> np.ndarray:
    """bool (M,): the closed triangles (M, 3, 3) meet the closed cubes [corner, corner + ONE]^3,
    given that their bounding boxes do."""
    touched = np.ones(len(tri), bool)
    for p, q in ((0, 1), (1, 2), (2, 0)):
        edge = tri[:, q] - tri[:, p]
        for axis in range(3):
            # e_axis x edge: zero on `axis`, and (-e2, e1) on the other two (cyclic order).
            u, v = (axis + 1) % 3, (axis + 2) % 3
            direction = np.zeros_like(edge)
            direction[:, u] = -edge[:, v]
            direction[:, v] = edge[:, u]
            projected = np.einsum("mc,mvc->mv", direction, tri)  # (M, 3): below 2**60
            base = np.einsum("mc,mc->m", direction, corner)
            cube_low = base + ONE * np.minimum(direction, 0).sum(axis=1)
            cube_high = base + ONE * np.maximum(direction, 0).sum(axis=1)
            touched &= (cube_low <= projected.max(axis=1)) & (cube_high >= projected.min(axis=1))
    # The normal: the plane N . X = N . A must pass through the cube (an empty test for N = 0).
    least = corner + ONE * (normal < 0)
    most = corner + ONE * (normal > 0)
    anchor = tri[:, 0]
    touched &= _sign_of_dot(normal, least - anchor) <= 0
    touched &= _sign_of_dot(normal, most - anchor) >= 0
    return touched


def _sign_of_dot(n: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Exact sign of sum(n * d, axis=1) for int64 rows (|n| < 2**60, |d| < 2**31)."""
    terms = n.astype(np.float64) * d.astype(np.float64)
    estimate = terms.sum(axis=1)
    sign = np.sign(estimate).astype(np.int64)
    unsure = np.flatnonzero(np.abs(estimate) <= _MARGIN * np.abs(terms).sum(axis=1))
    if len(unsure):
        exact = (n[unsure].astype(object) * d[unsure].astype(object)).sum(axis=1)
        sign[unsure] = [(value > 0) - (value < 0) for value in exact]
    return sign


# -- thin: the projection along the dominant axis, one voxel per covered centre -----------------


def _thin_marks(
    corners: np.ndarray, triangles: np.ndarray, normals: np.ndarray, shape: Shape
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    if not len(triangles):
        return
    size = np.abs(normals[triangles])
    dominant = np.where(
        (size[:, 2] >= size[:, 0]) & (size[:, 2] >= size[:, 1]),
        2,
        np.where(size[:, 1] >= size[:, 0], 1, 0),
    )
    for axis in range(3):
        chosen = triangles[dominant == axis]
        if len(chosen):
            yield from _thin_axis(corners[chosen], chosen, normals[chosen], axis, shape)


def _thin_axis(
    tri: np.ndarray, triangles: np.ndarray, normal: np.ndarray, axis: int, shape: Shape
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Triangles whose dominant axis is `axis`: centres (a, b) of the other two axes in their
    projected boxes, then the closed point-in-triangle test and the height along `axis`."""
    a, b = [other for other in range(3) if other != axis]
    plane = tri[:, :, [a, b]]  # (T, 3, 2)
    low, high = plane.min(axis=1), plane.max(axis=1)
    first = np.maximum(-((HALF - low) // ONE), 0)  # ceil((low - HALF) / ONE)
    last = np.minimum((high - HALF) // ONE, np.array([shape[a], shape[b]]) - 1)
    for item, columns in _boxes(first, last):
        centre = columns * ONE + HALF
        p = plane[item]
        sides = np.stack(
            [
                (p[:, q, 0] - p[:, r, 0]) * (centre[:, 1] - p[:, r, 1])
                - (p[:, q, 1] - p[:, r, 1]) * (centre[:, 0] - p[:, r, 0])
                for r, q in ((0, 1), (1, 2), (2, 0))
            ],
            axis=1,
        )
        covered = (sides >= 0).all(axis=1) | (sides <= 0).all(axis=1)
        item, columns, centre = item[covered], columns[covered], centre[covered]
        level = _floor_height(tri[item], normal[item], centre, axis, a, b)
        voxels = np.empty((len(item), 3), np.int64)
        voxels[:, a] = columns[:, 0]
        voxels[:, b] = columns[:, 1]
        voxels[:, axis] = np.minimum(level, shape[axis] - 1)
        yield triangles[item], _flat(voxels, shape)


def _floor_height(
    tri: np.ndarray, normal: np.ndarray, centre: np.ndarray, axis: int, a: int, b: int
) -> np.ndarray:
    """floor(h / ONE) for the plane's coordinate h along `axis` at the points `centre` of the
    (a, b)-plane: h N_c = A_c N_c - N_a (P_a - A_a) - N_b (P_b - A_b)."""
    anchor = tri[:, 0]
    factors = np.stack([normal[:, axis], -normal[:, a], -normal[:, b]], axis=1)
    offsets = np.stack(
        [anchor[:, axis], centre[:, 0] - anchor[:, a], centre[:, 1] - anchor[:, b]], axis=1
    )
    terms = factors.astype(np.float64) * offsets.astype(np.float64)
    denominator = normal[:, axis].astype(np.float64) * ONE
    estimate = terms.sum(axis=1) / denominator
    level = np.floor(estimate).astype(np.int64)
    error = _MARGIN * (np.abs(terms).sum(axis=1) / np.abs(denominator) + np.abs(estimate) + 1)
    unsure = np.flatnonzero(np.abs(estimate - np.rint(estimate)) <= error)
    if len(unsure):
        numerator = (factors[unsure].astype(object) * offsets[unsure].astype(object)).sum(axis=1)
        level[unsure] = [
            int(value) // (int(n) * ONE)
            for value, n in zip(numerator, normal[unsure, axis], strict=True)
        ]
    return level


def _sides(shape: int | Shape) -> Shape:
    """(nx, ny, nz) from an int (a cube) or three ints, each in [1, MAX_RESOLUTION]."""
    if np.ndim(shape) == 0:
        sides: tuple[int, ...] = (int(cast(int, shape)),) * 3
    else:
        sides = tuple(int(n) for n in cast(Shape, shape))
    if len(sides) != 3 or not all(1 <= n <= MAX_RESOLUTION for n in sides):
        raise ValueError(f"grid sides must be three values in [1, {MAX_RESOLUTION}], not {shape}")
    return sides[0], sides[1], sides[2]
