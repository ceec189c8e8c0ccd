"""Reading .binvox files back, and the run-length code the writer
(voxelizer.io.writers.write_binvox) writes.

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
from ..grid import ColumnBits, DenseGrid, column_words
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


# --- writing: the run-length code, from the GPU's column words --------------------------------

TRANSITION_WORDS = 1 << 22  # column words compared at a time (16 MiB): the peak's bound


def binvox_runs(columns: ColumnBits) -> np.ndarray:
    """The (value, count <= 255) byte pairs of a cubic grid in binvox order (y fastest,
    then z, then x), as uint8 (2 * pairs,), computed from its column words without the
    bool grid: voxel (x, z, y) and the one before it differ along y exactly where the words
    of columns (x, y - 1) and (x, y) differ, so the XOR of neighbouring rows of words marks
    every change of value but those at the start of a y row (read from the words of rows
    0 and n - 1). Runs end at the changes; their values alternate from voxel (0, 0, 0)'s."""
    n = columns.shape[0]
    words = column_words(n)
    grid = columns.words.reshape(n, n, words)  # [y, x, word]
    lane = 64 if words % 2 == 0 else 32  # compared 64 bits at a time where a column allows
    lanes = grid.view(np.uint64) if lane == 64 else grid
    per_column = lanes.shape[2]
    mask = np.full(per_column, np.iinfo(lanes.dtype).max, lanes.dtype)
    if n < lane * per_column:  # bits z >= n are padding, never compared
        mask[-1] = (1 << (n - lane * (per_column - 1))) - 1
    changes = [_row_starts(grid, n)]
    rows = max(1, TRANSITION_WORDS // (n * words))
    for low in range(1, n, rows):
        high = min(n, low + rows)
        differ = lanes[low:high] ^ lanes[low - 1 : high - 1]  # [y - low, x, lane]
        differ &= mask
        found = np.flatnonzero(differ)
        if len(found) == 0:
            continue
        flipped = differ.reshape(-1)[found].astype(f"<u{lane // 8}", copy=False)
        which, bit = np.nonzero(
            np.unpackbits(flipped.view(np.uint8).reshape(-1, lane // 8), axis=1, bitorder="little")
        )
        spot = found[which]
        y = spot // (n * per_column) + low
        x = (spot // per_column) % n
        z = (spot % per_column) * lane + bit
        changes.append((x * n + z) * n + y)
    starts = np.sort(np.concatenate(changes))
    lengths = np.diff(starts, append=n**3, prepend=0)
    first = bool(grid[0, 0, 0] & 1)
    values = (np.arange(len(lengths)) % 2).astype(bool) ^ first
    return _pairs(values, lengths)


def _row_starts(grid: np.ndarray, n: int) -> np.ndarray:
    """Positions (in binvox order) of the changes at the start of a y row: voxel (x, z, 0)
    against the last one of the row before, (x, z - 1, n - 1) or (x - 1, n - 1, n - 1)."""
    first = _unpacked(grid[0], n).reshape(-1)  # [x * n + z]: voxel (x, z, y = 0)
    last = _unpacked(grid[n - 1], n).reshape(-1)  # voxel (x, z, y = n - 1)
    rows = np.flatnonzero(first[1:] != last[:-1]) + 1
    return rows.astype(np.int64) * n


def _unpacked(row: np.ndarray, n: int) -> np.ndarray:
    """bool [x, z] of one row of columns' words [x, word]."""
    return np.unpackbits(row.view(np.uint8), axis=1, count=n, bitorder="little").view(bool)


def _pairs(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """(value, count) byte pairs of runs, each longer than 255 cut into runs of 255 and one
    of the rest."""
    pieces = (lengths + 254) // 255
    counts = np.full(int(pieces.sum()), 255, np.int64)
    counts[np.cumsum(pieces) - 1] = lengths - 255 * (pieces - 1)
    pairs = np.empty((len(counts), 2), np.uint8)
    pairs[:, 0] = np.repeat(values, pieces)
    pairs[:, 1] = counts
    return pairs.reshape(-1)
