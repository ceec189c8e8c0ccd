"""Near ties decided exactly for the float64 grid coordinates (issue 18): CAD-style meshes
whose faces lie on voxel-centre planes or 1e-6 / 1e-7 voxel off them, vertices on column
centres, diagonals through centres, near 0 and near the top of grids up to 8192. The GPU
(every variant, both sorts, whole and in slabs and batches, dense and SVO, every solid fill
mode) and the CPU reference equal an exact rational evaluation (tests/exact_rational.py)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from voxelizer import VARIANTS
from voxelizer.placement import FINE_BITS, FIXED_BITS, to_fine
from voxelizer.reference import solid_columns, union_columns, vote_columns, voxelize_reference

from ..cad_shapes import OFFSETS, cases, tray
from ..exact_rational import exact_solid
from ..helpers import assert_same_voxels
from ..shapes import box, box_expected, combine

CASES = {case.name: case for case in cases()}
SHADERS = Path(__file__).resolve().parents[2] / "shaders"


def placed(case) -> dict:
    """Voxel size 1 on [0, shape]: the grid coordinates are the vertices as written."""
    return {"voxel_size": 1.0, "bounds": [[0.0, 0.0, 0.0], list(case.shape)]}


@pytest.mark.parametrize("e", OFFSETS)
def test_exact_evaluation_matches_closed_form_boxes(e):
    """The oracle itself, against the box's closed form (exact float64 comparisons)."""
    lo, hi = (0.5 + e, 1.5 - e, 2.5 + e), (6.5 - e, 5.5 + e, 7.5 - e)
    assert_same_voxels(exact_solid(*box(lo, hi), (8, 8, 8)), box_expected(lo, hi, 8))


@pytest.mark.parametrize("name", list(CASES))
def test_gpu_and_reference_equal_exact_evaluation(gpu, name):
    case = CASES[name]
    expected = exact_solid(case.vertices, case.faces, case.shape)
    assert expected.any() and not expected.all()
    mesh = (case.vertices, case.faces)
    reference = voxelize_reference_of(case)
    assert_same_voxels(reference, expected)
    for variant in VARIANTS:
        got = gpu.voxelize_dense(mesh, variant=variant, **placed(case)).to_numpy()
        assert_same_voxels(got, expected)


def voxelize_reference_of(case) -> np.ndarray:
    from voxelizer.mesh import Mesh

    mesh = Mesh(case.vertices, case.faces)
    return voxelize_reference(mesh, **placed(case)).to_numpy()


@pytest.fixture(scope="module")
def large_tray() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A tray 1e-7 voxel off centre planes on a 256^3 grid, with its exact voxels."""
    e = 1e-7
    vertices, faces = tray(
        (0.5 + e, 1.5 - e, 2.5 + e),
        (250.5 - e, 249.5 + e, 200.5 - e),
        (20.5 + e, 30.5 - e, 50.5 + e),
        (230.5 - e, 200.5),
    )
    return vertices, faces, exact_solid(vertices, faces, (256, 256, 256))


@pytest.mark.parametrize("variant", ["naive", "combined"])
def test_bitonic_sort_slabs_and_svo(gpu, variant, large_tray):
    """The same decisions whatever the plan: the bitonic sort, slabs of rows, the SVO."""
    vertices, faces, expected = large_tray
    where = {"voxel_size": 1.0, "bounds": [[0.0, 0.0, 0.0], [256.0, 256.0, 256.0]]}
    mesh = (vertices, faces)
    whole = gpu.voxelize_dense(mesh, variant=variant, sort="bitonic", **where)
    assert_same_voxels(whole.to_numpy(), expected)
    small = gpu.voxelize_dense(mesh, variant=variant, max_memory="4MiB", **where)
    assert small.stats.counts["slabs"] > 1
    assert_same_voxels(small.to_numpy(), expected)
    svo = gpu.voxelize(mesh, variant=variant, max_memory="4MiB", **where)
    assert_same_voxels(np.asarray(svo), expected)


@pytest.mark.parametrize("e", [1e-7, -1e-7])
def test_vote_and_union_inherit_the_exact_crossings(gpu, e):
    """Two CAD parts, one on top of the other, their faces 1e-7 voxel off centre planes:
    vote (crossings along x, y and z, mirrored exactly) and union (each part's parity)."""
    first = tray(
        (0.5, 0.5, 0.5), (13.5 + e, 12.5 - e, 6.5 + e), (2.5 - e, 2.5 + e, 3.5 - e), (9.5, 8.5)
    )
    second = box((3.5 + e, 3.5 - e, 5.5 + e), (9.5 - e, 7.5, 10.5 - e))  # overlaps the pocket
    vertices, faces = combine(first, second)
    shape = (16, 16, 12)
    bounds = {"voxel_size": 1.0, "bounds": [[0.0, 0.0, 0.0], list(shape)]}
    fine = to_fine(vertices)
    expected_vote = vote_columns(fine, faces, shape)
    expected_union = union_columns(fine, faces, shape)
    # the reference's exact decisions, checked against the oracle along z
    assert_same_voxels(solid_columns(fine, faces, shape), exact_solid(vertices, faces, shape))
    assert_same_voxels(expected_union, exact_solid(*first, shape) | exact_solid(*second, shape))
    for variant in ("naive", "combined"):
        vote = gpu.voxelize_dense((vertices, faces), variant=variant, fill_mode="vote", **bounds)
        union = gpu.voxelize_dense((vertices, faces), variant=variant, fill_mode="union", **bounds)
        assert_same_voxels(vote.to_numpy(), expected_vote)
        assert_same_voxels(union.to_numpy(), expected_union)


def test_steep_slivers_and_vertical_walls_near_ties(gpu):
    """Triangles whose projection has no area in float32 but some in float64 (walls tilted
    by 1e-7 voxel), and steep walls: the fixed-point fast path cannot call them."""
    rng = np.random.default_rng(18)
    n = 32
    lo = np.array([4.5, 4.5, 4.5]) + rng.choice([0.0, 1e-7, -1e-7], 3)
    hi = np.array([20.5, 21.5, 22.5]) + rng.choice([0.0, 1e-7, -1e-7], 3)
    vertices, faces = box(lo, hi)
    vertices = vertices.copy()
    vertices[vertices[:, 2] > 10, 0] += 1e-7  # the walls lean by 1e-7 voxel
    vertices[vertices[:, 2] > 10, 1] -= 3e-7
    expected = exact_solid(vertices, faces, (n, n, n))
    bounds = {"voxel_size": 1.0, "bounds": [[0.0, 0.0, 0.0], [n, n, n]]}
    for variant in VARIANTS:
        got = gpu.voxelize_dense((vertices, faces), variant=variant, **bounds).to_numpy()
        assert_same_voxels(got, expected)


def test_random_near_ties_at_full_scale():
    """The reference's float64 estimates and their error bounds near the top of an 8192 grid:
    random triangles with corners on, or a few fine steps off, column centres and voxel-centre
    heights, against the exact evaluation."""
    rng = np.random.default_rng(5)
    shape = (8, 8, 8192)
    vertices = []
    for _ in range(120):
        corner = np.array(
            [rng.integers(0, 8) + 0.5, rng.integers(0, 8) + 0.5, 8190.5 - rng.integers(0, 4)]
        )
        triangle = corner + rng.integers(-3, 4, (3, 3)) * np.array([1.0, 1.0, 0.5])
        triangle += rng.choice([0.0, 2.0**-40, -(2.0**-40), 1e-9], (3, 3))
        vertices.append(np.clip(triangle, 0, shape))
    vertices = np.concatenate(vertices)
    faces = np.arange(len(vertices)).reshape(-1, 3)
    assert_same_voxels(solid_columns(vertices, faces, shape), exact_solid(vertices, faces, shape))


def test_fine_bits_declared_once():
    """shaders/fine.glsl's lattice is placement.FINE_BITS: FIXED_BITS + 33 on every lattice
    (FIXED_BITS 16 up to 8192 a side, 13 above: placement.lattice_shift)."""
    text = (SHADERS / "fine.glsl").read_text()
    found = re.search(r"#define FINE_BITS \(FIXED_BITS \+ (\d+)\)", text)
    assert found is not None and FIXED_BITS + int(found.group(1)) == FINE_BITS


@pytest.mark.parametrize("variant", ["naive", "branchless"])
def test_a_tile_full_of_near_ties(gpu, variant):
    """40,001 copies of a triangle crossing 1e-9 voxel below a centre: every pair of the
    tile is a near tie (two fill rounds), and none is lost to llvmpipe's loop guard."""
    copies, n = 40_001, 8
    one = np.array([[0.125, 0.125, 0.0], [7.875, 0.125, 0.0], [0.125, 7.875, 0.0]])
    vertices = np.tile(one, (copies, 1))
    vertices[:, 2] = 2.5 - 1e-9  # float32 cannot hold it: the fast path cannot decide
    faces = np.arange(3 * copies).reshape(-1, 3)
    expected = exact_solid(vertices[:3], faces[:1], (n, n, n))  # an odd count: one copy's
    assert expected[0, 0, 2] and not expected[0, 0, 1]
    got = gpu.voxelize_dense(
        (vertices, faces), variant=variant, voxel_size=1.0, bounds=[[0, 0, 0], [n, n, n]]
    )
    assert_same_voxels(got.to_numpy(), expected)


def test_the_one_remaining_rounding():
    """float64 grid coordinates are kept exactly from 8 up, and moved at most 2**-50 below."""
    from fractions import Fraction

    rng = np.random.default_rng(49)
    g = np.concatenate([rng.uniform(0, 8, 2000), rng.uniform(8, 8192, 2000), [0.1, 7.9, 8192.0]])
    fine = to_fine(g)
    for value, f in zip(g.tolist(), fine.tolist()):
        error = abs(Fraction(f, 1 << FINE_BITS) - Fraction(value))
        assert error == 0 if value >= 8 else error <= Fraction(1, 1 << 50)


def test_repeated_calls_keep_each_meshs_fine_vertices(gpu):
    """Two trays whose float32 vertices are equal but whose fine coordinates lie 1e-9 voxel
    on either side of centre planes: only the fine vertices (read by the fill's near ties)
    tell them apart. Alternating them on one Voxelizer, each Mesh again on its own grid
    (placed vertices reused, the fine buffer left as written) or after the other one (the
    buffer rewritten), every call equals the exact evaluation of its own mesh."""
    from voxelizer.io import load_mesh

    shape = (32, 32, 24)
    meshes, expected = [], []
    for e in (1e-9, -1e-9):
        vertices, faces = tray(
            (0.5 + e, 1.5 - e, 2.5 + e), (30.5 - e, 29.5 + e, 20.5 - e),
            (5.5 + e, 6.5 - e, 8.5 + e), (25.5 - e, 20.5 + e),
        )  # fmt: skip
        meshes.append(load_mesh((vertices, faces)))
        expected.append(exact_solid(vertices, faces, shape))
    assert np.array_equal(
        meshes[0].vertices.astype(np.float32), meshes[1].vertices.astype(np.float32)
    )
    assert not np.array_equal(expected[0], expected[1])
    where = {"voxel_size": 1.0, "bounds": [[0.0, 0.0, 0.0], list(shape)]}
    for variant in ("branchless", "combined"):
        for index in (0, 0, 1, 1, 0):
            got = gpu.voxelize_dense(meshes[index], variant=variant, **where).to_numpy()
            assert_same_voxels(got, expected[index])
