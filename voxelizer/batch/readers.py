"""Reading meshes in helper processes, for batches on hosts with cores to spare.

Parsing a mesh file is partly Python work. On loader threads it holds the GIL that the
device's thread needs between its Vulkan calls, so a device is fed faster by reading
processes than by threads (docs/benchmarks.md, "Reading processes, dense results as bits,
the call's host cost"). A helper ignores Ctrl-C (the batch ends it by closing its input) and
sends back each mesh with what a voxelization derives from it on the host (Mesh pickles its
caches): its arrays through memory it shares with the batch's process where the system has
it (shared_meshes: the batch's process then copies none of them), else through its pipe.

Where it is safe, the helpers are forked from the batch's process as it starts them: a copy
with the package imported, reading at once while the device opens (no Vulkan instance in the
process yet, no other thread running: see fork_allowed). Otherwise, and for a helper that
replaces one that died, a helper is a new Python (`python -c`, importing this very package
and calling main), ready only once it has started Python and imported the package; until
one is, the batch reads on its threads. Neither runs the user's script again, so it needs no
`if __name__ == "__main__"` guard.
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
from pathlib import Path
from typing import IO, NoReturn

try:
    import fcntl
except ImportError:  # not on this system: pipes keep their size
    fcntl = None  # type: ignore[assignment]

from ..choices import uploads_soup
from ..errors import MeshError, VoxelizerError
from ..gpu.device import vulkan_instance_exists
from ..io.meshes import MeshLike, load_mesh
from ..log import get_logger
from ..mesh import Mesh
from ..options import Options
from ..parallel import keep_freed_memory, use_threads
from ..placement_kept import kept_holds_part_of, kept_placement
from .shared_meshes import (
    SHARED,
    ReceivingRegion,
    WritingRegion,
    new_region_fd,
    shared_memory_available,
)

PROTOCOL = 5
# A reply pipe's size where the system allows it (Linux lets any user grow a pipe to 1 MiB,
# fs.pipe-max-size): a mesh of megabytes crosses in a few reads instead of a hundred of the
# default 64 KiB, and after each read the serving thread takes the GIL back from the device's
# thread, which needs it between its Vulkan calls.
REPLY_PIPE_BYTES = 1 << 20
_log = get_logger(__name__)


def prepared_mesh(source: MeshLike, options: Options, *, make_soup: bool = False) -> Mesh:
    """The mesh of `source`, read and checked, with what a voxelization with these options
    derives from it on the host done now: its uint32 faces, bounds, placement and placed vertices
    (cached on the Mesh, so the call finds them done), the projected areas of the thin check
    (mode "solid"), and with `make_soup` the soup variants' triangle soup (copied by the
    device's thread instead of gathered there). A placement that fails is left to the call,
    which reports it as it would have."""
    mesh = load_mesh(source)
    mesh.indices  # noqa: B018 - computed now, cached
    if options.mode == "solid":
        mesh.axis_areas  # noqa: B018 - what voxelizer.thin estimates a surface by, cached
    try:
        placement = kept_placement(  # (kept on the Mesh: the call finds it)
            mesh,
            options.shape,
            options.voxel_size,
            options.bounds,
            box_fit=options.box_fit,
            pad=options.pad,
        )
        placement.placed_vertices(mesh)
        kept_holds_part_of(mesh, placement)
        if make_soup and uploads_soup(options.variant):
            placement.make_soup(mesh)
    except VoxelizerError:
        pass
    return mesh


Request = tuple[str, Options]  # a path, the batch's options
Sent = deque[tuple[Future[tuple[Mesh, float]], Request]]
REQUESTS_AHEAD = 2  # requests a helper holds: it reads the next while its last mesh crosses


class ForkedHelper:
    """A helper forked from this process, with what LoadProcesses uses of the Popen of an
    exec'd one: its pipes (stdin: requests, stdout: replies), pid, poll, kill and wait."""

    def __init__(
        self, pid: int, stdin: IO[bytes], stdout: IO[bytes], region: ReceivingRegion | None
    ):
        self.pid = pid
        self.stdin: IO[bytes] | None = stdin
        self.stdout: IO[bytes] | None = stdout
        self.region = region  # where its meshes' arrays arrive (shared_meshes), if anywhere
        self.returncode: int | None = None

    @classmethod
    def of_ends(
        cls, pid: int, requests: int, replies: int, region: ReceivingRegion | None
    ) -> ForkedHelper:
        """The helper of `pid` over its pipes' ends here (file descriptors)."""
        return cls(pid, open(requests, "wb", buffering=1 << 20), open(replies, "rb"), region)

    def poll(self) -> int | None:
        """Its exit code once it has ended (and was reaped here), else None."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else: gone, code unknown
                self.returncode = -1
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            with suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.0005
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"reading process {self.pid}", timeout or 0.0)
            time.sleep(pause)
            pause = min(2 * pause, 0.05)
        return code


class ExecHelper(subprocess.Popen[bytes]):
    """A helper started by exec, with the region its meshes' arrays arrive in, if any."""

    region: ReceivingRegion | None = None


Helper = ExecHelper | ForkedHelper


def fork_allowed() -> bool:
    """Whether helpers may be forked from this process now rather than started by exec: on
    Linux, with no other Python thread running (a fork copies the calling thread only: a
    lock another thread held would stay locked in the child) and no Vulkan instance here (a
    driver's threads and state do not survive a fork). numpy's OpenBLAS threads are no
    obstacle: OpenBLAS stops them itself before a fork."""
    return (
        sys.platform.startswith("linux")
        and hasattr(os, "fork")
        and threading.active_count() == 1
        and not vulkan_instance_exists()
    )


class LoadProcesses:
    """`count` helper processes reading files: submit(...) -> Future of (Mesh, seconds).

    Each helper has a thread here that hands it paths, REQUESTS_AHEAD at most (the next one
    waits in the helper while its mesh crosses), and waits for its meshes (blocking reads
    release the GIL), so a helper with room takes the next path. The helpers are
    forked here where fork_allowed() (`forked` says how many: then `started` is set at once),
    else each thread starts its own by exec. A helper that dies fails its mesh with an error
    naming it and is replaced (by exec) for the next ones. Until one has started (`started`;
    `starting` while none has, nor have all failed), a batch reads on its threads.

    With shared_memory (where the system has it: shared_meshes), a mesh's arrays arrive in
    a region of memory the helper shares with this process, else pickled through its pipe.
    receiving_cpu_seconds() and shared_replies() say what receiving has cost this process."""

    def __init__(self, count: int, *, shared_memory: bool = True):
        self.count = max(1, count)
        self.shared_memory = shared_memory and shared_memory_available()
        self._receiving_cpu = [0.0] * self.count  # per slot: each written by its thread only
        self._shared_replies = [0] * self.count
        self.started = threading.Event()
        self._settled = threading.Event()  # one helper started, or every one failed to
        self._failed_starts = 0
        self._lock = threading.Lock()
        self._requests: queue.SimpleQueue[tuple[Future[tuple[Mesh, float]], Request] | None]
        self._requests = queue.SimpleQueue()
        self._helpers: list[Helper | None] = [None] * self.count
        forked = (  # before any thread
            _fork_helpers(self.count, shared_memory=self.shared_memory) if fork_allowed() else []
        )
        self.forked = len(forked)
        self._helpers[: len(forked)] = forked
        if forked:
            self.started.set()
            self._settled.set()
        self._threads = [
            threading.Thread(
                target=self._serve, args=(slot,), name=f"voxelizer-reader-{slot}", daemon=True
            )
            for slot in range(self.count)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, path: str | os.PathLike, options: Options) -> Future[tuple[Mesh, float]]:
        """The mesh of `path` prepared for `options` by the next free helper, and the
        seconds that took."""
        future: Future[tuple[Mesh, float]] = Future()
        self._requests.put((future, (os.fspath(path), options)))
        return future

    def receiving_cpu_seconds(self) -> float:
        """The CPU time this process's threads spent taking meshes in from the helpers."""
        return sum(self._receiving_cpu)

    def shared_replies(self) -> int:
        """How many meshes arrived through shared memory (the others crossed the pipes)."""
        return sum(self._shared_replies)

    @property
    def starting(self) -> bool:
        """Whether the helpers are still starting: none is ready yet, and not all failed."""
        return not self._settled.is_set()

    def wait_started(self, timeout: float) -> bool:
        """Wait until a helper is ready (True), every helper failed to start or `timeout`
        seconds passed (False)."""
        self._settled.wait(timeout)
        return self.started.is_set()

    def helper_pids(self) -> list[int]:
        """The process ids of the helpers running now."""
        return [h.pid for h in self._helpers if h is not None and h.poll() is None]

    def close(self) -> None:
        """Stop the helpers once the requests submitted are answered."""
        for _ in self._threads:
            self._requests.put(None)
        for thread in self._threads:
            thread.join()

    def _serve(self, slot: int) -> None:
        if self._helpers[slot] is None:  # not forked: started here
            try:
                self._helpers[slot] = _start(shared_memory=self.shared_memory)
                self.started.set()
            except OSError:  # tried again for each request, which fails with the reason
                with self._lock:
                    self._failed_starts += 1
                    if self._failed_starts == self.count:
                        self._settled.set()
            else:
                self._settled.set()
        sent: Sent = deque()  # the requests the helper has, in its order
        ending = False
        try:
            while sent or not ending:
                # The next request goes to the helper before its last mesh is received here:
                # it reads on while this thread waits for the GIL to take the mesh in.
                while not ending and len(sent) < REQUESTS_AHEAD:
                    try:
                        item = self._requests.get(block=not sent)
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
            _stop(self._helpers[slot], kill=False)
            self._helpers[slot] = None

    def _send_last(self, slot: int, sent: Sent) -> None:
        """Send the last request of `sent` to the slot's helper (starting one if none runs);
        if that fails, _helper_gone."""
        helper = self._helpers[slot]
        try:
            if helper is None:
                helper = self._helpers[slot] = _start(shared_memory=self.shared_memory)
                self.started.set()
            assert helper.stdin is not None
            freed = helper.region.take_freed() if helper.region is not None else []
            _send(helper.stdin, (*sent[-1][1], freed))
        except (OSError, ValueError) as exc:
            self._helper_gone(slot, sent, exc)

    def _receive_first(self, slot: int, sent: Sent) -> None:
        """The helper's answer to the first request of `sent`: the mesh, or the error it
        raised, set on its future; if the helper dies on it, _helper_gone."""
        future = sent[0][0]
        helper = self._helpers[slot]
        started = time.thread_time()
        try:
            assert helper is not None and helper.stdout is not None
            reply = pickle.load(helper.stdout)
            if reply[0] == SHARED and helper.region is not None:
                reply = helper.region.decode(reply)  # views of the region, no copy
                self._shared_replies[slot] += 1
            outcome, payload = reply
        except (OSError, EOFError, pickle.UnpicklingError, ValueError) as exc:
            self._helper_gone(slot, sent, exc)
            return
        except BaseException as exc:  # the request's outcome, whatever it is
            sent.popleft()
            future.set_exception(exc)
            return
        finally:
            self._receiving_cpu[slot] += time.thread_time() - started
        sent.popleft()
        if outcome == "mesh":
            future.set_result(payload)
        else:
            future.set_exception(payload)

    def _helper_gone(self, slot: int, sent: Sent, error: BaseException) -> None:
        """The slot's helper died (or did not start): the request it was on, the first of
        `sent`, fails with MeshError naming it; the others go to a new helper."""
        helper = self._helpers[slot]
        code = _stop(helper, kill=True)
        self._helpers[slot] = None
        future, request = sent.popleft()
        future.set_exception(
            MeshError(
                f"{request[0]}: the reading process died (exit code {code}; "
                f"{error or type(error).__name__})"
            )
        )
        others = list(sent)
        sent.clear()
        for item in others:
            sent.append(item)
            self._send_last(slot, sent)


# The helper imports this very package (whatever the working directory or sys.path of the
# batch's process), then says so. `-c` puts the current folder first on the module path: a
# numpy.py there would run in the helper. -P (Python 3.11 and later) leaves it off, and the
# program drops it where -P is unknown, before any import that could find it.
_HELPER = (
    "import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
    "sys.path.insert(0, {!r}); from voxelizer.batch.readers import main; main({!r})"
)
_SAFE_PATH = ["-P"] if sys.version_info >= (3, 11) else []


def _fork_helpers(count: int, *, shared_memory: bool) -> list[ForkedHelper]:
    """`count` helpers forked from this process (fewer, or none, where the system refuses a
    pipe or a fork: the others are started by exec). Each has two pipes and a region
    (shared_meshes) of its own, and closes its siblings' ones, so that each sees the end of
    its input when the batch closes it; the regions are mapped here once all have forked
    (no helper inherits another's mapping). SIGINT is held while they fork (only this
    process takes a Ctrl-C: the children ignore it), and the garbage collector frozen (a
    child never collects, and so finalizes, garbage of this process's)."""
    ends: list[_ForkEnds] = []
    try:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        gc.freeze()
        try:
            for _ in range(count):
                try:
                    siblings = [fd for end in ends for fd in end[1:] if fd is not None]
                    ends.append(_fork_one(siblings, previous, shared_memory=shared_memory))
                except OSError as exc:
                    _log.info("cannot fork a mesh-reading process (%s): starting it by exec", exc)
                    break
        finally:
            gc.unfreeze()
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # a Ctrl-C held arrives now
    except BaseException:
        for end in ends:
            _end_forked(end)
        raise
    helpers = []
    for end in ends:
        pid, requests, replies, region_fd = end
        region = ReceivingRegion.adopt(region_fd)
        if region_fd is not None and region is None:  # its replies could not be read here
            _end_forked(end)  # its slot's helper is started by exec
            continue
        _close(region_fd)  # the mapping here keeps the memory
        helpers.append(ForkedHelper.of_ends(pid, requests, replies, region))
    return helpers


# A forked helper's pid, requests' write end, replies' read end and region (None: none).
_ForkEnds = tuple[int, int, int, int | None]


def _end_forked(end: _ForkEnds) -> None:
    """Close what this process holds of a forked helper, and end it."""
    pid, *fds = end
    for fd in fds:
        _close(fd)
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _fork_one(
    siblings: list[int], mask: set[int | signal.Signals], *, shared_memory: bool
) -> _ForkEnds:
    """The ends (_ForkEnds) of one forked helper."""
    region_fd = new_region_fd() if shared_memory else None
    request_read, request_write = os.pipe()
    try:
        reply_read, reply_write = os.pipe()
    except OSError:
        os.close(request_read)
        os.close(request_write)
        _close(region_fd)
        raise
    try:
        pid = os.fork()
    except OSError:
        for fd in (request_read, request_write, reply_read, reply_write):
            os.close(fd)
        _close(region_fd)
        raise
    if pid == 0:
        foreign = [request_write, reply_read, *siblings]
        _forked_main(request_read, reply_write, region_fd, foreign, mask)
    os.close(request_read)
    os.close(reply_write)
    widen_pipe(reply_read)
    return pid, request_write, reply_read, region_fd


def _new_region() -> tuple[int | None, ReceivingRegion | None]:
    """A new region for a helper: its file descriptor (for the helper) and its mapping here;
    (None, None) where the system has none (the helper's meshes then cross the pipe)."""
    fd = new_region_fd()
    region = ReceivingRegion.adopt(fd)
    if region is None:
        _close(fd)
        return None, None
    return fd, region


def _close(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def _forked_main(
    requests: int,
    replies: int,
    region_fd: int | None,
    foreign: list[int],
    mask: set[int | signal.Signals],
) -> NoReturn:
    """A forked helper: Ctrl-C ignored, the pipes of the others closed, then serve() until
    the input ends; it leaves by os._exit (none of the parent's exit handlers, buffers or
    finalizers run here)."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # (as main does)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for fd in foreign:
            os.close(fd)
        sys.stdout = sys.stderr  # nothing may print into the parent's buffered stdout
        use_threads(1)  # one core per helper: the helpers share the host's cores
        keep_freed_memory()  # file after file: each file's arrays reuse the last one's memory
        with (
            open(requests, "rb") as request_file,
            open(replies, "wb", buffering=1 << 20) as reply_file,
            suppress(BrokenPipeError),  # the batch is gone
        ):
            serve(request_file, reply_file, WritingRegion.adopt(region_fd))
        code = 0
    finally:
        os._exit(code)


def _start(*, shared_memory: bool = True) -> ExecHelper:
    """A helper process, once it is ready; OSError if it does not start."""
    package_parent = str(Path(__file__).resolve().parents[2])
    region_fd, region = _new_region() if shared_memory else (None, None)
    try:
        helper = ExecHelper(
            [sys.executable, *_SAFE_PATH, "-c", _HELPER.format(package_parent, region_fd)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=1 << 20,
            pass_fds=() if region_fd is None else (region_fd,),
        )
    finally:
        _close(region_fd)  # the helper has its own; the mapping here keeps the memory
    helper.region = region
    assert helper.stdout is not None
    widen_pipe(helper.stdout.fileno())
    try:
        if pickle.load(helper.stdout) == ("ready", None):
            return helper
    except (EOFError, pickle.UnpicklingError, ValueError):
        pass
    code = _stop(helper, kill=True)
    raise OSError(f"a mesh-reading process did not start (exit code {code})")


_shared: LoadProcesses | None = None
_shared_lock = threading.Lock()


def shared_load_processes(count: int) -> LoadProcesses:
    """This process's helpers, started by the first batch that wants them and kept for the
    next ones (a process running batch after batch pays their start once); more are started
    for a batch that asks for more. They end with the process."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared.count < count:
            if _shared is not None:
                _shared.close()
            _shared = LoadProcesses(count)
        return _shared


def running_load_processes() -> int:
    """How many helpers this process keeps (0 before a batch started them)."""
    with _shared_lock:
        return 0 if _shared is None else _shared.count


def _close_shared() -> None:
    global _shared
    with _shared_lock:
        if _shared is not None:
            _shared.close()
            _shared = None


def _forget_shared_after_fork() -> None:
    """A forked child has none of the helpers' threads; the helpers are its parent's."""
    global _shared, _shared_lock
    _shared = None
    _shared_lock = threading.Lock()


atexit.register(_close_shared)
os.register_at_fork(after_in_child=_forget_shared_after_fork)


def widen_pipe(fd: int) -> None:
    """Grow the pipe of `fd` to REPLY_PIPE_BYTES where the system has the call and allows the
    size (else it stays as it is: only slower)."""
    grow = getattr(fcntl, "F_SETPIPE_SZ", None) if fcntl is not None else None
    if grow is not None:
        with suppress(OSError):
            fcntl.fcntl(fd, grow, REPLY_PIPE_BYTES)


def _send(channel: IO[bytes], message: object) -> None:
    pickle.dump(message, channel, protocol=PROTOCOL)
    channel.flush()


def _stop(helper: Helper | None, kill: bool) -> int | None:
    """End a helper: its input closed (it exits when it reads the end), or killed."""
    if helper is None:
        return None
    if kill:
        helper.kill()
    for channel in (helper.stdin, helper.stdout):
        if channel is not None:
            with suppress(OSError):  # a broken pipe: the helper is gone already
                channel.close()
    try:
        return helper.wait(10.0)
    except subprocess.TimeoutExpired:
        helper.kill()
        return helper.wait()


def _portable(error: BaseException) -> BaseException:
    """The error itself if it survives pickling, else a MeshError with its words."""
    try:
        pickle.loads(pickle.dumps(error, protocol=PROTOCOL))
    except Exception:  # any failure to round-trip: send words instead
        return MeshError(str(error) or type(error).__name__)
    return error


def serve(requests: IO[bytes], replies: IO[bytes], region: WritingRegion | None = None) -> None:
    """A helper's loop: requests (path, options, blocks of the region freed), each answered
    by ("mesh", (Mesh, seconds)) or ("error", exception), until the input ends. With a
    region, a mesh's arrays go there and the reply says where (WritingRegion.encode)."""
    while True:
        try:
            path, options, freed = pickle.load(requests)
        except EOFError:
            return
        if region is not None:
            region.release(freed)
        started = time.perf_counter()
        try:
            reply: tuple[str, object] = (
                "mesh",
                (prepared_mesh(path, options, make_soup=True), time.perf_counter() - started),
            )
        except (VoxelizerError, MemoryError) as exc:
            reply = ("error", _portable(exc))
        except Exception as exc:  # a reader's bug fails this mesh only
            reply = ("error", MeshError(f"{path}: cannot read ({type(exc).__name__}: {exc})"))
        _send(replies, reply if region is None else region.encode(reply))


def main(region_fd: int | None = None) -> None:
    # The batch ends its helpers (by closing their input): a Ctrl-C or a SIGTERM sent to the
    # whole group leaves them to it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    replies = sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write into the replies
    use_threads(1)  # one core per helper: the helpers share the host's cores
    keep_freed_memory()  # file after file: each file's arrays reuse the last one's memory
    with suppress(BrokenPipeError):  # the batch is gone
        _send(replies, ("ready", None))
        serve(sys.stdin.buffer, replies, WritingRegion.adopt(region_fd))


if __name__ == "__main__":
    main()
