"""The batch command's start-up: its device opens on a thread once the helpers are forked,
and the worker uses that one; its outputs are planned once; its refusals and Ctrl-C during
start-up end it as before."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import voxelizer
import voxelizer.cli
from voxelizer import OutputError, voxelize_many
from voxelizer.io import mesh_files

from ..helpers import PROJECT_MODELS, RESTORE_SIGINT, assert_one_line_error, run_cli, shared_model

PROJECT_ROOT = Path(__file__).resolve().parents[2]
GRID = 16
SOURCES = [PROJECT_MODELS / "gear.ply", shared_model("torus.stl"), PROJECT_MODELS / "gear.ply"]


def meshes_in(folder: Path) -> list[Path]:
    """Six meshes in subfolders of `folder` (enough for two reading processes)."""
    paths = []
    for number, source in enumerate(SOURCES * 2):
        path = folder / str(number) / source.name
        path.parent.mkdir(parents=True)
        shutil.copyfile(source, path)
        paths.append(path)
    return paths


def project_env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    root = str(PROJECT_ROOT)
    return dict(os.environ, PYTHONPATH=root if not path else f"{root}{os.pathsep}{path}")


# The command in a fresh process, with two reading processes as on a host with cores to
# spare; every Device opened is recorded (its thread, and the reading processes forked by
# then), apart from the short-lived ones that compile kernels alongside (SecondCompiler,
# their threads recorded), and so are the thread of every Vulkan instance made and the
# Voxelizer each mesh went through.
OPENS_RECORDED = """
import json, sys, threading
import voxelizer.batch.engine
import voxelizer.batch.worker
from voxelizer import api
from voxelizer.batch.readers import shared_load_processes
from voxelizer.cli import main
from voxelizer.gpu.device import Device, Instance
from voxelizer.gpu.first_dispatches import SecondCompiler

voxelizer.batch.engine.default_load_processes = lambda workers=1: 2
real_init = Device.__init__
opened, compilers, compiling = [], [], threading.local()

def recorded_init(self, *args, **kwargs):
    if getattr(compiling, "now", False):
        compilers.append(threading.current_thread().name)
    else:
        opened.append([threading.current_thread().name, shared_load_processes(2).forked])
    real_init(self, *args, **kwargs)

real_second = SecondCompiler.open.__func__

def recorded_second(cls, *args, **kwargs):
    compiling.now = True
    try:
        return real_second(cls, *args, **kwargs)
    finally:
        compiling.now = False

SecondCompiler.open = classmethod(recorded_second)

real_instance = Instance.__init__
instances = []

def recorded_instance(self, *args, **kwargs):
    instances.append(threading.current_thread().name)
    real_instance(self, *args, **kwargs)

real_call = voxelizer.batch.worker.voxelize_checked
used = set()

def recorded_call(voxelizer, *args, **kwargs):
    used.add(id(voxelizer))
    return real_call(voxelizer, *args, **kwargs)

Device.__init__ = recorded_init
Instance.__init__ = recorded_instance
voxelizer.batch.worker.voxelize_checked = recorded_call
code = main(sys.argv[1:])
shared = sorted(id(v) for v in api._shared.values())
print(json.dumps({"exit": code, "opened": opened, "compilers": compilers,
                  "instances": instances, "used": sorted(used), "shared": shared}))
"""


@pytest.mark.parametrize("devices", [None, "0"])
def test_the_worker_uses_the_device_opened_while_the_command_starts(tmp_path, devices):
    """One Device opened in the process, on the opening thread, after the reading processes
    were forked; one Vulkan instance, made there too (--devices is checked on it, not on
    one made first on the main thread); every mesh voxelized on that shared Voxelizer; the
    files those of single calls, byte for byte."""
    paths = meshes_in(tmp_path / "in")
    out = tmp_path / "out"
    command = [sys.executable, "-c", OPENS_RECORDED, str(tmp_path / "in"), "--out-dir", str(out)]
    command += ["--grid", str(GRID), "--quiet"] + (["--devices", devices] if devices else [])
    done = subprocess.run(
        command, cwd=tmp_path, env=project_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["exit"] == 0, done.stderr
    assert found["opened"] == [["voxelize-open-device", 2]]
    # A second device compiles kernels alongside where the first kernel's first dispatch
    # looks cold (still running after COLD_COMPILE_S): on a loaded host a cached one can
    # too. It is opened, and closed, where the pipelines are built, never for the meshes.
    assert set(found["compilers"]) <= {"voxelizer-pipelines"}, found["compilers"]
    assert found["instances"] == ["voxelize-open-device"]
    assert len(found["shared"]) == 1 and found["used"] == found["shared"]
    for path in paths:
        output = out / path.parent.name / path.with_suffix(".svo").name
        single = tmp_path / "single.svo"
        voxelizer.voxelize(path, grid=GRID, out=single, overwrite=True)
        assert output.read_bytes() == single.read_bytes(), output


def test_the_command_plans_its_outputs_once(tmp_path, capsys, monkeypatch):
    """The command names and checks its outputs once (the engine takes its plan); a direct
    voxelize_many call does its own."""
    calls = {"output_paths": 0, "replaced_input": 0}

    def counted(name: str):
        real = getattr(mesh_files, name)

        def count(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)

        for module in list(sys.modules.values()):  # wherever it was imported by name
            if getattr(module, name, None) is real:
                monkeypatch.setattr(module, name, count)

    for name in calls:
        counted(name)
    meshes_in(tmp_path / "in")
    code, _, stderr = run_cli(capsys, tmp_path / "in", "--out-dir", tmp_path / "out", "--grid", 8)
    assert code == 0, stderr
    assert calls == {"output_paths": 1, "replaced_input": 1}
    results = list(voxelize_many(sorted((tmp_path / "in").rglob("*.ply")), grid=8,
                                 out_dir=tmp_path / "many"))  # fmt: skip
    assert [result.status for result in results] == ["done"] * 4
    assert calls == {"output_paths": 2, "replaced_input": 2}


def test_refusals_are_one_line_before_any_file(tmp_path, capsys):
    """An output that exists, an output that would replace an @list.txt the inputs came from,
    a --devices selector that names no device: one line, status 1, nothing written."""
    paths = meshes_in(tmp_path / "in")
    out = tmp_path / "out"
    (out / "1").mkdir(parents=True)
    (out / "1" / "torus.svo").write_bytes(b"precious")
    code, stdout, stderr = run_cli(capsys, tmp_path / "in", "--out-dir", out, "--grid", GRID)
    assert_one_line_error(code, stdout, stderr, f"{out / '1' / 'torus.svo'}: file exists")
    assert "(use --force to overwrite, or --skip-existing to resume)" in stderr
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == ["torus.svo"]
    assert (out / "1" / "torus.svo").read_bytes() == b"precious"

    listing = tmp_path / "in" / "0" / "gear.svo"  # where the first mesh's output would go
    listing.write_text("\n".join(str(path) for path in paths) + "\n")
    code, stdout, stderr = run_cli(capsys, f"@{listing}", "--out-dir", tmp_path / "in")
    assert_one_line_error(code, stdout, stderr, "an output would replace the input")
    assert str(listing) in stderr
    assert listing.read_text().count("\n") == len(paths)

    code, stdout, stderr = run_cli(
        capsys, tmp_path / "in", "--out-dir", tmp_path / "o2", "--devices", "0,7"
    )
    assert_one_line_error(code, stdout, stderr, "no Vulkan device with index 7")
    assert not (tmp_path / "o2").exists()

    # A wrong device is said before an output that exists (checked after the outputs).
    code, stdout, stderr = run_cli(
        capsys, tmp_path / "in", "--out-dir", out, "--grid", GRID, "--devices", "0,7"
    )
    assert_one_line_error(code, stdout, stderr, "no Vulkan device with index 7")
    assert (out / "1" / "torus.svo").read_bytes() == b"precious"


def test_plan_tasks_refuses_an_output_over_another_input(tmp_path):
    paths = meshes_in(tmp_path / "in")
    listing = tmp_path / "in" / "0" / "gear.npz"
    with pytest.raises(OutputError, match="would replace the input"):
        from voxelizer.batch.tasks import plan_tasks
        from voxelizer.io.writers import OutputFormat

        plan_tasks(paths, out_dir=tmp_path / "in", format=OutputFormat.named("npz"),
                   root=tmp_path / "in", overwrite=True, other_inputs=[listing])  # fmt: skip


# Ctrl-C while the device opens on its thread (slowed down here, and saying when it began).
INTERRUPTED_WHILE_OPENING = """
import sys, time
from voxelizer.cli import run
from voxelizer.gpu import device

real_describe = device._describe

def slow_describe(index, physical):
    print("opening", flush=True)
    time.sleep(2.0)
    return real_describe(index, physical)

device._describe = slow_describe
sys.argv[0] = "voxelize"
run()
"""


def test_ctrl_c_while_the_device_opens_ends_the_batch_cleanly(tmp_path):
    meshes_in(tmp_path / "in")
    out = tmp_path / "out"
    command = [sys.executable, "-c", RESTORE_SIGINT + textwrap.dedent(INTERRUPTED_WHILE_OPENING)]
    command += [str(tmp_path / "in"), "--out-dir", str(out), "--grid", str(GRID)]
    process = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=project_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "opening\n"
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == "voxelize: interrupted"
    assert "Traceback" not in stderr and "Fatal" not in stderr
    assert "0 meshes before the interrupt: 0 done" in stdout
    assert not out.exists() or not [p for p in out.rglob("*") if p.is_file()]


@pytest.mark.parametrize("ray", [False, True])
def test_only_a_local_batch_opens_a_device_here(tmp_path, capsys, monkeypatch, ray):
    """The device of the worker here opens early (the first of --devices); with --ray no
    device opens in this process (the cluster's actors have theirs)."""
    import voxelizer.batch.cli
    import voxelizer.batch.ray
    from voxelizer.batch.engine import BatchRun

    opened: list[object] = []
    monkeypatch.setattr(
        voxelizer.batch.cli,
        "open_device_meanwhile",
        lambda device, **kernels: opened.append(device),
    )
    monkeypatch.setattr(
        voxelizer.batch.ray, "voxelize_files_on_ray", lambda *a, **k: BatchRun(iter([]), 0)
    )
    # (no cluster asked: a start that connects to none)
    never = voxelizer.batch.ray.ActorStart(None, list)
    monkeypatch.setattr(voxelizer.batch.ray, "start_actors", lambda **k: never)
    meshes_in(tmp_path / "in")
    where = ["--ray", "auto"] if ray else ["--devices", "0,0"]
    code, _, stderr = run_cli(
        capsys, tmp_path / "in", "--out-dir", tmp_path / "out", "--grid", 8, *where
    )
    assert code == 0, stderr
    assert opened == ([] if ray else [0])
