"""Output files written in helper processes, for batches on hosts with cores to spare.

Writing a result is mostly Python work (the format's code, zipfile, temporary files and
their syncs: voxelizer.io.output). On a batch's writer threads it holds the GIL that the
device's thread needs between its Vulkan calls, so on a host with cores to spare the files
are written by processes. The device's thread hands each result straight over (no writer
thread between: voxelizer.batch.worker's HandedWrites); the writer's thread here copies its
arrays (a dense grid's column words, 1 bit a voxel; an octree's three arrays) once into
memory the writer shares with it where the system has it, and waits, its GIL released, for
the count of the result's voxels: the writer counts them and makes the host's part of the
thin check (voxelizer.thin) before it writes. A result that may be thin comes back
unwritten, since its surface pass needs the device; the batch's process runs it on a writer
thread and hands the file over again. So the files, the counts and the warnings are those
of the writer threads.

The writers are forked from the batch's process where that is safe (fork_allowed: no Vulkan
instance, no other thread), before the reading processes of voxelizer.batch.readers, which
need the same moment: so no thread of this module starts until the first file is handed
over. A writer that dies fails the one file it was writing (naming the file and the exit
code; its temporary is removed) and is replaced by a new Python started with `-c` (importing
this very package: the user's script is never run again). A writer ignores Ctrl-C and
SIGTERM: the batch ends it once every file handed over is written, so an interrupted batch
leaves each file whole or absent. concurrent.futures' ProcessPoolExecutor is not used: its
fork starts its threads at once (the reading processes could then no longer be forked),
its spawn and forkserver run the user's script again in each child, and one child that dies
breaks every file queued (docs/benchmarks.md, "Writing processes"). The forking, serving,
stopping and replacing are voxelizer.batch.helper_processes', as for the reading processes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..errors import OutputError, VoxelizerError
from ..grid import ColumnBits, DenseGrid
from ..io.output import folder_syncs_deferred, remove_temporaries
from ..io.writers import OutputFormat
from ..log import get_logger
from ..placement import Placed
from ..svo import SVO
from ..thin import needs_surface_count
from . import helper_processes as helpers
from .helper_processes import HelperPool, HelperProcess
from .shared_meshes import SHARED, ReceivingRegion, WritingRegion, shared_memory_available

JOBS_AHEAD = 2  # files a writer holds: the next one crosses while it writes the last
# The default: one writer for every CORES_PER_WRITER cores of the host (up to BASE_WRITERS)
# at 128³, more on larger grids, as a file's cost grows about with the grid's face (side²):
# a few writers keep up with the device at 128³ while the reading processes take the other
# cores, and too few held the command back at 256³ (docs/benchmarks.md, "Datasets").
CORES_PER_WRITER = 8
BASE_WRITERS = 4
REFERENCE_SIDE = 128
MAX_WRITE_PROCESSES = 16
_log = get_logger(__name__)


def default_write_processes(workers: int = 1, grid_side: int | None = None) -> int:
    """Writing processes for each worker of a batch: where the worker's share of the host's
    cores (all of them for one worker) is 8 or more, one for every CORES_PER_WRITER of them
    (up to BASE_WRITERS), times (grid_side / REFERENCE_SIDE)² on grids larger than that
    (grid_side: the grid's longest side, None where unknown), never more than half the share
    nor MAX_WRITE_PROCESSES; else none (the writer threads write). Each worker of a batch of
    several (one per GPU) has its own: its writer threads would hold the GIL its device
    thread needs, as one worker's would."""
    share = (os.cpu_count() or 1) // max(1, workers)
    if share < 8:
        return 0
    base = min(BASE_WRITERS, share // CORES_PER_WRITER)
    scale = max(1, round((grid_side / REFERENCE_SIDE) ** 2)) if grid_side else 1
    return min(MAX_WRITE_PROCESSES, share // 2, base * scale)


# --- what crosses: a file to write, as plain arrays -------------------------------------------


@dataclass(frozen=True)
class WriteJob:
    """One file to write: where, in which format (its suffix), whether it may replace a
    file, the .vox up axis, and the voxels as plain arrays (see payload_of). With `count`,
    the writer counts the voxels first (the count of the batch's result line); with
    `thin_areas` too (the mesh's axis_areas, for a solid result), it writes the file only if
    the count is plainly not thin (voxelizer.thin.needs_surface_count), else hands the
    count back unwritten: the surface pass needs the device, in the batch's process."""

    output: str
    suffix: str
    replace: bool
    up_axis: str | None
    payload: tuple[Any, ...]
    count: bool = False
    thin_areas: np.ndarray | None = None

    @classmethod
    def of(
        cls,
        result: Placed,
        output: Path,
        fmt: OutputFormat,
        *,
        replace: bool,
        up_axis: str | None,
        count: bool = False,
        thin_areas: np.ndarray | None = None,
    ) -> WriteJob:
        return cls(os.fspath(output), fmt.suffix, replace, up_axis, payload_of(result),
                   count, thin_areas)  # fmt: skip


@dataclass(frozen=True)
class Counted:
    """A writer's answer to a job with `count`: the result's voxels, and whether it wrote the
    file (False: the result may be thin; nothing was written)."""

    voxels: int
    written: bool


def payload_of(result: Placed) -> tuple[Any, ...]:
    """The arrays a writer needs, without what the batch's process keeps (stats, an octree's
    walked tree) and without a copy: a dense grid's column words (an eighth of its bools),
    an octree's nodes, bricks and level offsets; a result with attributes as it is."""
    if not result.attributes:
        if isinstance(result, DenseGrid) and result.columns is not None:
            columns = result.columns
            return ("columns", columns.words, columns.shape, columns.clean_padding,
                    result.placement)  # fmt: skip
        if isinstance(result, SVO):
            return ("svo", result.nodes, result.bricks, result.level_offsets, result.placement)
    return ("result", result)


def result_of(payload: tuple[Any, ...]) -> Placed:
    """The result a payload_of stands for, for a writer."""
    kind = payload[0]
    if kind == "columns":
        _, words, shape, clean, placement = payload
        return DenseGrid.of_columns(ColumnBits(words, shape, clean_padding=clean), placement)
    if kind == "svo":
        _, nodes, bricks, level_offsets, placement = payload
        return SVO(nodes, bricks, level_offsets, placement, verify=False)
    result: Placed = payload[1]
    return result


def write_output(
    result: Placed, output: Path, fmt: OutputFormat, *, replace: bool, up_axis: str | None
) -> None:
    """Write one batch output (its folder made): VoxelizerError or MemoryError if it cannot
    be, an OSError as OutputError naming the file. The writer threads and the writing
    processes both write through here, so a file and its errors are the same either way.
    The file's folder is synced by the batch at its end (voxelizer.batch.engine), not here."""
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        with folder_syncs_deferred():
            fmt.write(result, output, overwrite=replace, up_axis=up_axis)
    except OSError as exc:
        raise OutputError(f"{output}: cannot write ({exc.strerror or exc})") from exc


def write_job(job: WriteJob) -> Counted | None:
    """Do a job: its voxels counted if it asks (and the file left unwritten where they may
    be thin: see WriteJob), its file written as write_output does."""
    result = result_of(job.payload)
    counted = None
    if job.count:
        voxels = result.count()
        areas = job.thin_areas
        if areas is not None and needs_surface_count(voxels, areas, result.placement):
            return Counted(voxels, written=False)
        counted = Counted(voxels, written=True)
    write_output(
        result,
        Path(job.output),
        OutputFormat(job.suffix),
        replace=job.replace,
        up_axis=job.up_axis,
    )
    return counted


def _outcome(job: WriteJob) -> tuple[str, object]:
    """("done", write_job's answer), or ("error", the exception, one that pickles)."""
    try:
        return ("done", write_job(job))
    except (VoxelizerError, MemoryError) as exc:
        return ("error", _portable(exc, job.output))
    except Exception as exc:  # a writer's bug fails this file only
        return ("error", OutputError(f"{job.output}: cannot write ({type(exc).__name__}: {exc})"))


def _portable(error: BaseException, output: str) -> BaseException:
    """The error itself if it survives pickling, else an OutputError with its words."""
    return helpers.portable(
        error, lambda: OutputError(f"{output}: {error or type(error).__name__}")
    )


# --- the writers, seen from the batch's process -----------------------------------------------

WHAT = "writing"


class WriteProcesses(HelperPool[WriteJob, Counted | None]):
    """`count` writing processes: submit(job) -> Future of write_job's answer, once the file
    is written (or failed with the writer's error). Each writer has a thread here, started
    with the first job, that hands it JOBS_AHEAD files at most and waits for its replies
    (blocking reads release the GIL). A writer found ended while it held no file is
    replaced at no file's cost.

    With shared_memory (where the system has it), each writer has a region of memory it
    shares with this process (voxelizer.batch.shared_meshes, the other way round): a job's
    arrays are copied there once and the writer reads them in place, telling with each
    reply which blocks it no longer reads; else they cross its pipe, pickled."""

    AHEAD = JOBS_AHEAD
    KIND = "writer"
    REPLACES_IDLE = True
    # Told to end by a None, not only by the end of its input: a process forked after it
    # holds its pipe open until it starts (KeptPool closes the copy there).
    FAREWELL = True
    STOP_PATIENCE = 60.0  # a writer finishing a large file

    def __init__(self, count: int, *, shared_memory: bool = True):
        count = max(1, count)
        self.shared_memory = shared_memory and shared_memory_available()
        self._region = WritingRegion.mapped if self.shared_memory else None
        forked = (
            helpers.fork_helpers(
                count, _serve_here, what=WHAT, region=self._region, wide=helpers.REQUESTS
            )
            if helpers.fork_allowed()
            else []
        )
        super().__init__(count, forked)
        self._shared_jobs = [0] * self.count  # per slot: each written by its thread only

    def writer_pids(self) -> list[int]:
        """The process ids of the writers running now."""
        return self.helper_pids()

    def shared_jobs(self) -> int:
        """How many jobs crossed through shared memory (the others crossed the pipes)."""
        return sum(self._shared_jobs)

    def held_bytes(self) -> int:
        """The bytes of the writers' regions that hold results they may still be reading."""
        regions = [h.region for h in self._helpers if h is not None and h.region is not None]
        return sum(region.held_bytes for region in regions)

    def _start(self) -> HelperProcess:
        return helpers.start_by_exec(
            __name__, what=WHAT, region=self._region, wide=helpers.REQUESTS
        )

    def _message(self, slot: int, helper: HelperProcess, request: WriteJob) -> object:
        if helper.region is None:
            return request
        message = helper.region.encode(request)
        self._shared_jobs[slot] += message is not request
        return message

    def _reply(self, slot: int, helper: HelperProcess, reply: Any) -> tuple[str, Any]:
        outcome, payload, freed = reply
        if helper.region is not None:
            helper.region.release(freed)
        return outcome, payload

    def _died(
        self, request: WriteJob, code: int | None, error: BaseException, *, started: bool
    ) -> BaseException:
        remove_temporaries(request.output)
        reason = f"exit code {code}" if started else f"{error or type(error).__name__}"
        _log.warning("writing process died on %s (%s)", request.output, reason)
        return OutputError(
            f"{request.output}: the writing process died while writing it ({reason})"
        )


def _serve_here(requests: IO[bytes], replies: IO[bytes], region_fd: int | None) -> None:
    """A writer, forked or exec'd: WriteJobs (their arrays in its region, where it has one),
    each answered by _outcome and the blocks of the region it no longer reads, until None
    or the end of its input."""
    region = ReceivingRegion.adopt(region_fd)
    helpers.close_fd(region_fd)  # the mapping keeps the memory

    def answer(message: Any) -> object:
        shared = region is not None and isinstance(message, tuple) and message[0] == SHARED
        job = region.decode(message) if shared else message  # type: ignore[union-attr]
        outcome = _outcome(job)
        del job  # its arrays' block freed (unless an error sent back still refers to it)
        return (*outcome, region.take_freed() if region is not None else [])

    helpers.serve(requests, replies, answer)


def main(region_fd: int | None = None) -> None:
    """A writer started by exec: it says it is ready, then serves its parent."""
    helpers.exec_main(_serve_here, region_fd)


# --- this process's writers, kept from batch to batch -----------------------------------------

_kept = helpers.KeptPool(lambda count: WriteProcesses(count))


def shared_write_processes(count: int) -> WriteProcesses:
    """This process's writers, started by the first batch that wants them (forked where
    fork_allowed) and kept for the next ones; more are started for a batch that asks for
    more. They end with the process."""
    return _kept.get(count)


def running_write_processes() -> int:
    """How many writers this process keeps (0 before a batch started them)."""
    return _kept.running()
