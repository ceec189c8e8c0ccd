"""The cut of a result from the padded grid the passes ran on (pipeline/gpu_grid.py) works on
the column words, at the cost of the result's words: never through a bool grid, the words
equal to those of the bool reference's cut (the padding bits past nz cleared), and the
dense grids of odd sizes and crops, straight from the GPU, keep every padding bit clear so
that a count is one pass over the words."""

from __future__ import annotations

import numpy as np
import pytest

import voxelizer.grid as grid_module
import voxelizer.pipeline.gpu_grid as gpu_grid_module
from voxelizer.grid import ColumnBits
from voxelizer.pipeline.gpu_grid import GpuGrid
from voxelizer.placement import WorkGrid

from .. import shapes
from ..helpers import load_model


@pytest.fixture
def no_bools(monkeypatch):
    """Any expansion of words into bools, or packing of bools into words, fails the test."""

    def refused(*args, **kwargs):
        raise AssertionError("the cut went through a bool grid")

    monkeypatch.setattr(ColumnBits, "to_numpy", refused)
    monkeypatch.setattr(ColumnBits, "of_voxels", refused)
    monkeypatch.setattr(grid_module, "pack_columns", refused)
    monkeypatch.setattr(gpu_grid_module, "pack_columns", refused)


def random_lattice(lattice: WorkGrid, padded: tuple[int, int, int], seed: int) -> np.ndarray:
    """bool (padded shape): random voxels in the lattice, the tiles' padding empty."""
    rng = np.random.default_rng(seed)
    voxels = np.zeros(padded, bool)
    nx, ny, nz = lattice.shape
    voxels[:nx, :ny, :nz] = rng.random((nx, ny, nz)) < 0.5
    return voxels


# (result shape, lattice or None, fill mode): odd sides (x/y padded, z kept), whole rows,
# crops starting and ending inside columns and words, and a vote's padded z.
CASES = [
    ((999 % 40, 13, 37), None, "parity"),
    ((4, 5, 64), None, "parity"),
    ((7, 7, 1), None, "parity"),
    ((8, 3, 33), None, "parity"),
    ((9, 7, 11), WorkGrid((20, 16, 24), (5, 3, 7), (9, 7, 11)), "parity"),
    ((8, 16, 70), WorkGrid((20, 16, 100), (4, 0, 30), (8, 16, 70)), "parity"),
    ((20, 5, 64), WorkGrid((20, 16, 96), (0, 6, 0), (20, 5, 64)), "parity"),
    ((6, 6, 40), WorkGrid((17, 9, 95), (11, 2, 0), (6, 6, 40)), "parity"),
    ((5, 6, 33), WorkGrid((30, 30, 130), (1, 2, 97), (5, 6, 33)), "parity"),
    ((5, 6, 7), None, "vote"),
]


@pytest.mark.parametrize(("result", "lattice", "fill_mode"), CASES, ids=str)
def test_the_cut_of_words_is_the_cut_of_bools_without_bools(result, lattice, fill_mode, request):
    grid = GpuGrid.of(result, lattice, fill_mode)
    assert not grid.same
    voxels = random_lattice(grid.lattice, grid.shape, seed=len(request.node.name))
    padded = ColumnBits.of_voxels(voxels)
    if fill_mode == "vote":  # its z padding may fill: bits past the lattice's nz set too
        padded.words[:] = np.random.default_rng(5).integers(0, 2**32, padded.words.size)
    expected = ColumnBits.of_voxels(np.ascontiguousarray(grid.cut_array(padded.to_numpy())))
    request.getfixturevalue("no_bools")
    cut = grid.cut(padded)
    assert isinstance(cut, ColumnBits) and cut.shape == result
    assert np.array_equal(cut.words, expected.words)  # the padding bits past nz clear too
    assert cut.clean_padding and cut.padding_bits() == 0 and cut.count() == expected.count()


def test_an_odd_grid_moves_its_words_in_place(no_bools):
    """1000^2 columns cut to 999^2: the result's words are the padded grid's memory, moved
    down (no second grid's worth of memory), equal to the reference's."""
    grid = GpuGrid.of((999, 999, 40), None, "parity")
    rng = np.random.default_rng(3)
    words = rng.integers(0, 2**8, 1000 * 1000 * 2, dtype=np.uint32)  # bits past 40 clear
    reference = words.reshape(1000, 1000, 2)[:999, :999].copy()
    cut = grid.cut(ColumnBits(words, (1000, 1000, 40)))
    assert isinstance(cut, ColumnBits)
    assert np.shares_memory(cut.words, words)
    assert np.array_equal(cut.words, reference.reshape(-1))


def test_padded_words_of_words_are_those_of_bools(request):
    result = (9, 7, 45)
    grid = GpuGrid.of(result, None, "parity")
    voxels = np.random.default_rng(1).random(result) < 0.3
    words = ColumnBits.of_voxels(voxels)
    expected = grid.padded_words(voxels)  # (through the bools)
    request.getfixturevalue("no_bools")
    assert np.array_equal(grid.padded_words(words), expected)


def test_count_skips_the_mask_only_where_the_padding_is_known_clean():
    voxels = np.random.default_rng(2).random((5, 6, 45)) < 0.5
    bits = ColumnBits.of_voxels(voxels)
    assert bits.clean_padding and bits.padding_bits() == 0 and bits.count() == int(voxels.sum())
    dirty = bits.words.copy()
    dirty[1::2] |= np.uint32(0xFFFFE000)  # every bit past nz = 45 (each column's second word)
    words = ColumnBits(dirty, bits.shape)  # of unknown origin: its padding is masked off
    assert not words.clean_padding and words.padding_bits() == 30 * 19
    assert words.count() == int(voxels.sum())
    assert (words | bits).count() == int(voxels.sum()) and (bits | bits).clean_padding


ODD_CALLS = [
    ({"fill_mode": "parity"}, (37, 30, 45)),
    ({"fill_mode": "winding"}, (37, 30, 45)),
    ({"fill_mode": "union"}, (37, 30, 45)),
    ({"mode": "surface"}, (37, 30, 45)),
    ({"mode": "both"}, (37, 30, 45)),
]


@pytest.mark.parametrize(("options", "grid"), ODD_CALLS, ids=str)
def test_odd_dense_grids_from_the_gpu_never_make_bools(gpu, options, grid, no_bools):
    """The cut (and the count) of a dense result of an odd size leave the words as words,
    their padding past nz clear: the count is the words' set bits."""
    mesh = load_model("bunny.ply")
    dense = gpu.voxelize_dense(mesh, grid, warn=False, **options)
    bits = dense.columns
    assert bits is not None and bits.shape == grid
    assert bits.clean_padding and bits.padding_bits() == 0
    assert dense.count() == grid_module.bit_count(bits.words) > 0


@pytest.mark.parametrize("fill_mode", ["parity", "winding"])
def test_an_open_mesh_leaves_no_bit_past_nz(gpu, fill_mode, no_bools):
    """An open mesh (its columns cross it once: parity fills them to the grid's top) leaves
    no bit past nz set, as the words' clean padding says."""
    vertices, faces = shapes.box((0.5, 0.5, 0.5), (3.5, 3.5, 3.5))
    open_box = (vertices, np.delete(faces, [4, 10], axis=0))  # the bottom face gone
    box = [[0, 0, 0], [5, 6, 45]]
    dense = gpu.voxelize_dense(open_box, (5, 6, 45), bounds=box, fill_mode=fill_mode, warn=False)
    assert dense.columns is not None and dense.columns.clean_padding
    assert dense.columns.padding_bits() == 0
    if fill_mode == "parity":
        assert dense.count() == 3 * 3 * (45 - 4)  # above the top face, to the grid's top


def test_the_dense_cut_benchmark_runs(capsys):
    """A tiny run of python -m voxelizer.benchmarks.dense_cut on this tree: a row per grid,
    its steps' medians and the ratio to the first grid."""
    from voxelizer.benchmarks import dense_cut

    assert dense_cut.main(["--grids", "16", "15", "--rounds", "1", "--repeat", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| . |")]
    assert [row.split("|")[2].strip() for row in rows] == ["16", "15"]
    assert rows[0].rstrip(" |").endswith("1.00")
