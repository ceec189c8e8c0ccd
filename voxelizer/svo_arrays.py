"""The arrays beside an SVO's tree (voxelizer.svo): its face ids (`FaceIds`), what its
labels and colours offer it (`SolidValuesLike`, voxelizer.attributes.voxel_values), and the
read-only integer copies every array of an SVO is kept as."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing

from .errors import SVOFormatError
from .octree import mapped_read_only


@dataclass(frozen=True, eq=False)
class FaceIds:
    """The face ids of an SVO (docs/svo-format.md, version 3): for every set voxel that a
    triangle marks, the smallest index of the triangles that mark it.

    Beside the stored bricks, `brick_ids` holds one id per set voxel of each stored brick, in
    brick order and, within a brick, in bit order (brick b's ids start at the popcount of
    the bricks before it); -1 for a set voxel that no triangle marks (the inside of mode
    "both"). Voxels in full cubes have no brick: the bricks of full cubes that hold marked
    voxels are listed by Morton code (`full_codes`, ascending) with a mask of their marked
    voxels (`full_masks`) and the ids of those voxels (`full_ids`, brick by brick, bit
    order)."""

    brick_ids: np.ndarray  # int32
    full_codes: np.ndarray  # uint64
    full_masks: np.ndarray  # uint64
    full_ids: np.ndarray  # int32

    @classmethod
    def frozen(
        cls,
        brick_ids: np.ndarray,
        full_codes: np.ndarray,
        full_masks: np.ndarray,
        full_ids: np.ndarray,
    ) -> FaceIds:
        """Read-only copies; SVOFormatError unless each array holds integers that fit."""
        return cls(
            frozen_signed(np.asarray(brick_ids).reshape(-1), "face ids"),
            frozen_array(np.asarray(full_codes).reshape(-1), np.uint64, "full brick codes"),
            frozen_array(np.asarray(full_masks).reshape(-1), np.uint64, "full brick masks"),
            frozen_signed(np.asarray(full_ids).reshape(-1), "face ids"),
        )

    @property
    def nbytes(self) -> int:
        return 4 * len(self.brick_ids) + 16 * len(self.full_codes) + 4 * len(self.full_ids)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FaceIds):
            return NotImplemented
        return all(
            np.array_equal(getattr(self, name), getattr(other, name))
            for name in ("brick_ids", "full_codes", "full_masks", "full_ids")
        )

    __hash__ = None  # type: ignore[assignment]


class SolidValuesLike(Protocol):
    """Labels and colours of the solid voxels (voxelizer.attributes.voxel_values); `dense`
    takes the SVO they belong to."""

    @property
    def label_names(self) -> tuple[str, ...]: ...
    @property
    def names(self) -> tuple[str, ...]: ...
    def dense(self, svo: Any, name: str) -> np.ndarray: ...
    def check(self, count: int) -> str: ...


def frozen_signed(array: np.ndarray, name: str) -> np.ndarray:
    """A private read-only int32 copy of ids from -1 up."""
    if array.dtype.kind not in "ui" or (
        array.size and (array.min() < -1 or array.max() > np.iinfo(np.int32).max)
    ):
        raise SVOFormatError(f"{name} must be integers from -1 that fit int32")
    out = np.array(array, dtype=np.int32)
    out.flags.writeable = False
    return out


def frozen_array(array: np.ndarray, dtype: numpy.typing.DTypeLike, name: str) -> np.ndarray:
    """A private read-only copy in native byte order; only lossless integer conversions."""
    if array.dtype.kind not in "ui" or (
        array.dtype != dtype  # (of the dtype itself, every value fits: nothing to search)
        and array.size
        and (array.min() < 0 or array.max() > np.iinfo(dtype).max)
    ):
        raise SVOFormatError(f"{name} must hold unsigned integers that fit {np.dtype(dtype).name}")
    if mapped_read_only(array) and array.dtype == dtype:
        return array  # an .svo file mapped read-only (voxelizer.load(..., mmap=True)): no copy
    out = np.array(array, dtype=dtype)
    out.flags.writeable = False
    return out
