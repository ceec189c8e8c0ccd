"""The kernels' two shapes (shaders/common.glsl, CPU_DEVICE): lavapipe, a CPU device, takes
the CPU shapes of the fill and the SVO build (batches of 2 pairs, flips in memory, loops kept
as loops), which every other test runs; here it runs the GPU shapes too (register words,
batches of 8 broadcast records, the rows preloaded), by taking the device for a GPU (the
`shaped` fixture, tests/conftest.py). Both give the reference's voxels, octrees and near-tie
decisions bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from voxelizer import SVO, VARIANTS, Voxelizer
from voxelizer.gpu.kernels import cpu_defines
from voxelizer.reference import solid_columns

from ..cad_shapes import cases
from ..exact_rational import exact_solid
from ..helpers import assert_same_svo, assert_same_voxels, load_model, random_soup, reference_grid


def test_a_cpu_device_and_only_it_takes_the_cpu_shapes(gpu: Voxelizer) -> None:
    """lavapipe (llvmpipe) is a CPU device; a GPU (the H100 machine) takes the GPU shapes."""
    device = gpu.device
    assert device.is_cpu == (device.info.kind == "CPU")
    if "llvmpipe" in device.name:
        assert device.is_cpu
    assert cpu_defines(device) == {"CPU_DEVICE": int(device.is_cpu)}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_models_dense_and_svo(shaped: Voxelizer, variant: str) -> None:
    """128^3: 4 words per column (the GPU shape's registers); 64^3 as an octree."""
    bunny = shaped.voxelize_dense(load_model("bunny.ply"), 128, variant=variant)
    assert_same_voxels(bunny.to_numpy(), reference_grid("bunny.ply", 128).to_numpy())
    svo = shaped.voxelize(load_model("dragon.ply"), 64, variant=variant)
    expected = reference_grid("dragon.ply", 64).to_numpy()
    assert_same_svo(svo, SVO.from_dense(expected, svo.placement))


def test_cad_near_ties(shaped: Voxelizer) -> None:
    """Faces on voxel-centre planes and 1e-6 / 1e-7 voxel off them: the fill's near ties."""
    for case in cases(sizes=(8, 64)):
        expected = exact_solid(case.vertices, case.faces, case.shape)
        where = {"voxel_size": 1.0, "bounds": [[0.0, 0.0, 0.0], list(case.shape)]}
        for variant in ("naive", "combined"):
            got = shaped.voxelize_dense((case.vertices, case.faces), variant=variant, **where)
            assert_same_voxels(got.to_numpy(), expected)


def test_random_soups_with_ties(shaped: Voxelizer) -> None:
    """Open, overlapping and degenerate soups, vertices on column centres and edges."""
    rng = np.random.default_rng(13)
    for trial in range(12):
        n = int(rng.choice([8, 12, 16]))
        step = (None, 2, 4)[trial % 3]
        g, faces = random_soup(rng, n, int(rng.integers(3, 30)), int(rng.integers(1, 40)), step)
        if np.all(g[faces].max(axis=(0, 1)) == g[faces].min(axis=(0, 1))):
            continue
        for variant in ("naive", "branchless"):
            got = shaped.voxelize_grid(g, faces, n, variant=variant)
            assert_same_voxels(got, solid_columns(g, faces, n))


def test_a_tile_full_of_near_ties(shaped: Voxelizer) -> None:
    """40,001 pairs in one tile, every one a near tie: two fill rounds, each within
    llvmpipe's loop guard in either shape (its pair batches and its pass over the ties)."""
    copies, n = 40_001, 8
    one = np.array([[0.125, 0.125, 0.0], [7.875, 0.125, 0.0], [0.125, 7.875, 0.0]])
    vertices = np.tile(one, (copies, 1))
    vertices[:, 2] = 2.5 - 1e-9
    faces = np.arange(3 * copies).reshape(-1, 3)
    expected = exact_solid(vertices[:3], faces[:1], (n, n, n))
    got = shaped.voxelize_dense((vertices, faces), voxel_size=1.0, bounds=[[0, 0, 0], [n, n, n]])
    assert_same_voxels(got.to_numpy(), expected)
