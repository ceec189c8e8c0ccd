"""voxelizer.benchmarks.handoff: a tiny run, both ways side by side."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from ..helpers import PROJECT_MODELS, shared_model

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def test_the_handoff_benchmark_receives_every_mesh_both_ways(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    for source in (PROJECT_MODELS / "gear.ply", shared_model("torus.stl")):
        shutil.copyfile(source, models / source.name)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "voxelizer.benchmarks.handoff", "--models-dir", str(models),
         "--out", str(out), "--meshes", "6", "--rounds", "1", "--grid", "16",
         "--processes", "1"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rounds = json.loads((out / "handoff.json").read_text())["rounds"]
    by_way = {entry["way"]: entry for entry in rounds}
    assert set(by_way) == {"pipe", "shared"}
    assert all(entry["meshes"] == 6 and entry["processes"] == 1 for entry in rounds)
    assert by_way["pipe"]["through_shared_memory"] == 0
    assert by_way["shared"]["through_shared_memory"] == 6  # every mesh fits the region
    assert all(entry["receiving_cpu_ms_per_mesh"] > 0 for entry in rounds)
