"""The GPU result equals the CPU reference bit for bit: every model, grid and variant."""

from __future__ import annotations

from functools import cache, lru_cache

import numpy as np
import pytest

from voxelizer import VARIANTS
from voxelizer.mesh import load_mesh
from voxelizer.reference import solid_columns, voxelize_reference

from .conftest import PROJECT_MODELS, shared_model

SHARED = [
    "bunny.ply",
    "bunny_scan.ply",
    "dragon.ply",
    "armadillo.ply",
    "featuretype.stl",
    "torus.stl",
    "suzanne.ply",
]
GENERATED = ["torus_knot.ply", "hollow_sphere.ply", "gear.ply"]


def model_path(name: str):
    return PROJECT_MODELS / name if name in GENERATED else shared_model(name)


@cache
def mesh(name: str):
    return load_mesh(model_path(name))


@lru_cache(maxsize=8)
def reference(name: str, n: int) -> np.ndarray:
    return voxelize_reference(mesh(name), n).to_numpy()


def assert_same(gpu_voxels: np.ndarray, expected: np.ndarray) -> None:
    extra = int(np.count_nonzero(gpu_voxels & ~expected))
    missing = int(np.count_nonzero(expected & ~gpu_voxels))
    assert extra == 0 and missing == 0, f"GPU has {extra} extra and {missing} missing voxels"


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("n", [64, 128])
@pytest.mark.parametrize("name", SHARED + GENERATED)
def test_models_match_reference(gpu, name, n, variant):
    grid = gpu.voxelize_dense(mesh(name), n, variant)
    assert grid.count() > 0
    assert_same(grid.to_numpy(), reference(name, n))


@pytest.mark.parametrize("variant", ["naive", "combined"])
@pytest.mark.parametrize("name", SHARED + GENERATED)
def test_bitonic_sort_matches_reference(gpu, name, variant):
    """The thesis's sorting network, still available as sort="bitonic"."""
    assert_same(
        gpu.voxelize_dense(mesh(name), 64, variant, sort="bitonic").to_numpy(), reference(name, 64)
    )


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("name", ["bunny.ply", "dragon.ply"])
def test_large_grid_matches_reference(gpu, name, variant):
    assert_same(gpu.voxelize_dense(mesh(name), 256, variant).to_numpy(), reference(name, 256))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_paths_for_devices_without_subgroup_operations(monkeypatch, variant):
    """The Hillis-Steele scan and the fill's per-lane record loads, which lavapipe (with
    subgroup arithmetic and ballot) never takes: same voxels, same octree as the reference."""
    from voxelizer import passes
    from voxelizer.api import Voxelizer
    from voxelizer.svo import SVO

    monkeypatch.setattr(
        passes, "subgroup_defines", lambda device: {"SUBGROUP_SCAN": 0, "SHARED_RECORDS": 0}
    )
    with Voxelizer() as plain:
        assert_same(
            plain.voxelize_dense(mesh("bunny.ply"), 128, variant).to_numpy(),
            reference("bunny.ply", 128),
        )
        svo = plain.voxelize(mesh("dragon.ply"), 64, variant)
        expected = SVO.from_dense(reference("dragon.ply", 64), svo.placement)
        assert np.array_equal(svo.nodes, expected.nodes)
        assert np.array_equal(svo.bricks, expected.bricks)


@pytest.mark.parametrize("n", [8, 36, 100, 132])
@pytest.mark.parametrize("variant", ["naive", "combined"])
def test_grids_that_are_not_powers_of_two(gpu, n, variant):
    grid = gpu.voxelize_dense(mesh("armadillo.ply"), n, variant)
    assert grid.to_numpy().shape == (n, n, n)
    assert_same(grid.to_numpy(), reference("armadillo.ply", n))


def test_one_voxelizer_serves_many_meshes_and_grids(gpu):
    """Buffers are reused and grown across calls: results must not depend on the call order."""
    for name, n in [
        ("dragon.ply", 128),
        ("suzanne.ply", 64),
        ("dragon.ply", 64),
        ("bunny.ply", 128),
    ]:
        assert_same(gpu.voxelize_dense(mesh(name), n).to_numpy(), reference(name, n))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_random_soups_with_ties_match_reference(gpu, variant):
    """Open, overlapping and degenerate soups, many vertices on column centres and edges."""
    rng = np.random.default_rng(3)
    for trial in range(40):
        n = int(rng.choice([8, 12, 16]))
        step = (None, 2, 4)[trial % 3]  # vertices anywhere, or on the half/quarter lattice
        count = int(rng.integers(3, 30))
        g = (
            rng.uniform(0, n, (count, 3))
            if step is None
            else rng.integers(0, step * n + 1, (count, 3)) / step
        )
        g = g.astype(np.float32)
        faces = rng.integers(0, count, (int(rng.integers(1, 40)), 3))
        if np.all(g[faces].max(axis=(0, 1)) == g[faces].min(axis=(0, 1))):
            continue
        expected = solid_columns(g, faces, n)
        assert_same(gpu.voxelize_grid(g, faces, n, variant), expected)


def test_largest_single_buffer_grid_on_lavapipe(gpu):
    """1024^3 is exactly 128 MiB of bits, lavapipe's largest storage buffer."""
    n = 1024
    vertices = np.array(
        [
            [512.5, 512.5, 0.25],
            [0.5, 512.5, 512.5],
            [512.5, 0.5, 512.5],
            [1023.5, 512.5, 512.5],
            [512.5, 1023.5, 512.5],
            [512.5, 512.5, 1023.75],
        ],
        np.float32,
    )
    faces = np.array(
        [[0, 2, 1], [0, 3, 2], [0, 4, 3], [0, 1, 4], [5, 1, 2], [5, 2, 3], [5, 3, 4], [5, 4, 1]]
    )
    voxels = gpu.voxelize_grid(vertices, faces, n, "branchless")
    assert_same(voxels, solid_columns(vertices, faces, n))
    assert voxels[512, 512, :].all()  # apexes at z = 0.25 and 1023.75 enclose every centre
    assert not voxels[0, :, :].any() and not voxels[:, 1023, :].any()


@pytest.mark.parametrize("variant", ["naive", "branchless"])
def test_tile_with_more_pairs_than_one_fill_round(gpu, variant):
    """70,000 flat tetrahedra stacked over one tile: 280,000 pairs in three fill rounds (one
    round would loop past llvmpipe's 65,535-iteration guard)."""
    count, n = 70_000, 8
    z = 0.1 + np.arange(count) * (7.8 / count)
    base = np.array([[0.2, 0.2, 0.0], [3.8, 0.2, 0.0], [0.2, 3.8, 0.0], [1.0, 1.0, 0.5]])
    vertices = np.tile(base, (count, 1)) * [1, 1, 7.8 / count]
    vertices[:, 2] += np.repeat(z, 4)
    one = np.array([[0, 2, 1], [0, 1, 3], [1, 2, 3], [2, 0, 3]])
    faces = (one[None] + 4 * np.arange(count)[:, None, None]).reshape(-1, 3)
    vertices = vertices.astype(np.float32)
    voxels = gpu.voxelize_grid(vertices, faces, n, variant)
    assert_same(voxels, solid_columns(vertices, faces, n))
    assert voxels.any()
