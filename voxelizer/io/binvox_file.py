"""Reading .binvox files back (the writer is voxelizer.io.writers.write_binvox).

binvox 1: a text header (`dim N N N`, `translate tx ty tz`, `scale s`, `data`), then
(value, count) byte pairs run-length encoding the voxels with y fastest, then z, then x.
This project reads the header as the binvox spec places voxels: voxel (i, j, k) has its
centre at translate + scale * ((i, j, k) + 1/2) / N, so the grid origin is translate and
the voxel size is scale / N. (trimesh reads the same file with its first voxel centre at
translate and a pitch of scale / (N - 1): the same voxels, placed differently.)
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from ..budget import check_host_fits
from ..errors import FormatError, GridError, MemoryBudgetError
from ..grid import DenseGrid
from ..placement import GridPlacement, check_shape
from .files import read_regular

MAX_HEADER_LINES = 16  # the five of binvox 1, and room for comments


def read_binvox(path: str | os.PathLike) -> DenseGrid:
    """The DenseGrid of a cubic .binvox file; FormatError names the file and what is wrong."""
    path = Path(path)
    data = read_regular(path, FormatError)
    try:
        placement, start = _header(data)
        voxels = _runs(data[start:], placement.shape[0])
    except FormatError as exc:
        raise FormatError(f"{path}: {exc}") from None
    except MemoryBudgetError as exc:
        raise MemoryBudgetError(f"{path}: {exc}") from None
    return DenseGrid(voxels, placement)


def _header(data: bytes) -> tuple[GridPlacement, int]:
    """The placement the header gives, and where the run data starts."""
    if not data.startswith(b"#binvox"):
        raise FormatError("not a binvox file (no '#binvox' at the start)")
    fields: dict[str, list[str]] = {}
    at = 0
    for _ in range(MAX_HEADER_LINES):
        end = data.find(b"\n", at)
        if end < 0:
            raise FormatError("truncated header (no 'data' line)")
        try:
            words = data[at:end].decode("ascii").split()
        except UnicodeDecodeError:
            raise FormatError("the header is not text") from None
        at = end + 1
        if words and words[0] == "data":
            break
        if words and not words[0].startswith("#"):
            fields[words[0]] = words[1:]
    else:
        raise FormatError(f"no 'data' line in the first {MAX_HEADER_LINES} lines")
    if "dim" not in fields:
        raise FormatError("the header has no 'dim' line")
    try:
        dims = [int(v) for v in fields["dim"]]
        translate = [float(v) for v in fields.get("translate", ["0", "0", "0"])]
        (scale,) = (float(v) for v in fields.get("scale", ["1"]))
    except ValueError:
        raise FormatError(f"bad header numbers: {fields}") from None
    if len(dims) != 3 or len(set(dims)) != 1:
        raise FormatError(f"dim {' '.join(fields['dim'])}: the reader takes cubic grids N N N")
    try:
        shape = check_shape(dims)
    except GridError as exc:
        raise FormatError(f"dim {dims[0]}: {exc}") from None
    if len(translate) != 3 or not all(math.isfinite(v) for v in translate):
        raise FormatError(f"translate must be three finite numbers, not {fields['translate']}")
    if not (math.isfinite(scale) and scale > 0):
        raise FormatError(f"scale must be positive and finite, not {scale!r}")
    return GridPlacement(shape, np.array(translate), scale / dims[0]), at


def _runs(body: bytes, n: int) -> np.ndarray:
    """bool [i, j, k] of the (value, count) pairs, checked to cover n^3 voxels exactly
    before the grid is allocated."""
    if len(body) % 2:
        raise FormatError("truncated run data (an odd number of bytes)")
    pairs = np.frombuffer(body, np.uint8).reshape(-1, 2)
    values, counts = pairs[:, 0], pairs[:, 1]
    if (values > 1).any():
        raise FormatError("run values must be 0 or 1")
    covered = int(counts.sum(dtype=np.int64))
    if covered != n**3:
        raise FormatError(f"the runs cover {covered} voxels, dim {n} needs {n**3}")
    check_host_fits(2 * n**3, f"the {n}x{n}x{n} grid")  # the runs expanded, then reordered
    flat = np.repeat(values.astype(bool), counts)
    return np.ascontiguousarray(flat.reshape(n, n, n).transpose(0, 2, 1))  # [x, z, y] -> [x, y, z]
