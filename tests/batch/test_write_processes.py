"""Output files written in helper processes (voxelizer/batch/write_processes.py), as a
batch does on hosts with cores to spare: the same bytes and the same errors as the writer
threads, an existing output refused alike, a writer that dies costs one file (and is
replaced), writers ignore Ctrl-C, an abandoned batch leaves whole files only, and a script
without a main guard works (the writers are forked, or started with `-c`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import voxelizer
from voxelizer import voxelize_many
from voxelizer.batch.engine import _write_processes
from voxelizer.batch.shared_meshes import shared_memory_available
from voxelizer.batch.worker import Finisher
from voxelizer.batch.write_processes import (
    Counted,
    WriteJob,
    WriteProcesses,
    default_write_processes,
    result_of,
    write_job,
)
from voxelizer.errors import OutputError
from voxelizer.io.writers import OUTPUT_FORMATS, OutputFormat
from voxelizer.options import Options

from ..helpers import PROJECT_MODELS, RESTORE_SIGINT, in_order, shared_model

PROJECT_ROOT = Path(__file__).resolve().parents[2]
FILES = [PROJECT_MODELS / "gear.ply", shared_model("torus.stl")]


@pytest.fixture
def files(tmp_path: Path) -> list[Path]:
    """FILES copied into one folder: their outputs are named gear.*, torus.*."""
    folder = tmp_path / "in"
    folder.mkdir()
    for source in FILES:
        (folder / source.name).write_bytes(source.read_bytes())
    return [folder / source.name for source in FILES]


def single_call_bytes(path: Path, fmt: OutputFormat, folder: Path, grid: int) -> bytes:
    result = (
        voxelizer.voxelize(path, grid) if not fmt.dense else voxelizer.voxelize_dense(path, grid)
    )
    target = folder / f"single-{path.stem}{fmt.suffix}"
    fmt.write(result, target)
    return target.read_bytes()


def test_every_format_from_a_writing_process_equals_a_single_call(tmp_path, files):
    """Every format a batch writes, through one writing process: the bytes of a single
    call's file (dense grids cross as column words, octrees as their arrays)."""
    for suffix in OUTPUT_FORMATS:
        fmt = OutputFormat(suffix)
        out = tmp_path / fmt.name
        results = in_order(
            voxelize_many(files, grid=24, out_dir=out, format=fmt, write_processes=1)
        )
        assert [r.status for r in results] == ["done", "done"], [r.error for r in results]
        for result in results:
            assert result.output is not None and result.solid_voxels
            expected = single_call_bytes(Path(result.input), fmt, tmp_path, 24)
            assert result.output.read_bytes() == expected, (suffix, result.input)
        assert not list(out.rglob("*.tmp"))


@pytest.mark.slow
def test_each_of_several_workers_writes_through_its_own_processes(tmp_path, files):
    """Two workers (the second in a spawned process), each with a writing process of its
    own: every file is a single call's, byte for byte."""
    fmt = OutputFormat.named("npz")
    inputs = []  # each file three times, in folders of their own: six outputs
    for copy in range(3):
        for path in files:
            target = tmp_path / "in" / f"c{copy}" / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
            inputs.append(target)
    out = tmp_path / "out"
    results = in_order(
        voxelize_many(inputs, grid=24, out_dir=out, format=fmt, jobs=2, write_processes=1)
    )
    assert [r.status for r in results] == ["done"] * len(inputs), [r.error for r in results]
    for index, (path, result) in enumerate(zip(inputs, results)):
        (tmp_path / f"single{index}").mkdir()
        expected = single_call_bytes(path, fmt, tmp_path / f"single{index}", 24)
        assert Path(result.output).read_bytes() == expected, result.output


def test_results_reach_the_writing_processes_without_a_writer_thread(tmp_path, files, monkeypatch):
    """The device's thread hands each result straight to a writing process: no writer
    thread takes a result that is not thin (it would hold the GIL beside the device's
    thread), and the files are a single call's."""

    def on_a_writer_thread(*args: object, **kwargs: object) -> None:
        raise AssertionError("a writer thread took a result")

    monkeypatch.setattr(Finisher, "write", on_a_writer_thread)
    fmt = OutputFormat.named("npz")
    results = in_order(
        voxelize_many(files, grid=24, out_dir=tmp_path / "out", format=fmt, write_processes=1)
    )
    assert [r.status for r in results] == ["done"] * len(files), [r.error for r in results]
    for path, result in zip(files, results):
        expected = single_call_bytes(path, fmt, tmp_path, 24)
        assert Path(result.output).read_bytes() == expected, result.output


def test_an_existing_output_is_refused_alike(tmp_path, files):
    """An existing output fails its mesh with the words of the writer threads, unless the
    batch overwrites (then it is replaced) or skips it."""
    out = tmp_path / "out"
    out.mkdir()
    taken = out / "gear.npz"
    taken.write_bytes(b"the user's")
    errors = []
    for processes in (0, 2):
        results = in_order(voxelize_many(files, grid=16, out_dir=out, format="npz",
                                     write_processes=processes))  # fmt: skip
        assert [r.status for r in results] == ["failed", "done"]
        errors.append(results[0].error)
        (out / "torus.npz").unlink()
    assert errors[0] == errors[1] and "gear.npz: file exists" in errors[0]
    assert taken.read_bytes() == b"the user's"
    skipped = in_order(voxelize_many(files, grid=16, out_dir=out, format="npz", write_processes=2,
                                 skip_existing=True))  # fmt: skip
    assert [r.status for r in skipped] == ["skipped", "done"]
    replaced = in_order(voxelize_many(files, grid=16, out_dir=out, format="npz", write_processes=2,
                                  overwrite=True))  # fmt: skip
    assert [r.status for r in replaced] == ["done", "done"]
    assert voxelizer.load(taken).count() == replaced[0].solid_voxels


def test_a_write_error_is_the_same_line_from_a_process(tmp_path):
    """A folder that cannot be made (a file is in its way): the same one line either way."""
    inputs = tmp_path / "in"
    (inputs / "sub").mkdir(parents=True)
    (inputs / "other").mkdir()
    files = [inputs / "sub" / "gear.ply", inputs / "other" / "torus.stl"]
    for source, target in zip(FILES, files):
        target.write_bytes(source.read_bytes())
    errors = []
    for processes in (0, 1):
        out = tmp_path / f"out{processes}"
        out.mkdir()
        (out / "sub").write_bytes(b"in the way")
        results = in_order(voxelize_many(files, grid=16, out_dir=out, format="npz",
                                     write_processes=processes))  # fmt: skip
        assert [r.status for r in results] == ["failed", "done"]
        errors.append(results[0].error.replace(f"out{processes}", "out"))
    assert errors[0] == errors[1] and "cannot write" in errors[0], errors


class _Dies:
    """A payload whose unpickling ends the writing process (exit code 3)."""

    def __reduce__(self):
        return (os._exit, (3,))


def test_a_writer_that_dies_fails_one_file_and_is_replaced(tmp_path):
    grid = voxelizer.voxelize_dense(FILES[0], 16)
    fmt = OutputFormat.named("npz")

    def job(name: str) -> WriteJob:
        return WriteJob.of(grid, tmp_path / name, fmt, replace=False, up_axis=None)

    writers = WriteProcesses(1)
    try:
        first = writers.submit(job("a.npz"))
        dying = writers.submit(
            WriteJob(str(tmp_path / "b.npz"), ".npz", False, None, ("result", _Dies()))
        )
        after = [writers.submit(job(name)) for name in ("c.npz", "d.npz")]
        assert first.result(timeout=120) is None
        with pytest.raises(OutputError, match=r"b\.npz: the writing process died while "
                                              r"writing it \(exit code 3\)"):  # fmt: skip
            dying.result(timeout=120)
        for future in after:
            assert future.result(timeout=120) is None
        assert len(writers.writer_pids()) == 1
    finally:
        writers.close()
    assert writers.writer_pids() == []
    assert sorted(os.listdir(tmp_path)) == ["a.npz", "c.npz", "d.npz"]
    for name in ("a.npz", "c.npz", "d.npz"):
        assert voxelizer.load(tmp_path / name).count() == grid.count()


def test_a_writer_killed_while_idle_costs_no_file(tmp_path):
    grid = voxelizer.voxelize_dense(FILES[0], 16)
    fmt = OutputFormat.named("npz")
    writers = WriteProcesses(1)
    try:
        writers.submit(
            WriteJob.of(grid, tmp_path / "a.npz", fmt, replace=False, up_axis=None)
        ).result(timeout=120)
        (pid,) = writers.writer_pids()
        os.kill(pid, signal.SIGKILL)
        while pid in writers.writer_pids():  # (until it is seen ended)
            time.sleep(0.01)
        writers.submit(
            WriteJob.of(grid, tmp_path / "b.npz", fmt, replace=False, up_axis=None)
        ).result(timeout=120)
        assert writers.writer_pids() not in ([], [pid])
    finally:
        writers.close()
    assert voxelizer.load(tmp_path / "b.npz").count() == grid.count()


@pytest.mark.parametrize("shared_memory", [True, False])
def test_results_cross_through_shared_memory_whose_blocks_are_reused(tmp_path, shared_memory):
    """A job's arrays are copied into the writer's region (where the system has one), and
    its block is free again once the writer has written them. The writer counts the voxels
    it was given."""
    grid = voxelizer.voxelize_dense(FILES[0], 48)
    fmt = OutputFormat.named("npz")
    writers = WriteProcesses(1, shared_memory=shared_memory)
    try:
        for number in range(12):
            job = WriteJob.of(grid, tmp_path / f"{number}.npz", fmt, replace=False,
                              up_axis=None, count=True)  # fmt: skip
            assert writers.submit(job).result(timeout=120) == Counted(grid.count(), written=True)
        shared = shared_memory and shared_memory_available()
        assert writers.shared_jobs() == (12 if shared else 0)
        assert writers.held_bytes() == 0  # every block given back
    finally:
        writers.close()
    for number in range(12):
        assert voxelizer.load(tmp_path / f"{number}.npz").count() == grid.count()


def test_a_result_that_may_be_thin_is_counted_and_left_unwritten(tmp_path):
    """With the mesh's projected areas, a result whose solid may be thin is not written:
    the surface pass that decides needs the device, in the batch's process."""
    mesh = voxelizer.load_mesh(FILES[0])
    grid = voxelizer.voxelize_dense(mesh, 16)
    fmt = OutputFormat.named("npz")
    thick = WriteJob.of(grid, tmp_path / "thick.npz", fmt, replace=False, up_axis=None,
                        count=True, thin_areas=mesh.axis_areas)  # fmt: skip
    assert write_job(thick) == Counted(grid.count(), written=True)
    thin = WriteJob.of(grid, tmp_path / "thin.npz", fmt, replace=False, up_axis=None,
                       count=True, thin_areas=mesh.axis_areas * 1e3)  # fmt: skip
    assert write_job(thin) == Counted(grid.count(), written=False)
    assert sorted(os.listdir(tmp_path)) == ["thick.npz"]


def test_writers_ignore_ctrl_c_and_go_on_writing(tmp_path):
    grid = voxelizer.voxelize(FILES[1], 16)
    fmt = OutputFormat.named("svo")
    writers = WriteProcesses(2)
    try:
        writers.submit(
            WriteJob.of(grid, tmp_path / "a.svo", fmt, replace=False, up_axis=None)
        ).result(timeout=120)
        pids = writers.writer_pids()
        assert pids
        for pid in pids:
            os.kill(pid, signal.SIGINT)
            os.kill(pid, signal.SIGTERM)
        writers.submit(
            WriteJob.of(grid, tmp_path / "b.svo", fmt, replace=False, up_axis=None)
        ).result(timeout=120)
        assert set(pids) <= set(writers.writer_pids())  # none ended
    finally:
        writers.close()
    assert voxelizer.load(tmp_path / "b.svo").count() == grid.count()


def test_an_abandoned_batch_leaves_whole_files_and_no_temporaries(tmp_path):
    files = [FILES[0]] * 12
    inputs = tmp_path / "in"
    inputs.mkdir()
    paths = []
    for number, source in enumerate(files):
        paths.append(inputs / f"m{number:02d}{source.suffix}")
        paths[-1].write_bytes(source.read_bytes())
    out = tmp_path / "out"
    expected = voxelizer.voxelize_dense(FILES[0], 24).count()
    with voxelize_many(paths, grid=24, out_dir=out, format="npz", write_processes=2) as run:
        next(run)
    names = os.listdir(out)
    assert not [name for name in names if name.endswith(".tmp")], names
    assert names  # at least the result given
    for name in names:
        assert voxelizer.load(out / name).count() == expected, name


def test_results_kept_in_memory_need_no_writers():
    results = in_order(voxelize_many(FILES, grid=16, write_processes=True))
    assert all(r.result is not None and r.output is None for r in results)
    assert _write_processes(True, 1, 100, None, Options.create(16)) == 0


def test_the_default_asks_for_cores_to_spare_in_each_workers_share(monkeypatch):
    hosts = (  # cores, workers, writers for each worker: its share of the cores counts
        (2, 1, 0), (4, 1, 0), (8, 1, 1), (16, 1, 2), (32, 1, 4), (64, 1, 4), (16, 2, 1),
        (32, 2, 2), (8, 2, 0), (64, 4, 2),
    )  # fmt: skip
    for cores, workers, expected in hosts:
        monkeypatch.setattr(os, "cpu_count", lambda cores=cores: cores)
        assert default_write_processes(workers) == expected, (cores, workers)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    grid = Options.create(128)
    assert _write_processes(None, 1, 7, "out", grid) == 0  # too few meshes (4 a writer)
    assert _write_processes(False, 1, 800, "out", grid) == 0
    assert _write_processes(3, 1, 1, "out", grid) == 3
    with pytest.raises(voxelizer.VoxelizerError, match="0 or more"):
        _write_processes(-1, 1, 1, "out", grid)


def test_larger_grids_get_more_writers_up_to_half_the_cores(monkeypatch):
    """A file's cost grows about with the grid's face: side² over 128³'s count."""
    hosts = (  # cores, grid side, writers
        (16, None, 2), (16, 64, 2), (16, 128, 2), (16, 181, 4), (16, 256, 8), (16, 512, 8),
        (32, 256, 16), (64, 512, 16), (8, 256, 4), (4, 256, 0),
    )  # fmt: skip
    for cores, side, expected in hosts:
        monkeypatch.setattr(os, "cpu_count", lambda cores=cores: cores)
        assert default_write_processes(1, side) == expected, (cores, side)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    options = Options.create((256, 64, 32))  # the longest side counts
    assert _write_processes(None, 1, 800, "out", options) in (0, 8)
    assert _write_processes(True, 1, 800, "out", options) == 8


def test_a_payload_is_the_result_it_stands_for():
    dense = voxelizer.voxelize_dense(FILES[0], 16)
    octree = voxelizer.voxelize(FILES[0], 16)
    for result in (dense, octree):
        job = WriteJob.of(result, Path("x"), OutputFormat.named("npz"), replace=False, up_axis=None)
        copy = result_of(job.payload)
        assert type(copy) is type(result) and copy.count() == result.count()
        assert copy.placement == result.placement


SCRIPT = """
import sys
import voxelizer
from voxelizer.batch import write_processes
out, files = sys.argv[1], sys.argv[2:]
results = list(voxelizer.voxelize_many(files, grid=16, out_dir=out + "/a", format="npz",
                                       write_processes=2))
print("forked", write_processes.shared_write_processes(2).forked)
print("done", sum(r.ok for r in results))
results = list(voxelizer.voxelize_many(files, grid=16, out_dir=out + "/b", format="npz",
                                       write_processes=3))
print("forked", write_processes.shared_write_processes(3).forked)
print("done", sum(r.ok for r in results))
"""


def test_a_script_without_a_main_guard_forks_then_execs_its_writers(tmp_path):
    """A fresh process forks its writers; one with a device open (after the first batch)
    starts them with `-c`: neither runs the script again."""
    script = tmp_path / "script.py"
    script.write_text(RESTORE_SIGINT + textwrap.dedent(SCRIPT))
    (tmp_path / "in").mkdir()
    files = []
    for number in range(4):
        files.append(str(tmp_path / "in" / f"m{number}.ply"))
        Path(files[-1]).write_bytes(FILES[0].read_bytes())
    run = subprocess.run(
        [sys.executable, str(script), str(tmp_path), *files],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[:4] == ["forked 2", "done 4", "forked 0", "done 4"], run.stdout
    names = [f"m{number}.npz" for number in range(4)]
    assert sorted(os.listdir(tmp_path / "a")) == sorted(os.listdir(tmp_path / "b")) == names


INTERRUPTED = """
import sys
import voxelizer
from voxelizer.batch.write_processes import shared_write_processes
out, files = sys.argv[1], sys.argv[2:]
writers = shared_write_processes(2)
print(*[writers.forked], flush=True)
for round in range(1000):
    for result in voxelizer.voxelize_many(files, grid=24, out_dir=out, format="npz",
                                          overwrite=True, write_processes=2):
        if round == 0 and result.index == 0:
            print(*writers.writer_pids(), flush=True)
"""


@pytest.mark.slow
def test_ctrl_c_leaves_whole_files_only_and_ends_the_writers(tmp_path):
    """SIGINT to the whole process group, as a terminal sends it, while files are being
    replaced: the (forked) writers ignore it, and SIGTERM, and finish what they hold; no
    temporary is left, every file is whole, and the writers end with the batch."""
    script = tmp_path / "interrupted.py"
    script.write_text(RESTORE_SIGINT + textwrap.dedent(INTERRUPTED))
    (tmp_path / "in").mkdir()
    files = []
    for number in range(8):
        files.append(tmp_path / "in" / f"m{number}.ply")
        files[-1].write_bytes(FILES[0].read_bytes())
    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, str(script), str(out), *map(str, files)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    assert process.stdout is not None
    assert process.stdout.readline().split() == ["2"]  # forked: a fresh process
    pids = [int(pid) for pid in process.stdout.readline().split()]
    assert len(pids) == 2
    for pid in pids:  # as a service manager may send it: ignored
        os.kill(pid, signal.SIGTERM)
    time.sleep(1.0)  # well into the batches
    assert all(_alive(pid) for pid in pids)
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode != 0
    # One traceback, the script's own, not a writer's: one last line that names the error
    # (a traceback through interrupts_deferred also shows its `raise KeyboardInterrupt`).
    assert stderr.splitlines().count("KeyboardInterrupt") == 1, stderr
    names = os.listdir(out)
    assert not [name for name in names if name.endswith(".tmp")], names
    expected = voxelizer.voxelize_dense(FILES[0], 24).count()
    for name in names:
        assert voxelizer.load(out / name).count() == expected, name
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# The command as `voxelize` runs it, on a host that says it has 16 cores (so its writers
# and readers start by default), noting its writers (how many were forked, their pids) in
# the file named by its first argument.
COMMAND_ON_16_CORES = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
os.cpu_count = lambda: 16
from voxelizer.batch import write_processes
started, notes_path = write_processes.WriteProcesses.__init__, sys.argv.pop(1)
def noted(self, count):
    started(self, count)
    with open(notes_path, "a") as notes:
        print(self.forked, *self.writer_pids(), file=notes)
write_processes.WriteProcesses.__init__ = noted
from voxelizer import cli
sys.argv[0] = "voxelize"
print("ready", flush=True)
cli.run()
"""


@pytest.mark.slow
def test_sigterm_to_the_command_with_writing_processes_leaves_whole_files(tmp_path):
    """The command forks its writers (before its readers); SIGTERM to its process group part
    way ends it with status 143 (its helpers ignore it and finish what they hold): every file
    whole, no temporary, the writers gone; a resumed batch writes the rest."""
    folder = tmp_path / "in"
    folder.mkdir()
    names = []
    for number in range(40):
        (folder / f"m{number:02d}.ply").write_bytes(FILES[0].read_bytes())
        names.append(f"m{number:02d}.npz")
    out, notes = tmp_path / "out", tmp_path / "notes.txt"
    args = [folder, "--out-dir", out, "--grid", "48", "--format", "npz"]
    command = [sys.executable, "-c", COMMAND_ON_16_CORES, notes, *args]
    child = subprocess.Popen(
        [str(arg) for arg in command], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and child.poll() is None:
        if out.is_dir() and sum(name.endswith(".npz") for name in os.listdir(out)) >= 2:
            break
        time.sleep(0.02)
    os.killpg(child.pid, signal.SIGTERM)  # the whole group, as systemd or Slurm may send it
    stdout, stderr = child.communicate(timeout=180)
    assert child.returncode == 143, stderr
    assert "Traceback" not in stderr and " before the interrupt: " in stdout, (stdout, stderr)
    assert ", 0 failed in " in stdout, stdout  # no writer died of it
    forked, *pids = [int(word) for word in notes.read_text().split()]
    assert forked == len(pids) == 2
    written = sorted(name for name in os.listdir(out) if not name.startswith("."))
    assert not [name for name in os.listdir(out) if name.endswith(".tmp")]
    assert 2 <= len(written) < len(names)
    expected = voxelizer.voxelize_dense(FILES[0], 48).count()
    for name in written:
        assert voxelizer.load(out / name).count() == expected, name
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids)
    resumed = subprocess.run(
        [str(arg) for arg in command] + ["--skip-existing"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    summary = resumed.stdout.splitlines()[-1]
    assert summary.startswith(f"{len(names)} meshes: {len(names) - len(written)} done"), summary
    assert sorted(os.listdir(out)) == names


def test_the_reading_processes_are_still_forked_after_the_writers():
    """Forking the writers starts no thread: the batch's reading processes, forked next,
    still may be (neither waits for a new Python to start)."""
    program = (
        "from voxelizer.batch.write_processes import shared_write_processes\n"
        "from voxelizer.batch.readers import shared_load_processes\n"
        "print(shared_write_processes(2).forked, shared_load_processes(2).forked)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["2", "2"]


def test_the_command_sizes_its_writers_by_the_grid_it_asks_for():
    from argparse import Namespace

    from voxelizer.batch.cli import _grid_side
    from voxelizer.grid_spec import DEFAULT_GRID

    assert _grid_side(Namespace(grid=256, voxel_size=None)) == 256
    assert _grid_side(Namespace(grid=(64, 300, 8), voxel_size=None)) == 300
    assert _grid_side(Namespace(grid=None, voxel_size=None)) == DEFAULT_GRID
    assert _grid_side(Namespace(grid=None, voxel_size=(0.1,))) is None
