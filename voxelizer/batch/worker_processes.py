"""A batch's worker processes (one per device beyond the first: voxelizer.batch.pool runs
them), how they start, and those started ahead of their batch.

A worker process is forked from the batch's process where that is safe (fork_allowed: no
Vulkan instance there yet, no other thread), as the reading and writing helpers are
(voxelizer.batch.helper_processes): a copy with the package imported, it opens its device at
once. The command forks its workers before anything in its process opens Vulkan
(start_workers_ahead), and voxelize_many where it still may. Otherwise, and for a worker that
replaces one that died (the batch's process has Vulkan open by then), it is started by
multiprocessing's `spawn`: a new Python that imports the package first (a fork would inherit
Vulkan objects that cannot work in the child).

A worker started ahead opens its device once the batch's process has opened its own (or
given up): opened at the same time, in two processes, each device opened later than one alone
(docs/benchmarks.md, "The batch command's start with two workers"), while the batch's first
results are the worker's here (as a rule, not an order kept: a worker here that is slow, or
starved of the cores, lets the worker process's come first).

A worker tells its parent, through a pipe of its own, when its imports are done, when its
device is open, when each mesh reaches the device and each result: the parent blames a
worker that dies for the mesh on its device only.
"""

from __future__ import annotations

import atexit
import itertools
import multiprocessing
import os
import queue
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NoReturn

from ..api import Voxelizer
from ..errors import VoxelizerError
from ..interrupts import terminate_as_interrupt
from ..log import get_logger
from ..parallel import keep_freed_memory, use_threads
from .helper_processes import INTERRUPTS, close_kept_pools, fork_allowed, forking
from .readers import shared_load_processes
from .tasks import BatchSettings, MeshTask
from .worker import MeshWorker
from .write_processes import shared_write_processes

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Event

_log = get_logger(__name__)

POLL_SECONDS = 0.2  # how often a waiting worker (and the batch's loop) looks up
# The longest a worker started ahead waits for the device of the batch's process to open
# before it opens its own anyway (the parent's opening stuck, or a parent that never says).
DEVICE_TURN_SECONDS = 5.0


# --- a worker process ---------------------------------------------------------------------------


def _received(inbox: Queue) -> Any:
    """The next item of a worker process's inbox, once it comes; None if its parent dies
    first (see _QueueSource: no one would send an end, and the worker would wait for ever)."""
    parent = multiprocessing.parent_process()
    while True:
        try:
            return inbox.get(timeout=POLL_SECONDS)
        except queue.Empty:
            if parent is not None and not parent.is_alive():
                return None


class _QueueSource:
    """Tasks a worker process receives from its parent; None ends them, and so does the
    parent's death. A parent killed outright (SIGKILL) sends no None, and the worker holds
    the inbox's write end itself, so that its read would never end: a worker waiting for a
    task would outlive its batch, holding its device, the batch's stderr and multiprocessing's
    resource tracker."""

    def __init__(self, inbox: Queue):
        self._inbox = inbox

    def next(self, wait: bool) -> MeshTask | None:
        if wait:
            return _received(self._inbox)
        return self._inbox.get(block=False)


@dataclass(frozen=True)
class AheadStart:
    """What a worker process started ahead of its batch (start_workers_ahead) does while the
    batch plans: it starts as many writing and reading processes as the batch will ask for,
    and opens its device once `device_turn` is set (the batch's process set it when its own
    device is open: release_workers_ahead). The batch's settings come after, through its
    inbox."""

    write_processes: int = 0
    load_processes: int = 0
    device_turn: Event | None = None  # (a fork context's); None: open the device at once


def worker_process_main(
    slot: int,
    device: str | int | None,
    settings: BatchSettings | AheadStart,
    inbox: Queue,
    outbox: Connection,
) -> None:
    """A worker process: open the device, then voxelize what the parent sends, telling it
    when each mesh reaches the device (so that a crash is blamed on that mesh only). Its
    messages go through a pipe of its own: a worker killed part way through one damages
    no other worker's channel. One started ahead of its batch (AheadStart) takes the
    batch's settings from its inbox once its device is open."""
    opened: list[Voxelizer] = []
    try:
        # The parent stops its workers with SIGINT, and a SIGTERM (a job scheduler's, to the
        # whole group) ends one as that does, whatever a launcher left them as (ignored
        # under nohup-like launchers). Blocked by the parent while this process started (so
        # that neither could interrupt its imports with a traceback): one sent since
        # arrives here, handled below.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        terminate_as_interrupt()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, INTERRUPTS)
        batch = (
            _ahead_of_batch(settings, device, inbox, opened)
            if isinstance(settings, AheadStart)
            else settings
        )
        if batch is None:
            return  # started ahead, and no batch took it
        use_threads(batch.threads)  # the workers share the cores
        keep_freed_memory()  # mesh after mesh: each one's arrays reuse the last one's memory
        outbox.send(("imported", None))  # its first meshes may come: they load as it opens
        start_helpers(batch)  # they start while the device opens
        if opened:
            outbox.send(("ready", opened[0].device_name))

        def open_device() -> Voxelizer:
            """Opened by the worker while its first meshes load (the parent hands them over
            as soon as this process starts), unless it was open already."""
            if opened:
                return opened[0]
            voxelizer = Voxelizer(device)
            opened.append(voxelizer)
            outbox.send(("ready", voxelizer.device_name))
            return voxelizer

        worker = MeshWorker(
            open_device, batch, on_start=lambda task: outbox.send(("start", task.index))
        )
        try:
            for result in worker.run(_QueueSource(inbox)):
                outbox.send(("result", result))
        except VoxelizerError as exc:
            if opened:
                raise
            outbox.send(("failed_start", str(exc)))
            return
        outbox.send(("exit", None))
        _leave_now()
    except KeyboardInterrupt:
        pass  # the parent says what happened; a traceback per worker would bury it
    except (BrokenPipeError, EOFError):
        pass  # the parent is gone: nothing to tell
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # (the parent's SIGINT after a Ctrl-C)
        for voxelizer in opened:
            voxelizer.close()


def _leave_now() -> NoReturn:
    """The batch is done: every result is with the parent, every file written. The worker
    leaves without closing its device and its helpers one by one (an H200's device took
    about 0.1 s to close, which the parent's join waited for): the system reclaims the
    device, and the helpers end as their input pipes close with this process."""
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):
            stream.flush()
    os._exit(0)


def _ahead_of_batch(
    start: AheadStart, device: str | int | None, inbox: Queue, opened: list[Voxelizer]
) -> BatchSettings | None:
    """A worker started ahead of its batch: its helpers started (before its device opens:
    then they are forked) and its device opened (into `opened`) once the batch's process
    has opened its own (_wait_for_turn), then the batch's settings (None: no batch took
    it). A device that does not open here is opened again, and its error reported, once the
    batch runs."""
    start_helpers(start)
    if not _wait_for_turn(start.device_turn):
        return None  # the parent is gone
    with suppress(VoxelizerError):
        opened.append(Voxelizer(device))
    settings: BatchSettings | None = _received(inbox)
    return settings


def _wait_for_turn(turn: Event | None) -> bool:
    """Wait until `turn` (an Event) is set, DEVICE_TURN_SECONDS at most; False if the
    parent dies meanwhile."""
    if turn is None:
        return True
    parent = multiprocessing.parent_process()
    deadline = time.monotonic() + DEVICE_TURN_SECONDS
    while not turn.wait(min(POLL_SECONDS, max(0.0, deadline - time.monotonic()))):
        if parent is not None and not parent.is_alive():
            return False
        if time.monotonic() >= deadline:
            break
    return True


def _forked_worker_main(foreign: list[int], *args: Any) -> None:
    """A worker forked from the batch's process: its copies of the parent's ends of the
    workers' pipes closed (a worker's own end included: the parent's going away must break
    the pipe; the parent's helpers' pipes were closed as it forked, by KeptPool), then
    worker_process_main(*args). Its own helpers end as it leaves, Ctrl-C ignored meanwhile
    (in a spawned worker the exit handlers end them; a forked one leaves by os._exit)."""
    for fd in foreign:
        with suppress(OSError):
            os.close(fd)
    try:
        worker_process_main(*args)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # (a second Ctrl-C: no traceback)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        close_kept_pools()


# --- as the batch's process sees them ---------------------------------------------------------


@dataclass
class WorkerHandle:
    """A worker process as its parent sees it: its inbox, its pipe, the meshes it holds."""

    process: BaseProcess
    inbox: Queue
    messages: Connection  # the worker's pipe, read end
    device: str | int | None
    assigned: dict[int, MeshTask] = field(default_factory=dict)
    started: int | None = None  # the mesh on the device now
    imported: bool = False  # its code runs: it may get meshes to read while its device opens
    ready: bool = False
    started_at: float = field(default_factory=time.perf_counter)
    start_method: str = "spawn"  # how its process started: "fork" or "spawn"
    ending: bool = False  # sent its end before the batch's: it holds no mesh, gets none


def start_worker_process(
    slot: int,
    device: str | int | None,
    settings: BatchSettings | AheadStart,
    *,
    others: list[WorkerHandle],
    selector: int | None = None,
) -> WorkerHandle:
    """A worker process for `device` (AheadStart: started ahead of its batch):
    forked where fork_allowed(), as the helpers are (signals held, the garbage collector
    frozen: helper_processes.forking), closing its copies of the parent's ends of the pipes
    of `others` (the other workers) and of its own, and its copy of `selector` (the
    batch's selector, a file descriptor); else spawned. OSError where the host refuses one."""
    forked = fork_allowed()
    context = (
        multiprocessing.get_context("fork") if forked else multiprocessing.get_context("spawn")
    )
    # (a spawn queue starts multiprocessing's resource tracker, a Python too)
    with nullcontext() if forked else _safe_path():
        inbox: Queue = context.Queue()
        try:
            reader, writer = context.Pipe(duplex=False)
        except OSError:
            inbox.close()
            raise
        args: tuple[Any, ...] = (slot, device, settings, inbox, writer)
        target: Callable[..., None] = worker_process_main
        if forked:
            foreign = [reader.fileno(), *([] if selector is None else [selector])]
            for other in others:
                with suppress(OSError):  # (a closed end: nothing to close)
                    foreign += [other.messages.fileno(), other.process.sentinel]
            target, args = _forked_worker_main, (foreign, *args)
        process = context.Process(
            target=target, args=args, name=f"voxelizer-worker-{slot}", daemon=True
        )
        try:
            # the child inherits the mask; it unblocks the signals once its handlers are set
            with forking() if forked else _signals_blocked():
                process.start()
        except OSError:
            for end in (reader, writer):
                end.close()
            inbox.close()
            raise
    writer.close()  # the worker holds the only write end: its death ends the pipe
    method = "fork" if forked else "spawn"
    return WorkerHandle(process, inbox, reader, device, start_method=method)


class _Ahead:
    """Worker processes forked before their batch (start_workers_ahead), each waiting for
    its settings, for the WorkerPool this process makes next: it takes them by device. Those
    none takes are stopped by stop_workers_ahead, or as this process exits; a forked child
    has none."""

    def __init__(self) -> None:
        self.handles: list[WorkerHandle] = []
        self._owner = os.getpid()
        self._slots = itertools.count()
        self._turn: Event | None = None  # set: they may open their devices
        atexit.register(self.stop)

    def start(self, devices: list[str | int | None], start: AheadStart) -> None:
        self._owner = os.getpid()
        if devices and fork_allowed():
            self._turn = multiprocessing.get_context("fork").Event()
            start = replace(start, device_turn=self._turn)
        for device in devices:
            if not fork_allowed():
                return
            try:
                handle = start_worker_process(next(self._slots), device, start, others=self.handles)
            except OSError:
                return  # the batch starts the others itself
            self.handles.append(handle)
            _log.debug("worker process for device %s forked ahead of its batch", device)

    def take(self, device: str | int | None) -> WorkerHandle | None:
        """A worker started ahead for `device`, if one is left."""
        if os.getpid() != self._owner:
            return None
        for index, handle in enumerate(self.handles):
            if handle.device == device:
                return self.handles.pop(index)
        return None

    def release(self) -> None:
        """Let the workers started ahead open their devices."""
        if os.getpid() == self._owner and self._turn is not None:
            self._turn.set()

    def stop(self) -> None:
        if os.getpid() == self._owner:
            self.release()  # (a worker waiting for its turn then reads its end)
            handles, self.handles = self.handles, []
            stop_workers(handles, interrupted=False)


_ahead = _Ahead()


def start_workers_ahead(devices: list[str | int | None], start: AheadStart) -> None:
    """Worker processes for `devices`, forked now for the batch this process runs next
    (the command's, voxelizer.batch.cli) where fork_allowed(): before anything here opens
    Vulkan or starts a thread, and before this process's helpers (each worker forks its
    own). Each starts its helpers and opens its device at once (`start`), then waits for
    the settings of the batch's WorkerPool, which takes them; those it does not take are
    stopped by stop_workers_ahead (the command calls it as its batch ends), or as this
    process exits. Where a fork is not allowed, none: the batch starts its workers itself."""
    _ahead.start(devices, start)


def release_workers_ahead() -> None:
    """The device of the batch's process is open (or failed to open): the workers started
    ahead open theirs now. Opened at the same time, in two processes, each device opened later
    than one alone (docs/benchmarks.md, "The batch command's start with two workers"), and the
    batch's first results come from the worker here (as a rule, not an order kept), which
    reads its first meshes while its device opens. A worker that hears nothing opens its
    device after DEVICE_TURN_SECONDS."""
    _ahead.release()


def take_worker_ahead(device: str | int | None) -> WorkerHandle | None:
    """A worker started ahead for `device` (by start_workers_ahead), if one is left: the
    batch's WorkerPool takes it."""
    return _ahead.take(device)


def workers_ahead() -> list[WorkerHandle]:
    """The workers started ahead that no batch took yet (a worker forked now closes its
    copies of their pipes)."""
    return list(_ahead.handles)


def stop_workers_ahead() -> None:
    """Stop the worker processes started ahead that no batch took (the command's batch
    ended before it started them: a wrong device, an existing output)."""
    _ahead.stop()


def start_helpers(settings: BatchSettings | AheadStart) -> None:
    """A worker's writing processes, then its reading processes, as its settings ask: started
    before its threads (then forked, ready at once), so its MeshWorker finds them running."""
    if settings.write_processes:
        shared_write_processes(settings.write_processes)
    if settings.load_processes:
        shared_load_processes(settings.load_processes)


@contextmanager
def _signals_blocked() -> Iterator[None]:
    """SIGINT and SIGTERM held back (not lost) while a worker is spawned: the child inherits
    the blocked mask through exec, so they reach it only once its own code handles them."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextmanager
def _safe_path() -> Iterator[None]:
    """A worker is a new Python started with `-c` (multiprocessing's spawn), which puts the
    current folder first on its module path: a numpy.py or multiprocessing.py there would
    run in the worker. PYTHONSAFEPATH=1 (read by Python 3.11 and later) keeps it off, for
    the children started meanwhile."""
    previous = os.environ.get("PYTHONSAFEPATH")
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("PYTHONSAFEPATH", None)
        else:
            os.environ["PYTHONSAFEPATH"] = previous


def stop_workers(handles: list[WorkerHandle], *, interrupted: bool) -> None:
    """End the workers: after a finished batch, a None in each inbox; after Ctrl-C, an error
    or an abandoned iterator, a SIGINT, so that they drop their queued meshes (a file being
    written still appears whole or not at all). A worker that does not end is terminated."""
    for handle in handles:
        if not handle.process.is_alive():
            continue
        if interrupted and handle.process.pid is not None:
            with suppress(OSError):
                os.kill(handle.process.pid, signal.SIGINT)
        else:
            with suppress(OSError, ValueError):
                handle.inbox.put(None)
    deadline = time.monotonic() + 20.0
    for handle in handles:
        handle.process.join(max(0.0, deadline - time.monotonic()))
    for handle in handles:
        if handle.process.is_alive():
            handle.process.terminate()
            handle.process.join(5.0)
        handle.messages.close()
