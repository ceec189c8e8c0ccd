"""Analytic test meshes as (vertices float64 (V, 3), faces int64 (T, 3)) pairs, outward-facing,
and the voxels expected of them.

Coordinates are taken as given, so grid-space shapes whose corners sit on multiples of 1/4
survive the float32 and fixed-point roundings exactly and their expected voxels can be
worked out by hand. (Kept apart from tests/helpers.py: these are geometry, not plumbing.)
"""

from __future__ import annotations

import numpy as np
import trimesh

from voxelizer.reference import solid_columns

Shape = tuple[np.ndarray, np.ndarray]


def _outward(vertices: np.ndarray, faces: np.ndarray) -> Shape:
    """Orient the faces of a convex shape so their normals point away from its centroid."""
    v = np.asarray(vertices, dtype=np.float64)
    f = np.asarray(faces, dtype=np.int64)
    a, b, c = v[f[:, 0]], v[f[:, 1]], v[f[:, 2]]
    normal = np.cross(b - a, c - a)
    inward = (normal * (a - v.mean(axis=0))).sum(axis=1) < 0
    f = np.where(inward[:, None], f[:, ::-1], f)
    return v, f


def box(lo, hi) -> Shape:
    """Axis-aligned box from its min and max corner: 8 vertices, 12 triangles."""
    lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    bits = (
        np.arange(8)[:, None] >> np.arange(3)[None, :]
    ) & 1  # corner c has x bit 0, y bit 1, z bit 2
    vertices = np.where(bits == 1, hi, lo)
    quads = np.array(
        [[0, 2, 6, 4], [1, 5, 7, 3], [0, 4, 5, 1], [2, 3, 7, 6], [0, 1, 3, 2], [4, 6, 7, 5]]
    )
    faces = np.concatenate([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]])
    return _outward(vertices, faces)


def octahedron(centre, radius: float) -> Shape:
    """Vertices at centre +- radius along each axis: every face is steep and every edge tilted."""
    centre = np.asarray(centre, np.float64)
    axes = np.eye(3) * radius
    vertices = np.concatenate([centre + axes, centre - axes])  # +x +y +z -x -y -z
    faces = np.array([[x, y, z] for x in (0, 3) for y in (1, 4) for z in (2, 5)])
    return _outward(vertices, faces)


def tetrahedron(p0, p1, p2, p3) -> Shape:
    """Tetrahedron on four given corners."""
    vertices = np.array([p0, p1, p2, p3], dtype=np.float64)
    faces = np.array([[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]])
    return _outward(vertices, faces)


def sphere(centre, radius: float, subdivisions: int = 3) -> Shape:
    """Icosphere (vertices on the sphere, so the mesh lies inside it and is convex)."""
    ball = trimesh.creation.icosphere(subdivisions=subdivisions)
    vertices = np.asarray(ball.vertices, np.float64) * radius + np.asarray(centre, np.float64)
    return vertices, np.asarray(ball.faces, np.int64)


def combine(*shapes: Shape) -> Shape:
    """Several shapes as one mesh (disjoint shapes give their union, nested ones a difference)."""
    vertices, faces, offset = [], [], 0
    for v, f in shapes:
        vertices.append(v)
        faces.append(f + offset)
        offset += len(v)
    return np.concatenate(vertices), np.concatenate(faces)


def inverted(shape: Shape) -> Shape:
    """The same surface facing inwards (to cut a cavity when combined with a larger shape)."""
    v, f = shape
    return v, f[:, ::-1].copy()


def hollow_sphere(centre, outer: float, inner: float, subdivisions: int = 3) -> Shape:
    """Two nested icospheres, the inner one inside out: a shell around an empty core."""
    return combine(
        sphere(centre, outer, subdivisions), inverted(sphere(centre, inner, subdivisions))
    )


def box_expected(lo, hi, shape: int | tuple[int, int, int]) -> np.ndarray:
    """Closed form of `box(lo, hi)` in grid space on an n³ or (nx, ny, nz) grid: by the tie
    rule, centres c with lo <= c < hi along x and y, and lo < c <= hi along z."""
    nx, ny, nz = (shape,) * 3 if isinstance(shape, int) else shape
    x, y, z = (np.arange(n) + 0.5 for n in (nx, ny, nz))
    x = (lo[0] <= x) & (x < hi[0])
    y = (lo[1] <= y) & (y < hi[1])
    z = (lo[2] < z) & (z <= hi[2])
    return x[:, None, None] & y[None, :, None] & z[None, None, :]


def box_surface(lo, hi, shape: tuple[int, int, int]) -> np.ndarray:
    """Conservative voxels of the surface of the box [lo, hi] (any corners inside the grid):
    cubes that meet the closed box but do not lie in its open interior."""
    axes = [np.arange(n) for n in shape]
    meets = [(i + 1 >= lo[d]) & (i <= hi[d]) for d, i in enumerate(axes)]
    interior = [(i > lo[d]) & (i + 1 < hi[d]) for d, i in enumerate(axes)]
    meets_all = meets[0][:, None, None] & meets[1][None, :, None] & meets[2][None, None, :]
    inside = interior[0][:, None, None] & interior[1][None, :, None] & interior[2][None, None, :]
    return meets_all & ~inside


def box_thin(lo, hi, shape: tuple[int, int, int]) -> np.ndarray:
    """Thin voxels of a box with integer corners: each face marks the layer at its own
    coordinate (the grid's last layer for a face on its far side), over the columns whose
    centres it covers."""
    voxels = np.zeros(shape, bool)
    for axis in range(3):
        u, v = [other for other in range(3) if other != axis]
        for level in (lo[axis], hi[axis]):
            index = [slice(None)] * 3
            index[axis] = min(int(level), shape[axis] - 1)
            index[u] = slice(int(lo[u]), int(hi[u]))
            index[v] = slice(int(lo[v]), int(hi[v]))
            voxels[tuple(index)] = True
    return voxels


def reference_voxels(shape: Shape, n: int | tuple[int, int, int]) -> np.ndarray:
    """The CPU reference's voxels of a grid-space shape (rounded to float32 like every input)."""
    vertices, faces = shape
    return solid_columns(vertices.astype(np.float32), faces, n)


def stacked_tetrahedra(count: int) -> Shape:
    """`count` flat tetrahedra stacked up z over one 4x4-column tile of an 8³ grid (from z =
    0.1 to 7.9): 4 pairs each on that one tile, more than a fill round takes."""
    z = 0.1 + np.arange(count) * (7.8 / count)
    base = np.array([[0.2, 0.2, 0.0], [3.8, 0.2, 0.0], [0.2, 3.8, 0.0], [1.0, 1.0, 0.5]])
    vertices = np.tile(base, (count, 1)) * [1, 1, 7.8 / count]
    vertices[:, 2] += np.repeat(z, 4)
    one = np.array([[0, 2, 1], [0, 1, 3], [1, 2, 3], [2, 0, 3]])
    faces = (one[None] + 4 * np.arange(count)[:, None, None]).reshape(-1, 3)
    return vertices, faces
