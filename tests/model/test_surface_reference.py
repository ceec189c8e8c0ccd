"""The surface contract on the CPU: the reference (voxelizer/reference/surface.py) against
answers worked out another way: by hand for axis-aligned boxes, and with exact rational
arithmetic (clipping the triangle by each closed cube, and the thin rule from its definition)
for single triangles anywhere, on voxel corners, edges and centres, slivers, segments and
points. No device is needed."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from voxelizer.reference.solid import ONE, solid_columns
from voxelizer.reference.surface import surface_columns, surface_face_ids

from ..shapes import box, box_surface, box_thin

# -- exact rational oracles --------------------------------------------------------------------


def _fixed(points: np.ndarray) -> list[tuple[Fraction, ...]]:
    """Grid-space float32 points as exact rationals on the fixed-point lattice."""
    ints = np.rint(np.asarray(points, np.float32) * np.float32(ONE)).astype(np.int64)
    return [tuple(Fraction(int(c), ONE) for c in p) for p in ints]


def _clip(polygon: list, axis: int, bound: Fraction, keep_below: bool) -> list:
    """Sutherland-Hodgman: the part of a convex polygon (or segment, or point) in the closed
    half-space coordinate <= bound (keep_below) or >= bound."""

    def inside(p: tuple) -> bool:
        return p[axis] <= bound if keep_below else p[axis] >= bound

    if len(polygon) == 1:
        return polygon if inside(polygon[0]) else []
    clipped = []
    for index, current in enumerate(polygon):
        previous = polygon[index - 1]
        if inside(current):
            if not inside(previous):
                clipped.append(_crossing(previous, current, axis, bound))
            clipped.append(current)
        elif inside(previous):
            clipped.append(_crossing(previous, current, axis, bound))
    return clipped


def _crossing(p: tuple, q: tuple, axis: int, bound: Fraction) -> tuple:
    t = (bound - p[axis]) / (q[axis] - p[axis])
    return tuple(a + t * (b - a) for a, b in zip(p, q, strict=True))


def conservative_oracle(triangle: np.ndarray, shape: tuple[int, int, int]) -> set:
    """Voxels whose closed cube meets the closed triangle, by clipping it with the cube."""
    corners = _fixed(triangle)
    marked = set()
    for voxel in itertools.product(*(range(n) for n in shape)):
        polygon = list(corners)
        for axis, index in enumerate(voxel):
            polygon = _clip(polygon, axis, Fraction(index), keep_below=False)
            polygon = _clip(polygon, axis, Fraction(index + 1), keep_below=True)
        if polygon:
            marked.add(voxel)
    return marked


def thin_oracle(triangle: np.ndarray, shape: tuple[int, int, int]) -> set:
    """The thin rule from its definition, in rationals (degenerate triangles: conservative)."""
    a, b, c = (np.array(p, dtype=object) for p in _fixed(triangle))
    normal = np.cross(b - a, c - a)
    if not any(normal):
        return conservative_oracle(triangle, shape)
    size = [abs(x) for x in normal]
    axis = 2 if size[2] >= max(size[0], size[1]) else (1 if size[1] >= size[0] else 0)
    u, v = [other for other in range(3) if other != axis]
    marked = set()
    for i, j in itertools.product(range(shape[u]), range(shape[v])):
        point = (Fraction(2 * i + 1, 2), Fraction(2 * j + 1, 2))
        sides = [
            (q[u] - p[u]) * (point[1] - p[v]) - (q[v] - p[v]) * (point[0] - p[u])
            for p, q in ((a, b), (b, c), (c, a))
        ]
        if not (all(s >= 0 for s in sides) or all(s <= 0 for s in sides)):
            continue
        height = a[axis] - (
            normal[u] * (point[0] - a[u]) + normal[v] * (point[1] - a[v])
        ) / Fraction(normal[axis])
        voxel = [0, 0, 0]
        voxel[u], voxel[v] = i, j
        voxel[axis] = min(math.floor(height), shape[axis] - 1)
        marked.add(tuple(voxel))
    return marked


def marked(voxels: np.ndarray) -> set:
    return {tuple(int(x) for x in index) for index in np.argwhere(voxels)}


def triangle_cases() -> list:
    """Single triangles on a 6^3 grid: seeded random anywhere, on the half- and quarter-voxel
    lattice (corners, edges and centres of voxels), slivers, segments and points."""
    rng = np.random.default_rng(17)
    cases = []
    for index in range(12):
        cases.append((f"random-{index}", rng.uniform(0, 6, (3, 3))))
    for index in range(24):
        step = 2 if index % 2 else 4
        cases.append((f"lattice-{index}", rng.integers(0, 6 * step + 1, (3, 3)) / step))
    cases += [
        ("on-corners", np.array([[1, 1, 1], [4, 1, 1], [1, 4, 4]])),
        ("face-on-boundary", np.array([[1, 1, 2], [5, 1, 2], [1, 5, 2]])),
        ("vertical", np.array([[1, 1, 0.5], [5, 1, 0.5], [1, 1, 5.5]])),
        ("sliver", np.array([[0.5, 0.5, 0.5], [5.5, 5.5, 5.5], [0.5, 0.5 + 2**-14, 0.5]])),
        ("needle", np.array([[0.2, 3.0, 1.0], [5.9, 3.0, 1.0], [3.0, 3.0 + 2**-10, 4.0]])),
        ("segment", np.array([[0.5, 1.5, 2.5], [4.5, 3.5, 5.5], [2.5, 2.5, 4.0]])),
        ("segment-on-edge", np.array([[2, 3, 0], [2, 3, 6], [2, 3, 3]])),
        ("point-in-cube", np.full((3, 3), 2.25)),
        ("point-on-corner", np.full((3, 3), 3.0)),
        ("ties-of-thin", np.array([[0.5, 0.5, 1.0], [4.5, 0.5, 3.0], [0.5, 4.5, 5.0]])),
        ("grid-top", np.array([[0.0, 0.0, 6.0], [6.0, 0.0, 6.0], [0.0, 6.0, 6.0]])),
        ("grid-side", np.array([[6.0, 0.0, 0.0], [6.0, 6.0, 0.0], [6.0, 0.0, 6.0]])),
    ]
    return [pytest.param(name, triangle, id=name) for name, triangle in cases]


@pytest.mark.parametrize("name, triangle", triangle_cases())
@pytest.mark.parametrize("surface", ["conservative", "thin"])
def test_single_triangles_match_exact_rational_oracles(name, triangle, surface):
    shape = (6, 6, 6)
    oracle = conservative_oracle if surface == "conservative" else thin_oracle
    expected = oracle(triangle, shape)
    got = marked(
        surface_columns(np.asarray(triangle, np.float32), np.array([[0, 1, 2]]), shape, surface)
    )
    assert got == expected, (
        f"extra {sorted(got - expected)[:5]}, missing {sorted(expected - got)[:5]}"
    )
    assert expected or name.startswith("random"), "an analytic case must mark something"


# -- axis-aligned boxes with faces on voxel boundaries ------------------------------------------


BOXES = [
    ((2, 1, 3), (6, 5, 7), (8, 8, 12)),
    ((0, 0, 0), (8, 4, 8), (8, 8, 8)),  # faces on the grid's own faces
    ((3, 3, 3), (4, 4, 4), (8, 8, 8)),  # one voxel
    ((1, 2, 0), (7, 3, 12), (12, 8, 12)),  # a plate one voxel thick
]


@pytest.mark.parametrize("lo, hi, shape", BOXES)
def test_boxes_with_faces_on_voxel_boundaries(lo, hi, shape):
    vertices, faces = box(lo, hi)
    g = vertices.astype(np.float32)
    conservative = surface_columns(g, faces, shape)
    assert np.array_equal(conservative, box_surface(lo, hi, shape))
    assert np.array_equal(surface_columns(g, faces, shape, "thin"), box_thin(lo, hi, shape))
    # "both" adds the solid: the voxels whose centres are inside.
    solid = solid_columns(g, faces, shape)
    assert solid[lo[0] : hi[0], lo[1] : hi[1], lo[2] : hi[2]].all() and solid.sum() == np.prod(
        np.subtract(hi, lo)
    )


def test_a_box_off_the_lattice():
    lo, hi, shape = (1.25, 2.5, 0.75), (5.5, 6.0, 3.25), (8, 8, 8)
    vertices, faces = box(lo, hi)
    assert np.array_equal(
        surface_columns(vertices.astype(np.float32), faces, shape), box_surface(lo, hi, shape)
    )


# -- face ids ---------------------------------------------------------------------------------


def test_face_ids_are_the_smallest_marking_triangle():
    """Three triangles in one plane z = 2.5, overlapping: each voxel takes the smallest
    index of those that touch it, -1 elsewhere; a degenerate segment counts too."""
    g = np.array(
        [
            [1, 1, 2.5], [5, 1, 2.5], [1, 5, 2.5],  # 0: big
            [2, 2, 2.5], [3, 2, 2.5], [2, 3, 2.5],  # 1: inside 0
            [6, 6, 2.5], [7.5, 6, 2.5], [6, 7.5, 2.5],  # 2: apart
            [0.5, 7.5, 0.5], [0.5, 7.5, 7.5], [0.5, 7.5, 4.0],  # 3: a segment
        ],
        np.float32,
    )  # fmt: skip
    faces = np.array([[6, 7, 8], [3, 4, 5], [0, 1, 2], [9, 10, 11]])  # rows 0..3
    ids = surface_face_ids(g, faces, 8)
    each = [marked(surface_columns(g, faces[[t]], 8)) for t in range(4)]
    for voxel in itertools.product(range(8), repeat=3):
        owners = [t for t in range(4) if voxel in each[t]]
        assert ids[voxel] == (min(owners) if owners else -1), voxel
    assert (ids == 1).any() and (ids == 2).any() and (ids == 3).sum() == 8
