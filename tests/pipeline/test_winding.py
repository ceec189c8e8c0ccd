"""fill_mode="winding": solid where the generalized winding number exceeds 1/2. The CPU
reference (voxelizer/reference/winding.py) against the definition (the sum of the triangles'
solid angles); the GPU against the reference on open shapes, with centres and columns exactly
on faces and boundary edges; closed meshes equal to parity bit for bit; analytic open shapes;
slabs, budgets, the SVO and every variant."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import trimesh

import voxelizer
from voxelizer import VARIANTS
from voxelizer.gpu.kernels import Kernel
from voxelizer.mesh import Mesh
from voxelizer.pipeline import kernels, winding
from voxelizer.reference import solid_columns
from voxelizer.reference.winding import (
    ONE,
    boundary_edges,
    curtain_winding,
    direct_winding_numbers,
    surface_corners,
    voxelize_winding_reference,
    winding_columns,
    winding_numbers,
)

from ..helpers import assert_same_voxels, load_model, quick_diagonal, run_cli
from ..shapes import box, box_expected, combine, inverted, stacked_tetrahedra

N = 32
CUBE = [[0, 0, 0], [N, N, N]]  # bounds that make world space grid space (h = 1)
CLOSED_MODELS = ("bunny.ply", "dragon.ply", "armadillo.ply", "torus.stl", "featuretype.stl")
OPEN_MODELS = ("suzanne.ply", "bunny_scan.ply")


def _winding(gpu, shape, n=N, **options) -> np.ndarray:
    """The winding voxels of a grid-space shape, dense and from the SVO (which must agree)."""
    vertices, faces = shape
    bounds = [[0, 0, 0], list(np.broadcast_to(n, 3))]
    dense = gpu.voxelize_dense(
        Mesh(vertices, faces), n, fill_mode="winding", bounds=bounds, **options
    )
    svo = gpu.voxelize(Mesh(vertices, faces), n, fill_mode="winding", bounds=bounds, **options)
    assert_same_voxels(svo.to_numpy(), dense.to_numpy())
    assert dense.stats.fill_mode == "winding"
    return dense.to_numpy()


def _reference(shape, n=N) -> np.ndarray:
    vertices, faces = shape
    return winding_columns(vertices.astype(np.float32), faces, (n, n, n))


def _without(shape, drop) -> tuple[np.ndarray, np.ndarray]:
    """The shape with the faces where `drop` (of the face centroids) is true removed."""
    vertices, faces = shape
    centroids = vertices[faces].mean(axis=1)
    return vertices, faces[~drop(centroids)]


def _uv_sphere(centre, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """A UV sphere (rings of equal z), outward: removing its top rows leaves a planar hole."""
    ball = trimesh.creation.uv_sphere(radius=radius, count=[16, 24])
    return np.asarray(ball.vertices) + centre, np.asarray(ball.faces, np.int64)


OPEN_SPHERE = _without(_uv_sphere([16.2, 15.9, 16.1], 12.3), lambda c: c[:, 2] > 16.1 + 8)
OPEN_CUBE = _without(box([4, 5, 6], [27, 26, 25]), lambda c: c[:, 2] > 24.9)  # no top
OPEN_CUBE_ON_CENTRES = _without(box([4.5, 5.5, 6.5], [26.5, 25.5, 24.5]), lambda c: c[:, 0] < 4.6)


def _tilted_open_icosphere() -> tuple[np.ndarray, np.ndarray]:
    """General boundary edges (no axis-aligned symmetry) whose winding numbers need many
    evaluation rounds."""
    mesh = trimesh.creation.icosphere(subdivisions=3)
    rotation = trimesh.transformations.random_rotation_matrix(np.random.default_rng(7).random(3))
    vertices = trimesh.transform_points(mesh.vertices, rotation) * 13 + [16.3, 15.7, 16.1]
    keep = mesh.triangles_center[:, 2] + 0.3 * mesh.triangles_center[:, 0] < 0.55
    return vertices, np.asarray(mesh.faces)[keep]


TILTED = _tilted_open_icosphere()


# --- the reference against the definition ---------------------------------------------------


@pytest.mark.parametrize(
    "shape",
    [pytest.param(OPEN_SPHERE, marks=pytest.mark.slow), OPEN_CUBE],
    ids=["sphere", "cube"],
)
def test_reference_is_the_solid_angle_sum(shape):
    """s - c equals the sum of the triangles' solid angles at every voxel centre in the box
    that is not on the surface (outside the box the rule says empty: |w| < 1/2 there)."""
    vertices, faces = shape
    g = vertices.astype(np.float32)
    w = winding_numbers(g, faces, (N, N, N))
    corners = surface_corners(g, faces, (N, N, N))
    centres = (np.argwhere(np.ones((N, N, N), bool)) + 0.5) * ONE
    direct = direct_winding_numbers(corners, centres).reshape(N, N, N)
    lo, hi = corners.min(axis=(0, 1)) / ONE, corners.max(axis=(0, 1)) / ONE
    x, y, z = (np.arange(N) + 0.5 for _ in range(3))
    in_box = (
        ((lo[0] <= x) & (x < hi[0]))[:, None, None]
        & ((lo[1] <= y) & (y < hi[1]))[None, :, None]
        & ((lo[2] < z) & (z <= hi[2]))[None, None, :]
    )
    assert np.abs(w - direct)[in_box].max() < 1e-9
    assert np.abs(direct[~in_box]).max() < 0.5
    assert np.count_nonzero(np.abs(w[in_box] - 0.5) < 0.25) > 100  # fractional values seen


def test_reference_of_closed_meshes_is_parity():
    vertices, faces = combine(box([2, 3, 4], [20, 21, 22]), box([9, 9, 9], [29, 28, 30]))
    g = vertices.astype(np.float32)
    w = winding_numbers(g, faces, (N, N, N))
    assert np.array_equal(w, np.round(w))  # no boundary: integers
    assert_same_voxels(
        w > 0.5, box_expected([2, 3, 4], [20, 21, 22], N) | box_expected([9, 9, 9], [29, 28, 30], N)
    )


# --- the GPU against the reference ------------------------------------------------------------


@pytest.mark.parametrize(
    "shape",
    [OPEN_SPHERE, OPEN_CUBE, OPEN_CUBE_ON_CENTRES],
    ids=["sphere", "cube", "cube-on-centres"],
)
def test_gpu_equals_the_reference_on_open_shapes(gpu, shape):
    got = _winding(gpu, shape)
    assert_same_voxels(got, _reference(shape))


def test_gpu_equals_the_reference_on_a_tilted_open_mesh(gpu):
    """General boundary edges (no axis-aligned symmetry), many evaluation rounds."""
    got = _winding(gpu, TILTED)
    assert_same_voxels(got, _reference(TILTED))
    w = winding_numbers(TILTED[0].astype(np.float32), TILTED[1], (N, N, N))
    assert np.count_nonzero((w > 0.5) & (w < 0.9)) > 50  # decided by the fractional part


def test_boundary_edges_in_several_dispatches(gpu, monkeypatch):
    """Edges summed over several dispatches (the whole-column bound is then skipped; the
    points of later rounds accumulate over the chunks): the same voxels."""
    whole = gpu.voxelize_dense(Mesh(*TILTED), N, fill_mode="winding", bounds=CUBE)
    monkeypatch.setattr(winding, "EDGE_CHUNK", 5)
    got = gpu.voxelize_dense(Mesh(*TILTED), N, fill_mode="winding", bounds=CUBE)
    assert got.stats.counts["winding_boundary_edges"] > 4 * 5
    assert got.stats.counts["winding_rounds"] >= 4  # every stage of winding_evaluate.comp
    assert_same_voxels(got.to_numpy(), _reference(TILTED))
    # without the bound every column in the box evaluates c at its two ends
    evaluated, bounded = (r.stats.counts["winding_evaluations"] for r in (got, whole))
    assert 0 < bounded < evaluated <= got.stats.counts["winding_points"]


@pytest.mark.parametrize("steps", [1, 3])
def test_halves_left_for_later_dispatches(gpu, monkeypatch, steps):
    """winding_bisect with a budget of `steps` evaluations per run and dispatch: the halves
    it leaves go on in the next dispatch, with the same voxels and the same evaluations."""
    whole = gpu.voxelize_dense(Mesh(*TILTED), N, fill_mode="winding", bounds=CUBE)
    monkeypatch.setattr(winding, "BISECT_STEPS", steps)
    got = gpu.voxelize_dense(Mesh(*TILTED), N, fill_mode="winding", bounds=CUBE)
    counts, before = got.stats.counts, whole.stats.counts
    assert counts["winding_rounds"] > before["winding_rounds"] >= 3
    assert counts["winding_evaluations"] == before["winding_evaluations"]
    assert_same_voxels(got.to_numpy(), _reference(TILTED))


def test_halvings_without_the_column_cache(gpu, monkeypatch):
    """winding_bisect beyond the edges whose x-y parts its lanes keep (each point sums every
    edge's whole term): the same voxels and evaluations as with the cache."""
    cached = gpu.voxelize_dense(Mesh(*TILTED), N, fill_mode="winding", bounds=CUBE)
    bisect = kernels.WINDING_BISECT
    uncached = Kernel(
        bisect.source, bisect.bindings, bisect.push, {**bisect.defines, "CACHE_EDGES": 0}
    )
    monkeypatch.setattr(kernels, "WINDING_BISECT", uncached)
    with voxelizer.Voxelizer() as fresh:  # its own winding pipelines, built with the patch
        got = fresh.voxelize_dense(Mesh(*TILTED), N, fill_mode="winding", bounds=CUBE)
    assert got.stats.counts["winding_rounds"] >= 3  # the halvings ran
    assert got.stats.counts["winding_evaluations"] == cached.stats.counts["winding_evaluations"]
    assert_same_voxels(got.to_numpy(), _reference(TILTED))
    assert_same_voxels(got.to_numpy(), cached.to_numpy())


@pytest.mark.parametrize("shape", [TILTED, OPEN_CUBE_ON_CENTRES], ids=["tilted", "on-centres"])
def test_the_column_bound_holds(shape):
    """winding.glsl's bound on a whole column: each edge's strip, seen from any height of the
    column, has |omega| <= 2 phi (phi: the angle the edge subtends in x and y, pi on the
    edge's line within its span) and the sign of m det; checked against the reference's
    solid angles at every centre of every column, with the bound tight somewhere."""
    vertices, faces = shape
    corners = surface_corners(vertices.astype(np.float32), faces, (N, N, N))
    edges = boundary_edges(corners)
    centres = np.argwhere(np.ones((N, N, N), bool)) * ONE + ONE // 2
    ratios = []
    for edge in edges:
        omega = curtain_winding(centres, edge[None]) * 4 * np.pi  # m omega
        a, b = edge[3:5] - centres[:, :2], edge[0:2] - centres[:, :2]
        det = a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]
        dot = (a * b).sum(axis=1)
        phi = np.where(det == 0, np.where(dot <= 0, np.pi, 0.0), np.arctan2(np.abs(det), dot))
        phi *= abs(edge[6])
        assert np.all(np.abs(omega) <= 2 * phi + 1e-12)
        assert np.all(omega * det * np.sign(edge[6]) >= 0)
        ratios.append((np.abs(omega) / np.maximum(2 * phi, 1e-300)).max())
    assert max(ratios) > 0.9  # the factor 2 is needed


def _subtended(x0: np.ndarray, x1: np.ndarray, points: np.ndarray) -> tuple[np.ndarray, ...]:
    """phi (pi on the edge), det and the distances to the ends, seen from points in x, y."""
    a, b = x1[None, :] - points, x0[None, :] - points
    det = a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]
    dot = (a * b).sum(axis=1)
    phi = np.where(det == 0, np.where(dot <= 0, np.pi, 0.0), np.arctan2(np.abs(det), dot))
    return phi, det, np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)


@pytest.mark.parametrize("shape", [TILTED, OPEN_CUBE_ON_CENTRES], ids=["tilted", "on-centres"])
def test_the_tile_bound_holds(shape):
    """winding.glsl's bound for a tile's columns from its centre q: phi(P) <= phi(q) +
    4 radius |x1 - x0| / (r0 r1) where both r_i >= 2 radius, and det's sign is q's where the
    edge's line passes farther than radius from q; at every column of every 4 x 4 tile."""
    vertices, faces = shape
    corners = surface_corners(vertices.astype(np.float32), faces, (N, N, N))
    edges = boundary_edges(corners).astype(np.float64)
    radius = 1.5 * np.sqrt(2) * ONE
    offsets = (np.argwhere(np.ones((4, 4), bool)) - 1.5) * ONE
    tiles = (np.argwhere(np.ones((N // 4, N // 4), bool)) * 4 + 2) * ONE
    checked = 0
    for edge in edges:
        x0, x1 = edge[0:2], edge[3:5]
        span = np.linalg.norm(x1 - x0)
        phi_q, det_q, r1, r0 = _subtended(x0, x1, tiles.astype(np.float64))
        for offset in offsets:
            phi, det, _, _ = _subtended(x0, x1, tiles + offset)
            far = (r0 >= 2 * radius) & (r1 >= 2 * radius)
            bound = phi_q + 4 * radius * span / np.maximum(r0 * r1, 1e-300)
            assert np.all(phi[far] <= bound[far] * (1 + 1e-12))
            one_side = np.abs(det_q) > radius * span
            assert np.all(det[one_side] * det_q[one_side] > 0)
            checked += np.count_nonzero(far & (phi > phi_q))
    assert checked > 500  # the turn term is needed


@pytest.mark.parametrize(
    "name", [OPEN_MODELS[0], pytest.param(OPEN_MODELS[1], marks=pytest.mark.slow)]
)
def test_gpu_equals_the_reference_on_open_models(gpu, name):
    """Real open meshes (suzanne's open eyes, the scan's holes), the placement as the API's."""
    mesh = load_model(name)
    got = gpu.voxelize_dense(mesh, 40, fill_mode="winding")
    assert got.stats.counts["winding_boundary_edges"] > 0
    expected = voxelize_winding_reference(mesh, 40)
    assert_same_voxels(got.to_numpy(), expected.to_numpy())


# --- analytic open shapes ------------------------------------------------------------------


def test_cube_missing_one_face_fills_as_the_closed_cube(gpu):
    """Inside, w = 1 - (the missing face's solid angle) / 4 pi > 1/2; outside |w| < 1/2."""
    got = _winding(gpu, OPEN_CUBE)
    assert_same_voxels(got, box_expected([4, 5, 6], [27, 26, 25], N))
    parity = gpu.voxelize_dense(Mesh(*OPEN_CUBE), N, bounds=CUBE).to_numpy()
    assert not np.array_equal(parity, got)  # parity streaks through the hole


def test_sphere_missing_a_cap_fills_below_the_hole(gpu):
    """The hole is a planar polygon P at height z0: below it w = 1 - Omega(P) / 4 pi > 1/2,
    above it w = Omega(P) / 4 pi < 1/2; so the closed sphere's voxels below z0."""
    closed = _uv_sphere([16.2, 15.9, 16.1], 12.3)
    vertices, faces = OPEN_SPHERE
    used = np.unique(faces)
    rim = vertices[used][vertices[used][:, 2] == vertices[used][:, 2].max()]
    z0 = rim[0, 2]
    assert len(rim) >= 16  # the hole is planar: every rim vertex at the height z0
    solid = gpu.voxelize_dense(Mesh(*closed), N, bounds=CUBE).to_numpy()
    below = np.arange(N) + 0.5 < z0
    got = _winding(gpu, OPEN_SPHERE)
    assert_same_voxels(got, solid & below[None, None, :])
    assert np.count_nonzero(solid & ~below[None, None, :]) > 100


def test_two_overlapping_closed_cubes_give_their_union(gpu):
    a, b = ([2, 3, 4], [18.5, 20, 21.25]), ([10, 11.75, 12], [29, 28, 30.5])
    got = _winding(gpu, combine(box(*a), box(*b)))
    assert_same_voxels(got, box_expected(*a, N) | box_expected(*b, N))


def test_flipped_shells(gpu):
    """An inside-out box is empty (w = -1); an inward box inside a box is a cavity (w = 0);
    an inward box across a box's side cuts it away."""
    outer, inner = ([1, 2, 3], [30, 29, 28]), ([8, 8, 8], [20, 21.5, 22])
    assert not _winding(gpu, inverted(box(*outer))).any()
    got = _winding(gpu, combine(box(*outer), inverted(box(*inner))))
    assert_same_voxels(got, box_expected(*outer, N) & ~box_expected(*inner, N))
    a, b = ([2, 2, 2], [20, 20, 20]), ([12, 4, 5], [30, 16, 17])
    got = _winding(gpu, combine(box(*a), inverted(box(*b))))
    assert_same_voxels(got, box_expected(*a, N) & ~box_expected(*b, N))


def test_soup_with_duplicated_faces(gpu):
    """Every face twice (w = 2 inside: parity would empty it), given as a soup of separate
    corners (edges are matched by position, so the boundary still cancels)."""
    lo, hi = [3, 4, 5], [25, 26.5, 27]
    vertices, faces = box(lo, hi)
    corners = vertices[np.concatenate([faces, faces])].reshape(-1, 3)
    soup = (corners, np.arange(len(corners)).reshape(-1, 3))
    got = _winding(gpu, soup)
    assert_same_voxels(got, box_expected(lo, hi, N))
    assert not gpu.voxelize_dense(Mesh(*soup), N, bounds=CUBE).to_numpy().any()


def test_an_open_duplicated_sheet_is_empty(gpu):
    """A square sheet twice: |w| <= 2 * 1/2 only on the sheet itself, below 1/2 elsewhere
    away from it; the reference and the GPU agree on every voxel."""
    vertices = np.array([[4, 4, 16.25], [28, 4, 16.25], [28, 28, 16.25], [4, 28, 16.25]], float)
    faces = np.array([[0, 1, 2], [0, 2, 3], [0, 1, 2], [0, 2, 3]])
    got = _winding(gpu, (vertices, faces))
    assert_same_voxels(got, _reference((vertices, faces)))


# --- closed meshes: parity bit for bit -----------------------------------------------------


@pytest.mark.parametrize("name", CLOSED_MODELS)
def test_closed_models_equal_parity(gpu, name):
    mesh = load_model(name)
    parity = gpu.voxelize_dense(mesh, 64).to_numpy()
    winding = gpu.voxelize_dense(mesh, 64, fill_mode="winding")
    assert_same_voxels(winding.to_numpy(), parity)
    assert winding.stats.counts["winding_boundary_edges"] == 0


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant(gpu, variant):
    mesh = load_model("bunny.ply")
    parity = gpu.voxelize_dense(mesh, 48, variant=variant).to_numpy()
    assert_same_voxels(
        gpu.voxelize_dense(mesh, 48, variant=variant, fill_mode="winding").to_numpy(), parity
    )
    got = _winding(gpu, OPEN_SPHERE, variant=variant)
    assert_same_voxels(got, _reference(OPEN_SPHERE))


# z of stacked_tetrahedra (0.1 to 7.9) -> offset + scale z on an (8, 8, nz) grid
_STACK_Z = {8: (0.0, 1.0), 128: (40.0, 10.0), 8192: (0.0, 1024.0)}


@cache
def _stacked(count: int, nz: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """stacked_tetrahedra(count) over one tile of an (8, 8, nz) grid, stretched along z
    (_STACK_Z), with its CPU parity and winding references (equal: the mesh is closed)."""
    vertices, faces = stacked_tetrahedra(count)
    offset, scale = _STACK_Z[nz]
    vertices[:, 2] = offset + scale * vertices[:, 2]
    vertices = vertices.astype(np.float32)
    shape = (8, 8, nz)
    parity = solid_columns(vertices, faces, shape)
    assert_same_voxels(winding_columns(vertices, faces, shape), parity)
    return vertices, faces, parity


@pytest.mark.parametrize(
    ("count", "nz", "variant"),
    [
        *quick_diagonal([(2_000, 8), (8_000, 8), (8_000, 128), (8_000, 8192)], VARIANTS),
        *(pytest.param(40_000, 8, v, marks=pytest.mark.slow) for v in VARIANTS),
    ],
)
def test_closed_stack_with_many_crossings_per_tile(gpu, count, nz, variant):
    """Thousands of closed flat tetrahedra over one tile: 4 pairs of that tile and 2
    crossings of a covered column per tetrahedron, one fill round up to 8,192 tetrahedra,
    five at 40,000; on deeper columns, segments over several words with the box's first
    voxel in the second (nz 128), and over the 256 words of the deepest grid, thousands of
    marks below a crossing (nz 8192). The signed fill's loop trips per invocation stay within
    llvmpipe's guard at any count (fill.comp; past it the loops of an invocation end
    silently and crossings are lost: whole extra layers, different from run to run). Winding
    equals parity and both references, the same on every run."""
    vertices, faces, expected = _stacked(count, nz)
    shape = (8, 8, nz)
    bounds = [[0, 0, 0], list(shape)]
    mesh = Mesh(vertices, faces)
    parity = gpu.voxelize_dense(mesh, shape, bounds=bounds, variant=variant).to_numpy()
    assert_same_voxels(parity, expected)
    for _ in range(2):
        got = gpu.voxelize_dense(mesh, shape, fill_mode="winding", bounds=bounds, variant=variant)
        assert_same_voxels(got.to_numpy(), expected)
        assert got.stats.counts["winding_boundary_edges"] == 0


def test_slabs_batches_budget_and_svo(gpu):
    """A budget small enough for slabs of rows and batches of triangles (each marking and
    each signed fill in several parts) changes nothing, dense or SVO."""
    ball = trimesh.creation.icosphere(subdivisions=4)
    keep = ball.triangles_center[:, 2] < 0.7
    mesh = Mesh(ball.vertices * [56, 56, 28] + [64.3, 63.8, 32.1], ball.faces[keep])
    shape = (128, 128, 64)
    bounds = [[0, 0, 0], list(shape)]
    whole = gpu.voxelize_dense(mesh, shape, fill_mode="winding", bounds=bounds)
    small = gpu.voxelize_dense(mesh, shape, fill_mode="winding", bounds=bounds, max_memory=2 << 20)
    svo = gpu.voxelize(mesh, shape, fill_mode="winding", bounds=bounds, max_memory=2 << 20)
    assert whole.stats.counts["slabs"] == 1 and small.stats.counts["slabs"] > 1
    assert small.stats.counts["parts"] > 2 * small.stats.counts["slabs"]  # batches
    assert_same_voxels(small.to_numpy(), whole.to_numpy())
    assert_same_voxels(svo.to_numpy(), whole.to_numpy())
    assert whole.count() > 300_000  # over a quarter of the grid


def test_scan_is_filled_where_parity_streaks(gpu):
    """bunny_scan (holes in its base): the winding fill is far closer to the closed bunny
    mapped onto it than parity is (the benchmark reports the exact counts)."""
    scan, bunny = load_model("bunny_scan.ply"), load_model("bunny.ply")
    lo, hi = scan.vertices.min(axis=0), scan.vertices.max(axis=0)
    b_lo, b_hi = bunny.vertices.min(axis=0), bunny.vertices.max(axis=0)
    mapped = Mesh(lo + (bunny.vertices - b_lo) * (hi - lo) / (b_hi - b_lo), bunny.faces)
    truth = gpu.voxelize_dense(mapped, 64, bounds=[lo, hi]).to_numpy()
    parity = gpu.voxelize_dense(scan, 64, bounds=[lo, hi]).to_numpy()
    winding = gpu.voxelize_dense(scan, 64, bounds=[lo, hi], fill_mode="winding").to_numpy()
    assert np.count_nonzero(winding != truth) * 10 < np.count_nonzero(parity != truth)


def test_command_line(tmp_path, capsys):
    """--fill-mode winding on an open mesh: no open-mesh warning, the counts in --stats, and
    the analytic voxels of the open cube in the written file."""
    path = tmp_path / "open_cube.stl"
    trimesh.Trimesh(*OPEN_CUBE, process=False).export(path)
    out_path = tmp_path / "cube.npz"
    code, out, err = run_cli(
        capsys, path, "--grid", N, "--bounds", 0, 0, 0, N, N, N, "--fill-mode", "winding",
        "--stats", "-o", out_path,
    )  # fmt: skip
    assert code == 0, err
    assert "not closed" not in err and "winding_boundary_edges" in out
    expected = box_expected([4, 5, 6], [27, 26, 25], N)
    assert f"{expected.sum():,} solid voxels" in out
    assert_same_voxels(voxelizer.load(out_path).to_numpy(), expected)


def test_the_shader_atan_polynomial_is_within_its_bound():
    """winding.glsl's atan_unit, emulated in float32 numpy with the shader's own constants:
    within 1.6 2^-24 of atan on [0, 1] (the rounding bound of the curtain counts on 2^-20)."""
    source = (Path(__file__).parents[2] / "shaders" / "winding.glsl").read_text()
    body = source[source.index("float atan_unit(float t)") :].split("\n}\n", 1)[0]
    numbers = [np.float32(v) for v in re.findall(r"\d\.\d+(?:e-\d+)?", body)]
    split, quarter = numbers[0], numbers[-1]  # tan(pi / 8), pi / 4
    c3, c2, c1, c0 = (np.float32(v) for v in re.findall(r"\d\.\d+e-\d+", body))
    one = np.float32(1.0)
    t = np.linspace(0, 1, 1_000_001, dtype=np.float32)
    big = t > split
    x = np.where(big, (t - one) / (t + one), t).astype(np.float32)
    z = x * x
    p = ((((c3 * z - c2) * z + c1) * z - c0) * z * x + x).astype(np.float32)
    atan = np.where(big, quarter + p, p).astype(np.float32)
    assert np.abs(atan.astype(np.float64) - np.arctan(t.astype(np.float64))).max() < 1.6 * 2**-24
