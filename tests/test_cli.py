"""The `voxelize` command: summary line, output file, refusals and their exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from voxelizer.cli import main
from voxelizer.grid import DenseGrid
from voxelizer.mesh import load_mesh
from voxelizer.reference import voxelize_reference

from .conftest import PROJECT_MODELS, shared_model


def run(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_summary_line_and_npz_round_trip(tmp_path, capsys):
    model = shared_model("torus.stl")
    out = tmp_path / "torus.npz"
    code, stdout, stderr = run(capsys, model, "--grid", 64, "--variant", "naive", "-o", out)
    assert code == 0, stderr
    lines = stdout.strip().splitlines()
    assert len(lines) == 1
    expected = voxelize_reference(load_mesh(model), 64)
    assert f"{expected.count():,} solid voxels" in lines[0]
    assert "8,700 triangles" in lines[0] and "64x64x64" in lines[0]
    saved = DenseGrid.load_npz(out)
    assert np.array_equal(saved.to_numpy(), expected.to_numpy())
    assert np.allclose(saved.origin, expected.origin) and saved.voxel_size == expected.voxel_size


def test_stats_table(capsys):
    code, stdout, _ = run(capsys, PROJECT_MODELS / "gear.ply", "--grid", 32, "--stats")
    assert code == 0
    for label in ("setup", "scan", "emit", "sort", "mark", "compact", "fill", "pairs", "tiles"):
        assert label in stdout


def test_existing_output_is_not_overwritten_without_force(tmp_path, capsys):
    out = tmp_path / "keep.npz"
    out.write_bytes(b"precious")
    code, _, stderr = run(capsys, PROJECT_MODELS / "gear.ply", "--grid", 16, "-o", out)
    assert code == 1 and "exists" in stderr and "--force" in stderr
    assert out.read_bytes() == b"precious"
    code, _, _ = run(capsys, PROJECT_MODELS / "gear.ply", "--grid", 16, "-o", out, "--force")
    assert code == 0 and DenseGrid.load_npz(out).resolution == 16


@pytest.mark.parametrize("args, message", [
    (["--variant", "fastest"], "unknown variant 'fastest'"),
    (["-o", "out.stl"], "cannot write .stl"),
    (["--grid", "many"], "invalid int value"),
    (["--grid", "30"], "multiple of 4"),
    (["--grid", "4"], "multiple of 4"),
    (["--grid", "-8"], "multiple of 4"),
    (["--grid", "16384"], "larger than the supported maximum"),
])
def test_usage_errors_exit_2(capsys, args, message):
    with pytest.raises(SystemExit) as caught:
        main([str(PROJECT_MODELS / "gear.ply"), *args])
    stderr = capsys.readouterr().err
    assert caught.value.code == 2 and message in stderr and "Traceback" not in stderr


@pytest.mark.parametrize("args, message", [
    (["--device", "no-such-gpu"], "no Vulkan device matches 'no-such-gpu'"),
    (["--device", "99"], "no Vulkan device with index 99"),
])
def test_input_errors_exit_1_with_one_line(capsys, args, message):
    code, stdout, stderr = run(capsys, PROJECT_MODELS / "gear.ply", *args)
    assert code == 1 and stdout == ""
    assert stderr.startswith("voxelize: error:") and message in stderr
    assert len(stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    (b"", "cannot read mesh"),
    (b"ply\nformat binary_little_endian 1.0\nelement vertex 3\n", "cannot read mesh"),
])
def test_bad_input_files(tmp_path, capsys, content, message):
    path = tmp_path / "model.ply"
    if content is not None:
        path.write_bytes(content)
    code, stdout, stderr = run(capsys, path, "--grid", 16)
    assert code == 1 and stdout == ""
    assert stderr.startswith("voxelize: error:") and message in stderr
    assert len(stderr.strip().splitlines()) == 1


def test_list_devices(capsys):
    code, stdout, _ = run(capsys, "--list-devices")
    assert code == 0 and stdout.startswith("[0] ")


def test_installed_command_runs_as_a_process(tmp_path):
    """The console entry point, in a fresh interpreter (validation on, as everywhere here)."""
    out = tmp_path / "gear.npz"
    result = subprocess.run([sys.executable, "-m", "voxelizer.cli", str(PROJECT_MODELS / "gear.ply"),
                             "--grid", "32", "-o", str(out)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "solid voxels" in result.stdout and out.is_file()
    assert result.stderr == ""


def test_stats_json(tmp_path, capsys):
    out = tmp_path / "stats.json"
    code, stdout, _ = run(capsys, PROJECT_MODELS / "torus_knot.ply", "--grid", 64, "--variant",
                          "indexed", "--stats-json", out)
    assert code == 0
    stats = json.loads(out.read_text())
    assert stats["variant"] == "indexed" and stats["grid"] == "64x64x64"
    assert set(stats["gpu_ms"]) == {"upload", "setup", "scan", "emit", "sort", "mark", "compact",
                                    "fill", "download", "svo_classify", "svo_scan", "svo_write",
                                    "svo_download"}
    assert all(ms >= 0 for ms in stats["gpu_ms"].values())
    assert {"load", "prepare", "upload", "download"} <= set(stats["host_ms"])
    counts = stats["counts"]
    assert counts["triangles"] == 6912
    assert counts["tiles"] <= counts["pairs"] <= counts["sort_size"]
    assert f"{counts['solid_voxels']:,} solid voxels" in stdout
    memory = stats["memory"]
    assert memory["device_peak_bytes"] == sum(memory["device_buffers"].values())
    assert memory["device_buffers"]["grid"] >= 64 * 64 * 64 // 8
    code, _, stderr = run(capsys, PROJECT_MODELS / "gear.ply", "--grid", 16, "--stats-json", out)
    assert code == 1 and "exists" in stderr


def test_open_mesh_warning_is_one_line_and_vote_mode_runs(capsys):
    model = shared_model("suzanne.ply")
    code, stdout, stderr = run(capsys, model, "--grid", 32, "--fill-mode", "vote", "--sort",
                               "bitonic")
    assert code == 0 and "solid voxels" in stdout
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("voxelize: warning: the mesh is not closed")
    expected = voxelize_reference(load_mesh(model), 32, "vote").count()
    assert f"{expected:,} solid voxels" in stdout


@pytest.mark.parametrize("args", [["--fill-mode", "flood"], ["--sort", "quick"]])
def test_unknown_fill_mode_or_sort_is_a_usage_error(capsys, args):
    with pytest.raises(SystemExit) as caught:
        main([str(PROJECT_MODELS / "gear.ply"), *args])
    assert caught.value.code == 2 and "invalid choice" in capsys.readouterr().err
