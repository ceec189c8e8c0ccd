"""The .vox files read back by the readers users have (py-vox-io, midvoxio), exactly, and the
up-axis turn of --up-axis y."""

from __future__ import annotations

import numpy as np
import pytest
from midvoxio.voxio import vox_to_arr
from pyvox.parser import VoxParser

import voxelizer
from voxelizer.grid import DenseGrid
from voxelizer.placement import GridPlacement

from ..helpers import PROJECT_MODELS, cli_usage_error, run_cli


def _grid(shape: tuple[int, int, int], seed: int = 1) -> DenseGrid:
    voxels = np.random.default_rng(seed).random(shape) < 0.3
    return DenseGrid(voxels, GridPlacement(shape, np.zeros(3), 1.0))


def _pyvox_voxels(path) -> tuple[tuple[int, int, int], np.ndarray]:
    parsed = VoxParser(str(path)).parse()
    assert len(parsed.models) == 1
    model = parsed.models[0]
    size = (model.size.x, model.size.y, model.size.z)
    voxels = np.zeros(size, bool)
    for voxel in model.voxels:
        voxels[voxel.x, voxel.y, voxel.z] = True
    return size, voxels


@pytest.mark.parametrize("shape", [(12, 8, 16), (8, 256, 40)])
def test_a_grid_up_to_256_is_one_plain_model_both_readers_open(tmp_path, shape):
    grid = _grid(shape)
    path = tmp_path / "model.vox"
    voxelizer.save(grid, path)
    size, voxels = _pyvox_voxels(path)
    assert size == shape and np.array_equal(voxels, grid.to_numpy())
    colours = vox_to_arr(str(path))
    assert colours.shape == (*shape, 4)
    assert np.array_equal(colours[..., 3] > 0, grid.to_numpy())
    assert np.array_equal(voxelizer.load(path).to_numpy(), grid.to_numpy())


@pytest.mark.parametrize("shape", [(300, 20, 12), (8, 520, 264)])
def test_a_tiled_grid_is_read_whole_by_midvoxio(tmp_path, shape):
    """Over 256 per side the file holds equal tiles placed by the scene graph; midvoxio's
    merged model (vox_index=-1, each model at its translation) holds the grid exactly, when
    the outer tiles hold voxels (a tile without any is not written), in a box as large as
    the tiles: 520 = 3 tiles of 174, 2 empty voxels more. py-vox-io reads no scene graph,
    so it opens single-model files only."""
    grid = _grid(shape, seed=3)
    path = tmp_path / "tiles.vox"
    voxelizer.save(grid, path)
    colours = vox_to_arr(str(path), -1)
    tiles = [-(-side // 256) for side in shape]
    covered = [count * (2 * -(-side // (2 * count))) for side, count in zip(shape, tiles)]
    assert colours.shape == (*covered, 4)
    solid = colours[..., 3] > 0
    nx, ny, nz = shape
    assert np.array_equal(solid[:nx, :ny, :nz], grid.to_numpy())
    assert int(solid.sum()) == grid.count()  # nothing in the overhang


def test_up_axis_y_turns_the_model_so_its_up_is_magicavoxel_up(tmp_path):
    grid = _grid((12, 8, 16), seed=2)
    path = tmp_path / "up.vox"
    voxelizer.save(grid, path, up_axis="y")
    size, voxels = _pyvox_voxels(path)
    nx, ny, nz = grid.shape
    assert size == (nx, nz, ny)
    # MagicaVoxel (x, y, z) = (i, nz - 1 - k, j): a rotation about x, not a mirror
    expected = grid.to_numpy()[:, :, ::-1].transpose(0, 2, 1)
    assert np.array_equal(voxels, expected)


def test_up_axis_is_refused_for_other_outputs_and_applied_to_vox(tmp_path, capsys):
    model = PROJECT_MODELS / "gear.ply"
    stderr = cli_usage_error(
        capsys, model, "--grid", 16, "--up-axis", "y", "-o", tmp_path / "g.svo"
    )
    assert "--up-axis" in stderr and not (tmp_path / "g.svo").exists()
    code, _, _ = run_cli(capsys, model, "--grid", 16, "--quiet", "-o", tmp_path / "z.vox")
    assert code == 0
    code, _, _ = run_cli(
        capsys, model, "--grid", 16, "--quiet", "--up-axis", "y", "-o", tmp_path / "y.vox"
    )
    assert code == 0
    _, along_z = _pyvox_voxels(tmp_path / "z.vox")
    _, along_y = _pyvox_voxels(tmp_path / "y.vox")
    assert np.array_equal(along_y, along_z[:, :, ::-1].transpose(0, 2, 1))
