"""The command against hostile streams and paths: a reader of stdout that goes away, a stdout
closed or full, symlink loops and names too long for -o, --preview, --stats-json and MODEL,
file names with newlines and terminal escapes. Each ends quietly (a reader gone away) or with
one error line and status 1; never a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..helpers import PROJECT_MODELS, assert_one_line_error, run_cli

GEAR = PROJECT_MODELS / "gear.ply"
PROJECT_ROOT = Path(__file__).resolve().parents[2]
LONG_NAME = "n" * 300  # a name (not a path) longer than any filesystem takes


def command(
    *args: object, stdout: int | object = subprocess.PIPE, close: tuple[int, ...] = ()
) -> subprocess.CompletedProcess:
    """`python -m voxelizer ARGS` in its own process; `close` file descriptors (1, 2) are
    closed in it before it starts, as `>&-` and `2>&-` do."""

    def close_streams() -> None:
        for fd in close:
            os.close(fd)

    return subprocess.run(
        [sys.executable, "-m", "voxelizer", *map(str, args)],
        cwd=PROJECT_ROOT,
        stdout=stdout,
        stderr=subprocess.PIPE,
        preexec_fn=close_streams if close else None,
        text=True,
        timeout=120,
        check=False,
    )


def command_into_closed_pipe(*args: object) -> subprocess.CompletedProcess:
    """The command writing into a pipe whose reader has gone (`voxelize ... | head -0`): the
    read end is closed before it starts, so every write fails with EPIPE."""
    read, write = os.pipe()
    os.close(read)
    try:
        return command(*args, stdout=write)
    finally:
        os.close(write)


# --- stdout: a reader gone away, closed, full --------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "args", [["models", "--check"], [GEAR, "--grid", "8", "--stats"], ["--help"]],
    ids=["check", "stats", "help"],
)  # fmt: skip
def test_a_reader_that_went_away_ends_the_command_quietly(args):
    result = command_into_closed_pipe(*args)
    assert result.stderr == "", result.stderr
    assert result.returncode == 141  # as a process that SIGPIPE ended


@pytest.mark.slow
def test_a_closed_stdout_is_one_error_line():
    result = command(GEAR, "--grid", "8", stdout=None, close=(1,))
    assert result.returncode == 1, result.stderr
    assert result.stderr == "voxelize: error: stdout: cannot write (it is closed)\n"
    quiet = command(GEAR, "--grid", "8", "--quiet", stdout=None, close=(1,))
    assert (quiet.returncode, quiet.stderr) == (0, "")  # nothing to write: nothing wrong


@pytest.mark.slow
def test_a_full_stdout_is_one_error_line():
    with open("/dev/full", "w") as full:
        result = command("models", "--check", stdout=full)
    assert result.returncode == 1, result.stderr
    assert result.stderr == "voxelize: error: stdout: cannot write (No space left on device)\n"


@pytest.mark.slow
def test_a_closed_stderr_takes_no_file_of_the_command(tmp_path):
    """With fd 2 closed at start, the first file the command opens would get number 2, and
    anything written to "stderr" would land in it: the output stays a clean .svo."""
    output = tmp_path / "gear.svo"
    result = command(GEAR, "--grid", "8", "-o", output, close=(2,))
    assert result.returncode == 0
    assert output.read_bytes().startswith(b"VOXSVO\r\n")
    missing = command(tmp_path / "missing.ply", "--grid", "8", close=(2,))
    assert (missing.returncode, missing.stdout) == (1, "")


# --- paths: symlink loops and names too long ----------------------------------------------------


def symlink_loop(folder: Path, name: str) -> Path:
    """`name` and a partner that link to each other."""
    loop, other = folder / name, folder / f"partner-{name}"
    loop.symlink_to(other.name)
    other.symlink_to(loop.name)
    return loop


@pytest.mark.parametrize(
    ("option", "name"),
    [(None, "loop.ply"), ("-o", "loop/out.svo"), ("--preview", "loop/out.png"),
     ("--stats-json", "loop/out.json")],
)  # fmt: skip
def test_symlink_loops_are_one_error_line(tmp_path, capsys, option, name):
    symlink_loop(tmp_path, name.split("/")[0])
    path = tmp_path / name
    args = [path, "--grid", "8"] if option is None else [GEAR, "--grid", "8", option, path]
    code, out, err = run_cli(capsys, *args)
    assert_one_line_error(code, out, err, str(path))
    assert "symlink" in err


@pytest.mark.parametrize("option", [None, "-o", "--preview", "--stats-json"])
def test_names_too_long_are_one_error_line(tmp_path, capsys, option):
    suffix = {None: ".ply", "-o": ".svo", "--preview": ".png", "--stats-json": ".json"}[option]
    path = tmp_path / f"{LONG_NAME}{suffix}"
    args = [path, "--grid", "8"] if option is None else [GEAR, "--grid", "8", option, path]
    code, out, err = run_cli(capsys, *args)
    assert_one_line_error(code, out, err, "name is too long")


# --- names with newlines and escapes: one line, shown escaped -----------------------------------


def test_a_newline_in_a_file_name_keeps_the_error_on_one_line(tmp_path, capsys):
    path = tmp_path / "no\nsuch\x1b]0;title\x07.ply"
    code, out, err = run_cli(capsys, path, "--grid", "8")
    assert_one_line_error(code, out, err, "no\\nsuch\\x1b]0;title\\x07.ply: no such file")
    assert "\x1b" not in err


def test_a_newline_in_a_file_name_keeps_every_line_one_line(tmp_path, capsys):
    model = tmp_path / "ge\nar.ply"
    shutil.copy(GEAR, model)
    code, out, err = run_cli(capsys, model, "--grid", "8", "-o", tmp_path / "out\r.svo")
    assert code == 0 and err == "", err
    assert out.startswith("ge\\nar.ply: 1,920 triangles") and out.count("\n") == 1, out
    assert out.rstrip().endswith("out\\r.svo"), out
    code, out, err = run_cli(capsys, model, "--check")
    assert code == 0 and out.startswith("ge\\nar.ply: 1,920 triangles, closed\n"), out
    usage = tmp_path / "same\nname.svo"
    with pytest.raises(SystemExit):
        run_cli(capsys, GEAR, "--grid", "8", "-o", usage, "--stats-json", usage)
    err = capsys.readouterr().err
    assert err.splitlines()[-1].endswith(
        "-o and --stats-json name the same file " + str(usage).replace("\n", "\\n")
    )
