"""The CPU reference and every GPU variant against results derived without them: closed
forms, half-space tests, a scalar re-implementation of the contract, volumes, and symmetries.

Tie rule used for the hand-worked expectations: the contract decides every tie as if each
voxel centre were nudged to (x + e, y + e**2, z - d) with d >> e > 0 (top-left rule in the
column test; a crossing exactly at a centre's height does not count as below it). So a centre
on a face counts as inside iff the face's outward normal n has n_z > 0, or n_z == 0 and
(n_x < 0, or n_x == 0 and n_y < 0): for boxes, centres on the low x/y faces and on the top
face are inside; those on the high x/y faces and the bottom face are not.
"""

from __future__ import annotations

import numpy as np
import pytest

from voxelizer import VARIANTS, load_mesh
from voxelizer.reference.solid import ONE, solid_columns, voxelize_reference

from .. import shapes
from ..helpers import load_model, random_soup, signed_volume
from ..shapes import box_expected


@pytest.fixture(params=["reference", *VARIANTS])
def voxelize(request):
    """The shape tests hold for the CPU reference and for every GPU variant alike."""
    if request.param == "reference":
        return shapes.reference_voxels
    gpu = request.getfixturevalue("gpu")

    def on_gpu(shape: shapes.Shape, n: int) -> np.ndarray:
        vertices, faces = shape
        return gpu.voxelize_grid(vertices.astype(np.float32), faces, n, variant=request.param)

    return on_gpu


def convex_expected(shape: shapes.Shape, n: int, scale: int = 4) -> np.ndarray:
    """Exact inside test of every voxel centre against the face planes of a convex shape
    whose coordinates are multiples of 1/scale, ties decided by the nudge in the docstring."""
    vertices, faces = shape
    q = vertices * scale
    assert np.array_equal(q, np.rint(q)) and scale % 2 == 0
    q = q.astype(np.int64)
    a, b, c = q[faces[:, 0]], q[faces[:, 1]], q[faces[:, 2]]
    normals = np.cross(b - a, c - a)
    offsets = (normals * a).sum(axis=1)
    axis = np.arange(n, dtype=np.int64) * scale + scale // 2
    px, py, pz = np.meshgrid(axis, axis, axis, indexing="ij")
    inside = np.ones((n, n, n), dtype=bool)
    for (nx, ny, nz), off in zip(normals, offsets):
        if nx == ny == nz == 0:
            continue
        s = nx * px + ny * py + nz * pz - off
        tie_inside = nz > 0 or (nz == 0 and (nx < 0 or (nx == 0 and ny < 0)))
        inside &= (s < 0) | ((s == 0) & tie_inside)
    return inside


def convex_float(shape: shapes.Shape, n: int, tol: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """(inside, clear) for a convex shape in general position: inside all face planes, and
    farther than tol from every plane (where float64 cannot be wrong). The planes come from
    the vertices exactly as the contract rounds them."""
    vertices, faces = shape
    v = np.rint(vertices.astype(np.float32) * np.float32(ONE)).astype(np.float64) / ONE
    a, b, c = v[faces[:, 0]], v[faces[:, 1]], v[faces[:, 2]]
    normals = np.cross(b - a, c - a)
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    offsets = (normals * a).sum(axis=1)
    p = centres(n).reshape(-1, 3)
    inside = np.ones(len(p), dtype=bool)
    clear = np.ones(len(p), dtype=bool)
    for normal, offset in zip(normals, offsets):
        s = p @ normal - offset
        inside &= s < 0
        clear &= np.abs(s) > tol
    return inside.reshape(n, n, n), clear.reshape(n, n, n)


def centres(n: int) -> np.ndarray:
    """(n, n, n, 3) voxel centres in grid space."""
    return np.stack(np.meshgrid(*[np.arange(n) + 0.5] * 3, indexing="ij"), axis=-1)


# --- boxes: closed-form voxel ranges --------------------------------------------------------


@pytest.mark.parametrize("n", [36, 100])
def test_box_with_faces_between_centres_is_the_exact_block(voxelize, n):
    lo, hi = (3, 5, 7), (n - 4, n - 9, n - 2)
    vox = voxelize(shapes.box(lo, hi), n)
    expected = np.zeros((n, n, n), bool)
    expected[3 : n - 4, 5 : n - 9, 7 : n - 2] = True
    assert np.array_equal(vox, expected)


def test_box_faces_in_centre_planes_follow_the_tie_rule(voxelize):
    # Every face holds a plane of voxel centres: x, y in [lo, hi), z in (lo, hi].
    n = 36
    vox = voxelize(shapes.box((4.5, 6.5, 8.5), (20.5, 30.5, 33.5)), n)
    expected = np.zeros((n, n, n), bool)
    expected[4:20, 6:30, 9:34] = True
    assert np.array_equal(vox, expected)
    assert not vox[:, :, 8].any()  # bottom face plane z = 8.5: outside
    assert vox[10, 10, 33]  # top face plane z = 33.5: inside


def test_random_quarter_boxes_match_closed_form(voxelize):
    rng = np.random.default_rng(7)
    for n in (36, 100):
        for _ in range(6):
            lo = rng.integers(0, 2 * n, 3) / 4.0
            hi = lo + rng.integers(1, 2 * n, 3) / 4.0
            vox = voxelize(shapes.box(lo, hi), n)
            assert np.array_equal(vox, box_expected(lo, hi, n)), (n, lo, hi)


def test_faces_a_fraction_of_the_fixed_point_step_off_centre_planes(voxelize):
    # Faces a fraction of 2**-16 off a centre plane (float32 values, exact in float64): the
    # solid is decided on them, not on their fixed-point roundings (which would put 4.5 + u/2,
    # 8.5 - u/2, 20.5 + u/2, 30.5 + u/2 and 33.5 - u/2 on the planes). u = 2**-16.
    n, u = 36, 2.0**-16
    lo = (4.5 + u / 2, 6.5 + 19 * 2.0**-21, 8.5 - u / 2)
    hi = (20.5 + u / 2, 30.5 + u / 2, 33.5 - u / 2)
    vox = voxelize(shapes.box(lo, hi), n)
    expected = np.zeros((n, n, n), bool)
    expected[5:21, 7:31, 8:33] = True
    assert np.array_equal(vox, expected)
    assert np.array_equal(expected, box_expected(lo, hi, n))


def test_box_filling_the_grid_is_all_solid(voxelize):
    # The top face crosses at z = N: kfirst == N, which changes nothing.
    n = 36
    assert voxelize(shapes.box((0, 0, 0), (n, n, n)), n).all()


def test_world_box_through_placement():
    # h = 10 / 20 = 0.5; the grid is centred on the box, so y spans [4, 16] and z [6, 14].
    v, f = shapes.box((0, 0, 0), (10, 6, 4))
    grid = voxelize_reference(load_mesh((v, f)), 20)
    assert grid.voxel_size == 0.5
    assert np.array_equal(grid.origin, [0.0, -2.0, -3.0])
    expected = np.zeros((20, 20, 20), bool)
    expected[:, 4:16, 6:14] = True
    assert np.array_equal(grid.to_numpy(), expected)


def test_hollow_box_with_faces_on_centres(voxelize):
    n = 36
    outer, inner = ((2.5, 3.5, 4.5), (30.5, 31.5, 32.5)), ((10.5, 11.5, 12.5), (20.5, 21.5, 22.5))
    vox = voxelize(shapes.combine(shapes.box(*outer), shapes.inverted(shapes.box(*inner))), n)
    expected = box_expected(*outer, n) & ~box_expected(*inner, n)
    assert np.array_equal(vox, expected)
    assert not vox[15, 16, 17]


def test_stacked_boxes_sharing_a_face_in_a_centre_plane(voxelize):
    # The shared face appears twice with opposite orientation and cancels: the union remains.
    n = 36
    a = ((4, 4, 3.5), (20, 20, 12.5))
    b = ((8, 8, 12.5), (16, 16, 30.5))
    vox = voxelize(shapes.combine(shapes.box(*a), shapes.box(*b)), n)
    assert np.array_equal(vox, box_expected(*a, n) | box_expected(*b, n))


# --- tetrahedra and octahedra: vertices on centres, edges through centres -------------------


def test_unit_octahedron_on_a_centre_by_hand(voxelize):
    # Centre (10,10,10) and its six neighbours lie on the surface; only the centre and the
    # top vertex (10, 10, 11) count as inside.
    n = 20
    vox = voxelize(shapes.octahedron((10.5, 10.5, 10.5), 1.0), n)
    assert sorted(map(tuple, np.argwhere(vox))) == [(10, 10, 10), (10, 10, 11)]


def test_corner_tetrahedron_by_hand(voxelize):
    # Corner at voxel centre (2,3,4), legs of length s along the axes. With offsets a, b, c
    # from the corner voxel: inside iff a >= 0, b >= 0, c >= 1 (bottom face outside) and
    # a + b + c <= s (slanted face points up: inside). That is C(s + 2, 3) voxels.
    n, s = 36, 8
    o = np.array([2.5, 3.5, 4.5])
    vox = voxelize(shapes.tetrahedron(o, o + (s, 0, 0), o + (0, s, 0), o + (0, 0, s)), n)
    a, b, c = np.meshgrid(*(np.arange(n) - np.array([2, 3, 4])[:, None]), indexing="ij")
    expected = (a >= 0) & (b >= 0) & (c >= 1) & (a + b + c <= s)
    assert np.array_equal(vox, expected)
    assert vox.sum() == (s + 2) * (s + 1) * s // 6


@pytest.mark.parametrize("n", [36, 100])
def test_octahedra_match_half_spaces(voxelize, n):
    rng = np.random.default_rng(n)
    for _ in range(4):
        radius = int(rng.integers(1, n // 3))
        centre = rng.integers(radius, n - radius, 3) + 0.5
        shape = shapes.octahedron(centre, radius)
        vox = voxelize(shape, n)
        assert np.array_equal(vox, convex_expected(shape, n)), (centre, radius)


@pytest.mark.parametrize("n", [36, 100])
def test_tetrahedra_on_centres_match_half_spaces(voxelize, n):
    # Half-integer corners put vertices on centres; quarter-integer ones put edges and faces
    # through many of them at odd angles.
    rng = np.random.default_rng(n + 1)
    for step in (2, 4, 4, 4):
        for _ in range(3):
            corners = rng.integers(0, n * step + 1, (4, 3)) / step
            if step == 2:
                corners = np.floor(corners) + 0.5
                corners = np.minimum(corners, n - 0.5)
            if np.linalg.det(corners[1:] - corners[0]) == 0:
                continue
            shape = shapes.tetrahedron(*corners)
            vox = voxelize(shape, n)
            assert np.array_equal(vox, convex_expected(shape, n)), corners


# --- spheres: float geometry, exact away from the surface ----------------------------------


def test_sphere_lies_between_surface_bounds(voxelize):
    # Voxels farther than half a voxel diagonal from the surface must be right; the count
    # lies between the voxels surely inside and those not surely outside.
    n = 64
    centre, radius = np.array([31.3, 32.6, 30.9]), 25.2
    vertices, faces = shapes.sphere(centre, radius, subdivisions=3)
    vox = voxelize((vertices, faces), n)
    a, b, c = vertices[faces[:, 0]], vertices[faces[:, 1]], vertices[faces[:, 2]]
    normals = np.cross(b - a, c - a)
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    r_in = ((a - centre) * normals).sum(axis=1).min()  # the mesh holds the ball of this radius
    dist = np.linalg.norm(centres(n) - centre, axis=-1)
    half_diag = np.sqrt(3) / 2
    must_in = dist < r_in - half_diag
    must_out = dist > radius + half_diag
    assert r_in > 0.99 * radius
    assert vox[must_in].all()
    assert not vox[must_out].any()
    assert must_in.sum() < vox.sum() < (~must_out).sum()


def test_sphere_matches_half_spaces_away_from_its_planes(voxelize):
    n = 40
    shape = shapes.sphere((19.7, 20.2, 20.05), 15.3, subdivisions=2)
    inside, clear = convex_float(shape, n)
    assert clear.mean() > 0.99
    assert np.array_equal(voxelize(shape, n)[clear], inside[clear])


def test_hollow_sphere_is_only_the_shell(voxelize):
    n = 40
    centre = np.array([20.1, 19.8, 20.3])
    in_outer, clear_outer = convex_float(shapes.sphere(centre, 17.0, subdivisions=2), n)
    in_inner, clear_inner = convex_float(shapes.sphere(centre, 10.0, subdivisions=2), n)
    vox = voxelize(shapes.hollow_sphere(centre, 17.0, 10.0, subdivisions=2), n)
    clear = clear_outer & clear_inner
    assert np.array_equal(vox[clear], (in_outer & ~in_inner)[clear])
    assert not vox[16:24, 16:24, 16:24].any()  # the core, well inside the cavity
    assert vox[20, 19, 5:10].all() and vox[20, 19, 31:37].all()  # the shell below and above


# --- symmetries -----------------------------------------------------------------------------


def quantized_bunny(n: int, lo: float, hi: float, step: float) -> shapes.Shape:
    """The bunny scaled into [lo, hi] of an n-grid, coordinates snapped to multiples of step."""
    mesh = load_model("bunny.ply")
    v = mesh.vertices - mesh.vertices.min(axis=0)
    v = lo + v * ((hi - lo) / v.max())
    return np.round(v / step) * step, mesh.faces


@pytest.mark.parametrize("shift", [(1, 0, 0), (0, 0, 1), (7, 3, 11), (13, 1, 2)])
def test_whole_voxel_translation_shifts_the_grid(voxelize, shift):
    n = 48
    v, f = quantized_bunny(n, 1.0, 30.0, 2.0**-9)
    base = voxelize((v, f), n)
    moved = voxelize((v + np.array(shift, np.float64), f), n)
    expected = np.zeros_like(base)
    sx, sy, sz = shift
    expected[sx:, sy:, sz:] = base[: n - sx, : n - sy, : n - sz]
    assert base.sum() > 1000
    assert np.array_equal(moved, expected)


def test_vertex_order_orientation_and_face_order_do_not_matter(voxelize):
    # Half-integer vertices: a tie-ridden mesh (many centres on vertices, edges and faces).
    n = 24
    v, f = quantized_bunny(n, 0.0, 24.0, 0.5)
    base = voxelize((v, f), n)
    rng = np.random.default_rng(3)
    assert base.sum() > 1000
    assert np.array_equal(voxelize((v, f[:, [1, 2, 0]]), n), base)
    assert np.array_equal(voxelize((v, f[:, ::-1]), n), base)
    assert np.array_equal(voxelize((v, f[rng.permutation(len(f))]), n), base)


# --- volumes of real meshes ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["bunny.ply", "dragon.ply", "armadillo.ply", "torus.stl", "featuretype.stl"]
    + ["torus_knot.ply", "hollow_sphere.ply", "gear.ply"],
)
def test_volume_within_one_percent(name):
    mesh = load_model(name)
    grid = voxelize_reference(mesh, 256)
    volume = signed_volume(mesh.vertices, mesh.faces)
    assert abs(grid.count() * grid.voxel_size**3 / volume - 1) < 0.01


# --- the contract itself, re-implemented one scalar at a time --------------------------------


def scalar_contract(g: np.ndarray, faces: np.ndarray, n: int) -> np.ndarray:
    """The contract written literally with Python ints: slow, obviously right."""
    fixed = [[int(x) for x in row] for row in np.rint(g * np.float32(ONE)).astype(np.int64)]
    starts = np.zeros((n, n, n + 1), np.int64)
    for face in faces:
        a, b, c = (fixed[int(x)] for x in face)
        d = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
        if d == 0:
            continue
        if d < 0:
            b, c, d = c, b, -d
        for i in range(n):
            for j in range(n):
                p = (i * ONE + ONE // 2, j * ONE + ONE // 2)
                e, covered = [], True
                for s, t in ((a, b), (b, c), (c, a)):
                    dx, dy = t[0] - s[0], t[1] - s[1]
                    e.append(dx * (p[1] - s[1]) - dy * (p[0] - s[0]))
                    covered &= e[-1] > 0 or (e[-1] == 0 and (dy < 0 or (dy == 0 and dx > 0)))
                if covered:
                    num = e[1] * a[2] + e[2] * b[2] + e[0] * c[2]
                    k = 0
                    while k < n and not num < (2 * k + 1) * (ONE // 2) * d:
                        k += 1
                    starts[i, j, k] += 1
    return (np.cumsum(starts[:, :, :n], axis=2) % 2).astype(bool)


def test_random_soups_match_the_scalar_contract():
    # Arbitrary (also open, overlapping, degenerate) triangle soups, on and off the centres.
    rng = np.random.default_rng(11)
    for trial in range(90):
        n = int(rng.integers(1, 8))
        nv, nt = int(rng.integers(3, 8)), int(rng.integers(1, 8))
        g, faces = random_soup(rng, n, nv, nt, (None, 2, 4)[trial % 3])
        assert np.array_equal(solid_columns(g, faces, n), scalar_contract(g, faces, n)), trial
