"""Prepared meshes handed from reading processes through shared memory
(voxelizer/batch/shared_meshes.py): the arrays arrive as read-only views of the region, a
block is written again only once no view of it is left here, blocks are reused (the memory
taken stays that of the meshes held at once), a mesh that does not fit crosses the pipe, and
a region has no name anywhere (nothing to leave behind)."""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import FrameType

import numpy as np
import pytest

from voxelizer.batch import engine
from voxelizer.batch import readers as readers_module
from voxelizer.batch.readers import LoadProcesses, prepared_mesh
from voxelizer.batch.shared_meshes import (
    ALIGNMENT,
    INLINE_BYTES,
    SHARED,
    ReceivingRegion,
    WritingRegion,
    shared_memory_available,
)
from voxelizer.errors import MeshError
from voxelizer.io import load_mesh
from voxelizer.options import Options

from ..helpers import shared_model

OPTIONS = Options.create(32, variant="branchless", fill_mode="parity", mode="solid")


def test_this_system_has_shared_memory():
    """The tests below run where batches use it (Linux)."""
    assert shared_memory_available()


@pytest.fixture()
def region():
    """(writer, reader, fd) of a 64 MiB region: both sides in this process."""
    fd = os.memfd_create("voxelizer-test")
    os.ftruncate(fd, 64 << 20)
    yield WritingRegion(fd), ReceivingRegion(fd), fd
    os.close(fd)


def cross(writer: WritingRegion, reader: ReceivingRegion, message: object) -> tuple[object, object]:
    """(what was sent, what arrived) for `message`, through pickling as through a pipe."""
    sent = writer.encode(message)
    wire = pickle.loads(pickle.dumps(sent, protocol=5))
    return sent, reader.decode(wire) if wire[0] == SHARED else wire


@pytest.fixture(scope="module")
def meshes():
    return [prepared_mesh(shared_model(name), OPTIONS, make_soup=True) for name in MODELS]


MODELS = ("bunny.ply", "dragon.ply", "torus.stl")


def test_a_mesh_arrives_as_read_only_views_equal_to_its_arrays(region, meshes):
    writer, reader, _ = region
    mesh = meshes[0]
    sent, (outcome, (arrived, seconds)) = cross(writer, reader, ("mesh", (mesh, 0.5)))
    assert sent[0] == SHARED and len(pickle.dumps(sent)) < 20_000  # the arrays stay out
    assert outcome == "mesh" and seconds == 0.5
    for name in ("vertices", "faces", "indices", "bounds", "axis_areas", "used"):
        here, there = getattr(mesh, name), arrived.__dict__[name]
        assert np.array_equal(here, there) and here.dtype == there.dtype, name
        assert not there.flags.writeable and not there.flags.owndata, name
    (key, placed), (soup_key, soup) = arrived._memo.placed, arrived._memo.soup
    assert key == mesh._memo.placed[0] and soup_key == mesh._memo.soup[0]
    assert np.array_equal(placed[0], mesh._memo.placed[1][0])
    assert np.array_equal(soup, mesh._memo.soup[1])


def walked(value: object) -> int:
    """The calls of a walk through `value` that enters every tuple."""
    return 1 + (sum(walked(item) for item in value) if isinstance(value, tuple) else 0)


def test_a_mesh_is_rebuilt_with_little_python_work(region, meshes):
    """The thread that receives meshes shares the GIL with the device's thread: rebuilding
    one runs no Python function for each array (numpy's own unpickling calls one, and
    rebuilds the dtype), none to watch its block (weakref.finalize is Python), and freezing
    its arrays walks no cache's key (hashable: no array in it)."""
    writer, reader, _ = region
    mesh = meshes[0]
    sent = writer.encode(("mesh", (mesh, 0.0)))
    wire = pickle.loads(pickle.dumps(sent, protocol=5))
    assert b"_frombuffer" not in wire[4]  # numpy's Python reconstruction is not named
    large = [a for a in arrays_in(mesh.__dict__) if a.nbytes >= INLINE_BYTES]
    small = [a for a in arrays_in(mesh.__dict__) if a.nbytes < INLINE_BYTES]
    assert small and len(wire[3]) == len(large)  # a bound, an origin: in the message
    calls: Counter[str] = Counter()

    def count(frame: FrameType, event: str, _: object) -> None:
        name = frame.f_code.co_name
        if event == "call" and not name.startswith("<"):  # a Python function (but a
            calls[name] += 1  # comprehension, a function of its own before Python 3.12)

    sys.setprofile(count)
    try:
        _, (arrived, _) = reader.decode(wire)
    finally:
        sys.setprofile(None)
    state = arrived.__dict__
    given = ("vertices", "faces", "parts", "appearance")
    memo = arrived._memo
    made = [entry[1] for entry in (memo.placed, memo.soup, *memo.kept.values()) if entry]
    walks = [walked(v) for k, v in state.items() if k not in given and v is not memo]
    freezes = sum(walks) + 1 + walked(tuple(made))  # the memo, then what it keeps
    assert calls == Counter(decode=1, __setstate__=1, _freeze=freezes)
    for array in arrays_in(state):
        assert not array.flags.writeable


def arrays_in(value: object) -> list[np.ndarray]:
    """The numpy arrays in `value`: a dict's values, tuples, an object's attributes."""
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, dict):
        return [a for item in value.values() for a in arrays_in(item)]
    if isinstance(value, tuple):
        return [a for item in value for a in arrays_in(item)]
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return arrays_in(vars(value))
    return []


def test_a_view_kept_alive_is_never_written_over(region, meshes):
    writer, reader, _ = region
    _, (_, (first, _)) = cross(writer, reader, ("mesh", (meshes[0], 0.0)))
    kept = first._memo.soup[1][100:200]  # as the device's thread might keep one
    expected = kept.copy()
    del first
    gc.collect()
    assert reader.take_freed() == []  # the view holds its block
    offsets = []
    for index in range(12):  # other meshes cross, each dropped and its block freed
        sent, arrived = cross(writer, reader, ("mesh", (meshes[1 + index % 2], 0.0)))
        offsets.append(sent[1])
        del arrived
        gc.collect()
        writer.release(reader.take_freed())
    assert np.array_equal(kept, expected)
    assert 0 not in offsets  # the kept view's block (the first) was never given again
    del kept
    gc.collect()
    freed = reader.take_freed()
    assert freed == [0]
    writer.release(freed)
    sent, _ = cross(writer, reader, ("mesh", (meshes[0], 0.0)))
    assert sent[1] == 0  # now it is


def test_blocks_are_reused_and_memory_stays_bounded(region, meshes):
    writer, reader, fd = region
    sizes = set()
    for index in range(60):
        sent, arrived = cross(writer, reader, ("mesh", (meshes[index % 3], 0.0)))
        assert sent[0] == SHARED
        sizes.add(sent[2])
        del arrived
        writer.release(reader.take_freed())
    assert writer.held_bytes == 0
    taken = os.fstat(fd).st_blocks * 512  # the region's memory: the pages ever written
    assert taken <= max(sizes) + 4096


def test_blocks_held_at_once_are_distinct_and_freed_in_any_order(region):
    writer, reader, _ = region
    arrays = [np.full(1000 * (i + 1), i, np.uint8) for i in range(4)]
    crossed = [cross(writer, reader, ("mesh", array)) for array in arrays]
    sent = [message for message, _ in crossed]
    arrivals: list[object] = [arrived for _, (_, arrived) in crossed]
    del crossed
    starts = [message[1] for message in sent]
    ends = [message[1] + message[2] for message in sent]
    assert all(start % ALIGNMENT == 0 for start in starts)
    assert all(ends[i] <= starts[i + 1] for i in range(3))
    for arrived, array in zip(arrivals, arrays):
        assert np.array_equal(arrived, array)
    del arrived
    for index in (2, 0, 3, 1):  # freed out of order: the free space joins up again
        arrivals[index] = None
        gc.collect()
        freed = reader.take_freed()
        assert freed == [starts[index]]
        writer.release(freed)
    assert writer.held_bytes == 0
    sent, _ = cross(writer, reader, ("mesh", np.zeros(60 << 20, np.uint8)))
    assert sent[0] == SHARED and sent[1] == 0  # one block again: all of it free, joined


def test_what_does_not_fit_crosses_whole():
    fd = os.memfd_create("voxelizer-test")
    os.ftruncate(fd, 4096)
    try:
        writer, reader = WritingRegion(fd), ReceivingRegion(fd)
        big = np.arange(10_000, dtype=np.float64)
        sent, arrived = cross(writer, reader, ("mesh", big))
        assert sent[0] == "mesh" and np.array_equal(arrived[1], big)  # pickled whole
        error = ("error", MeshError("bad.ply: cannot read"))
        assert writer.encode(error) is error  # no arrays: as it is
    finally:
        os.close(fd)


def memfd_links(pid: int) -> list[str]:
    """The regions a process holds open (none once it has ended)."""
    links = []
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:  # gone, or a zombie's
        return []
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if "voxelizer-meshes" in target:
            links.append(target)
    return links


def region_holding(array: np.ndarray) -> str | None:
    """The inode of the region whose mapping here holds `array`'s memory, or None."""
    address = array.__array_interface__["data"][0]
    for line in Path("/proc/self/maps").read_text().splitlines():
        span, _, _, _, inode, *name = line.split()
        low, high = (int(end, 16) for end in span.split("-"))
        if low <= address < high:
            return inode if "memfd:voxelizer-meshes" in " ".join(name) else None
    return None


def mapped(inode: str) -> bool:
    """Whether a region of this inode is still mapped here."""
    return any(
        line.split()[4] == inode and "memfd:voxelizer-meshes" in line
        for line in Path("/proc/self/maps").read_text().splitlines()
    )


@pytest.mark.parametrize(("shared_memory", "fork"), [(True, True), (True, False), (False, True)])
def test_helpers_hand_meshes_over_and_reuse_their_regions(monkeypatch, shared_memory, fork):
    """Forked or exec'd helpers (the region inherited, or passed), or none through the pipe."""
    monkeypatch.setattr(readers_module, "fork_allowed", lambda: fork)
    shm_before = set(os.listdir("/dev/shm"))
    readers = LoadProcesses(1, shared_memory=shared_memory)
    try:
        assert readers.forked == int(fork)
        assert readers.wait_started(120)
        first, _ = readers.submit(shared_model("bunny.ply"), OPTIONS).result(timeout=120)
        kept, expected = first.indices[:50], first.indices[:50].copy()
        del first
        addresses = set()
        for index in range(20):
            path = shared_model(MODELS[index % 3])
            mesh, _ = readers.submit(path, OPTIONS).result(timeout=120)
            assert mesh.triangle_count == load_mesh(path).triangle_count
            addresses.add(mesh.vertices.__array_interface__["data"][0])
            del mesh
        assert np.array_equal(kept, expected)
        (pid,) = readers.helper_pids()
        regions = memfd_links(pid)
        region = region_holding(kept)
        if shared_memory:
            assert readers.shared_replies() == 21 and region is not None
            assert len(addresses) <= 4  # the same few blocks, over and over
            # named nowhere (a forked one also inherits regions mapped here before it forked)
            assert regions and set(regions) == {"/memfd:voxelizer-meshes (deleted)"}
        else:
            assert readers.shared_replies() == 0 and region is None
        assert readers.receiving_cpu_seconds() > 0
    finally:
        readers.close()
    # No region named in /dev/shm. (Multiprocessing's semaphores, sem.mp-*, come and go
    # there with other processes' pools: the tests running beside this one.)
    left = set(os.listdir("/dev/shm")) - shm_before
    assert {name for name in left if not name.startswith("sem.mp-")} == set()
    if region is not None:
        assert mapped(region)  # the region lives on while a view of it does
        del kept
        gc.collect()
        assert not mapped(region)


@pytest.mark.parametrize(
    ("cores", "workers", "shared", "expected"),
    [
        (4, 1, True, 0),  # a small host: the loader threads read
        (8, 1, True, 6),  # all cores but the batch's two
        (16, 1, True, 14),
        (16, 2, True, 7),
        (16, 8, True, 0),  # one core each: none
        (256, 1, True, 32),  # the cap
        (16, 1, False, 8),  # meshes pickled through the pipes: half the cores, up to 8
        (8, 1, False, 4),
    ],
)
def test_reading_processes_by_default(monkeypatch, cores, workers, shared, expected):
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    monkeypatch.setattr(engine, "shared_memory_available", lambda: shared)
    assert engine.default_load_processes(workers) == expected


KILLED = """
import sys
from voxelizer.batch.readers import LoadProcesses
from voxelizer.options import Options
readers = LoadProcesses(2)
assert readers.forked == 2 and readers.wait_started(120)
options = Options.create(32)
for _ in range(4):
    readers.submit(sys.argv[1], options).result(timeout=120)
print(*readers.helper_pids(), flush=True)
while True:  # meshes crossing when the kill comes
    readers.submit(sys.argv[1], options).result(timeout=120)
"""


def named_shared_files(pid: int) -> list[str]:
    """The files under /dev/shm that a process holds open or has mapped (none once it has
    ended)."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
        maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:  # gone
        return []
    paths = [line.split(maxsplit=5)[5] for line in maps if len(line.split(maxsplit=5)) == 6]
    for fd in fds:
        try:
            paths.append(os.readlink(fd))
        except OSError:  # closed meanwhile
            continue
    return [path for path in paths if path.startswith("/dev/shm/")]


def test_a_batch_killed_leaves_nothing_behind(tmp_path):
    """SIGKILL to the batch's process alone: its helpers end (their input closed) and their
    regions with them; none ever had a name in /dev/shm or elsewhere."""
    script = tmp_path / "killed.py"
    script.write_text(KILLED)
    tree = str(Path(__file__).resolve().parents[2])
    process = subprocess.Popen(
        [sys.executable, str(script), str(shared_model("bunny.ply"))],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([tree, os.environ.get("PYTHONPATH", "")])},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    pids = [int(pid) for pid in process.stdout.readline().split()]
    assert len(pids) == 2
    for pid in pids:
        assert memfd_links(pid) == ["/memfd:voxelizer-meshes (deleted)"]
    # Named in /dev/shm, a region would be open or mapped there by the batch's processes
    # while meshes cross. (Comparing /dev/shm's listing before and after would also count
    # what other processes on the machine make meanwhile: multiprocessing's semaphores.)
    for pid in [process.pid, *pids]:
        assert named_shared_files(pid) == [], pid
    process.kill()
    process.wait(timeout=30)
    deadline = time.monotonic() + 30
    while any(memfd_links(pid) for pid in pids):
        assert time.monotonic() < deadline, "a helper still holds its region"
        time.sleep(0.05)


def test_without_shared_memory_meshes_cross_the_pipes(monkeypatch):
    """A system without memfd_create (not Linux): the helpers pickle meshes as they did."""
    monkeypatch.setattr(readers_module, "shared_memory_available", lambda: False)
    readers = LoadProcesses(1)
    try:
        assert not readers.shared_memory
        path = shared_model("torus.stl")
        mesh, _ = readers.submit(path, OPTIONS).result(timeout=120)
        assert np.array_equal(mesh.faces, load_mesh(path).faces)
        assert readers.shared_replies() == 0 and region_holding(mesh.vertices) is None
    finally:
        readers.close()
