"""Batches against hostile inputs and a hostile environment: outputs that would replace the
inputs, names that collide or lead out of the output folder, a log that names an input,
symlinked mesh files (caches of Hugging Face, git-annex, DVC), a current folder holding a
numpy.py, more workers than meshes, a Ray address where nothing listens, a batch of many
thousands of paths to plan.

Every refusal happens before any file is written and leaves the inputs as they were."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import trimesh

import voxelizer
from voxelizer import OutputError, voxelize_many
from voxelizer.batch.engine import capped_workers
from voxelizer.batch.tasks import MeshTask

from ..helpers import PROJECT_MODELS, assert_one_line_error, cli_usage_error, run_cli
from ..shapes import box

PROJECT_ROOT = Path(__file__).resolve().parents[2]
GRID = 16
GEAR = PROJECT_MODELS / "gear.ply"
KNOT = PROJECT_MODELS / "torus_knot.ply"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def folder_of_meshes(folder: Path, count: int = 2) -> list[Path]:
    """`count` copies of the gear, m0.ply ..., in `folder` (created)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"m{number}.ply" for number in range(count)]
    for path in paths:
        shutil.copyfile(GEAR, path)
    return paths


# --- 1. no output may be an input -----------------------------------------------------------


def test_a_batch_never_writes_over_its_inputs(tmp_path, capsys):
    meshes = folder_of_meshes(tmp_path / "m")
    before = {path: digest(path) for path in meshes}
    code, out, err = run_cli(
        capsys, *meshes, "--grid", GRID, "--out-dir", tmp_path / "m", "--format", "ply", "--force"
    )
    assert_one_line_error(code, out, err, "an output would replace the input")
    with pytest.raises(OutputError, match="would replace the input"):
        voxelize_many(meshes, grid=GRID, out_dir=tmp_path / "m", format="ply", overwrite=True)
    assert {path: digest(path) for path in meshes} == before


def test_no_output_replaces_an_input_through_a_link(tmp_path):
    """The output folder a symlink to the input folder; an output that is a hard link to
    an input: the input would be replaced all the same."""
    meshes = folder_of_meshes(tmp_path / "m")
    (tmp_path / "alias").symlink_to(tmp_path / "m")
    with pytest.raises(OutputError, match="would replace the input"):
        voxelize_many(meshes, grid=GRID, out_dir=tmp_path / "alias", format="ply", overwrite=True)
    out = tmp_path / "out"
    out.mkdir()
    os.link(meshes[0], out / "m0.ply")  # the output of m/m0.ply, a second name of it
    with pytest.raises(OutputError, match="would replace the input"):
        voxelize_many(meshes, grid=GRID, out_dir=out, format="ply", overwrite=True)
    assert voxelizer.load_mesh(meshes[0]).triangle_count == 1920


# --- 2. names that collide ----------------------------------------------------------------


@pytest.mark.parametrize("overwrite", [True, False])
def test_an_in_memory_mesh_and_a_file_never_share_an_output(tmp_path, overwrite):
    """With overwrite, only the last result survived; without it, the second failed with
    "file exists" for a file the batch itself had just written. Refused before any work."""
    d = tmp_path / "d"
    folder_of_meshes(d, 1)
    (d / "m0.ply").rename(d / "mesh0.ply")
    arrays = (voxelizer.load_mesh(GEAR).vertices, voxelizer.load_mesh(GEAR).faces)
    with pytest.raises(OutputError, match=r"would both write .*mesh0\.svo"):
        voxelize_many([arrays, d / "mesh0.ply"], grid=GRID, out_dir=d / "out", overwrite=overwrite)
    assert not (d / "out").exists()


# --- 3. a log that names an input, the list or an output ------------------------------------


def test_the_log_never_names_an_input_the_list_or_an_output(tmp_path, capsys):
    meshes = folder_of_meshes(tmp_path / "m")
    listing = tmp_path / "list.txt"
    listing.write_text("\n".join(map(str, meshes)) + "\n")
    kept = {path: digest(path) for path in [*meshes, listing]}
    out = tmp_path / "out"
    for log, named in [
        (meshes[1], "an input"),
        (listing, "an input"),
        (out / "m0.svo", "an output"),
    ]:
        err = cli_usage_error(capsys, f"@{listing}", "--grid", GRID, "--out-dir", out, "--log", log)
        assert f"--log {log} names {named} of the batch" in err
    assert {path: digest(path) for path in kept} == kept
    assert not out.exists()


# --- 4. Ray rows' names stay inside the output folder ---------------------------------------


def ray_batch(tmp_path: Path, **keywords):
    pytest.importorskip("ray")
    from voxelizer.batch.ray import VoxelizeBatch

    # A device and no reading processes named: finding them would ask Ray, which starts a
    # local cluster when none runs (the calls here need none).
    return VoxelizeBatch(
        grid=GRID, out_dir=tmp_path / "out", device=0, load_processes=0, **keywords
    )


def test_ray_row_names_never_lead_out_of_the_output_folder(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "link").symlink_to(tmp_path)  # a folder inside out_dir that leads out of it
    names = [
        "../../escaped.ply",
        str(tmp_path / "absolute.ply"),
        "sub/../../x.ply",
        "link/through.ply",
        "fine/inside.ply",
    ]
    data = GEAR.read_bytes()
    batch = ray_batch(tmp_path)
    try:
        rows = batch(
            {"bytes": np.array([data] * len(names), object), "name": np.array(names, object)}
        )
    finally:
        batch.voxelizer.close()
    statuses = list(rows["status"])
    assert statuses == ["failed"] * 4 + ["done"], list(rows["error"])
    for error in list(rows["error"])[:4]:
        assert "outside the output folder" in error, error
    assert sorted(p.name for p in tmp_path.rglob("*.svo")) == ["inside.svo"]
    assert (out / "fine" / "inside.svo").is_file()


def test_ray_rows_of_one_name_fail_all_but_the_first(tmp_path):
    data = GEAR.read_bytes()
    batch = ray_batch(tmp_path, overwrite=True)
    try:
        rows = batch(
            {"bytes": np.array([data] * 3, object), "name": np.array(["model.ply"] * 3, object)}
        )
    finally:
        batch.voxelizer.close()
    assert list(rows["status"]) == ["done", "failed", "failed"]
    assert all("writes" in error and "too" in error for error in list(rows["error"])[1:])


def test_a_ray_row_never_writes_over_its_input(tmp_path):
    meshes = folder_of_meshes(tmp_path / "m", 1)
    batch = ray_batch(tmp_path)
    try:
        rows = batch(
            {
                "path": np.array([str(meshes[0])], object),
                "output": np.array([str(meshes[0])], object),
            }
        )
    finally:
        batch.voxelizer.close()
    assert list(rows["status"]) == ["failed"]
    assert "would replace the input" in rows["error"][0]
    assert voxelizer.load_mesh(meshes[0]).triangle_count == 1920


# --- 5. the current folder's modules never run in helpers or workers ---------------------------

HIJACKED = """
import sys
from pathlib import Path
import voxelizer
from voxelizer import voxelize_many

paths = sys.argv[1:]
voxelizer.voxelize(paths[0], 16)  # Vulkan is open: helpers are started by exec, not forked
results = list(voxelize_many(paths, grid=16, jobs=2, load_processes=1))
print(" ".join(r.status for r in results))
"""


@pytest.mark.slow
def test_a_numpy_py_in_the_current_folder_never_runs(tmp_path):
    """Helpers exec'd with `-c` and workers spawned by multiprocessing started Python with
    the current folder first on the path: a numpy.py there ran in them."""
    hostile = tmp_path / "cwd"
    hostile.mkdir()
    for module in ("numpy", "multiprocessing"):
        (hostile / f"{module}.py").write_text(
            f"open({str(tmp_path / (module + '.ran'))!r}, 'a').write('ran')\n"
            "raise SystemExit('hijacked')\n"
        )
    script = tmp_path / "script" / "batch.py"  # elsewhere: its own folder is its path
    script.parent.mkdir()
    script.write_text(HIJACKED)
    inputs = [str(GEAR), str(KNOT), str(GEAR), str(KNOT)]
    run = subprocess.run(
        [sys.executable, str(script), *inputs],
        cwd=hostile,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["done"] * 4, run.stdout
    assert sorted(p.name for p in tmp_path.glob("*.ran")) == []


# --- 7. workers: no more than meshes and the host take ------------------------------------------


def test_more_workers_than_meshes_are_not_started(tmp_path):
    meshes = folder_of_meshes(tmp_path / "m")
    seen: set[int] = set()
    with pytest.warns(UserWarning, match="6 workers asked for, 2 started"):
        run = voxelize_many(meshes, grid=GRID, jobs=6)
    with run:
        for _ in run:
            seen.update(child.pid for child in multiprocessing.active_children())
    assert len(seen) <= 1  # the worker here and at most one process


def test_a_worker_process_the_host_refuses_leaves_the_others_working(tmp_path, monkeypatch):
    """A process limit reached: the batch goes on with the worker here, and says so (the
    worker forked or spawned, as this process allows)."""
    from multiprocessing.context import ForkProcess, SpawnProcess

    def refused(self):  # what fork/exec raise at a process limit
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(SpawnProcess, "start", refused)
    monkeypatch.setattr(ForkProcess, "start", refused)
    meshes = folder_of_meshes(tmp_path / "m", 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = list(voxelize_many(meshes, grid=GRID, jobs=2))
    assert [r.status for r in results] == ["done"] * 3
    assert any("cannot start a worker process" in str(w.message) for w in caught), caught


def test_workers_are_capped_by_the_host_and_the_cap_is_stated(monkeypatch):
    """`--jobs 10000` met the host's process limit: two workers per core at most (or one per
    device, where there are more), and a warning that names each cap."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    with pytest.warns(UserWarning, match=r"10000 workers asked for, 4 started: .* 2 per CPU core"):
        assert capped_workers(10000, meshes=100, devices=1) == 4
    with pytest.warns(UserWarning, match="8 started"):
        assert capped_workers(10000, meshes=100, devices=8) == 8
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert capped_workers(3, meshes=100, devices=1) == 3


def test_jobs_must_be_a_whole_number():
    with pytest.raises(voxelizer.ArgumentError, match="jobs must be a whole number"):
        voxelize_many([GEAR], grid=GRID, jobs="2")


# --- 8, 9. loops and names too long for --out-dir and --log -------------------------------------


@pytest.mark.parametrize("option", ["--out-dir", "--log"])
def test_batch_paths_that_loop_or_are_too_long_are_one_error_line(tmp_path, capsys, option):
    meshes = folder_of_meshes(tmp_path / "m")
    (tmp_path / "loop").symlink_to("partner")
    (tmp_path / "partner").symlink_to("loop")
    for path, words in ((tmp_path / "loop", "symlink"), (tmp_path / ("n" * 300), "too long")):
        target = path if option == "--out-dir" else path / "log.jsonl"
        args = [*meshes, "--grid", GRID, "--out-dir", tmp_path / "out", option, target]
        code, out, err = run_cli(capsys, *args)
        assert_one_line_error(code, out, err, words)


# --- 15. a Ray address where nothing listens ----------------------------------------------------


@pytest.mark.slow
def test_a_ray_address_where_nothing_listens_is_one_line_at_once(tmp_path):
    """In a process of its own: one connected to a cluster already would use that one."""
    pytest.importorskip("ray")
    meshes = folder_of_meshes(tmp_path / "m")
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "voxelizer", *map(str, meshes), "--grid", str(GRID),
         "--out-dir", str(tmp_path / "out"), "--ray", "127.0.0.1:1"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert time.monotonic() - started < 60
    assert_one_line_error(
        run.returncode, run.stdout, run.stderr, "cannot reach the Ray cluster at 127.0.0.1:1"
    )


SILENT_CLUSTER = """
import socket, sys, time
from voxelizer.batch.ray_start import connect
from voxelizer import DeviceError

listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen()
address = f"127.0.0.1:{listener.getsockname()[1]}"
started = time.monotonic()
try:
    connect(address, seconds=3.0)
except DeviceError as error:
    print(round(time.monotonic() - started), error, flush=True)
"""


@pytest.mark.slow
def test_a_ray_address_that_never_answers_times_out_naming_it():
    """Something listens, nothing answers as a cluster: ray.init would wait for ever."""
    pytest.importorskip("ray")
    run = subprocess.run(
        [sys.executable, "-c", SILENT_CLUSTER],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    seconds, _, message = run.stdout.strip().partition(" ")
    assert 3 <= int(seconds) <= 10, run.stdout + run.stderr
    assert message.startswith("the Ray cluster at 127.0.0.1:") and "within 3 s" in message


# --- 17. planning is linear in the paths --------------------------------------------------------


def test_planning_a_resumed_ray_batch_compares_no_tasks(tmp_path, monkeypatch):
    """With skip_existing, the rows to run were found by scanning the list of skipped tasks
    once per task (each scan comparing whole MeshTasks): 16,000 paths took 19 s."""
    pytest.importorskip("ray")
    from voxelizer.batch.ray import voxelize_files_on_ray

    meshes = folder_of_meshes(tmp_path / "m", 1)
    inputs = tmp_path / "many"
    inputs.mkdir()
    paths = []
    for number in range(2000):
        paths.append(inputs / f"{number}.ply")
        paths[-1].symlink_to(meshes[0])
    out = tmp_path / "out"
    out.mkdir()
    for number in range(0, 2000, 2):
        (out / f"{number}.svo").write_bytes(b"")
    compared: list[int] = []
    monkeypatch.setattr(MeshTask, "__eq__", lambda self, other: compared.append(1) or self is other)
    run = voxelize_files_on_ray(paths, out_dir=out, skip_existing=True, grid=GRID)
    run.close()  # planned only: no cluster needed
    assert run.total == 2000 and compared == []


# --- 18. symlinked mesh files ----------------------------------------------------------------


def test_symlinked_mesh_files_are_named_by_their_links(tmp_path, capsys):
    """A Hugging Face cache: snapshots/<rev>/<name> link to blobs/<hash> outside the input
    folder. Outputs mirror the links; a broken link fails alone; two links to one file
    make two outputs."""
    cache = tmp_path / "cache"
    blobs = cache / "blobs"
    blobs.mkdir(parents=True)
    shutil.copyfile(GEAR, blobs / "8f3a")
    shutil.copyfile(KNOT, blobs / "c4d1")
    snapshot = cache / "snapshots" / "rev1"
    (snapshot / "parts").mkdir(parents=True)
    (snapshot / "gear.ply").symlink_to(blobs / "8f3a")
    (snapshot / "parts" / "knot.ply").symlink_to(blobs / "c4d1")
    (snapshot / "parts" / "gear_again.ply").symlink_to(blobs / "8f3a")
    (snapshot / "broken.ply").symlink_to(blobs / "missing")
    out = tmp_path / "out"
    code, stdout, err = run_cli(capsys, snapshot, "--grid", GRID, "--out-dir", out)
    assert code == 1 and err.count("voxelize: error:") == 1, err
    assert f"{snapshot / 'broken.ply'}: no such file" in err
    assert stdout.startswith("4 meshes: 3 done, 0 skipped, 1 failed"), stdout
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*.svo"))
    assert written == ["gear.svo", "parts/gear_again.svo", "parts/knot.svo"]
    assert (out / "gear.svo").read_bytes() == (out / "parts" / "gear_again.svo").read_bytes()
    links = [snapshot / "gear.ply", snapshot / "parts" / "gear_again.ply"]
    results = list(voxelize_many(links, grid=GRID))
    assert [r.status for r in results] == ["done", "done"]  # two names: two inputs


# --- 22. the output folder is the input folder ---------------------------------------------------


def test_an_output_folder_that_is_the_input_folder_says_so(tmp_path, capsys):
    meshes = folder_of_meshes(tmp_path / "m")
    code, out, err = run_cli(capsys, tmp_path / "m", "--grid", GRID, "--out-dir", tmp_path / "m")
    assert_one_line_error(code, out, err, "its mesh files are all in the output folder")
    assert all(path.exists() for path in meshes)


# --- 24. a batch's warnings in the command's words ---------------------------------------------


def write_open_box(path: Path) -> None:
    """A box without its top: every column it spans is open (an OpenMeshWarning)."""
    vertices, faces = box((0.1, 0.2, 0.3), (0.9, 0.7, 0.8))
    normals = trimesh.Trimesh(vertices, faces, process=False).face_normals
    trimesh.Trimesh(vertices, faces[normals[:, 2] < 0.5], process=False).export(path)


def test_a_batch_warns_in_the_words_of_the_command(tmp_path, capsys):
    """The single-file command says `--fill-mode winding`; a batch said `fill_mode='winding'`,
    the API's words, for the same open mesh."""
    folder = tmp_path / "m"
    folder.mkdir()
    write_open_box(folder / "open_box.ply")
    shutil.copyfile(GEAR, folder / "gear.ply")
    code, out, err = run_cli(capsys, folder, "--grid", GRID, "--out-dir", tmp_path / "out")
    assert code == 0 and out.startswith("2 meshes: 2 done"), out + err
    warned = [line for line in err.splitlines() if line.startswith("voxelize: warning:")]
    assert any("open_box.ply" in line and "--fill-mode winding" in line for line in warned), err
    assert not any(re.search(r"\b(fill_mode|mode|surface)=", line) for line in warned), err


# --- 25. a file name with a newline in a batch's error line ---------------------------------------


def test_a_batch_error_for_a_name_with_a_newline_is_one_line(tmp_path, capsys):
    folder = tmp_path / "m"
    folder.mkdir()
    shutil.copyfile(GEAR, folder / "good.ply")
    (folder / "bad\nname.ply").write_text("ply\nnonsense\n")
    code, out, err = run_cli(capsys, folder, "--grid", GRID, "--out-dir", tmp_path / "out")
    assert code == 1 and out.startswith("2 meshes: 1 done, 0 skipped, 1 failed"), out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "bad\\nname.ply: cannot read mesh" in lines[0], err


def test_a_batch_warning_for_a_name_with_a_newline_is_one_line(tmp_path, capsys):
    folder = tmp_path / "m"
    folder.mkdir()
    write_open_box(folder / "open\nbox.ply")
    code, out, err = run_cli(capsys, folder, "--grid", GRID, "--out-dir", tmp_path / "out")
    assert code == 0 and out.startswith("1 mesh"), out + err
    lines = err.strip().splitlines()
    assert all(line.startswith("voxelize: warning:") for line in lines), err
    assert any("open\\nbox.ply: the mesh is not closed" in line for line in lines), err
