"""voxelizer.torch.VoxelDataset over a shard store and over .npz files, through a real
DataLoader with worker processes (the CPU build of torch)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import voxelizer
from voxelizer import FormatError
from voxelizer.torch import VoxelDataset, unpack

from ..helpers import PROJECT_MODELS, time_limit

MODELS = sorted(PROJECT_MODELS.glob("*.ply"))


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[Path]]:
    """A store of the bundled models and a broken file (grid 16×16×20: z not whole bytes),
    and the same grids as .npz files."""
    root = tmp_path_factory.mktemp("dataset")
    broken = root / "broken.ply"
    broken.write_bytes(b"ply\nformat ascii 1.0\nend_header\n")
    inputs = [*MODELS[:1], broken, *MODELS[1:]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        list(
            voxelizer.voxelize_many(
                inputs, grid=(16, 16, 20), out_dir=root / "s.zarr", format="zarr"
            )
        )
        list(voxelizer.voxelize_many(MODELS, grid=(16, 16, 20), out_dir=root / "npz", format="npz"))
    return root / "s.zarr", root / "npz", inputs


def expected(path: Path) -> voxelizer.DenseGrid:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return voxelizer.voxelize_dense(path, (16, 16, 20))


def test_items_are_the_grids_with_their_placements(gpu, written):
    store, folder, _ = written
    from_store, from_files = VoxelDataset(store), VoxelDataset(folder)
    assert len(from_store) == len(from_files) == len(MODELS)  # the failed mesh left out
    assert [from_store[i]["index"] for i in range(len(from_store))] == [0, 2, 3]
    for item, path in enumerate(MODELS):
        grid = expected(path)
        for sample in (from_store[item], from_files[item]):
            assert sample["voxels"].dtype == torch.bool
            assert np.array_equal(sample["voxels"].numpy(), grid.to_numpy())
            assert np.array_equal(sample["origin"].numpy(), grid.origin)
            assert float(sample["voxel_size"]) == grid.voxel_size
    with pytest.raises(IndexError):
        from_store[len(from_store)]


@pytest.mark.parametrize("packed", [False, True])
def test_a_dataloader_with_two_workers_reads_every_grid(gpu, written, packed):
    store, folder, _ = written
    for source in (store, folder):
        dataset = VoxelDataset(source, packed=packed, dtype=torch.float32)
        loader = DataLoader(dataset, batch_size=2, num_workers=2, shuffle=False)
        batches = list(loader)
        key = "bits" if packed else "voxels"
        stacked = torch.cat([batch[key] for batch in batches])
        if packed:
            assert stacked.dtype == torch.uint8 and stacked.shape == (len(MODELS), 16, 16, 3)
            stacked = unpack(stacked, 20)
        else:
            assert stacked.dtype == torch.float32 and stacked.shape == (len(MODELS), 16, 16, 20)
        for row, path in enumerate(MODELS):
            assert np.array_equal(stacked[row].bool().numpy(), expected(path).to_numpy())
        origins = torch.cat([batch["origin"] for batch in batches])
        assert origins.dtype == torch.float64 and origins.shape == (len(MODELS), 3)


def test_unpack_matches_numpy():
    bits = np.random.default_rng(1).integers(0, 256, size=(3, 4, 5, 2), dtype=np.uint8)
    for nz in (9, 13, 16):
        expected_bits = np.unpackbits(bits, axis=-1, count=nz).astype(bool)
        assert np.array_equal(unpack(torch.from_numpy(bits), nz).numpy(), expected_bits)


def test_a_transform_and_a_list_of_files(written):
    _, folder, _ = written
    files = sorted(folder.rglob("*.npz"))[:2]
    dataset = VoxelDataset(files, transform=lambda sample: sample["voxels"].sum())
    assert len(dataset) == 2 and int(dataset[0]) == voxelizer.load(files[0]).count()


def test_a_folder_without_grids_is_refused(tmp_path):
    with pytest.raises(FormatError, match=r"no \.npz files"):
        VoxelDataset(tmp_path)
    with pytest.raises(FormatError, match="neither a voxel shard store"):
        VoxelDataset(tmp_path / "missing")


def test_npz_files_are_read_with_the_npz_readers_checks(written, tmp_path):
    """np.load read any path: a FIFO among the files blocked a DataLoader's worker for ever,
    and a placement the .npz reader refuses (a NaN origin) was handed on."""
    _, folder, _ = written
    good = sorted(folder.rglob("*.npz"))[0]
    fifo = tmp_path / "fifo.npz"
    os.mkfifo(fifo)
    with time_limit(2.0), pytest.raises(FormatError, match=r"not a file \(a FIFO\)"):
        VoxelDataset([good, fifo])[1]
    with np.load(good) as data:
        members = {name: data[name] for name in data.files}
    members["origin"] = np.array([np.nan, 0.0, 0.0])
    nan_origin = tmp_path / "nan_origin.npz"
    np.savez(nan_origin, **members)
    with pytest.raises(FormatError, match="must be finite"):
        VoxelDataset([nan_origin])[0]
