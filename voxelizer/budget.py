"""Memory budgets as people write them: "512MiB", "2GiB", "1.5GB", or a plain number of bytes."""

from __future__ import annotations

import re
from fractions import Fraction

import numpy as np

from .errors import MemoryBudgetError

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
        value = Fraction(match.group(1)) * UNITS[unit]
        if UNITS[unit] == 1 and value.denominator != 1:
            raise MemoryBudgetError(f"memory size {size!r}: a number of bytes must be whole")
        count = int(value)
    else:
        raise MemoryBudgetError(f"memory size must be an int or a string like '2GiB', not {size!r}")
    if count < 1:
        raise MemoryBudgetError(f"memory size must be at least one byte, not {size!r}")
    return count
