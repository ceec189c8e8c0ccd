"""DenseGrid: the voxelization as a full (nx, ny, nz) bit grid, in the layout the GPU writes.

Its .npz file is voxelizer.io's (voxelizer.save, voxelizer.load)."""

from __future__ import annotations

import numpy as np

from .placement import GridPlacement, Placed, shape_text
from .stats import Stats


def column_words(nz: int) -> int:
    """32-bit words per voxel column: a column (i, j) holds bits k = 0..nz-1, padded to 32."""
    return (nz + 31) // 32


def grid_bytes(nx: int, rows: int, nz: int) -> int:
    """Bytes of the GPU bit grid of `rows` rows of nx columns, each nz voxels tall."""
    return nx * rows * column_words(nz) * 4


def unpack_columns(words: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """GPU layout -> bool[i, j, k]. The GPU stores column (i, j) at word (j*nx + i)*W, bit k."""
    nx, ny, nz = shape
    w = column_words(nz)
    bits = np.unpackbits(words.view(np.uint8).reshape(ny, nx, w * 4), axis=2, bitorder="little")
    return bits[:, :, :nz].astype(bool).transpose(1, 0, 2)


def pack_columns(voxels: np.ndarray) -> np.ndarray:
    """bool[i, j, k] -> the GPU layout (the inverse of unpack_columns)."""
    nx, ny, nz = voxels.shape
    padded = np.zeros((ny, nx, column_words(nz) * 32), bool)
    padded[:, :, :nz] = voxels.transpose(1, 0, 2)
    return np.packbits(padded, axis=2, bitorder="little").view(np.uint32).reshape(-1)


class DenseGrid(Placed):
    """A voxelization on a dense grid: in mode "solid", voxel (i, j, k) is set iff its
    centre is inside the mesh (README.md states the surface modes).

    `face_ids` (voxelize_dense(..., attributes=["face"])): int32 (nx, ny, nz), for every
    surface voxel the smallest index (row of the mesh's faces) of the triangles that mark
    it, -1 elsewhere; None when not asked for."""

    def __init__(
        self,
        voxels: np.ndarray,
        placement: GridPlacement,
        stats: Stats | None = None,
        *,
        face_ids: np.ndarray | None = None,
    ):
        if voxels.shape != placement.shape or voxels.dtype != bool:
            raise ValueError(
                f"expected a bool array of shape {placement.shape}, got "
                f"{voxels.dtype} {voxels.shape}"
            )
        if face_ids is not None and (face_ids.shape != voxels.shape or face_ids.dtype != np.int32):
            raise ValueError(f"expected int32 face ids of shape {voxels.shape}")
        self._voxels = voxels
        self.face_ids = face_ids
        self.placement = placement
        self.stats = stats if stats is not None else Stats()

    def to_numpy(self, attribute: str | None = None) -> np.ndarray:
        """bool array of shape (nx, ny, nz), indexed [i, j, k] = [x, y, z]; attribute="face":
        face_ids (ValueError when the grid has none)."""
        if attribute is None:
            return self._voxels
        if attribute != "face":
            raise ValueError(f"attribute must be 'face', not {attribute!r}")
        if self.face_ids is None:
            raise ValueError("this grid has no face ids (voxelize with attributes=['face'])")
        return self.face_ids

    @property
    def attributes(self) -> tuple[str, ...]:
        return () if self.face_ids is None else ("face",)

    def count(self) -> int:
        """Solid voxels."""
        return int(np.count_nonzero(self._voxels))

    def __repr__(self) -> str:
        return (
            f"DenseGrid({shape_text(self.shape)}, {self.count()} solid voxels, "
            f"voxel_size={self.voxel_size:g})"
        )
