"""A local Ray head for the datasets benchmark's `cli_batch_ray` way, started and stopped by it.

`ray start --head --block` in a session of its own: its processes (the head's services and
the workers they start) end with it, before its folder is removed. It is told to stop by
SIGTERM; what is left of its session after STOP_SECONDS is killed (the head drains for up
to 30 s otherwise, with nothing to drain).
Its files go to a temporary folder of its own, removed after it: Ray's note of "the
current cluster" there too, so that a `ray.init()` elsewhere on the machine never takes
this head for its own.

The head authenticates as its clients will: with the RAY_AUTH_MODE of the environment they
are started from (and the token that goes with it), else without a token, as a client given
an explicit address connects when the mode is unset. A head of one mode and clients of the
other do not fail at once: the head cannot ask the driver about its actors, takes them for
unreferenced, and cancels them before they start ("Actor creation cancelled"). A process
that ran `ray.init()` has the mode set to "token" in its environment from then on.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

START_SECONDS = 120.0
STOP_SECONDS = 2.0
FOLDER_PREFIX = "vxray-"  # the head's folder: /tmp/vxray-PID-XXXXXXXX
AUTH_MODE = "RAY_AUTH_MODE"  # Ray's switch of token authentication: "token" or "disabled"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def local_head(
    gpus: int, cpus: int | None = None, env: Mapping[str, str] | None = None
) -> Iterator[str]:
    """A local Ray head with `gpus` GPUs (and `cpus`, default all), for the block: its
    address (host:port), as `voxelize --ray ADDRESS` takes it. `env`: the head's
    environment (default this process's), which its workers, the actors, start with; the
    processes that connect to it start from the same environment (its RAY_AUTH_MODE)."""
    port = free_port()
    command = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
               "--port", str(port), "--num-gpus", str(gpus), "--include-dashboard", "false",
               "--disable-usage-stats"]  # fmt: skip
    command += ["--num-cpus", str(cpus)] if cpus is not None else []
    # Short: Ray's sockets live below it (a socket's path has at most 107 characters).
    # Named after this process, so that what it leaves can be told from other processes'.
    folder = tempfile.mkdtemp(
        prefix=f"{FOLDER_PREFIX}{os.getpid()}-", dir="/tmp" if os.path.isdir("/tmp") else None
    )
    command += ["--temp-dir", folder]
    env = dict(os.environ if env is None else env)
    env.setdefault(AUTH_MODE, "disabled")  # what a client of an explicit address takes
    with tempfile.TemporaryFile() as log:
        head = subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
        try:
            _wait_listening(head, port, log)
            yield f"127.0.0.1:{port}"
        finally:
            _stop(head)
            shutil.rmtree(folder, ignore_errors=True)


def _wait_listening(head: subprocess.Popen[bytes], port: int, log: IO[bytes]) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if head.poll() is not None:
            raise RuntimeError(f"ray start exited {head.returncode}: {_tail(log)}")
        with suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.1)
    raise RuntimeError(f"the Ray head did not listen on {port} in {START_SECONDS:g} s")


def _tail(log: IO[bytes]) -> str:
    log.seek(0)
    return log.read().decode(errors="replace")[-2000:]


def _stop(head: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the head's process group (the head and its services), then SIGKILL to it
    and to every process of its session still there, until none is left: the workers, in
    groups of their own, would otherwise end after the head, writing below its folder."""
    with suppress(ProcessLookupError):
        os.killpg(head.pid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        head.wait(STOP_SECONDS)
    with suppress(ProcessLookupError):
        os.killpg(head.pid, signal.SIGKILL)
    deadline = time.monotonic() + STOP_SECONDS
    while (left := _session_processes(head.pid)) and time.monotonic() < deadline:
        for pid in left:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    head.wait()


def _session_processes(session: int) -> list[int]:
    """The live processes (not zombies) of `session` (Linux's /proc; elsewhere none)."""
    found = []
    with suppress(OSError):
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            with suppress(OSError, IndexError, ValueError):
                fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[3]) == session and fields[0] != "Z":  # state, ppid, pgrp, sid
                    found.append(int(name))
    return found
