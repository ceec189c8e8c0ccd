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
        """The result's voxels (words or bools [i, j, k]) of the padded grid's."""
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
        """The window's words: whole columns of the padded grid's rows (a view where only
        rows go), or through the bools where the window starts or ends inside a column."""
        (i, j, k), (nx, ny, nz) = self.lattice.offset, self.lattice.window
        px, _, pz = self.shape
        words = column_words(pz)
        if k or column_words(nz) != words:
            return ColumnBits.of_voxels(self.cut_array(bits.to_numpy()))
        if px == nx and i == 0:
            return ColumnBits(bits.words[j * px * words : (j + ny) * px * words], (nx, ny, nz))
        columns = bits.words.reshape(-1, px, words)[j : j + ny, i : i + nx]
        return ColumnBits(np.ascontiguousarray(columns).reshape(-1), (nx, ny, nz))

    def clear_padding(self, voxels: np.ndarray) -> np.ndarray:
        """Bools of the padded grid with every voxel outside the result's emptied (a grid
        that does not crop: its octree is then the result's)."""
        nx, ny, nz = self.lattice.window
        voxels[nx:], voxels[:, ny:], voxels[:, :, nz:] = False, False, False
        return voxels

    def padded_words(self, voxels: ColumnBits | np.ndarray) -> np.ndarray:
        """The GPU words of the result's voxels in the padded shape (x and y; zeros beyond),
        whose octree is the result's: the same P, and the padding empty."""
        bools = voxels.to_numpy() if isinstance(voxels, ColumnBits) else voxels
        nx, ny, nz = bools.shape
        padded = np.zeros((tile_padded(nx), tile_padded(ny), nz), bool)
        padded[:nx, :ny] = bools
        return pack_columns(padded)


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
