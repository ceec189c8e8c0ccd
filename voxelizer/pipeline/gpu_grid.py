"""The grid the passes run on for a job, and how the job's result is cut from it.

The passes work in tiles of 4 x 4 columns (TILE_SIDE): a grid whose sides along x and y are
not multiples of 4 runs on the next grid that is, and the columns beyond its own (the
padding) are never covered by a triangle (their centres lie beyond every vertex) and never
marked by the surface pass (its push constants name the grid's own columns), so they stay
empty and cost only their own cells. fill_mode="vote" runs parity along each axis in turn,
each as the column axis: its z is padded too, and its padding may fill (an open mesh), so
its result is cut before anything is built from it. z needs no padding otherwise: a column
is whole 32-bit words, its bits past nz stay 0.

A grid that crops the mesh (placement.WorkGrid) runs on the lattice that holds the mesh too,
padded the same way, and its result is that lattice's voxels cut to the window.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..grid import ColumnBits, column_words, pack_columns
from ..placement import Shape, WorkGrid
from .job import Job
from .layout import TILE_SIDE


def tile_padded(side: int) -> int:
    """The side rounded up to whole tiles."""
    return -(-side // TILE_SIDE) * TILE_SIDE


@dataclass(frozen=True)
class GpuGrid:
    """A job's lattice (its own grid, or for a crop the one that holds the mesh too) and
    the padded shape the passes run on."""

    lattice: WorkGrid
    shape: Shape  # the lattice padded to whole tiles (x, y; z for vote)

    @classmethod
    def of(cls, result: Shape, lattice: WorkGrid | None, fill_mode: str) -> GpuGrid:
        work = WorkGrid(result, (0, 0, 0), result) if lattice is None else lattice
        nx, ny, nz = work.shape
        z = tile_padded(nz) if fill_mode == "vote" else nz
        return cls(work, (tile_padded(nx), tile_padded(ny), z))

    @property
    def same(self) -> bool:
        """Whether the passes run on the result's own grid (nothing to cut)."""
        return self.shape == self.lattice.window and not self.lattice.crops

    @property
    def crops(self) -> bool:
        return self.lattice.crops

    @property
    def columns(self) -> tuple[int, int]:
        """The lattice's own columns along x and y (the surface pass's far faces)."""
        return self.lattice.shape[0], self.lattice.shape[1]

    def cut(self, voxels: ColumnBits | np.ndarray) -> ColumnBits | np.ndarray:
        """The result's voxels (words or bools [i, j, k]) of the padded grid's, which the
        cut takes over: a fresh result, whose words it may move in place."""
        if self.same:
            return voxels
        if isinstance(voxels, ColumnBits):
            return self.cut_words(voxels)
        return self.cut_array(voxels)

    def cut_array(self, values: np.ndarray) -> np.ndarray:
        """The window of a per-voxel array of the padded grid's shape, C-contiguous."""
        if self.same:
            return values
        (i, j, k), (nx, ny, nz) = self.lattice.offset, self.lattice.window
        return np.ascontiguousarray(values[i : i + nx, j : j + ny, k : k + nz])

    def cut_words(self, bits: ColumnBits) -> ColumnBits:
        """The window's words, never through bools, at the cost of the result's words:
        whole rows are a view; whole columns are moved down over the padded grid's words
        (`bits`, which the result then owns) or copied where the window is much smaller;
        a window that starts or ends inside a column has each column's words shifted."""
        (i, j, k), (nx, ny, nz) = self.lattice.offset, self.lattice.window
        px, py, pz = self.shape
        words = column_words(pz)
        shape = (nx, ny, nz)
        if k or nz != pz:
            columns = bits.words.reshape(py, px, words)[j : j + ny, i : i + nx]
            return ColumnBits(z_window(columns, k, nz).reshape(-1), shape, clean_padding=True)
        row_words = nx * words
        if px == nx and i == 0:
            rows = bits.words[j * row_words : (j + ny) * row_words]
            return ColumnBits(rows, shape, clean_padding=bits.clean_padding)
        if 2 * ny * row_words < bits.words.size:  # a small window: its own copy
            columns = bits.words.reshape(py, px, words)[j : j + ny, i : i + nx]
            copied = np.ascontiguousarray(columns).reshape(-1)
            return ColumnBits(copied, shape, clean_padding=bits.clean_padding)
        start = (j * px + i) * words
        moved = move_rows_down(bits.words, start=start, stride=px * words, rows=ny, size=row_words)
        return ColumnBits(moved, shape, clean_padding=bits.clean_padding)

    def clear_padding(self, voxels: np.ndarray) -> np.ndarray:
        """Bools of the padded grid with every voxel outside the result's emptied (a grid
        that does not crop: its octree is then the result's)."""
        nx, ny, nz = self.lattice.window
        voxels[nx:], voxels[:, ny:], voxels[:, :, nz:] = False, False, False
        return voxels

    def padded_words(self, voxels: ColumnBits | np.ndarray) -> np.ndarray:
        """The GPU words of the result's voxels in the padded shape (x and y; zeros beyond),
        whose octree is the result's: the same P, and the padding empty."""
        if not isinstance(voxels, ColumnBits):
            nx, ny, nz = voxels.shape
            bools = np.zeros((tile_padded(nx), tile_padded(ny), nz), bool)
            bools[:nx, :ny] = voxels
            return pack_columns(bools)
        nx, ny, nz = voxels.shape
        words = column_words(nz)
        padded = np.zeros((tile_padded(ny), tile_padded(nx), words), np.uint32)
        padded[:ny, :nx] = voxels.words.reshape(ny, nx, words)
        return padded.reshape(-1)


WINDOW_CHUNK_WORDS = 1 << 22  # source words shifted at a time (bounds the temporaries)


def move_rows_down(
    words: np.ndarray, *, start: int, stride: int, rows: int, size: int
) -> np.ndarray:
    """words[:rows * size]: the `rows` runs of `size` words from `start`, `stride` apart,
    moved down in place to lie end to end (stride >= size: each lands at or before where
    it was, so no run is overwritten before it moves)."""
    for row in range(rows):
        source = start + row * stride
        if source != row * size:
            words[row * size : (row + 1) * size] = words[source : source + size]
    return words[: rows * size]


def z_window(columns: np.ndarray, k: int, nz: int) -> np.ndarray:
    """uint32 (ny, nx, column_words(nz)): bits k..k+nz-1 of each column of `columns`
    (uint32 (ny, nx, W), W words a column), as a column of their own (bit 0 = voxel k),
    the bits past nz cleared. Word by word: each output word is two neighbours shifted."""
    ny, nx, source_words = columns.shape
    words = column_words(nz)
    first, shift = divmod(k, 32)
    out = np.empty((ny, nx, words), np.uint32)
    rows = max(1, WINDOW_CHUNK_WORDS // max(1, nx * source_words))
    for low in range(0, ny, rows):
        chunk = columns[low : low + rows]
        target = out[low : low + rows]
        target[...] = chunk[:, :, first : first + words] >> np.uint32(shift)
        if shift:
            above = chunk[:, :, first + 1 : first + 1 + words]
            target[:, :, : above.shape[2]] |= above << np.uint32(32 - shift)
    if nz % 32:
        out[:, :, -1] &= np.uint32((1 << nz % 32) - 1)
    return out


def result_padding(result: Shape) -> Shape:
    """The padded shape the octree of a result's voxels is built on (x, y whole tiles)."""
    nx, ny, nz = result
    return tile_padded(nx), tile_padded(ny), nz


def on_gpu_grid(job: Job) -> tuple[GpuGrid, Job]:
    """The grid the passes run on for `job` and the job on it (the job itself where the
    result's grid is that grid)."""
    grid = GpuGrid.of(job.shape, job.lattice, job.fill_mode)
    if grid.same:
        return grid, job
    return grid, replace(job, shape=grid.shape, lattice=None, columns=grid.columns)
