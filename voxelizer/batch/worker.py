"""One worker of a batch: a Voxelizer fed by loader and writer threads.

While the device voxelizes mesh k, the loaders (or the reading processes of
voxelizer.batch.readers) read, check and measure meshes k+1, k+2, ... (at most `prefetch`
ahead, so memory stays bounded), and the writers save finished results. The same worker runs
in the batch's own process, in its worker processes (voxelizer.batch.pool) and in each Ray
actor (voxelizer.batch.ray).
"""

from __future__ import annotations

import os
import queue
import time
from collections import deque
from collections.abc import Callable, Generator
from concurrent.futures import FIRST_COMPLETED, CancelledError, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from dataclasses import dataclass, replace
from typing import Any

from ..api import Voxelizer, mesh_warnings, voxel_count_label, voxelize_checked
from ..errors import DeviceError, VoxelizerError
from ..grid import DenseGrid
from ..interrupts import interrupts_deferred
from ..mesh import Mesh
from ..options import Options
from ..placement import lattice_shift
from ..svo import SVO
from ..thin import thin_warning
from .readers import prepared_mesh, shared_load_processes
from .tasks import BatchResult, BatchSettings, MeshTask, TaskSource, error_text
from .timeline import timeline
from .write_processes import WriteJob, WriteProcesses, shared_write_processes, write_output


@dataclass
class Loaded:
    """A task's mesh as read (or the error reading it raised), and the seconds it took."""

    task: MeshTask
    mesh: Mesh | None = None
    seconds: float = 0.0
    error: BaseException | None = None


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
        *,
        keep_threads: bool = False,
    ):
        """`voxelizer`, or a function that opens it: then it is opened in run(), while the
        loader threads read the first meshes. With `keep_threads`, the loader and writer
        threads stay from one run to the next until close() (a Ray actor's batches: each
        map_batches call finds them started); else each run ends them."""
        self._voxelizer = voxelizer
        self.settings = settings
        self._on_start = on_start
        self._keep_threads = keep_threads
        self._pools: tuple[ThreadPoolExecutor, ThreadPoolExecutor] | None = None
        self._writing_processes: WriteProcesses | None = None
        # The last reading options made (the batch's options, the variant, those options):
        # one object for every mesh, which a reading process's thread pickles once.
        self._reading: tuple[Options, str, Options] | None = None

    @property
    def voxelizer(self) -> Voxelizer:
        if not isinstance(self._voxelizer, Voxelizer):
            self._voxelizer = self._voxelizer()
        return self._voxelizer

    def close(self) -> None:
        """End the loader and writer threads (running writes finish)."""
        pools, self._pools = self._pools, None
        for pool in pools or ():
            pool.shutdown(wait=True, cancel_futures=True)

    def _thread_pools(self) -> tuple[ThreadPoolExecutor, ThreadPoolExecutor]:
        if self._pools is None:
            threads = self.settings.threads
            self._pools = (
                ThreadPoolExecutor(threads, thread_name_prefix="voxelizer-load"),
                ThreadPoolExecutor(threads, thread_name_prefix="voxelizer-write"),
            )
        return self._pools

    def run(self, source: TaskSource) -> Generator[BatchResult, None, None]:
        settings = self.settings
        # The writing processes first: forked before the reading processes and any thread.
        self._writing_processes = (
            shared_write_processes(settings.write_processes) if settings.write_processes else None
        )
        loaders, writers = self._thread_pools()
        readers = (
            shared_load_processes(settings.load_processes) if settings.load_processes else None
        )
        loading: deque[tuple[MeshTask, Future[Any]]] = deque()
        writing: deque[Future[BatchResult]] = deque()
        finisher = Finisher(settings, lambda: self.voxelizer)
        handed = HandedWrites(finisher, self._writing_processes, writers)
        finished = False
        on_threads: set[Future[Any]] = set()  # loads given to the threads as helpers start

        def read_ahead(wait: bool) -> None:
            """Start loading tasks up to `prefetch` ahead; with `wait`, block for the first
            one when none is loading (never while one is: its results must go out). While
            the reading processes start, the loader threads read (as many at a time as there
            are threads): the device never waits for the processes, only for a mesh."""
            nonlocal finished
            while not finished and len(loading) <= settings.prefetch:
                starting = readers is not None and readers.starting
                if starting and len(on_threads) >= settings.threads and loading:
                    return  # the rest for the processes, once one has started
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
                    loading.append((task, readers.submit(task.source, self._reading_options())))
                else:
                    loading.append((task, loaders.submit(self._load, task)))
                    if starting:
                        on_threads.add(loading[-1][1])

        try:
            # The first meshes load while the device opens: on the reading processes where
            # they run (forked as they were started, or kept from an earlier batch), else on
            # the loader threads while the processes start.
            read_ahead(wait=True)
            # Opened (if not yet) while the first meshes load. The thread that opened it
            # marks it too, but may run after this one is released: whichever comes first.
            timeline.mark("device open", self.voxelizer.device_name)
            while loading:
                task, future = first_ready(loading)
                on_threads.discard(future)
                loaded = loaded_from(task, future)
                read_ahead(wait=False)  # the next meshes load while this one is voxelized
                if self._on_start is not None:
                    self._on_start(loaded.task)
                outcome = self._voxelize(loaded, finisher)
                if isinstance(outcome, BatchResult):
                    yield outcome
                elif handed.processes is not None:  # straight to a process: no thread between
                    writing.append(handed.hand_over(loaded, *outcome))
                else:
                    writing.append(writers.submit(finisher.write, loaded, *outcome))
                while writing and (writing[0].done() or len(writing) > settings.prefetch):
                    yield writing.popleft().result()
                if not loading:
                    # Wait for more tasks only with every result handed over: a worker
                    # process gets more when its parent has its results.
                    while writing:
                        yield writing.popleft().result()
                    read_ahead(wait=True)
        finally:
            self._end_run(loading, writing, handed)

    def _end_run(
        self,
        loading: deque[tuple[MeshTask, Future[Any]]],
        writing: deque[Future[BatchResult]],
        handed: HandedWrites,
    ) -> None:
        """Ctrl-C or an abandoned iterator: queued work is dropped, running writes finish
        (whole files, or none)."""
        for _, pending in loading:
            pending.cancel()  # a reading process drops it; a thread pool's is cancelled
        handed.stop()
        if self._keep_threads:  # as the shutdown below, for this run's writes only
            for write in writing:
                write.cancel()
            wait_for(writing)  # (a read under way ends on its own; its mesh is dropped)
        else:
            self.close()

    def _reading_options(self) -> Options:
        """The options a reading process or a loader thread prepares a mesh for: the variant
        as this worker's device runs it once that is open, so that the triangle soup is made
        there where a soup variant will upload it (until then, the passes gather their own)."""
        options = self.settings.options
        if not isinstance(self._voxelizer, Voxelizer):
            return options
        variant = self._voxelizer.likely_variant(options.variant)
        reading = self._reading
        if reading is None or reading[0] is not options or reading[1] != variant:
            reading = self._reading = (options, variant, replace(options, variant=variant))
        return reading[2]

    def _load(self, task: MeshTask) -> Loaded:
        started = time.perf_counter()
        try:
            mesh = prepared_mesh(task.source, self._reading_options(), make_soup=True)
        except (VoxelizerError, MemoryError) as exc:
            return Loaded(task, seconds=time.perf_counter() - started, error=exc)
        return Loaded(task, mesh, seconds=time.perf_counter() - started)

    def _voxelize(
        self, loaded: Loaded, finisher: Finisher
    ) -> BatchResult | tuple[SVO | DenseGrid, float, tuple[Warning, ...]]:
        """The device's part: a failed result, or (result, seconds so far, warnings)."""
        timeline.mark("first mesh at the device")
        task = loaded.task
        if loaded.mesh is None:
            assert loaded.error is not None
            return finisher.failed(task, loaded.error, loaded.seconds)
        started = time.perf_counter()
        messages = self.voxelizer.device.validation_messages
        reported = len(messages)
        # A result kept in memory is what the batch asks for; a file's, what its format needs.
        dense = self.settings.dense if task.format is None else task.format.dense
        options = self.settings.options
        try:
            # Warnings as data, not caught through the warnings module: its catching is one
            # state for the whole process, and the caller's thread warns at the same time
            # (BatchRun, or another worker in this process). A result that goes to a file has
            # its voxels counted by the writer thread (Finisher.write), off this one's path. The
            # options were checked once for the batch (voxelize_checked: not per mesh).
            result = voxelize_checked(
                self.voxelizer, loaded.mesh, options, dense=dense, count_voxels=task.output is None
            )
            if len(messages) > reported:  # only with VOXELIZER_VALIDATION=1: a bug to report
                raise DeviceError(f"vulkan validation layer: {messages[reported]}")
        except (VoxelizerError, MemoryError) as exc:
            seconds = loaded.seconds + time.perf_counter() - started
            return finisher.failed(task, exc, seconds)
        seconds = loaded.seconds + time.perf_counter() - started
        found = tuple(mesh_warnings(result.stats.counts, options.fill_mode, options.mode))
        if task.output is None:
            return finisher.done(loaded, result, kept=result, seconds=seconds, found=found)
        return result, seconds, found


def first_ready(loading: deque[tuple[MeshTask, Future[Any]]]) -> tuple[MeshTask, Future[Any]]:
    """Take the first task of `loading` whose mesh is read (waiting for one if none is).

    Meshes go to the device as they are ready, not in the order of the tasks: one slow file
    (a large OBJ) would otherwise keep the device waiting while the meshes read after it
    lie ready, and the readers idle once the window of `prefetch` tasks is full."""
    ready = next((i for i, (_, future) in enumerate(loading) if future.done()), None)
    if ready is None:
        wait_for([future for _, future in loading], return_when=FIRST_COMPLETED)
        ready = next(i for i, (_, future) in enumerate(loading) if future.done())
    taken = loading[ready]
    del loading[ready]
    return taken


def loaded_from(task: MeshTask, future: Future[Any]) -> Loaded:
    """What a loader thread (a Loaded) or a reading process (a Mesh and its seconds) made
    of the task."""
    try:
        outcome = future.result()
    except (VoxelizerError, MemoryError) as exc:
        return Loaded(task, error=exc)
    if isinstance(outcome, Loaded):
        return outcome
    mesh, seconds = outcome
    return Loaded(task, mesh, seconds=seconds)


class Finisher:
    """How a run's results end as BatchResults, off the device's part: done or failed, their
    voxels counted and checked for thinness, their files written by a writer thread
    (`write`) or by a writing process (`write_job`, through HandedWrites). `voxelizer` gives
    the worker's Voxelizer, which the run opens while its first meshes load."""

    def __init__(self, settings: BatchSettings, voxelizer: Callable[[], Voxelizer]):
        self._settings = settings
        self._voxelizer = voxelizer
        self.count_label = voxel_count_label(settings.options.mode)  # the voxels' key in counts

    def write(
        self,
        loaded: Loaded,
        result: SVO | DenseGrid,
        seconds: float,
        found: tuple[Warning, ...],
    ) -> BatchResult:
        """On a writer thread: the voxels counted, the thin check, the file written."""
        timeline.mark("first result to the writers")
        task = loaded.task
        assert task.output is not None and task.format is not None
        started = time.perf_counter()
        try:
            # Left to this thread by _voxelize: numpy counts without the GIL, beside the device.
            result.stats.counts[self.count_label] = result.count()
            found += self.thin(loaded, result)
            write_output(
                result,
                task.output,
                task.format,
                replace=task.replace,
                up_axis=self._settings.up_axis,
            )
        except (VoxelizerError, MemoryError) as exc:
            return self.failed(task, exc, seconds + time.perf_counter() - started)
        seconds += time.perf_counter() - started
        return self.done(loaded, result, kept=None, seconds=seconds, found=found)

    def write_job(self, loaded: Loaded, result: SVO | DenseGrid) -> WriteJob:
        """The job of a result for a writing process, which counts its voxels, makes the
        host's part of the thin check and writes the file (a result that may be thin comes
        back unwritten: its surface pass needs the device)."""
        task = loaded.task
        assert task.output is not None and task.format is not None and loaded.mesh is not None
        thin_areas = None
        if self._settings.options.mode == "solid" and not lattice_shift(result.placement.shape):
            thin_areas = loaded.mesh.axis_areas  # (voxelizer.thin: as count_thin_surface)
        return WriteJob.of(
            result,
            task.output,
            task.format,
            replace=task.replace,
            up_axis=self._settings.up_axis,
            count=True,
            thin_areas=thin_areas,
        )

    def thin(self, loaded: Loaded, result: SVO | DenseGrid) -> tuple[Warning, ...]:
        """The ThinResultWarning of a result counted on this thread (voxelizer.thin; the
        surface pass runs, through the Voxelizer's lock, only for a result that may be thin)."""
        assert loaded.mesh is not None
        self._voxelizer().count_thin_surface(loaded.mesh, result, self._settings.options)
        return self.thin_warning(result)

    def thin_warning(self, result: SVO | DenseGrid) -> tuple[Warning, ...]:
        options = self._settings.options
        warning = thin_warning(result.stats.counts, options.mode, options.fill_mode)
        return () if warning is None else (warning,)

    def done(
        self,
        loaded: Loaded,
        result: SVO | DenseGrid,
        *,
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
            solid_voxels=counts.get(self.count_label),
            open_columns=counts.get("open_columns"),  # the fill's column counts
            seconds=seconds,
            device=self._voxelizer().device_name,
            warnings=found,
            origin=tuple(result.origin.tolist()),  # (floats; one copy of the origin)
            voxel_size=result.voxel_size,
        )

    def failed(self, task: MeshTask, error: BaseException, seconds: float) -> BatchResult:
        return task.failed(
            error_text(task.label, error), device=self._voxelizer().device_name, seconds=seconds
        )


@dataclass
class _Handed:
    """One result handed to a writing process, and what its BatchResult needs."""

    done: Future[BatchResult]  # what the run yields
    loaded: Loaded
    result: SVO | DenseGrid
    job: WriteJob
    seconds: float
    found: tuple[Warning, ...]
    started: float


class HandedWrites:
    """The results a run hands straight to its writing processes, with no writer thread
    between: the thread that receives a process's reply (voxelizer.batch.helper_processes)
    finishes the BatchResult. Only a result that may be thin goes on on a writer thread: its
    surface pass needs the device, then the file goes to a process again. stop() drops the
    writes not yet sent to a process and waits for the others (whole files, or none)."""

    def __init__(
        self, finisher: Finisher, processes: WriteProcesses | None, threads: ThreadPoolExecutor
    ):
        self.processes = processes
        self._finisher = finisher
        self._threads = threads
        self._pending: dict[Future[BatchResult], Future[Any]] = {}  # a result's, its job's

    def hand_over(
        self, loaded: Loaded, result: SVO | DenseGrid, seconds: float, found: tuple[Warning, ...]
    ) -> Future[BatchResult]:
        """The future of the BatchResult of a result to write (Finisher.write's)."""
        timeline.mark("first result to the writers")
        assert self.processes is not None
        done: Future[BatchResult] = Future()
        done.set_running_or_notify_cancel()  # ended by its write only: stop() waits for it
        started = time.perf_counter()
        job = self._finisher.write_job(loaded, result)
        handed = _Handed(done, loaded, result, job, seconds, found, started)
        # Queued and known to stop() together: a Ctrl-C between the two would leave a write
        # that stop() does not wait for, its file half written as the command exits.
        with interrupts_deferred():
            written = self.processes.submit(job)
            self._pending[done] = written
            done.add_done_callback(self._forget)
            written.add_done_callback(
                lambda future: self._settle(handed, lambda: self._counted(handed, future))
            )
        return done

    def stop(self) -> None:
        """Drop the writes not yet sent to a process; wait for the others."""
        pending = self._pending.copy()
        for written in pending.values():
            written.cancel()  # a write sent already goes on
        wait_for(pending)

    def _forget(self, done: Future[BatchResult]) -> None:
        self._pending.pop(done, None)

    def _counted(self, handed: _Handed, written: Future[Any]) -> tuple[Warning, ...] | None:
        """The writer's answer (the voxels counted, the file written unless it may be thin):
        the thin warning, or None where the result goes on on a writer thread."""
        if written.cancelled():  # dropped by stop(): never sent to a process
            raise CancelledError
        counted = written.result()
        assert counted is not None
        result = handed.result
        result.stats.counts[self._finisher.count_label] = counted.voxels
        if counted.written:  # plainly not thin: no surface pass (count_thin_surface's test)
            return self._finisher.thin_warning(result)
        self._threads.submit(self._settle, handed, lambda: self._thin_write(handed))
        return None

    def _thin_write(self, handed: _Handed) -> tuple[Warning, ...]:
        """On a writer thread: the surface pass of a result that may be thin (through the
        Voxelizer's lock), then its file written by a process. The thin warning, if any."""
        assert self.processes is not None
        found = self._finisher.thin(handed.loaded, handed.result)
        self.processes.submit(replace(handed.job, count=False, thin_areas=None)).result()
        return found

    def _settle(self, handed: _Handed, step: Callable[[], tuple[Warning, ...] | None]) -> None:
        """Finish `handed` after `step` (its warnings; None: a writer thread finishes it):
        a failed result for a VoxelizerError or MemoryError, as Finisher.write's; any
        other error raised where the run takes the result."""
        finisher, done = self._finisher, handed.done
        try:
            try:
                found = step()
            except (VoxelizerError, MemoryError) as exc:
                seconds = handed.seconds + time.perf_counter() - handed.started
                done.set_result(finisher.failed(handed.loaded.task, exc, seconds))
                return
            if found is not None:
                seconds = handed.seconds + time.perf_counter() - handed.started
                found = handed.found + found
                done.set_result(
                    finisher.done(
                        handed.loaded, handed.result, kept=None, seconds=seconds, found=found
                    )
                )
        except BaseException as exc:  # whatever it is, the run raises it
            done.set_exception(exc)
