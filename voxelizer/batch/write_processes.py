"""Output files written in helper processes, for batches on hosts with cores to spare.

Writing a result is mostly Python work (the format's code, zipfile, temporary files and
their syncs: voxelizer.io.output). On a batch's writer threads it holds the GIL that the
device's thread needs between its Vulkan calls, so on a host with cores to spare the files
are written by processes: the batch's writer thread counts the voxels and makes the thin
check (which may need the device) as before, then hands the result's arrays over (a dense
grid's column words, 1 bit a voxel; an octree's three arrays) and waits for a one-line
outcome, its GIL released.

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
breaks every file queued (docs/benchmarks.md, "Writing processes").
"""

from __future__ import annotations

import atexit
import gc
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NoReturn

from ..errors import OutputError, VoxelizerError
from ..grid import ColumnBits, DenseGrid
from ..io.output import remove_temporaries
from ..io.writers import OutputFormat
from ..log import get_logger
from ..parallel import use_threads
from ..placement import Placed
from ..svo import SVO
from .readers import fork_allowed, widen_pipe

PROTOCOL = 5
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
    """Writing processes for a batch of one worker: where the host has cores to spare (8 or
    more), one for every CORES_PER_WRITER cores (up to BASE_WRITERS), times (grid_side /
    REFERENCE_SIDE)² on grids larger than that (grid_side: the grid's longest side, None
    where unknown), never more than half the cores nor MAX_WRITE_PROCESSES; else none (the
    writer threads write). A batch of several workers leaves its files to its threads (its
    processes' cores go to their own devices)."""
    cores = os.cpu_count() or 1
    if cores < 8 or workers != 1:
        return 0
    base = min(BASE_WRITERS, cores // CORES_PER_WRITER)
    scale = max(1, round((grid_side / REFERENCE_SIDE) ** 2)) if grid_side else 1
    return min(MAX_WRITE_PROCESSES, cores // 2, base * scale)


# --- what crosses: a file to write, as plain arrays -------------------------------------------


@dataclass(frozen=True)
class WriteJob:
    """One file to write: where, in which format (its suffix), whether it may replace a
    file, the .vox up axis, and the voxels as plain arrays (see payload_of)."""

    output: str
    suffix: str
    replace: bool
    up_axis: str | None
    payload: tuple[Any, ...]

    @classmethod
    def of(
        cls, result: Placed, output: Path, fmt: OutputFormat, *, replace: bool, up_axis: str | None
    ) -> WriteJob:
        return cls(os.fspath(output), fmt.suffix, replace, up_axis, payload_of(result))


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
    processes both write through here, so a file and its errors are the same either way."""
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        fmt.write(result, output, overwrite=replace, up_axis=up_axis)
    except OSError as exc:
        raise OutputError(f"{output}: cannot write ({exc.strerror or exc})") from exc


def write_job(job: WriteJob) -> None:
    """Write a job's file, as write_output does."""
    write_output(
        result_of(job.payload),
        Path(job.output),
        OutputFormat(job.suffix),
        replace=job.replace,
        up_axis=job.up_axis,
    )


def _outcome(job: WriteJob) -> tuple[str, object]:
    """("done", None), or ("error", the exception, one that pickles) for a job."""
    try:
        write_job(job)
    except (VoxelizerError, MemoryError) as exc:
        return ("error", _portable(exc, job.output))
    except Exception as exc:  # a writer's bug fails this file only
        return ("error", OutputError(f"{job.output}: cannot write ({type(exc).__name__}: {exc})"))
    return ("done", None)


def _portable(error: BaseException, output: str) -> BaseException:
    """The error itself if it survives pickling, else an OutputError with its words."""
    try:
        pickle.loads(pickle.dumps(error, protocol=PROTOCOL))
    except Exception:  # any failure to round-trip: send words instead
        return OutputError(f"{output}: {error or type(error).__name__}")
    return error


# --- the writers, seen from the batch's process -----------------------------------------------


class _Writer:
    """One writing process: its pipes (requests, replies) and what ends it. `popen` for one
    started by exec; a forked one is reaped here by its pid."""

    def __init__(self, pid: int, requests: IO[bytes], replies: IO[bytes], popen: Any = None):
        self.pid = pid
        self.requests = requests
        self.replies = replies
        self._popen = popen
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            if self._popen is not None:
                self.returncode = self._popen.poll()
            else:
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:
                    self.returncode = -1
                else:
                    if pid:
                        self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def stop(self, *, kill: bool) -> int | None:
        """End it (killed, or told to end once it has written what it holds) and wait."""
        if kill and self.poll() is None:
            with suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        with suppress(OSError, ValueError):
            if not kill:
                pickle.dump(None, self.requests, protocol=PROTOCOL)
            self.requests.close()
        with suppress(OSError):
            self.replies.close()
        deadline = time.monotonic() + 60.0  # a writer finishing a large file
        pause = 0.0005
        while self.poll() is None:
            if time.monotonic() > deadline:
                with suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                deadline = float("inf")
            time.sleep(pause)
            pause = min(2 * pause, 0.05)
        return self.returncode


Sent = deque[tuple[Future[None], WriteJob]]


class WriteProcesses:
    """`count` writing processes: submit(job) -> Future, done once the file is written (or
    failed with the writer's error). Each writer has a thread here, started with the first
    job, that hands it JOBS_AHEAD files at most and waits for its replies (blocking reads
    release the GIL)."""

    def __init__(self, count: int):
        self.count = max(1, count)
        self._jobs: queue.SimpleQueue[tuple[Future[None], WriteJob] | None] = queue.SimpleQueue()
        forked = _fork_writers(self.count) if fork_allowed() else []
        self.forked = len(forked)
        self._writers: list[_Writer | None] = [*forked, *[None] * (self.count - len(forked))]
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def submit(self, job: WriteJob) -> Future[None]:
        future: Future[None] = Future()
        self._start_threads()
        self._jobs.put((future, job))
        return future

    def writer_pids(self) -> list[int]:
        """The process ids of the writers running now."""
        return [w.pid for w in self._writers if w is not None and w.poll() is None]

    def close(self) -> None:
        """End the writers once every file handed over is written."""
        with self._lock:
            threads, self._threads = self._threads, []
        for _ in threads:
            self._jobs.put(None)
        for thread in threads:
            thread.join()
        for slot, writer in enumerate(self._writers):  # never given a job
            if writer is not None:
                writer.stop(kill=False)
                self._writers[slot] = None

    def _start_threads(self) -> None:
        with self._lock:
            if self._threads:
                return
            self._threads = [
                threading.Thread(
                    target=self._serve, args=(slot,), name=f"voxelizer-writer-{slot}", daemon=True
                )
                for slot in range(self.count)
            ]
            for thread in self._threads:
                thread.start()

    def _serve(self, slot: int) -> None:
        sent: Sent = deque()  # the jobs the writer holds, in its order
        ending = False
        try:
            while sent or not ending:
                while not ending and len(sent) < JOBS_AHEAD:
                    try:
                        item = self._jobs.get(block=not sent)
                    except queue.Empty:
                        break
                    if item is None:
                        ending = True
                    elif item[0].set_running_or_notify_cancel():
                        sent.append(item)
                        self._send_last(slot, sent)
                if sent:
                    self._receive_first(slot, sent)
        finally:
            writer, self._writers[slot] = self._writers[slot], None
            if writer is not None:
                writer.stop(kill=False)

    def _send_last(self, slot: int, sent: Sent, *, retry: bool = True) -> None:
        """Hand the last job of `sent` to the slot's writer (started by exec if none runs);
        if that fails, _writer_gone. A writer found dead while it held nothing (killed while
        idle) costs no file: the job goes to a new one."""
        try:
            writer = self._writers[slot]
            if writer is not None and len(sent) == 1 and writer.poll() is not None:
                writer.stop(kill=True)  # ended while idle: replaced
                writer = self._writers[slot] = None
            if writer is None:
                writer = self._writers[slot] = _start()
            pickle.dump(sent[-1][1], writer.requests, protocol=PROTOCOL)
            writer.requests.flush()
        except (OSError, ValueError, EOFError, pickle.UnpicklingError) as exc:
            if retry and len(sent) == 1 and self._writers[slot] is not None:
                gone, self._writers[slot] = self._writers[slot], None
                assert gone is not None
                gone.stop(kill=True)
                self._send_last(slot, sent, retry=False)
                return
            self._writer_gone(slot, sent, exc)

    def _receive_first(self, slot: int, sent: Sent) -> None:
        writer = self._writers[slot]
        future = sent[0][0]
        try:
            assert writer is not None
            outcome, payload = pickle.load(writer.replies)
        except (OSError, EOFError, pickle.UnpicklingError, ValueError, AssertionError) as exc:
            self._writer_gone(slot, sent, exc)
            return
        sent.popleft()
        if outcome == "done":
            future.set_result(None)
        else:
            future.set_exception(payload)

    def _writer_gone(self, slot: int, sent: Sent, error: BaseException) -> None:
        """The slot's writer died (or did not start): the file it was on, the first of
        `sent`, fails naming it (its temporary removed); the others go to a new writer."""
        writer, self._writers[slot] = self._writers[slot], None
        code = None if writer is None else writer.stop(kill=True)
        future, job = sent.popleft()
        remove_temporaries(job.output)
        reason = f"exit code {code}" if writer is not None else f"{error or type(error).__name__}"
        _log.warning("writing process died on %s (%s)", job.output, reason)
        future.set_exception(
            OutputError(f"{job.output}: the writing process died while writing it ({reason})")
        )
        others = list(sent)
        sent.clear()
        for item in others:
            sent.append(item)
            self._send_last(slot, sent)


# --- starting writers -------------------------------------------------------------------------

_CHILD = (
    "import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
    "sys.path.insert(0, {!r}); from voxelizer.batch.write_processes import main; main()"
)
_SAFE_PATH = ["-P"] if sys.version_info >= (3, 11) else []


def _fork_writers(count: int) -> list[_Writer]:
    """Writers forked from this process (fewer, or none, where the system refuses a pipe or
    a fork: the others are started by exec when needed). SIGINT and SIGTERM are held while
    they fork (the children ignore them) and the garbage collector frozen (a child never
    finalizes garbage of this process's)."""
    writers: list[_Writer] = []
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    gc.freeze()
    try:
        for _ in range(count):
            try:
                siblings = [fd for w in writers for fd in (w.requests.fileno(), w.replies.fileno())]
                writers.append(_fork_one(siblings, previous))
            except OSError as exc:
                _log.info("cannot fork a writing process (%s): starting it by exec", exc)
                break
    finally:
        gc.unfreeze()
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    return writers


def _fork_one(siblings: list[int], mask: set[int | signal.Signals]) -> _Writer:
    """One forked writer; it closes its siblings' ends, so that each sees the end of its
    own input only."""
    request_read, request_write = os.pipe()
    try:
        reply_read, reply_write = os.pipe()
    except OSError:
        os.close(request_read)
        os.close(request_write)
        raise
    try:
        pid = os.fork()
    except OSError:
        for fd in (request_read, request_write, reply_read, reply_write):
            os.close(fd)
        raise
    if pid == 0:
        _forked_main(request_read, reply_write, [request_write, reply_read, *siblings], mask)
    os.close(request_read)
    os.close(reply_write)
    widen_pipe(request_write)
    return _Writer(pid, open(request_write, "wb", buffering=1 << 20), open(reply_read, "rb"))


def _forked_main(
    requests: int, replies: int, foreign: list[int], mask: set[int | signal.Signals]
) -> NoReturn:
    """A forked writer: Ctrl-C and SIGTERM ignored, the parent's ends closed, then serve()
    until told to end; it leaves by os._exit (none of the parent's exit handlers run)."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for fd in foreign:
            os.close(fd)
        sys.stdout = sys.stderr  # nothing may print into the parent's buffered stdout
        use_threads(1)
        with (
            open(requests, "rb") as request_file,
            open(replies, "wb", buffering=0) as reply_file,
            suppress(BrokenPipeError),
        ):
            serve(request_file, reply_file)
        code = 0
    finally:
        os._exit(code)


def _start() -> _Writer:
    """A writer started by exec, once it is ready; OSError if it does not start."""
    package_parent = str(Path(__file__).resolve().parents[2])
    popen = subprocess.Popen(
        [sys.executable, *_SAFE_PATH, "-c", _CHILD.format(package_parent)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        bufsize=1 << 20,
    )
    assert popen.stdin is not None and popen.stdout is not None
    writer = _Writer(popen.pid, popen.stdin, popen.stdout, popen)
    widen_pipe(popen.stdin.fileno())
    try:
        if pickle.load(popen.stdout) == ("ready", None):
            return writer
    except (EOFError, pickle.UnpicklingError, ValueError):
        pass
    code = writer.stop(kill=True)
    raise OSError(f"a writing process did not start (exit code {code})")


def serve(requests: IO[bytes], replies: IO[bytes]) -> None:
    """A writer's loop: WriteJobs, each answered by ("done", None) or ("error", exception),
    until None or the end of its input."""
    while True:
        try:
            job = pickle.load(requests)
        except EOFError:
            return
        if job is None:
            return
        pickle.dump(_outcome(job), replies, protocol=PROTOCOL)
        replies.flush()


def main() -> None:
    """A writer started by exec: it says it is ready, then serves its parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    replies = sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write into the replies
    use_threads(1)
    with suppress(BrokenPipeError):
        pickle.dump(("ready", None), replies, protocol=PROTOCOL)
        replies.flush()
        serve(sys.stdin.buffer, replies)


# --- this process's writers, kept from batch to batch -----------------------------------------

_shared: WriteProcesses | None = None
_shared_lock = threading.Lock()


def shared_write_processes(count: int) -> WriteProcesses:
    """This process's writers, started by the first batch that wants them (forked where
    fork_allowed) and kept for the next ones; more are started for a batch that asks for
    more. They end with the process."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared.count < count:
            if _shared is not None:
                _shared.close()
            _shared = WriteProcesses(count)
        return _shared


def running_write_processes() -> int:
    """How many writers this process keeps (0 before a batch started them)."""
    with _shared_lock:
        return 0 if _shared is None else _shared.count


def _close_shared() -> None:
    global _shared
    with _shared_lock:
        if _shared is not None:
            _shared.close()
            _shared = None


def _forget_shared_after_fork() -> None:
    """A forked child has none of the writers' threads; the writers are its parent's."""
    global _shared, _shared_lock
    _shared = None
    _shared_lock = threading.Lock()


atexit.register(_close_shared)
os.register_at_fork(after_in_child=_forget_shared_after_fork)
