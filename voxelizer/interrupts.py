"""Ctrl-C held back while a resource is created and handed to its owner: a Vulkan object
(gpu/), a temporary file (io/output.py).

A KeyboardInterrupt raised between a vkCreate… call returning and its handle being stored
where the owner's destroy finds it would leak the object: the validation layer then reports
it when the device is destroyed (at exit, after every interrupted first call of a command).
A temporary file created but not yet known to the cleanup would be left behind. Such short
stretches run with SIGINT recorded instead, and the KeyboardInterrupt is raised when they
end.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Run the block with a SIGINT held until it ends, then raise KeyboardInterrupt. Only the
    main thread receives SIGINT; in other threads, in a nested block, or where the program
    handles SIGINT its own way, nothing changes."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    held: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        held.append(signum)

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if held:
            raise KeyboardInterrupt
