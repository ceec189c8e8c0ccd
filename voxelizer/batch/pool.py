"""Several workers for one batch: the first in the batch's own process, the others in
processes started with `spawn` (a fork would inherit Vulkan objects that cannot work in the
child), one Voxelizer each, fed task by task so that a fast device takes more meshes.

A worker process tells its parent when each mesh reaches its device, so that one that dies
is blamed for that mesh only: the mesh is tried once more elsewhere, the meshes only queued
there go back to the others, and the process is replaced.
"""

from __future__ import annotations

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
from collections.abc import Iterator
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait as wait_for
from typing import TYPE_CHECKING

from ..api import Voxelizer, shared_voxelizer
from ..errors import DeviceError, VoxelizerError
from ..interrupts import terminate_as_interrupt
from ..io.files import os_error_text
from ..io.output import remove_temporaries
from ..log import get_logger
from ..parallel import keep_freed_memory, use_threads
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


class _QueueSource:
    """Tasks a worker process receives from its parent; None ends them, and so does the
    parent's death. A parent killed outright (SIGKILL) sends no None, and the worker holds
    the inbox's write end itself, so that its read would never end: a worker waiting for a
    task would outlive its batch, holding its device, the batch's stderr and multiprocessing's
    resource tracker."""

    def __init__(self, inbox: Queue):
        self._inbox = inbox
        self._parent = multiprocessing.parent_process()

    def next(self, wait: bool) -> MeshTask | None:
        if not wait:
            return self._inbox.get(block=False)
        while True:
            try:
                return self._inbox.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                if self._parent is not None and not self._parent.is_alive():
                    return None


def worker_process_main(
    slot: int,
    device: str | int | None,
    settings: BatchSettings,
    inbox: Queue,
    outbox: Connection,
) -> None:
    """A worker process: open the device, then voxelize what the parent sends, telling it
    when each mesh reaches the device (so that a crash is blamed on that mesh only). Its
    messages go through a pipe of its own: a worker killed part way through one damages
    no other worker's channel."""
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
        use_threads(settings.threads)  # the workers share the cores
        keep_freed_memory()  # mesh after mesh: each one's arrays reuse the last one's memory
        outbox.send(("imported", None))  # its first meshes may come: they load as it opens
        start_helpers(settings)  # they start while the device opens
        opened: list[Voxelizer] = []

        def open_device() -> Voxelizer:
            """Opened by the worker while its first meshes load (the parent hands them over
            as soon as this process starts)."""
            voxelizer = Voxelizer(device)
            opened.append(voxelizer)
            outbox.send(("ready", voxelizer.device_name))
            return voxelizer

        worker = MeshWorker(
            open_device, settings, on_start=lambda task: outbox.send(("start", task.index))
        )
        try:
            for result in worker.run(_QueueSource(inbox)):
                outbox.send(("result", result))
        except VoxelizerError as exc:
            if opened:
                raise
            outbox.send(("failed_start", str(exc)))
            return
        finally:
            for voxelizer in opened:
                voxelizer.close()
        outbox.send(("exit", None))
    except KeyboardInterrupt:
        pass  # the parent says what happened; a traceback per worker would bury it
    except (BrokenPipeError, EOFError):
        pass  # the parent is gone: nothing to tell


# --- the worker in the batch's process ----------------------------------------------------------


class _LocalWorker:
    """The batch's first worker, in this process on the shared Voxelizer of its device, as a
    one-device batch runs: it voxelizes at once while the spawned workers start (Python, the
    imports, their device), taking its meshes from the queue they share. Its results come
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


class WorkerPool:
    """A batch's tasks run by a worker in this process (on `local_device`) and one spawned
    process per entry of `process_devices`. It owns the processes (started, replaced and
    stopped by `results`), the queue of meshes no worker holds yet and each mesh's count of
    attempts; nothing starts before `results` is iterated."""

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
        self._context = multiprocessing.get_context("spawn")
        self._handles: dict[int, _Handle] = {}
        self._todo = deque(tasks)  # (the local worker takes from it too)
        self._remaining = len(tasks)  # results still to give
        self._attempts: Counter[int] = Counter()  # by task: its worker died on the device
        self._requeues: Counter[int] = Counter()  # by task: its worker died holding it
        self._start_failures: Counter[str] = Counter()  # by device
        self._backlog = settings.prefetch + 2  # tasks one worker holds: loading, device, next
        self._slots = itertools.count()  # a replacement worker gets a slot of its own

    def results(self) -> Iterator[BatchResult]:
        """Every task's result as it completes. Ending early (Ctrl-C, an error, an abandoned
        iterator) stops every worker: see _stop."""
        interrupted = True
        here: _LocalWorker | None = None
        try:
            # the local worker's helpers, before any thread here (a process's queue feeder,
            # the worker's own): then they may be forked, ready at once
            start_helpers(self._settings)
            for device in self._process_devices:
                self._start(device)
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

    def _local_results(self, here: _LocalWorker) -> Iterator[BatchResult]:
        for item in here.take():
            if isinstance(item, BaseException):
                raise item
            if item is not None:
                self._remaining -= 1
                yield item

    def _start(self, device: str | int | None) -> None:
        """A worker process for `device`; where the host refuses one (a process limit, no
        memory), a warning, and the batch goes on with the workers it has (this process's
        always runs)."""
        slot = next(self._slots)
        with _safe_path():  # (a queue starts multiprocessing's resource tracker, a Python too)
            try:
                inbox: Queue = self._context.Queue()
                reader, writer = self._context.Pipe(duplex=False)
            except OSError as exc:
                _cannot_start(device, exc, len(self._handles))
                return
            process = self._context.Process(
                target=worker_process_main,
                args=(slot, device, self._settings, inbox, writer),
                name=f"voxelizer-worker-{slot}",
                daemon=True,
            )
            try:
                with _signals_blocked():  # the child inherits the mask; it unblocks once ready
                    process.start()
            except OSError as exc:
                for end in (reader, writer):
                    end.close()
                inbox.close()
                _cannot_start(device, exc, len(self._handles))
                return
        writer.close()  # the worker holds the only write end: its death ends the pipe
        self._handles[slot] = _Handle(process=process, inbox=inbox, messages=reader, device=device)

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
            elif kind == "start":
                handle.started = payload
            elif kind == "result" and handle.assigned.pop(payload.index, None) is not None:
                self._remaining -= 1
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


def start_helpers(settings: BatchSettings) -> None:
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


INTERRUPTS = {signal.SIGINT, signal.SIGTERM}


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
