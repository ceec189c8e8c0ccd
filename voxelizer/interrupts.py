"""Ctrl-C (and SIGTERM, where the program takes it as one) held back while a resource is
created and handed to its owner: a Vulkan object (gpu/), a temporary file (io/output.py).

A KeyboardInterrupt raised between a vkCreate… call returning and its handle being stored
where the owner's destroy finds it would leak the object: the validation layer then reports
it when the device is destroyed (at exit, after every interrupted first call of a command).
A temporary file created but not yet known to the cleanup would be left behind. Such short
stretches run with SIGINT recorded instead, and the KeyboardInterrupt is raised when they
end.

SIGTERM is what `timeout`, `kill`, Slurm, Kubernetes and systemd send. A program that calls
`terminate_as_interrupt()` (the command does) takes it as a Ctrl-C: `Terminated`, a
KeyboardInterrupt, is raised in the main thread, so that every cleanup written for a Ctrl-C
runs for it too, and it is held back in the same stretches.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class Terminated(KeyboardInterrupt):
    """SIGTERM, taken as a Ctrl-C (terminate_as_interrupt): what ends the work is the same,
    what the program reports can differ (the command exits 143, not 130)."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise Terminated


def terminate_as_interrupt() -> None:
    """From now on SIGTERM raises Terminated in the main thread (where it is not ignored:
    a launcher that ignores it keeps it ignored). Call from the main thread."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
        signal.signal(signal.SIGTERM, _terminate)


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Run the block with a SIGINT (and a SIGTERM taken as one) held until it ends, then
    raise KeyboardInterrupt (Terminated for a SIGTERM). Only the main thread receives these
    signals; in other threads, in a nested block, or for a signal the program handles its
    own way (or ignores), nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    ours = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: _terminate}
    taken = [signum for signum, handler in ours.items() if signal.getsignal(signum) is handler]
    if not taken:
        yield
        return
    held: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        held.append(signum)

    for signum in taken:
        signal.signal(signum, hold)
    try:
        yield
    finally:
        for signum in taken:
            signal.signal(signum, ours[signum])
        if signal.SIGTERM in held:
            raise Terminated
        if held:
            raise KeyboardInterrupt
