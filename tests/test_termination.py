"""SIGTERM and SIGKILL: what `timeout`, `kill`, Slurm, Kubernetes and systemd send. SIGTERM
ends the command as a Ctrl-C does (every output whole or absent, no temporary left, a summary
for a batch) with status 143; after a SIGKILL, which no process can handle, a resumed batch
removes the temporaries it left, and only those.

Each child sets its own signal dispositions before the command starts, so that the tests pass
under a launcher that ignores SIGINT or SIGTERM (nohup, a service manager)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .helpers import PROJECT_MODELS

PROJECT_ROOT = Path(__file__).resolve().parents[1]
MODEL = PROJECT_MODELS / "torus_knot.ply"

# The command as `voxelize` runs it (cli.run), with the default dispositions of SIGINT and
# SIGTERM whatever the launcher left, and a line once the imports are done.
COMMAND = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
from voxelizer import cli
print("ready", flush=True)
sys.argv[0] = "voxelize"
cli.run()
"""


def start(args: list[object]) -> subprocess.Popen:
    child = subprocess.Popen(
        [sys.executable, "-c", COMMAND, *map(str, args)],
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
