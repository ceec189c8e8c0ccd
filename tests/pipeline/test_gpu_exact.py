"""The GPU result equals the CPU reference bit for bit: every model, grid and variant."""

from __future__ import annotations

import numpy as np
import pytest

from voxelizer import SVO, VARIANTS, Voxelizer
from voxelizer.gpu.device import Device
from voxelizer.reference import solid_columns

from ..helpers import assert_same_svo, assert_same_voxels, load_model, random_soup, reference_grid
from ..shapes import stacked_tetrahedra

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


def reference(name: str, n: int) -> np.ndarray:
    """The reference voxels, computed once per model and grid for all variants."""
    return reference_grid(name, n).to_numpy()


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("n", [64, 128])
@pytest.mark.parametrize("name", SHARED + GENERATED)
def test_models_match_reference(gpu, name, n, variant):
    grid = gpu.voxelize_dense(load_model(name), n, variant=variant)
    assert grid.count() > 0
    assert_same_voxels(grid.to_numpy(), reference(name, n))


@pytest.mark.parametrize("variant", ["naive", "combined"])
@pytest.mark.parametrize("name", SHARED + GENERATED)
def test_bitonic_sort_matches_reference(gpu, name, variant):
    """The thesis's sorting network, still available as sort="bitonic"."""
    assert_same_voxels(
        gpu.voxelize_dense(load_model(name), 64, variant=variant, sort="bitonic").to_numpy(),
        reference(name, 64),
    )


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("name", ["bunny.ply", "dragon.ply"])
def test_large_grid_matches_reference(gpu, name, variant):
    assert_same_voxels(
        gpu.voxelize_dense(load_model(name), 256, variant=variant).to_numpy(), reference(name, 256)
    )


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_paths_for_devices_without_subgroup_operations(monkeypatch, variant):
    """The Hillis-Steele scan and the fill's per-lane record loads, which lavapipe (with
    subgroup arithmetic and ballot) never takes: same voxels, same octree as the reference."""
    # Both the scan and the fill take their paths from gpu.kernels.subgroup_defines(device);
    # the fill's GPU shape (a CPU device like lavapipe loads records its own way, cpu_defines).
    monkeypatch.setattr(Device, "has_subgroup", lambda device, feature: False)
    monkeypatch.setattr(Device, "is_cpu", property(lambda device: False))
    with Voxelizer() as plain:
        assert_same_voxels(
            plain.voxelize_dense(load_model("bunny.ply"), 128, variant=variant).to_numpy(),
            reference("bunny.ply", 128),
        )
        svo = plain.voxelize(load_model("dragon.ply"), 64, variant=variant)
        assert_same_svo(svo, SVO.from_dense(reference("dragon.ply", 64), svo.placement))


@pytest.mark.parametrize("n", [8, 36, 100, 132])
@pytest.mark.parametrize("variant", ["naive", "combined"])
def test_grids_that_are_not_powers_of_two(gpu, n, variant):
    grid = gpu.voxelize_dense(load_model("armadillo.ply"), n, variant=variant)
    assert grid.to_numpy().shape == (n, n, n)
    assert_same_voxels(grid.to_numpy(), reference("armadillo.ply", n))


def test_one_voxelizer_serves_many_meshes_and_grids(gpu):
    """Buffers are reused and grown across calls: results must not depend on the call order."""
    for name, n in [
        ("dragon.ply", 128),
        ("suzanne.ply", 64),
        ("dragon.ply", 64),
        ("bunny.ply", 128),
    ]:
        assert_same_voxels(gpu.voxelize_dense(load_model(name), n).to_numpy(), reference(name, n))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_random_soups_with_ties_match_reference(gpu, variant):
    """Open, overlapping and degenerate soups, many vertices on column centres and edges."""
    rng = np.random.default_rng(3)
    for trial in range(40):
        n = int(rng.choice([8, 12, 16]))
        step = (None, 2, 4)[trial % 3]  # vertices anywhere, or on the half/quarter lattice
        count, triangles = int(rng.integers(3, 30)), int(rng.integers(1, 40))
        g, faces = random_soup(rng, n, count, triangles, step)
        if np.all(g[faces].max(axis=(0, 1)) == g[faces].min(axis=(0, 1))):
            continue
        expected = solid_columns(g, faces, n)
        assert_same_voxels(gpu.voxelize_grid(g, faces, n, variant=variant), expected)


@pytest.mark.slow
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
    voxels = gpu.voxelize_grid(vertices, faces, n, variant="branchless")
    assert_same_voxels(voxels, solid_columns(vertices, faces, n))
    assert voxels[512, 512, :].all()  # apexes at z = 0.25 and 1023.75 enclose every centre
    assert not voxels[0, :, :].any() and not voxels[:, 1023, :].any()


@pytest.mark.parametrize("variant", [pytest.param("naive", marks=pytest.mark.slow), "branchless"])
def test_tile_with_more_pairs_than_one_fill_round(gpu, variant):
    """70,000 flat tetrahedra stacked over one tile: 280,000 pairs in three fill rounds (one
    round would loop past llvmpipe's 65,535-iteration guard)."""
    count, n = 70_000, 8
    vertices, faces = stacked_tetrahedra(count)
    vertices = vertices.astype(np.float32)
    voxels = gpu.voxelize_grid(vertices, faces, n, variant=variant)
    assert_same_voxels(voxels, solid_columns(vertices, faces, n))
    assert voxels.any()
