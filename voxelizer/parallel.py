"""Row-parallel numpy on the host's cores: numpy releases the GIL inside its loops, so
splitting a large array into chunks for a thread pool divides the host work of a
multi-million-triangle mesh (placement, soup gather, staging copies) by the core count."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np

MIN_ROWS = 1 << 18  # below this, one thread: starting the others costs more than it saves
_pool: ThreadPoolExecutor | None = None
_limit: int | None = None
T = TypeVar("T")


@functools.cache
def _threads() -> int:
    return max(1, min(8, os.cpu_count() or 1)) if _limit is None else _limit


def use_threads(count: int | None) -> None:
    """Split work over `count` threads in this process (None: one per core, up to 8): a
    batch's worker processes share the cores."""
    global _limit
    _limit = None if count is None else max(1, int(count))
    _threads.cache_clear()  # (a forked reading process may inherit a count already asked for)


def for_row_chunks(rows: int, work: Callable[[int, int], None], min_rows: int = MIN_ROWS) -> None:
    """Call work(start, stop) over [0, rows) in contiguous chunks, in parallel when large."""
    map_row_chunks(rows, work, min_rows)


def copy_rows(target: np.ndarray, source: np.ndarray, min_rows: int = MIN_ROWS) -> None:
    """target[:] = source (numpy converting the type as it assigns), in row chunks of the
    first axis, in parallel when large."""
    if len(source) < 2 * min_rows:  # one chunk: at once (a staging copy, several a call)
        target[: len(source)] = source
        return

    def copy(start: int, stop: int) -> None:
        target[start:stop] = source[start:stop]

    for_row_chunks(len(source), copy, min_rows)


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(_threads(), thread_name_prefix="voxelizer-rows")
    return _pool


def map_row_chunks(rows: int, work: Callable[[int, int], T], min_rows: int = MIN_ROWS) -> list[T]:
    """work(start, stop) of each contiguous chunk of [0, rows), in order, computed in
    parallel when large (for reductions: the caller combines the chunks' results)."""
    chunks = min(_threads(), rows // min_rows)
    if chunks <= 1:
        return [work(0, rows)]
    pool = _executor()
    bounds = [rows * i // chunks for i in range(chunks + 1)]
    futures = [pool.submit(work, a, b) for a, b in zip(bounds, bounds[1:])]
    return [future.result() for future in futures]  # re-raises a chunk's exception here


def _forget_pool_after_fork() -> None:
    """A forked child has none of the pool's threads, and work queued for them would wait
    forever: the child starts a pool of its own."""
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_pool_after_fork)


# glibc's mallopt parameters (malloc.h): what keep_freed_memory sets.
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_KEPT_BYTES = 1 << 30  # freed memory a process keeps before it gives any back
_HEAP_STEP = 64 << 20  # how much the heap grows by at a time
_LARGEST_FROM_HEAP = 32 << 20  # glibc's upper limit: larger arrays are mapped one by one


@functools.cache
def keep_freed_memory() -> bool:
    """Make this process's allocator keep the memory numpy frees for its next arrays (glibc
    on Linux; elsewhere nothing changes: False). By default glibc maps each array of more
    than 128 KiB-32 MiB anew and gives it back when freed, so every such array of every file
    starts as fresh pages that the kernel faults in one by one, zeroed: a large share of
    reading an STL or an OBJ (measured in docs/benchmarks.md, "Reading at memory speed").
    For a process that handles mesh after mesh (the batch command, its worker and reading
    processes): it keeps up to a GiB it no longer uses. A library call leaves the caller's
    process as it is."""
    import ctypes
    import ctypes.util

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    done = [
        mallopt(_M_MMAP_THRESHOLD, _LARGEST_FROM_HEAP),
        mallopt(_M_TRIM_THRESHOLD, _KEPT_BYTES),
        mallopt(_M_TOP_PAD, _HEAP_STEP),
    ]
    return all(done)
