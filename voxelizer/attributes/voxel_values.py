"""Labels and colours of an SVO: one value per solid voxel, in the octree's solid order.

The solid order (docs/svo-format.md, "Labels and colours"): every 4x4x4 brick that holds a
solid voxel, stored (mixed) or inside a full cube alike, in increasing Morton order of the
brick; within a brick, its solid voxels in increasing bit order (x + 4y + 16z). The order
follows from the tree alone, so the values need no index: value s belongs to the s-th
solid voxel. Conversions go a bounded number of bricks at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..svo import SVO, morton_decode

BRICKS_PER_STEP = 1 << 14  # bricks converted at once (at most 1M voxels)
LABEL_DTYPE = np.uint16
ATTRIBUTE_NAMES = ("label", "color")


@dataclass(frozen=True, eq=False)
class SolidValues:
    """An SVO's labels (uint16 (S,), 0 never: every solid voxel has a part) and colours
    (uint8 (S, 4) RGBA), S its solid voxels in solid order, and the labels' names (label l
    is part label_names[l - 1])."""

    labels: np.ndarray | None = None
    colors: np.ndarray | None = None
    label_names: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The attributes held, of ATTRIBUTE_NAMES."""
        return tuple(
            name
            for name, array in zip(ATTRIBUTE_NAMES, (self.labels, self.colors))
            if array is not None
        )

    @classmethod
    def of_dense(
        cls,
        svo: SVO,
        labels: np.ndarray | None,
        colors: np.ndarray | None,
        label_names: tuple[str, ...] = (),
    ) -> SolidValues:
        """The values of the solid voxels of `svo` taken from dense [i, j, k] arrays
        (labels uint16 (nx, ny, nz), colours uint8 (nx, ny, nz, 4))."""
        arrays: list[np.ndarray | None] = []
        for array, dtype, tail in ((labels, LABEL_DTYPE, ()), (colors, np.uint8, (4,))):
            if array is None:
                arrays.append(None)
                continue
            if array.shape != (*svo.shape, *tail) or array.dtype != dtype:
                raise ValueError(f"expected {np.dtype(dtype).name} {(*svo.shape, *tail)}")
            out = np.empty((svo.count(), *tail), dtype)
            for at, voxels in _solid_voxels(svo):
                out[at : at + len(voxels)] = array[tuple(voxels.T)]
            out.flags.writeable = False
            arrays.append(out)
        return cls(arrays[0], arrays[1], tuple(label_names))

    def dense(self, svo: SVO, name: str) -> np.ndarray:
        """The dense [i, j, k] array of one attribute: 0 at empty voxels."""
        values = {"label": self.labels, "color": self.colors}.get(name)
        if values is None:
            raise ValueError(f"this SVO has no {name} attribute")
        out = np.zeros(svo.shape + values.shape[1:], values.dtype)
        for at, voxels in _solid_voxels(svo):
            out[tuple(voxels.T)] = values[at : at + len(voxels)]
        return out

    def check(self, count: int) -> str:
        """Why these values cannot belong to an octree of `count` solid voxels, or ""."""
        if self.labels is not None and (
            self.labels.shape != (count,) or self.labels.dtype != LABEL_DTYPE
        ):
            return f"{self.labels.shape} labels for {count} solid voxels"
        if (
            self.labels is not None
            and count
            and (self.labels.min() < 1 or self.labels.max() > len(self.label_names))
        ):
            return f"labels outside 1..{len(self.label_names)} (the named parts)"
        if self.colors is not None and (
            self.colors.shape != (count, 4) or self.colors.dtype != np.uint8
        ):
            return f"{self.colors.shape} colours for {count} solid voxels"
        return ""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SolidValues):
            return NotImplemented
        return (
            self.label_names == other.label_names
            and _same(self.labels, other.labels)
            and _same(self.colors, other.colors)
        )

    __hash__ = None  # type: ignore[assignment]


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))


def _solid_voxels(svo: SVO) -> Iterator[tuple[int, np.ndarray]]:
    """(index of the first, (M, 3) int64 [i, j, k]) of the solid voxels in solid order, a
    step of bricks at a time."""
    codes, masks = svo.solid_bricks()
    at = 0
    for start in range(0, len(codes), BRICKS_PER_STEP):
        step_masks = masks[start : start + BRICKS_PER_STEP]
        as_bytes = np.ascontiguousarray(step_masks, "<u8").view(np.uint8).reshape(-1, 8)
        brick, bit = np.nonzero(np.unpackbits(as_bytes, axis=1, bitorder="little"))
        local = np.stack([bit & 3, (bit >> 2) & 3, bit >> 4], axis=1)
        corner = morton_decode(codes[start : start + BRICKS_PER_STEP], svo.levels) * 4
        voxels = corner[brick] + local
        yield at, voxels
        at += len(voxels)
