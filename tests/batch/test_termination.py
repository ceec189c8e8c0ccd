"""SIGTERM and SIGKILL: what `timeout`, `kill`, Slurm, Kubernetes and systemd send. SIGTERM
ends the command as a Ctrl-C does (every output whole or absent, no temporary left, a summary
for a batch) with status 143; after a SIGKILL, which no process can handle, a resumed batch
removes the temporaries it left, and only those.

Each child sets its own signal dispositions before the command starts, so that the tests pass
under a launcher that ignores SIGINT or SIGTERM (nohup, a service manager)."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import voxelizer

from ..helpers import PROJECT_MODELS

PROJECT_ROOT = Path(__file__).resolve().parents[2]
MODEL = PROJECT_MODELS / "torus_knot.ply"

# The command as `voxelize` runs it (cli.run), with the default dispositions of SIGINT and
# SIGTERM whatever the launcher left, and a line once the imports are done.
COMMAND = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
from voxelizer import cli
if sys.argv[1] == "--say-ready":
    del sys.argv[1]
    print("ready", flush=True)
sys.argv[0] = "voxelize"
cli.run()
"""


def start(args: list[object]) -> subprocess.Popen:
    child = subprocess.Popen(
        [sys.executable, "-c", COMMAND, "--say-ready", *map(str, args)],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    return child


def temporaries(folder: Path) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.endswith(".tmp"))


@pytest.mark.slow
def test_sigterm_ends_a_run_as_ctrl_c_does(tmp_path):
    """SIGTERM at moments spread over a run that voxelizes and writes three files: status 143
    and one line, with no file or temporary left (or, too late, status 0 and every file)."""
    outputs = [tmp_path / "out.ply", tmp_path / "out.png", tmp_path / "out.json"]
    args = [MODEL, "--grid", "96", "-o", outputs[0], "--preview", outputs[1]]
    args += ["--stats-json", outputs[2], "--quiet", "--force"]
    started = time.monotonic()
    whole = start(args)
    assert whole.wait(timeout=120) == 0
    length = time.monotonic() - started
    generator = random.Random(3)
    terminated = 0
    for _ in range(6):
        for path in outputs:
            path.unlink(missing_ok=True)
        child = start(args)
        time.sleep(generator.uniform(0.05, 0.8) * length)
        child.send_signal(signal.SIGTERM)
        _, stderr = child.communicate(timeout=120)
        present = [path for path in outputs if path.exists()]
        if child.returncode == 143:
            terminated += 1
            assert stderr == "voxelize: terminated\n", stderr
            assert present in ([], outputs), present  # all or nothing
        else:
            assert child.returncode == 0 and present == outputs, (child.returncode, stderr)
        assert temporaries(tmp_path) == []
    assert terminated >= 1


# --- a batch: SIGTERM, SIGKILL, then a resume; its stdout closed or broken ---------------------

BATCH_GRID = "96"


def batch_folder(tmp_path: Path, count: int) -> tuple[Path, list[str]]:
    """`count` copies of one model, m00.ply ...; and their outputs' names (.npz)."""
    folder = tmp_path / "in"
    folder.mkdir()
    for number in range(count):
        shutil.copyfile(MODEL, folder / f"m{number:02d}.ply")
    return folder, [f"m{number:02d}.npz" for number in range(count)]


def batch_args(folder: Path, out: Path, jobs: int) -> list[object]:
    return [folder, "--out-dir", out, "--grid", BATCH_GRID, "--format", "npz", "--jobs", jobs]


def wait_for_outputs(out: Path, count: int, child: subprocess.Popen) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and child.poll() is None:
        if out.is_dir() and sum(name.endswith(".npz") for name in os.listdir(out)) >= count:
            return
        time.sleep(0.02)
    raise AssertionError(f"{count} outputs did not appear (status {child.poll()})")


def assert_whole(out: Path, names: list[str]) -> None:
    """Every output listed is there and holds the model's voxels."""
    expected = voxelizer.voxelize_dense(MODEL, int(BATCH_GRID)).to_numpy()
    assert sorted(n for n in os.listdir(out) if not n.startswith(".")) == sorted(names)
    for name in names:
        assert np.array_equal(voxelizer.load(out / name).to_numpy(), expected), name


def resume(folder: Path, out: Path, jobs: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", COMMAND, *map(str, batch_args(folder, out, jobs)), "--skip-existing"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("jobs", [1, 2])
def test_sigterm_ends_a_batch_as_ctrl_c_does_and_it_resumes(tmp_path, jobs):
    folder, names = batch_folder(tmp_path, 40)
    out = tmp_path / "out"
    child = start(batch_args(folder, out, jobs))
    wait_for_outputs(out, 2, child)
    child.send_signal(signal.SIGTERM)
    stdout, stderr = child.communicate(timeout=180)
    assert child.returncode == 143, stderr
    assert stderr.strip().splitlines()[-1] == "voxelize: terminated", stderr
    assert "Traceback" not in stderr
    assert " before the interrupt: " in stdout, stdout
    assert temporaries(out) == []
    written = sorted(n for n in os.listdir(out) if n.endswith(".npz"))
    assert 2 <= len(written) < len(names)
    assert_whole(out, written)
    resumed = resume(folder, out, jobs)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith(f"{len(names)} meshes: {len(names) - len(written)} done")
    assert_whole(out, names)
    assert temporaries(out) == []


@pytest.mark.slow
def test_after_sigkill_a_resumed_batch_removes_its_own_temporaries(tmp_path):
    """SIGKILL runs no cleanup: the temporaries of the files being written stay. A resumed
    batch removes those of its own outputs (by the writers' pattern), and nothing else."""
    folder, names = batch_folder(tmp_path, 40)
    out = tmp_path / "out"
    child = start(batch_args(folder, out, 2))
    wait_for_outputs(out, 2, child)
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL
    planted = out / f".{names[-1]}.0123abcd.tmp"  # what a kill while writing it leaves
    planted.write_bytes(b"half a file")
    foreign = [out / ".notes.txt.0123abcd.tmp", out / f".{names[-1]}.tmp", out / "mine.tmp"]
    for path in foreign:  # not a temporary of an output of this batch: left alone
        path.write_bytes(b"someone else's")
    resumed = resume(folder, out, 2)
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(temporaries(out)) == sorted(path.name for path in foreign)
    for path in foreign:
        path.unlink()
    assert_whole(out, names)


# A batch's process in miniature: one worker process as the batch starts it, whose inbox
# stays empty; once the worker runs (its imports done), the process says its pid and waits.
WAITING_WORKER = """
import multiprocessing, sys, time
from voxelizer.batch.worker_processes import worker_process_main
from voxelizer.batch.tasks import BatchSettings
from voxelizer.options import Options

context = multiprocessing.get_context("spawn")
inbox = context.Queue()
messages, outbox = context.Pipe(duplex=False)
settings = BatchSettings(options=Options.create(16))
worker = context.Process(
    target=worker_process_main, args=(0, None, settings, inbox, outbox), daemon=True
)
worker.start()
outbox.close()
assert messages.recv() == ("imported", None)
print(worker.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_a_worker_process_waiting_for_a_mesh_ends_when_its_batch_is_killed(tmp_path):
    """A worker process waiting for its next mesh when its batch's process is killed outright
    (SIGKILL: no cleanup, no end of the tasks sent) leaves too: it once waited for ever, with
    the batch's stderr, so that whoever waited for that (here communicate) waited with it."""
    batch = subprocess.Popen(
        [sys.executable, "-c", WAITING_WORKER],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert batch.stdout is not None
    worker_pid = int(batch.stdout.readline())
    try:
        batch.send_signal(signal.SIGKILL)
        _, stderr = batch.communicate(timeout=60)  # the end of stderr: the worker has left
        assert batch.returncode == -signal.SIGKILL
        assert "Traceback" not in stderr, stderr
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker_pid, signal.SIGKILL)  # (only where it did not leave)


@pytest.mark.slow
def test_a_batch_whose_stdout_goes_away_still_writes_every_file(tmp_path):
    """The summary line is all a batch prints: a reader gone away ends it quietly (141), a
    stdout closed at start is one error line (1); the files are written either way."""
    folder, names = batch_folder(tmp_path, 4)
    read, write = os.pipe()
    os.close(read)
    try:
        gone = subprocess.run(
            [sys.executable, "-c", COMMAND, *map(str, batch_args(folder, tmp_path / "a", 1))],
            cwd=PROJECT_ROOT, stdout=write, stderr=subprocess.PIPE, text=True, timeout=300,
            check=False,
        )  # fmt: skip
    finally:
        os.close(write)
    assert (gone.returncode, gone.stderr) == (141, "")
    assert_whole(tmp_path / "a", names)
    closed = subprocess.run(
        [sys.executable, "-c", COMMAND, *map(str, batch_args(folder, tmp_path / "b", 1))],
        cwd=PROJECT_ROOT, stderr=subprocess.PIPE, text=True, timeout=300, check=False,
        preexec_fn=lambda: os.close(1),
    )  # fmt: skip
    assert closed.returncode == 1
    assert closed.stderr == "voxelize: error: stdout: cannot write (it is closed)\n"
    assert_whole(tmp_path / "b", names)
