"""Options: what the user asked for, checked once, before the mesh is read.

Every face (the API functions, the Voxelizer methods, the CLI through them) builds one
`Options` from its keyword arguments; everything after it trusts the values.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import numpy.typing

from .budget import parse_size
from .errors import FillModeError, GridError, VariantError
from .pipeline.passes import DEFAULT_SORT, DEFAULT_VARIANT, SORTS, VARIANTS
from .pipeline.runner import FILL_MODES, Progress
from .placement import GridLike, Shape, check_bounds, check_shape, check_voxel_size


@dataclass(frozen=True, eq=False)
class Options:
    """A checked request: grid shape or voxel size, bounds, variant, fill mode, sort, memory
    budget and progress callback. Build it with `Options.create`."""

    shape: Shape | None  # None with voxel_size, or for the default grid
    voxel_size: float | None
    bounds: np.ndarray | None  # float64 (2, 3), read-only
    variant: str
    fill_mode: str
    sort: str
    max_memory: int | None  # bytes; None: the device's default budget
    progress: Progress | None

    @classmethod
    def create(
        cls,
        grid: GridLike | None = None,
        *,
        variant: str = DEFAULT_VARIANT,
        fill_mode: str = "parity",
        sort: str = DEFAULT_SORT,
        voxel_size: float | None = None,
        bounds: numpy.typing.ArrayLike | None = None,
        max_memory: int | str | None = None,
        progress: Progress | None = None,
    ) -> Options:
        """Check every option (GridError, VariantError, FillModeError, MemoryBudgetError)."""
        if grid is not None and voxel_size is not None:
            raise GridError("give a grid or a voxel size, not both")
        box = None
        if bounds is not None:
            box = check_bounds(bounds)
            box.flags.writeable = False
        return cls(
            shape=None if grid is None else check_shape(grid),
            voxel_size=None if voxel_size is None else check_voxel_size(voxel_size),
            bounds=box,
            variant=_choice(variant, VARIANTS, "variant", VariantError),
            fill_mode=_choice(fill_mode, FILL_MODES, "fill mode", FillModeError),
            sort=_choice(sort, SORTS, "sort", VariantError),
            max_memory=None if max_memory is None else parse_size(max_memory),
            progress=progress,
        )


def _choice(value: object, allowed: Collection[str], what: str, error: type[Exception]) -> str:
    """`value` if it is one of `allowed` (names), else `error` listing them."""
    if not isinstance(value, str) or value not in allowed:
        raise error(f"unknown {what} {value!r} (choose from {', '.join(allowed)})")
    return value
