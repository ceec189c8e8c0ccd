"""The .binvox writer's run-length code, computed from the GPU's column words: the same bytes
as run-length coding the bool grid in binvox order, without ever making that grid."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import voxelizer
from voxelizer import DenseGrid
from voxelizer.grid import ColumnBits
from voxelizer.io.binvox_file import binvox_runs
from voxelizer.placement import GridPlacement

from ..helpers import PROJECT_MODELS


def reference_runs(voxels: np.ndarray) -> np.ndarray:
    """(value, count <= 255) pairs of the grid in binvox order (y fastest, then z, then x),
    one voxel at a time: the format's definition."""
    pairs: list[int] = []
    value, count = None, 0
    for voxel in voxels.transpose(0, 2, 1).ravel().tolist():
        if voxel == value and count < 255:
            count += 1
            continue
        if value is not None:
            pairs += [int(value), count]
        value, count = voxel, 1
    pairs += [int(value), count]
    return np.array(pairs, np.uint8)


def cases() -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    out = []
    for n in (8, 12, 36, 40):  # multiples of 4, with and without padding bits in the words
        centre = np.indices((n, n, n)) - (n - 1) / 2
        out += [
            (f"noise{n}", rng.random((n, n, n)) < 0.5),
            (f"sparse{n}", rng.random((n, n, n)) < 0.002),
            (f"empty{n}", np.zeros((n, n, n), bool)),
            (f"full{n}", np.ones((n, n, n), bool)),
            (f"ball{n}", (centre**2).sum(axis=0) < (n / 3) ** 2),
        ]
    ends = np.zeros((12, 12, 12), bool)
    ends[0, 0, 0] = ends[-1, -1, -1] = ends[5, :, 0] = ends[:, 0, -1] = True  # row boundaries
    out.append(("ends12", ends))
    return out


@pytest.mark.parametrize(("name", "voxels"), cases(), ids=[name for name, _ in cases()])
def test_runs_from_the_words_are_the_runs_of_the_grid(name, voxels):
    assert np.array_equal(binvox_runs(ColumnBits.of_voxels(voxels)), reference_runs(voxels))


@pytest.mark.parametrize("n", [12, 36])  # compared 32 and 64 bits at a time
def test_padding_bits_of_the_words_are_never_read(n):
    """Bits from nz up in a column's last word are padding the GPU may leave set."""
    voxels = np.random.default_rng(2).random((n, n, n)) < 0.3
    columns = ColumnBits.of_voxels(voxels)
    last = columns.words.reshape(n * n, -1)[:, -1]
    last |= np.uint32(0xFFFFFFFF) << np.uint32(n % 32)  # every padding bit set
    assert np.array_equal(binvox_runs(columns), reference_runs(voxels))


def test_a_dense_result_is_written_without_its_bool_grid(tmp_path, gpu):
    """At 256³ (16 MiB of bools) the writer's peak stays below half the bool grid it once
    built (twice: the grid, then its comparison with itself shifted by one)."""
    grid = gpu.voxelize_dense(PROJECT_MODELS / "gear.ply", 256)
    assert grid.columns is not None
    tracemalloc.start()
    try:
        voxelizer.save(grid, tmp_path / "gear.binvox")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 256**3 // 2, peak
    assert np.array_equal(voxelizer.load(tmp_path / "gear.binvox").to_numpy(), grid.to_numpy())


def test_a_grid_of_bools_and_an_svo_write_the_same_file(tmp_path, gpu):
    svo = gpu.voxelize(PROJECT_MODELS / "gear.ply", 40)
    dense = DenseGrid(svo.to_numpy(), GridPlacement(svo.shape, svo.origin, svo.voxel_size))
    voxelizer.save(svo, tmp_path / "svo.binvox")
    voxelizer.save(dense, tmp_path / "dense.binvox")
    data = (tmp_path / "svo.binvox").read_bytes()
    assert data == (tmp_path / "dense.binvox").read_bytes()
    assert data.endswith(reference_runs(svo.to_numpy()).tobytes())
