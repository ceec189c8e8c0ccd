"""Process safety: importing without the Vulkan loader, Ctrl-C at any moment, fork.

The interrupts are real SIGINTs, sent in a child Python so that a stray one cannot stop the
test run; that child runs with the validation layer on and reports what it said. The fork
tests use a real `fork` worker pool (PyTorch's DataLoader default on Linux), with a timeout
so that a hang fails instead of stalling the run.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import voxelizer
from voxelizer import DeviceError
from voxelizer.api import close_shared
from voxelizer.gpu.device import Instance
from voxelizer.parallel import for_row_chunks
from voxelizer.reference import voxelize_reference

from ..helpers import PROJECT_MODELS, RESTORE_SIGINT, load_model, placed

PROJECT_ROOT = Path(__file__).resolve().parents[2]
TORUS_KNOT = PROJECT_MODELS / "torus_knot.ply"


def run_python(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """This interpreter in the project root, with VOXELIZER_VALIDATION=1 (from conftest)."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=PROJECT_ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


# --- no Vulkan loader ---------------------------------------------------------------------------

# What `import vulkan` does on a machine without libvulkan.so.1 (vulkan/_vulkan.py dlopens it
# by name and raises OSError): a package of that name, first on the path, that does the same.
MISSING_LOADER = (
    "raise OSError(\"cannot load library 'libvulkan.so.1': libvulkan.so.1: "
    'cannot open shared object file: No such file or directory")\n'
)


@pytest.fixture(scope="module")
def without_vulkan(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment in which `import vulkan` fails as it does without the Vulkan loader."""
    root = tmp_path_factory.mktemp("no_vulkan")
    (root / "vulkan").mkdir()
    (root / "vulkan" / "__init__.py").write_text(MISSING_LOADER)
    return {"PYTHONPATH": str(root)}


def test_importing_voxelizer_does_not_import_vulkan():
    result = run_python(
        "-c",
        "import sys, voxelizer, voxelizer.cli, voxelizer.reference, voxelizer.benchmarks.__main__; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'vulkan'))",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_environment_really_lacks_the_loader(without_vulkan):
    result = run_python("-c", "import vulkan", env=without_vulkan)
    assert result.returncode == 1 and "OSError: cannot load library 'libvulkan.so.1'" in (
        result.stderr
    )


@pytest.mark.parametrize("option", ["--help", "--version"])
def test_help_and_version_without_the_loader(without_vulkan, option):
    result = run_python("-m", "voxelizer", option, env=without_vulkan)
    assert result.returncode == 0, result.stderr
    assert "voxelize" in result.stdout and result.stderr == ""


def test_files_and_the_cpu_reference_without_the_loader(without_vulkan, tmp_path):
    voxels = np.zeros((8, 12, 16), bool)
    voxels[2:6, 3:9, 4:13] = True
    voxelizer.save(placed(voxels), tmp_path / "box.svo")
    script = (
        "import sys, voxelizer\n"
        "from voxelizer.reference import voxelize_reference\n"
        "print(voxelizer.load(sys.argv[1]).count())\n"
        "print(voxelize_reference(voxelizer.load_mesh(sys.argv[2]), 16).count())\n"
    )
    result = run_python(
        "-c", script, str(tmp_path / "box.svo"), str(TORUS_KNOT), env=without_vulkan
    )
    assert result.returncode == 0, result.stderr
    expected = voxelize_reference(load_model("torus_knot.ply"), 16).count()
    assert result.stdout.split() == [str(voxels.sum()), str(expected)]


@pytest.mark.parametrize("args", [[str(TORUS_KNOT), "--grid", "16"], ["--list-devices"]])
def test_device_commands_without_the_loader_name_the_library(without_vulkan, args):
    result = run_python("-m", "voxelizer", *args, env=without_vulkan)
    assert result.returncode == 1 and result.stdout == "", result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("voxelize: error: cannot load the Vulkan loader libvulkan.so.1")
    assert "apt-get install libvulkan1 mesa-vulkan-drivers" in lines[0]


def test_device_calls_without_the_loader_raise_device_error(without_vulkan):
    script = (
        "import voxelizer\n"
        "for call in (voxelizer.list_devices, voxelizer.Voxelizer):\n"
        "    try:\n"
        "        call()\n"
        "    except voxelizer.DeviceError as error:\n"
        "        print(type(error).__name__, error)\n"
    )
    result = run_python("-c", script, env=without_vulkan)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2, result.stdout
    assert all(line.startswith("DeviceError cannot load the Vulkan loader") for line in lines)


# --- Ctrl-C -----------------------------------------------------------------------------------

# Run in a child: interrupt voxelizations with real SIGINTs, then check that the same Voxelizer
# still gives the reference voxels and that the validation layer said nothing (closing it too).
# First, deterministically: a SIGINT right after each submission of a call, before its wait
# (the GPU work still pending); then `rounds` times at a random moment of a loop of calls.
INTERRUPT_SCRIPT = """
import json, os, random, signal, sys, threading, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever the launcher left
import numpy as np
import vulkan
import voxelizer
from voxelizer.gpu.device import Instance
from voxelizer.reference import voxelize_reference

path, rounds, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
mesh = voxelizer.load_mesh(path)
GRIDS = (64, 40)
expected = {n: voxelize_reference(mesh, n).to_numpy() for n in GRIDS}
vox = voxelizer.Voxelizer()
calls = [lambda: vox.voxelize(mesh, GRIDS[0]), lambda: vox.voxelize_dense(mesh, GRIDS[1])]

def correct():
    return all(np.array_equal(call().to_numpy(), expected[n]) for call, n in zip(calls, GRIDS))

real_submit = vulkan.vkQueueSubmit
submits = {"count": 0, "interrupt_at": 0}

def submit_then_interrupt(*args):
    result = real_submit(*args)
    submits["count"] += 1
    if submits["count"] == submits["interrupt_at"]:
        os.kill(os.getpid(), signal.SIGINT)  # Python raises it before the wait is called
    return result

vulkan.vkQueueSubmit = submit_then_interrupt
correct()
per_call = submits["count"]
after_submit = 0
for at in range(1, per_call + 1):
    submits.update(count=0, interrupt_at=at)
    try:
        correct()
    except KeyboardInterrupt:
        after_submit += 1
submits["interrupt_at"] = 0
ok_after_submit = correct()

started = time.perf_counter()
correct()
loop_time = time.perf_counter() - started
generator = random.Random(seed)
at_random = 0
for round in range(rounds):
    killer = threading.Timer(generator.uniform(0, loop_time), os.kill, (os.getpid(), signal.SIGINT))
    try:
        killer.start()
        while True:  # only the SIGINT ends it, so none is left to arrive later
            for call in calls:
                call()
    except KeyboardInterrupt:
        at_random += 1
    killer.join()
ok_at_random = correct()
vox.close()
print(json.dumps({
    "submits_per_call": per_call,
    "after_submit": after_submit,
    "ok_after_submit": ok_after_submit,
    "at_random": at_random,
    "ok_at_random": ok_at_random,
    "messages": Instance.shared().messages,
}))
"""


# What both interrupt scripts below start with: `interrupt_after_first(name)` makes the
# vulkan function `name` raise SIGINT right after its first call returns, and returns its
# calls and a function that puts the real one back.
INTERRUPT_AFTER_FIRST = """
import json, os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever the launcher left
import numpy as np
import vulkan
import voxelizer
from voxelizer.gpu.device import Instance


def interrupt_after_first(name):
    real = getattr(vulkan, name)
    calls = []

    def create_then_interrupt(*args):
        result = real(*args)
        calls.append(1)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)  # raised as soon as this returns
        return result

    setattr(vulkan, name, create_then_interrupt)
    return calls, lambda: setattr(vulkan, name, real)
"""

# A SIGINT right after each kind of Vulkan object is created (before its handle is stored
# where it is destroyed): the call is interrupted, the next call gives the reference voxels,
# and closing the device and the instance leaves the validation layer no leak to report.
CREATE_INTERRUPT_SCRIPT = (
    INTERRUPT_AFTER_FIRST
    + """
from voxelizer.reference import voxelize_reference

mesh = voxelizer.load_mesh(sys.argv[1])
expected = voxelize_reference(mesh, 32).to_numpy()
report = {}
for name in sys.argv[2:]:
    calls, restore = interrupt_after_first(name)
    vox = voxelizer.Voxelizer()
    try:
        vox.voxelize(mesh, 32)
        interrupted = False
    except KeyboardInterrupt:
        interrupted = True
    restore()
    same = np.array_equal(vox.voxelize(mesh, 32).to_numpy(), expected)
    vox.close()
    report[name] = [bool(calls), interrupted, same]
Instance.shared().close()
print(json.dumps({"report": report, "messages": Instance.shared().messages}))
"""
)

# (vkMapMemory: not an object, but a mapping made once per buffer and kept likewise)
CREATED_OBJECTS = ["vkCreateComputePipelines", "vkCreateShaderModule", "vkCreateBuffer",
                   "vkAllocateMemory", "vkMapMemory"]  # fmt: skip


def test_sigint_right_after_a_vulkan_object_is_created_leaks_nothing():
    result = run_python(
        "-c", RESTORE_SIGINT + CREATE_INTERRUPT_SCRIPT, str(TORUS_KNOT), *CREATED_OBJECTS
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["messages"] == [], report["messages"][:2]
    assert report["report"] == {name: [True, True, True] for name in CREATED_OBJECTS}, report


# A SIGINT right after the thread that builds a call's kernels ahead starts (before the
# Voxelizer has recorded it for close to join): closing at once must wait for that thread,
# not destroy the device while it still builds kernels and submits their first dispatches.
THREAD_START_INTERRUPT_SCRIPT = """
import json, os, signal, sys, threading, time
import numpy as np
import vulkan
import voxelizer
from voxelizer.gpu.device import Instance
from voxelizer.reference import voxelize_reference

mesh = voxelizer.load_mesh(sys.argv[1])
real_create = vulkan.vkCreateComputePipelines

def slow_create(*args):  # on the thread: still building when the Voxelizer closes
    if threading.current_thread() is not threading.main_thread():
        time.sleep(0.05)
    return real_create(*args)

vulkan.vkCreateComputePipelines = slow_create
real_start = threading.Thread.start
started = []

def start_then_interrupt(self):
    real_start(self)
    if self.name == "voxelizer-pipelines" and not started:
        started.append(self)
        os.kill(os.getpid(), signal.SIGINT)  # raised as soon as this returns

threading.Thread.start = start_then_interrupt
vox = voxelizer.Voxelizer()
try:
    vox.voxelize(mesh, 32)
    interrupted = False
except KeyboardInterrupt:
    interrupted = True
threading.Thread.start = real_start
vox.close()  # at once: the thread is still building kernels
joined = bool(started) and not started[0].is_alive()
with voxelizer.Voxelizer() as fresh:
    same = np.array_equal(fresh.voxelize(mesh, 32).to_numpy(),
                          voxelize_reference(mesh, 32).to_numpy())
Instance.shared().close()
print(json.dumps({"report": [len(started), interrupted, joined, same],
                  "messages": Instance.shared().messages}))
"""


def test_sigint_right_after_the_kernel_thread_starts_leaves_nothing_running():
    result = run_python("-c", RESTORE_SIGINT + THREAD_START_INTERRUPT_SCRIPT, str(TORUS_KNOT))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Exception in thread" not in result.stderr, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["messages"] == [], report["messages"][:2]
    assert report["report"] == [1, True, True, True], report


OPEN_INTERRUPT_SCRIPT = (
    INTERRUPT_AFTER_FIRST
    + """
report = {}
for name in sys.argv[1:]:
    calls, restore = interrupt_after_first(name)
    try:
        voxelizer.Voxelizer().close()
        interrupted = False
    except KeyboardInterrupt:
        interrupted = True
    restore()
    vox = voxelizer.Voxelizer()  # the next one opens and works
    count = vox.voxelize((np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1.0]]),
                          np.array([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]])), 8).count()
    vox.close()
    report[name] = [bool(calls), interrupted, count > 0]
open_devices = Instance.shared().open_devices  # a device nobody destroys keeps its count
Instance.shared().close()
print(json.dumps({"report": report, "messages": Instance.shared().messages,
                  "open_devices": open_devices}))
"""
)

OPENING_OBJECTS = ["vkCreateDevice", "vkCreateCommandPool", "vkAllocateCommandBuffers",
                   "vkCreateFence", "vkCreateQueryPool"]  # fmt: skip


def test_sigint_while_a_voxelizer_opens_leaves_nothing_behind():
    """A Ctrl-C right after each object a Voxelizer creates as it opens: the constructor
    raises KeyboardInterrupt, destroys what it created (the layer reports no leaked object
    when the instance goes), and the next Voxelizer works."""
    result = run_python("-c", RESTORE_SIGINT + OPEN_INTERRUPT_SCRIPT, *OPENING_OBJECTS)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["messages"] == [], report["messages"][:2]
    assert report["open_devices"] == 0
    assert report["report"] == {name: [True, True, True] for name in OPENING_OBJECTS}, report


def test_sigint_at_any_moment_leaves_the_voxelizer_usable():
    rounds = 50
    result = run_python(
        "-c", RESTORE_SIGINT + INTERRUPT_SCRIPT, str(TORUS_KNOT), str(rounds), "2024"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["messages"] == [], report["messages"][:2]
    assert report["submits_per_call"] >= 2
    assert report["after_submit"] == report["submits_per_call"]
    assert report["at_random"] == rounds
    assert report["ok_after_submit"] and report["ok_at_random"], report


# --- fork -------------------------------------------------------------------------------------

POOL_TIMEOUT_S = 30  # a hang fails the test instead of stalling the run
_parent_voxelizer: voxelizer.Voxelizer | None = None  # inherited by the forked workers


def occupy_every_row_thread() -> int:
    """Run chunks on all threads of voxelizer.parallel's pool at once (so that it starts all of
    them, and a forked child inherits a full pool with none of its threads); rows counted."""
    done = [0]

    def work(start: int, stop: int) -> None:
        time.sleep(0.02)
        done[0] += stop - start

    for_row_chunks(64, work, min_rows=1)
    return done[0]


def voxelize_in_worker(grid: int) -> tuple[int, int, list[str]]:
    """(pid, solid voxels, validation messages) of the module function in a forked worker,
    after using the row threads there too."""
    assert occupy_every_row_thread() == 64
    count = voxelizer.voxelize(TORUS_KNOT, grid).count()
    return os.getpid(), count, list(Instance.shared().messages)


def use_parent_voxelizer(grid: int) -> str:
    """The error the parent's Voxelizer raises in a forked worker."""
    assert _parent_voxelizer is not None
    try:
        _parent_voxelizer.voxelize(TORUS_KNOT, grid)
    except DeviceError as error:
        _parent_voxelizer.close()  # forgets, destroys nothing of the parent's
        return str(error)
    return "no error"


def test_fork_pool_after_the_parent_voxelized():
    assert occupy_every_row_thread() == 64
    expected = voxelizer.voxelize(TORUS_KNOT, 48).count()
    try:
        with multiprocessing.get_context("fork").Pool(2) as pool:
            results = pool.map_async(voxelize_in_worker, [48] * 4).get(timeout=POOL_TIMEOUT_S)
    except DeviceError as error:
        # A driver not known to survive fork (NVIDIA's refused or hung in the child) is not
        # touched there; Mesa's (lavapipe, where CI runs) is, and the workers must succeed.
        assert Instance.fork_unsafe
        assert "does not survive fork" in str(error) and "'spawn'" in str(error)
    else:
        assert not Instance.fork_unsafe
        assert [count for _, count, _ in results] == [expected] * 4
        assert all(messages == [] for _, _, messages in results), results
        assert os.getpid() not in {pid for pid, _, _ in results}
    assert voxelizer.voxelize(TORUS_KNOT, 48).count() == expected  # the parent's still works
    close_shared()


def test_a_voxelizer_used_in_a_forked_child_says_to_create_one_there():
    global _parent_voxelizer
    _parent_voxelizer = voxelizer.Voxelizer()
    try:
        expected = _parent_voxelizer.voxelize(TORUS_KNOT, 32).count()
        with multiprocessing.get_context("fork").Pool(1) as pool:
            message = pool.apply_async(use_parent_voxelizer, (32,)).get(timeout=POOL_TIMEOUT_S)
        assert message == (
            f"this Voxelizer was created in process {os.getpid()}; create a new one in this "
            "process (after fork, Vulkan objects cannot be shared)"
        )
        assert _parent_voxelizer.voxelize(TORUS_KNOT, 32).count() == expected
    finally:
        _parent_voxelizer.close()
        _parent_voxelizer = None


# --- a closed Voxelizer -----------------------------------------------------------------------

# In a child, so that a Vulkan call on a destroyed device (which aborts the process) fails
# this test instead of ending the run: every call on a closed Voxelizer and on its device.
CLOSED_SCRIPT = """
import json, sys
import numpy as np
import voxelizer
from voxelizer.gpu.device import Instance

vox = voxelizer.Voxelizer()
before = vox.voxelize(sys.argv[1], 16).count()
vox.close()
vox.close()  # a second close does nothing
vertices = np.array([[1, 1, 1], [9, 1, 1], [1, 9, 1], [1, 1, 9]], np.float32)
faces = np.array([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]], np.int32)
calls = {
    "voxelize": lambda: vox.voxelize(sys.argv[1], 16),
    "voxelize_dense": lambda: vox.voxelize_dense(sys.argv[1], 16),
    "voxelize_grid": lambda: vox.voxelize_grid(vertices, faces, 16),
    "device.wait_idle": lambda: vox.device.wait_idle(),
    "device.settle": lambda: vox.device.settle(),
}
raised = {}
for name, call in calls.items():
    try:
        call()
        raised[name] = "nothing"
    except Exception as error:
        raised[name] = [type(error).__name__, isinstance(error, voxelizer.VoxelizerError), str(error)]
with voxelizer.Voxelizer() as fresh:  # the process goes on voxelizing
    after = fresh.voxelize(sys.argv[1], 16).count()
print(json.dumps({"raised": raised, "same": before == after, "messages": Instance.shared().messages}))
"""


def test_every_call_on_a_closed_voxelizer_is_a_voxelizer_error():
    result = run_python("-c", CLOSED_SCRIPT, str(TORUS_KNOT))
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["messages"] == [] and report["same"], report
    raised = report["raised"]
    for name in ("voxelize", "voxelize_dense", "voxelize_grid"):
        assert raised[name] == ["VoxelizerError", True, "this Voxelizer is closed"], raised
    for name in ("device.wait_idle", "device.settle"):
        assert raised[name] == ["DeviceError", True, "this device is closed"], raised


# --- exiting while a device is being opened ---------------------------------------------------

# The command opens its device on a thread while it reads the mesh; a Ctrl-C then ends the
# process with that thread still opening it. The instance's exit handler must leave the
# instance alone until the device is open (destroying it under the thread crashed the process).
OPENING_SCRIPT = """
import json, threading, time
import voxelizer
from voxelizer.gpu import device

opening = threading.Event()
real_describe = device._describe

def slow_describe(index, physical):  # early in opening a device: before vkCreateDevice
    opening.set()
    time.sleep(0.5)
    return real_describe(index, physical)

device._describe = slow_describe
opened = []
thread = threading.Thread(target=lambda: opened.append(voxelizer.Voxelizer()))
thread.start()
opening.wait()
instance = device.Instance.shared()
instance.close()  # what the exit handler does
kept_while_opening = instance.handle is not None
thread.join()
count = opened[0].voxelize(voxelizer.load_mesh(__import__("sys").argv[1]), 16).count()
opened[0].close()
instance.close()
print(json.dumps({"kept": kept_while_opening, "count": count, "closed": instance.handle is None,
                  "messages": instance.messages}))
"""


def test_the_instance_outlives_a_device_being_opened_at_exit():
    result = run_python("-c", OPENING_SCRIPT, str(TORUS_KNOT))
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["kept"] and report["closed"] and report["count"] > 0, report
    assert report["messages"] == [], report
