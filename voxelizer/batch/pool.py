"""Several workers for one batch: the first in the batch's own process, the others in
processes of their own (voxelizer.batch.worker_processes), one Voxelizer each, fed task by
task so that a fast device takes more meshes.

A worker process tells its parent when each mesh reaches its device, so that one that dies
is blamed for that mesh only: the mesh is tried once more elsewhere, the meshes only queued
there go back to the others, and the process is replaced.

The parent's loop (WorkerPool.results) runs in the batch's main thread, beside the device's
thread of the worker here, under one GIL: it waits on one selector that holds each
worker's pipe from when the worker is added until it is removed, and reads one message per
pipe that the selector finds ready (no fresh selector per wait, no poll per message).
"""

from __future__ import annotations

import functools
import itertools
import os
import queue
import selectors
import threading
import time
import warnings
from collections import Counter, deque
from collections.abc import Iterator
from contextlib import closing, suppress
from dataclasses import replace

from ..api import shared_voxelizer
from ..errors import DeviceError
from ..io.files import os_error_text
from ..io.output import remove_temporaries
from ..log import get_logger
from .tasks import BatchResult, BatchSettings, MeshTask
from .timeline import timeline
from .worker import MeshWorker
from .worker_processes import (
    POLL_SECONDS,
    WorkerHandle,
    start_helpers,
    start_worker_process,
    stop_workers,
    take_worker_ahead,
    workers_ahead,
)

_log = get_logger(__name__)

# A mesh whose worker died while voxelizing it is tried once more, elsewhere; meshes that
# were only waiting in a dead worker's queue go back to the others (at most a few times).
MAX_DEVICE_ATTEMPTS = 2
MAX_REQUEUES = 4
MAX_START_FAILURES = 2  # a worker that dies before it is ready is replaced once per device
# Meshes a worker process gets while it starts: it reads them as its device opens, and a
# small batch is not held back for it while the worker here is free.
STARTING_SHARE = 2


# --- the worker in the batch's process ----------------------------------------------------------


class _LocalWorker:
    """The batch's first worker, in this process on the shared Voxelizer of its device, as a
    one-device batch runs: it voxelizes at once while the worker processes start (their
    device; a spawned one, Python and the imports first), taking its meshes from the queue
    they share. Its results come through `results`; a byte on `wakeup` (a pipe) tells the
    waiting parent loop that some are there."""

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
            os.read(self.wakeup, 4096)  # (more bytes left: the selector wakes again)
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


# --- the pool ------------------------------------------------------------------------------------


class WorkerPool:
    """A batch's tasks run by a worker in this process (on `local_device`) and one process
    per entry of `process_devices` (one started ahead for its device, else forked or spawned
    here: start_worker_process). It owns the processes (started, replaced and stopped by
    `results`), the queue of meshes no worker holds yet, each mesh's count of attempts and
    the selector that `results` waits on (each worker's pipe in it while the worker is in
    the pool); nothing starts before `results` is iterated."""

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
        self._handles: dict[int, WorkerHandle] = {}
        self._todo = deque(tasks)  # (the local worker takes from it too)
        self._remaining = len(tasks)  # results still to give
        self._attempts: Counter[int] = Counter()  # by task: its worker died on the device
        self._requeues: Counter[int] = Counter()  # by task: its worker died holding it
        self._start_failures: Counter[str] = Counter()  # by device
        self._backlog = settings.prefetch + 2  # tasks one worker holds: loading, device, next
        self._slots = itertools.count()  # a replacement worker gets a slot of its own
        self._done: Counter[int] = Counter()  # results by worker: a process's slot, -1 here
        self._began = time.perf_counter()
        self._selector = selectors.DefaultSelector()  # closed as `results` ends
        self._ended: list[WorkerHandle] = []  # ended before the batch: joined as it ends

    def results(self) -> Iterator[BatchResult]:
        """Every task's result as it completes. Ending early (Ctrl-C, an error, an abandoned
        iterator) stops every worker: see stop_workers."""
        interrupted = True
        here: _LocalWorker | None = None
        self._began = time.perf_counter()
        try:
            taken = []
            for device in self._process_devices:
                handle = take_worker_ahead(device)
                if handle is None:
                    self._start(device)
                else:
                    self._add(next(self._slots), handle)
                    taken.append(handle)
            # The local worker's helpers after the workers' forks (the reading processes'
            # threads start at once), before any other thread here (a queue's feeder, the
            # local worker): then they may be forked, ready at once.
            start_helpers(self._settings)
            for handle in taken:
                handle.inbox.put(self._settings)  # before any mesh
            here = _LocalWorker(self._local_device, self._settings, self._todo)
            self._selector.register(here.wakeup, selectors.EVENT_READ, None)
            while self._remaining:
                self._top_up()
                yield from self._ready(here)
            interrupted = False
        finally:
            if here is not None:
                here.stop()
            stop_workers([*self._handles.values(), *self._ended], interrupted=interrupted)
            timeline.mark("worker processes ended")
            self._selector.close()
            if here is not None:
                here.join()
            _log.debug("meshes by worker: %s", self._shares())

    def _ready(self, here: _LocalWorker) -> Iterator[BatchResult]:
        """What the selector finds ready within POLL_SECONDS: the worker here's results, and
        one message of each worker process whose pipe is readable (the next select finds
        the rest). A worker that ended is known by its pipe's end, after its last whole
        messages: its process's sentinel would add nothing."""
        for key, _ in self._selector.select(POLL_SECONDS):
            if key.data is None:
                yield from self._local_results(here)
                continue
            slot, handle = key.data
            if self._handles.get(slot) is handle:  # (not removed by an earlier message)
                yield from self._receive(slot)

    def _add(self, slot: int, handle: WorkerHandle) -> None:
        """A worker process into the pool, its pipe into the selector until _lost."""
        self._handles[slot] = handle
        self._selector.register(handle.messages, selectors.EVENT_READ, (slot, handle))

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
        others = [*self._handles.values(), *workers_ahead()]
        try:
            handle = start_worker_process(
                slot, device, self._settings, others=others, selector=self._selector.fileno()
            )
        except OSError as exc:
            _cannot_start(device, exc, len(self._handles))
            return
        self._add(slot, handle)

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
        if not self._todo:
            for handle in self._handles.values():
                if not handle.assigned and not handle.ending:
                    self._end(handle)

    def _end(self, handle: WorkerHandle) -> None:
        """End a worker process that holds no mesh once none is left to hand out: it leaves
        while the others voxelize the batch's last meshes (a device's closing, about 0.1 s on
        an H200, then comes before the batch's end, not after it). Its pipe stays in the
        selector until its "exit"; a mesh that a dying worker gives back later goes to
        a worker started for it (_lost)."""
        handle.ending = True
        with suppress(OSError, ValueError):
            handle.inbox.put(None)

    def _receive(self, slot: int) -> Iterator[BatchResult]:
        """The next message of the worker's pipe, which the selector found readable; at its
        end (the worker died, or was killed part way through a message), the worker's meshes
        are given back."""
        handle = self._handles[slot]
        try:
            kind, payload = handle.messages.recv()
        except (EOFError, OSError):
            if handle.ending and not handle.assigned:
                self._ended_now(slot)  # (left without its "exit": it held nothing)
                return
            handle.process.join(5.0)
            yield from self._lost(slot)
            return
        if kind == "exit" and handle.ending:
            self._ended_now(slot)
            return
        if kind == "failed_start":
            raise DeviceError(str(payload))
        if kind == "imported":
            handle.imported = True
        elif kind == "ready":
            handle.ready = True
            timeline.mark("worker process ready", str(payload))
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
            timeline.mark("worker process first result")
            self._remaining -= 1
            self._done[slot] += 1
            yield payload

    def _ended_now(self, slot: int) -> None:
        """A worker that _end ended is leaving: out of the pool, not waited for (its process
        is joined as the batch ends, by then gone)."""
        handle = self._handles.pop(slot)
        self._selector.unregister(handle.messages)
        handle.messages.close()
        self._ended.append(handle)

    def _lost(self, slot: int) -> Iterator[BatchResult]:
        """The meshes of a worker that died: retried, or failed when tried enough; the
        worker replaced while meshes remain."""
        handle = self._handles.pop(slot)
        self._selector.unregister(handle.messages)
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

    def _failed_start(self, slot: int, handle: WorkerHandle, code: int | None) -> None:
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
