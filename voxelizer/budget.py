"""Placeholder replaced by the size parser of the CLI work."""

from .errors import MemoryBudgetError


def parse_size(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise MemoryBudgetError(f"memory budget must be a positive number of bytes, not {value!r}")
    return value
