"""Helper processes of a batch: what its reading processes (voxelizer.batch.readers) and its
writing processes (voxelizer.batch.write_processes) both stand on.

A pool (HelperPool) of `count` helpers, each with a thread of the batch's process that sends
it requests through one pipe, AHEAD at most (the next one crosses while the helper works on
the last), and reads its replies from another (blocking reads release the GIL that the
device's thread needs between its Vulkan calls). A helper may also have a region of shared
memory (voxelizer.batch.shared_meshes) of its own, for the arrays that cross.

Where it is safe (fork_allowed: Linux, no other thread, no Vulkan instance), the helpers are
forked from the batch's process as the pool is made: a copy with the package imported, ready
at once. SIGINT and SIGTERM are held while they fork and ignored in them (the batch ends its
helpers by closing or ending their input, so an interrupted batch finishes what they hold),
and the garbage collector is frozen (a child never finalizes garbage of the batch's). Each
closes its siblings' pipes, so that it sees the end of its own input only. Otherwise, and
for a helper that replaces one that died, a helper is a new Python (`python -c`, importing
this very package and calling its module's main): the user's script is never run again, so
it needs no `if __name__ == "__main__"` guard.

A helper that dies fails the one request it was on (in the pool's words, _died) and is
replaced by exec for the next ones. One pool of each kind is kept per process (KeptPool):
started by the first batch that wants it, kept for the next ones, ended with the process,
and forgotten in a forked child (whose threads are gone).
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
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any, Generic, NoReturn, Protocol, TypeVar

try:
    import fcntl
except ImportError:  # not on this system: pipes keep their size
    fcntl = None  # type: ignore[assignment]

from ..gpu.device import vulkan_instance_exists
from ..log import get_logger
from ..parallel import use_threads
from .shared_meshes import new_region_fd

PROTOCOL = 5
# A pipe's size where the system allows it (Linux lets any user grow a pipe to 1 MiB,
# fs.pipe-max-size): a message of megabytes crosses in a few reads instead of a hundred of
# the default 64 KiB, and after each read the serving thread takes the GIL back from the
# device's thread. Only the direction that carries large messages is widened: a user's pipes
# share a budget (fs.pipe-user-pages-soft) past which new pipes get a single page.
PIPE_BYTES = 1 << 20
REPLIES, REQUESTS = "replies", "requests"  # which of a helper's pipes is widened
_log = get_logger(__name__)

# What a helper runs, forked or exec'd: its requests, its replies and its region's file
# descriptor (None: none), until its input ends.
ChildMain = Callable[[IO[bytes], IO[bytes], "int | None"], None]


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


INTERRUPTS = frozenset({signal.SIGINT, signal.SIGTERM})


@contextmanager
def forking() -> Iterator[set[int | signal.Signals]]:
    """Around a fork from this process: SIGINT and SIGTERM held (one sent meanwhile arrives
    here once the block ends, and in a child once it unblocks them: none interrupts a child
    before its own handlers are set) and the garbage collector frozen (a child never
    finalizes garbage of this process's). Yields the signal mask to restore, a child's to
    set. A forked child does not leave the block: it stays frozen, its signals held."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTS)
    gc.freeze()
    try:
        yield previous
    finally:
        gc.unfreeze()
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # a Ctrl-C held arrives now


def widen_pipe(fd: int) -> None:
    """Grow the pipe of `fd` to PIPE_BYTES where the system has the call and allows the size
    (else it stays as it is: only slower)."""
    grow = getattr(fcntl, "F_SETPIPE_SZ", None) if fcntl is not None else None
    if grow is not None:
        with suppress(OSError):
            fcntl.fcntl(fd, grow, PIPE_BYTES)


def send(channel: IO[bytes], message: object) -> None:
    pickle.dump(message, channel, protocol=PROTOCOL)
    channel.flush()


class PickledOnce:
    """An object sent with request after request (a batch's options), pickled once: each
    message carries the same bytes, and the helper unpickles the object itself."""

    __slots__ = ("data", "value")

    def __init__(self, value: object):
        self.value = value
        self.data = pickle.dumps(value, protocol=PROTOCOL)

    def __reduce__(self) -> tuple[Callable[[bytes], object], tuple[bytes]]:
        return pickle.loads, (self.data,)


def portable(error: BaseException, instead: Callable[[], BaseException]) -> BaseException:
    """The error itself if it survives pickling, else `instead()` (the same words, in an
    error that does)."""
    try:
        pickle.loads(pickle.dumps(error, protocol=PROTOCOL))
    except Exception:  # any failure to round-trip: send words instead
        return instead()
    return error


def close_fd(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


class HelperProcess:
    """One helper: its pid, its pipes (requests, replies), the region of shared memory it
    has, if any, and what ends it. `popen` for one started by exec; a forked one is reaped
    here by its pid."""

    def __init__(
        self,
        pid: int,
        requests: IO[bytes],
        replies: IO[bytes],
        *,
        popen: subprocess.Popen[bytes] | None = None,
        region: Any = None,
    ):
        self.pid = pid
        self.requests = requests
        self.replies = replies
        self.region = region
        self._popen = popen
        self.returncode: int | None = None

    @classmethod
    def of_fds(cls, pid: int, requests: int, replies: int, *, region: Any) -> HelperProcess:
        """A forked helper over its pipes' ends here (file descriptors)."""
        return cls(pid, open(requests, "wb", buffering=PIPE_BYTES), open(replies, "rb"),
                   region=region)  # fmt: skip

    def poll(self) -> int | None:
        """Its exit code once it has ended (and was reaped here), else None."""
        if self.returncode is None:
            if self._popen is not None:
                self.returncode = self._popen.poll()
            else:
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

    def stop(self, *, kill: bool, farewell: bool = False, patience: float = 10.0) -> int | None:
        """End it: killed, or its input ended (with `farewell`, a None first: its end for a
        helper whose pipe a later fork holds open too), and wait for it, killing it after
        `patience` seconds. Its exit code."""
        if kill:
            self.kill()
        with suppress(OSError, ValueError):  # a broken pipe: the helper is gone already
            if farewell and not kill:
                pickle.dump(None, self.requests, protocol=PROTOCOL)
            self.requests.close()
        with suppress(OSError):
            self.replies.close()
        deadline = time.monotonic() + patience
        pause = 0.0005
        while self.poll() is None:
            if time.monotonic() > deadline:
                self.kill()
                deadline = float("inf")
            time.sleep(pause)
            pause = min(2 * pause, 0.05)
        return self.returncode


# --- starting helpers ---------------------------------------------------------------------


class RegionKind(Protocol):
    """How this process maps a helper's region: the region of a file descriptor (left
    open), or None where it cannot be mapped."""

    def __call__(self, fd: int | None) -> Any: ...


def fork_helpers(
    count: int, child: ChildMain, *, what: str, region: RegionKind | None, wide: str
) -> list[HelperProcess]:
    """`count` helpers forked from this process running `child` (fewer, or none, where the
    system refuses a pipe or a fork: the others are started by exec). Each has two pipes
    (the `wide` one widened) and, with `region`, a region of shared memory of its own,
    mapped here once all have forked (no helper inherits another's mapping)."""
    ends: list[_ForkEnds] = []
    try:
        with forking() as previous:
            for _ in range(count):
                try:
                    siblings = [fd for end in ends for fd in end[1:] if fd is not None]
                    region_fd = new_region_fd() if region is not None else None
                    ends.append(_fork_one(child, siblings, previous, region_fd))
                except OSError as exc:
                    _log.info("cannot fork a %s process (%s): starting it by exec", what, exc)
                    break
    except BaseException:
        for end in ends:
            _end_forked(end)
        raise
    helpers = []
    for end in ends:
        pid, requests, replies, region_fd = end
        mapped = region(region_fd) if region is not None else None
        if region_fd is not None and mapped is None:  # its messages could not be read here
            _end_forked(end)  # its slot's helper is started by exec
            continue
        close_fd(region_fd)  # the mapping here keeps the memory
        widen_pipe(replies if wide == REPLIES else requests)
        helpers.append(HelperProcess.of_fds(pid, requests, replies, region=mapped))
    return helpers


# A forked helper's pid, requests' write end, replies' read end and region (None: none).
_ForkEnds = tuple[int, int, int, int | None]


def _end_forked(end: _ForkEnds) -> None:
    """Close what this process holds of a forked helper, and end it."""
    pid, *fds = end
    for fd in fds:
        close_fd(fd)
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _fork_one(
    child: ChildMain, siblings: list[int], mask: set[int | signal.Signals], region_fd: int | None
) -> _ForkEnds:
    """The ends (_ForkEnds) of one forked helper; `region_fd` is closed if it cannot fork."""
    try:
        request_read, request_write = os.pipe()
    except OSError:
        close_fd(region_fd)
        raise
    try:
        reply_read, reply_write = os.pipe()
    except OSError:
        for fd in (request_read, request_write, region_fd):
            close_fd(fd)
        raise
    try:
        pid = os.fork()
    except OSError:
        for fd in (request_read, request_write, reply_read, reply_write, region_fd):
            close_fd(fd)
        raise
    if pid == 0:
        foreign = [request_write, reply_read, *siblings]
        _forked_main(child, request_read, reply_write, region_fd, foreign, mask)
    os.close(request_read)
    os.close(reply_write)
    return pid, request_write, reply_read, region_fd


def _forked_main(
    child: ChildMain,
    requests: int,
    replies: int,
    region_fd: int | None,
    foreign: list[int],
    mask: set[int | signal.Signals],
) -> NoReturn:
    """A forked helper: Ctrl-C and SIGTERM ignored, the pipes of the others closed, then
    `child` until its input ends; it leaves by os._exit (none of the parent's exit
    handlers, buffers or finalizers run here)."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # (as exec_main does)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for fd in foreign:
            os.close(fd)
        sys.stdout = sys.stderr  # nothing may print into the parent's buffered stdout
        use_threads(1)  # one core per helper: the helpers share the host's cores
        with (
            open(requests, "rb") as request_file,
            open(replies, "wb", buffering=PIPE_BYTES) as reply_file,
            suppress(BrokenPipeError),  # the batch is gone
        ):
            child(request_file, reply_file, region_fd)
        code = 0
    finally:
        os._exit(code)


# The helper imports this very package (whatever the working directory or sys.path of the
# batch's process), then its module's main. `-c` puts the current folder first on the module
# path: a numpy.py there would run in the helper. -P (Python 3.11 and later) leaves it off,
# and the program drops it where -P is unknown, before any import that could find it.
_EXEC = (
    "import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
    "sys.path.insert(0, {!r}); from {} import main; main({!r})"
)
_SAFE_PATH = ["-P"] if sys.version_info >= (3, 11) else []


def start_by_exec(module: str, *, what: str, region: RegionKind | None, wide: str) -> HelperProcess:
    """A helper started by exec, running `module`'s main (which calls exec_main), once it is
    ready; with `region`, a region of shared memory of its own (none where the system has
    none). OSError if it does not start."""
    package_parent = str(Path(__file__).resolve().parents[2])
    region_fd = new_region_fd() if region is not None else None
    mapped = region(region_fd) if region is not None else None
    if mapped is None:
        close_fd(region_fd)
        region_fd = None
    try:
        popen = subprocess.Popen(
            [sys.executable, *_SAFE_PATH, "-c", _EXEC.format(package_parent, module, region_fd)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=PIPE_BYTES,
            pass_fds=() if region_fd is None else (region_fd,),
        )
    finally:
        close_fd(region_fd)  # the helper has its own; the mapping here keeps the memory
    assert popen.stdin is not None and popen.stdout is not None
    helper = HelperProcess(popen.pid, popen.stdin, popen.stdout, popen=popen, region=mapped)
    widen_pipe((popen.stdout if wide == REPLIES else popen.stdin).fileno())
    try:
        if pickle.load(popen.stdout) == ("ready", None):
            return helper
    except (EOFError, pickle.UnpicklingError, ValueError):
        pass
    code = helper.stop(kill=True)
    raise OSError(f"a {what} process did not start (exit code {code})")


def exec_main(child: ChildMain, region_fd: int | None) -> None:
    """A helper started by exec: Ctrl-C and SIGTERM ignored (the batch ends its helpers: a
    Ctrl-C or a SIGTERM sent to the whole group leaves them to it), then it says it is
    ready and runs `child` over its standard input and output."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    replies = sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write into the replies
    use_threads(1)  # one core per helper: the helpers share the host's cores
    with suppress(BrokenPipeError):  # the batch is gone
        send(replies, ("ready", None))
        child(sys.stdin.buffer, replies, region_fd)


def serve(requests: IO[bytes], replies: IO[bytes], answer: Callable[[Any], object]) -> None:
    """A helper's loop: each request answered by `answer`, until None or the end of its
    input."""
    while True:
        try:
            request = pickle.load(requests)
        except EOFError:
            return
        if request is None:
            return
        send(replies, answer(request))


# --- a pool of helpers, seen from the batch's process -------------------------------------

R = TypeVar("R")  # a request
T = TypeVar("T")  # what its future gives
Sent = deque[tuple[Future[Any], Any]]


class HelperPool(ABC, Generic[R, T]):
    """`count` helpers: submit(request) -> Future of what the helper replies, ("error",
    exception) failing it. Each slot has a thread here (started by start_threads) that
    hands its helper AHEAD requests at most and waits for its replies. What differs from
    one kind to the next: _start (a helper by exec), _message (what a request sends),
    _reply (a reply as received) and _died (the error of a request whose helper died)."""

    AHEAD = 2  # requests a helper holds: it works on the next while its last reply crosses
    KIND = "helper"  # the threads' names: voxelizer-KIND-SLOT
    # Whether a helper found ended while it held nothing is replaced at no request's cost
    # (else the next request fails, naming the helper's death).
    REPLACES_IDLE = False
    FAREWELL = False  # whether a helper is sent None to end (HelperProcess.stop)
    STOP_PATIENCE = 10.0  # seconds a helper ended by its input has before it is killed

    def __init__(self, count: int, forked: list[HelperProcess]):
        self.count = max(1, count)
        self.forked = len(forked)
        self._requests: queue.SimpleQueue[tuple[Future[T], R] | None] = queue.SimpleQueue()
        self._helpers: list[HelperProcess | None] = [None] * self.count
        self._helpers[: len(forked)] = forked
        self._receiving_cpu = [0.0] * self.count  # per slot: each written by its thread only
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def submit(self, request: R) -> Future[T]:
        future: Future[T] = Future()
        self.start_threads()
        self._requests.put((future, request))
        return future

    def helper_pids(self) -> list[int]:
        """The process ids of the helpers running now."""
        return [h.pid for h in self._helpers if h is not None and h.poll() is None]

    def pipe_fds(self) -> list[int]:
        """The file descriptors of this process's ends of the helpers' pipes."""
        fds = []
        for helper in list(self._helpers):
            for end in (helper.requests, helper.replies) if helper is not None else ():
                with suppress(ValueError):  # closed already
                    fds.append(end.fileno())
        return fds

    def receiving_cpu_seconds(self) -> float:
        """The CPU time this process's threads spent taking replies in from the helpers."""
        return sum(self._receiving_cpu)

    def start_threads(self) -> None:
        """Start the slots' threads (once)."""
        with self._lock:
            if self._threads:
                return
            self._threads = [
                threading.Thread(
                    target=self._serve, args=(slot,), name=self._thread_name(slot), daemon=True
                )
                for slot in range(self.count)
            ]
            for thread in self._threads:
                thread.start()

    def _thread_name(self, slot: int) -> str:
        return f"voxelizer-{self.KIND}-{slot}"

    def close(self) -> None:
        """End the helpers once every request submitted is answered."""
        with self._lock:
            threads, self._threads = self._threads, []
        for _ in threads:
            self._requests.put(None)
        for thread in threads:
            thread.join()
        for slot, helper in enumerate(self._helpers):  # never given a request
            if helper is not None:
                self._stop(helper, kill=False)
                self._helpers[slot] = None

    # --- what differs from one kind of helper to the next ---------------------------------

    @abstractmethod
    def _start(self) -> HelperProcess:
        """A new helper, started by exec (OSError if it does not start)."""

    def _message(self, slot: int, helper: HelperProcess, request: R) -> object:
        """What is sent to `helper` for `request`."""
        return request

    def _reply(self, slot: int, helper: HelperProcess, reply: Any) -> tuple[str, Any]:
        """A reply as received: (outcome, payload); outcome "error": payload is raised."""
        outcome, payload = reply
        return outcome, payload

    @abstractmethod
    def _died(
        self, request: R, code: int | None, error: BaseException, *, started: bool
    ) -> BaseException:
        """The error of `request`, whose helper died (`started`, with exit `code`) or did
        not start (`error`)."""

    def _on_serve(self, slot: int) -> None:
        """What a slot's thread does first."""

    # --- the slots' threads ---------------------------------------------------------------

    def _stop(self, helper: HelperProcess, *, kill: bool) -> int | None:
        return helper.stop(kill=kill, farewell=self.FAREWELL, patience=self.STOP_PATIENCE)

    def _serve(self, slot: int) -> None:
        self._on_serve(slot)
        sent: Sent = deque()  # the requests the helper holds, in its order
        ending = False
        try:
            while sent or not ending:
                # The next request goes to the helper before its last reply is received
                # here: it works on while this thread waits for the GIL to take the reply in.
                while not ending and len(sent) < self.AHEAD:
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
            helper, self._helpers[slot] = self._helpers[slot], None
            if helper is not None:
                self._stop(helper, kill=False)

    def _send_last(self, slot: int, sent: Sent, *, retry: bool = True) -> None:
        """Send the last request of `sent` to the slot's helper (starting one if none runs);
        if that fails, _helper_gone. With REPLACES_IDLE, a helper found dead while it held
        nothing costs no request: the request goes to a new one."""
        idle = self.REPLACES_IDLE and len(sent) == 1
        try:
            helper = self._helpers[slot]
            if idle and helper is not None and helper.poll() is not None:
                self._stop(helper, kill=True)  # ended while idle: replaced
                helper = self._helpers[slot] = None
            if helper is None:
                helper = self._helpers[slot] = self._start()
            send(helper.requests, self._message(slot, helper, sent[-1][1]))
        except (OSError, ValueError, EOFError, pickle.UnpicklingError) as exc:
            if idle and retry and self._helpers[slot] is not None:
                gone, self._helpers[slot] = self._helpers[slot], None
                assert gone is not None
                self._stop(gone, kill=True)
                self._send_last(slot, sent, retry=False)
                return
            self._helper_gone(slot, sent, exc)

    def _receive_first(self, slot: int, sent: Sent) -> None:
        """The helper's reply to the first request of `sent`, set on its future; if the
        helper dies on it, _helper_gone."""
        future = sent[0][0]
        helper = self._helpers[slot]
        started = time.thread_time()
        try:
            assert helper is not None
            outcome, payload = self._reply(slot, helper, pickle.load(helper.replies))
        except (OSError, EOFError, pickle.UnpicklingError, ValueError, AssertionError) as exc:
            self._helper_gone(slot, sent, exc)
            return
        except BaseException as exc:  # the request's outcome, whatever it is
            sent.popleft()
            future.set_exception(exc)
            return
        finally:
            self._receiving_cpu[slot] += time.thread_time() - started
        sent.popleft()
        if outcome == "error":
            future.set_exception(payload)
        else:
            future.set_result(payload)

    def _helper_gone(self, slot: int, sent: Sent, error: BaseException) -> None:
        """The slot's helper died (or did not start): the request it was on, the first of
        `sent`, fails (_died); the others go to a new helper."""
        helper, self._helpers[slot] = self._helpers[slot], None
        code = None if helper is None else self._stop(helper, kill=True)
        future, request = sent.popleft()
        future.set_exception(self._died(request, code, error, started=helper is not None))
        others = list(sent)
        sent.clear()
        for item in others:
            sent.append(item)
            self._send_last(slot, sent)


# --- one pool per process, kept from batch to batch ---------------------------------------


class _Pool(Protocol):
    count: int

    def close(self) -> None: ...

    def pipe_fds(self) -> list[int]: ...


P = TypeVar("P", bound=_Pool)


class KeptPool(Generic[P]):
    """This process's pool of one kind: made by the first batch that wants it (make(count))
    and kept for the next ones (a process running batch after batch pays the helpers' start
    once); made anew, larger, for a batch that asks for more. It ends with the process; a
    forked child forgets it (the pool's threads and helpers are its parent's) and closes its
    copies of the helpers' pipes (a helper sees the end of its input when the parent closes
    its own, whatever children the parent forked since)."""

    def __init__(self, make: Callable[[int], P]):
        self._make = make
        self._pool: P | None = None
        self._lock = threading.Lock()
        _KEPT.append(self)
        atexit.register(self.close)
        os.register_at_fork(after_in_child=self._forget)

    def get(self, count: int) -> P:
        with self._lock:
            if self._pool is None or self._pool.count < count:
                if self._pool is not None:
                    self._pool.close()
                self._pool = self._make(count)
            return self._pool

    def running(self) -> int:
        """How many helpers the pool has (0 before a batch made it)."""
        with self._lock:
            return 0 if self._pool is None else self._pool.count

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    def _forget(self) -> None:
        """In a forked child: the pool dropped, and the descriptors of its pipes closed here
        (not its files: a thread of the parent may have been writing one as it forked). The
        pool stays referenced, so that its files never close those numbers again once
        other files have them."""
        pool, self._pool = self._pool, None
        self._lock = threading.Lock()
        if pool is not None:
            _FORGOTTEN.append(pool)
            for fd in pool.pipe_fds():
                with suppress(OSError):
                    os.close(fd)


_KEPT: list[KeptPool[Any]] = []  # every kind's, in the order they were made
_FORGOTTEN: list[Any] = []  # in a forked child: the parent's pools (see KeptPool._forget)


def close_kept_pools() -> None:
    """End this process's kept pools, as its exit does: for a forked child, which leaves by
    os._exit, without the exit handlers."""
    for kept in reversed(_KEPT):
        kept.close()
