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
`if __name__ == "__main__"` guard. The forking, serving, stopping and replacing are
voxelizer.batch.helper_processes', as for the writing processes.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future
from typing import IO, Any

from ..choices import uploads_soup
from ..errors import MeshError, VoxelizerError
from ..io.meshes import MeshLike, load_mesh
from ..mesh import Mesh
from ..options import Options
from ..parallel import keep_freed_memory
from ..placement_kept import kept_holds_part_of, kept_placement
from .helper_processes import (
    REPLIES,
    HelperPool,
    HelperProcess,
    KeptPool,
    PickledOnce,
    exec_main,
    fork_allowed,
    fork_helpers,
    portable,
    start_by_exec,
)
from .helper_processes import serve as helper_serve
from .shared_meshes import (
    SHARED,
    ReceivingRegion,
    WritingRegion,
    shared_memory_available,
)


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
REQUESTS_AHEAD = HelperPool.AHEAD  # requests a helper holds: it reads the next while its
# last mesh crosses
WHAT = "mesh-reading"


def read_ahead(prefetch: int, load_processes: int) -> int:
    """The meshes a worker reads ahead (BatchSettings.prefetch): `prefetch`, and at least
    what keeps each of its reading processes busy (REQUESTS_AHEAD each), the mesh on the
    device and the next."""
    return max(prefetch, REQUESTS_AHEAD * load_processes + 2)


class LoadProcesses(HelperPool[Request, tuple[Mesh, float]]):
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

    KIND = "reader"

    def __init__(self, count: int, *, shared_memory: bool = True):
        count = max(1, count)
        self.shared_memory = shared_memory and shared_memory_available()
        region = ReceivingRegion.adopt if self.shared_memory else None
        forked = (  # before any thread
            fork_helpers(count, _serve_here, what=WHAT, region=region, wide=REPLIES)
            if fork_allowed()
            else []
        )
        super().__init__(count, forked)
        self._shared_replies = [0] * self.count
        self._options: PickledOnce | None = None  # the last options sent, pickled
        self.started = threading.Event()
        self._settled = threading.Event()  # one helper started, or every one failed to
        self._failed_starts = 0
        if forked:
            self.started.set()
            self._settled.set()
        self.start_threads()

    def submit(  # type: ignore[override]
        self, path: str | os.PathLike, options: Options
    ) -> Future[tuple[Mesh, float]]:
        """The mesh of `path` prepared for `options` by the next free helper, and the
        seconds that took."""
        return super().submit((os.fspath(path), options))

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

    def _on_serve(self, slot: int) -> None:
        if self._helpers[slot] is None:  # not forked: started here
            try:
                self._helpers[slot] = self._start()
            except OSError:  # tried again for each request, which fails with the reason
                with self._lock:
                    self._failed_starts += 1
                    if self._failed_starts == self.count:
                        self._settled.set()
            else:
                self._settled.set()

    def _start(self) -> HelperProcess:
        helper = _start(shared_memory=self.shared_memory)
        self.started.set()
        return helper

    def _message(self, slot: int, helper: HelperProcess, request: Request) -> object:
        freed = helper.region.take_freed() if helper.region is not None else []
        path, options = request
        pickled = self._options
        if pickled is None or pickled.value is not options:  # a batch's options: once
            pickled = self._options = PickledOnce(options)
        return (path, pickled, freed)

    def _reply(self, slot: int, helper: HelperProcess, reply: Any) -> tuple[str, Any]:
        if reply[0] == SHARED and helper.region is not None:
            reply = helper.region.decode(reply)  # views of the region, no copy
            self._shared_replies[slot] += 1
        outcome, payload = reply
        return outcome, payload

    def _died(
        self, request: Request, code: int | None, error: BaseException, *, started: bool
    ) -> BaseException:
        return MeshError(
            f"{request[0]}: the reading process died (exit code {code}; "
            f"{error or type(error).__name__})"
        )


def _start(*, shared_memory: bool = True) -> HelperProcess:
    """A helper process started by exec, once it is ready; OSError if it does not start."""
    region = ReceivingRegion.adopt if shared_memory else None
    return start_by_exec(__name__, what=WHAT, region=region, wide=REPLIES)


_kept = KeptPool(lambda count: LoadProcesses(count))


def shared_load_processes(count: int) -> LoadProcesses:
    """This process's helpers, started by the first batch that wants them and kept for the
    next ones (a process running batch after batch pays their start once); more are started
    for a batch that asks for more. They end with the process."""
    return _kept.get(count)


def running_load_processes() -> int:
    """How many helpers this process keeps (0 before a batch started them)."""
    return _kept.running()


def _portable(error: BaseException) -> BaseException:
    """The error itself if it survives pickling, else a MeshError with its words."""
    return portable(error, lambda: MeshError(str(error) or type(error).__name__))


def serve(requests: IO[bytes], replies: IO[bytes], region: WritingRegion | None = None) -> None:
    """A helper's loop: requests (path, options, blocks of the region freed), each answered
    by ("mesh", (Mesh, seconds)) or ("error", exception), until the input ends. With a
    region, a mesh's arrays go there and the reply says where (WritingRegion.encode)."""

    def answer(request: tuple[str, Options, list[int]]) -> object:
        path, options, freed = request
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
        return reply if region is None else region.encode(reply)

    helper_serve(requests, replies, answer)


def _serve_here(requests: IO[bytes], replies: IO[bytes], region_fd: int | None) -> None:
    """A helper, forked or exec'd: file after file, each file's arrays reuse the last one's
    memory; its meshes' arrays go to its region, if it has one."""
    keep_freed_memory()
    serve(requests, replies, WritingRegion.adopt(region_fd))


def main(region_fd: int | None = None) -> None:
    """A helper started by exec (its region's file descriptor, if it has one)."""
    exec_main(_serve_here, region_fd)


if __name__ == "__main__":
    main()
