"""Prepared meshes handed from reading processes to the batch's process through shared memory.

A pickled mesh of 10^5 triangles is megabytes through a pipe: the batch's process would
read and copy them (docs/benchmarks.md, "Receiving meshes"; part of it holding the GIL that the
device's thread needs between its Vulkan calls). Instead each reading process has a region
of shared memory of its own: it copies the mesh's arrays there (pickle protocol 5's
out-of-band buffers: the arrays, but those of a few bytes) and sends only the rest of the
pickle and where the arrays lie. The batch's process rebuilds the Mesh over views of the
region, without copying, with as little Python work as it can (_ArrayPickler): it does so
on a thread that shares the GIL with the device's.

Lifetime: every array rebuilt from one mesh is a view of one block (a read-only numpy array
over the region, which numpy keeps as the base of each view), so the block lives as long as
any of them does. A weak reference's callback, run when the last view is gone, whatever
dropped it, marks it freed here; the freed blocks go to the reading process with its next
request, and only then may it write there again. No caller has anything to release.

A region is anonymous memory (Linux memfd_create): no name in any file system, gone when the
last process holding it ends, however it ends (Ctrl-C, SIGKILL). The batch's process makes
it and hands it to the reading process (inherited by a forked one, passed to an exec'd one);
a replacement reading process gets a new region, while the old one lives on in the views
still using it. Its size is address space only: memory is taken by the pages written, and
freed blocks are reused lowest first, so it stays near the most the batch holds at once.
Where the system has no memfd_create, or a mesh does not fit in what is free, the mesh
crosses the pipe pickled, as a whole.

The same regions serve the other way round: the batch's process copies the arrays of each
result it hands to a writing process (voxelizer.batch.write_processes) into that writer's
region (WritingRegion here, ReceivingRegion there), and the writer tells with each reply
which blocks it no longer reads.
"""

from __future__ import annotations

import bisect
import functools
import io
import mmap
import os
import pickle
import sys
import weakref
from collections import deque
from typing import Any, TypeVar

import numpy as np

PROTOCOL = 5
# Address space, not memory: pages are taken only once written (see the module's docstring).
REGION_BYTES = 1 << 30
ALIGNMENT = 64  # each array starts on a cache line (and any dtype's alignment)
INLINE_BYTES = 256  # a smaller array crosses in the message itself
NUMBERS = frozenset("biufc")  # the dtype kinds whose arrays _ArrayPickler hands over
SHARED = "shared"  # the first item of a reply whose arrays lie in the region

# ("shared", block offset, block size, [(start, size) of each buffer in the block], pickle)
SharedReply = tuple[str, int, int, list[tuple[int, int]], bytes]


def shared_memory_available() -> bool:
    """Whether regions can be made here: Linux's memfd_create, and a 64-bit address space."""
    return hasattr(os, "memfd_create") and sys.maxsize > 1 << 32


def new_region_fd() -> int | None:
    """A new region's file descriptor (REGION_BYTES of anonymous memory, none of it taken
    yet), or None where the system has no such memory or refuses it (then meshes cross
    the pipe)."""
    if not shared_memory_available():
        return None
    try:
        fd = os.memfd_create("voxelizer-meshes", os.MFD_CLOEXEC)
    except OSError:
        return None
    try:
        os.ftruncate(fd, REGION_BYTES)
    except OSError:
        os.close(fd)
        return None
    return fd


class ReceivingRegion:
    """The batch's side of a region: read-only, meshes rebuilt over it (decode) and the
    blocks their arrays no longer use (take_freed), for the reading process to reuse."""

    def __init__(self, fd: int):
        self._map = mmap.mmap(fd, os.fstat(fd).st_size, access=mmap.ACCESS_READ)
        self._freed: deque[int] = deque()  # appended by _block_freed, in whatever thread
        # Each block's weak reference (kept: its callback runs only while it lives) and
        # offset, by the reference's id (a weak reference to an array does not hash).
        self._blocks: dict[int, tuple[weakref.ref[np.ndarray], int]] = {}
        # (not a bound method: the region itself is not kept alive by its blocks' references)
        self._on_freed = functools.partial(_block_freed, self._blocks, self._freed)

    @classmethod
    def adopt(cls, fd: int | None) -> ReceivingRegion | None:
        """The region of `fd` mapped here, or None (no fd, or it cannot be mapped); `fd`
        stays open (the caller hands it to the reading process)."""
        return _mapped(cls, fd)

    def decode(self, reply: SharedReply) -> Any:
        """The object of a shared reply, its arrays views of the region (read-only)."""
        _, offset, size, spans, data = reply
        block = np.frombuffer(self._map, np.uint8, count=size, offset=offset)
        # A weak reference's callback, not weakref.finalize: this runs for every message
        # on a thread that shares the GIL with the device's, and a finalizer costs several
        # times as much Python work.
        watch = weakref.ref(block, self._on_freed)
        self._blocks[id(watch)] = (watch, offset)
        return pickle.loads(data, buffers=[block[start : start + n] for start, n in spans])

    def take_freed(self) -> list[int]:
        """The offsets of the blocks freed since the last call (each given once)."""
        freed = []
        while self._freed:  # (taken by one thread only: the one serving the region)
            freed.append(self._freed.popleft())
        return freed


def _block_freed(
    blocks: dict[int, tuple[weakref.ref[np.ndarray], int]],
    freed: deque[int],
    block: weakref.ref[np.ndarray],
) -> None:
    """A block's last view is gone: its offset goes to the blocks freed."""
    freed.append(blocks.pop(id(block))[1])


class WritingRegion:
    """The side of a region that writes: blocks allocated lowest first, freed only when the
    side that reads says so (release). A reading process writes its meshes so; the batch's
    process writes so the results it hands to its writing processes
    (voxelizer.batch.write_processes), which read them through a ReceivingRegion."""

    def __init__(self, fd: int):
        size = os.fstat(fd).st_size
        self._map = mmap.mmap(fd, size)
        # The region as bytes to numpy, which copies into it without the GIL (an mmap's own
        # slice assignment copies holding it, while the device's thread waits for it).
        self._bytes = np.frombuffer(self._map, np.uint8)
        self._free: list[tuple[int, int]] = [(0, size)]  # (start, end), sorted, disjoint
        self._held: dict[int, int] = {}  # block offset -> size

    @classmethod
    def adopt(cls, fd: int | None) -> WritingRegion | None:
        """The region of `fd` mapped here, or None; `fd` is closed either way (the mapping
        keeps the memory)."""
        if fd is None:
            return None
        try:
            return cls.mapped(fd)
        finally:
            os.close(fd)

    @classmethod
    def mapped(cls, fd: int | None) -> WritingRegion | None:
        """The region of `fd` mapped here, or None (no fd, or it cannot be mapped); `fd`
        stays open (the caller hands it to the process that reads the region)."""
        return _mapped(cls, fd)

    @property
    def held_bytes(self) -> int:
        """The bytes of the blocks the batch's process may still be reading."""
        return sum(self._held.values())

    def release(self, offsets: list[int] | tuple[int, ...]) -> None:
        """The batch's process no longer reads these blocks: they may be written again."""
        for offset in offsets:
            size = self._held.pop(offset, None)
            if size is not None:
                self._give_back(offset, offset + size)

    def encode(self, message: object) -> object:
        """What to send for `message`: a SharedReply with its arrays copied into a new block,
        or `message` itself where it has none or they do not fit in what is free."""
        buffers: list[pickle.PickleBuffer] = []
        pickled = io.BytesIO()
        _ArrayPickler(pickled, protocol=PROTOCOL, buffer_callback=buffers.append).dump(message)
        data = pickled.getvalue()
        if not buffers:
            return message
        raws = [buffer.raw() for buffer in buffers]
        spans, size = [], 0
        for raw in raws:
            spans.append((size, raw.nbytes))
            size += -(-raw.nbytes // ALIGNMENT) * ALIGNMENT
        size = max(size, ALIGNMENT)
        offset = self._allocate(size)
        if offset is None:
            return message
        for raw, (start, n) in zip(raws, spans):
            start += offset
            self._bytes[start : start + n] = np.frombuffer(raw, np.uint8)
        return (SHARED, offset, size, spans, data)

    def _allocate(self, size: int) -> int | None:
        """The lowest free block of `size` bytes, now held, or None."""
        for index, (start, end) in enumerate(self._free):
            if end - start >= size:
                if end - start == size:
                    del self._free[index]
                else:
                    self._free[index] = (start + size, end)
                self._held[start] = size
                return start
        return None

    def _give_back(self, start: int, end: int) -> None:
        index = bisect.bisect(self._free, (start, end))
        if index < len(self._free) and self._free[index][0] == end:  # joins the next
            end = self._free.pop(index)[1]
        if index > 0 and self._free[index - 1][1] == start:  # joins the previous
            start = self._free[index - 1][0]
            self._free[index - 1] = (start, end)
        else:
            self._free.insert(index, (start, end))


class _ArrayPickler(pickle.Pickler):
    """A pickler that hands each numpy array (of numbers, laid out in C or Fortran order)
    over as numpy's own constructor over its buffer: out of band (in the region), or its
    bytes in the message for an array under INLINE_BYTES (a bound, an origin: a block's
    span, view and copy each cost more than its bytes), its dtype by name (exact for
    numbers: byte order and size). Unpickled, the array is made in C, read-only; numpy's
    own reduction would call a Python function and rebuild the dtype object for each
    array, on the thread that receives the message."""

    def reducer_override(self, obj: object) -> Any:
        if type(obj) is np.ndarray and obj.dtype.kind in NUMBERS:
            flags = obj.flags
            order = "C" if flags.c_contiguous else "F" if flags.f_contiguous else None
            if order is not None:
                small = obj.nbytes < INLINE_BYTES
                buffer = obj.tobytes(order="A") if small else pickle.PickleBuffer(obj.data)
                return np.ndarray, (obj.shape, obj.dtype.str, buffer, 0, None, order)
        return NotImplemented  # pickled as numpy pickles it


Region = TypeVar("Region", ReceivingRegion, WritingRegion)


def _mapped(kind: type[Region], fd: int | None) -> Region | None:
    """A region of `kind` over `fd`, or None (no fd, or it cannot be mapped); `fd` stays
    open."""
    if fd is None:
        return None
    try:
        return kind(fd)
    except (OSError, ValueError):
        return None
