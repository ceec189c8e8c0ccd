"""DenseGrid and the GPU's bit layout of a grid of any shape (voxelizer/grid.py)."""

from __future__ import annotations

import numpy as np
import pytest

import voxelizer
from voxelizer import DenseGrid
from voxelizer.grid import column_words, pack_columns, unpack_columns
from voxelizer.placement import GridPlacement

from ..helpers import SHAPES, noisy_blobs


@pytest.mark.parametrize("shape", SHAPES + [(8, 12, 40), (12, 8, 64), (8, 8, 100)])
def test_pack_and_unpack_columns(shape):
    voxels = np.random.default_rng(1).random(shape) < 0.5
    words = pack_columns(voxels)
    nx, ny, nz = shape
    assert words.dtype == np.uint32 and words.shape == (nx * ny * column_words(nz),)
    assert np.array_equal(unpack_columns(words, shape), voxels)


def test_column_layout_word_by_word():
    shape = (12, 8, 40)  # two words per column, the second one partly padding
    for i, j, k in [(0, 0, 0), (11, 0, 0), (0, 7, 0), (5, 3, 31), (5, 3, 32), (11, 7, 39)]:
        voxels = np.zeros(shape, bool)
        voxels[i, j, k] = True
        words = pack_columns(voxels)
        expected = np.zeros(12 * 8 * 2, np.uint32)
        expected[(j * 12 + i) * 2 + k // 32] = np.uint32(1) << np.uint32(k % 32)
        assert np.array_equal(words, expected), (i, j, k)
        assert np.array_equal(unpack_columns(expected, shape), voxels)


def test_dense_grid_keeps_its_shape(tmp_path):
    voxels = noisy_blobs((16, 8, 12), 3)
    placement = GridPlacement((16, 8, 12), np.array([0.1, -0.2, 0.3]), 0.7)
    grid = DenseGrid(voxels, placement)
    assert grid.shape == (16, 8, 12) and grid.resolution == 16
    assert repr(grid).startswith("DenseGrid(16x8x12, ")
    voxelizer.save(grid, tmp_path / "g.npz")
    loaded = voxelizer.load(tmp_path / "g.npz")
    assert (
        isinstance(loaded, DenseGrid)
        and loaded.shape == (16, 8, 12)
        and np.array_equal(loaded.to_numpy(), voxels)
    )
    assert np.array_equal(loaded.origin, grid.origin) and loaded.voxel_size == 0.7
    with pytest.raises(ValueError, match="shape"):
        DenseGrid(voxels.transpose(1, 0, 2), placement)


def test_dense_grid_protocol():
    """What DenseGrid shares with SVO (placement.Placed): the voxels by to_numpy() and by
    np.asarray, the count and the placement."""
    voxels = noisy_blobs((16, 8, 12), 4)
    grid = DenseGrid(voxels, GridPlacement((16, 8, 12), np.array([1.0, 2.0, 3.0]), 0.5))
    assert grid.to_numpy() is voxels and np.asarray(grid) is voxels
    assert grid.count() == int(voxels.sum()) and grid.shape == (16, 8, 12)
    assert np.array_equal(grid.origin, [1, 2, 3]) and grid.voxel_size == 0.5
    assert grid.placement.shape == grid.shape
    as_bytes = np.asarray(grid, dtype=np.uint8)
    assert as_bytes.dtype == np.uint8 and np.array_equal(as_bytes, voxels)
    copied = np.array(grid)
    assert np.array_equal(copied, voxels) and not np.shares_memory(copied, voxels)
    with pytest.raises(ValueError, match="needs a copy"):
        np.asarray(grid, dtype=np.uint8, copy=False)
