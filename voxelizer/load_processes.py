"""Reading meshes in helper processes, for batches on hosts with cores to spare.

Parsing a mesh file is partly Python work. On loader threads it holds the GIL that the
device's thread needs between its Vulkan calls: on a 16-core host, one H100 was fed ~65
meshes/s at 256³ by 8 loader threads and ~125 by 6 helper processes (docs/benchmarks.md,
"Reading processes, dense results as bits, the call's host cost"). A helper is a new
Python (`python -c`, importing this very package and calling main): started by exec, never
as a fork of a process that holds Vulkan objects, so the user's script needs no
`if __name__ == "__main__"` guard; it ignores Ctrl-C (the batch ends it by closing its
input) and sends back each mesh with what a voxelization derives from it on the host
(Mesh pickles its caches).
"""

from __future__ import annotations

import atexit
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from contextlib import suppress
from pathlib import Path
from typing import IO, Any

from .errors import MeshError, VoxelizerError
from .io.meshes import MeshLike, load_mesh
from .mesh import Mesh
from .options import Options
from .parallel import use_threads
from .placement import GridLike, GridPlacement

PROTOCOL = 5


def prepared_mesh(source: MeshLike, grid: GridLike | None, options: dict[str, Any]) -> Mesh:
    """The mesh of `source`, read and checked, with what a voxelization on this grid derives
    from it on the host done now: its uint32 faces, bounds and placed vertices (cached on
    the Mesh, so the call finds them done). A placement that fails is left to the call,
    which reports it as it would have."""
    mesh = load_mesh(source)
    mesh.indices  # noqa: B018 - computed now, cached
    try:
        checked = Options.create(grid, **options)
        placement = GridPlacement.around(mesh, checked.shape, checked.voxel_size, checked.bounds)
        placement.placed_vertices(mesh)
    except VoxelizerError:
        pass
    return mesh


Request = tuple[str, "GridLike | None", dict[str, Any]]  # a path, the grid, the options


class LoadProcesses:
    """`count` helper processes reading files: submit(...) -> Future of (Mesh, seconds).

    Each helper has a thread here that starts it, then hands it one path at a time and
    waits for its mesh (blocking reads release the GIL), so a free helper takes the next
    path. A helper that dies fails its mesh with an error naming it and is replaced for the
    next one. Until one has started (`started`), a batch reads on its threads."""

    def __init__(self, count: int):
        self.count = max(1, count)
        self.started = threading.Event()
        self._settled = threading.Event()  # one helper started, or every one failed to
        self._failed_starts = 0
        self._lock = threading.Lock()
        self._requests: queue.SimpleQueue[tuple[Future[tuple[Mesh, float]], Request] | None]
        self._requests = queue.SimpleQueue()
        self._helpers: list[subprocess.Popen[bytes] | None] = [None] * self.count
        self._threads = [
            threading.Thread(
                target=self._serve, args=(slot,), name=f"voxelizer-reader-{slot}", daemon=True
            )
            for slot in range(self.count)
        ]
        for thread in self._threads:
            thread.start()

    def submit(
        self, path: str | os.PathLike, grid: GridLike | None, options: dict[str, Any]
    ) -> Future[tuple[Mesh, float]]:
        future: Future[tuple[Mesh, float]] = Future()
        self._requests.put((future, (os.fspath(path), grid, options)))
        return future

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
        try:
            self._helpers[slot] = _start()
            self.started.set()
        except OSError:  # tried again for each request, which fails with the reason
            with self._lock:
                self._failed_starts += 1
                if self._failed_starts == self.count:
                    self._settled.set()
        else:
            self._settled.set()
        try:
            while (item := self._requests.get()) is not None:
                future, request = item
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    future.set_result(self._read(slot, request))
                except BaseException as exc:  # the request's outcome, whatever it is
                    future.set_exception(exc)
        finally:
            _stop(self._helpers[slot], kill=False)
            self._helpers[slot] = None

    def _read(self, slot: int, request: Request) -> tuple[Mesh, float]:
        """The helper's answer to one request (starting a helper if none runs): the mesh,
        or the error it raised; MeshError if the helper dies on it (it is replaced)."""
        helper = self._helpers[slot]
        try:
            if helper is None:
                helper = self._helpers[slot] = _start()
                self.started.set()
            assert helper.stdin is not None and helper.stdout is not None
            _send(helper.stdin, request)
            outcome, payload = pickle.load(helper.stdout)
        except (OSError, EOFError, pickle.UnpicklingError, ValueError) as exc:
            code = _stop(helper, kill=True)
            self._helpers[slot] = None
            raise MeshError(
                f"{request[0]}: the reading process died (exit code {code}; "
                f"{exc or type(exc).__name__})"
            ) from exc
        if outcome != "mesh":
            raise payload
        return payload


# The helper imports this very package (whatever the working directory or sys.path of the
# batch's process), then says so.
_HELPER = "import sys; sys.path.insert(0, {!r}); from voxelizer.load_processes import main; main()"


def _start() -> subprocess.Popen[bytes]:
    """A helper process, once it is ready; OSError if it does not start."""
    package_parent = str(Path(__file__).resolve().parent.parent)
    helper = subprocess.Popen(
        [sys.executable, "-c", _HELPER.format(package_parent)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        bufsize=1 << 20,
    )
    assert helper.stdout is not None
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


def _send(channel: IO[bytes], message: object) -> None:
    pickle.dump(message, channel, protocol=PROTOCOL)
    channel.flush()


def _stop(helper: subprocess.Popen[bytes] | None, kill: bool) -> int | None:
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


def serve(requests: IO[bytes], replies: IO[bytes]) -> None:
    """A helper's loop: requests (path, grid, options), each answered by ("mesh", (Mesh,
    seconds)) or ("error", exception), until the input ends."""
    while True:
        try:
            path, grid, options = pickle.load(requests)
        except EOFError:
            return
        started = time.perf_counter()
        try:
            reply: tuple[str, object] = (
                "mesh",
                (prepared_mesh(path, grid, options), time.perf_counter() - started),
            )
        except (VoxelizerError, MemoryError) as exc:
            reply = ("error", _portable(exc))
        except Exception as exc:  # a reader's bug fails this mesh only
            reply = ("error", MeshError(f"{path}: cannot read ({type(exc).__name__}: {exc})"))
        _send(replies, reply)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the batch ends its helpers
    replies = sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write into the replies
    use_threads(1)  # one core per helper: the helpers share the host's cores
    with suppress(BrokenPipeError):  # the batch is gone
        _send(replies, ("ready", None))
        serve(sys.stdin.buffer, replies)


if __name__ == "__main__":
    main()
