"""Non-cubic grids on the GPU equal the CPU reference bit for bit: dense grids and SVOs, every
variant and sort, both fill modes, grids fitted by shape, by voxel size and on given bounds."""

from __future__ import annotations

import numpy as np
import pytest

from voxelizer import SVO, VARIANTS, Mesh, OpenMeshWarning
from voxelizer.choices import SORTS
from voxelizer.reference import voxelize_reference

from ..helpers import (
    assert_same_voxels,
    load_model,
    read_back,
    reference_grid,
    run_cli,
    shared_model,
)

# Each axis the longest once; nz of 40 leaves part of a column's second word as padding.
SHAPES = [(64, 16, 40), (16, 64, 24), (24, 16, 64), (36, 12, 8)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("variant", VARIANTS)
def test_dense_non_cubic_grids(gpu, variant, shape):
    for name in ("bunny.ply", "torus_knot.ply"):
        grid = gpu.voxelize_dense(load_model(name), shape, variant=variant)
        expected = reference_grid(name, shape)
        assert grid.shape == shape
        assert grid.voxel_size == expected.voxel_size
        assert np.array_equal(grid.origin, expected.origin)
        assert_same_voxels(grid.to_numpy(), expected.to_numpy())
        assert grid.stats.shape == tuple(shape)


# Columns deeper than the fill keeps in registers (16 words, 512 voxels): its flips go to the
# grid in memory, and a tile's parity is made there. The models are stretched along z to fill
# the columns.
DEEP_SHAPES = [(12, 8, 600), (8, 12, 1100)]


@pytest.mark.parametrize("shape", DEEP_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("variant", VARIANTS)
def test_columns_deeper_than_the_fills_registers(gpu, variant, shape):
    for name in ("bunny.ply", "torus_knot.ply"):
        model = load_model(name)
        extent = np.ptp(model.vertices, axis=0)
        # z the longest side in voxels: the columns' full depth
        stretch = shape[2] * max(extent[0] / shape[0], extent[1] / shape[1]) / extent[2]
        tall = Mesh(model.vertices * np.array([1.0, 1.0, stretch]), model.faces)
        grid = gpu.voxelize_dense(tall, shape, variant=variant)
        expected = voxelize_reference(tall, shape).to_numpy()
        assert expected[:, :, 512:].any()  # solid voxels past the registers' words
        assert_same_voxels(grid.to_numpy(), expected)


@pytest.mark.parametrize("sort", SORTS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_svo_non_cubic_grids(gpu, shape, sort):
    svo = gpu.voxelize(load_model("bunny.ply"), shape, sort=sort)
    expected = reference_grid("bunny.ply", shape)
    assert svo == SVO.from_dense(expected.to_numpy(), expected.placement)
    assert svo.count() == expected.count() == svo.stats.counts["solid_voxels"]


@pytest.mark.parametrize("shape", [(48, 24, 32), (16, 40, 28)], ids=lambda s: "x".join(map(str, s)))
def test_vote_on_non_cubic_grids(gpu, shape):
    expected = reference_grid("suzanne.ply", shape, "vote")  # open: the six directions differ
    with pytest.warns(OpenMeshWarning, match="not closed"):
        grid = gpu.voxelize_dense(load_model("suzanne.ply"), shape, fill_mode="vote")
    assert_same_voxels(grid.to_numpy(), expected.to_numpy())
    with pytest.warns(OpenMeshWarning, match="not closed"):
        svo = gpu.voxelize(load_model("suzanne.ply"), shape, fill_mode="vote")
    assert_same_voxels(svo.to_numpy(), expected.to_numpy())


def test_voxel_size_and_bounds(gpu):
    model = load_model("gear.ply")
    bounds = [[-1, -1.5, -0.25], [1.5, 1, 0.25]]
    for kwargs in (
        {"voxel_size": 0.05},
        {"voxel_size": 0.0625, "bounds": bounds},
        {"grid": (40, 40, 8), "bounds": bounds},
    ):
        grid = kwargs.pop("grid", None)
        expected = voxelize_reference(model, grid, **kwargs)
        assert len(set(expected.shape)) > 1
        dense = gpu.voxelize_dense(model, grid, **kwargs)
        assert dense.shape == expected.shape and np.array_equal(dense.origin, expected.origin)
        assert_same_voxels(dense.to_numpy(), expected.to_numpy())
        svo = gpu.voxelize(model, grid, **kwargs)
        assert_same_voxels(svo.to_numpy(), expected.to_numpy())


def test_cli_non_cubic(tmp_path, capsys):
    out = tmp_path / "bunny.svo"
    code, stdout, stderr = run_cli(
        capsys, shared_model("bunny.ply"), "--grid", "64x32x48", "-o", out
    )
    expected = reference_grid("bunny.ply", (64, 32, 48))
    assert code == 0 and "grid 64x32x48, " in stdout, stderr
    assert f"{expected.count():,} solid voxels" in stdout
    saved = read_back(out)
    assert saved.shape == (64, 32, 48) and np.array_equal(saved.origin, expected.origin)
    assert_same_voxels(saved.to_numpy(), expected.to_numpy())
