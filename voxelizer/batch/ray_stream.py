"""A Ray actor's batch engine kept running across calls, and the driver's feed of actors.

`StreamingWorker` runs one MeshWorker for the life of its actor, on a thread of its own,
over the tasks that the actor's calls hand it: several calls at a time (a threaded actor)
keep its reading, device and writing busy from one call's rows to the next, and each call
gets its own rows' results. `feed_actors` is the driver's side: rows in chunks to a few
actors, each kept `in_flight` chunks ahead, the next chunk to whichever actor returns one
first (the faster device gets more).
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from .tasks import BatchResult, MeshTask
from .worker import MeshWorker

# Chunks each actor holds at once: one running, the next ones queued in its worker, so that
# the worker never drains between chunks while the driver hands over more. Four of 16 rows:
# after one returns, 48 rows still wait there, more than a worker reads ahead (2 for each of
# its reading processes, 15 of them on a 32-core node of two GPUs).
CHUNKS_IN_FLIGHT = 4


class StreamingWorker:
    """One MeshWorker serving the tasks of every call of its actor: submit(tasks) -> one
    future per task, in order. The worker's thread starts with the first tasks and stays
    (its loader and writer threads, reading processes and Voxelizer too); a call that waits
    on its futures never drains the worker while other calls' tasks are queued."""

    def __init__(self, worker: MeshWorker):
        self._worker = worker
        self._tasks: queue.SimpleQueue[MeshTask | None] = queue.SimpleQueue()
        self._waiting: dict[int, tuple[int, Future[BatchResult]]] = {}  # number -> (index, f)
        self._numbers = itertools.count()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, tasks: Iterable[MeshTask]) -> list[Future[BatchResult]]:
        futures = []
        with self._lock:
            for task in tasks:
                number = next(self._numbers)
                future: Future[BatchResult] = Future()
                self._waiting[number] = (task.index, future)
                futures.append(future)
                self._tasks.put(replace(task, index=number))  # numbered for this worker
            if futures and self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="voxelizer-stream", daemon=True
                )
                self._thread.start()
        return futures

    def next(self, wait: bool) -> MeshTask | None:
        """The worker's TaskSource: the next task submitted (queue.Empty when none is
        ready and not `wait`); None only after close()."""
        return self._tasks.get() if wait else self._tasks.get_nowait()

    def close(self) -> None:
        """End the worker once the tasks submitted are done, and its threads."""
        with self._lock:
            thread = self._thread
            if thread is not None:
                self._tasks.put(None)
        if thread is not None:
            thread.join()
        self._worker.close()

    def _serve(self) -> None:
        try:
            for result in self._worker.run(self):
                with self._lock:
                    index, future = self._waiting.pop(result.index)
                future.set_result(replace(result, index=index))
            with self._lock:
                self._thread = None
        except BaseException as exc:  # every waiting call gets it; the next call restarts
            with self._lock:
                waiting, self._waiting = self._waiting, {}
                while True:  # tasks of the calls that just failed
                    try:
                        self._tasks.get_nowait()
                    except queue.Empty:
                        break
                self._thread = None
            for _, future in waiting.values():
                future.set_exception(exc)


def chunks_of(
    rows: list[dict[str, Any]], size: int, parts: int = 1
) -> Iterator[dict[str, list[Any]]]:
    """Rows as column batches (the form map_batches gives an actor) of `size` rows, and
    toward the end of no more than 1/`parts` of the rows left: with `parts` the chunks in
    flight at once, the last ones are small, and the actors finish together."""
    start = 0
    while start < len(rows):
        step = max(1, min(size, (len(rows) - start) // max(1, parts)))
        part = rows[start : start + step]
        start += step
        yield {name: [row[name] for row in part] for name in part[0]}


def feed_actors(
    actors: list[Any], chunks: Iterator[Any], in_flight: int = CHUNKS_IN_FLIGHT
) -> Iterator[Any]:
    """Each chunk given to an actor's `run`, every actor `in_flight` chunks ahead; the
    results as they come. A chunk whose actor dies is retried by Ray on the restarted actor
    (the actors' max_task_retries)."""
    import ray  # here, not at the top: the streaming worker above runs without Ray

    free: deque[Any] = deque(actor for _ in range(in_flight) for actor in actors)
    pending: dict[Any, Any] = {}  # ObjectRef -> its actor
    more = True
    while more or pending:
        while more and free:
            chunk = next(chunks, None)
            if chunk is None:
                more = False
                break
            actor = free.popleft()
            pending[actor.run.remote(chunk)] = actor
        if not pending:
            break
        ready, _ = ray.wait(list(pending), num_returns=1)
        for reference in ready:
            free.append(pending.pop(reference))
            yield ray.get(reference)
