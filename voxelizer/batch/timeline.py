"""The batch command's start-up timeline: under `voxelize -vv`, one line per milestone
(`voxelize: 0.412 s: device open`), in seconds since the process started.

The milestones are those a batch passes once (the meshes found, the helpers forked, the
device open, its kernels built, the first mesh at the device, the first result written, the
last one, the end): they say where the time before the first result goes. `mark` costs a
comparison while the timeline is off (the library's batches, other verbosities), and marks
nothing in another process (a forked worker or helper inherits this module's state).
"""

from __future__ import annotations

import os
import threading
import time

from ..log import get_logger

_log = get_logger(__name__)


def _process_age() -> float:
    """Seconds since this process started: from the kernel's record of its start (Linux's
    /proc/self/stat, in clock ticks since boot), else 0 (the timeline then starts here)."""
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0


# The process's start on the perf_counter clock, taken once, as the package is imported.
PROCESS_START = time.perf_counter() - _process_age()


class Timeline:
    """Milestones, each logged once, at DEBUG, while on and in the process that turned it on.
    A lock keeps the lines in the order of their times (threads mark too)."""

    def __init__(self) -> None:
        self._pid: int | None = None
        self._marked: set[str] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        """Turn the timeline on for this process (the batch command under -vv)."""
        self._pid = os.getpid()
        self._marked.clear()

    def stop(self) -> None:
        """Turn it off: nothing is marked after this (a thread's milestone included)."""
        with self._lock:
            self._pid = None

    @property
    def on(self) -> bool:
        return self._pid is not None and self._pid == os.getpid()

    def mark(self, milestone: str, detail: str = "") -> None:
        """Log `milestone` (with `detail` after a comma) once: its first time only."""
        if not self.on or milestone in self._marked:
            return
        with self._lock:
            if not self.on or milestone in self._marked:
                return
            self._marked.add(milestone)
            seconds = time.perf_counter() - PROCESS_START
            _log.debug("%.3f s: %s%s", seconds, milestone, f", {detail}" if detail else "")


timeline = Timeline()
