"""Turns on the host between the thread that drives a device and a batch's other threads.

Every Python thread of a process shares one GIL. The thread that drives a device gives it
up at each Vulkan call (cffi releases it) and each large numpy copy; a batch's reading and
writing threads, woken by their pipes, take it then and keep it for the whole of their Python
work (rebuilding a mesh, pickling a result), so the device's thread waits for the GIL many
times a mesh, each time for as long as another thread's work lasts (docs/benchmarks.md,
"Datasets": its waits matched its CPU time).

So the Python work takes turns explicitly: the device's thread holds the turn while it
prepares, submits and reads back a mesh (`device_turn`) and lets it go while it blocks on the
GPU (`waiting`); the other threads do their Python work in `other_turn`, which waits, without
the GIL, for the device's thread to block. Their blocking reads stay outside the turn. A
thread that is not the device's gets no-ops from `waiting`, so code that waits may call it
freely; `device_turn` nests.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class HostTurns:
    """One process's turn: a lock, the thread that holds it as the device's, and how deep."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._device_thread: int | None = None
        self._depth = 0

    @contextmanager
    def device_turn(self) -> Iterator[None]:
        """The device's thread works: the other threads' turns wait."""
        me = threading.get_ident()
        if self._device_thread == me:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self._lock.acquire()
        self._device_thread, self._depth = me, 1
        try:
            yield
        finally:
            self._device_thread, self._depth = None, 0
            self._lock.release()

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """The device's thread blocks (for the GPU): the others may take their turns."""
        me = threading.get_ident()
        if self._device_thread != me:
            yield
            return
        depth = self._depth
        self._device_thread, self._depth = None, 0
        self._lock.release()
        try:
            yield
        finally:
            self._lock.acquire()
            self._device_thread, self._depth = me, depth

    @contextmanager
    def other_turn(self) -> Iterator[None]:
        """Python work of another thread: done while the device's thread does not work."""
        if self._device_thread == threading.get_ident():  # (the device's thread itself)
            yield
            return
        with self._lock:
            yield

    def _after_fork(self) -> None:
        """A forked child has only the thread that forked: nobody holds its turn."""
        self._lock = threading.Lock()
        self._device_thread, self._depth = None, 0


TURNS = HostTurns()
os.register_at_fork(after_in_child=TURNS._after_fork)
