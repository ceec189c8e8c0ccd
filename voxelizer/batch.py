"""Many meshes: finding them, naming their outputs, and voxelizing them as a stream.

`voxelize_many` is the one batch engine; the command line's batch mode and the Ray actors of
`voxelizer.ray` run it too. One worker is one Voxelizer fed by two thread pools: while the
device voxelizes mesh k, the loaders read, check and measure meshes k+1, k+2, ... (at most
`prefetch` ahead, so memory stays bounded), and the writers save finished results. Several
workers (`jobs`, `devices`): the first runs in this process (it starts at once), the others
are processes started with `spawn` (a fork would inherit Vulkan objects that cannot work in
the child), one Voxelizer each, fed task by task so that a fast device takes more meshes; a
worker process that dies is replaced and its meshes go to another worker.

A mesh that fails (unreadable, an output that exists, anything the voxelizer refuses) becomes
a `BatchResult` with the error, and the batch goes on. Output files are written atomically
(voxelizer.io.output), so an interrupted batch never leaves a half-written one behind.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import queue
import signal
import threading
import time
import warnings
from collections import Counter, deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait as wait_for
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict

import numpy.typing

from .api import Voxelizer, mesh_warnings, shared_voxelizer, voxel_count_label
from .budget import check_dense_fits
from .errors import DeviceError, ModeError, OutputError, VoxelizerError
from .grid import DenseGrid
from .io.mesh_files import output_paths, output_suffix
from .io.meshes import MeshLike
from .io.output import check_output_path, remove_temporaries
from .io.writers import save
from .load_processes import prepared_mesh, running_load_processes, shared_load_processes
from .log import get_logger
from .mesh import Mesh
from .options import Options
from .parallel import use_threads
from .placement import GridLike
from .svo import SVO

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess
    from multiprocessing.queues import Queue

    from typing_extensions import Unpack

_log = get_logger(__name__)

Status = Literal["done", "skipped", "failed"]


class BatchOptions(TypedDict, total=False):
    """The voxelization options of a batch (as for voxelize, without a per-call progress)."""

    variant: str
    fill_mode: str
    sort: str
    voxel_size: float | None
    bounds: numpy.typing.ArrayLike | None
    max_memory: int | str | None
    mode: str
    surface: str | None


@dataclass(frozen=True)
class BatchResult:
    """What became of one mesh of a batch.

    `status` is "done", "skipped" (its output existed and skip_existing was asked for) or
    "failed" (`error` says why, naming the input). `result` is the SVO (or DenseGrid with
    dense=True) when it is kept in memory; None when it went to `output`, or failed. The
    counts are None where the mesh was not voxelized: `solid_voxels` counts the voxels set
    (solid, surface or both, as `mode` asks), `open_columns` the grid columns whose
    surface crossings do not pair up (0 for a closed mesh; None where the fill mode does
    not count them). `seconds` is the time spent on this mesh: reading, voxelizing, writing."""

    index: int  # position in the inputs
    input: str  # the path as given, or a label for an in-memory mesh
    output: Path | None
    status: Status
    result: SVO | DenseGrid | None = None
    triangles: int | None = None
    solid_voxels: int | None = None
    open_columns: int | None = None
    seconds: float = 0.0
    error: str | None = None
    device: str = ""
    warnings: tuple[Warning, ...] = field(default=(), repr=False)

    @property
    def ok(self) -> bool:
        return self.status != "failed"

    def to_record(self) -> dict[str, Any]:
        """The JSON-lines record of `voxelize --log`: plain JSON types."""
        return {
            "input": self.input,
            "output": None if self.output is None else str(self.output),
            "status": self.status,
            "triangles": self.triangles,
            "solid_voxels": self.solid_voxels,
            "open_columns": self.open_columns,
            "seconds": round(self.seconds, 6),
            "error": self.error,
            "device": self.device,
        }


# --- one worker: a Voxelizer fed by loader and writer threads ----------------------------------


@dataclass(frozen=True)
class MeshTask:
    """One mesh to voxelize: its place in the batch, the mesh (a path, usually), how the
    results name it, its output (None: keep the result) and whether that output may be
    replaced (asked for, or left by an earlier attempt of this batch)."""

    index: int
    source: Any  # MeshLike; Any so that dataclass pickling and typing stay simple
    label: str
    output: Path | None = None
    replace: bool = False


@dataclass(frozen=True)
class BatchSettings:
    """What every worker needs, checked once, picklable for worker processes."""

    grid: GridLike | None
    options: dict[str, Any]
    dense: bool = False
    up_axis: str | None = None
    threads: int = 2
    prefetch: int = 4
    load_processes: int = 0  # helper processes reading mesh files (0: the loader threads)


class TaskSource(Protocol):
    def next(self, wait: bool) -> MeshTask | None:
        """The next task, or None when there are no more; with wait=False, queue.Empty when
        none is ready yet."""


class ListSource:
    """Tasks from an iterable: always ready."""

    def __init__(self, tasks: Iterable[MeshTask]):
        self._tasks = iter(tasks)

    def next(self, wait: bool) -> MeshTask | None:
        return next(self._tasks, None)


@dataclass
class _Loaded:
    task: MeshTask
    mesh: Mesh | None = None
    seconds: float = 0.0
    error: BaseException | None = None


HELPER_START_SECONDS = 10.0  # a batch waits this long at most for its first reading process


class MeshWorker:
    """One Voxelizer and its loader and writer threads: tasks in, BatchResults out.

    The device works in the calling thread, one mesh at a time, while up to `prefetch` later
    meshes are read and checked (their topology and bounds cached on the Mesh, so the call
    finds them done) and finished results are written, by `threads` threads each."""

    def __init__(
        self,
        voxelizer: Voxelizer | Callable[[], Voxelizer],
        settings: BatchSettings,
        on_start: Callable[[MeshTask], None] | None = None,
    ):
        """`voxelizer`, or a function that opens it: then it is opened in run(), while the
        loader threads read the first meshes."""
        self._voxelizer = voxelizer
        self.settings = settings
        self._on_start = on_start

    @property
    def voxelizer(self) -> Voxelizer:
        if not isinstance(self._voxelizer, Voxelizer):
            self._voxelizer = self._voxelizer()
        return self._voxelizer

    def run(self, source: TaskSource) -> Generator[BatchResult, None, None]:
        settings = self.settings
        loaders = ThreadPoolExecutor(settings.threads, thread_name_prefix="voxelizer-load")
        writers = ThreadPoolExecutor(settings.threads, thread_name_prefix="voxelizer-write")
        readers = (
            shared_load_processes(settings.load_processes) if settings.load_processes else None
        )
        loading: deque[tuple[MeshTask, Future[Any]]] = deque()
        writing: deque[Future[BatchResult]] = deque()
        finished = False

        def read_ahead(wait: bool) -> None:
            """Start loading tasks up to `prefetch` ahead; with `wait`, block for the first
            one when none is loading (never while one is: its results must go out)."""
            nonlocal finished
            while not finished and len(loading) <= settings.prefetch:
                try:
                    task = source.next(wait and not loading)
                except queue.Empty:
                    return
                if task is None:
                    finished = True
                    return
                if (
                    readers is not None
                    and readers.started.is_set()  # until then, the threads read
                    and isinstance(task.source, (str, os.PathLike))
                ):
                    request = readers.submit(task.source, settings.grid, self._reading_options())
                    loading.append((task, request))
                else:
                    loading.append((task, loaders.submit(self._load, task)))

        try:
            if readers is not None and readers.started.is_set():
                # Helpers already running (forked as they were started, or kept from an
                # earlier batch): they read the first meshes while the device opens.
                read_ahead(wait=True)
            elif readers is not None:
                # The device opens while the helpers start; then they read every file. (Eight
                # loader threads reading beside the device until then held back the first
                # results of a cold batch by ~0.6 s on a 16-core host.)
                self.voxelizer  # noqa: B018
                readers.wait_started(HELPER_START_SECONDS)
            read_ahead(wait=True)
            self.voxelizer  # noqa: B018 - opened (if not yet) while the first meshes load
            while loading:
                loaded = _loaded(*loading.popleft())
                read_ahead(wait=False)  # the next meshes load while this one is voxelized
                if self._on_start is not None:
                    self._on_start(loaded.task)
                outcome = self._voxelize(loaded)
                if isinstance(outcome, BatchResult):
                    yield outcome
                else:
                    writing.append(writers.submit(self._write, loaded, *outcome))
                while writing and (writing[0].done() or len(writing) > settings.prefetch):
                    yield writing.popleft().result()
                if not loading:
                    # Wait for more tasks only with every result handed over: a worker
                    # process gets more when its parent has its results.
                    while writing:
                        yield writing.popleft().result()
                    read_ahead(wait=True)
        finally:
            # Ctrl-C or an abandoned iterator: queued work is dropped, running writes finish
            # (whole files, or none).
            for _, pending in loading:
                pending.cancel()  # a reading process drops it; a thread pool's is cancelled
            loaders.shutdown(wait=True, cancel_futures=True)
            writers.shutdown(wait=True, cancel_futures=True)

    def _reading_options(self) -> dict[str, Any]:
        """The options a reading process prepares a mesh for: the variant as this worker's
        device runs it once that is open, so that the process makes the triangle soup where
        a soup variant will upload it (until then, the passes gather their own)."""
        options = self.settings.options
        if not isinstance(self._voxelizer, Voxelizer):
            return options
        return {**options, "variant": self._voxelizer.likely_variant(options["variant"])}

    def _load(self, task: MeshTask) -> _Loaded:
        started = time.perf_counter()
        try:
            mesh = prepared_mesh(task.source, self.settings.grid, self.settings.options)
        except (VoxelizerError, MemoryError) as exc:
            return _Loaded(task, None, time.perf_counter() - started, exc)
        return _Loaded(task, mesh, time.perf_counter() - started)

    def _voxelize(
        self, loaded: _Loaded
    ) -> BatchResult | tuple[SVO | DenseGrid, float, tuple[Warning, ...]]:
        """The device's part: a failed result, or (result, seconds so far, warnings)."""
        task = loaded.task
        if loaded.mesh is None:
            assert loaded.error is not None
            return self._failed(task, loaded.error, loaded.seconds)
        started = time.perf_counter()
        messages = self.voxelizer.device.validation_messages
        reported = len(messages)
        dense = self.settings.dense or (
            task.output is not None and task.output.suffix.lower() != ".svo"
        )
        call = self.voxelizer.voxelize_dense if dense else self.voxelizer.voxelize
        options = self.settings.options
        try:
            # Warnings as data, not caught through the warnings module: its catching is one
            # state for the whole process, and the caller's thread warns at the same time
            # (BatchRun, or another worker in this process). A result that goes to a file has
            # its voxels counted by the writer thread (_write), off this one's path.
            result = call(
                loaded.mesh,
                self.settings.grid,
                warn=False,
                count_voxels=task.output is None,
                **options,
            )
            if len(messages) > reported:  # only with VOXELIZER_VALIDATION=1: a bug to report
                raise DeviceError(f"vulkan validation layer: {messages[reported]}")
        except (VoxelizerError, MemoryError) as exc:
            seconds = loaded.seconds + time.perf_counter() - started
            return self._failed(task, exc, seconds)
        seconds = loaded.seconds + time.perf_counter() - started
        found = tuple(mesh_warnings(result.stats.counts, options["fill_mode"]))
        if task.output is None:
            return self._done(loaded, result, result, seconds, found)
        return result, seconds, found

    def _write(
        self,
        loaded: _Loaded,
        result: SVO | DenseGrid,
        seconds: float,
        found: tuple[Warning, ...],
    ) -> BatchResult:
        task = loaded.task
        assert task.output is not None
        started = time.perf_counter()
        try:
            # Left to this thread by _voxelize: numpy counts without the GIL, beside the device.
            label = voxel_count_label(self.settings.options["mode"])
            result.stats.counts[label] = result.count()
            task.output.parent.mkdir(parents=True, exist_ok=True)
            save(result, task.output, overwrite=task.replace, up_axis=self.settings.up_axis)
        except OSError as exc:
            error = OutputError(f"{task.output}: cannot write ({exc.strerror or exc})")
            return self._failed(task, error, seconds + time.perf_counter() - started)
        except (VoxelizerError, MemoryError) as exc:
            return self._failed(task, exc, seconds + time.perf_counter() - started)
        return self._done(loaded, result, None, seconds + time.perf_counter() - started, found)

    def _done(
        self,
        loaded: _Loaded,
        result: SVO | DenseGrid,
        kept: SVO | DenseGrid | None,
        seconds: float,
        found: tuple[Warning, ...],
    ) -> BatchResult:
        task = loaded.task
        assert loaded.mesh is not None
        counts = result.stats.counts
        return BatchResult(
            index=task.index,
            input=task.label,
            output=task.output,
            status="done",
            result=kept,
            triangles=counts.get("triangles"),
            solid_voxels=counts.get(voxel_count_label(self.settings.options["mode"])),
            open_columns=counts.get("open_columns"),  # the fill's column counts
            seconds=seconds,
            device=self.voxelizer.device_name,
            warnings=found,
        )

    def _failed(self, task: MeshTask, error: BaseException, seconds: float) -> BatchResult:
        return BatchResult(
            index=task.index,
            input=task.label,
            output=task.output,
            status="failed",
            seconds=seconds,
            error=error_text(task.label, error),
            device=self.voxelizer.device_name,
        )


def _loaded(task: MeshTask, future: Future[Any]) -> _Loaded:
    """What a loader thread (a _Loaded) or a reading process (a Mesh and its seconds) made
    of the task."""
    try:
        outcome = future.result()
    except (VoxelizerError, MemoryError) as exc:
        return _Loaded(task, None, 0.0, exc)
    if isinstance(outcome, _Loaded):
        return outcome
    mesh, seconds = outcome
    return _Loaded(task, mesh, seconds)


def error_text(label: str, error: BaseException) -> str:
    """One line naming the input: the error's own words, with the input in front unless they
    name it already; an existing output in neutral words (the API and the CLI ask for
    replacing it differently)."""
    if isinstance(error, OutputError) and error.exists:
        text = f"{error.path}: file exists"
    elif isinstance(error, MemoryError):
        text = f"out of host memory ({str(error).strip() or 'MemoryError'})"
    else:
        text = str(error).strip() or type(error).__name__
    text = text.splitlines()[0]
    return text if label in text else f"{label}: {text}"


def failed_result(task: MeshTask, error: str, device: str = "") -> BatchResult:
    return BatchResult(task.index, task.label, task.output, "failed", error=error, device=device)


# --- worker processes ---------------------------------------------------------------------------


class _QueueSource:
    """Tasks a worker process receives from its parent; None ends them."""

    def __init__(self, inbox: Queue):
        self._inbox = inbox

    def next(self, wait: bool) -> MeshTask | None:
        return self._inbox.get(block=wait)


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
        # Blocked by the parent while this process started (so that a Ctrl-C could not
        # interrupt its imports with a traceback): one sent since arrives here, handled below.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        use_threads(settings.threads)  # the workers share the cores
        if settings.load_processes:
            shared_load_processes(settings.load_processes)  # they start while the device opens
        try:
            voxelizer = Voxelizer(device)
        except VoxelizerError as exc:
            outbox.send(("failed_start", str(exc)))
            return
        outbox.send(("ready", voxelizer.device_name))
        with voxelizer:
            worker = MeshWorker(
                voxelizer, settings, on_start=lambda task: outbox.send(("start", task.index))
            )
            for result in worker.run(_QueueSource(inbox)):
                outbox.send(("result", result))
        outbox.send(("exit", None))
    except KeyboardInterrupt:
        pass  # the parent says what happened; a traceback per worker would bury it
    except (BrokenPipeError, EOFError):
        pass  # the parent is gone: nothing to tell


@dataclass
class _Handle:
    process: BaseProcess
    inbox: Queue
    messages: Connection  # the worker's pipe, read end
    device: str | int | None
    assigned: dict[int, MeshTask] = field(default_factory=dict)
    started: int | None = None  # the mesh on the device now
    ready: bool = False


# A mesh whose worker died while voxelizing it is tried once more, elsewhere; meshes that
# were only waiting in a dead worker's queue go back to the others (at most a few times).
MAX_DEVICE_ATTEMPTS = 2
MAX_REQUEUES = 4
MAX_START_FAILURES = 2  # a worker that dies before it is ready is replaced once per device
_POLL_SECONDS = 0.2


class _LocalWorker:
    """The batch's first worker, in this process on the shared Voxelizer of its device, as a
    one-device batch runs: it voxelizes at once while the spawned workers start (Python, the
    imports, their device: about a second), taking its meshes from the queue they share.
    Its results come through `results`; a byte on `wakeup` (a pipe) tells the waiting
    parent loop that some are there."""

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


def _process_results(
    tasks: list[MeshTask],
    local_device: str | int | None,
    worker_devices: list[str | int | None],
    settings: BatchSettings,
) -> Iterator[BatchResult]:
    """Run `tasks` on a worker in this process (on `local_device`) and on one spawned
    process per entry of `worker_devices`."""
    context = multiprocessing.get_context("spawn")
    handles: dict[int, _Handle] = {}
    todo = deque(tasks)
    remaining = len(tasks)
    attempts: Counter[int] = Counter()
    requeues: Counter[int] = Counter()
    start_failures: Counter[str] = Counter()  # by device
    backlog = settings.prefetch + 2  # tasks held by one worker: loading, on the device, next
    slots = iter(range(1 << 30))  # a replacement worker gets a slot of its own

    def start(device: str | int | None) -> None:
        slot = next(slots)
        inbox: Queue = context.Queue()
        reader, writer = context.Pipe(duplex=False)
        process = context.Process(
            target=worker_process_main,
            args=(slot, device, settings, inbox, writer),
            name=f"voxelizer-worker-{slot}",
            daemon=True,
        )
        with _sigint_blocked():  # the child inherits the mask; it unblocks once ready
            process.start()
        writer.close()  # the worker holds the only write end: its death ends the pipe
        handles[slot] = _Handle(process, inbox, reader, device)

    def top_up() -> None:
        held = sum(len(handle.assigned) for handle in handles.values())
        limit = worker_share(len(todo) + held, len(handles), backlog)
        for handle in handles.values():
            while handle.ready and len(handle.assigned) < limit:
                try:
                    task = todo.popleft()  # (the local worker takes from it too)
                except IndexError:
                    break
                handle.assigned[task.index] = task
                handle.inbox.put(task)

    def receive(slot: int) -> Iterator[BatchResult]:
        """Every whole message waiting in the worker's pipe; at its end (the worker died, or
        was killed part way through a message), the worker's meshes are given back."""
        handle = handles[slot]
        while True:
            try:
                if not handle.messages.poll():
                    return
                kind, payload = handle.messages.recv()
            except (EOFError, OSError):
                handle.process.join(5.0)
                yield from lost(slot)
                return
            if kind == "failed_start":
                raise DeviceError(str(payload))
            if kind == "ready":
                handle.ready = True
            elif kind == "start":
                handle.started = payload
            elif kind == "result" and handle.assigned.pop(payload.index, None) is not None:
                yield payload

    def lost(slot: int) -> Iterator[BatchResult]:
        """The meshes of a worker that died: retried, or failed when tried enough."""
        handle = handles.pop(slot)
        handle.messages.close()
        handle.inbox.cancel_join_thread()  # tasks no one will read: exiting must not wait
        code = handle.process.exitcode
        if not handle.ready:  # it held no meshes; a device that never opens ends the batch
            start_failures[str(handle.device)] += 1
            if start_failures[str(handle.device)] >= MAX_START_FAILURES:
                raise DeviceError(
                    f"the worker for device {handle.device} exited with code {code} before it "
                    f"was ready ({MAX_START_FAILURES} times; a script that starts workers needs "
                    '`if __name__ == "__main__":` around its code, as multiprocessing\'s '
                    "spawn does)"
                )
            _log.warning("worker %d (device %s) died while starting", slot, handle.device)
            start(handle.device)
            return
        _log.warning("worker %d (device %s) died with exit code %s", slot, handle.device, code)
        for index, task in handle.assigned.items():
            if task.output is not None:  # a write the kill cut short: no one else writes it
                remove_temporaries(task.output)
            requeues[index] += 1
            if index == handle.started:
                attempts[index] += 1
            if attempts[index] >= MAX_DEVICE_ATTEMPTS or requeues[index] > MAX_REQUEUES:
                yield failed_result(
                    task, f"{task.label}: the worker process died (exit code {code}) on it"
                )
                continue
            # Its output, if the dead worker wrote it, is whole (atomic writes): replace it.
            todo.appendleft(replace(task, replace=True) if task.output else task)
        if todo or any(h.assigned for h in handles.values()):
            start(handle.device)

    interrupted = True
    here: _LocalWorker | None = None
    try:
        if settings.load_processes:
            # the local worker's helpers, before any thread here (a process's queue feeder,
            # the worker's own): then they may be forked, ready at once
            shared_load_processes(settings.load_processes)
        for device in worker_devices:
            start(device)
        here = _LocalWorker(local_device, settings, todo)
        while remaining:
            top_up()
            ready = wait_for(
                [h.messages for h in handles.values()]
                + [h.process.sentinel for h in handles.values()]
                + [here.wakeup],
                timeout=_POLL_SECONDS,
            )
            if here.wakeup in ready:
                for item in here.take():
                    if isinstance(item, BaseException):
                        raise item
                    if item is not None:
                        remaining -= 1
                        yield item
            # A worker that ended: its pipe says so (after its last whole messages).
            ended = {h.process.sentinel for h in handles.values()} & set(ready)
            for slot in list(handles):
                handle = handles[slot]
                if handle.messages in ready or handle.process.sentinel in ended:
                    for result in receive(slot):
                        remaining -= 1
                        yield result
        interrupted = False
    finally:
        if here is not None:
            here.stop()
        _stop(list(handles.values()), interrupted)
        if here is not None:
            here.join()


def worker_share(outstanding: int, workers: int, backlog: int) -> int:
    """The most meshes one worker may hold: its backlog, but no more than its fair part of
    the meshes not yet done, so that the worker ready first does not take a small batch's
    meshes from the ones still starting (and the last meshes are spread at the end)."""
    return max(1, min(backlog, -(-outstanding // max(1, workers))))


@contextmanager
def _sigint_blocked() -> Iterator[None]:
    """SIGINT held back (not lost) while a worker is spawned: the child inherits the blocked
    mask through exec, so a Ctrl-C reaches it only once its own code can handle it."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _stop(handles: list[_Handle], interrupted: bool) -> None:
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


# --- voxelize_many ------------------------------------------------------------------------------


def default_threads(workers: int = 1) -> int:
    """Loader (and writer) threads per worker: enough to keep a fast GPU fed from numpy
    work that releases the GIL, not more than each worker's part of the cores."""
    return max(1, min(8, (os.cpu_count() or 1) // max(1, workers)))


def default_load_processes(workers: int = 1) -> int:
    """Reading processes per worker: where the host has cores to spare (8 or more), half
    of each worker's part of them, up to 8; else none (the loader threads read)."""
    cores = os.cpu_count() or 1
    if cores < 8:
        return 0
    share = cores // 2 // max(1, workers)
    return min(8, share) if share >= 2 else 0


def device_list(devices: Sequence[str | int] | str | int | None) -> list[str | int | None]:
    """None, one selector, a sequence, or text "0,1" -> selectors, one per device."""
    if devices is None:
        return [None]
    if isinstance(devices, int):
        return [devices]
    if isinstance(devices, str):
        items = [item.strip() for item in devices.split(",")]
        if not all(items):
            raise DeviceError(f"devices {devices!r}: write indices or names separated by commas")
        return [int(item) if item.isdigit() else item for item in items]
    chosen: list[str | int | None] = list(devices)
    if not chosen:
        raise DeviceError("devices: an empty list")
    return chosen


class BatchRun(Iterator[BatchResult]):
    """The results of voxelize_many as they complete. `total` is the number of results it
    will give. Closing it (or leaving a `with` block, or Ctrl-C) stops the workers: queued
    meshes are dropped, files being written appear whole or not at all."""

    def __init__(self, results: Iterator[BatchResult], total: int):
        self._results = results
        self.total = total

    def __next__(self) -> BatchResult:
        result = next(self._results)
        for warning in result.warnings:  # in the caller's thread, naming the mesh
            warnings.warn(type(warning)(f"{result.input}: {warning}"), stacklevel=2)
        return result

    def close(self) -> None:
        close = getattr(self._results, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> BatchRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def voxelize_many(
    inputs: Iterable[MeshLike],
    *,
    grid: GridLike | None = None,
    devices: Sequence[str | int] | str | int | None = None,
    jobs: int | None = None,
    out_dir: str | os.PathLike | None = None,
    format: str = "svo",
    root: str | os.PathLike | None = None,
    dense: bool = False,
    overwrite: bool = False,
    skip_existing: bool = False,
    up_axis: str | None = None,
    threads: int | None = None,
    prefetch: int | None = None,
    load_processes: int | None = None,
    **options: Unpack[BatchOptions],
) -> BatchRun:
    """Voxelize many meshes; results (BatchResult) come as they complete, failures included.

    inputs: mesh files (or anything voxelize takes). grid and options: as for voxelize, the
    same for every mesh, checked here before any work. Results equal those of voxelize
    (voxelize_dense with dense=True) bit for bit.

    devices: one selector, several ("0,1" or [0, 1]) or None (the default device); jobs:
    how many workers (default one per device; several may share a device). One worker runs
    in this process on the shared Voxelizer of its device; more run in spawned processes.

    out_dir: write each result there instead of keeping it, as `format` (svo, npz, binvox,
    vox, vti, ply, obj, glb), mirroring the inputs' paths below `root` (default: their
    deepest common folder; in-memory meshes are named by index). An existing output is a
    failed mesh unless overwrite (replace it) or skip_existing (a "skipped" result).
    threads: loader and writer threads per worker; prefetch: meshes read ahead per worker;
    load_processes: helper processes per worker that read mesh files (None: some where the
    host has 8 cores or more, see default_load_processes; 0: the loader threads read them).
    """
    if "progress" in options:
        raise TypeError(
            "voxelize_many takes no progress callback: its results come as they complete"
        )
    if "attributes" in options:
        raise TypeError("voxelize_many keeps no attributes: call voxelize_dense for face ids")
    checked = Options.create(grid, **options)  # every option, before any work
    if overwrite and skip_existing:
        raise OutputError("overwrite and skip_existing exclude each other")
    selectors = device_list(devices)
    workers = len(selectors) if jobs is None else int(jobs)
    if workers < 1:
        raise DeviceError(f"jobs must be at least 1, not {jobs}")
    threads = default_threads(workers) if threads is None else max(1, int(threads))
    prefetch = 2 * threads if prefetch is None else max(1, int(prefetch))
    tasks = plan_tasks(list(inputs), out_dir, format, root, overwrite)
    if load_processes is None:
        load_processes = default_load_processes(workers)
        if len(tasks) < 2 * load_processes and running_load_processes() < load_processes:
            load_processes = 0  # a few meshes: starting the helpers would cost more
    elif load_processes < 0:
        raise VoxelizerError(f"load_processes must be 0 or more, not {load_processes}")
    suffix = output_suffix(format) if out_dir is not None else None
    if up_axis is not None and suffix != ".vox":
        raise OutputError("up_axis is for .vox outputs (format='vox') only")
    if out_dir is not None:
        make_out_dir(Path(out_dir))
        if suffix != ".svo" and checked.shape is not None:
            check_dense_fits(checked.shape, f"format {format!r}")
    elif dense and checked.shape is not None:
        check_dense_fits(checked.shape, "voxelize_many(dense=True)")
    settings = BatchSettings(
        grid=checked.shape,
        options=options_of(checked),
        dense=dense,
        up_axis=up_axis,
        threads=threads,
        prefetch=max(prefetch, load_processes + 2),
        load_processes=int(load_processes),
    )
    skipped = [t for t in tasks if skip_existing and t.output and os.path.lexists(t.output)]
    todo = [t for t in tasks if not (skip_existing and t.output and os.path.lexists(t.output))]
    worker_devices = [selectors[slot % len(selectors)] for slot in range(workers)]
    return BatchRun(_results(skipped, todo, worker_devices, settings), len(tasks))


def options_of(options: Options) -> dict[str, Any]:
    """The checked options again as keywords of a voxelize call (picklable); ModeError for
    labels and colours, which a batch's files do not keep."""
    if options.labels or options.colors:
        raise ModeError(
            "a batch keeps no labels or colours: voxelize each mesh with voxelize_dense "
            "or voxelize (labels=True, colors=True)"
        )
    return {
        "variant": options.variant,
        "fill_mode": options.fill_mode,
        "sort": options.sort,
        "voxel_size": options.voxel_size,
        "bounds": None if options.bounds is None else options.bounds.tolist(),
        "max_memory": options.max_memory,
        "mode": options.mode,
        "surface": options.surface,
    }


def plan_tasks(
    inputs: list[MeshLike],
    out_dir: str | os.PathLike | None,
    format: str,
    root: str | os.PathLike | None,
    overwrite: bool,
) -> list[MeshTask]:
    """One task per input: its label and, with out_dir, its output path."""
    labels = [
        os.fspath(item) if isinstance(item, (str, os.PathLike)) else f"<{type(item).__name__} #{i}>"
        for i, item in enumerate(inputs)
    ]
    if out_dir is None:
        return [MeshTask(i, item, labels[i]) for i, item in enumerate(inputs)]
    suffix = output_suffix(format)
    files = [
        (i, Path(item)) for i, item in enumerate(inputs) if isinstance(item, (str, os.PathLike))
    ]
    named = output_paths(
        [path for _, path in files], out_dir, suffix, None if root is None else Path(root)
    ) if files else []  # fmt: skip
    outputs = {i: output for (i, _), output in zip(files, named)}
    width = len(str(max(len(inputs) - 1, 0)))
    return [
        MeshTask(
            i,
            item,
            labels[i],
            outputs.get(i, Path(out_dir) / f"mesh{i:0{width}d}{suffix}"),
            overwrite,
        )
        for i, item in enumerate(inputs)
    ]


def make_out_dir(out_dir: Path) -> None:
    """Create the output folder (and its parents); OutputError if it cannot be."""
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputError(f"{out_dir}: the output folder is a file", path=out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{out_dir}: cannot create ({exc.strerror or exc})") from exc
    check_output_path(out_dir / ".voxelizer-write-check", overwrite=True)


def _results(
    skipped: list[MeshTask],
    todo: list[MeshTask],
    worker_devices: list[str | int | None],
    settings: BatchSettings,
) -> Iterator[BatchResult]:
    for task in skipped:
        yield BatchResult(task.index, task.label, task.output, "skipped")
    if not todo:
        return
    if len(worker_devices) == 1:
        worker = MeshWorker(functools.partial(shared_voxelizer, worker_devices[0]), settings)
        yield from worker.run(ListSource(todo))
    else:  # the first worker here, the others spawned
        yield from _process_results(todo, worker_devices[0], worker_devices[1:], settings)
