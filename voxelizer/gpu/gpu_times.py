"""GPU milliseconds per label of one submission, from its Vulkan timestamps (gpu/commands.py
writes them): taken from the device only where someone may look at them, and turned into
milliseconds only when someone does."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping

import numpy as np


class GpuTimes(Mapping[str, float]):
    """GPU milliseconds per label of one submission (Vulkan timestamps), read from the device
    when first looked at: a caller that never looks costs no read. The sequence takes them
    (`fetch`: the raw timestamps, a copy of a few bytes) before its next submission or its
    destroy overwrites them, while they are held; they become milliseconds when looked at
    (often on another thread than the device's, or never)."""

    __slots__ = ("__weakref__", "_bits", "_fetch", "_labels", "_lock", "_period_ns", "_ticks",
                 "_times")  # fmt: skip

    def __init__(
        self,
        fetch: Callable[[], bytes],
        lock: threading.Lock,
        labels: tuple[str, ...],
        *,
        bits: int,
        period_ns: float,
    ):
        self._fetch: Callable[[], bytes] | None = fetch  # the raw timestamps from the device
        self._lock = lock  # the sequence's: against another thread's first look
        self._labels = labels
        self._bits = bits
        self._period_ns = period_ns
        self._ticks: bytes | None = None  # the raw timestamps, once fetched
        self._times: dict[str, float] | None = None

    def fetch(self) -> None:
        """Take the raw timestamps from the device now, if not yet (before the sequence's
        next submission overwrites them)."""
        if self._fetch is not None:
            with self._lock:
                fetch = self._fetch  # (None once another thread has fetched them)
                if fetch is not None:
                    self._ticks = fetch()
                    self._fetch = None  # (only now: a look outside the lock finds the ticks)

    def read(self) -> dict[str, float]:
        """The times as a dict (read from the device now, the first time)."""
        times = self._times
        if times is None:
            self.fetch()
            assert self._ticks is not None
            times = self._times = milliseconds(
                self._ticks, self._labels, self._bits, self._period_ns
            )
        return times

    def __getitem__(self, label: str) -> float:
        return self.read()[label]

    def __iter__(self) -> Iterator[str]:
        return iter(self.read())

    def __len__(self) -> int:
        return len(self.read())

    def __repr__(self) -> str:
        return f"GpuTimes({self.read()!r})"

    def __reduce__(self) -> tuple[type, tuple[dict[str, float]]]:
        """Pickled and copied as the dict of its times (read now)."""
        return dict, (self.read(),)


def milliseconds(
    ticks: bytes, labels: tuple[str, ...], bits: int, period_ns: float
) -> dict[str, float]:
    """GPU milliseconds per label (summed where a label repeats) from the raw timestamps of
    a submission (one uint64 per label, the counter `bits` wide: wrapping as it does)."""
    mask = (1 << bits) - 1
    values = [tick & mask for tick in np.frombuffer(ticks, np.uint64).tolist()]
    times: dict[str, float] = {}
    for label, before, after in zip(labels[1:], values, values[1:]):
        times[label] = times.get(label, 0.0) + ((after - before) & mask) * period_ns / 1e6
    return times
