"""Options: what the user asked for, checked once, before the mesh is read.

Every face (the API functions, the Voxelizer methods, the CLI through them) builds one
`Options` from its keyword arguments; everything after it trusts the values.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import numpy.typing

from .attributes.colours import Color, parse_color
from .attributes.labels import DEFAULT_OVERLAP, OVERLAP_RULES
from .budget import parse_size
from .errors import FillModeError, GridError, ModeError, VariantError
from .pipeline.passes import DEFAULT_SORT, DEFAULT_VARIANT, SORTS, SURFACES, VARIANT_CHOICES
from .pipeline.runner import FILL_MODES, MODES, Progress
from .placement import GridLike, Shape, check_bounds, check_shape, check_voxel_size


@dataclass(frozen=True, eq=False)
class Options:
    """A checked request: grid shape or voxel size, bounds, variant, fill mode, sort, memory
    budget, progress callback, mode, surface kind and attributes. Build it with
    `Options.create`."""

    shape: Shape | None  # None with voxel_size, or for the default grid
    voxel_size: float | None
    bounds: np.ndarray | None  # float64 (2, 3), read-only
    variant: str
    fill_mode: str
    sort: str
    max_memory: int | None  # bytes; None: the device's default budget
    progress: Progress | None
    mode: str = "solid"
    surface: str | None = None  # the surface's kind for modes "surface" and "both", else None
    attributes: tuple[str, ...] = ()  # per-voxel attributes asked for: "face"
    labels: bool = False  # a label grid of the mesh's parts (voxelizer.attributes.labels)
    colors: bool = False  # the colour of every set voxel (voxelizer.attributes.colours)
    overlap: str = DEFAULT_OVERLAP  # which part an overlap of parts belongs to
    fill_color: Color | None = None  # the inside's colour; None: its column's surface colour

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
        mode: str = "solid",
        surface: str | None = None,
        attributes: Collection[str] = (),
        labels: bool = False,
        colors: bool = False,
        overlap: str = DEFAULT_OVERLAP,
        fill_color: object = None,
    ) -> Options:
        """Check every option (GridError, VariantError, FillModeError, MemoryBudgetError,
        ModeError).

        mode: "solid" (voxels whose centres are inside), "surface" (voxels the triangles
        touch, of the kind `surface`: "conservative", the default, or "thin") or "both" (the
        solid united with the conservative surface). attributes: ["face"] also gives each
        surface voxel the smallest index of the triangles that mark it (DenseGrid and SVO).
        labels: a label grid of the mesh's parts; overlap: "last" or "smallest", the part an
        overlap of parts belongs to. colors: every set voxel's colour; fill_color: None
        (or "nearest"), the colour of the nearest surface voxel along the column, else the
        colour of every voxel the surface does not mark ("#RRGGBB[AA]" or 3-4 integers)."""
        if grid is not None and voxel_size is not None:
            raise GridError("give a grid or a voxel size, not both")
        box = None
        if bounds is not None:
            box = check_bounds(bounds)
            box.flags.writeable = False
        mode = _choice(mode, MODES, "mode", ModeError)
        return cls(
            mode=mode,
            surface=_surface_kind(mode, surface, fill_mode),
            attributes=_attributes(mode, attributes),
            shape=None if grid is None else check_shape(grid),
            voxel_size=None if voxel_size is None else check_voxel_size(voxel_size),
            bounds=box,
            variant=_choice(variant, VARIANT_CHOICES, "variant", VariantError),
            fill_mode=_choice(fill_mode, FILL_MODES, "fill mode", FillModeError),
            sort=_choice(sort, SORTS, "sort", VariantError),
            max_memory=None if max_memory is None else parse_size(max_memory),
            progress=progress,
            labels=_flag(labels, "labels"),
            colors=_flag(colors, "colors"),
            overlap=_choice(overlap, OVERLAP_RULES, "overlap rule", ModeError),
            fill_color=_fill_color(fill_color),
        )


def _choice(value: object, allowed: Collection[str], what: str, error: type[Exception]) -> str:
    """`value` if it is one of `allowed` (names), else `error` listing them."""
    if not isinstance(value, str) or value not in allowed:
        raise error(f"unknown {what} {value!r} (choose from {', '.join(allowed)})")
    return value


ATTRIBUTES = ("face",)


def _flag(value: object, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ModeError(f"{name} must be True or False, not {value!r}")
    return bool(value)


def _fill_color(value: object) -> Color | None:
    try:
        return parse_color(value)
    except ValueError as exc:
        raise ModeError(f"fill_color: {exc}") from None


def _surface_kind(mode: str, surface: object, fill_mode: object) -> str | None:
    """The surface kind a mode voxelizes, or ModeError for options that do not go together."""
    if surface is not None:
        _choice(surface, SURFACES, "surface", ModeError)
    if mode == "solid":
        if surface is not None:
            raise ModeError(f"surface={surface!r} needs mode='surface' or mode='both'")
        return None
    if mode == "both":
        if surface == "thin":
            raise ModeError(
                "mode='both' adds the conservative surface; surface='thin' is for mode='surface'"
            )
        return "conservative"
    if fill_mode != "parity":
        raise ModeError(f"fill_mode={fill_mode!r} fills a solid; mode='surface' has none")
    return "conservative" if surface is None else str(surface)


def _attributes(mode: str, attributes: object) -> tuple[str, ...]:
    """The attribute names, checked: each one known, and a surface to attach them to."""
    if isinstance(attributes, str) or not isinstance(attributes, Collection):
        raise ModeError(f"attributes must be a list of names such as ['face'], not {attributes!r}")
    names = tuple(
        sorted({_choice(name, ATTRIBUTES, "attribute", ModeError) for name in attributes})
    )
    if names and mode == "solid":
        raise ModeError("face ids belong to surface voxels: use mode='surface' or mode='both'")
    return names
