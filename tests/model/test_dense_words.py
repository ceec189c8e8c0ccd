"""A DenseGrid straight from the GPU keeps the column words (grid.ColumnBits) until someone
asks for the bools: every view of it (the bools, the count, the .npz, .binvox and .svo
files) equals that of the bool grid with the same voxels, on odd shapes, in slabs, in every
mode that brings words back."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

import voxelizer
from voxelizer import DenseGrid
from voxelizer.api import voxel_count_label
from voxelizer.grid import ColumnBits, bit_count, column_words, pack_columns
from voxelizer.placement import GridPlacement

from ..helpers import assert_same_voxels, load_model, reference_grid

# ColumnBits takes any shape: nz a multiple of 32, of 8 only, of neither; nx != ny; a single
# voxel, a single column
ODD_SHAPES = [
    (1, 1, 1),
    (1, 1, 256),
    (3, 5, 7),
    (5, 3, 32),
    (4, 6, 33),
    (7, 2, 40),
    (2, 9, 64),
    (9, 4, 8),
    (16, 8, 12),
    (12, 20, 100),
]
# grids (sides multiples of 4 from 8): nz a multiple of 32, of 8 only, of neither; nx != ny
GRID_SHAPES = [(8, 8, 8), (8, 8, 256), (8, 12, 20), (12, 8, 32), (16, 8, 12), (20, 8, 40)]
GRID_SHAPES += [(8, 24, 36), (12, 20, 100), (16, 16, 16)]


def _words_with_dirty_padding(voxels: np.ndarray, seed: int) -> np.ndarray:
    """pack_columns(voxels) with random bits above nz: nothing may read them."""
    nz = voxels.shape[2]
    words = pack_columns(voxels)
    if nz % 32:
        last = words.reshape(-1, column_words(nz))[:, -1]
        noise = np.random.default_rng(seed).integers(0, 2**32, last.shape, dtype=np.uint32)
        last |= noise & ~np.uint32((1 << nz % 32) - 1)
    return words


def _cases(shapes: list[tuple[int, int, int]]) -> list[tuple[tuple[int, int, int], np.ndarray]]:
    """Random voxels, none, one (the last: the top bit of the last column) and all."""
    cases = []
    for seed, shape in enumerate(shapes):
        rng = np.random.default_rng(seed)
        cases.append((shape, rng.random(shape) < 0.4))
        cases.append((shape, np.zeros(shape, bool)))
        one = np.zeros(shape, bool)
        one[tuple(n - 1 for n in shape)] = True
        cases.append((shape, one))
        cases.append((shape, np.ones(shape, bool)))
    return cases


def _grids(voxels: np.ndarray, seed: int = 0) -> tuple[DenseGrid, DenseGrid]:
    """The same voxels as a words-backed grid and as a bool grid."""
    placement = GridPlacement(voxels.shape, np.array([0.5, -1.0, 2.0]), 0.25)
    columns = ColumnBits(_words_with_dirty_padding(voxels, seed), voxels.shape)
    return DenseGrid.of_columns(columns, placement), DenseGrid(voxels.copy(), placement)


def _npz_members(path: Path) -> list[tuple[str, bytes]]:
    """The archive's members and their bytes (the zip headers carry the time of writing)."""
    with zipfile.ZipFile(path) as archive:
        return [(name, archive.read(name)) for name in archive.namelist()]


@pytest.mark.parametrize("shape, voxels", _cases(ODD_SHAPES))
def test_column_bits_equal_the_bools(shape, voxels):
    columns = ColumnBits(_words_with_dirty_padding(voxels, 7), shape)
    bools = columns.to_numpy()
    assert bools.dtype == bool and bools.flags.c_contiguous
    assert_same_voxels(bools, voxels)
    assert np.array_equal(columns.to_numpy_xzy(), voxels.transpose(0, 2, 1))
    assert columns.count() == int(np.count_nonzero(voxels))
    assert np.array_equal(columns.packed_bits(), np.packbits(voxels, axis=None))
    nx, ny, nz = shape
    rows = columns.rows(ny // 2, ny)
    assert np.array_equal(ColumnBits(rows, (nx, ny - ny // 2, nz)).to_numpy(), voxels[:, ny // 2 :])


def test_column_bits_union_and_checks():
    rng = np.random.default_rng(3)
    a, b = rng.random((2, 8, 12, 20)) < 0.3
    union = ColumnBits.of_voxels(a) | ColumnBits.of_voxels(b)
    assert_same_voxels(union.to_numpy(), a | b)
    with pytest.raises(ValueError, match="shapes differ"):
        _ = union | ColumnBits.of_voxels(a[:, :8])
    with pytest.raises(ValueError, match="uint32 words"):
        ColumnBits(np.zeros(8 * 12, np.uint32), (8, 12, 40))
    with pytest.raises(ValueError, match="uint32 words"):
        ColumnBits(np.zeros(8 * 12, np.int32), (8, 12, 20))
    with pytest.raises(ValueError, match="words of shape"):
        DenseGrid.of_columns(union, GridPlacement((12, 8, 20), np.zeros(3), 1.0))


@pytest.mark.parametrize("shape, voxels", _cases(GRID_SHAPES))
def test_words_grid_equals_the_bool_grid(tmp_path, shape, voxels):
    words, bools = _grids(voxels)
    assert words.columns is not None and bools.columns is None
    assert words.count() == bools.count() == int(np.count_nonzero(voxels))
    assert repr(words) == repr(bools)
    suffixes = [".npz"] + ([".binvox"] if len(set(shape)) == 1 else [])
    for suffix in suffixes:
        voxelizer.save(words, tmp_path / f"words{suffix}")
        voxelizer.save(bools, tmp_path / f"bools{suffix}")
    assert words.columns is not None  # the writers did not need the bools
    assert _npz_members(tmp_path / "words.npz") == _npz_members(tmp_path / "bools.npz")
    if ".binvox" in suffixes:
        binvox = (tmp_path / "words.binvox").read_bytes()
        assert binvox == (tmp_path / "bools.binvox").read_bytes()
    assert_same_voxels(np.asarray(words), voxels)
    assert words.columns is None  # the bools are the storage now


def test_the_svo_file_of_a_words_grid(tmp_path):
    voxels = np.random.default_rng(5).random((16, 8, 12)) < 0.5
    words, bools = _grids(voxels)
    voxelizer.save(words, tmp_path / "words.svo")
    voxelizer.save(bools, tmp_path / "bools.svo")
    assert (tmp_path / "words.svo").read_bytes() == (tmp_path / "bools.svo").read_bytes()


def test_the_bools_once_asked_for_are_the_storage(tmp_path):
    """to_numpy() unpacks once; a change to that array shows in count() and the files, as
    with a grid built from a bool array."""
    voxels = np.random.default_rng(9).random((8, 12, 20)) < 0.5
    words, bools = _grids(voxels)
    array = words.to_numpy()
    assert words.to_numpy() is array and np.asarray(words) is array
    for grid in (words, bools):
        grid.to_numpy()[0, 0, 0] = not grid.to_numpy()[0, 0, 0]
        grid.to_numpy()[7, 11, 19] = True
    assert words.count() == bools.count()
    voxelizer.save(words, tmp_path / "words.npz")
    voxelizer.save(bools, tmp_path / "bools.npz")
    assert _npz_members(tmp_path / "words.npz") == _npz_members(tmp_path / "bools.npz")


# -- from the GPU --------------------------------------------------------------------------------


@pytest.mark.parametrize("grid", [(24, 16, 20), (16, 40, 36), (8, 12, 40), (32, 8, 64)])
def test_voxelize_dense_keeps_the_words(gpu, tmp_path, grid):
    """nz not a multiple of 8 or 32, nx != ny: the words-backed result equals the CPU
    reference, and so do its count and its .npz."""
    result = gpu.voxelize_dense(load_model("bunny.ply"), grid)
    expected = reference_grid("bunny.ply", grid)
    assert result.columns is not None and result.columns.shape == grid
    assert result.count() == expected.count() == result.stats.counts["solid_voxels"]
    voxelizer.save(result, tmp_path / "gpu.npz")
    voxelizer.save(DenseGrid(expected.to_numpy(), result.placement), tmp_path / "cpu.npz")
    assert _npz_members(tmp_path / "gpu.npz") == _npz_members(tmp_path / "cpu.npz")
    assert_same_voxels(result.to_numpy(), expected.to_numpy())


@pytest.mark.parametrize(
    "options, budget",
    [
        ({}, "1.5MiB"),
        ({"mode": "surface"}, "1.5MiB"),
        ({"mode": "both"}, "1.5MiB"),
        ({"fill_mode": "winding"}, "2MiB"),
        ({"mode": "both", "fill_mode": "winding"}, "1.75MiB"),
    ],
    ids=["parity", "surface", "both", "winding", "both-winding"],
)
def test_slabs_give_the_words_of_the_whole_run(gpu, tmp_path, options, budget):
    """A budget forced small splits the grid into slabs of rows; their words, put end to
    end, are the whole run's (and the SVO's voxels), in every mode that brings words back."""
    gear, shape = load_model("gear.ply"), (128, 256, 44)
    whole = gpu.voxelize_dense(gear, shape, **options)
    split = gpu.voxelize_dense(gear, shape, max_memory=budget, **options)
    assert split.stats.counts["slabs"] > whole.stats.counts["slabs"]
    assert whole.columns is not None and split.columns is not None
    assert np.array_equal(split.columns.words, whole.columns.words)
    label = voxel_count_label(options.get("mode", "solid"))
    assert split.count() == whole.count() == whole.stats.counts[label]
    voxelizer.save(split, tmp_path / "split.npz")
    voxelizer.save(whole, tmp_path / "whole.npz")
    assert _npz_members(tmp_path / "split.npz") == _npz_members(tmp_path / "whole.npz")
    octree = gpu.voxelize(gear, shape, **options)
    assert_same_voxels(split.to_numpy(), octree.to_numpy())


def test_a_union_of_words_and_bools(gpu):
    """Mode "both" with fill_mode "vote": the surface's words united with the vote's bools."""
    torus = load_model("torus_knot.ply")
    both = gpu.voxelize_dense(torus, (24, 16, 20), mode="both", fill_mode="vote")
    solid = gpu.voxelize_dense(torus, (24, 16, 20), fill_mode="vote")
    surface = gpu.voxelize_dense(torus, (24, 16, 20), mode="surface")
    assert both.columns is None and surface.columns is not None
    assert_same_voxels(both.to_numpy(), solid.to_numpy() | surface.to_numpy())


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.uint32, np.int32, np.uint64, np.int64])
@pytest.mark.parametrize("size", [0, 1, 3, 8, 13, 64, 1001])
def test_bit_count_counts_every_set_bit(dtype, size):
    """Whole words, counted as uint64 where the bytes allow it, or element by element (odd
    byte counts, strided views): the same total as counting the bits one by one."""
    rng = np.random.default_rng(size)
    values = rng.integers(0, 256, size * np.dtype(dtype).itemsize, dtype=np.uint8).view(dtype)
    expected = sum(bin(int(byte)).count("1") for byte in values.view(np.uint8))
    assert bit_count(values) == expected
    if size > 1:
        strided = values[::2]
        assert bit_count(strided) == sum(
            bin(int(byte)).count("1") for byte in np.ascontiguousarray(strided).view(np.uint8)
        )
