"""voxelizer.benchmarks.startup: a tiny run, two trees side by side."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..helpers import PROJECT_MODELS, shared_model

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_startup_benchmark_times_the_command_and_its_floors(tmp_path):
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    for source in (
        PROJECT_MODELS / "gear.ply",
        shared_model("torus.stl"),
        shared_model("bunny.ply"),
    ):
        shutil.copyfile(source, dataset / source.name)
    before = tmp_path / "before"
    shutil.copytree(
        PROJECT_ROOT / "voxelizer", before / "voxelizer",
        ignore=shutil.ignore_patterns("__pycache__"),
    )  # fmt: skip
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "voxelizer.benchmarks.startup", str(dataset), "--out", str(out),
         "--grid", "16", "--rounds", "1", "--before", str(before), "--timeout", "120",
         "--timeline"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads((out / "startup.json").read_text())
    assert result["trees"] == {"before": str(before), "after": str(PROJECT_ROOT)}
    for tree in ("before", "after"):
        (found,) = result["raw"][tree]
        assert found["meshes"] == found["done"] == 3
        assert 0 < found["first_output_s"] <= found["last_output_s"] <= found["whole_s"]
        assert found["exit_s"] == pytest.approx(found["whole_s"] - found["last_output_s"])
        assert found["meshes_per_s"] == pytest.approx(3 / found["whole_s"])
        assert 0 < found["python_s"] < found["whole_s"]
        assert found["numpy_s"] > 0 and found["import_cli_s"] > 0 and found["device_open_s"] > 0
        assert result["median"][tree]["whole_s"] == found["whole_s"]
        timeline = found["timeline"]  # (-vv's, from a run of its own)
        names = list(timeline)
        assert names[0] == "meshes found" and names[-1] == "end"
        assert list(timeline.values()) == sorted(timeline.values())
        assert 0 < timeline["first result"] <= timeline["last result"] <= timeline["end"]
        assert result["median"][tree]["timeline"] == timeline
    assert result["after_over_before"]["whole_s"] == pytest.approx(
        result["median"]["after"]["whole_s"] / result["median"]["before"]["whole_s"]
    )
    text = (out / "startup.md").read_text()
    assert "| measured | before | after | after / before |" in text
    assert "| floor: the device's opening alone, `Voxelizer()` (s) |" in text
    assert "| milestone | before | after |" in text
    assert "| first mesh at the device |" in text
    assert text in done.stdout
    assert sorted(path.name for path in out.iterdir()) == ["startup.json", "startup.md"]


def test_the_startup_benchmark_refuses_a_tree_without_voxelizer(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "voxelizer.benchmarks.startup", str(tmp_path), "--out",
         str(tmp_path / "out"), "--before", str(tmp_path)],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert f"--before {tmp_path}: no voxelizer package there" in done.stderr
