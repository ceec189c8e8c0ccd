"""Many meshes voxelized as a stream: `voxelize_many`, the one batch engine; the command
line's batch mode and the Ray actors of voxelizer.batch.ray run its worker too.

One worker (voxelizer.batch.worker) is one Voxelizer fed by loader and writer threads.
Several workers (`jobs`, `devices`): the first runs in this process (it starts at once), the
others in processes of their own, forked where that is safe, else spawned
(voxelizer.batch.pool); a worker process that dies is replaced and its meshes go to another
worker.

A mesh that fails (unreadable, an output that exists, anything the voxelizer refuses) becomes
a `BatchResult` with the error, and the batch goes on. Output files are written atomically
(voxelizer.io.output), so an interrupted batch never leaves a half-written one behind.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..api import shared_voxelizer
from ..budget import check_dense_fits
from ..errors import ArgumentError, DeviceError, OutputError, VoxelizerError
from ..io.meshes import MeshLike
from ..io.output import remove_stale_temporaries, sync_folders
from ..io.writers import OutputFormat
from ..options import BatchOptions, Options, option_keywords
from ..placement import GridLike
from ..shards import (
    ShardFormat,
    check_shard_shape,
    is_shard_format,
    open_store,
    recorded,
    shard_outputs,
)
from .helper_processes import fork_allowed
from .readers import read_ahead, running_load_processes
from .shared_meshes import shared_memory_available
from .tasks import (
    DEFAULT_FORMAT,
    BatchPlan,
    BatchResult,
    BatchSettings,
    ListSource,
    MeshTask,
    make_out_dir,
    plan_tasks,
)
from .timeline import timeline
from .worker import MeshWorker
from .write_processes import default_write_processes, running_write_processes

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["BatchResult", "BatchRun", "voxelize_many", "voxelize_planned"]


MAX_LOAD_PROCESSES = 32  # reading processes per worker at most (default_load_processes)


def default_threads(workers: int = 1) -> int:
    """Loader (and writer) threads per worker: enough to keep a fast GPU fed from numpy
    work that releases the GIL, not more than each worker's part of the cores."""
    return max(1, min(8, (os.cpu_count() or 1) // max(1, workers)))


def default_load_processes(workers: int = 1) -> int:
    """Reading processes per worker: where the host has cores to spare (8 or more), all its
    cores but two, split over the workers, up to MAX_LOAD_PROCESSES each; else none (the
    loader threads read).

    The two cores left are the batch's own: its device thread and its writing. The rest go
    to parsing, which is what bounds a batch's rate once a mesh costs the batch's process
    next to nothing to receive (its arrays arrive in shared memory: batch/shared_meshes.py),
    and which scales with the processes up to the cores. Where meshes come pickled through
    the pipes instead (a system without shared memory), receiving them is the batch's
    process's work, under the GIL its device thread needs: there, half the cores, up to 8.
    The cap: past it, more processes only hold more memory (each its Python and a mesh or
    two), since they would read faster than a device takes meshes."""
    cores = os.cpu_count() or 1
    if cores < 8:
        return 0
    workers = max(1, workers)
    if shared_memory_available():
        share, cap = (cores - 2) // workers, MAX_LOAD_PROCESSES
    else:
        share, cap = cores // 2 // workers, 8
    return min(cap, share) if share >= 2 else 0


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


@option_keywords(BatchOptions)
def voxelize_many(
    inputs: Iterable[MeshLike],
    *,
    grid: GridLike | None = None,
    devices: Sequence[str | int] | str | int | None = None,
    jobs: int | None = None,
    out_dir: str | os.PathLike | None = None,
    format: str | OutputFormat = DEFAULT_FORMAT,
    root: str | os.PathLike | None = None,
    dense: bool = False,
    overwrite: bool = False,
    skip_existing: bool = False,
    up_axis: str | None = None,
    threads: int | None = None,
    prefetch: int | None = None,
    load_processes: int | None = None,
    write_processes: int | bool | None = None,
    **options: Unpack[BatchOptions],
) -> BatchRun:
    """Voxelize many meshes; results (BatchResult) come as they complete, failures included.

    inputs: mesh files (or anything voxelize takes). grid and options: as for voxelize, the
    same for every mesh, checked here before any work. Results equal those of voxelize
    (voxelize_dense with dense=True) bit for bit.

    devices: one selector, several ("0,1" or [0, 1]) or None (the default device); jobs:
    how many workers (default one per device; several may share a device). One worker runs
    in this process on the shared Voxelizer of its device; more run in processes of their
    own, forked from this one where no Vulkan instance or other thread exists yet, else
    spawned.
    out_dir: write each result there instead of keeping it, as `format` (svo, the default,
    npz, binvox, vox, vti, ply, obj, glb), mirroring the inputs' paths below `root` (default:
    their deepest common folder; in-memory meshes are named by index). An existing output is
    a failed mesh unless overwrite (replace it) or skip_existing (a "skipped" result).
    threads: loader and writer threads per worker; prefetch: meshes read ahead per worker;
    load_processes: helper processes per worker that read mesh files (None: some where the
    host has 8 cores or more, see default_load_processes; 0: the loader threads read them).
    write_processes: likewise, helpers writing the files (default_write_processes; 0: threads).
    """
    _refuse_call_options(options)
    checked = Options.create(grid, **options)  # every option, before any work
    if overwrite and skip_existing:
        raise OutputError("overwrite and skip_existing exclude each other")
    workers = _Workers.asked(devices, jobs, threads, prefetch)
    inputs = list(inputs)
    if out_dir is not None and is_shard_format(format):
        return _shard_run(
            inputs, out_dir, checked, workers, dense=dense, load_processes=load_processes,
            overwrite=overwrite, skip_existing=skip_existing,
        )  # fmt: skip
    output_format = OutputFormat.named(format)
    tasks = plan_tasks(
        inputs, out_dir=out_dir, format=output_format, root=root, overwrite=overwrite
    )
    planned = BatchPlan(tuple(tasks), Path(out_dir), output_format) if out_dir is not None else None
    return _planned_run(
        tasks, planned, checked, workers, dense=dense, skip_existing=skip_existing,
        up_axis=up_axis, load_processes=load_processes, write_processes=write_processes,
    )  # fmt: skip


@option_keywords(BatchOptions)
def voxelize_planned(
    plan: BatchPlan,
    *,
    grid: GridLike | None = None,
    devices: Sequence[str | int] | str | int | None = None,
    jobs: int | None = None,
    skip_existing: bool = False,
    up_axis: str | None = None,
    **options: Unpack[BatchOptions],
) -> BatchRun:
    """voxelize_many(..., out_dir=plan.out_dir, format=plan.format) over a plan made and
    checked already (the command's: it checks every path before any work), without
    planning the outputs again; the rest as voxelize_many."""
    _refuse_call_options(options)
    checked = Options.create(grid, **options)
    workers = _Workers.asked(devices, jobs, threads=None, prefetch=None)
    return _planned_run(
        list(plan.tasks), plan, checked, workers, dense=False, skip_existing=skip_existing,
        up_axis=up_axis, load_processes=None, write_processes=None,
    )  # fmt: skip


@dataclass(frozen=True)
class _Workers:
    """The workers a batch asks for: their devices' selectors, how many, and each one's
    loader threads and read-ahead."""

    selectors: list[str | int | None]
    count: int
    threads: int
    prefetch: int

    @classmethod
    def asked(
        cls,
        devices: Sequence[str | int] | str | int | None,
        jobs: int | None,
        threads: int | None,
        prefetch: int | None,
    ) -> _Workers:
        selectors = device_list(devices)
        workers = len(selectors) if jobs is None else _whole(jobs, "jobs")
        if workers < 1:
            raise DeviceError(f"jobs must be at least 1, not {jobs}")
        threads = default_threads(workers) if threads is None else max(1, int(threads))
        prefetch = 2 * threads if prefetch is None else max(1, int(prefetch))
        return cls(selectors, workers, threads, prefetch)

    def devices(self, count: int) -> list[str | int | None]:
        """The device of each of `count` workers: the selectors in turn."""
        return [self.selectors[slot % len(self.selectors)] for slot in range(count)]


def _planned_run(
    tasks: list[MeshTask],
    plan: BatchPlan | None,
    checked: Options,
    workers: _Workers,
    *,
    dense: bool,
    skip_existing: bool,
    up_axis: str | None,
    load_processes: int | None,
    write_processes: int | bool | None,
) -> BatchRun:
    """The run of planned tasks: into plan.out_dir as plan.format, or kept in memory
    without a plan."""
    load_processes = _load_processes(load_processes, workers=workers.count, meshes=len(tasks))
    if up_axis is not None and (plan is None or not plan.format.takes_up_axis):
        raise OutputError("up_axis is for .vox outputs (format='vox') only")
    if plan is not None:
        _prepare_out_dir(plan.out_dir, tasks, plan.format, checked)
    elif dense and checked.shape is not None:
        check_dense_fits(checked.shape, "voxelize_many(dense=True)")
    out_dir = None if plan is None else plan.out_dir
    settings = BatchSettings(
        options=checked,
        dense=dense,
        up_axis=up_axis,
        threads=workers.threads,
        prefetch=read_ahead(workers.prefetch, load_processes),
        load_processes=load_processes,
        write_processes=_write_processes(
            write_processes, workers.count, len(tasks), out_dir, checked
        ),
    )
    exists = {t.index for t in tasks if skip_existing and t.output and os.path.lexists(t.output)}
    skipped = [t for t in tasks if t.index in exists]
    todo = [t for t in tasks if t.index not in exists]
    count = capped_workers(workers.count, meshes=len(todo), devices=len(workers.selectors))
    return BatchRun(_results(skipped, todo, workers.devices(count), settings), len(tasks))


def _prepare_out_dir(
    out_dir: Path, tasks: list[MeshTask], output_format: OutputFormat, checked: Options
) -> None:
    """The output folder made, what a killed earlier run of this batch left there removed (a
    SIGKILL runs no cleanup: the temporaries of its outputs, by the writers' pattern, and
    nothing else), and a dense format's grid checked against host memory."""
    make_out_dir(out_dir)
    remove_stale_temporaries(task.output for task in tasks if task.output is not None)
    if output_format.dense and checked.shape is not None:
        check_dense_fits(checked.shape, f"format {output_format.name!r}")


WORKERS_PER_CORE = 2  # a worker waits on its device much of the time: two share a core


def worker_cap(*, meshes: int, devices: int) -> int:
    """The most workers a batch starts: no more than it has meshes to voxelize, nor more
    than WORKERS_PER_CORE per core of the host (or one per device, where there are more of
    those): a worker is a process with a device context and threads of its own, so more
    would only contend (and thousands would meet the host's process limit)."""
    cores = os.cpu_count() or 1
    return max(1, min(meshes, max(WORKERS_PER_CORE * cores, devices)))


def capped_workers(asked: int, *, meshes: int, devices: int) -> int:
    """The workers a batch starts: as asked, up to worker_cap. A warning says when the cap
    applies."""
    cores = os.cpu_count() or 1
    cap = worker_cap(meshes=meshes, devices=devices)
    if asked > cap:
        warnings.warn(
            f"{asked} workers asked for, {cap} started: at most one per mesh to voxelize "
            f"({meshes}), {WORKERS_PER_CORE} per CPU core ({cores}) or one per device "
            f"({devices})",
            stacklevel=4,  # the caller of voxelize_many (through _planned_run)
        )
        return cap
    return asked


def start_process_workers(
    devices: Sequence[str | int] | str | int | None,
    *,
    jobs: int | None,
    meshes: int,
    write_processes: int,
    load_processes: int,
) -> None:
    """The worker processes voxelize_many(`meshes` inputs, devices=, jobs=) starts, forked
    now where that is safe, for it to take (worker_processes.start_workers_ahead), each starting the
    writing and reading processes the batch will ask for and opening its device meanwhile:
    the command starts them before anything in its process opens Vulkan or starts a thread.
    DeviceError where `devices` is no list of selectors."""
    workers = _Workers.asked(devices, jobs, threads=None, prefetch=None)
    count = min(workers.count, worker_cap(meshes=meshes, devices=len(workers.selectors)))
    if count < 2:
        return  # one worker: this process's (the pool's module and multiprocessing unneeded)
    from .worker_processes import AheadStart, start_workers_ahead

    start = AheadStart(write_processes=write_processes, load_processes=load_processes)
    start_workers_ahead(workers.devices(count)[1:], start)


def _whole(value: object, what: str) -> int:
    """A whole number of workers or processes, or ArgumentError (not a bare TypeError)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ArgumentError(f"{what} must be a whole number, not {value!r}")
    return int(value)


def _shard_run(
    inputs: list[Any],
    store: str | os.PathLike,
    checked: Options,
    workers: _Workers,
    *,
    dense: bool,
    load_processes: int | None,
    overwrite: bool,
    skip_existing: bool,
) -> BatchRun:
    """voxelize_many into one voxel shard store at `store` (voxelizer.shards)."""
    shape = check_shard_shape(checked.shape, checked.voxel_size, checked.bounds, checked.pad)
    check_dense_fits(shape, "format 'zarr'")
    planned = plan_tasks(
        inputs, out_dir=None, format=OutputFormat.named("svo"), root=None, overwrite=False
    )
    labels = [task.label for task in planned]
    writer = open_store(store, labels, shape, options=dict(checked.keywords()),
                        overwrite=overwrite, skip_existing=skip_existing)  # fmt: skip
    stored, missing, chunks = shard_outputs(writer, len(inputs))
    chunk_format = ShardFormat()

    def task(i: int) -> MeshTask:
        return MeshTask(i, inputs[i], labels[i], chunks[i], replace=True, format=chunk_format)

    load_processes = _load_processes(load_processes, workers=workers.count, meshes=len(missing))
    settings = BatchSettings(
        options=replace(checked, shape=shape),
        dense=dense,
        threads=workers.threads,
        prefetch=read_ahead(workers.prefetch, load_processes),
        load_processes=load_processes,
    )
    results = _results([task(i) for i in stored], [task(i) for i in missing],
                       workers.devices(workers.count), settings)  # fmt: skip
    return BatchRun(recorded(results, writer), len(inputs))


def _refuse_call_options(options: BatchOptions) -> None:
    """TypeError for the options of a single call that a batch does not take."""
    if "progress" in options:
        raise TypeError(
            "voxelize_many takes no progress callback: its results come as they complete"
        )
    if "attributes" in options:
        raise TypeError("voxelize_many keeps no attributes: call voxelize_dense for face ids")
    if {"labels", "colors", "overlap", "fill_color"} & options.keys():
        raise TypeError(
            "voxelize_many keeps no labels or colours: call voxelize_dense or voxelize for them"
        )


def _load_processes(asked: int | None, *, workers: int, meshes: int) -> int:
    """The reading processes per worker: as asked (0 or more), else the default, but none
    for a few meshes while none run yet (starting them would cost more)."""
    if asked is None:
        count = default_load_processes(workers)
        if meshes < 2 * count and running_load_processes() < count:
            return 0
        return count
    if asked < 0:
        raise VoxelizerError(f"load_processes must be 0 or more, not {asked}")
    return int(asked)


def _write_processes(
    asked: int | bool | None, workers: int, meshes: int, out_dir: object, options: Options
) -> int:
    """The writing processes per worker: as asked (True: the default, at least one), else
    the default where this batch writes files, has meshes enough for them, and they can be
    forked now (or run already): a writer started by exec costs a Python start."""
    if out_dir is None:
        return 0  # nothing to write: the results stay in memory
    side = None if options.shape is None else max(options.shape)  # more writers on larger grids
    if asked is None:
        count = default_write_processes(workers, side)
        if meshes < 4 * count:
            return 0
        return count if fork_allowed() or running_write_processes() >= count else 0
    if isinstance(asked, bool):
        return max(1, default_write_processes(1, side)) if asked else 0
    if _whole(asked, "write_processes") < 0:
        raise VoxelizerError(f"write_processes must be 0 or more, not {asked}")
    return int(asked)


def _results(
    skipped: list[MeshTask],
    todo: list[MeshTask],
    worker_devices: list[str | int | None],
    settings: BatchSettings,
) -> Iterator[BatchResult]:
    for task in skipped:
        yield task.skipped()
    if not todo:
        return
    timeline.mark("reading started", f"{len(worker_devices)} worker(s)")
    try:
        if len(worker_devices) == 1:
            worker = MeshWorker(functools.partial(shared_voxelizer, worker_devices[0]), settings)
            yield from worker.run(ListSource(todo))
        else:  # the first worker here, the others in processes of their own
            from .pool import WorkerPool

            pool = WorkerPool(
                todo,
                local_device=worker_devices[0],
                process_devices=worker_devices[1:],
                settings=settings,
            )
            yield from pool.results()
    finally:  # the writers leave the folders unsynced (write_output): each synced once now
        sync_folders(task.output.parent for task in todo if task.output is not None)
