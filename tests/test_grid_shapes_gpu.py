"""Non-cubic grids on the GPU equal the CPU reference bit for bit: dense grids and SVOs, every
variant and sort, both fill modes, grids fitted by shape, by voxel size and on given bounds."""

from __future__ import annotations

from functools import cache, lru_cache

import numpy as np
import pytest

from voxelizer import SVO, VARIANTS
from voxelizer.cli import main
from voxelizer.mesh import load_mesh
from voxelizer.pipeline.passes import SORTS
from voxelizer.reference import voxelize_reference

from .conftest import PROJECT_MODELS, shared_model

# Each axis the longest once; nz of 40 leaves part of a column's second word as padding.
SHAPES = [(64, 16, 40), (16, 64, 24), (24, 16, 64), (36, 12, 8)]


@cache
def mesh(name: str):
    path = PROJECT_MODELS / name if (PROJECT_MODELS / name).is_file() else shared_model(name)
    return load_mesh(path)


@lru_cache(maxsize=16)
def reference(name: str, shape: tuple, fill_mode: str = "parity"):
    return voxelize_reference(mesh(name), shape, fill_mode)


def assert_same(gpu_voxels: np.ndarray, expected: np.ndarray) -> None:
    assert gpu_voxels.shape == expected.shape
    extra = int(np.count_nonzero(gpu_voxels & ~expected))
    missing = int(np.count_nonzero(expected & ~gpu_voxels))
    assert extra == 0 and missing == 0, f"GPU has {extra} extra and {missing} missing voxels"


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("variant", VARIANTS)
def test_dense_non_cubic_grids(gpu, variant, shape):
    for name in ("bunny.ply", "torus_knot.ply"):
        grid = gpu.voxelize_dense(mesh(name), shape, variant)
        expected = reference(name, shape)
        assert grid.shape == shape
        assert grid.voxel_size == expected.voxel_size
        assert np.array_equal(grid.origin, expected.origin)
        assert_same(grid.to_numpy(), expected.to_numpy())
        assert grid.stats["shape"] == list(shape)


@pytest.mark.parametrize("sort", SORTS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_svo_non_cubic_grids(gpu, shape, sort):
    svo = gpu.voxelize(mesh("bunny.ply"), shape, sort=sort)
    expected = reference("bunny.ply", shape)
    assert svo == SVO.from_dense(expected.to_numpy(), expected.placement)
    assert svo.count() == expected.count() == svo.stats["counts"]["solid_voxels"]


@pytest.mark.parametrize("shape", [(48, 24, 32), (16, 40, 28)], ids=lambda s: "x".join(map(str, s)))
def test_vote_on_non_cubic_grids(gpu, shape):
    expected = reference("suzanne.ply", shape, "vote")  # open: the six directions differ
    with pytest.warns(Warning):
        grid = gpu.voxelize_dense(mesh("suzanne.ply"), shape, fill_mode="vote")
    assert_same(grid.to_numpy(), expected.to_numpy())
    with pytest.warns(Warning):
        svo = gpu.voxelize(mesh("suzanne.ply"), shape, fill_mode="vote")
    assert np.array_equal(svo.to_dense(), expected.to_numpy())


def test_voxel_size_and_bounds(gpu):
    model = mesh("gear.ply")
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
        assert_same(dense.to_numpy(), expected.to_numpy())
        svo = gpu.voxelize(model, grid, **kwargs)
        assert np.array_equal(svo.to_dense(), expected.to_numpy())


def test_cli_non_cubic(tmp_path, capsys):
    out = tmp_path / "bunny.svo"
    code = main([str(shared_model("bunny.ply")), "--grid", "64x32x48", "-o", str(out)])
    stdout = capsys.readouterr().out
    expected = reference("bunny.ply", (64, 32, 48))
    assert code == 0 and "grid 64x32x48, " in stdout
    assert f"{expected.count():,} solid voxels" in stdout
    assert np.array_equal(SVO.load(out).to_dense(), expected.to_numpy())
