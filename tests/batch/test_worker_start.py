"""How a batch's worker processes start: forked from the batch's process where that is safe
(no Vulkan instance there, no other thread: the command forks them before anything opens
Vulkan), else spawned, and always spawned to replace one that died.

Each case runs in a fresh Python (this one has Vulkan open, so its workers are spawned). A
worker's start is seen without timing: a spawned worker's command line is multiprocessing's
(`spawn_main`) once it has exec'd (none while it execs), a forked one's is its parent's; and
the command's debug log names how each worker started. Every child sets its own signal
dispositions first, so that the tests pass under a launcher that ignores SIGINT or SIGTERM.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import voxelizer

from ..helpers import PROJECT_MODELS, shared_model

PROJECT_ROOT = Path(__file__).resolve().parents[2]
GRID = 32
SOURCES = [
    PROJECT_MODELS / "gear.ply",
    PROJECT_MODELS / "hollow_sphere.ply",
    shared_model("torus.stl"),
]
SIGNALS = (
    "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
)
# `voxelize ARGS` as the command runs it (cli.run).
COMMAND = SIGNALS + "import sys; from voxelizer import cli; sys.argv[0] = 'voxelize'; cli.run()\n"
READY = re.compile(r"voxelize: worker (\d+) \(device None, started by (\w+)\) ready")
SHARES = re.compile(r"voxelize: meshes by worker: here (\d+), worker 0 (\d+)\n")


def folder_of_meshes(folder: Path, count: int) -> list[Path]:
    """`count` mesh files in `folder`, the sources in turn (m00.ply, m01.ply, m02.stl, ...)."""
    folder.mkdir(parents=True)
    paths = []
    for number in range(count):
        source = SOURCES[number % len(SOURCES)]
        paths.append(folder / f"m{number:02d}{source.suffix}")
        shutil.copyfile(source, paths[-1])
    return paths


def single_svo_bytes(source: Path, folder: Path, grid: int = GRID) -> bytes:
    """The .svo file of the single call on `source`."""
    path = folder / f"{source.stem}.single.svo"
    voxelizer.save(voxelizer.voxelize(source, grid=grid), path)
    return path.read_bytes()


def start_command(*args: object, stderr_file: Path | None = None) -> subprocess.Popen[str]:
    """`voxelize ARGS` in a session of its own (its process id is the session's); its stderr
    into `stderr_file` if given (to be read while it runs; finish then gives None)."""
    with open(stderr_file or os.devnull, "w") as file:
        return subprocess.Popen(
            [sys.executable, "-c", COMMAND, *map(str, args)],
            cwd=PROJECT_ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True,
            stderr=subprocess.PIPE if stderr_file is None else file,
        )  # fmt: skip


def finish(child: subprocess.Popen[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of a command, once it and every process it started
    have ended."""
    try:
        stdout, stderr = child.communicate(timeout=300)
        assert wait_until_gone(child.pid) == [], stderr
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
    return child.returncode, stdout, stderr


def session_processes(session: int) -> list[int]:
    """The processes of a session (a command started with start_new_session), but zombies."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # state, ppid, pgrp, session, ...
        if int(fields[3]) == session and fields[0] != "Z":
            found.append(int(entry))
    return found


def wait_until_gone(session: int) -> list[int]:
    """The processes of `session` still there after a while (none, once all ended)."""
    deadline = time.monotonic() + 60
    left = session_processes(session)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = session_processes(session)
    return left


# --- the command ----------------------------------------------------------------------------


def test_the_command_forks_its_second_worker_and_its_files_equal_single_calls(tmp_path):
    """`--jobs 2`: the second worker is forked before anything in the command opens Vulkan,
    voxelizes its share, and every file is the single call's, byte for byte."""
    inputs = folder_of_meshes(tmp_path / "in", 9)
    out = tmp_path / "out"
    code, _, stderr = finish(
        start_command(tmp_path / "in", "--out-dir", out, "--grid", GRID, "--jobs", 2, "-vv")
    )
    assert code == 0 and "Traceback" not in stderr, stderr
    assert "voxelize: worker process for device None forked ahead of its batch" in stderr
    assert READY.findall(stderr) == [("0", "fork")], stderr
    shares = SHARES.search(stderr)
    assert shares is not None, stderr
    here, there = map(int, shares.groups())
    assert there >= 1 and here + there == len(inputs)
    singles = {source: single_svo_bytes(source, tmp_path) for source in SOURCES}
    for number, path in enumerate(inputs):
        written = out / path.with_suffix(".svo").name
        assert written.read_bytes() == singles[SOURCES[number % len(SOURCES)]], path.name


def test_a_device_that_turns_out_wrong_stops_the_worker_forked_for_it(tmp_path):
    """The worker for `--devices 0,7` is forked before the devices are checked: the command
    then says what is wrong in one line, and the worker ends with it, quietly."""
    folder_of_meshes(tmp_path / "in", 4)
    out = tmp_path / "out"
    code, stdout, stderr = finish(
        start_command(tmp_path / "in", "--out-dir", out, "--devices", "0,7", "-vv")
    )
    assert "voxelize: worker process for device 7 forked ahead of its batch" in stderr
    errors = [line for line in stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith(
        "voxelize: error: no Vulkan device with index 7 (there are "
    ), stderr
    assert code == 1 and stdout == "" and "Traceback" not in stderr
    assert not out.exists() or not any(out.iterdir())


def test_ctrl_c_ends_the_command_and_its_forked_worker_with_nothing_left(tmp_path):
    """Ctrl-C (SIGINT to the command's process group, as a terminal sends it) part way
    through a two-worker batch: status 130, one line, every file whole, and no process of
    the command left behind."""
    folder_of_meshes(tmp_path / "in", 60)
    out = tmp_path / "out"
    log = tmp_path / "stderr.txt"
    child = start_command(
        tmp_path / "in", "--out-dir", out, "--grid", 64, "--jobs", 2, "-vv", stderr_file=log
    )
    # Once 4 files are written and the worker process is ready: it opens its device after
    # the one here, and on a loaded host the worker here may write 4 files before.
    deadline = time.monotonic() + 120
    while not (
        out.is_dir() and len(list(out.glob("*.svo"))) >= 4 and READY.search(log.read_text())
    ):
        if time.monotonic() > deadline or child.poll() is not None:
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
            raise AssertionError(f"not under way with its worker process: {log.read_text()}")
        time.sleep(0.01)
    os.killpg(child.pid, signal.SIGINT)
    code, _, _ = finish(child)
    stderr = log.read_text()
    assert code == 130, stderr
    assert READY.findall(stderr) == [("0", "fork")], stderr
    assert stderr.strip().splitlines()[-1] == "voxelize: interrupted"
    assert "Traceback" not in stderr
    written = sorted(out.iterdir())
    assert written and all(path.suffix == ".svo" for path in written)  # no temporary
    singles = {source.stem: single_svo_bytes(source, tmp_path, 64) for source in SOURCES}
    for path in written:
        number = int(path.stem[1:])
        assert path.read_bytes() == singles[SOURCES[number % len(SOURCES)].stem], path.name


# --- voxelize_many from a script ------------------------------------------------------------

# Runs voxelize_many(jobs=2) over argv[2:]; argv[1]: "fresh", or "vulkan" (a single call
# first: a Vulkan instance exists), or "kill" (the first worker process killed at the first
# result). Prints one JSON line: how each worker process seen started, each result's status
# and whether it equals the single call.
SCRIPT = (
    SIGNALS
    + """
import json, multiprocessing, os, signal, sys, time
import numpy as np
import voxelizer
from voxelizer import voxelize_many

mode, paths = sys.argv[1], sys.argv[2:]
own = open("/proc/self/cmdline", "rb").read()


def start_method(pid):
    # A spawned child shows no command line while it execs, then spawn_main's (this
    # script's own text says spawn_main too).
    deadline = time.monotonic() + 10
    while True:
        try:
            command = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            return "gone"
        if command or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    return "fork" if command == own else "spawn" if b"spawn_main" in command else "?"


if mode == "vulkan":
    voxelizer.voxelize(paths[0], 16)
seen, killed, after, results = {}, [], {}, []
with voxelize_many(paths, grid=32, jobs=2) as run:
    for result in run:
        results.append(result)
        for child in multiprocessing.active_children():
            found = after if killed else seen
            if child.pid not in killed and child.pid not in found:
                found[child.pid] = start_method(child.pid)
        if mode == "kill" and not killed:
            killed.append(next(iter(seen)))
            os.kill(killed[0], signal.SIGKILL)
same = []
for result in sorted(results, key=lambda r: r.index):
    single = voxelizer.voxelize(paths[result.index], 32)
    same.append(
        np.array_equal(result.result.to_numpy(), single.to_numpy())
        and np.array_equal(result.result.origin, single.origin)
        and result.result.voxel_size == single.voxel_size
    )
print(json.dumps({
    "seen": sorted(seen.values()), "after": sorted(after.values()),
    "indices": sorted(r.index for r in results), "statuses": [r.status for r in results],
    "same": same,
}))
"""
)


def run_script(mode: str, paths: list[Path]) -> dict:
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, *map(str, paths)],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr and "vulkan validation" not in run.stderr
    report: dict = json.loads(run.stdout.splitlines()[-1])
    assert report["indices"] == list(range(len(paths)))
    assert report["statuses"] == ["done"] * len(paths)
    assert report["same"] == [True] * len(paths)
    return report


@pytest.mark.parametrize(("mode", "method"), [("fresh", "fork"), ("vulkan", "spawn")])
def test_voxelize_many_forks_unless_vulkan_is_open_here(tmp_path, mode, method):
    """From a script: the worker process is forked while no Vulkan instance exists in the
    script's process, spawned once one does (a single call came first); the results equal
    the single calls' either way."""
    report = run_script(mode, folder_of_meshes(tmp_path / "in", 8))
    assert report["seen"] == [method]


def test_a_forked_worker_killed_mid_batch_is_replaced_by_spawn(tmp_path):
    """The forked worker killed at the first result: its meshes go to the others, a spawned
    worker takes its place (this process has Vulkan open by then), and every mesh comes
    once, equal to its single call."""
    report = run_script("kill", folder_of_meshes(tmp_path / "in", 14))
    assert report["seen"] == ["fork"]
    assert report["after"] == ["spawn"]


# --- what a forked child holds of its parent's helpers --------------------------------------

FORKED_CHILD = (
    SIGNALS
    + """
import os, sys
from voxelizer.batch.readers import shared_load_processes
from voxelizer.batch.write_processes import shared_write_processes

pools = [shared_write_processes(1), shared_load_processes(1)]
fds = [fd for pool in pools for fd in pool.pipe_fds()]
assert len(fds) == 4, fds
pid = os.fork()
if pid == 0:
    still_open = []
    for fd in fds:
        try:
            os.fstat(fd)
        except OSError:
            continue
        still_open.append(fd)
    os._exit(len(still_open))
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""
)


def test_a_forked_child_closes_its_copies_of_the_helpers_pipes():
    """A process forked after the batch's helpers started (a worker forked then, a data
    loader's workers) holds none of their pipes: a helper sees its input end when the
    batch's process closes it, whatever children it has."""
    run = subprocess.run(
        [sys.executable, "-c", FORKED_CHILD], cwd=PROJECT_ROOT, capture_output=True,
        text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["0"], run.stdout  # the child found none of them open


# The command with one reading and one writing process per worker (as on a host with cores
# to spare), saying how many of each worker's helpers were forked, and whether its device
# was open when it first waited for its inbox: the worker processes run this script's
# functions too (a forked one is a copy of it; a spawned one would print nothing).
WITH_HELPERS = (
    SIGNALS
    + """
import os, sys
import voxelizer.batch.engine as engine
import voxelizer.batch.worker_processes as pool
import voxelizer.batch.write_processes as write_processes
from voxelizer.batch.readers import shared_load_processes
from voxelizer.batch.write_processes import shared_write_processes
from voxelizer.cli import main
from voxelizer.gpu.device import vulkan_instance_exists

engine.default_load_processes = lambda workers=1: 1
engine.default_write_processes = write_processes.default_write_processes = lambda *a: 1
start_helpers = pool.start_helpers


def told(settings):
    start_helpers(settings)
    readers, writers = shared_load_processes(1), shared_write_processes(1)
    # one write a line: the worker and this process share the pipe, and print's pieces of
    # two processes interleave
    os.write(2, f"helpers {os.getpid()} forked {readers.forked} {writers.forked}\\n".encode())


pool.start_helpers = told
received = pool._received


def first_wait(inbox):
    if not waited:
        waited.append(True)
        os.write(2, f"waited {os.getpid()} {vulkan_instance_exists()}\\n".encode())
    return received(inbox)


waited = []
pool._received = first_wait
code = main(sys.argv[1:])
print("exit", code, "pid", os.getpid())
"""
)


def test_the_forked_worker_forks_its_own_helpers_after_the_command_forked_it(tmp_path):
    """With reading and writing processes: the command forks the second worker first, then
    its own helpers; the worker forks its own helpers in turn (neither has Vulkan open or
    another thread yet) and opens its device before the batch hands it its settings; every
    file is the single call's."""
    inputs = folder_of_meshes(tmp_path / "in", 12)
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, "-c", WITH_HELPERS, str(tmp_path / "in"), "--out-dir", str(out),
         "--grid", str(GRID), "--jobs", "2", "--quiet", "-vv"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    exit_words = run.stdout.split()
    assert exit_words[:3] == ["exit", "0", "pid"], run.stdout
    assert READY.findall(run.stderr) == [("0", "fork")], run.stderr
    told = [line.split() for line in run.stderr.splitlines() if line.startswith("helpers ")]
    # here, and in the worker: as it starts, then for its batch (it finds them running)
    assert {words[1] for words in told} - {exit_words[3]}, run.stderr
    assert exit_words[3] in {words[1] for words in told}, run.stderr
    assert all(words[2:] == ["forked", "1", "1"] for words in told), run.stderr
    # the worker's device opened as it started, before the batch handed it its settings
    waits = [line.split() for line in run.stderr.splitlines() if line.startswith("waited ")]
    assert [words[2] for words in waits] == ["True"] and waits[0][1] != exit_words[3]
    singles = {source: single_svo_bytes(source, tmp_path) for source in SOURCES}
    for number, path in enumerate(inputs):
        written = out / path.with_suffix(".svo").name
        assert written.read_bytes() == singles[SOURCES[number % len(SOURCES)]], path.name


def test_workers_started_ahead_end_with_a_batch_that_fails_before_taking_them(tmp_path):
    """main() called from a script (which goes on after it): a batch that ends before its
    workers start (an output exists) stops the worker forked ahead for it at once, not at
    the script's exit."""
    inputs = folder_of_meshes(tmp_path / "in", 4)
    out = tmp_path / "out"
    out.mkdir()
    (out / inputs[0].with_suffix(".svo").name).write_bytes(b"precious")
    script = SIGNALS + (
        "import multiprocessing, sys\n"
        "from voxelizer.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "print('exit', code, 'children', len(multiprocessing.active_children()))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "in"), "--out-dir", str(out), "--jobs", "2", "-vv"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "voxelize: worker process for device None forked ahead of its batch" in run.stderr
    assert "file exists" in run.stderr and "Traceback" not in run.stderr
    assert run.stdout.split() == ["exit", "1", "children", "0"], run.stdout
    assert (out / inputs[0].with_suffix(".svo").name).read_bytes() == b"precious"
