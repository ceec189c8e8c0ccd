"""No half-written outputs: every file the package writes appears whole or not at all.

A full disk is a real 64 KiB tmpfs, mounted in a private mount namespace (`unshare -m`, as
root) by a child process that runs the command there; a Ctrl-C or a full disk part way
through a write is injected by replacing the file that open_output writes through. The
command checks its output paths before it reads the mesh, and a run writes all its files or
none of them."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import voxelizer.api
from voxelizer import OutputError, cli, write_preview
from voxelizer.io import OUTPUT_FORMATS, output
from voxelizer.io.output import all_or_nothing, check_output_path, open_output

from ..helpers import (
    PROJECT_MODELS,
    RESTORE_SIGINT,
    assert_one_line_error,
    cli_usage_error,
    run_cli,
)

MODEL = PROJECT_MODELS / "gear.ply"
PROJECT_ROOT = Path(__file__).resolve().parents[2]
# Every file the command writes, as (option, file name): the formats of -o, then the others.
OUTPUTS = [("-o", f"out{suffix}") for suffix in OUTPUT_FORMATS] + [
    ("--preview", "out.png"),
    ("--stats-json", "out.json"),
]
TMPFS_BYTES = 64 * 1024
PAGE = 4096


def leftovers(folder: Path) -> list[str]:
    """The names in `folder`, temporaries (hidden files) included."""
    return sorted(os.listdir(folder))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- a full disk: a real tmpfs in a private mount namespace ----------------------------------


def full_disk_cases(work: Path) -> None:
    """Run in the child, inside `unshare -m`: for every output with and without --force,
    write it once on a roomy disk (its size, and a good older file from a smaller grid),
    then again on a fresh 64 KiB tmpfs filled to leave the whole pages of free space that
    fall short of that size (none for a file of one page: a full disk; else the write fails
    on its last page), and record the exit status, stderr and what the tmpfs holds after."""
    from voxelizer.cli import main
    from voxelizer.gpu.device import Instance

    disk, roomy = work / "disk", work / "roomy"
    roomy.mkdir()
    cases: dict[str, object] = {}
    for option, name in OUTPUTS:
        sizes = {}
        for grid in (16, 32):
            target = roomy / f"{grid}{name}"
            assert _quiet_main(main, [MODEL, "--grid", grid, option, target])[0] == 0
            sizes[grid] = target.stat().st_size
        good = (roomy / f"16{name}").read_bytes()
        for force in (False, True):
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", disk], check=True
            )
            try:
                if force:
                    (disk / name).write_bytes(good)
                free = min(_free_bytes(disk), (sizes[32] - 1) // PAGE * PAGE)
                with open(disk / "filler", "wb") as fh:
                    fh.write(bytes(_free_bytes(disk) - free))
                args = [MODEL, "--grid", 32, option, disk / name] + (["--force"] if force else [])
                code, stderr = _quiet_main(main, args)
                files = {entry: digest(disk / entry) for entry in leftovers(disk)}
            finally:
                subprocess.run(["umount", disk], check=True)
            cases[f"{name} force={force}"] = {
                "code": code,
                "stderr": stderr,
                "files": files,
                "free": free,
                "new_size": sizes[32],
                "good": hashlib.sha256(good).hexdigest(),
            }
    report = {"cases": cases, "validation": Instance.shared().messages}
    (work / "report.json").write_text(json.dumps(report))


def _quiet_main(main: Callable[[list[str]], int], args: list[object]) -> tuple[int, str]:
    """`voxelize ARGS` in this process: (exit status, stderr); stdout is dropped."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        code = main([str(a) for a in args])
    return code, stderr.getvalue()


def _free_bytes(folder: Path) -> int:
    stats = os.statvfs(folder)
    return stats.f_bavail * stats.f_frsize


@pytest.fixture(scope="module")
def full_disk_report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One child process in its own mount namespace runs every full-disk case."""
    work = tmp_path_factory.mktemp("full_disk")
    (work / "disk").mkdir()
    child = (
        "import sys; from pathlib import Path; from tests.io.test_atomic_outputs import "
        "full_disk_cases; full_disk_cases(Path(sys.argv[1]))"
    )
    done = subprocess.run(
        ["unshare", "-m", sys.executable, "-c", child, str(work)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads((work / "report.json").read_text())
    assert report["validation"] == []
    assert leftovers(work / "disk") == []  # the tmpfs was the child's alone
    return report


@pytest.mark.parametrize("force", [False, True], ids=["new", "force"])
@pytest.mark.parametrize("name", [name for _, name in OUTPUTS])
def test_a_full_disk_leaves_no_partial_file(full_disk_report, name, force):
    case = full_disk_report["cases"][f"{name} force={force}"]
    assert case["new_size"] > case["free"]  # the disk cannot hold the new file
    if case["new_size"] > 2 * PAGE:
        assert case["free"] >= PAGE  # it fails part way, not on its first byte
    assert case["code"] == 1, case["stderr"]
    assert case["stderr"].startswith("voxelize: error: ") and case["stderr"].count("\n") == 1
    assert "No space left on device" in case["stderr"]
    expected = {"filler"} | ({name} if force else set())
    assert set(case["files"]) == expected  # no partial target, no temporary
    if force:
        assert case["files"][name] == case["good"]  # the older file, byte for byte


# --- Ctrl-C and a full disk part way through a write, injected -----------------------------


class FailingFile(io.BufferedWriter):
    """A file that takes `budget` bytes, puts them on disk, then raises `error`."""

    def __init__(self, path: str | os.PathLike, budget: int, error: BaseException) -> None:
        super().__init__(io.FileIO(path, "w"))
        self.budget = budget
        self.error = error

    def write(self, data: object) -> int:
        chunk = memoryview(data).cast("B")  # type: ignore[arg-type]
        if len(chunk) <= self.budget:
            self.budget -= len(chunk)
            return super().write(chunk)
        super().write(chunk[: self.budget])
        super().flush()
        self.budget = 0
        raise self.error


def fail_writes(monkeypatch: pytest.MonkeyPatch, name: str, error: BaseException) -> list[int]:
    """Make open_output's writes to `name` fail after 64 bytes; the list gets the size of
    the partial temporary each time the failure is raised (a zip writer tries again as it
    closes)."""
    partial_sizes: list[int] = []
    real_open = open

    def open_failing(path: str | os.PathLike, mode: str = "r") -> io.BufferedWriter:
        if not Path(path).name.startswith(f".{name}."):
            return real_open(path, mode)

        class Recording(FailingFile):
            def write(self, data: object) -> int:
                try:
                    return super().write(data)
                except BaseException:
                    partial_sizes.append(os.path.getsize(path))
                    raise

        return Recording(path, 64, error)

    monkeypatch.setattr(output, "open", open_failing, raising=False)
    return partial_sizes


@pytest.mark.parametrize("force", [False, True], ids=["new", "force"])
@pytest.mark.parametrize("option, name", OUTPUTS)
def test_ctrl_c_while_writing_leaves_no_file(tmp_path, capsys, monkeypatch, option, name, force):
    target = tmp_path / name
    if force:
        target.write_bytes(b"good older file")
    partial_sizes = fail_writes(monkeypatch, name, KeyboardInterrupt())
    args = [MODEL, "--grid", 16, option, target] + (["--force"] if force else [])
    code, stdout, stderr = run_cli(capsys, *args)
    assert partial_sizes[0] == 64  # interrupted part way, with bytes already on disk
    assert code == 130 and stderr == "voxelize: interrupted\n" and stdout == ""
    assert leftovers(tmp_path) == ([name] if force else [])
    if force:
        assert target.read_bytes() == b"good older file"


# --- real SIGINTs at random moments of a run that writes ----------------------------------

# The command in a child that says when main has begun (a Ctrl-C during Python's own imports
# is not the command's to handle), when it starts writing its files (at the command's
# all-or-nothing block), and when its work is done. Each mark is printed inside main's
# handling of Ctrl-C (as it reads its options, as it enters the block, as its run returns):
# a SIGINT just after "ready" or just before "seconds" is still the command's to handle.
INTERRUPTIBLE_COMMAND = """
import contextlib, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever the launcher left
from voxelizer import cli

real_parser, real_run, real_all_or_nothing = cli._parser, cli._run, cli.all_or_nothing
started = time.perf_counter()

def marked_parser():
    global started
    started = time.perf_counter()
    print("ready", flush=True)
    return real_parser()

def marked_run(*args):
    code = real_run(*args)
    print("seconds", time.perf_counter() - started, flush=True)
    return code

@contextlib.contextmanager
def marked_all_or_nothing():
    print("writing", time.perf_counter() - started, flush=True)
    with real_all_or_nothing():
        yield

cli._parser, cli._run, cli.all_or_nothing = marked_parser, marked_run, marked_all_or_nothing
sys.exit(cli.main(sys.argv[1:]))
"""


def run_interrupted(
    args: list[object], after: float | None, mark: str = "ready"
) -> tuple[int, dict[str, float], str]:
    """`voxelize ARGS` in a child, sent a real SIGINT `after` seconds after it printed `mark`
    ("ready": main began; "writing": the writing began), or not interrupted (None): its exit
    status, its marks as far as it got ({"writing": when the writing began, "seconds": when
    the run was done}) and its stderr. Timed from the child's own mark, a SIGINT meant for
    the writing lands in it even when the machine has become busier since the runs that
    gave `after`."""
    child = subprocess.Popen(
        [sys.executable, "-c", RESTORE_SIGINT + INTERRUPTIBLE_COMMAND, *map(str, args)],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    seen = [child.stdout.readline()]
    assert seen == ["ready\n"], seen
    if after is not None:
        while seen[-1] and not seen[-1].startswith(mark):
            seen.append(child.stdout.readline())  # "" once the child's stdout ends
        time.sleep(after)
        child.send_signal(signal.SIGINT)
    stdout, stderr = child.communicate(timeout=120)
    words = [line.split() for line in "".join(seen[1:]).splitlines() + stdout.splitlines()]
    marks = {w[0]: float(w[1]) for w in words if len(w) == 2 and w[0] in ("writing", "seconds")}
    return child.returncode, marks, stderr


def test_ctrl_c_while_the_options_are_read_is_one_line(capsys, monkeypatch):
    def interrupted_parser() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_parser", interrupted_parser)
    assert cli.main([str(MODEL)]) == 130
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "voxelize: interrupted\n")


# Ctrl-C while the device is still being opened on the command's other thread (slowed down
# here): the process must not tear the Vulkan loader down under that thread (a segfault).
EARLY_INTERRUPT_COMMAND = """
import atexit, sys, threading, time
from voxelizer import cli
from voxelizer.gpu import device

def report_open_threads():
    alive = [t.name for t in threading.enumerate() if t.name == "voxelize-open-device"]
    print("still opening at exit:", alive, flush=True)

atexit.register(report_open_threads)  # the first registered: it runs last
real_describe = device._describe

def slow_describe(index, physical):
    time.sleep(0.5)
    return real_describe(index, physical)

def interrupted(*args):
    raise KeyboardInterrupt

device._describe = slow_describe
cli._check_dense_output = interrupted  # the first step after the device thread starts
sys.exit(cli.main(sys.argv[1:]))
"""


def test_ctrl_c_while_the_device_opens_waits_for_it_at_exit(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", EARLY_INTERRUPT_COMMAND, str(MODEL), "-o", str(tmp_path / "o.svo")],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stderr) == (130, "voxelize: interrupted\n"), done.stderr
    assert done.stdout == "still opening at exit: []\n"
    assert leftovers(tmp_path) == []


@pytest.mark.slow
def test_sigint_at_random_moments_of_a_run_leaves_all_outputs_or_none(tmp_path):
    """Real SIGINTs at random moments of a run that voxelizes, then writes a mesh, a preview
    and the statistics; half the moments are timed from main's start over the time an
    uninterrupted run took to begin writing, half from the child's start of the writing over
    the time the writing took (so that a machine busier than it was for that run does not
    shift them all to one side). Each run ends with status 130 and one line and the folder as it was
    (nothing new, or with --force the older files byte for byte) or every new file whole (a
    SIGINT after the last commit), or, for a SIGINT that came too late, status 0 and every
    file whole."""
    outputs = ["out.ply", "out.png", "out.json"]

    def command(folder: Path, grid: int) -> list[object]:
        return [MODEL, "--grid", grid, "-o", folder / "out.ply", "--preview", folder / "out.png",
                "--stats-json", folder / "out.json", "--quiet"]  # fmt: skip

    folder, older = tmp_path / "run", tmp_path / "older"
    folder.mkdir()
    older.mkdir()
    assert run_interrupted(command(older, 16), None)[0] == 0
    older_files = {name: digest(older / name) for name in outputs}
    code, marks, stderr = run_interrupted(command(folder, 128), None)
    assert code == 0, stderr
    whole = {name: digest(folder / name) for name in ("out.ply", "out.png")}
    generator = random.Random(15)
    interrupted = {"before writing": 0, "while writing": 0}
    for round in range(16):
        force = round % 4 >= 2
        for name in os.listdir(folder):
            os.unlink(folder / name)
        if force:
            for name in outputs:
                (folder / name).write_bytes((older / name).read_bytes())
        # Odd rounds: from main's start to the writing's; even rounds: from the writing's
        # start to main's end; each kind spread over its span in eighths.
        span, mark = (
            (marks["writing"], "ready")
            if round % 2
            else (marks["seconds"] - marks["writing"], "writing")
        )
        eighth = round // 2
        after = generator.uniform(eighth / 8, (eighth + 1) / 8) * span
        args = command(folder, 128) + ["--force"] * force
        code, got, stderr = run_interrupted(args, after, mark)
        files = {name: digest(folder / name) for name in leftovers(folder)}
        if code == 130:
            interrupted["while writing" if "writing" in got else "before writing"] += 1
            assert stderr == "voxelize: interrupted\n", stderr
            # The folder as it was, or (a SIGINT between the last commit and the exit) every
            # new file whole: never a mix.
            new_and_whole = sorted(files) == sorted(outputs) and whole.items() <= files.items()
            assert files == (older_files if force else {}) or new_and_whole, (round, files)
        else:  # too late: main had returned (killed by the SIGINT as the child exits: -2)
            assert code == 0 or (code == -signal.SIGINT and "seconds" in got), (code, stderr)
            assert sorted(files) == sorted(outputs) and whole.items() <= files.items()
            json.loads((folder / "out.json").read_text())
    assert min(interrupted.values()) >= 1, interrupted


@pytest.mark.parametrize("force", [False, True], ids=["new", "force"])
def test_a_later_output_failing_removes_the_earlier_ones(tmp_path, capsys, monkeypatch, force):
    """-o is written whole before the preview fails: the run leaves neither (and with
    --force, the older -o file is kept as it was)."""
    out, png, stats = tmp_path / "out.svo", tmp_path / "out.png", tmp_path / "stats.json"
    if force:
        out.write_bytes(b"good older file")
    partial_sizes = fail_writes(monkeypatch, "out.png", OSError(errno.ENOSPC, "No space left"))
    args = [MODEL, "--grid", 16, "-o", out, "--preview", png, "--stats-json", stats]
    code, stdout, stderr = run_cli(capsys, *args + (["--force"] if force else []))
    assert partial_sizes[0] == 64
    assert_one_line_error(code, stdout, stderr, f"{png}: cannot write (No space left)")
    assert leftovers(tmp_path) == (["out.svo"] if force else [])
    if force:
        assert out.read_bytes() == b"good older file"


def test_a_refusal_while_committing_removes_what_was_committed(tmp_path):
    """A file that appears after it was checked is refused when the batch commits; the
    batch's other file, already in place by then, is removed again."""
    first, second = tmp_path / "a.svo", tmp_path / "b.svo"
    with pytest.raises(OutputError) as caught, all_or_nothing():
        for path in (first, second):
            with open_output(path) as fh:
                fh.write(b"ours")
        assert leftovers(tmp_path) != []  # staged as temporaries, not yet in place
        assert not first.exists() and not second.exists()
        second.write_bytes(b"theirs")
    assert caught.value.exists and caught.value.path == second
    assert leftovers(tmp_path) == ["b.svo"] and second.read_bytes() == b"theirs"


class InterruptingOs:
    """voxelizer.io.output's `os`, which, once armed, raises KeyboardInterrupt right after
    its `at`-th call (the call itself done): a Ctrl-C at that point, and only one."""

    def __init__(self, at: int) -> None:
        self.at, self.calls, self.armed = at, 0, False

    def __getattr__(self, name: str) -> object:
        real = getattr(os, name)
        if not callable(real) or name in ("fspath", "stat_result"):
            return real

        def call(*args: object, **kwargs: object) -> object:
            result = real(*args, **kwargs)
            if self.armed:
                self.calls += 1
                if self.calls == self.at:
                    self.armed = False
                    raise KeyboardInterrupt
            return result

        return call


@pytest.mark.parametrize("overwrite", [False, True], ids=["new", "force"])
def test_a_ctrl_c_at_any_step_of_the_commits_puts_every_target_back(
    tmp_path, monkeypatch, overwrite
):
    """Three files committed together (with overwrite, two of them replace older files):
    a Ctrl-C after any one system call of the commits leaves the folder exactly as it was,
    the older files byte for byte and no temporary, or (once all are committed) the three
    new files and no temporary; without a Ctrl-C, the three new files."""
    targets = [tmp_path / name for name in ("a.ply", "b.png", "c.json")]
    every = {path.name: b"new " + path.name.encode() for path in targets}
    step = 0
    while True:
        step += 1
        for name in leftovers(tmp_path):
            os.unlink(tmp_path / name)
        before = {}
        if overwrite:
            for path in targets[:2]:
                path.write_bytes(b"older " + path.name.encode())
            before = {path.name: path.read_bytes() for path in targets[:2]}
        interrupting = InterruptingOs(step)
        monkeypatch.setattr(output, "os", interrupting)
        try:
            with all_or_nothing():
                for path in targets:
                    with open_output(path, overwrite) as fh:
                        fh.write(b"new " + path.name.encode())
                interrupting.armed = True  # the block ends: the commits begin
        except KeyboardInterrupt:
            after = {name: (tmp_path / name).read_bytes() for name in leftovers(tmp_path)}
            assert after in (before, every), (step, after)  # after the last commit: all
            continue
        finally:
            monkeypatch.undo()
        assert {name: (tmp_path / name).read_bytes() for name in leftovers(tmp_path)} == every
        break
    assert step > 6  # every step of the commits was interrupted once


def test_open_output_replaces_atomically_and_keeps_the_mode(tmp_path):
    target = tmp_path / "out.svo"
    target.write_bytes(b"old")
    target.chmod(0o640)
    with open_output(target, overwrite=True) as fh:
        fh.write(b"new")
        assert target.read_bytes() == b"old"  # nothing visible until the block ends
    assert target.read_bytes() == b"new" and target.stat().st_mode & 0o777 == 0o640
    assert leftovers(tmp_path) == ["out.svo"]


def test_exclusive_creation_without_hard_links(tmp_path, monkeypatch):
    """On a filesystem without hard links the exclusive creation still refuses a file that
    appeared after the first check, and still writes a new one whole."""

    def no_links(source: object, target: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    target = tmp_path / "out.npz"
    with open_output(target) as fh:
        fh.write(b"whole")
    assert target.read_bytes() == b"whole" and leftovers(tmp_path) == ["out.npz"]
    late = tmp_path / "late.npz"
    with pytest.raises(OutputError) as caught, open_output(late) as fh:
        fh.write(b"ours")
        late.write_bytes(b"theirs")
    assert caught.value.exists and late.read_bytes() == b"theirs"
    assert leftovers(tmp_path) == ["late.npz", "out.npz"]


def test_an_error_in_the_writer_leaves_nothing(tmp_path):
    target = tmp_path / "out.vox"
    with pytest.raises(ValueError, match="broken writer"), open_output(target) as fh:
        fh.write(b"x" * 100_000)
        raise ValueError("broken writer")
    assert leftovers(tmp_path) == []


# --- the command checks its outputs before any work ----------------------------------------


@pytest.fixture
def no_voxelizing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any voxelization (mesh loading included) fails the test."""

    def voxelize(*args: object, **kwargs: object) -> None:
        pytest.fail("the command voxelized before checking its outputs")

    monkeypatch.setattr(voxelizer.api, "voxelize", voxelize)


@pytest.mark.parametrize("option, name", OUTPUTS)
def test_a_missing_folder_is_refused_before_the_work(tmp_path, capsys, no_voxelizing, option, name):
    target = tmp_path / "nosuchdir" / name
    code, stdout, stderr = run_cli(capsys, MODEL, option, target)
    assert_one_line_error(code, stdout, stderr, f"{target}: cannot write (no such folder")
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("option, name", OUTPUTS)
def test_an_existing_file_is_refused_before_the_work(tmp_path, capsys, no_voxelizing, option, name):
    target = tmp_path / name
    target.write_bytes(b"good older file")
    code, stdout, stderr = run_cli(capsys, MODEL, option, target)
    assert_one_line_error(code, stdout, stderr, f"{target}: file exists (use --force to overwrite)")
    assert target.read_bytes() == b"good older file" and leftovers(tmp_path) == [name]


@pytest.mark.parametrize("grid", [["--grid", "16x16x32"], ["--voxel-size", "0.05"]])
def test_a_binvox_of_a_grid_that_is_not_a_cube_is_refused_before_the_work(
    tmp_path, capsys, no_voxelizing, grid
):
    """binvox holds cubes only: the grid's shape (from --grid, or from the mesh's box and
    --voxel-size: gear.ply is 40x40x8 voxels of 0.05) is known before the GPU work."""
    target = tmp_path / "out.binvox"
    code, stdout, stderr = run_cli(capsys, MODEL, *grid, "-o", target)
    assert_one_line_error(code, stdout, stderr, f"{target}: .binvox holds cubic grids only")
    assert leftovers(tmp_path) == []


def test_a_folder_as_output_is_refused_before_the_work(tmp_path, capsys, no_voxelizing):
    target = tmp_path / "out.svo"
    target.mkdir()
    code, stdout, stderr = run_cli(capsys, MODEL, "-o", target, "--force")
    assert_one_line_error(code, stdout, stderr, f"{target}: cannot write (it is a folder)")


@pytest.mark.parametrize(
    "options, message",
    [
        (["-o", "same.png", "--preview", "same.png"], "-o and --preview name the same file"),
        (["-o", "same.svo", "--stats-json", "same.svo"], "-o and --stats-json name the same"),
        (["--preview", "same.png", "--stats-json", "sub/../same.png"], "the same file"),
        (["--preview", "x.jpg"], "--preview writes PNG images only"),
        (["--preview", "x"], "--preview writes PNG images only"),
    ],
)
def test_usage_errors_among_the_outputs(tmp_path, capsys, no_voxelizing, options, message):
    (tmp_path / "sub").mkdir()
    named = [str(tmp_path / o) if not o.startswith("-") else o for o in options]
    stderr = cli_usage_error(capsys, MODEL, *named, "--force")
    assert message in stderr
    assert leftovers(tmp_path) == ["sub"]


def test_the_model_as_output_is_a_usage_error(tmp_path, capsys, no_voxelizing):
    model = tmp_path / "gear.ply"
    model.write_bytes(MODEL.read_bytes())
    stderr = cli_usage_error(capsys, model, "-o", model, "--force")
    assert "MODEL and -o name the same file" in stderr
    assert model.read_bytes() == MODEL.read_bytes()


def test_stats_json_takes_any_name_and_all_outputs_are_written(tmp_path, capsys):
    out, png, stats = tmp_path / "out.svo", tmp_path / "out.png", tmp_path / "stats.txt"
    code, _, stderr = run_cli(
        capsys, MODEL, "--grid", 16, "-o", out, "--preview", png, "--stats-json", stats
    )
    assert code == 0, stderr
    assert json.loads(stats.read_text())["counts"]["triangles"] > 0
    assert leftovers(tmp_path) == ["out.png", "out.svo", "stats.txt"]


def test_write_preview_refuses_other_image_names(tmp_path):
    with pytest.raises(OutputError, match="the preview is a PNG image") as caught:
        write_preview(np.zeros((8, 8, 8), bool), tmp_path / "x.jpg")
    assert not caught.value.exists and leftovers(tmp_path) == []


@pytest.fixture
def ctrl_c_handler():
    """Ctrl-C's handler in this process, for a test that sends itself SIGINT (a launcher may
    have started the run with SIGINT ignored); the handler before is restored after it."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_as_the_temporary_is_created_leaves_nothing(tmp_path, monkeypatch, ctrl_c_handler):
    """A SIGINT that arrives just after the temporary file is created (before the writer's
    cleanup knows it) once left it behind, empty; it is now held until the cleanup does."""
    create = output._create_temp

    def create_then_interrupt(target: Path) -> Path:
        temp = create(target)
        os.kill(os.getpid(), signal.SIGINT)
        return temp

    monkeypatch.setattr(output, "_create_temp", create_then_interrupt)
    with pytest.raises(KeyboardInterrupt), open_output(tmp_path / "out.bin") as fh:
        fh.write(b"never")
    assert os.listdir(tmp_path) == []
    # The same for the probe with which a command checks its outputs before the long work
    # (seen once in CI's random-SIGINT test: an empty `.out.json.<token>.tmp`).
    with pytest.raises(KeyboardInterrupt):
        check_output_path(tmp_path / "out.json")
    assert os.listdir(tmp_path) == []


def test_a_batch_syncs_each_output_folder_once_at_its_end(tmp_path, monkeypatch):
    """One file syncs its folder after its rename; a batch's writers leave that to the
    batch, which syncs each output folder once, when every file in it is in place. Each
    file's own data is synced before its rename either way (whole or absent after a crash)."""
    synced: list[tuple[Path, list[str]]] = []

    def sync(folder: Path) -> None:
        synced.append((folder, sorted(p.name for p in folder.iterdir())))

    monkeypatch.setattr(output, "_sync_folder", sync)
    with open_output(tmp_path / "one.bin", False) as fh:
        fh.write(b"voxels")
    assert synced == [(tmp_path, ["one.bin"])]

    synced.clear()
    inputs = tmp_path / "meshes"
    for folder in ("a", "b"):
        for name in ("gear.ply", "torus_knot.ply"):
            (inputs / folder).mkdir(parents=True, exist_ok=True)
            (inputs / folder / name).write_bytes((PROJECT_MODELS / name).read_bytes())
    out = tmp_path / "out"
    results = list(
        voxelizer.voxelize_many(
            sorted(inputs.glob("*/*.ply")), grid=16, out_dir=out, format="npz", write_processes=0
        )
    )
    assert all(result.ok for result in results) and len(results) == 4
    assert sorted(synced) == [
        (out / "a", ["gear.npz", "torus_knot.npz"]),
        (out / "b", ["gear.npz", "torus_knot.npz"]),
    ]
