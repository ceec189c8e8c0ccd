"""Many meshes: voxelize_many and the command's batch mode (voxelizer/batch/).

Every voxelization here is compared with the single call on the same file (bit for bit, with
its placement), and every refusal happens before any file is written. The worker processes
of --jobs run with the validation layer (they inherit VOXELIZER_VALIDATION from conftest):
they print its messages to the stderr this process shares with them, which the tests read
through capfd, and a message turns that mesh's result into a failure.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trimesh

import voxelizer
from voxelizer import BatchResult, DeviceError, GridError, OutputError, voxelize_many
from voxelizer.batch.pool import worker_share
from voxelizer.gpu.device import Instance
from voxelizer.grid import DenseGrid
from voxelizer.io.mesh_files import find_meshes, output_paths
from voxelizer.io.output import remove_temporaries
from voxelizer.io.writers import OutputFormat
from voxelizer.svo import SVO

from ..helpers import (
    PROJECT_MODELS,
    RESTORE_SIGINT,
    FakeTerminal,
    assert_same_svo,
    cli_usage_error,
    load_model,
    run_cli,
    shared_model,
)
from ..shapes import box

PROJECT_ROOT = Path(__file__).resolve().parents[2]
GRID = 16
# Where each test tree's meshes come from (relative path in the tree -> model file).
TREE = {
    "top.ply": PROJECT_MODELS / "torus_knot.ply",
    "a/gear.ply": PROJECT_MODELS / "gear.ply",
    "a/b/sphere.ply": PROJECT_MODELS / "hollow_sphere.ply",
    "c/torus.stl": shared_model("torus.stl"),
}
BAD_PLY = b"ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nend_header\n1\n"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A folder of meshes in subfolders, plus a file that is no mesh (left alone)."""
    root = tmp_path / "in"
    for relative, source in TREE.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, root / relative)
    (root / "a" / "notes.txt").write_text("not a mesh")
    return root


@functools.cache
def single_dense(source: Path, grid: int = GRID) -> DenseGrid:
    """The single call's result on a model file: what every batch result must equal."""
    return voxelizer.voxelize_dense(source, grid=grid)


@functools.cache
def single_svo_bytes(source: Path, grid: int = GRID) -> bytes:
    """The .svo file `voxelize MODEL -o X.svo` writes."""
    return svo_file_bytes(voxelizer.voxelize(source, grid=grid))


def svo_file_bytes(svo: SVO | DenseGrid) -> bytes:
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"voxelizer-test-{os.getpid()}"
    folder.mkdir(exist_ok=True)
    path = folder / f"{time.monotonic_ns()}.svo"
    voxelizer.save(svo, path)
    data = path.read_bytes()
    path.unlink()
    return data


def assert_same_grid(got: DenseGrid | SVO, expected: DenseGrid) -> None:
    assert got.shape == expected.shape
    assert np.array_equal(got.to_numpy(), expected.to_numpy())
    assert np.array_equal(got.origin, expected.origin) and got.voxel_size == expected.voxel_size


def files_under(folder: Path) -> list[str]:
    """Every file below `folder` (temporaries included), as sorted relative paths."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


# --- finding inputs and naming outputs ----------------------------------------------------------


def test_find_meshes_directories_globs_and_lists(tree, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    found = find_meshes(["in"])
    assert [p.as_posix() for p in found.paths] == [
        "in/a/b/sphere.ply",
        "in/a/gear.ply",
        "in/c/torus.stl",
        "in/top.ply",
    ]
    assert found.root == tree.resolve()
    globbed = find_meshes(["in/**/*.ply"])
    assert [p.as_posix() for p in globbed.paths] == [
        "in/a/b/sphere.ply",
        "in/a/gear.ply",
        "in/top.ply",
    ]
    assert globbed.root == tree.resolve()
    (tmp_path / "list.txt").write_text("# meshes\n\nin/c/torus.stl\n  in/a/*.ply  \nin/top.ply\n")
    listed = find_meshes(["@list.txt", "in/top.ply"])  # each file once
    assert [p.as_posix() for p in listed.paths] == ["in/c/torus.stl", "in/a/gear.ply", "in/top.ply"]
    assert listed.root == tree.resolve()  # the common folder of in/c, in/a and in
    # An output folder inside the input folder is not searched.
    (tree / "out").mkdir()
    shutil.copyfile(TREE["top.ply"], tree / "out" / "old.ply")
    assert len(find_meshes(["in"], exclude=tree / "out").paths) == 4


@pytest.mark.parametrize(
    "spec, message",
    [
        ("missing.ply", "missing.ply: no such file"),
        ("in/*.obj", "in/*.obj: no file matches"),
        ("@nolist.txt", "@nolist.txt: cannot read the list"),
        ("empty", "empty: no mesh files"),
    ],
)
def test_find_meshes_refuses_inputs_that_match_nothing(tree, tmp_path, monkeypatch, spec, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(voxelizer.MeshError, match=message.replace("*", r"\*")):
        find_meshes([spec])


def test_output_paths_mirror_and_refuse_collisions(tmp_path):
    root = tmp_path / "in"
    paths = [root / "a" / "x.ply", root / "y.obj"]
    assert output_paths(paths, "out", ".npz", root) == [Path("out/a/x.npz"), Path("out/y.npz")]
    assert output_paths(paths, "out", ".npz") == [Path("out/a/x.npz"), Path("out/y.npz")]
    with pytest.raises(OutputError, match=r"x\.ply and .*x\.obj would both write out/x\.svo"):
        output_paths([root / "x.ply", root / "x.obj"], "out", ".svo")
    with pytest.raises(OutputError, match="is not inside"):
        output_paths([tmp_path / "z.ply"], "out", ".svo", root)


# --- voxelize_many ------------------------------------------------------------------------------


@pytest.mark.parametrize("jobs", [1, 2])
def test_voxelize_many_equals_single_calls(tmp_path, jobs, capfd):
    bad = tmp_path / "bad.ply"
    bad.write_bytes(BAD_PLY)
    inputs = [*TREE.values(), bad, load_model("gear.ply")]
    results = list(voxelize_many(inputs, grid=GRID, jobs=jobs))
    assert sorted(r.index for r in results) == list(range(len(inputs)))
    by_index = {r.index: r for r in results}
    for index, source in enumerate(TREE.values()):
        result = by_index[index]
        assert result.status == "done" and result.error is None, result.error
        assert isinstance(result.result, SVO)
        assert svo_file_bytes(result.result) == single_svo_bytes(source)
        assert result.triangles == load_mesh_triangles(source)
        assert result.solid_voxels == single_dense(source).count()
    failed = by_index[len(TREE)]
    assert failed.status == "failed" and not failed.ok and failed.result is None
    assert failed.error is not None and failed.error.startswith(f"{bad}: cannot read mesh")
    in_memory = by_index[len(TREE) + 1]
    assert in_memory.input == "<Mesh #5>" and in_memory.status == "done"
    assert in_memory.result is not None
    assert_same_grid(in_memory.result, single_dense(TREE["a/gear.ply"]))
    assert "vulkan validation" not in capfd.readouterr().err


def load_mesh_triangles(path: Path) -> int:
    return voxelizer.load_mesh(path).triangle_count


@pytest.mark.parametrize("mode", ["surface", "both"])
def test_voxelize_many_modes_equal_single_calls(tree, mode):
    """The mode reaches every mesh; each result's count is that of its mode's voxels."""
    paths = sorted(tree.rglob("*.ply"))
    for result in voxelize_many(paths, grid=GRID, mode=mode, dense=True):
        expected = voxelizer.voxelize_dense(paths[result.index], grid=GRID, mode=mode)
        assert result.status == "done", result.error
        assert_same_grid(result.result, expected)
        assert result.solid_voxels == expected.count()
        assert not np.array_equal(expected.to_numpy(), single_dense(paths[result.index]).to_numpy())


def test_voxelize_many_dense_and_files(tree, tmp_path):
    paths = sorted(tree.rglob("*.ply"))
    dense = list(voxelize_many(paths, grid=GRID, dense=True))
    for result in dense:
        assert isinstance(result.result, DenseGrid)
        assert_same_grid(result.result, single_dense(paths[result.index]))
    out = tmp_path / "out"
    written = list(voxelize_many(paths, grid=GRID, out_dir=out, format="npz", root=tree))
    assert {r.output for r in written} == {
        out / p.relative_to(tree).with_suffix(".npz") for p in paths
    }
    for result in written:
        assert result.status == "done" and result.result is None and result.output is not None
        assert_same_grid(voxelizer.load(result.output), single_dense(paths[result.index]))


@pytest.mark.parametrize("mode", ["solid", "both"])
def test_svo_files_are_the_single_calls_with_dense_results_too(tree, tmp_path, mode):
    """An .svo output is written from the device's octree whatever `dense` asks of results
    kept in memory: the same bytes as from the dense grid, and as the single call's file."""
    paths = sorted(tree.rglob("*.ply"))
    for path in paths:  # the file of an octree is the file of the same voxels as a grid
        from_grid = svo_file_bytes(voxelizer.voxelize_dense(path, grid=GRID, mode=mode))
        assert from_grid == svo_file_bytes(voxelizer.voxelize(path, grid=GRID, mode=mode))
    files = {}
    for dense_results in (False, True):
        out = tmp_path / str(dense_results)
        run = voxelize_many(
            paths, grid=GRID, out_dir=out, root=tree, dense=dense_results, mode=mode
        )
        assert all(result.status == "done" for result in run)
        files[dense_results] = {p: (out / p).read_bytes() for p in files_under(out)}
    assert files[False] == files[True]
    if mode == "solid":
        for path in paths:
            relative = path.relative_to(tree).with_suffix(".svo").as_posix()
            assert files[True][relative] == single_svo_bytes(path)


def test_a_batch_decodes_its_format_once(tree, tmp_path, capsys, monkeypatch):
    """From `--format` (or format=) to the writers, the format is decoded once, into the
    OutputFormat every task carries: no output's file name is read for its format."""
    decoded: list[object] = []
    named = OutputFormat.named.__func__  # type: ignore[attr-defined]

    def recorded(cls: type[OutputFormat], name: object) -> OutputFormat:
        if not isinstance(name, OutputFormat):
            decoded.append(name)
        return named(cls, name)

    def refused(cls: type[OutputFormat], path: object) -> OutputFormat:
        raise AssertionError(f"{path}: a format decoded from a file name")

    monkeypatch.setattr(OutputFormat, "named", classmethod(recorded))
    monkeypatch.setattr(OutputFormat, "of_path", classmethod(refused))
    out = tmp_path / "cli"
    code, _, stderr = run_cli(capsys, tree, "--out-dir", out, "--grid", GRID, "--format", "npz")
    assert code == 0, stderr
    assert decoded == ["npz"] and len(files_under(out)) == len(TREE)
    decoded.clear()
    paths = sorted(tree.rglob("*.ply"))
    results = list(voxelize_many(paths, grid=GRID, out_dir=tmp_path / "api", format="VTI"))
    assert decoded == ["VTI"] and all(r.output.suffix == ".vti" for r in results)  # type: ignore[union-attr]


@pytest.mark.parametrize(("format", "mode"), [("npz", "solid"), ("svo", "solid"), ("npz", "both")])
def test_voxelize_many_counts_written_results_on_writer_threads(
    tree, tmp_path, monkeypatch, format, mode
):
    """A result that goes to a file is counted by the thread that writes it, not the one
    that drives the device; the count is the single call's all the same."""
    paths = sorted(tree.rglob("*.ply"))
    expected = [voxelizer.voxelize_dense(path, grid=GRID, mode=mode).count() for path in paths]
    counted_on: list[str] = []

    def recorded(count: Callable[[Any], int]) -> Callable[[Any], int]:
        def wrapper(self: Any) -> int:
            counted_on.append(threading.current_thread().name)
            return count(self)

        return wrapper

    monkeypatch.setattr(DenseGrid, "count", recorded(DenseGrid.count))
    monkeypatch.setattr(SVO, "count", recorded(SVO.count))
    out = tmp_path / "out"
    results = list(voxelize_many(paths, grid=GRID, out_dir=out, format=format, mode=mode))
    assert all(r.solid_voxels == expected[r.index] for r in results)
    assert counted_on and all(name.startswith("voxelizer-write") for name in counted_on)


def test_voxelize_many_checks_before_any_work(tmp_path):
    inputs = [TREE["top.ply"], tmp_path / "missing.ply"]
    with pytest.raises(GridError):
        voxelize_many(inputs, grid=0)
    with pytest.raises(OutputError, match="cannot write 'xyz'"):
        voxelize_many(inputs, out_dir=tmp_path / "out", format="xyz")
    with pytest.raises(OutputError, match="exclude each other"):
        voxelize_many(inputs, out_dir=tmp_path / "out", overwrite=True, skip_existing=True)
    with pytest.raises(TypeError, match="progress"):
        voxelize_many(inputs, progress=print)  # type: ignore[call-arg]
    assert not (tmp_path / "out").exists()


def test_voxelize_many_existing_outputs(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    keep = out / "torus_knot.svo"  # inputs named by their path below their common folder
    keep.write_bytes(b"precious")
    inputs = [TREE["top.ply"], TREE["a/gear.ply"]]
    results = {r.index: r for r in voxelize_many(inputs, grid=GRID, out_dir=out)}
    assert (
        results[0].status == "failed"
        and results[0].error == f"{TREE['top.ply']}: {keep}: file exists"
    )
    assert results[1].status == "done" and keep.read_bytes() == b"precious"
    resumed = {
        r.index: r for r in voxelize_many(inputs, grid=GRID, out_dir=out, skip_existing=True)
    }
    assert [resumed[0].status, resumed[1].status] == ["skipped", "skipped"]
    replaced = list(voxelize_many(inputs, grid=GRID, out_dir=out, overwrite=True))
    assert all(r.status == "done" for r in replaced)
    assert keep.read_bytes() == single_svo_bytes(TREE["top.ply"])


def test_a_dead_worker_process_loses_nothing(tmp_path, capfd):
    """A worker killed while the batch runs: its meshes go to a new worker, each output is
    written once and whole, each result comes once."""
    sources = [TREE["c/torus.stl"], TREE["a/b/sphere.ply"]] * 6
    inputs = []
    for number, source in enumerate(sources):
        inputs.append(tmp_path / "in" / f"m{number:02d}{source.suffix}")
        inputs[-1].parent.mkdir(exist_ok=True)
        shutil.copyfile(source, inputs[-1])
    out = tmp_path / "out"
    killed = []
    results: list[BatchResult] = []
    with voxelize_many(inputs, grid=64, jobs=2, out_dir=out, format="svo") as run:
        for result in run:
            results.append(result)
            if not killed:
                victim = multiprocessing.active_children()[0]
                os.kill(victim.pid, signal.SIGKILL)
                killed.append(victim.pid)
    assert killed
    assert sorted(r.index for r in results) == list(range(len(inputs)))
    assert all(r.status == "done" for r in results), [r.error for r in results if r.error]
    assert files_under(out) == sorted(f"m{n:02d}.svo" for n in range(len(inputs)))
    for number, source in enumerate(sources):
        assert (out / f"m{number:02d}.svo").read_bytes() == single_svo_bytes(source, 64)
    assert "vulkan validation" not in capfd.readouterr().err


def test_the_first_worker_runs_in_this_process(tmp_path):
    """With jobs=3, one worker voxelizes here from the start (a one-device batch's pace while
    the others start) and two are spawned; every mesh comes once, equal to single calls,
    whichever worker took it."""
    sources = [TREE["c/torus.stl"], TREE["a/b/sphere.ply"], TREE["a/gear.ply"]] * 3
    spawned: set[int] = set()
    results: list[BatchResult] = []
    with voxelize_many(sources, grid=48, jobs=3) as run:
        for result in run:
            results.append(result)
            spawned.update(child.pid for child in multiprocessing.active_children())
    assert len(spawned) == 2
    assert sorted(r.index for r in results) == list(range(len(sources)))
    for result in results:
        assert result.status == "done", result.error
        single = voxelizer.voxelize(sources[result.index], grid=48)
        assert_same_svo(result.result, single)


def test_warnings_name_their_mesh_once_with_a_worker_here_and_one_spawned(tmp_path):
    """Open meshes voxelized by the worker in this process while this thread re-warns the
    results already in (naming each mesh): every result keeps exactly its own warning, and
    each warning seen here names one mesh once."""
    open_box = trimesh.Trimesh(*box((0.1, 0.2, 0.3), (0.9, 0.7, 0.8)), process=False)
    lid = open_box.face_normals[:, 2] > 0.5  # without its top, every column is open
    open_box = trimesh.Trimesh(open_box.vertices, open_box.faces[~lid], process=False)
    inputs = []
    for number in range(12):
        inputs.append(tmp_path / f"open{number:02d}.ply")
        open_box.export(inputs[-1])
    expected = voxelizer.mesh_warnings(
        voxelizer.voxelize_dense(inputs[0], grid=32, warn=False).stats.counts, "parity"
    )
    assert [type(w) for w in expected] == [voxelizer.OpenMeshWarning]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        results = list(voxelize_many(inputs, grid=32, jobs=2))
    assert len(results) == len(inputs)
    for result in results:
        assert [str(w) for w in result.warnings] == [str(expected[0])], result.input
    texts = sorted(str(item.message) for item in seen)
    assert texts == sorted(f"{path}: {expected[0]}" for path in inputs)


def test_a_device_that_does_not_open_here_ends_the_batch():
    """The first worker's device (this process's) does not open: a DeviceError naming it,
    no hang, the spawned worker stopped."""
    sources = [TREE["c/torus.stl"], TREE["a/b/sphere.ply"]] * 4
    with pytest.raises(DeviceError, match="no-such-device"):
        list(voxelize_many(sources, grid=32, devices=["no-such-device", 0]))
    assert multiprocessing.active_children() == []


def test_a_worker_killed_while_starting_is_replaced(tmp_path):
    """A worker that dies before it is ready (killed at once, long before its imports end)
    held no meshes: a new one takes its place and the batch completes."""
    inputs = [TREE["c/torus.stl"], TREE["a/b/sphere.ply"]] * 2
    killed: list[int] = []

    def kill_the_first_worker() -> None:
        deadline = time.monotonic() + 60
        while not killed and time.monotonic() < deadline:
            for child in multiprocessing.active_children():
                os.kill(child.pid, signal.SIGKILL)
                killed.append(child.pid)
                return
            time.sleep(0.001)

    killer = threading.Thread(target=kill_the_first_worker)
    killer.start()
    with voxelize_many(inputs, grid=64, jobs=2) as run:
        results = sorted(run, key=lambda r: r.index)
    killer.join()
    assert killed
    assert [r.status for r in results] == ["done"] * len(inputs)
    for result, source in zip(results, inputs):
        assert_same_svo(result.result, voxelizer.voxelize(source, grid=64))


# --- the command line ---------------------------------------------------------------------------


def test_cli_directory_tree_is_mirrored(tree, tmp_path, capsys):
    out = tmp_path / "out"
    code, stdout, stderr = run_cli(
        capsys, tree, "--out-dir", out, "--grid", GRID, "--format", "npz"
    )
    assert code == 0 and stderr == "", stderr
    assert files_under(out) == ["a/b/sphere.npz", "a/gear.npz", "c/torus.npz", "top.npz"]
    for relative, source in TREE.items():
        assert_same_grid(
            voxelizer.load(out / Path(relative).with_suffix(".npz")), single_dense(source)
        )
    (summary,) = stdout.strip().splitlines()
    assert summary.startswith("4 meshes: 4 done, 0 skipped, 0 failed in ")
    assert summary.endswith(f"meshes/s) -> {out}")


def test_cli_globs_and_lists(tree, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, stderr = run_cli(capsys, "in/a/**/*.ply", "--out-dir", "glob", "--grid", GRID)
    assert code == 0, stderr
    assert files_under(tmp_path / "glob") == ["b/sphere.svo", "gear.svo"]
    assert (tmp_path / "glob/gear.svo").read_bytes() == single_svo_bytes(TREE["a/gear.ply"])
    Path("list.txt").write_text("in/top.ply\nin/c/torus.stl\n")
    code, _, stderr = run_cli(capsys, "@list.txt", "--out-dir", "listed", "--grid", GRID)
    assert code == 0, stderr
    assert files_under(tmp_path / "listed") == ["c/torus.svo", "top.svo"]
    assert (tmp_path / "listed/c/torus.svo").read_bytes() == single_svo_bytes(TREE["c/torus.stl"])
    # Several files, each named: their common folder is the root.
    code, _, stderr = run_cli(
        capsys, "in/top.ply", "in/a/gear.ply", "--out-dir", "named", "--grid", GRID
    )
    assert code == 0, stderr
    assert files_under(tmp_path / "named") == ["a/gear.svo", "top.svo"]
    # One file with --out-dir is a batch of one.
    code, _, stderr = run_cli(capsys, "in/top.ply", "--out-dir", "one", "--grid", GRID)
    assert code == 0 and files_under(tmp_path / "one") == ["top.svo"], stderr


def test_cli_bad_file_is_one_line_and_the_batch_goes_on(tree, tmp_path, capsys):
    bad = tree / "a" / "broken.ply"
    bad.write_bytes(BAD_PLY)
    out = tmp_path / "out"
    code, stdout, stderr = run_cli(capsys, tree, "--out-dir", out, "--grid", GRID)
    assert code == 1
    with pytest.raises(voxelizer.MeshError) as single:  # the single call's own words
        voxelizer.load_mesh(bad)
    assert str(single.value).startswith(f"{bad}: cannot read mesh")
    assert stderr.splitlines() == [f"voxelize: error: {single.value}"]
    assert files_under(out) == ["a/b/sphere.svo", "a/gear.svo", "c/torus.svo", "top.svo"]
    assert stdout.startswith("5 meshes: 4 done, 0 skipped, 1 failed in ")


def test_cli_log_records(tree, tmp_path, capsys):
    bad = tree / "bad.ply"
    bad.write_bytes(BAD_PLY)
    vertices, faces = box((-1, -1, -1), (1, 1, 1))
    open_box = tree / "open_box.ply"  # the z = -1 side missing: every column it spans is open
    trimesh.Trimesh(vertices, np.delete(faces, [4, 10], axis=0), process=False).export(open_box)
    sources = {**TREE, "open_box.ply": open_box}
    log = tmp_path / "log.jsonl"
    out = tmp_path / "out"
    code, _, _ = run_cli(capsys, tree, "--out-dir", out, "--grid", GRID, "--log", log)
    assert code == 1
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 6
    by_input = {Path(r["input"]).relative_to(tree).as_posix(): r for r in records}
    assert by_input["open_box.ply"]["open_columns"] > 0
    for relative, source in sources.items():
        record = by_input[relative]
        with (
            pytest.warns(voxelizer.OpenMeshWarning) if relative == "open_box.ply" else nullcontext()
        ):
            expected = voxelizer.voxelize(source, grid=GRID)
        assert set(record) == {
            "input",
            "output",
            "status",
            "triangles",
            "solid_voxels",
            "open_columns",
            "seconds",
            "error",
            "device",
            "warnings",
            "thin",
        }
        # the open box is empty by parity: open, and thin (winding would fill it)
        assert record["thin"] is (relative == "open_box.ply")
        expected_starts = ["the mesh is not closed", "the solid result is empty"]
        if relative != "open_box.ply":
            expected_starts = []
        texts = sorted(record["warnings"])
        assert len(texts) == len(expected_starts)
        assert all(t.startswith(start) for t, start in zip(texts, expected_starts))
        assert record["output"] == str(out / Path(relative).with_suffix(".svo"))
        assert record["status"] == "done" and record["error"] is None
        assert record["triangles"] == expected.stats.counts["triangles"]
        assert record["solid_voxels"] == expected.count()
        assert record["open_columns"] == expected.stats.counts["open_columns"]
        assert isinstance(record["seconds"], float) and 0 < record["seconds"] < 60
        assert record["device"] == expected.stats.device
    failed = by_input["bad.ply"]
    assert failed["status"] == "failed" and failed["output"] == str(out / "bad.svo")
    assert failed["error"].startswith(f"{bad}: cannot read mesh")
    assert failed["triangles"] is None and failed["solid_voxels"] is None
    # A second run appends its records (here: all skipped).
    code, _, _ = run_cli(
        capsys, tree, "--out-dir", out, "--grid", GRID, "--log", log, "--skip-existing"
    )
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 12
    assert sorted(r["status"] for r in records[6:]) == ["failed"] + ["skipped"] * 5


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_command_leaves_at_once_with_everything_written(tree, tmp_path, jobs):
    """`python -m voxelizer` (as the `voxelize` script) ends by os._exit once main returns:
    the summary still reaches a pipe, the log has every record, the files are whole and
    equal to the single calls', a failed mesh still makes the status 1, and no worker or
    reading process outlives the command's own wait for it."""
    bad = tree / "bad.ply"
    bad.write_bytes(BAD_PLY)
    out, log = tmp_path / "out", tmp_path / "log.jsonl"
    command = [sys.executable, "-m", "voxelizer", str(tree), "--out-dir", str(out)]
    command += ["--grid", str(GRID), "--format", "npz", "--log", str(log), "--jobs", str(jobs)]
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # as users run it
    result = subprocess.run(
        command, cwd=PROJECT_ROOT, env=buffered, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("5 meshes: 4 done, 0 skipped, 1 failed in ")
    assert result.stdout.endswith("\n")
    assert result.stderr.splitlines()[-1].startswith(f"voxelize: error: {bad}: cannot read mesh")
    assert len(log.read_text().splitlines()) == 5
    assert files_under(out) == ["a/b/sphere.npz", "a/gear.npz", "c/torus.npz", "top.npz"]
    for relative, source in TREE.items():
        assert_same_grid(
            voxelizer.load(out / Path(relative).with_suffix(".npz")), single_dense(source)
        )


def test_cli_jobs_2_equals_jobs_1(tree, tmp_path, capfd):
    outputs = {}
    for jobs in (1, 2):
        out = tmp_path / f"out{jobs}"
        code, _, stderr = run_cli(capfd, tree, "--out-dir", out, "--grid", 32, "--jobs", jobs)
        assert code == 0, stderr
        assert "vulkan validation" not in stderr
        outputs[jobs] = {name: (out / name).read_bytes() for name in files_under(out)}
    assert sorted(outputs[1]) == ["a/b/sphere.svo", "a/gear.svo", "c/torus.svo", "top.svo"]
    assert outputs[1] == outputs[2]
    assert outputs[1]["a/gear.svo"] == single_svo_bytes(TREE["a/gear.ply"], 32)


def test_cli_devices_are_checked_before_any_work(tree, tmp_path, capsys):
    out = tmp_path / "out"
    code, stdout, stderr = run_cli(capsys, tree, "--out-dir", out, "--devices", "0,7")
    assert code == 1 and stdout == ""
    assert stderr.startswith("voxelize: error: no Vulkan device with index 7")
    assert not out.exists()
    code, _, stderr = run_cli(capsys, tree, "--out-dir", out, "--devices", "0,0", "--grid", GRID)
    assert code == 0 and files_under(out) == [
        "a/b/sphere.svo",
        "a/gear.svo",
        "c/torus.svo",
        "top.svo",
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        (["{top}", "{gear}"], "--out-dir DIR is required with several inputs"),
        (["{tree}"], "--out-dir DIR is required"),
        (["{tree}/**/*.ply"], "--out-dir DIR is required"),
        (["{tree}", "--out-dir", "{out}", "-o", "x.svo"], "-o names one output"),
        (["{tree}", "--out-dir", "{out}", "--preview", "x.png"], "--preview names one output"),
        (["{tree}", "--out-dir", "{out}", "--stats"], "for a batch use --log FILE"),
        (["{tree}", "--out-dir", "{out}", "--force", "--skip-existing"], "exclude each other"),
        (["{tree}", "--out-dir", "{out}", "--up-axis", "y"], "--up-axis is for --format vox"),
        (["{tree}", "--out-dir", "{out}", "--format", "xyz"], "cannot write 'xyz'"),
        (["{tree}", "--out-dir", "{out}", "--jobs", "0"], "expected a whole number from 1"),
        (["{top}", "--jobs", "2"], "--jobs is for batches"),
        (["{top}", "--log", "{out}/log"], "--log is for batches"),
    ],
)
def test_cli_batch_usage_errors(tree, tmp_path, capsys, args, message):
    values = {
        "tree": tree,
        "top": tree / "top.ply",
        "gear": tree / "a/gear.ply",
        "out": tmp_path / "out",
    }
    stderr = cli_usage_error(capsys, *(arg.format(**values) for arg in args))
    assert message in stderr
    assert not (tmp_path / "out").exists()


def test_cli_refuses_to_overwrite_without_force(tree, tmp_path, capsys):
    out = tmp_path / "out"
    (out / "a").mkdir(parents=True)
    (out / "a/gear.svo").write_bytes(b"precious")
    code, stdout, stderr = run_cli(capsys, tree, "--out-dir", out, "--grid", GRID)
    assert code == 1 and stdout == ""
    assert stderr.strip() == (
        f"voxelize: error: {out / 'a/gear.svo'}: file exists (use --force to overwrite, or "
        "--skip-existing to resume)"
    )
    assert files_under(out) == ["a/gear.svo"]  # nothing written
    assert (out / "a/gear.svo").read_bytes() == b"precious"
    code, _, stderr = run_cli(capsys, tree, "--out-dir", out, "--grid", GRID, "--skip-existing")
    assert code == 0 and (out / "a/gear.svo").read_bytes() == b"precious"
    assert len(files_under(out)) == 4
    code, _, stderr = run_cli(capsys, tree, "--out-dir", out, "--grid", GRID, "--force")
    assert code == 0 and (out / "a/gear.svo").read_bytes() == single_svo_bytes(TREE["a/gear.ply"])


def test_cli_progress_over_meshes(tree, tmp_path, capsys, monkeypatch):
    import voxelizer.batch.cli
    from voxelizer.progress import TerminalProgress

    monkeypatch.setattr(
        voxelizer.batch.cli,
        "TerminalProgress",
        functools.partial(TerminalProgress, delay=0.0, interval=0.0),
    )
    (tree / "bad.ply").write_bytes(BAD_PLY)
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    code = voxelizer.cli.main([str(tree), "--out-dir", str(tmp_path / "out"), "--grid", str(GRID)])
    assert code == 1
    text = terminal.getvalue()
    assert "\rmeshes:   0% (0/5)" in text and "\rmeshes: 100% (5/5)" in text
    # The error has a line of its own: the progress line is blanked before it.
    error_line = next(line for line in text.split("\n") if "voxelize: error:" in line)
    blanked, message = error_line.split("voxelize: error: ")
    drawn = blanked.split("\r")  # ..., the progress text, the blanks over it, ""
    assert drawn[-1] == "" and drawn[-2] == " " * len(drawn[-3]) and drawn[-3].startswith("meshes")
    assert message.startswith(f"{tree / 'bad.ply'}: cannot read")
    assert text.endswith("\r")  # the line is blanked at the end


# --- interrupted and resumed --------------------------------------------------------------------


@pytest.mark.parametrize("jobs", [1, 2])
def test_interrupted_batch_leaves_whole_files_and_resumes(tmp_path, jobs):
    """Ctrl-C part way: status 130, every file present is whole; --skip-existing then does
    the rest and the outputs are those of an uninterrupted run."""
    sources = {f"m{n:02d}.stl": TREE["c/torus.stl"] for n in range(24)}
    folder = tmp_path / "in"
    folder.mkdir()
    for name, source in sources.items():
        shutil.copyfile(source, folder / name)
    out = tmp_path / "out"
    # `python -m voxelizer`, with Ctrl-C's handler whatever SIGINT's state in this process
    as_module = "import runpy; runpy.run_module('voxelizer', run_name='__main__', alter_sys=True)"
    command = [sys.executable, "-c", RESTORE_SIGINT + as_module, str(folder), "--out-dir", str(out)]
    command += ["--grid", "64", "--format", "npz", "--jobs", str(jobs)]
    process = subprocess.Popen(
        command, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while not (out.is_dir() and any(out.glob("*.npz"))) and time.monotonic() < deadline:
        time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == "voxelize: interrupted"
    assert "Traceback" not in stderr
    assert " before the interrupt: " in stdout
    written = files_under(out)
    assert 1 <= len(written) < len(sources), written  # no temporary left
    expected = single_dense(TREE["c/torus.stl"], 64)
    for name in written:
        assert_same_grid(voxelizer.load(out / name), expected)
    resumed = subprocess.run(
        [*command, "--skip-existing"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr
    done = len(sources) - len(written)
    assert resumed.stdout.startswith(f"24 meshes: {done} done, {len(written)} skipped, 0 failed")
    assert files_under(out) == sorted(name.replace(".stl", ".npz") for name in sources)
    for name in files_under(out):
        assert_same_grid(voxelizer.load(out / name), expected)


# --- the DataLoader recipe: a fork pool whose workers each create a Voxelizer ------------------

_worker_voxelizer: voxelizer.Voxelizer | None = None
POOL_TIMEOUT_S = 300  # a hang fails the test instead of stalling the run


def init_worker() -> None:
    """README's worker_init_fn: this worker's own device and pipelines."""
    global _worker_voxelizer
    _worker_voxelizer = voxelizer.Voxelizer()


def worker_item(path: str) -> tuple[int, bytes, list[str]]:
    """A Dataset's __getitem__: (pid, packed voxels, validation messages of this worker)."""
    assert _worker_voxelizer is not None
    voxels = np.asarray(_worker_voxelizer.voxelize_dense(path, grid=GRID))
    messages = list(_worker_voxelizer.device.validation_messages)
    return os.getpid(), np.packbits(voxels).tobytes(), messages


def test_dataloader_recipe_in_a_worker_pool_after_voxelize_many():
    """After the parent ran voxelize_many (its shared Voxelizer and threads live), a pool
    whose initializer creates a Voxelizer per worker (DataLoader's worker_init_fn) gives the
    single call's voxels in every worker, without a hang or a validation message. The pool
    forks where the driver survives a fork (Mesa's: lavapipe, where CI runs), else it is
    started by spawn, as the README's recipe says (NVIDIA's driver refused or hung)."""
    paths = [str(p) for p in TREE.values()]
    assert all(r.ok for r in voxelize_many(paths, grid=GRID))
    start = "spawn" if Instance.fork_unsafe else "fork"
    with multiprocessing.get_context(start).Pool(2, initializer=init_worker) as pool:
        items = pool.map_async(worker_item, paths * 2).get(timeout=POOL_TIMEOUT_S)
    for (pid, bits, messages), path in zip(items, paths * 2):
        assert pid != os.getpid()
        assert bits == np.packbits(single_dense(Path(path)).to_numpy()).tobytes()
        assert messages == []
    assert all(r.ok for r in voxelize_many(paths, grid=GRID))  # the parent's still works


def test_remove_temporaries_takes_only_the_targets_own(tmp_path):
    """What a killed writer of `a.npz` leaves is removed; nothing else is."""
    target = tmp_path / "a.npz"
    left = [tmp_path / ".a.npz.0123abcd.tmp", tmp_path / ".a.npz.ffffffff.tmp"]
    kept = [
        target,
        tmp_path / ".b.npz.0123abcd.tmp",  # another output's
        tmp_path / ".a.npz.0123abcd.tmp.keep",
        tmp_path / ".a.npz.xyz.tmp",  # not a name the writer makes
        tmp_path / "a.npz.0123abcd.tmp",
    ]
    for path in left + kept:
        path.write_bytes(b"x")
    assert remove_temporaries(target) == 2
    assert files_under(tmp_path) == sorted(p.name for p in kept)
    assert remove_temporaries(tmp_path / "missing" / "a.npz") == 0


def test_a_worker_holds_at_most_its_share_of_the_meshes_left():
    """The worker ready first takes half of a small batch of two workers, not its whole
    backlog; a large batch is held back by the backlog; the last meshes are spread out."""
    assert worker_share(outstanding=6, workers=2, backlog=18) == 3
    assert worker_share(outstanding=7, workers=2, backlog=18) == 4
    assert worker_share(outstanding=1000, workers=4, backlog=18) == 18
    assert worker_share(outstanding=3, workers=8, backlog=18) == 1
    assert worker_share(outstanding=0, workers=2, backlog=18) == 1


def test_a_slow_file_does_not_hold_up_the_meshes_after_it(monkeypatch):
    """A mesh goes to the device as soon as it is read: while the first file is still being
    read, the second's result comes out; the first's follows once it is read."""
    from voxelizer.batch import worker

    first_read = threading.Event()
    files = [shared_model("torus.stl"), shared_model("suzanne.ply")]
    prepared = worker.prepared_mesh

    def slow_first(source, *args, **kwargs):
        if Path(source) == files[0]:
            assert first_read.wait(20), "the batch waited for the first file"
        return prepared(source, *args, **kwargs)

    monkeypatch.setattr(worker, "prepared_mesh", slow_first)
    results = voxelize_many(files, grid=16, load_processes=0, threads=2)
    second = next(results)
    first_read.set()
    rest = list(results)
    assert [second.index] + [r.index for r in rest] == [1, 0]
    assert [r.status for r in (second, *rest)] == ["done", "done"]
    expected = voxelizer.voxelize(files[0], 16).to_numpy()
    assert np.array_equal(rest[0].result.to_numpy(), expected)
