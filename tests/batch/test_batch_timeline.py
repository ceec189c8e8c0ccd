"""The batch command's start-up timeline under -vv: one line per milestone, in seconds since
the process started, in order; none without -vv, none from another process."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys

import pytest

from voxelizer import Voxelizer
from voxelizer.batch.timeline import Timeline
from voxelizer.options import Options

from ..helpers import PROJECT_MODELS, assert_same_svo
from .test_batch_startup import meshes_in, project_env

LINE = re.compile(r"^voxelize: (\d+\.\d{3}) s: ([a-z ]+?)(?:, (.+))?$")
# Each milestone after those it waits for (the kernels build beside the first mesh's wait,
# and the outputs are checked while the device opens).
AFTER: dict[str, list[str | tuple[str, ...]]] = {
    "helpers forked": ["meshes found"],
    "outputs checked": ["helpers forked"],
    "reading started": ["outputs checked"],
    "device open": ["helpers forked"],
    "kernels built": ["device open"],
    "first mesh at the device": ["device open", "reading started"],
    "first result to the writers": ["first mesh at the device"],
    "first result": ["first result to the writers", "outputs checked"],
    "last result": ["first result"],
    "end": ["last result", "kernels built"],
}


def timeline_of(stderr: str) -> list[tuple[float, str, str | None]]:
    found = [LINE.match(line) for line in stderr.splitlines()]
    return [(float(m[1]), m[2], m[3]) for m in found if m is not None]


def out_of_order(names: list[str], after: dict[str, list[str | tuple[str, ...]]]) -> list[str]:
    """Each milestone of `after` found before one it waits for, in words ("a before b"); a
    tuple: it waits for the first of those found (one worker's or another's)."""
    found = []
    for name, before in after.items():
        for waited in before:
            either = waited if isinstance(waited, tuple) else (waited,)
            places = [names.index(other) for other in either if other in names]
            if not places or min(places) > names.index(name):
                found.append(f"{name} before {' or '.join(either)}")
    return found


def run_batch(tmp_path, *flags: str) -> subprocess.CompletedProcess[str]:
    meshes_in(tmp_path / "in")
    return subprocess.run(
        [sys.executable, "-m", "voxelizer", str(tmp_path / "in"), "--out-dir",
         str(tmp_path / "out"), "--format", "npz", "--grid", "16", *flags],
        cwd=tmp_path, env=project_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_minus_vv_logs_the_start_up_in_order_with_times_since_the_process_started(tmp_path):
    done = run_batch(tmp_path, "-vv")
    assert done.returncode == 0, done.stderr
    lines = timeline_of(done.stderr)
    names = [name for _, name, _ in lines]
    assert sorted(names) == sorted(["meshes found", *AFTER]), done.stderr
    assert out_of_order(names, AFTER) == [], done.stderr
    times = [seconds for seconds, _, _ in lines]
    assert times == sorted(times)
    # From the process's start: Python and the imports come before the first milestone.
    assert times[0] > 0.01
    details = {name: detail for _, name, detail in lines}
    assert details["meshes found"] == "6"
    assert details["last result"] == "6 meshes"
    assert details["device open"]  # the device's name
    assert names[-1] == "end"
    # The summary is printed before the end, and the outputs are as without -vv.
    assert "6 meshes: 6 done, 0 skipped, 0 failed" in done.stdout
    assert len(list((tmp_path / "out").rglob("*.npz"))) == 6


# The command with the thread that opens the device slow to mark it (as on a loaded host,
# where the worker, released by the same opening, can run first).
SLOW_OPENER = """
import sys, threading, time
from voxelizer.batch.timeline import timeline
from voxelizer.cli import run

real_mark = timeline.mark

def mark(milestone, detail=""):
    if milestone == "device open" and threading.current_thread().name == "voxelize-open-device":
        time.sleep(1.0)
    real_mark(milestone, detail)

timeline.mark = mark
sys.argv[0] = "voxelize"
run()
"""


@pytest.mark.slow
def test_the_device_is_open_before_its_first_mesh_whichever_thread_says_so(tmp_path):
    meshes_in(tmp_path / "in")
    done = subprocess.run(
        [sys.executable, "-c", SLOW_OPENER, str(tmp_path / "in"), "--out-dir",
         str(tmp_path / "out"), "--format", "npz", "--grid", "16", "-vv"],
        cwd=tmp_path, env=project_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    names = [name for _, name, _ in timeline_of(done.stderr)]
    assert names.count("device open") == 1, names
    assert names.index("device open") < names.index("first mesh at the device"), names


@pytest.mark.parametrize("flags", [(), ("-v",)])
def test_no_timeline_without_minus_vv(tmp_path, flags):
    done = run_batch(tmp_path, *flags)
    assert done.returncode == 0, done.stderr
    assert timeline_of(done.stderr) == []


def test_a_failed_batch_ends_its_timeline(tmp_path):
    """An error before any mesh (an output that exists): the one line, then the end."""
    (tmp_path / "out" / "0").mkdir(parents=True)
    (tmp_path / "out" / "0" / "gear.npz").write_bytes(b"")
    done = run_batch(tmp_path, "-vv")
    assert done.returncode == 1
    names = [name for _, name, _ in timeline_of(done.stderr)]
    assert names[0] == "meshes found" and names[-1] == "end"
    assert "first result" not in names
    assert "gear.npz: file exists" in done.stderr


def test_a_milestone_is_marked_once_and_only_in_the_process_that_started_it(caplog, monkeypatch):
    timeline = Timeline()
    with caplog.at_level(logging.DEBUG, logger="voxelizer"):
        timeline.mark("before the start")
        timeline.start()
        timeline.mark("found", "3")
        timeline.mark("found", "4")
        monkeypatch.setattr(os, "getpid", lambda: -1)  # as in a forked helper
        timeline.mark("in a child")
        monkeypatch.undo()
        timeline.stop()
        timeline.mark("after the stop")
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 1
    assert re.fullmatch(r"\d+\.\d{3} s: found, 3", messages[0])


def test_prepare_builds_a_calls_kernels_ahead_of_it():
    """Voxelizer.prepare: a thread building the kernels, None once they are built; the call
    after it gives the same voxels as one without it."""
    options = Options.create(16)
    with Voxelizer() as prepared, Voxelizer() as plain:
        building = prepared.prepare(options)
        assert building is not None
        building.join()
        assert prepared.prepare(options) is None
        mesh = PROJECT_MODELS / "gear.ply"
        assert_same_svo(prepared.voxelize(mesh, 16), plain.voxelize(mesh, 16))


# --- two workers: the second in a process of its own ---------------------------------------

# The milestones a batch with a worker process adds, each after those it waits for: the
# worker process opens its device once the device here is open, and the parent learns it
# (and the process's first result) from its pipe; the processes end before the command. The
# batch's first result is the first that either worker gives: the worker here's ("first
# result to the writers", its own milestone) or the worker process's, whichever comes first
# (the worker process's first when the worker here is slow, or starved on a loaded host).
AFTER_TWO: dict[str, list[str | tuple[str, ...]]] = {
    **AFTER,
    "first result": [
        ("first result to the writers", "worker process first result"),
        "outputs checked",
    ],
    "worker process ready": ["device open", "reading started"],
    "worker process first result": ["worker process ready"],
    "worker processes ended": ["last result"],
    "end": ["last result", "kernels built", "worker processes ended"],
}


def test_minus_vv_with_two_workers_says_when_the_worker_process_opened_its_device(tmp_path):
    done = run_batch(tmp_path, "--jobs", "2", "-vv")
    assert done.returncode == 0, done.stderr
    lines = timeline_of(done.stderr)
    names = [name for _, name, _ in lines]
    # (6 meshes: the worker here may do them all before the parent reads the other's "ready")
    optional = ("worker process ready", "worker process first result")
    assert set(AFTER_TWO) - set(optional) <= set(names), done.stderr
    present = {name: before for name, before in AFTER_TWO.items() if name in names}
    assert out_of_order(names, present) == [], done.stderr
    assert [seconds for seconds, _, _ in lines] == sorted(seconds for seconds, _, _ in lines)
    assert names[-1] == "end"


def test_minus_vv_says_when_the_devices_are_checked(tmp_path):
    """--devices: checked once the outputs are planned (a wrong device is said first)."""
    done = run_batch(tmp_path, "--devices", "0,0", "-vv")
    assert done.returncode == 0, done.stderr
    names = [name for _, name, _ in timeline_of(done.stderr)]
    assert names.index("helpers forked") < names.index("devices checked")
    assert names.index("devices checked") < names.index("outputs checked")


# The command with the device here slow to open (as a device whose start takes long), and
# the plan of its outputs held until the device here is open: the worker process must wait
# for it, and the opening must not wait for the plan. Each opening says when (the monotonic
# clock: one for all processes); the worker process (a fork of this script) waits for its
# turn, not for DEVICE_TURN_SECONDS, however loaded the host.
SLOW_DEVICE_HERE = """
import os, sys, threading, time
import voxelizer.api as api
import voxelizer.batch.cli as batch_cli
import voxelizer.batch.worker as worker
import voxelizer.batch.worker_processes as worker_processes
from voxelizer.cli import run

real_shared = api.shared_voxelizer
opened = threading.Event()


def say(line):
    os.write(2, f"{line}\\n".encode())  # one write: whole among the worker process's lines


def shared_voxelizer(*args, **kwargs):
    if threading.current_thread().name == "voxelize-open-device":
        time.sleep(1.0)
        voxelizer = real_shared(*args, **kwargs)
        say(f"device here open at {time.monotonic():.6f}")
        opened.set()
        return voxelizer
    return real_shared(*args, **kwargs)


real_worker_voxelizer = worker_processes.Voxelizer


def worker_voxelizer(*args, **kwargs):
    say(f"worker process opens at {time.monotonic():.6f}")
    return real_worker_voxelizer(*args, **kwargs)


real_plan = batch_cli.plan_tasks


def plan_tasks(*args, **kwargs):
    say(f"device open before the plan: {opened.wait(60)}")
    return real_plan(*args, **kwargs)


# The worker here slow on each mesh: the worker process takes its share (a forked copy of
# this script: its own meshes at full speed).
here = os.getpid()
real_voxelize = worker.MeshWorker._voxelize


def voxelize(self, *args):
    if os.getpid() == here:
        time.sleep(0.3)
    return real_voxelize(self, *args)


api.shared_voxelizer = shared_voxelizer
worker_processes.Voxelizer = worker_voxelizer
worker_processes.DEVICE_TURN_SECONDS = 600.0
batch_cli.plan_tasks = plan_tasks
worker.MeshWorker._voxelize = voxelize
sys.argv[0] = "voxelize"
run()
"""
OPENED_AT = re.compile(r"(device here open|worker process opens) at (\d+\.\d+)")


@pytest.mark.slow
def test_the_worker_process_opens_its_device_after_the_one_here(tmp_path):
    """With the device here 1 s slow to open, the worker process's device still opens after
    it (it waits for its turn: its opening starts once the one here is done), the opening
    here went on while the plan waited for it, and the worker process (the worker here
    slow) gives results; the milestones in order."""
    meshes_in(tmp_path / "in")
    done = subprocess.run(
        [sys.executable, "-c", SLOW_DEVICE_HERE, str(tmp_path / "in"), "--out-dir",
         str(tmp_path / "out"), "--format", "npz", "--grid", "16", "--jobs", "2", "-vv"],
        cwd=tmp_path, env=project_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "device open before the plan: True" in done.stderr
    openings = OPENED_AT.findall(done.stderr)
    assert [what for what, _ in openings] == ["device here open", "worker process opens"], (
        done.stderr
    )
    (_, here_open), (_, worker_opens) = openings
    assert float(here_open) < float(worker_opens), done.stderr
    names = [name for _, name, _ in timeline_of(done.stderr)]
    assert set(AFTER_TWO) <= set(names), done.stderr
    assert out_of_order(names, AFTER_TWO) == [], done.stderr
    assert len(list((tmp_path / "out").rglob("*.npz"))) == 6
