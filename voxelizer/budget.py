"""Memory budgets as people write them: "512MiB", "2GiB", "1.5GB", or a plain number of bytes;
and the host memory a dense result needs, checked before the work."""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Sequence

import numpy as np

from .errors import MemoryBudgetError
from .placement import shape_text

# Binary units are powers of 1024, decimal ones powers of 1000; units are case-insensitive.
UNITS = {
    "": 1,
    "b": 1,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*", re.ASCII)


def parse_size(size: int | str) -> int:
    """Bytes in `size`: an int, or a number with an optional unit (B, KiB, MiB, GiB, TiB, kB,
    MB, GB, TB; any case). With a unit larger than a byte the result is rounded down to whole
    bytes. MemoryBudgetError unless it is at least one byte."""
    if isinstance(size, (int, np.integer)) and not isinstance(size, (bool, np.bool_)):
        count = int(size)
    elif isinstance(size, str):
        match = _SIZE.fullmatch(size)
        unit = match.group(2).lower() if match else None
        if unit not in UNITS:
            raise MemoryBudgetError(
                f"cannot read memory size {size!r}: write a number of bytes or a number with a "
                "unit (KiB, MiB, GiB, TiB, kB, MB, GB, TB), e.g. 512MiB or 1.5GB"
            )
        assert match is not None  # a unit in UNITS comes from a match
        from fractions import Fraction  # exact: '1.1GB' is 1,100,000,000 bytes

        value = Fraction(match.group(1)) * UNITS[unit]
        if UNITS[unit] == 1 and value.denominator != 1:
            raise MemoryBudgetError(f"memory size {size!r}: a number of bytes must be whole")
        count = int(value)
    else:
        raise MemoryBudgetError(f"memory size must be an int or a string like '2GiB', not {size!r}")
    if count < 1:
        raise MemoryBudgetError(f"memory size must be at least one byte, not {size!r}")
    return count


_AVAILABLE_FOR_SECONDS = 1.0  # a batch asks before every mesh: the files are read once a second
_available_read: tuple[float, int | None] | None = None


def available_host_memory() -> int | None:
    """Bytes of host memory a new allocation can take now, or None where it cannot be told:
    MemAvailable of /proc/meminfo (free plus reclaimable), else free pages, lowered to what
    the process's cgroup (v2) still allows; read again after a second (reading the three
    files for every mesh of a batch took the device's thread too long: docs/benchmarks.md,
    "Figures behind the code")."""
    global _available_read
    now = time.monotonic()
    if _available_read is not None and now - _available_read[0] < _AVAILABLE_FOR_SECONDS:
        return _available_read[1]
    available = _read_available_host_memory()
    _available_read = (now, available)
    return available


def _read_available_host_memory() -> int | None:
    available: int | None = None
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, OSError, ValueError):
            return None
    try:
        with (
            open("/sys/fs/cgroup/memory.max") as limit,
            open("/sys/fs/cgroup/memory.current") as current,
        ):
            text = limit.read().strip()
            if text != "max":
                available = min(available, int(text) - int(current.read()))
    except (OSError, ValueError):
        pass
    return max(0, available)


def check_dense_fits(shape: Sequence[int], where: str, voxel_bytes: int = 1) -> None:
    """MemoryBudgetError, before any work, unless host memory can hold the dense bool
    (nx, ny, nz) result (nx*ny*nz bytes, or voxel_bytes per voxel); `where` names the
    function that asked."""
    need = math.prod(int(n) for n in shape) * voxel_bytes
    check_host_fits(
        need,
        f"{where}: the dense {shape_text(shape)} voxel array",
        ".svo files and SVOs stay sparse",
    )


def check_host_fits(need: int, what: str, advice: str = "") -> None:
    """MemoryBudgetError, before the allocation, unless host memory can hold `need` bytes
    now; `what` names what needs them (a file being read, an array), `advice` (optional)
    says how to need less."""
    available = available_host_memory()
    if available is not None and need > available:
        raise MemoryBudgetError(
            f"{what} needs {_gib(need)} of host memory, only {_gib(available)} is available"
            + (f" ({advice})" if advice else "")
        )


def _gib(size: int) -> str:
    return f"{size / (1 << 30):.2f} GiB" if size >= 1 << 30 else f"{size / (1 << 20):.1f} MiB"
