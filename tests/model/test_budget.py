"""Memory budgets as sizes with units (voxelizer/budget.py): what parses, and to how many bytes."""

from __future__ import annotations

import numpy as np
import pytest

from voxelizer import MemoryBudgetError
from voxelizer.budget import parse_size


@pytest.mark.parametrize(
    "text, size",
    [
        ("512MiB", 512 << 20),
        ("2GiB", 2 << 30),
        ("1.5GB", 1_500_000_000),
        ("100", 100),
        ("1kb", 1000),
        ("1 KB", 1000),
        ("0.3kB", 300),
        ("1.5KiB", 1536),
        ("3TiB", 3 << 40),
        (".5mib", 1 << 19),
        ("7b", 7),
        ("7 B", 7),
        ("1TB", 10**12),
        ("1.0000005kB", 1000),
        (" 64MiB ", 64 << 20),
        ("1.0", 1),
        (4096, 4096),
        (np.int64(5), 5),
    ],
)
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "cannot read"),
        ("x", "cannot read"),
        ("GB", "cannot read"),
        ("-1", "cannot read"),
        ("1e9", "cannot read"),
        ("5 MiBs", "cannot read"),
        ("1,000", "cannot read"),
        ("2 GiB 3", "cannot read"),
        ("12XB", "cannot read"),
        ("1.5", "whole"),
        ("0.5B", "whole"),
        ("0", "at least one byte"),
        (0, "at least one byte"),
        (-5, "at least one byte"),
        ("0.0001kB", "at least one byte"),
        (2.5, "int or a string"),
        (True, "int or a string"),
        (None, "int or a string"),
    ],
)
def test_parse_size_refuses(text, message):
    with pytest.raises(MemoryBudgetError, match=message):
        parse_size(text)
