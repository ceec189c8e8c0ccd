"""Connecting to a Ray cluster, bounded in time, and starting the voxelizing actors early.

`ActorStart` connects and asks for the actors on a thread of its own as soon as their
constructor's keywords are known, before the driver finds, checks and plans the files: Ray
starts the actors' processes, and they open their devices and start their readers, while
the driver plans, instead of after the plan. The driver waits until they are asked for
(ASK_SECONDS at most) before it plans: asking is Python work too, and planning beside it
(both holding the GIL in turns) asked later and made the actors ready later on lavapipe. An
error of the start (no cluster at the address) is raised where the driver takes the actors,
after its own checks, as before: a batch with nothing to do never raises it.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from ..errors import DeviceError
from ..io.files import os_error_text

CONNECT_SECONDS = 60.0  # ray.init waits this long at most for a cluster (it retried for ever)
ASK_SECONDS = 5.0  # the planning waits this long at most for the actors to be asked for
# As a driver disconnects, its core worker sends its last task events (the records of Ray's
# state API and dashboard, not results) and waits for the cluster to take them: a quarter of
# a second at the end of most runs on lavapipe. The command, a driver of its own, keeps no
# task events (the actors still report theirs); Ray reads these as it is imported.
COMMAND_DRIVER_SETTINGS = {
    "RAY_task_events_report_interval_ms": "0",  # no task events kept by the driver
    "RAY_task_events_shutdown_flush_timeout_ms": "0",  # none waited for as it disconnects
}
# Environment variables of the driver that actors get too (the validation layer on or off).
FORWARDED_ENVIRONMENT = ("VOXELIZER_VALIDATION",)


def forwarded_runtime_env() -> dict[str, Any]:
    """A runtime_env that gives actors the driver's FORWARDED_ENVIRONMENT."""
    env = {name: os.environ[name] for name in FORWARDED_ENVIRONMENT if name in os.environ}
    return {"env_vars": env} if env else {}


def command_driver() -> None:
    """Ray's settings for a driver process that is the command's own (not a user's, whose Ray
    keeps its own): set before Ray is imported, where the user set none."""
    if "ray" not in sys.modules and not any(name in os.environ for name in COMMAND_DRIVER_SETTINGS):
        os.environ.update(COMMAND_DRIVER_SETTINGS)


class ActorStart:
    """`start()` (a list of actor handles) run after connecting to `address` (unless this
    process is connected already): on a thread from now where the cluster is one that runs
    (an address, or the one this process is connected to), else (None: a new local cluster,
    costly to start for nothing) when the actors are first asked for. `actors(needed)` waits
    for them and gives the first `needed` (the others are killed); `close()` kills them and
    disconnects what this start connected."""

    def __init__(self, address: str | None, start: Callable[[], list[Any]]):
        import ray

        self._address = address
        self._start = start
        self._lock = threading.Lock()
        self._started: list[Any] = []
        self._connected = False  # whether this start connected (and so disconnects)
        self._connecting = False  # in connect(): bounded, but up to CONNECT_SECONDS
        self._closed = False
        self._error: BaseException | None = None
        self._asked = threading.Event()  # the actors asked for (or the start failed)
        self.asked_at: float | None = None  # when (time.time()), for the timeline
        self._thread = threading.Thread(target=self._run, name="voxelizer-ray-start", daemon=True)
        if address is not None or ray.is_initialized():
            self._thread.start()

    def _run(self) -> None:
        try:
            import ray

            if not ray.is_initialized():
                self._connecting = True
                connect(self._address)
                self._connected = True
                self._connecting = False
            started = self._start()
            self.asked_at = time.time()
        except BaseException as exc:  # handed to the caller's thread by actors()
            self._error = exc
            started = []
        self._asked.set()
        with self._lock:
            self._started = started
            self._connecting = False
            closed = self._closed
        if closed:  # closed while connecting: what this thread started goes now
            self._release()

    def wait_asked(self, seconds: float = ASK_SECONDS) -> None:
        """Wait (`seconds` at most) until the actors are asked for: the caller's Python work
        (planning) would otherwise hold the GIL that asking needs, and their processes
        would start later."""
        if self._thread.ident is not None:
            self._asked.wait(seconds)

    def actors(self, needed: int) -> list[Any]:
        """The first `needed` actors (at least one), once asked for; the start's error."""
        if self._thread.ident is None:
            self._thread.start()
        self._thread.join()
        if self._error is not None:
            raise self._error
        kept, extra = self._started[: max(1, needed)], self._started[max(1, needed) :]
        self._started = kept
        _kill(extra)
        return list(kept)

    def close(self) -> None:
        """Kill the actors and disconnect, once the start has asked for them; while it is
        still connecting (a cluster that is slow to answer), the start does it as it ends."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._connecting:
                return
        if self._thread.ident is not None:
            self._thread.join()  # asking for the actors: quick
        self._release()

    def _release(self) -> None:
        started, self._started = self._started, []
        _kill(started)
        if self._connected:
            import ray

            self._connected = False
            ray.shutdown()


def _kill(actors: list[Any]) -> None:
    import ray

    for actor in actors:
        with suppress(Exception):  # (an actor that died already)
            ray.kill(actor)


def connect(address: str | None, seconds: float = CONNECT_SECONDS) -> None:
    """ray.init for `address` ("auto", host:port, ray://host:port, or None: a new local
    cluster), bounded in time: DeviceError naming the address, at once where nothing
    listens there, or after `seconds` where what listens does not answer as a cluster
    (ray.init keeps retrying such an address for as long as it runs)."""
    import ray

    where = _listening_address(address)
    if where is not None:
        host, port = where
        try:
            with socket.create_connection((host, port), timeout=min(seconds, 10.0)):
                pass
        except OSError as exc:
            reason = os_error_text(exc) if not isinstance(exc, TimeoutError) else "no answer"
            raise DeviceError(f"cannot reach the Ray cluster at {address} ({reason})") from None
    outcome: list[BaseException | None] = []

    def initialise() -> None:
        # Off the main thread Ray leaves SIGTERM alone (the command's handler stays: a
        # SIGTERM ends a batch as Ctrl-C does) and says so; that line is not the user's news.
        logging.getLogger("ray._private.worker").addFilter(_not_the_sigterm_notice)
        try:
            ray.init(
                address=address,
                runtime_env=forwarded_runtime_env() or None,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
            outcome.append(None)
        except BaseException as exc:  # handed to the caller's thread
            outcome.append(exc)

    # A daemon thread: where the cluster never answers it is left waiting, and the process
    # can still end.
    thread = threading.Thread(target=initialise, name="voxelizer-ray-connect", daemon=True)
    thread.start()
    thread.join(seconds)
    if not outcome:
        raise DeviceError(f"the Ray cluster at {address} did not answer within {seconds:g} s")
    error = outcome[0]
    if isinstance(error, (ConnectionError, RuntimeError, ValueError)):
        raise DeviceError(f"cannot connect to the Ray cluster {address!r}: {error}") from None
    if error is not None:
        raise error


def _not_the_sigterm_notice(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("SIGTERM handler is not set")


def _listening_address(address: str | None) -> tuple[str, int] | None:
    """(host, port) that something must listen on for `address` to be a cluster: an
    explicit host:port (ray://host:port too); None for "auto", None and other forms (Ray
    resolves those itself)."""
    if address is None or address == "auto":
        return None
    text = address.removeprefix("ray://")
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or not host:
        return None
    return host.strip("[]"), int(port)
