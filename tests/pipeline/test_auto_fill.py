"""fill_mode="auto" on the shared models: parity, bit for bit, where the mesh is closed and
consistently oriented; winding, bit for bit, where the parity fill finds it open (bunny_scan,
suzanne) or overlapping; no warning either way."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from voxelizer import FillModeError, ModeError, load_mesh
from voxelizer.benchmarks.auto_fill import overlapping_pair
from voxelizer.options import Options

from ..helpers import SHARED_MODELS, cli_usage_error, run_cli
from ..shapes import box, inverted

GRID = 32


def voxelized(gpu, mesh, fill_mode, **options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = gpu.voxelize_dense(mesh, GRID, fill_mode=fill_mode, **options)
    return result, [w.message for w in caught]


@pytest.mark.parametrize(
    "name", ["bunny.ply", "dragon.ply", "armadillo.ply", "torus.stl", "featuretype.stl"]
)
def test_closed_meshes_get_parity(gpu, name):
    auto, caught = voxelized(gpu, SHARED_MODELS / name, "auto")
    parity, _ = voxelized(gpu, SHARED_MODELS / name, "parity")
    assert auto.stats.counts["auto_winding"] == 0 and not caught
    assert np.array_equal(auto.to_numpy(), parity.to_numpy())


@pytest.mark.parametrize("name", ["bunny_scan.ply", "suzanne.ply"])
def test_open_meshes_get_winding_and_no_warning(gpu, name):
    auto, caught = voxelized(gpu, SHARED_MODELS / name, "auto")
    winding, _ = voxelized(gpu, SHARED_MODELS / name, "winding")
    parity, parity_warnings = voxelized(gpu, SHARED_MODELS / name, "parity")
    assert auto.stats.counts["auto_winding"] == 1 and not caught
    assert np.array_equal(auto.to_numpy(), winding.to_numpy())
    assert not np.array_equal(auto.to_numpy(), parity.to_numpy()) and parity_warnings


def test_overlapping_and_inside_out_parts_get_winding(gpu):
    pair = overlapping_pair(load_mesh(SHARED_MODELS / "bunny.ply"))
    auto, caught = voxelized(gpu, pair, "auto")
    winding, _ = voxelized(gpu, pair, "winding")
    assert auto.stats.counts["auto_winding"] == 1 and not caught
    assert np.array_equal(auto.to_numpy(), winding.to_numpy())
    outside_in = inverted(box([0.25, 0.25, 0.25], [3.75, 3.75, 3.75]))
    result, _ = voxelized(gpu, outside_in, "auto", bounds=[[0, 0, 0], [4, 4, 4]])
    assert result.stats.counts["auto_winding"] == 1


def test_auto_in_the_svo_and_the_modes(gpu):
    svo = gpu.voxelize(SHARED_MODELS / "suzanne.ply", GRID, fill_mode="auto", warn=False)
    dense, _ = voxelized(gpu, SHARED_MODELS / "suzanne.ply", "winding")
    assert np.array_equal(svo.to_numpy(), dense.to_numpy())
    both, _ = voxelized(gpu, SHARED_MODELS / "suzanne.ply", "auto", mode="both")
    winding_both, _ = voxelized(gpu, SHARED_MODELS / "suzanne.ply", "winding", mode="both")
    assert np.array_equal(both.to_numpy(), winding_both.to_numpy())
    assert Options.create(mode="surface", fill_mode="auto").fill_mode == "auto"
    with pytest.raises(ModeError):
        Options.create(mode="surface", fill_mode="winding")
    with pytest.raises(FillModeError, match="auto"):
        Options.create(fill_mode="automatic")


def test_the_command_line_takes_auto(gpu, capsys, tmp_path):
    code, _, err = run_cli(
        capsys, SHARED_MODELS / "suzanne.ply", "--grid", GRID, "--fill-mode", "auto",
        "-o", tmp_path / "s.npz", "--quiet",
    )  # fmt: skip
    assert code == 0 and "warning" not in err
    assert "auto" in cli_usage_error(capsys, SHARED_MODELS / "suzanne.ply", "--fill-mode", "x")
