"""A local Ray head for the datasets benchmark's `cli_batch_ray` way, started and stopped by it.

`ray start --head --block` in a session of its own: its processes (the head's services and
the workers they start) end with it. It is told to stop by SIGTERM; what is left after
STOP_SECONDS is killed (the head drains for up to 30 s otherwise, with nothing to drain).
Its files go to a temporary folder of its own, removed after it: Ray's note of "the
current cluster" there too, so that a `ray.init()` elsewhere on the machine never takes
this head for its own.
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
from typing import IO

START_SECONDS = 120.0
STOP_SECONDS = 2.0


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
    environment (default this process's), which its workers, the actors, start with."""
    port = free_port()
    command = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
               "--port", str(port), "--num-gpus", str(gpus), "--include-dashboard", "false",
               "--disable-usage-stats"]  # fmt: skip
    command += ["--num-cpus", str(cpus)] if cpus is not None else []
    # Short: Ray's sockets live below it (a socket's path has at most 107 characters).
    folder = tempfile.mkdtemp(prefix="vxray-", dir="/tmp" if os.path.isdir("/tmp") else None)
    command += ["--temp-dir", folder]
    # No token: the command connects with Ray's default, whatever ~/.ray holds.
    env = dict(os.environ if env is None else env, RAY_AUTH_MODE="disabled")
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
    """SIGTERM to the head, then SIGKILL to its session's processes still there."""
    with suppress(ProcessLookupError):
        os.killpg(head.pid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        head.wait(STOP_SECONDS)
    with suppress(ProcessLookupError):
        os.killpg(head.pid, signal.SIGKILL)
    head.wait()
