"""A batch writes the same files and reports the same results with writing processes as with
its writer threads, bit for bit (voxelizer.batch.write_processes: the writing processes count
the voxels and make the host's part of the thin check; a result that may be thin comes back
unwritten for the surface pass, which needs the device). Over real meshes: closed and open
ones, flattened ones whose solid needs the surface pass (thick enough, thin, empty), and an
output that cannot be written."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trimesh

import voxelizer
from voxelizer import voxelize_many
from voxelizer.api import Voxelizer
from voxelizer.batch import engine
from voxelizer.batch import write_processes as write_processes_module
from voxelizer.batch.write_processes import running_write_processes
from voxelizer.errors import ThinResultWarning
from voxelizer.io import load_mesh

from ..helpers import PROJECT_MODELS, run_cli, shared_model

GRID = 32
# bunny.ply flattened along z: its solid beside its surface (at GRID: 660 solid voxels for
# 1,382 the surface touches; 148 for 1,273: thin; none: empty). Each needs the surface pass.
FLATTENED = {"flat": 0.1, "thin": 0.05, "empty": 0.02}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real meshes in a tree; `blocked/` is where the outputs' folder is a file."""
    root = tmp_path_factory.mktemp("alike") / "in"
    (root / "blocked").mkdir(parents=True)
    for source in (shared_model("bunny.ply"), shared_model("torus.stl"),
                   shared_model("suzanne.ply"), PROJECT_MODELS / "gear.ply"):  # fmt: skip
        (root / source.name).write_bytes(source.read_bytes())
    (root / "blocked" / "torus.stl").write_bytes(shared_model("torus.stl").read_bytes())
    bunny = load_mesh(shared_model("bunny.ply"))
    for name, scale in FLATTENED.items():
        vertices = np.asarray(bunny.vertices, np.float64) * np.array([1.0, 1.0, scale])
        trimesh.Trimesh(vertices, bunny.faces, process=False).export(root / f"bunny_{name}.ply")
    return root


def fresh_out(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "blocked").write_bytes(b"in the way")  # blocked/torus.* cannot be written
    return folder


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")
            if p.is_file()}  # fmt: skip


def line_of(result: voxelizer.BatchResult, out: Path) -> dict[str, Any]:
    """A result as the batch reports it (its --log record, the grid's placement, each
    warning's class and words), less its seconds; paths relative to `out`."""
    record = result.to_record()
    del record["seconds"]
    record["error"] = None if result.error is None else result.error.replace(str(out), "OUT")
    record["output"] = None if result.output is None else result.output.relative_to(out).as_posix()
    record["warnings"] = [(type(w).__name__, str(w)) for w in result.warnings]
    record["origin"], record["voxel_size"] = result.origin, result.voxel_size
    return record


def batch(inputs: Path, out: Path, fmt: str, processes: int) -> list[dict[str, Any]]:
    paths = sorted(p for p in inputs.rglob("*") if p.is_file())
    with warnings.catch_warnings():  # (the results carry them)
        warnings.simplefilter("ignore")
        results = list(voxelize_many(paths, grid=GRID, out_dir=fresh_out(out), format=fmt,
                                     write_processes=processes))  # fmt: skip
    return sorted((line_of(result, out) for result in results), key=lambda line: line["input"])


@pytest.mark.parametrize("fmt", ["npz", "svo"])
def test_writing_processes_write_and_report_what_the_threads_do(inputs, tmp_path, monkeypatch, fmt):
    calls: list[int] = []  # the thin checks made in this process
    passes: list[int] = []  # the surface passes they ran
    count_thin_surface = Voxelizer.count_thin_surface

    def counted(self, mesh, result, options):
        calls.append(1)
        count_thin_surface(self, mesh, result, options)
        if "surface_voxels" in result.stats.counts:
            passes.append(result.stats.counts["surface_voxels"])

    monkeypatch.setattr(Voxelizer, "count_thin_surface", counted)
    threads = batch(inputs, tmp_path / "threads", fmt, 0)
    done = sum(line["status"] == "done" for line in threads)
    assert len(calls) == done + 1  # (and the one whose file could not be written)
    threads_passes, calls[:], passes[:] = sorted(passes), [], []
    processes = batch(inputs, tmp_path / "processes", fmt, 2)
    assert processes == threads
    # Only the results that may be thin came back from the writers for the surface pass.
    assert sorted(passes) == threads_passes and len(calls) == len(passes) == len(FLATTENED)
    assert files_of(tmp_path / "processes") == files_of(tmp_path / "threads")
    by_input = {Path(line["input"]).name: line for line in threads}
    assert [line["status"] for line in threads].count("failed") == 1
    assert by_input["torus.stl"]["status"] == "done"
    failed = next(line for line in threads if line["status"] == "failed")
    assert f"OUT/blocked/torus.{fmt}: cannot write" in failed["error"]
    assert not by_input["bunny_flat.ply"]["thin"]
    for name in ("bunny_thin.ply", "bunny_empty.ply"):
        assert by_input[name]["thin"] and by_input[name]["status"] == "done"
        assert ThinResultWarning.__name__ in {kind for kind, _ in by_input[name]["warnings"]}
    assert by_input["bunny_empty.ply"]["solid_voxels"] == 0
    assert by_input["bunny_thin.ply"]["solid_voxels"] > 0


def test_the_command_prints_and_logs_the_same_lines_with_writing_processes(
    inputs, tmp_path, monkeypatch, capsys
):
    seen = []
    for processes in (0, 2):
        for module in (engine, write_processes_module):
            monkeypatch.setattr(module, "default_write_processes", lambda *_, n=processes: n)
        out = fresh_out(tmp_path / f"out{processes}")
        log = tmp_path / f"log{processes}.jsonl"
        code, stdout, stderr = run_cli(capsys, inputs, "--out-dir", out, "--grid", GRID,
                                       "--format", "npz", "--force", "--log", log)  # fmt: skip
        assert running_write_processes() == processes or not processes
        records = [json.loads(line) for line in log.read_text().splitlines()]
        for record in records:
            del record["seconds"]
        records.sort(key=lambda record: record["input"])  # (in the order they were done)
        summary = re.sub(r" in [0-9.]+ ?s\b.*", "", stdout)
        errors = sorted(stderr.replace(str(out), "OUT").splitlines())
        seen.append((code, summary, errors, json.dumps(records).replace(str(out), "OUT"),
                     files_of(out)))  # fmt: skip
    assert seen[0] == seen[1]
    code, _, stderr, records, _ = seen[0]
    assert code == 1 and any("OUT/blocked/torus.npz: cannot write" in line for line in stderr)
    assert '"thin": true' in records
