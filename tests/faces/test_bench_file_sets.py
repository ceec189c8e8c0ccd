"""The datasets benchmark's sets of files: the real set's files, copies and broken files,
what a set holds, and broken files counted as results (one error line), not crashes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from voxelizer import VoxelizerError, load_mesh
from voxelizer.benchmarks import dataset_report, datasets, file_sets

from ..helpers import PROJECT_MODELS

DISTINCT = 4 + 3 + 6  # the meshes of the sources, their text forms, the broken files


@pytest.fixture
def sources(tmp_path, models_dir) -> Path:
    """A small folder of real files: two PLY, a textured OBJ (its MTL and texture beside
    it), a binary STL; and a README, which is no mesh."""
    folder = tmp_path / "sources"
    folder.mkdir()
    for name in ("gear.ply", "torus_knot.ply", "painted_gear.obj", "painted_gear.mtl",
                 "painted_gear.png", "README.md"):  # fmt: skip
        shutil.copy(PROJECT_MODELS / name, folder / name)
    shutil.copy(models_dir / "featuretype.stl", folder / "featuretype.stl")
    return folder


def test_the_real_set_lists_what_it_holds(tmp_path, sources):
    found = file_sets.real_set([sources], tmp_path / "real", copies=2, size=0)
    assert len(found.files) == 2 * DISTINCT and len(set(found.files)) == len(found.files)
    assert len({path.stem for path in found.files}) == len(found.files)  # outputs don't collide
    assert len(found.broken) == 12 and found.broken <= set(found.files)
    holds = found.holds
    assert holds["files"] == 26 and holds["distinct"] == DISTINCT and holds["copies"] == 2
    assert holds["meshes"] == 14 and holds["broken"] == 12
    assert holds["formats"] == {
        "OBJ": 4, "PLY (ASCII)": 2, "PLY (binary)": 4, "STL (ASCII)": 2, "STL (binary)": 2
    }  # fmt: skip
    counts = [len(load_mesh(path).faces) for path in found.files if path not in found.broken]
    assert holds["triangles"] == [min(counts), max(counts)] == [1920, 6912]
    assert holds["broken_files"] == [
        "cut-torus_knot.ply", "cut-featuretype.stl", "empty.stl", "readme.obj", "noise.stl",
        "points.ply",
    ]  # fmt: skip
    text = file_sets.holds_text("real", holds)
    assert text.startswith("set real: 26 files (13 distinct x 2 copies): 14 meshes of 1,920-6,912")
    assert "12 broken (cut-torus_knot.ply" in text
    # A copy count to reach a size: the set as large as the made set asks
    assert len(file_sets.real_set([sources], tmp_path / "more", None, 30).files) == 3 * DISTINCT
    with pytest.raises(ValueError, match="no folder"):
        file_sets.real_set([tmp_path / "nowhere"], tmp_path / "none", 1, 0)
    with pytest.raises(ValueError, match="no mesh files"):
        file_sets.real_set([tmp_path / "real"], tmp_path / "none", 1, 0)  # (folders only)


def test_copies_differ_on_disk_and_hold_the_same_meshes(tmp_path, sources):
    found = file_sets.real_set([sources], tmp_path / "real", copies=2, size=0)
    first, second = found.files[:DISTINCT], found.files[DISTINCT:]
    assert first[0].read_bytes() == (sources / first[0].name[4:]).read_bytes()  # as it came
    for one, other in zip(first, second):
        assert one.parent != other.parent
        if one.stat().st_size:  # (the empty file stays empty)
            assert one.read_bytes() != other.read_bytes(), other
        if one not in found.broken:
            a, b = load_mesh(one), load_mesh(other)
            assert np.array_equal(a.vertices, b.vertices) and np.array_equal(a.faces, b.faces)
    for copy in ("c00", "c01"):  # the textured OBJ's material and texture beside it
        assert (tmp_path / "real" / copy / "painted_gear.mtl").is_file()
        assert (tmp_path / "real" / copy / "painted_gear.png").is_file()


def test_every_broken_file_fails_with_one_error(tmp_path, sources):
    found = file_sets.real_set([sources], tmp_path / "real", copies=1, size=0)
    for path in found.broken:
        with pytest.raises(VoxelizerError):
            load_mesh(path)
        assert datasets.parsed_triangles(str(path)) == -1  # the ceilings go on
        assert datasets.parsed_triangles(str(path), grid=16) == -1
    for path in set(found.files) - found.broken:
        assert datasets.parsed_triangles(str(path)) > 0
        assert datasets.parsed_triangles(str(path), grid=16) > 0


def test_a_first_limit_of_a_set_keeps_its_broken_files_and_sidecars(tmp_path, sources):
    found = file_sets.real_set([sources], tmp_path / "real", copies=1, size=0)
    cut = file_sets.limited(found, DISTINCT - 2, tmp_path)
    assert [path.name for path in cut.files] == [path.name for path in found.files[:-2]]
    assert cut.folder == tmp_path / "real-subset" and len(cut.broken) == 4
    assert (cut.folder / "c00" / "painted_gear.mtl").is_file()
    assert cut.holds["broken"] == 4 and cut.holds["files"] == DISTINCT - 2
    assert file_sets.limited(found, None, tmp_path) is found


def completed(code: int, stderr: str) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(["voxelize", "IN"], code, "", stderr)


def test_failed_inputs_are_counted_from_their_error_lines():
    error = "voxelize: error: IN: the mesh has no triangles\n"
    warning = "voxelize: warning: IN: the mesh is not closed\n"
    assert datasets._error_lines(completed(0, warning), some_failed=True) == 0
    assert datasets._error_lines(completed(1, warning + 2 * error), some_failed=True) == 2
    assert datasets._error_lines(completed(1, error), some_failed=False) == 1
    for code, stderr, batch in (
        (1, warning, True),  # exit 1 and no input named: not a file's failure
        (2, error, True),  # a usage error
        (1, 2 * error, False),  # a process per file reports one input
        (1, "Traceback (most recent call last):\n" + error, True),  # a crash
    ):
        with pytest.raises(RuntimeError, match="exit"):
            datasets._error_lines(completed(code, stderr), some_failed=batch)


def test_the_tables_say_what_each_set_holds_and_what_failed():
    raw = {
        "grid": 16, "meshes": 10, "broken": 3, "rates": {"many": [5.0, 4.0]},
        "figures": {"gpu_ms": [], "device_cpu_ms": [2.0], "device_wait_ms": [], "parse": [50.0]},
        "done": {"many": [7, 7]}, "failed": {"many": [3, 3]},
    }  # fmt: skip
    found = dataset_report.summary(raw)
    assert found["done"] == {"many": 7} and found["failed"] == {"many": 3}
    holds = {"files": 10, "distinct": 5, "copies": 2, "meshes": 7, "broken": 3,
             "formats": {"OBJ": 7}, "triangles": [12, 96], "broken_files": ["empty.stl"]}  # fmt: skip
    grids = [dict(found, this=found), dict(found, grid=32, this=found)]
    sets = {
        "real": {"holds": holds, "meshes": 10, "grids": grids},
        "made": {"meshes": 10, "grids": grids},
    }
    result = {"device": "D", "rounds": 2, "trees": {"this": "T"}, "sets": sets}
    text = dataset_report.markdown(result)
    for heading in ("set real, 16³", "set real, 32³", "set made, 16³", "set made, 32³"):
        assert f"### {heading}\n" in text  # each grid's heading names its set
    assert "set real: 10 files (5 distinct x 2 copies): 7 meshes of 12-96 triangles" in text
    assert "| many | 5.0 (4.5) |" in text
    assert "this: meshes done (files failed), of 3 broken: many 7 (3)" in text


@pytest.mark.slow
def test_datasets_runs_both_sets_in_one_call(tmp_path, models_dir, sources):
    """Both sets in one run, each with its own table, its ceilings and what it holds; the
    broken files end as results of every way, not as a crash."""
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable, "-m", "voxelizer.benchmarks.datasets", "--models-dir",
            str(models_dir), "--real-from", str(sources), "--real-copies", "1", "--work",
            str(tmp_path / "work"), "--limit", str(DISTINCT), "--grids", "16", "--rounds", "1",
            "--ways", "loop,many,cli_batch", "--parse-processes", "1", "--sets", "made,real",
            "--out", str(out),
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads((out / "datasets.json").read_text())
    assert result["set"] == "made" and result["meshes"] == DISTINCT  # the first set on top
    assert list(result["sets"]) == ["made", "real"]
    (real,) = result["sets"]["real"]["grids"]
    assert real["this"]["done"] == {"loop": 7, "many": 7, "cli_batch": 7}
    assert real["this"]["failed"] == {"loop": 6, "many": 6, "cli_batch": 6}
    assert real["this"]["ceilings"]["parse_files_per_s"] > 0
    assert result["sets"]["real"]["holds"]["broken"] == 6
    text = (out / "datasets.md").read_text()
    assert "### set made, 16³" in text and "### set real, 16³" in text
    assert "set real: 13 files (13 distinct x 1 copies)" in text
