"""The pool's loop benchmark: the batch command's threads' CPU per result with two workers,
side by side with another source tree."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from voxelizer.benchmarks import pool_loop

from ..helpers import PROJECT_MODELS

ROOT = Path(__file__).resolve().parents[2]
MESHES = 12


@pytest.mark.slow  # the command twice, each with a worker process of its own
def test_a_run_times_the_command_threads_beside_another_source_tree(tmp_path, capsys):
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(PROJECT_MODELS / "gear.ply", models / "gear.ply")
    other = tmp_path / "other"  # another source tree: a copy of this one
    shutil.copytree(ROOT / "voxelizer", other / "voxelizer",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    argv = ["--models-dir", str(models), "--out", str(tmp_path / "out"), "--meshes",
            str(MESHES), "--rounds", "1", "--grid", "16", "--src", str(other)]  # fmt: skip
    assert pool_loop.main(argv) == 0
    table = capsys.readouterr().out
    assert "voxelize DIR --format npz --grid 16 --jobs 2:" in table
    assert f"| CPU µs per mesh | this | {other} |" in table
    rounds = json.loads((tmp_path / "out" / "pool_loop.json").read_text())["rounds"]
    assert [r["source"] for r in rounds] == ["this", str(other)]
    # Each round timed its own tree (not the one of the current folder, say).
    assert [Path(r["voxelizer_file"]).parents[1] for r in rounds] == [ROOT, other]
    for figures in rounds:
        assert figures["ok"] == MESHES and figures["meshes_per_second"] > 0
        kinds = figures["cpu_us_per_mesh"]
        # The pool's loop, and the device's thread of the worker in the command's process
        # (counted to its end where it ended before the last result), both did work.
        assert kinds["MainThread"] > 0 and kinds["voxelizer-local-worker"] > 0
    for kind in ("MainThread", "voxelizer-local-worker", "meshes/s"):
        assert f"| {kind} |" in table


def test_the_command_line_asks_for_devices_or_jobs():
    parsed = {"meshes": 2, "grid": 16, "format": "npz", "jobs": 2}
    args = argparse.Namespace(devices="", **parsed)
    line = pool_loop.command_line(args, Path("in"), Path("out"))
    assert line == ["in", "--out-dir", "out", "--format", "npz", "--grid", "16", "--quiet",
                    "--jobs", "2"]  # fmt: skip
    args = argparse.Namespace(devices="0,1", **parsed)
    assert pool_loop.command_line(args, Path("in"), Path("out"))[-2:] == ["--devices", "0,1"]
