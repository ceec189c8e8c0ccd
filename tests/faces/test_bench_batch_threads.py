"""The batch's threads benchmark: CPU time per mesh by kind of thread, side by side."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from voxelizer.benchmarks import batch_threads

from ..helpers import PROJECT_MODELS

ROOT = Path(__file__).resolve().parents[2]


def test_threads_are_grouped_by_name_without_their_number():
    assert batch_threads.thread_kind("voxelizer-writer-12") == "voxelizer-writer"
    assert batch_threads.thread_kind("voxelizer-write_0") == "voxelizer-write"
    assert batch_threads.thread_kind("MainThread") == "MainThread"


def test_a_run_times_each_kind_of_thread_beside_another_source_tree(tmp_path, capsys):
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(PROJECT_MODELS / "gear.ply", models / "gear.ply")
    other = tmp_path / "other"  # another source tree: a copy of this one
    shutil.copytree(ROOT / "voxelizer", other / "voxelizer",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    argv = ["--models-dir", str(models), "--out", str(tmp_path / "out"), "--meshes", "16",
            "--rounds", "1", "--grid", "16", "--write-processes", "1", "--load-processes", "1",
            "--src", str(other)]  # fmt: skip
    assert batch_threads.main(argv) == 0
    table = capsys.readouterr().out
    assert f"| CPU µs per mesh | this | {other} |" in table
    rounds = json.loads((tmp_path / "out" / "batch_threads.json").read_text())["rounds"]
    assert [r["source"] for r in rounds] == ["this", str(other)]
    # Each round timed its own tree (not the one of the current folder, say).
    assert [Path(r["voxelizer_file"]).parents[1] for r in rounds] == [ROOT, other]
    for figures in rounds:
        assert figures["ok"] == 16 and figures["meshes_per_second"] > 0
        kinds = figures["cpu_us_per_mesh"]
        # The device's thread, and the threads that talk to the helpers, all did work.
        assert kinds["MainThread"] > 0 and kinds["voxelizer-writer"] > 0
        assert kinds["voxelizer-reader"] > 0
    for kind in ("MainThread", "voxelizer-writer", "voxelizer-reader", "meshes/s"):
        assert f"| {kind} |" in table
