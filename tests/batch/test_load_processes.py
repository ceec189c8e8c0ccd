"""Meshes read in helper processes (voxelizer/batch/readers.py), as voxelize_many does on
hosts with cores to spare: the same meshes, the same errors and results as reading them
here, a helper that dies costs one mesh, and a user's script needs no main guard. Helpers
forked from a fresh process (no Vulkan instance, no other thread) send what exec'd ones
send; a process that opened a device, or runs another thread, starts them by exec."""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import voxelizer
from voxelizer import voxelize_many
from voxelizer.batch.helper_processes import PIPE_BYTES, fork_allowed, widen_pipe
from voxelizer.batch.readers import LoadProcesses, prepared_mesh
from voxelizer.errors import MeshError
from voxelizer.io import load_mesh
from voxelizer.options import Options
from voxelizer.placement import GridPlacement

from ..helpers import PROJECT_MODELS, RESTORE_SIGINT, shared_model

PROJECT_ROOT = Path(__file__).resolve().parents[2]
OPTIONS = {"variant": "branchless", "fill_mode": "parity", "mode": "solid"}


def batch_options(grid: int, **keywords: Any) -> Options:
    """The checked options of a batch on this grid: OPTIONS, with `keywords`."""
    return Options.create(grid, **{**OPTIONS, **keywords})


@pytest.fixture(scope="module")
def helpers():
    readers = LoadProcesses(2)
    assert readers.started.wait(120)
    yield readers
    readers.close()


def test_a_helper_sends_the_mesh_prepared_as_here(helpers):
    path = shared_model("bunny.ply")
    mesh, seconds = helpers.submit(path, batch_options(48)).result(timeout=120)
    here = load_mesh(path)
    assert seconds > 0
    assert np.array_equal(mesh.vertices, here.vertices)
    assert np.array_equal(mesh.faces, here.faces) and mesh.faces.dtype == np.int64
    assert np.array_equal(mesh.bounds, here.bounds)
    # Its placed vertices came along, read-only: the call finds them and computes nothing.
    placement = GridPlacement.around(here, (48, 48, 48), None, None)
    expected_grid, expected_fine = placement.placed_vertices(here)
    grid_vertices, fine_vertices = placement.placed_vertices(mesh)
    assert grid_vertices is mesh._memo.placed[1][0]
    assert np.array_equal(grid_vertices, expected_grid)
    assert np.array_equal(fine_vertices, expected_fine)
    # So did the soup variants' triangle soup of this placement (copied, not gathered).
    soup = placement.placed_soup(mesh)
    assert soup is not None and soup.dtype == np.float32
    assert np.array_equal(soup, expected_grid[here.faces])
    assert placement.placed_soup(here) is None  # never made by a call
    for array in (mesh.indices, mesh.used, grid_vertices, fine_vertices, soup):
        assert not array.flags.writeable
    # The same voxels with it as without, in every variant and mode that reads vertices;
    # another grid, or union's parts, gather their own.
    for grid, options in [
        (48, {}),
        (48, {"variant": "naive"}),
        (48, {"variant": "indexed"}),
        (48, {"mode": "both"}),
        (48, {"fill_mode": "union"}),
        (48, {"fill_mode": "vote"}),
        (40, {}),
    ]:
        assert np.array_equal(
            voxelizer.voxelize_dense(mesh, grid, **options).to_numpy(),
            voxelizer.voxelize_dense(here, grid, **options).to_numpy(),
        ), (grid, options)


def pipe_bytes(fd: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)


def test_reply_pipes_are_widened(helpers):
    """A mesh of megabytes crosses a helper's reply pipe in a few reads: the pipe holds
    PIPE_BYTES (Linux lets any user grow a pipe to 1 MiB)."""
    with open("/proc/sys/fs/pipe-max-size") as limit:
        expected = min(PIPE_BYTES, int(limit.read()))
    read_end, write_end = os.pipe()
    try:
        assert pipe_bytes(read_end) < expected
        widen_pipe(read_end)
        assert pipe_bytes(read_end) == pipe_bytes(write_end) == expected
    finally:
        os.close(read_end)
        os.close(write_end)
    # Each helper's pipes, seen from the helper (/proc/PID/fd): its reply pipe is the wide one.
    for pid in helpers.helper_pids():
        sizes = []
        for fd in os.listdir(f"/proc/{pid}/fd"):
            link = f"/proc/{pid}/fd/{fd}"
            if os.readlink(link).startswith("pipe:"):
                opened = os.open(link, os.O_RDONLY | os.O_NONBLOCK)
                try:
                    sizes.append(pipe_bytes(opened))
                finally:
                    os.close(opened)
        assert expected in sizes, sizes


def test_a_helper_reports_what_reading_here_reports(helpers, tmp_path):
    missing = tmp_path / "missing.ply"
    garbage = tmp_path / "garbage.ply"
    garbage.write_bytes(
        b"ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nend_header\n1\n"
    )
    for path in (missing, garbage):
        with pytest.raises(MeshError) as here:
            load_mesh(path)
        with pytest.raises(MeshError) as there:
            helpers.submit(path, batch_options(16)).result(timeout=120)
        assert str(there.value) == str(here.value)


def test_a_placement_that_fails_is_left_to_the_call():
    """Bounds that do not contain the mesh: the reading succeeds, the call says why."""
    bounds = [[0, 0, 0], [1e-3, 1e-3, 1e-3]]
    mesh = prepared_mesh(shared_model("bunny.ply"), batch_options(16, bounds=bounds))
    assert mesh._memo.placed is None
    with pytest.raises(voxelizer.GridError):
        voxelizer.voxelize(mesh, 16, bounds=bounds)


def test_a_helper_that_dies_fails_one_mesh_and_is_replaced():
    readers = LoadProcesses(1)
    try:
        assert readers.started.wait(120)
        path = shared_model("bunny.ply")
        readers.submit(path, batch_options(16)).result(timeout=120)
        (pid,) = readers.helper_pids()
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(MeshError, match="the reading process died"):
            readers.submit(path, batch_options(16)).result(timeout=120)
        mesh, _ = readers.submit(path, batch_options(16)).result(timeout=120)
        assert mesh.triangle_count == load_mesh(path).triangle_count
        assert readers.helper_pids() != [pid]
    finally:
        readers.close()
    assert readers.helper_pids() == []


def test_voxelize_many_with_helpers_equals_reading_here(tmp_path):
    bad = tmp_path / "bad.obj"
    bad.write_text("v 0 0 0\nf 1 2 3\n")
    files = [
        shared_model("bunny.ply"),
        PROJECT_MODELS / "gear.ply",
        bad,
        shared_model("torus.stl"),
        PROJECT_MODELS / "torus_knot.ply",
    ]
    here = sorted(voxelize_many(files, grid=24, load_processes=0), key=lambda r: r.index)
    there = sorted(voxelize_many(files, grid=24, load_processes=2), key=lambda r: r.index)
    assert [r.index for r in there] == list(range(len(files)))
    for a, b in zip(here, there):
        assert (a.status, a.error, a.triangles, a.solid_voxels) == (
            b.status,
            b.error,
            b.triangles,
            b.solid_voxels,
        )
        if a.result is not None:
            assert b.result is not None
            assert np.array_equal(a.result.to_numpy(), b.result.to_numpy())
    assert there[2].status == "failed" and str(bad) in there[2].error


SCRIPT = """
import sys
import voxelizer
files = sys.argv[1:]
# No `if __name__ == "__main__"` guard: the helpers must not run this script again.
results = list(voxelizer.voxelize_many(files, grid=16, load_processes=2))
print("done", sum(r.ok for r in results))
"""


def test_a_script_without_a_main_guard(tmp_path):
    files = [str(shared_model("bunny.ply"))] * 6
    run = run_script(tmp_path, "script.py", SCRIPT, *files)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines() == ["done 6"]


INTERRUPTED = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever the launcher left
import voxelizer
from voxelizer.batch.readers import shared_load_processes
readers = shared_load_processes(2)
assert readers.forked == 2  # a fresh process: forked helpers
deadline = time.monotonic() + 120
while len(readers.helper_pids()) < 2 and time.monotonic() < deadline:
    time.sleep(0.01)
print(*readers.helper_pids(), flush=True)
files = sys.argv[1:]
for _ in range(1000):
    for result in voxelizer.voxelize_many(files, grid=16, load_processes=2):
        pass
"""


def test_ctrl_c_ends_the_batch_and_its_helpers(tmp_path):
    """SIGINT to the whole process group, as a terminal sends it: the helpers ignore it
    (no traceback from them), the batch stops and its helpers end with it."""
    script = tmp_path / "interrupted.py"
    script.write_text(RESTORE_SIGINT + textwrap.dedent(INTERRUPTED))
    process = subprocess.Popen(
        [sys.executable, str(script), *[str(shared_model("bunny.ply"))] * 4],
        cwd=tmp_path,
        env=_with_project_path(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    pids = [int(pid) for pid in process.stdout.readline().split()]
    assert len(pids) == 2
    time.sleep(1.0)  # well into the batches
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode != 0
    # One traceback, the script's own, not a helper's: one last line that names the error
    # (a traceback through interrupts_deferred also shows its `raise KeyboardInterrupt`).
    assert stderr.splitlines().count("KeyboardInterrupt") == 1, stderr
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids)


def run_script(
    tmp_path: Path, name: str, source: str, *args: object
) -> subprocess.CompletedProcess:
    """`source` saved as tmp_path/name and run by a fresh Python (this project importable);
    `args` as its command line (str of each; a starred list spreads)."""
    script = tmp_path / name
    script.write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, str(script), *map(str, args)],
        cwd=tmp_path,
        env=_with_project_path(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _with_project_path() -> dict[str, str]:
    """This environment, with this tree first on the path of the script's process."""
    path = os.environ.get("PYTHONPATH")
    tree = str(PROJECT_ROOT)
    return {**os.environ, "PYTHONPATH": tree if not path else f"{tree}{os.pathsep}{path}"}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return not (status.exists() and status.read_text().split()[2] == "Z")


def test_a_mesh_keeps_its_caches_read_only_through_pickling():
    mesh = prepared_mesh(shared_model("bunny.ply"), batch_options(16))
    copy = pickle.loads(pickle.dumps(mesh, protocol=5))
    assert set(copy.__dict__) == set(mesh.__dict__)
    assert not copy.indices.flags.writeable and not copy.used.flags.writeable
    assert copy.vertices.flags.writeable == mesh.vertices.flags.writeable
    # What the memo keeps for a key: its arrays too (the key, hashable, holds none).
    grid_vertices, fine_vertices = copy._memo.placed[1][:2]
    assert not grid_vertices.flags.writeable and not fine_vertices.flags.writeable


# --- forked helpers -------------------------------------------------------------------------

FORKED = """
import pickle, sys, threading, time
import numpy as np
from voxelizer.errors import MeshError
from voxelizer.batch.readers import LoadProcesses, fork_allowed
from voxelizer.options import Options
from voxelizer.placement import GridPlacement

paths = sys.argv[1:-1]
options = Options.create(40, variant="branchless", fill_mode="parity", mode="solid")
out = sys.argv[-1]
assert fork_allowed() and threading.active_count() == 1
forked = LoadProcesses(2)  # before any thread: forked
assert forked.forked == 2 and forked.started.is_set(), forked.forked
execd = LoadProcesses(2)  # the first one's threads run now: started by exec
assert execd.forked == 0 and execd.wait_started(120)

def outcome(readers, path):
    return settled(readers.submit(path, options))

def settled(future):
    try:
        mesh, seconds = future.result(timeout=120)
    except MeshError as exc:
        return ("error", type(exc).__name__, str(exc))
    placement = GridPlacement.around(mesh, (40, 40, 40), None, None)
    assert mesh._memo.placed is not None  # computed by the helper, not here
    grid_vertices, fine_vertices = placement.placed_vertices(mesh)
    return ("mesh", mesh.vertices, mesh.faces, mesh.indices, grid_vertices, fine_vertices)

results = [[outcome(readers, path) for path in paths] for readers in (forked, execd)]
# A forked helper that dies costs its mesh only; an exec'd one replaces it. The requests go
# out at once: a slot takes the next one while its sibling reads, so the dead one gets one
# (one at a time, the same idle slot could take them all).
pid = forked.helper_pids()[0]
import os, signal
os.kill(pid, signal.SIGKILL)
died = [settled(f) for f in [forked.submit(paths[0], options) for _ in range(4)]]
assert any(d[0] == "error" and "the reading process died" in d[2] for d in died), died
# The dead helper's slot starts a new one (by exec) with its next request: requests at once
# reach both slots.
again = [forked.submit(paths[0], options) for _ in range(6)]
assert all(f.result(timeout=120)[0].triangle_count > 0 for f in again)
assert pid not in forked.helper_pids() and len(forked.helper_pids()) == 2
started = time.monotonic()
forked.close()
execd.close()
closed = time.monotonic() - started
pickle.dump((results, [d[0] for d in died], closed), open(out, "wb"))
"""


def test_forked_helpers_send_what_execd_ones_send(tmp_path):
    """In a fresh process the helpers are forked; every mesh (its arrays and the caches the
    call reads) and every error equals the exec'd helpers'. A killed forked helper fails
    one mesh and is replaced; closing ends them all at once (each sees the end of its
    input: no sibling holds its pipe)."""
    garbage = tmp_path / "garbage.ply"
    garbage.write_bytes(
        b"ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nend_header\n1\n"
    )
    paths = [
        shared_model("bunny.ply"),
        tmp_path / "missing.stl",
        PROJECT_MODELS / "gear.ply",
        garbage,
        shared_model("torus.stl"),
    ]
    out = tmp_path / "results.pickle"
    run = run_script(tmp_path, "forked.py", FORKED, *paths, out)
    assert run.returncode == 0, run.stderr
    (forked, execd), died, closed = pickle.loads(out.read_bytes())
    assert [r[0] for r in forked] == ["mesh", "error", "mesh", "error", "mesh"]
    for a, b in zip(forked, execd):
        assert a[0] == b[0]
        if a[0] == "error":
            assert a[1:] == b[1:]
        else:
            for x, y in zip(a[1:], b[1:]):
                assert x.dtype == y.dtype and np.array_equal(x, y)
    assert forked[1][2] == f"{paths[1]}: no such file"
    assert died.count("error") == 1
    assert closed < 5.0  # a helper waiting on a pipe a sibling kept open would take 10 s


BATCHES = """
import sys
import numpy as np
import voxelizer
from voxelizer.batch.readers import running_load_processes, shared_load_processes

files = sys.argv[1:]
def in_order(results):
    return sorted(results, key=lambda r: r.index)

first = in_order(voxelizer.voxelize_many(files, grid=24, load_processes=2))
readers = shared_load_processes(2)
print("forked", readers.forked)
# The device is open now: a batch that wants more helpers starts them by exec.
second = in_order(voxelizer.voxelize_many(files, grid=24, load_processes=3))
print("forked", shared_load_processes(3).forked, running_load_processes())
here = [voxelizer.voxelize_dense(f, 24).to_numpy() if i != 2 else None for i, f in enumerate(files)]
for results in (first, second):
    assert [r.status for r in results] == ["done", "done", "failed", "done"], results
    for r, expected in zip(results, here):
        if expected is not None:
            assert np.array_equal(r.result.to_numpy(), expected)
            assert r.solid_voxels == int(expected.sum())
print("same")
"""


def test_batches_with_forked_then_execd_helpers(tmp_path):
    """A fresh process's first batch forks its helpers; a later one that wants more, after
    the device opened, starts them by exec; both give the voxelize_dense results."""
    bad = tmp_path / "bad.obj"
    bad.write_text("v 0 0 0\nf 1 2 3\n")
    files = [shared_model("bunny.ply"), PROJECT_MODELS / "gear.ply", bad, shared_model("torus.stl")]
    run = run_script(tmp_path, "batches.py", BATCHES, *files)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[:3] == ["forked 2", "forked 0 3", "same"]


BATCH_COMMAND = """
import sys
import voxelizer.batch.engine
from voxelizer.cli import main
from voxelizer.gpu.device import Device
from voxelizer.batch.readers import shared_load_processes

voxelizer.batch.engine.default_load_processes = lambda workers=1: 2  # as on a host with cores to spare
real_init = Device.__init__
forked_at_open = []

def recorded_init(self, *args, **kwargs):
    forked_at_open.append(shared_load_processes(2).forked)
    real_init(self, *args, **kwargs)

Device.__init__ = recorded_init
code = main([*sys.argv[1:], "--grid", "16", "--quiet"])
print("exit", code, "forked", shared_load_processes(2).forked, "before", *forked_at_open)
"""


def batch_inputs(tmp_path: Path) -> tuple[Path, int]:
    """A folder of six meshes (enough for two helpers), and how many."""
    files = [shared_model("bunny.ply"), PROJECT_MODELS / "gear.ply", shared_model("torus.stl")]
    files = files * 2
    inputs = tmp_path / "in"
    for number, path in enumerate(files):
        (inputs / str(number)).mkdir(parents=True)
        shutil.copyfile(path, inputs / str(number) / Path(path).name)
    return inputs, len(files)


@pytest.mark.parametrize("devices", [[], ["--devices", "0"]])
def test_the_batch_command_forks_its_helpers_before_vulkan_opens(tmp_path, devices):
    """The helpers are started before the device opens, and before `--devices` makes the
    command open Vulkan to check them, so they are forked (ready at once); every output is
    written."""
    inputs, count = batch_inputs(tmp_path)
    run = run_script(
        tmp_path, "batch.py", BATCH_COMMAND, inputs, "--out-dir", tmp_path / "out", *devices
    )
    assert run.returncode == 0, run.stderr
    # One device, or two where a cold driver cache has kernels compiled on a second one
    # (gpu/first_dispatches.SecondCompiler): every one opened after both helpers forked.
    words = run.stdout.split()
    assert words[:5] == ["exit", "0", "forked", "2", "before"], run.stdout
    assert words[5:] in (["2"], ["2", "2"]), run.stdout
    assert len(list((tmp_path / "out").rglob("*.svo"))) == count


def test_a_device_that_fails_to_open_is_one_line_with_helpers_forked(tmp_path):
    """A device that cannot be opened ends the batch with one line, status 1, no
    traceback, and the forked helpers do not keep the process from ending."""
    inputs, _ = batch_inputs(tmp_path)
    env = {**_with_project_path(), "VOXELIZER_DEVICE": "no-such-device"}
    script = tmp_path / "batch.py"
    script.write_text(textwrap.dedent(BATCH_COMMAND))
    run = subprocess.run(
        [sys.executable, str(script), inputs, "--out-dir", tmp_path / "out"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr  # the script's own status; main's is printed
    assert run.stdout.split()[:4] == ["exit", "1", "forked", "2"], run.stdout
    assert run.stderr.startswith("voxelize: error: no Vulkan device matches 'no-such-device'")
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert not list((tmp_path / "out").rglob("*.svo"))


THREADS = """
import threading
from voxelizer.batch.readers import fork_allowed
print(fork_allowed())
release = threading.Event()
other = threading.Thread(target=release.wait)
other.start()
print(fork_allowed())
release.set()
other.join()
print(fork_allowed())
"""


def test_no_fork_while_another_thread_runs(tmp_path):
    run = run_script(tmp_path, "threads.py", THREADS)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["True", "False", "True"]


def test_no_fork_with_a_vulkan_instance(gpu):
    """Here the session's device is open: helpers are started by exec."""
    assert not fork_allowed()
    readers = LoadProcesses(1)
    try:
        assert readers.forked == 0
        assert readers.wait_started(120)
        mesh, _ = readers.submit(shared_model("bunny.ply"), batch_options(16)).result(timeout=120)
        assert mesh.triangle_count == load_mesh(shared_model("bunny.ply")).triangle_count
    finally:
        readers.close()


def test_the_passes_upload_a_soup_made_before_the_call():
    """A soup kept on the Mesh for the call's placement is what the GPU reads (here one of
    collapsed triangles: nothing is solid); for another grid the passes gather their own."""
    mesh = load_mesh(shared_model("bunny.ply"))
    placement = GridPlacement.around(mesh, (32, 32, 32), None, None)
    collapsed = np.zeros((mesh.triangle_count, 3, 3), np.float32)
    mesh.placed_soup(placement.cache_key(), lambda: collapsed)
    assert placement.placed_soup(mesh) is collapsed
    soup = {"variant": "branchless"}  # a soup variant (the default, combined, reads indices)
    assert voxelizer.voxelize_dense(mesh, 32, **soup).count() == 0
    here = load_mesh(shared_model("bunny.ply"))
    again = voxelizer.voxelize_dense(mesh, 36, **soup).count()
    assert again == voxelizer.voxelize_dense(here, 36, **soup).count() > 0


def test_a_helper_that_dies_holding_two_requests_fails_one_of_them():
    """A helper holds the next request while it reads one: when it dies, the mesh it was
    reading fails, and the one it held is read by its replacement."""
    readers = LoadProcesses(1)
    try:
        assert readers.started.wait(120)
        path = shared_model("dragon.ply")
        readers.submit(path, batch_options(16)).result(timeout=120)
        (pid,) = readers.helper_pids()
        futures = [readers.submit(path, batch_options(16)) for _ in range(2)]
        os.kill(pid, signal.SIGKILL)
        failed = 0
        for future in futures:
            try:
                mesh, _ = future.result(timeout=120)
            except MeshError as exc:
                assert "the reading process died" in str(exc)
                failed += 1
            else:
                assert mesh.triangle_count == load_mesh(path).triangle_count
        assert failed <= 1  # only the mesh it was on, if it had not sent it yet
        mesh, _ = readers.submit(path, batch_options(16)).result(timeout=120)
        assert mesh.triangle_count == load_mesh(path).triangle_count
    finally:
        readers.close()
    assert readers.helper_pids() == []


SLOW_HELPERS = """
import sys, threading, time
from voxelizer import voxelize_many
from voxelizer.batch import readers

released = threading.Event()
start = readers._start

def slow_start(**keywords):
    released.wait(60)  # helpers that start only once the batch has its first result
    return start(**keywords)

readers._start = slow_start
readers.fork_allowed = lambda: False  # started by exec, as after a device opened here
began, first, results = time.perf_counter(), None, []
for result in voxelize_many(sys.argv[1:], grid=16, load_processes=2, threads=2):
    if first is None:
        first = time.perf_counter() - began
        released.set()
    results.append(result.ok)
print(len(results), all(results), round(first, 2))
"""


def test_the_first_meshes_are_read_while_the_helpers_start(tmp_path):
    """The batch does not wait for its helpers: its threads read the first meshes while the
    helpers start (here, not before the first result: a batch that waited for them, as it
    once did for up to 10 s, would never have one sooner)."""
    files = [shared_model("bunny.ply"), PROJECT_MODELS / "gear.ply", shared_model("torus.stl")]
    run = run_script(tmp_path, "slow_helpers.py", SLOW_HELPERS, *(files * 3))
    assert run.returncode == 0, run.stderr
    count, ok, first = run.stdout.split()
    assert (count, ok) == ("9", "True")
    assert float(first) < 8.0, first
