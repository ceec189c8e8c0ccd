"""The `voxelize` command: summary line, output file, refusals and their exit codes."""

from __future__ import annotations

import functools
import json
import subprocess
import sys

import numpy as np
import pytest

from voxelizer import SVO, api, choices, cli, load_mesh
from voxelizer.io.svo_file import write_svo
from voxelizer.progress import TerminalProgress
from voxelizer.reference import voxelize_reference
from voxelizer.stats import Stats

from ..helpers import (
    PROJECT_MODELS,
    FakeTerminal,
    assert_one_line_error,
    assert_same_voxels,
    cli_usage_error,
    read_back,
    reference_grid,
    run_cli,
    shared_model,
)

GEAR = PROJECT_MODELS / "gear.ply"


def test_summary_line_and_npz_round_trip(tmp_path, capsys):
    model = shared_model("torus.stl")
    out = tmp_path / "torus.npz"
    code, stdout, stderr = run_cli(capsys, model, "--grid", 64, "--variant", "naive", "-o", out)
    assert code == 0, stderr
    lines = stdout.strip().splitlines()
    assert len(lines) == 1
    expected = reference_grid("torus.stl", 64)
    assert f"{expected.count():,} solid voxels" in lines[0]
    assert "8,700 triangles" in lines[0] and "64x64x64" in lines[0]
    saved = read_back(out)
    assert np.array_equal(saved.to_numpy(), expected.to_numpy())
    assert np.allclose(saved.origin, expected.origin) and saved.voxel_size == expected.voxel_size


def test_the_summary_names_the_variant_that_ran(capsys, monkeypatch):
    """The default, "auto", names the variant it chose (in the GPU's order here): combined,
    or branchless where the budget cannot hold the indexed vertex buffer (bunny's 1.67 MB
    in a 3 MiB budget)."""
    monkeypatch.setattr(choices, "AUTO_ON_CPU", choices.AUTO_ON_GPU)
    model = shared_model("bunny.ply")
    for memory, variant in (([], "combined"), (["--max-memory", "3MiB"], "branchless")):
        code, stdout, stderr = run_cli(capsys, model, "--grid", 32, *memory)
        assert code == 0, stderr
        assert stdout.strip().endswith(f", {variant})"), stdout


def test_stats_table(capsys):
    code, stdout, _ = run_cli(capsys, GEAR, "--grid", 32, "--stats")
    assert code == 0
    for label in ("setup", "scan", "emit", "sort", "mark", "compact", "fill", "pairs", "tiles"):
        assert label in stdout


def test_existing_output_is_not_overwritten_without_force(tmp_path, capsys):
    out = tmp_path / "keep.npz"
    out.write_bytes(b"precious")
    code, _, stderr = run_cli(capsys, GEAR, "--grid", 16, "-o", out)
    assert code == 1 and "exists" in stderr and "--force" in stderr
    assert out.read_bytes() == b"precious"
    code, _, _ = run_cli(capsys, GEAR, "--grid", 16, "-o", out, "--force")
    assert code == 0
    assert_same_voxels(read_back(out).to_numpy(), reference_grid("gear.ply", 16).to_numpy())


@pytest.mark.parametrize(
    "args, message",
    [
        (["--variant", "fastest"], "unknown variant 'fastest'"),
        (["-o", "out.3mf"], "cannot write .3mf"),
        (["--grid", "many"], "invalid grid 'many'"),
        (["--grid", "0"], "at least 1"),
        (["--grid", "-8"], "at least 1"),
        (["--grid", "65537"], "larger than the supported maximum"),
    ],
)
def test_usage_errors_exit_2(capsys, args, message):
    assert message in cli_usage_error(capsys, GEAR, *args)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--device", "no-such-gpu"], "no Vulkan device matches 'no-such-gpu'"),
        (["--device", "99"], "no Vulkan device with index 99"),
    ],
)
def test_input_errors_exit_1_with_one_line(capsys, args, message):
    assert_one_line_error(*run_cli(capsys, GEAR, *args), message)


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such file"),
        (b"", "cannot read mesh"),
        (b"ply\nformat binary_little_endian 1.0\nelement vertex 3\n", "cannot read mesh"),
    ],
)
def test_bad_input_files(tmp_path, capsys, content, message):
    path = tmp_path / "model.ply"
    if content is not None:
        path.write_bytes(content)
    assert_one_line_error(*run_cli(capsys, path, "--grid", 16), message)


def test_list_devices(capsys):
    code, stdout, _ = run_cli(capsys, "--list-devices")
    assert code == 0 and stdout.startswith("[0] ")


def test_installed_command_runs_as_a_process(tmp_path):
    """The console entry point, in a fresh interpreter (validation on, as everywhere here)."""
    out = tmp_path / "gear.npz"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "voxelizer.cli",
            str(GEAR),
            "--grid",
            "32",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    expected = reference_grid("gear.ply", 32)
    assert f"{expected.count():,} solid voxels" in result.stdout
    assert_same_voxels(read_back(out).to_numpy(), expected.to_numpy())


def test_stats_json(tmp_path, capsys):
    out = tmp_path / "stats.json"
    code, stdout, _ = run_cli(
        capsys,
        PROJECT_MODELS / "torus_knot.ply",
        "--grid",
        64,
        "--variant",
        "indexed",
        "--stats-json",
        out,
    )
    assert code == 0
    stats = json.loads(out.read_text())
    assert stats["variant"] == "indexed" and stats["shape"] == [64, 64, 64]
    assert set(stats["gpu_ms"]) == {
        "upload",
        "setup",
        "scan",
        "emit",
        "sort",
        "mark",
        "compact",
        "fill",
        "svo_classify",
        "svo_scan",
        "svo_write",
        "svo_download",
    }
    assert all(ms >= 0 for ms in stats["gpu_ms"].values())
    assert {"load", "prepare", "upload", "svo_download"} <= set(stats["host_ms"])
    counts = stats["counts"]
    assert counts["triangles"] == 6912
    assert counts["tiles"] <= counts["pairs"] <= counts["sort_size"]
    assert f"{counts['solid_voxels']:,} solid voxels" in stdout
    memory = stats["memory"]
    assert memory["device_peak_bytes"] == sum(memory["device_buffers"].values())
    assert memory["device_buffers"]["grid"] >= 64 * 64 * 64 // 8
    written = out.read_bytes()
    code, _, stderr = run_cli(capsys, GEAR, "--grid", 16, "--stats-json", out)
    assert code == 1 and "exists" in stderr and out.read_bytes() == written


def test_open_mesh_warning_is_one_line_and_vote_mode_runs(capsys):
    model = shared_model("suzanne.ply")
    code, stdout, stderr = run_cli(
        capsys, model, "--grid", 32, "--fill-mode", "vote", "--sort", "bitonic"
    )
    assert code == 0 and "solid voxels" in stdout
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("voxelize: warning: the mesh is not closed")
    expected = reference_grid("suzanne.ply", 32, "vote").count()
    assert f"{expected:,} solid voxels" in stdout


@pytest.mark.parametrize("args", [["--fill-mode", "flood"], ["--sort", "quick"]])
def test_unknown_fill_mode_or_sort_is_a_usage_error(capsys, args):
    assert "invalid choice" in cli_usage_error(capsys, GEAR, *args)


# --- grid shapes, voxel size, bounds, memory budget, progress ------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["--grid", "512x256"], "invalid grid '512x256'"),
        (["--grid", "8x8x8x8"], "invalid grid"),
        (["--grid", "16x8x"], "invalid grid"),
        (["--grid", "1_024"], "invalid grid"),
        (["--grid", "16x8.0x12"], "invalid grid"),
        (["--grid", "16x0x12"], "side y must be at least 1"),
        (["--grid", "16x8x65537"], "side z 65537 is larger than the supported maximum"),
        (["--grid", "16", "--voxel-size", "0.1"], "not allowed with argument --grid"),
        (["--voxel-size", "0"], "voxel size must be positive and finite, not 0.0"),
        (["--voxel-size", "-0.5"], "voxel size must be positive and finite, not -0.5"),
        (["--voxel-size", "nan"], "voxel size must be positive and finite, not nan"),
        (["--voxel-size", "inf"], "voxel size must be positive and finite, not inf"),
        (["--voxel-size", "small"], "voxel size must be one positive number or three"),
        (["--bounds", "0", "0", "0", "1", "1"], "expected 6 arguments"),
        (["--bounds", "0", "0", "0", "1", "1", "x"], "invalid float value"),
        (["--bounds", "0", "0", "0", "1", "1", "0"], "zmin 0 must be less than zmax 0"),
        (["--bounds", "-1", "-1", "-1", "1", "1", "nan"], "bounds must be finite"),
        (["--max-memory", "12XB"], "cannot read memory size '12XB'"),
        (["--max-memory", "0"], "at least one byte"),
        (["--max-memory", "1.5"], "whole"),
    ],
)
def test_shape_and_budget_usage_errors_exit_2(capsys, args, message):
    stderr = cli_usage_error(capsys, GEAR, *args)
    assert message in stderr
    assert stderr.strip().splitlines()[-1].startswith("voxelize: error:")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--voxel-size", "1e-5"], "needs a 198116x198116x25000 grid"),
        (
            ["--voxel-size", "2e-4", "--bounds", "-0.5", "-0.1", "-0.1", "-0.4", "0.1", "0.1"],
            "the box cuts the mesh",
        ),
    ],
)
def test_placement_errors_exit_2_with_one_line(capsys, args, message):
    """A grid that cannot be placed is a GridError: one line naming the value, status 2."""
    code, stdout, stderr = run_cli(capsys, GEAR, *args)
    assert code == 2 and stdout == "" and stderr.startswith("voxelize: error:"), stderr
    assert message in stderr and len(stderr.strip().splitlines()) == 1, stderr


def test_bounds_and_voxel_size_on_a_cube(tmp_path, capsys):
    model = GEAR
    out = tmp_path / "gear.npz"
    bounds = [[-1, -1, -1], [1, 1, 1]]
    code, stdout, stderr = run_cli(
        capsys,
        model,
        "--voxel-size",
        "0.0625",
        "--bounds",
        -1,
        -1,
        -1,
        1,
        1,
        1,
        "-o",
        out,
        "--stats",
    )
    assert code == 0, stderr
    expected = voxelize_reference(load_mesh(model), voxel_size=0.0625, bounds=bounds)
    assert expected.shape == (32, 32, 32)
    saved = read_back(out)
    assert_same_voxels(saved.to_numpy(), expected.to_numpy())
    assert np.array_equal(saved.origin, [-1, -1, -1]) and saved.voxel_size == 0.0625
    assert "grid 32x32x32," in stdout and "\ngrid 32x32x32\n" in stdout  # summary and --stats
    code, stdout, _ = run_cli(
        capsys, model, "--grid", "16", "--bounds", -1, -1, -1, 1, 1, 1, "-o", out, "--force"
    )
    expected = voxelize_reference(load_mesh(model), 16, bounds=bounds)
    assert code == 0
    assert_same_voxels(read_back(out).to_numpy(), expected.to_numpy())


def test_quiet_prints_nothing_but_writes(tmp_path, capsys):
    out = tmp_path / "gear.svo"
    code, stdout, stderr = run_cli(capsys, GEAR, "--grid", 16, "--quiet", "-o", out)
    assert code == 0 and stdout == "" and stderr == ""
    assert_same_voxels(read_back(out).to_numpy(), reference_grid("gear.ply", 16).to_numpy())


@pytest.fixture
def reference_voxelize(monkeypatch):
    """voxelize() replaced by the CPU reference, recording its arguments and reporting
    progress: the command's handling of any grid shape without the GPU path."""
    calls = []

    def fake(model, grid, *, device, variant, fill_mode, sort, **options):
        calls.append({"grid": grid, **options})
        for done in range(3):
            options["progress"]("fill", done, 2)
        grid = voxelize_reference(
            load_mesh(model),
            grid,
            fill_mode,
            voxel_size=options["voxel_size"],
            bounds=options["bounds"],
        )
        stats = Stats(device="reference", counts={"triangles": 1920})
        svo = SVO.from_dense(grid.to_numpy(), grid.placement, stats)
        if options["out"] is not None:  # -o FILE.svo alone: the API writes it as it goes
            write_svo(svo, options["out"], overwrite=options["overwrite"])
        return svo

    monkeypatch.setattr(api, "voxelize", fake)
    monkeypatch.setattr(cli, "TerminalProgress", functools.partial(TerminalProgress, delay=0.0))
    return calls


def test_options_reach_the_api(tmp_path, capsys, monkeypatch, reference_voxelize):
    model = GEAR
    out = tmp_path / "gear.svo"
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    code, stdout, _ = run_cli(
        capsys, model, "--grid", "16x8X12", "--max-memory", "1.5GiB", "-o", out
    )
    assert code == 0
    (call,) = reference_voxelize
    assert call["grid"] == (16, 8, 12) and call["max_memory"] == 3 << 29
    assert call["voxel_size"] is None and call["bounds"] is None
    assert call["out"] == out and call["overwrite"] is False
    assert isinstance(call["progress"], TerminalProgress)
    expected = reference_grid("gear.ply", (16, 8, 12))
    assert "grid 16x8x12, " in stdout and f"{expected.count():,} solid voxels" in stdout
    saved = read_back(out)
    assert saved.shape == (16, 8, 12) and np.array_equal(saved.to_numpy(), expected.to_numpy())
    assert np.array_equal(saved.origin, expected.origin)
    # The progress line was drawn on the terminal and blanked before the summary.
    shown = terminal.getvalue()
    assert shown.startswith("\rfill:   0% (0/2)") and "\rfill: 100% (2/2)" in shown
    assert shown.endswith("\r" + " " * len("fill: 100% (2/2)") + "\r")

    terminal.seek(0)
    terminal.truncate()
    code, stdout, _ = run_cli(
        capsys, model, "--voxel-size", "0.125", "--bounds", -1, -1, -0.5, 1, 1, 0.5, "--quiet"
    )
    assert code == 0 and stdout == "" and terminal.getvalue() == ""
    call = reference_voxelize[-1]
    assert call["grid"] is None and call["voxel_size"] == 0.125 and call["max_memory"] is None
    assert np.array_equal(call["bounds"], [[-1, -1, -0.5], [1, 1, 0.5]])


def test_help_names_every_output_format(capsys):
    """-o and --format list every format voxelizer.save writes."""
    from voxelizer.io import OUTPUT_FORMATS

    with pytest.raises(SystemExit) as caught:
        cli.main(["--help"])
    assert caught.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())  # argparse wraps the lines
    output_at = help_text.index("-o FILE, --output FILE")
    output_help = help_text[output_at : help_text.index("--up-axis", output_at)]
    format_at = help_text.index("--format FMT", output_at)
    format_help = help_text[format_at : help_text.index("--skip-existing", format_at)]
    for suffix in OUTPUT_FORMATS:
        assert suffix in output_help, suffix
        assert suffix[1:] in format_help, suffix
