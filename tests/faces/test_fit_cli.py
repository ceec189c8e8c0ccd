"""`voxelize --fit unit-cube [--pad K]`: the mesh normalised and the grid placed as
voxelizer.normalize does it, for one file, a folder (a batch) and the API's `fit` option."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import voxelizer
from voxelizer.normalize import fit_mesh, unit_cube_bounds

from ..helpers import SHARED_MODELS, cli_usage_error, read_back, run_cli


def expected(path, grid: int, pad: int):
    return voxelizer.voxelize_dense(
        fit_mesh(path), grid, bounds=unit_cube_bounds(grid, pad), fill_mode="winding"
    )


def assert_equal_grids(result, want) -> None:
    assert result.shape == want.shape
    assert np.array_equal(result.origin, want.origin)
    assert np.array_equal(result.voxel_size, want.voxel_size)
    assert np.array_equal(result.to_numpy(), want.to_numpy())


def test_one_file_is_the_formula_bit_for_bit(gpu, capsys, tmp_path):
    model = SHARED_MODELS / "suzanne.ply"
    out = tmp_path / "out.npz"
    code, _, stderr = run_cli(
        capsys, model, "--grid", 32, "--fit", "unit-cube", "--pad", 1,
        "--fill-mode", "winding", "-o", out, "--quiet",
    )  # fmt: skip
    assert code == 0, stderr
    result = read_back(out)
    assert result.shape == (32, 32, 32) and result.count() > 0
    assert_equal_grids(result, expected(model, 32, 1))


def test_a_batch_fits_every_mesh(gpu, capsys, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("suzanne.ply", "torus.stl"):
        shutil.copy(SHARED_MODELS / name, folder / name)
    code, _, stderr = run_cli(
        capsys, folder, "--out-dir", tmp_path / "out", "--format", "npz", "--grid", 16,
        "--fit", "unit-cube", "--fill-mode", "winding", "--quiet",
    )  # fmt: skip
    assert code == 0, stderr
    for name in ("suzanne", "torus"):
        result = read_back(tmp_path / "out" / f"{name}.npz")
        assert_equal_grids(result, expected(folder / f"{name}.ply", 16, 0) if name ==
                           "suzanne" else expected(folder / "torus.stl", 16, 0))  # fmt: skip


def test_the_api_option_is_the_formula(gpu):
    model = SHARED_MODELS / "torus.stl"
    result = voxelizer.voxelize_dense(model, 24, fit="unit-cube", pad=2, fill_mode="winding")
    assert_equal_grids(result, expected(model, 24, 2))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--bounds", 0, 0, 0, 1, 1, 1], "--fit places the grid itself: leave out --bounds"),
        (["--voxel-size", 0.1], "leave out --voxel-size"),
        (["--pad", 1, 2, 3], "--fit takes --pad K, one border on every side"),
        (["--grid", "32x32x16"], "--fit places the mesh on a cube: give --grid N"),
    ],
)
def test_fit_with_a_placement_of_its_own_is_a_usage_error(capsys, tmp_path, extra, message):
    stderr = cli_usage_error(
        capsys, SHARED_MODELS / "suzanne.ply", "--fit", "unit-cube", *extra,
        "-o", tmp_path / "x.npz",
    )  # fmt: skip
    assert message in stderr.strip().splitlines()[-1] and stderr.count("error:") == 1
    assert not (tmp_path / "x.npz").exists()


def test_the_api_refuses_fit_with_a_placement_of_its_own():
    model = SHARED_MODELS / "torus.stl"
    with pytest.raises(voxelizer.GridError, match="leave out voxel_size and bounds"):
        voxelizer.voxelize_dense(model, 16, fit="unit-cube", bounds=[[0, 0, 0], [1, 1, 1]])
    with pytest.raises(voxelizer.GridError, match="pad is one number"):
        voxelizer.voxelize_dense(model, 16, fit="unit-cube", pad=(1, 2, 3))
    with pytest.raises(voxelizer.GridError, match="the grid is N"):
        voxelizer.voxelize_dense(model, (16, 16, 8), fit="unit-cube")
    with pytest.raises(voxelizer.ModeError, match="unknown fit"):
        voxelizer.voxelize_dense(model, 16, fit="sphere")


def test_the_checked_fit_options_give_the_same_request_again():
    """A batch hands its checked options on as keywords (voxelizer.batch.worker)."""
    from voxelizer.options import Options

    for grid, pad in ((32, 1), (64, 2), (128, 0), (7, 3)):
        checked = Options.create(grid, fit="unit-cube", pad=pad)
        words = checked.keywords()
        assert words["fit"] == "unit-cube" and words["pad"] == pad and words["bounds"] is None
        again = Options.create(checked.shape, **words)
        assert np.array_equal(again.bounds, unit_cube_bounds(grid, pad))
        assert again.keywords() == words
