"""Several workers for one batch: the first in the batch's own process, the others in
processes of their own, one Voxelizer each, fed task by task so that a fast device takes more
meshes.

A worker process is forked from the batch's process where that is safe (fork_allowed: no
Vulkan instance there yet, no other thread), as the reading and writing helpers are
(voxelizer.batch.helper_processes): a copy with the package imported, it opens its device at
once. The command forks its workers before anything in its process opens Vulkan
(start_workers_ahead), and voxelize_many where it still may. Otherwise, and for a worker that
replaces one that died (the batch's process has Vulkan open by then), it is started by
multiprocessing's `spawn`: a new Python that imports the package first (a fork would inherit
Vulkan objects that cannot work in the child).

A worker process tells its parent when each mesh reaches its device, so that one that dies
is blamed for that mesh only: the mesh is tried once more elsewhere, the meshes only queued
there go back to the others, and the process is replaced.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import multiprocessing
import os
import queue
import signal
import threading
import time
import warnings
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager, nullcontext, suppress
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait as wait_for
from typing import TYPE_CHECKING, Any

from ..api import Voxelizer, shared_voxelizer
from ..errors import DeviceError, VoxelizerError
from ..interrupts import terminate_as_interrupt
from ..io.files import os_error_text
from ..io.output import remove_temporaries
from ..log import get_logger
from ..parallel import keep_freed_memory, use_threads
from .helper_processes import INTERRUPTS, close_kept_pools, fork_allowed, forking
from .readers import shared_load_processes
from .tasks import BatchResult, BatchSettings, MeshTask
from .worker import MeshWorker
from .write_processes import shared_write_processes

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess
    from multiprocessing.queues import Queue

_log = get_logger(__name__)

# A mesh whose worker died while voxelizing it is tried once more, elsewhere; meshes that
# were only waiting in a dead worker's queue go back to the others (at most a few times).
MAX_DEVICE_ATTEMPTS = 2
MAX_REQUEUES = 4
MAX_START_FAILURES = 2  # a worker that dies before it is ready is replaced once per device
# Meshes a worker process gets while it starts: it reads them as its device opens, and a
# small batch is not held back for it while the worker here is free.
STARTING_SHARE = 2
_POLL_SECONDS = 0.2


# --- a worker process ---------------------------------------------------------------------------


def _received(inbox: Queue) -> Any:
    """The next item of a worker process's inbox, once it comes; None if its parent dies
    first (see _QueueSource: no one would send an end, and the worker would wait for ever)."""
    parent = multiprocessing.parent_process()
    while True:
        try:
            return inbox.get(timeout=_POLL_SECONDS)
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
    and opens its device. The batch's settings come after, through its inbox."""

    write_processes: int = 0
    load_processes: int = 0


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
    except KeyboardInterrupt:
        pass  # the parent says what happened; a traceback per worker would bury it
    except (BrokenPipeError, EOFError):
        pass  # the parent is gone: nothing to tell
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # (the parent's SIGINT after a Ctrl-C)
        for voxelizer in opened:
            voxelizer.close()


def _ahead_of_batch(
    start: AheadStart, device: str | int | None, inbox: Queue, opened: list[Voxelizer]
) -> BatchSettings | None:
    """A worker started ahead of its batch: its helpers started (before its device opens:
    then they are forked) and its device opened (into `opened`) while the batch plans, then
    the batch's settings (None: no batch took it). A device that does not open here is
    opened again, and its error reported, once the batch runs."""
    start_helpers(start)
    with suppress(VoxelizerError):
        opened.append(Voxelizer(device))
    settings: BatchSettings | None = _received(inbox)
    return settings


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


# --- the worker in the batch's process ----------------------------------------------------------


class _LocalWorker:
    """The batch's first worker, in this process on the shared Voxelizer of its device, as a
    one-device batch runs: it voxelizes at once while the worker processes start (their
    device; a spawned one, Python and the imports first), taking its meshes from the queue
    they share. Its results come
    through `results`; a byte on `wakeup` (a pipe) tells the waiting parent loop that some
    are there."""

    def __init__(self, device: str | int | None, settings: BatchSettings, todo: deque[MeshTask]):
        self._todo = todo
        self._stopping = threading.Event()
        self.results: queue.SimpleQueue[BatchResult | BaseException | None] = queue.SimpleQueue()
        self.wakeup, self._wake = os.pipe()
        os.set_blocking(self._wake, False)  # a full pipe already wakes the parent
        os.set_blocking(self.wakeup, False)
        self._worker = MeshWorker(functools.partial(shared_voxelizer, device), settings)
        self._thread = threading.Thread(target=self._run, name="voxelizer-local-worker")
        self._thread.start()

    def next(self, wait: bool) -> MeshTask | None:
        """The TaskSource of its MeshWorker: the shared queue's next mesh; None once it is
        empty (a mesh given back later by a dead process goes to a process) or stopping."""
        if self._stopping.is_set():
            return None
        try:
            return self._todo.popleft()
        except IndexError:
            return None

    def _run(self) -> None:
        try:
            with closing(self._worker.run(self)) as results:
                for result in results:
                    self._post(result)
                    if self._stopping.is_set():
                        break  # (closing drops the meshes read ahead: Ctrl-C ends it soon)
        except BaseException as exc:  # handed to the parent loop, raised there
            self._post(exc)
        finally:
            self._post(None)

    def _post(self, item: BatchResult | BaseException | None) -> None:
        self.results.put(item)
        with suppress(BlockingIOError, OSError):
            os.write(self._wake, b"\0")

    def take(self) -> list[BatchResult | BaseException | None]:
        """What it has posted since the last take (None: it has ended)."""
        with suppress(BlockingIOError, OSError):
            while os.read(self.wakeup, 4096):
                pass
        items = []
        with suppress(queue.Empty):
            while True:
                items.append(self.results.get_nowait())
        return items

    def stop(self) -> None:
        """Take no more meshes: the one on the device and the writes under way finish."""
        self._stopping.set()

    def join(self) -> None:
        self._stopping.set()
        self._thread.join()
        for end in (self.wakeup, self._wake):
            with suppress(OSError):
                os.close(end)


# --- the pool -----------------------------------------------------------------------------------


@dataclass
class _Handle:
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


class WorkerPool:
    """A batch's tasks run by a worker in this process (on `local_device`) and one process
    per entry of `process_devices` (one started ahead for its device, else forked or spawned
    here: _start_process). It owns the processes (started, replaced and stopped by
    `results`), the queue of meshes no worker holds yet and each mesh's count of attempts;
    nothing starts before `results` is iterated."""

    def __init__(
        self,
        tasks: list[MeshTask],
        *,
        local_device: str | int | None,
        process_devices: list[str | int | None],
        settings: BatchSettings,
    ):
        self._settings = settings
        self._local_device = local_device
        self._process_devices = process_devices
        self._handles: dict[int, _Handle] = {}
        self._todo = deque(tasks)  # (the local worker takes from it too)
        self._remaining = len(tasks)  # results still to give
        self._attempts: Counter[int] = Counter()  # by task: its worker died on the device
        self._requeues: Counter[int] = Counter()  # by task: its worker died holding it
        self._start_failures: Counter[str] = Counter()  # by device
        self._backlog = settings.prefetch + 2  # tasks one worker holds: loading, device, next
        self._slots = itertools.count()  # a replacement worker gets a slot of its own
        self._done: Counter[int] = Counter()  # results by worker: a process's slot, -1 here
        self._began = time.perf_counter()

    def results(self) -> Iterator[BatchResult]:
        """Every task's result as it completes. Ending early (Ctrl-C, an error, an abandoned
        iterator) stops every worker: see _stop."""
        interrupted = True
        here: _LocalWorker | None = None
        self._began = time.perf_counter()
        try:
            taken = []
            for device in self._process_devices:
                handle = _ahead.take(device)
                if handle is None:
                    self._start(device)
                else:
                    self._handles[next(self._slots)] = handle
                    taken.append(handle)
            # The local worker's helpers after the workers' forks (the reading processes'
            # threads start at once), before any other thread here (a queue's feeder, the
            # local worker): then they may be forked, ready at once.
            start_helpers(self._settings)
            for handle in taken:
                handle.inbox.put(self._settings)  # before any mesh
            here = _LocalWorker(self._local_device, self._settings, self._todo)
            while self._remaining:
                self._top_up()
                waiting: list[Connection | int] = [h.messages for h in self._handles.values()]
                waiting += [h.process.sentinel for h in self._handles.values()]
                ready = wait_for([*waiting, here.wakeup], timeout=_POLL_SECONDS)
                if here.wakeup in ready:
                    yield from self._local_results(here)
                # A worker that ended: its pipe says so (after its last whole messages).
                ended = {h.process.sentinel for h in self._handles.values()} & set(ready)
                for slot in list(self._handles):
                    handle = self._handles[slot]
                    if handle.messages in ready or handle.process.sentinel in ended:
                        yield from self._receive(slot)
            interrupted = False
        finally:
            if here is not None:
                here.stop()
            _stop(list(self._handles.values()), interrupted=interrupted)
            if here is not None:
                here.join()
            _log.debug("meshes by worker: %s", self._shares())

    def _shares(self) -> str:
        """The results each worker gave, in words: "here 120, worker 0 72"."""
        slots = sorted(slot for slot in self._done if slot >= 0)
        return ", ".join(
            [f"here {self._done[-1]}", *(f"worker {s} {self._done[s]}" for s in slots)]
        )

    def _local_results(self, here: _LocalWorker) -> Iterator[BatchResult]:
        for item in here.take():
            if isinstance(item, BaseException):
                raise item
            if item is not None:
                self._remaining -= 1
                self._done[-1] += 1
                yield item

    def _start(self, device: str | int | None) -> None:
        """A worker process for `device`; where the host refuses one (a process limit, no
        memory), a warning, and the batch goes on with the workers it has (this process's
        always runs)."""
        slot = next(self._slots)
        others = [*self._handles.values(), *_ahead.handles]
        try:
            handle = _start_process(slot, device, self._settings, others=others)
        except OSError as exc:
            _cannot_start(device, exc, len(self._handles))
            return
        self._handles[slot] = handle

    def _top_up(self) -> None:
        """Hand queued meshes to the workers, each up to its share: a worker still starting
        gets its first ones too, so that it reads them while its device opens."""
        held = sum(len(handle.assigned) for handle in self._handles.values())
        limit = worker_share(
            outstanding=len(self._todo) + held,
            workers=len(self._handles) + 1,  # the worker here takes from the same queue
            backlog=self._backlog,
        )
        for handle in self._handles.values():
            # Until its device is open, no pace of its own: enough to read ahead meanwhile
            # (none before its imports are done: a script without a main guard fails there).
            share = min(limit, STARTING_SHARE) if handle.imported else 0
            share = limit if handle.ready else share
            while len(handle.assigned) < share:
                try:
                    task = self._todo.popleft()
                except IndexError:
                    break
                handle.assigned[task.index] = task
                handle.inbox.put(task)

    def _receive(self, slot: int) -> Iterator[BatchResult]:
        """Every whole message waiting in the worker's pipe; at its end (the worker died, or
        was killed part way through a message), the worker's meshes are given back."""
        handle = self._handles[slot]
        while True:
            try:
                if not handle.messages.poll():
                    return
                kind, payload = handle.messages.recv()
            except (EOFError, OSError):
                handle.process.join(5.0)
                yield from self._lost(slot)
                return
            if kind == "failed_start":
                raise DeviceError(str(payload))
            if kind == "imported":
                handle.imported = True
            elif kind == "ready":
                handle.ready = True
                now = time.perf_counter()
                _log.debug(
                    "worker %d (device %s, started by %s) ready %.2f s after its start, "
                    "%.2f s into the batch",
                    slot, handle.device, handle.start_method, now - handle.started_at,
                    now - self._began,
                )  # fmt: skip
            elif kind == "start":
                handle.started = payload
            elif kind == "result" and handle.assigned.pop(payload.index, None) is not None:
                self._remaining -= 1
                self._done[slot] += 1
                yield payload

    def _lost(self, slot: int) -> Iterator[BatchResult]:
        """The meshes of a worker that died: retried, or failed when tried enough; the
        worker replaced while meshes remain."""
        handle = self._handles.pop(slot)
        handle.messages.close()
        handle.inbox.cancel_join_thread()  # tasks no one will read: exiting must not wait
        code = handle.process.exitcode
        if not handle.ready:  # none of its meshes reached a device: they go back as they were
            self._todo.extendleft(reversed(handle.assigned.values()))
            self._failed_start(slot, handle, code)  # a device that never opens ends the batch
            return
        _log.warning("worker %d (device %s) died with exit code %s", slot, handle.device, code)
        for index, task in handle.assigned.items():
            if task.output is not None:  # a write the kill cut short: no one else writes it
                remove_temporaries(task.output)
            self._requeues[index] += 1
            if index == handle.started:
                self._attempts[index] += 1
            if self._attempts[index] >= MAX_DEVICE_ATTEMPTS or self._requeues[index] > MAX_REQUEUES:
                self._remaining -= 1
                yield task.failed(f"{task.label}: the worker process died (exit code {code}) on it")
                continue
            # Its output, if the dead worker wrote it, is whole (atomic writes): replace it.
            self._todo.appendleft(replace(task, replace=True) if task.output else task)
        if self._todo or any(h.assigned for h in self._handles.values()):
            self._start(handle.device)

    def _failed_start(self, slot: int, handle: _Handle, code: int | None) -> None:
        """A worker that died before it was ready: replaced, unless its device failed so
        often that the batch ends (DeviceError)."""
        self._start_failures[str(handle.device)] += 1
        if self._start_failures[str(handle.device)] >= MAX_START_FAILURES:
            raise DeviceError(
                f"the worker for device {handle.device} exited with code {code} before it "
                f"was ready ({MAX_START_FAILURES} times; a script that starts workers needs "
                '`if __name__ == "__main__":` around its code, as multiprocessing\'s '
                "spawn does)"
            )
        _log.warning("worker %d (device %s) died while starting", slot, handle.device)
        self._start(handle.device)


def _start_process(
    slot: int,
    device: str | int | None,
    settings: BatchSettings | AheadStart,
    *,
    others: list[_Handle],
) -> _Handle:
    """A worker process for `device` (AheadStart: started ahead of its batch):
    forked where fork_allowed(), as the helpers are (signals held, the garbage collector
    frozen: helper_processes.forking), closing its copies of the parent's ends of the pipes
    of `others` (the other workers) and of its own; else spawned. OSError where the host
    refuses one."""
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
            foreign = [reader.fileno()]
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
    return _Handle(process, inbox, reader, device, start_method=method)


class _Ahead:
    """Worker processes forked before their batch (start_workers_ahead), each waiting for
    its settings, for the WorkerPool this process makes next: it takes them by device. Those
    none takes are stopped by stop_workers_ahead, or as this process exits; a forked child
    has none."""

    def __init__(self) -> None:
        self.handles: list[_Handle] = []
        self._owner = os.getpid()
        self._slots = itertools.count()
        atexit.register(self.stop)

    def start(self, devices: list[str | int | None], start: AheadStart) -> None:
        self._owner = os.getpid()
        for device in devices:
            if not fork_allowed():
                return
            try:
                handle = _start_process(next(self._slots), device, start, others=self.handles)
            except OSError:
                return  # the batch starts the others itself
            self.handles.append(handle)
            _log.debug("worker process for device %s forked ahead of its batch", device)

    def take(self, device: str | int | None) -> _Handle | None:
        """A worker started ahead for `device`, if one is left."""
        if os.getpid() != self._owner:
            return None
        for index, handle in enumerate(self.handles):
            if handle.device == device:
                return self.handles.pop(index)
        return None

    def stop(self) -> None:
        if os.getpid() == self._owner:
            handles, self.handles = self.handles, []
            _stop(handles, interrupted=False)


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


def worker_share(outstanding: int, workers: int, backlog: int) -> int:
    """The most meshes one worker may hold: its backlog, but no more than its fair part of
    the meshes not yet done, so that the worker ready first does not take a small batch's
    meshes from the ones still starting (and the last meshes are spread at the end)."""
    return max(1, min(backlog, -(-outstanding // max(1, workers))))


def _cannot_start(device: str | int | None, error: OSError, others: int) -> None:
    warnings.warn(
        f"cannot start a worker process for device {device} ({os_error_text(error)}): the "
        f"batch goes on with {others + 1} worker{'s' if others else ''}",
        stacklevel=2,
    )


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


def _stop(handles: list[_Handle], *, interrupted: bool) -> None:
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
