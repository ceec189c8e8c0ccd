"""The command line's grid options (voxel sizes of three, padding, box fits, crops, their
refusals) against the CPU reference, and a tiny run of the grid sizes benchmark."""

from __future__ import annotations

import json

import numpy as np

import voxelizer
from voxelizer import Mesh
from voxelizer.reference import voxelize_reference

from .. import shapes
from ..helpers import assert_same_voxels, cli_usage_error, load_model, read_back, run_cli


def reference(mesh: Mesh, grid=None, **kwargs) -> np.ndarray:
    """The CPU reference of the parity fill."""
    return voxelize_reference(mesh, grid, "parity", **kwargs).to_numpy()


def test_cli_voxel_sizes_pad_and_box_fit(tmp_path, capsys):
    model = "models/gear.ply"
    out = tmp_path / "gear.npz"
    code, _, stderr = run_cli(
        capsys, model, "--voxel-size", "0.05", "0.05", "0.1", "--bounds", "-1", "-1", "-0.2",
        "1", "1", "0.2", "--pad", "1", "2", "0", "-o", out,
    )  # fmt: skip
    assert code == 0, stderr
    saved = read_back(out)
    assert saved.voxel_size == (0.05, 0.05, 0.1) and saved.shape == (42, 44, 4)
    expected = reference(
        voxelizer.load_mesh(model), voxel_size=(0.05, 0.05, 0.1),
        bounds=[[-1, -1, -0.2], [1, 1, 0.2]], pad=(1, 2, 0),
    )  # fmt: skip
    assert_same_voxels(saved.to_numpy(), expected)
    with np.load(out) as data:
        assert data["voxel_size"].tolist() == [0.05, 0.05, 0.1]
    inside = tmp_path / "inside.npz"
    code, _, stderr = run_cli(
        capsys, model, "--voxel-size", "0.3", "--bounds", "-1", "-1", "-0.2", "1", "1", "0.2",
        "--box-fit", "inside", "-o", inside,
    )  # fmt: skip
    assert code == 0 and read_back(inside).shape == (6, 6, 1), stderr


def test_cli_refusals(tmp_path, capsys):
    model = "models/gear.ply"
    box = ["--bounds", "-1", "-1", "-0.2", "1", "1", "0.2"]
    cube = ["--bounds", "-1", "-1", "-2", "1", "1", "2"]  # 40 x 40 x 40 voxels of 0.05 x 0.05 x 0.1
    for suffix in (".binvox", ".vox"):
        out = tmp_path / f"g{suffix}"
        code, stdout, stderr = run_cli(
            capsys, model, "--voxel-size", "0.05", "0.05", "0.1", *cube, "-o", out
        )
        assert code == 1 and stdout == "" and f"{suffix} holds cubic voxels only" in stderr
        assert "0.05x0.05x0.1" in stderr and not out.exists()
    code, _, stderr = run_cli(capsys, model, "--voxel-size", "0.00001", *box)
    assert code == 2 and "needs 200000 voxels along x" in stderr
    assert len(stderr.strip().splitlines()) == 1
    assert "needs bounds" in cli_usage_error(capsys, model, "--grid", "8", "--box-fit", "inside")
    assert "from 0 to 65536 voxels, not -1" in cli_usage_error(capsys, model, "--pad", "-1")
    assert "1, 3 or 6 numbers" in cli_usage_error(capsys, model, "--pad", "1", "2")
    assert "one number or three" in cli_usage_error(capsys, model, "--voxel-size", "0.1", "0.2")
    assert "along z must be positive" in cli_usage_error(
        capsys, model, "--voxel-size", "0.1", "0.2", "0"
    )


def test_cli_crop_lattice_too_large(tmp_path, capsys):
    big = tmp_path / "long.ply"
    vertices, faces = shapes.box((0, 0, 0), (100, 1, 1))
    import trimesh

    trimesh.Trimesh(vertices, faces).export(big)
    code, _, stderr = run_cli(
        capsys, big, "--voxel-size", "0.01", "--bounds", "50", "0", "0", "51", "1", "1"
    )
    assert code == 2 and "the box cuts the mesh" in stderr, stderr


def test_stats_json_of_a_crop(tmp_path, capsys):
    stats = tmp_path / "stats.json"
    code, _, stderr = run_cli(
        capsys, "models/torus_knot.ply", "--voxel-size", "0.0625", "--bounds", "0", "-2", "-1",
        "2", "2", "0", "--stats-json", stats,
    )  # fmt: skip
    assert code == 0, stderr
    assert json.loads(stats.read_text())["shape"] == [32, 64, 16]


def test_the_grid_sizes_benchmark_runs(tmp_path, capsys):
    """A tiny run of the H200 script (python -m voxelizer.benchmarks.grid_sizes): one row per
    grid and output, the passes' medians side by side, the ratio to the first grid."""
    from voxelizer.benchmarks import grid_sizes

    models = ["--models-dir", "models", "--models", "gear.ply"]
    args = [*models, "--grids", "16", "15", "--repeat", "1", "--out"]
    assert grid_sizes.main([*args, str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "grid_sizes.json").read_text())
    rows = {(row["output"], row["grid"]): row for row in doc["rows"]}
    assert set(rows) == {("dense", 16), ("dense", 15), ("svo", 16), ("svo", 15)}
    for (_, grid), row in rows.items():
        assert row["status"] == "ok" and row["shape"] == [grid] * 3
        assert row["cells"] == grid**3 and row["gpu_ms"]["fill"] > 0 and row["wall_ms"] > 0
    assert rows["dense", 15]["voxels"] == int(reference(load_model("gear.ply"), 15).sum())
    table = (tmp_path / "grid_sizes.md").read_text()
    assert "| 16³ | 15³ |" in table and "GPU ms fill" in table and "cells, ratio" in table
