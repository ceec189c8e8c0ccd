"""Triangle grids, the queries: first hit, any hit and the triangles in a box, on the GPU,
against brute force over all triangles (voxelizer/trigrid/reference.py, the shader's
arithmetic in numpy), over one level and two; watertightness (rays from inside closed meshes
through their vertices and edges all hit); t ranges; bad input."""

from __future__ import annotations

import numpy as np
import pytest

import voxelizer
from voxelizer.io import load_mesh
from voxelizer.trigrid import GridEngine, build_triangle_grid
from voxelizer.trigrid.reference import reference_box, reference_trace

from ..helpers import load_model
from ..shapes import box, sphere


@pytest.fixture(scope="module")
def engine(gpu):
    grids = GridEngine(gpu.device)
    yield grids
    grids.close()


def random_rays(mesh, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Rays from around the mesh's box towards random points inside it."""
    rng = np.random.default_rng(seed)
    low, high = mesh.bounds
    centre, size = (low + high) / 2, np.linalg.norm(high - low)
    origins = centre + rng.normal(size=(count, 3)) * size
    targets = low + rng.random((count, 3)) * (high - low)
    return origins, targets - origins


def assert_first_hits_match(grid, origins, directions, t_min=0.0, t_max=np.inf) -> None:
    """The GPU's first hits against every triangle's: the same triangle, or (a tie within
    rounding, e.g. on a shared edge) another hit at the same t; t within the rounding of
    the division; the barycentrics of the same triangle alike."""
    t, triangle, uv = grid.intersect(origins, directions, t_min=t_min, t_max=t_max)
    o_grid = grid.placement.grid_points(origins)
    d_grid = grid.placement.grid_directions(directions)
    expected = reference_trace(grid.corners, o_grid, d_grid, t_min, t_max)
    assert np.array_equal(triangle >= 0, expected["triangle"] >= 0), "hits and misses differ"
    hit = triangle >= 0
    assert np.allclose(t[hit], expected["t"][hit], rtol=2e-6, atol=0)
    assert (t[~hit] == np.inf).all() and (uv[~hit] == 0).all()
    same = triangle == expected["triangle"]
    for ray in np.flatnonzero(~same):  # ties: the GPU's triangle is hit at the same t
        alone = reference_trace(
            grid.corners[[triangle[ray]]], o_grid[[ray]], d_grid[[ray]], t_min, t_max
        )
        assert alone["triangle"][0] == 0 and np.isclose(alone["t"][0], t[ray], rtol=2e-6)
    rows = np.flatnonzero(same & hit)
    assert np.allclose(uv[rows, 0], expected["u"][rows], atol=1e-5)
    assert np.allclose(uv[rows, 1], expected["v"][rows], atol=1e-5)


@pytest.mark.parametrize("levels", [1, 2])
@pytest.mark.parametrize(
    "name", ["torus_knot.ply", pytest.param("bunny.ply", marks=pytest.mark.slow)]
)
def test_first_hits_match_brute_force(engine, name, levels):
    mesh = load_model(name)
    grid = build_triangle_grid(engine, mesh, levels=levels)
    origins, directions = random_rays(mesh, 600 if name == "bunny.ply" else 1500, seed=1)
    assert_first_hits_match(grid, origins, directions)


@pytest.mark.parametrize("levels", [1, 2])
def test_any_hit_matches_brute_force(engine, levels):
    mesh = load_model("torus_knot.ply")
    grid = build_triangle_grid(engine, mesh, levels=levels, density=2.0)
    origins, directions = random_rays(mesh, 1500, seed=2)
    expected = reference_trace(
        grid.corners,
        grid.placement.grid_points(origins),
        grid.placement.grid_directions(directions),
    )
    hit = grid.any_hit(origins, directions)
    assert hit.dtype == bool and np.array_equal(hit, expected["triangle"] >= 0)
    # with a range that stops short of every first hit, nothing is hit
    short = grid.any_hit(origins, directions, t_max=float(expected["t"].min()) * 0.999)
    assert not short.any()


def test_t_range_picks_the_surfaces(engine):
    """A ray along z through two nested boxes hits their faces at known t; t_min and t_max
    select which (hits at t_min and t_max themselves count)."""
    outer = box([0, 0, 0], [8, 8, 8])
    inner = box([2, 2, 2], [6, 6, 6])
    vertices = np.concatenate([outer[0], inner[0]])
    faces = np.concatenate([outer[1], inner[1] + 8])
    grid = build_triangle_grid(engine, load_mesh((vertices, faces)), 8)
    origin, direction = np.array([[3.3, 4.1, -2.0]]), np.array([[0.0, 0.0, 1.0]])
    for t_min, t_max, expected in [
        (0, np.inf, 2.0),
        (2.5, np.inf, 4.0),
        (4.0, np.inf, 4.0),
        (4.5, 9.0, 8.0),
        (8.5, np.inf, 10.0),
        (0, 1.5, np.inf),
        (10.5, np.inf, np.inf),
    ]:
        t, triangle, _ = grid.intersect(origin, direction, t_min=t_min, t_max=t_max)
        assert t[0] == expected and (triangle[0] >= 0) == np.isfinite(expected)
    # the same along -z, scaled: t is in the units of the direction given
    t, _, _ = grid.intersect([[3.3, 4.1, 20.0]], [[0.0, 0.0, -4.0]])
    assert t[0] == 3.0


def closed_lattice_mesh(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The surface of the cube [1, n - 1]^3 as a lattice of unit squares, each cut into two
    triangles along alternating diagonals: every vertex on a cell corner of the n^3 grid on
    [0, n]^3, every edge on cell faces."""
    side = n - 2
    vertices: list[tuple[int, int, int]] = []
    index: dict[tuple[int, int, int], int] = {}

    def vertex(p: tuple[int, int, int]) -> int:
        if p not in index:
            index[p] = len(vertices)
            vertices.append(p)
        return index[p]

    faces = []
    for axis in range(3):
        u, v = (axis + 1) % 3, (axis + 2) % 3
        for level in (1, n - 1):
            for a in range(1, 1 + side):
                for b in range(1, 1 + side):
                    corners = []
                    for da, db in ((0, 0), (1, 0), (1, 1), (0, 1)):
                        p = [0, 0, 0]
                        p[axis], p[u], p[v] = level, a + da, b + db
                        corners.append(vertex((p[0], p[1], p[2])))
                    q0, q1, q2, q3 = corners
                    if (a + b) % 2:
                        faces += [[q0, q1, q2], [q0, q2, q3]]
                    else:
                        faces += [[q0, q1, q3], [q1, q2, q3]]
    return np.array(vertices, np.float64), np.array(faces, np.int64)


@pytest.mark.parametrize("levels", [1, 2])
def test_rays_through_shared_edges_and_vertices_never_slip_through(engine, levels):
    """Watertight: from points inside a closed mesh, rays aimed exactly at its vertices and
    at points of its edges (on cell corners and faces, where cells meet) all hit it, at
    t = 1 where the direction ends on the surface."""
    n = 8
    vertices, faces = closed_lattice_mesh(n)
    mesh = load_mesh((vertices, faces))
    grid = build_triangle_grid(engine, mesh, n, bounds=[[0, 0, 0], [n, n, n]], levels=levels)
    edges = np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]])
    targets = np.concatenate(
        [
            vertices,
            (vertices[edges[:, 0]] + vertices[edges[:, 1]]) / 2,  # edge midpoints
            (3 * vertices[edges[:, 0]] + vertices[edges[:, 1]]) / 4,
        ]
    )
    for inside in ([4.0, 4.0, 4.0], [2.5, 3.25, 5.75], [1.5, 1.5, 6.5]):
        origins = np.broadcast_to(inside, targets.shape)
        t, triangle, _ = grid.intersect(origins, targets - origins)
        assert (triangle >= 0).all(), f"{(triangle < 0).sum()} rays slipped through"
        assert np.allclose(t, 1.0, rtol=1e-6)
        assert_first_hits_match(grid, origins, targets - origins)
    # axis-aligned rays exactly along cell edges and faces, through vertices and edges
    lines = np.array(
        [(x, y) for x in np.arange(1.0, n - 0.5, 0.5) for y in np.arange(1.0, n - 0.5, 0.5)]
    )
    origins = np.column_stack([lines, np.full(len(lines), 4.0)])
    for direction in ([0, 0, 1.0], [0, 0, -1.0]):
        t, triangle, _ = grid.intersect(origins, np.broadcast_to(direction, origins.shape))
        assert (triangle >= 0).all() and np.allclose(t, 3.0)


def test_sphere_rays_from_its_centre_all_hit(engine):
    """A closed icosphere seen from inside: every ray towards a vertex, an edge midpoint or a
    random direction hits it (none slips through an edge or a vertex)."""
    vertices, faces = sphere([3.1, 2.7, 3.3], 2.5, subdivisions=3)
    grid = build_triangle_grid(engine, load_mesh((vertices, faces)), density=4)
    centre = np.array([3.1, 2.7, 3.3])
    edges = np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]]])
    targets = np.concatenate([vertices, (vertices[edges[:, 0]] + vertices[edges[:, 1]]) / 2])
    rng = np.random.default_rng(3)
    directions = np.concatenate([targets - centre, rng.normal(size=(2000, 3))])
    origins = np.broadcast_to(centre, directions.shape)
    _, triangle, _ = grid.intersect(origins, directions)
    assert (triangle >= 0).all()
    assert_first_hits_match(grid, origins, directions)


def test_rays_that_miss_or_start_past_the_grid(engine):
    grid = build_triangle_grid(engine, load_model("torus_knot.ply"))
    low, high = load_model("torus_knot.ply").bounds
    outside = high + 10
    cases = np.array([outside, outside, low - 5, (low + high) / 2])
    directions = np.array([[1.0, 0, 0], [0, 0, 0], -(high - low), [0, 0, 0]])
    t, triangle, uv = grid.intersect(cases, directions)
    assert (triangle == -1).all() and (t == np.inf).all() and (uv == 0).all()
    assert not grid.any_hit(cases, directions).any()
    assert grid.intersect(np.zeros((0, 3)), np.zeros((0, 3)))[0].shape == (0,)


def test_rays_past_the_loop_budget_are_finished_on_the_host(engine):
    """70,000 triangles in one cell: a ray through it tests them all, more than llvmpipe's
    loop budget lets an invocation make (lavapipe: the host finishes it); either way the
    result is brute force's."""
    rng = np.random.default_rng(4)
    centres = rng.random((70_000, 3)) * 8
    vertices = (centres[:, None, :] + rng.normal(size=(70_000, 3, 3)) * 0.01).reshape(-1, 3)
    faces = np.arange(len(vertices)).reshape(-1, 3)
    grid = build_triangle_grid(engine, load_mesh((vertices, faces)), 1)
    origins = np.array([[-1.0, 4.0, 4.0], [4.0, -1.0, 4.0]])
    directions = np.array([[1.0, 0.01, 0.02], [0.0, 1.0, 0.0]])
    assert_first_hits_match(grid, origins, directions)


# -- boxes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("levels", [1, 2])
def test_triangles_in_random_boxes_match_brute_force(engine, levels):
    mesh = load_model("torus_knot.ply")
    grid = build_triangle_grid(engine, mesh, levels=levels)
    low, high = mesh.bounds
    rng = np.random.default_rng(5)
    for _ in range(12):
        corners = low + rng.random((2, 3)) * (high - low) * 1.2 - (high - low) * 0.1
        lo, hi = corners.min(axis=0), corners.max(axis=0)
        found = grid.triangles_in_box(lo, hi)
        fixed_lo, fixed_hi = grid.fixed_box(lo, hi)
        assert np.array_equal(found, reference_box(grid.corners, fixed_lo, fixed_hi))


def test_boxes_that_touch_triangles_at_faces_and_corners(engine):
    """On the lattice mesh: a box whose face lies in a face of the mesh touches the
    triangles there (closed boxes); one a hair off does not; a box around a vertex touches
    the triangles around it; a box outside the grid finds nothing."""
    n = 8
    vertices, faces = closed_lattice_mesh(n)
    grid = build_triangle_grid(engine, load_mesh((vertices, faces)), n, bounds=[[0, 0, 0], [n] * 3])
    top = np.flatnonzero((vertices[faces][:, :, 2] == n - 1).all(axis=1))
    found = grid.triangles_in_box([2.5, 2.5, n - 1], [3.5, 3.5, n])
    assert set(top) >= set(found) and len(found) >= 2
    assert np.array_equal(found, grid.triangles_in_box([2.5, 2.5, n - 1], [3.5, 3.5, n - 1]))
    assert len(grid.triangles_in_box([2.5, 2.5, n - 0.99], [3.5, 3.5, n])) == 0
    around = grid.triangles_in_box([3, 3, n - 1], [3, 3, n - 1])  # a point: the vertex
    assert np.array_equal(
        around, np.flatnonzero((vertices[faces] == [3, 3, n - 1]).all(axis=2).any(axis=1))
    )
    assert len(grid.triangles_in_box([20, 20, 20], [30, 30, 30])) == 0
    for lo, hi in [([0, 0, 0], [1, 1, 1]), ([0.5, 0.5, 0.5], [7.5, 7.5, 7.5])]:
        fixed = grid.fixed_box(lo, hi)
        assert np.array_equal(grid.triangles_in_box(lo, hi), reference_box(grid.corners, *fixed))


def test_bad_query_input_is_a_clear_error(gpu):
    grid = voxelizer.triangle_grid(load_model("gear.ply"))
    with pytest.raises(ValueError, match="finite"):
        grid.intersect([[0, 0, np.nan]], [[1, 0, 0]])
    with pytest.raises(ValueError, match=r"\(R, 3\)"):
        grid.intersect(np.zeros((4, 2)), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="t_min <= t_max"):
        grid.intersect([0, 0, 0], [1, 0, 0], t_min=2, t_max=1)
    with pytest.raises(ValueError, match="must not exceed"):
        grid.triangles_in_box([1, 1, 1], [0, 0, 0])
