"""PyTorch datasets of voxel grids (`pip install torch`; torch is imported here only).

`VoxelDataset` reads a voxel shard store (a batch written with format "zarr") or .npz files
(a folder of them, searched recursively, or a list). Item k is a dict of tensors:
`voxels` (bool [X, Y, Z], or `dtype`), `origin` (float64 [3]: the world position of voxel
(0, 0, 0)'s corner), `voxel_size` (float64 []) and `index` (the mesh's row in the store, or
the file's position). The default collate function stacks them into batches, and the dataset
pickles to DataLoader workers (each opens files as it reads them).

With packed=True an item carries `bits` (uint8 [X, Y, ceil(Z / 8)], the bits packed along z
as the store holds them) instead of `voxels`: eight times less for the DataLoader's workers to
hand over and for the copy to the GPU; `unpack(batch["bits"], nz)` makes the bool grids
there, on whatever device the bits are on.

Of a store, only the meshes stored ("done" or "skipped") are items: failed ones are left
out, and `index` says which row each item is.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .errors import FormatError
from .io.npz_file import read_npz_bits
from .io.zarr_store import Shards, unpacked

__all__ = ["VoxelDataset", "unpack"]


class VoxelDataset(torch.utils.data.Dataset):
    """Voxel grids as tensors, from a shard store or from .npz files.

    source: a store's path (a folder with zarr.json), a folder of .npz files, or a sequence
    of .npz paths. dtype: the voxels' tensor type (torch.bool by default; torch.float32 for
    a network's input). packed: `bits` instead of `voxels` (see unpack). transform: called
    on each item's dict, returning what the item is."""

    def __init__(
        self,
        source: str | os.PathLike | Sequence[str | os.PathLike],
        *,
        dtype: torch.dtype = torch.bool,
        packed: bool = False,
        transform: Callable[[dict[str, Any]], Any] | None = None,
    ):
        self.dtype = dtype
        self.packed = packed
        self.transform = transform
        self._shards: Shards | None = None
        self._files: list[Path] = []
        if isinstance(source, (str, os.PathLike)) and (Path(source) / "zarr.json").is_file():
            self._shards = Shards(source)
            status = self._shards.table["status"]
            self._rows = np.flatnonzero((status == "done") | (status == "skipped"))
            # the placements as tensors once: an item takes views of them
            self._origins = torch.from_numpy(np.array(self._shards.origin))
            self._sizes = torch.from_numpy(np.array(self._shards.voxel_size))
        else:
            self._files = _npz_files(source)
            self._rows = np.arange(len(self._files))

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, item: int) -> Any:
        if not -len(self) <= item < len(self):
            raise IndexError(f"item {item} of a dataset of {len(self)}")
        index = int(self._rows[item])
        if self._shards is not None:
            bits = self._shards.packed(index)
            nz = self._shards.shape[2]
            origin, voxel_size = self._origins[index], self._sizes[index]
        else:
            bits, nz, world_origin, size = _read_npz(self._files[index])
            origin = torch.from_numpy(world_origin)
            voxel_size = torch.tensor(size, dtype=torch.float64)
        sample: dict[str, Any] = {}
        if self.packed:
            sample["bits"] = torch.frombuffer(bytearray(bits), dtype=torch.uint8).view(bits.shape)
        else:
            sample["voxels"] = torch.from_numpy(unpacked(bits, nz)).to(self.dtype)
        sample.update(origin=origin, voxel_size=voxel_size, index=index)
        return sample if self.transform is None else self.transform(sample)


def unpack(bits: torch.Tensor, nz: int) -> torch.Tensor:
    """bool [..., nz] of bits packed along the last axis (uint8 [..., ceil(nz / 8)], big
    bit order: np.packbits'), on the bits' device."""
    shifts = torch.arange(7, -1, -1, dtype=torch.uint8, device=bits.device)
    unpacked_bits = (bits.unsqueeze(-1) >> shifts) & 1
    return unpacked_bits.flatten(-2)[..., :nz].bool()


def _npz_files(source: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Path]:
    if isinstance(source, (str, os.PathLike)):
        folder = Path(source)
        if not folder.is_dir():
            raise FormatError(f"{folder}: neither a voxel shard store nor a folder of .npz files")
        files = sorted(folder.rglob("*.npz"))
        if not files:
            raise FormatError(f"{folder}: no .npz files in it")
        return files
    return [Path(item) for item in source]


def _read_npz(path: Path) -> tuple[np.ndarray, int, np.ndarray, float]:
    """(bits packed along z, nz, origin, voxel size) of an .npz file of voxelizer's (whose bits
    are packed over the whole grid: the same bytes where nz is a multiple of 8), read with
    the .npz reader's checks (a regular file, its placement, its size against memory)."""
    bits, placement = read_npz_bits(path)
    nx, ny, nz = placement.shape
    if nz % 8 == 0:
        packed = bits.reshape(nx, ny, nz // 8)
    else:
        voxels = unpacked(bits, nx * ny * nz).reshape(nx, ny, nz)
        packed = np.packbits(voxels, axis=-1)
    size = placement.voxel_size
    if isinstance(size, tuple):
        raise FormatError(f"{path}: voxels that are not cubes ({size}): one voxel size is taken")
    return packed, nz, np.array(placement.origin, np.float64), float(size)
