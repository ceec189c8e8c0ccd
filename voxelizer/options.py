"""Options: what the user asked for, checked once, before the mesh is read.

The option names are written once, here: `BatchOptions` and `VoxelizeOptions` (their types,
for mypy's checks of every call) with `DEFAULTS`. Every face (the API functions, the
Voxelizer methods, voxelize_many, the Ray functions, the CLI through them) takes them as
`**options`, shows them as its own keyword parameters (`option_keywords`, for
inspect.signature, help() and Jupyter) and builds one `Options` from them; everything after
it trusts the values.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, cast

import numpy as np
import numpy.typing

from .attributes.colours import Color, parse_color
from .attributes.labels import DEFAULT_OVERLAP, OVERLAP_RULES
from .budget import parse_size
from .choices import (
    AUTO_FILL,
    DEFAULT_FILL_MODE,
    DEFAULT_MODE,
    DEFAULT_SORT,
    DEFAULT_VARIANT,
    FILL_CHOICES,
    MODES,
    SORTS,
    SURFACES,
    VARIANT_CHOICES,
)
from .errors import ArgumentError, FillModeError, GridError, ModeError, VariantError
from .normalize import FITS, unit_cube_border, unit_cube_bounds
from .placement import (
    DEFAULT_GRID,
    NO_PADDING,
    GridLike,
    Padding,
    PadLike,
    Shape,
    VoxelSize,
    check_bounds,
    check_box_fit,
    check_grid_request,
    check_pad,
    check_shape,
    check_voxel_size,
)
from .progress import Progress

if TYPE_CHECKING:
    from typing_extensions import Unpack


class BatchOptions(TypedDict, total=False):
    """The options of every voxelization, a batch's included: what to voxelize how. (Plain
    values: a batch sends them to other processes.) Options.create documents them."""

    variant: str
    fill_mode: str
    sort: str
    voxel_size: float | Sequence[float] | None
    bounds: numpy.typing.ArrayLike | None
    box_fit: str
    pad: PadLike
    fit: str | None
    max_memory: int | str | None
    mode: str
    surface: str | None


class VoxelizeOptions(BatchOptions, total=False):
    """The options of one voxelize call: a batch's, a progress callback and the per-voxel
    attributes asked for (face ids, labels, colours)."""

    progress: Progress | None
    attributes: Collection[str]
    labels: bool
    colors: bool
    overlap: str
    fill_color: object


DEFAULTS: VoxelizeOptions = {
    "variant": DEFAULT_VARIANT,
    "fill_mode": DEFAULT_FILL_MODE,
    "sort": DEFAULT_SORT,
    "voxel_size": None,
    "bounds": None,
    "box_fit": "cover",
    "pad": NO_PADDING,
    "fit": None,
    "max_memory": None,
    "mode": DEFAULT_MODE,
    "surface": None,
    "progress": None,
    "attributes": (),
    "labels": False,
    "colors": False,
    "overlap": DEFAULT_OVERLAP,
    "fill_color": None,
}
BATCH_OPTION_NAMES = tuple(BatchOptions.__annotations__)
OPTION_NAMES = tuple(VoxelizeOptions.__annotations__)  # the batch's first, then the call's

Function = TypeVar("Function", bound=Callable[..., Any])


def option_keywords(options: type[BatchOptions]) -> Callable[[Function], Function]:
    """A decorator: the function's `**options` (typed `Unpack[options]` for mypy) shown as the
    keyword parameters it takes, with their defaults, to inspect.signature (help(), Jupyter,
    IDEs). The call itself is not changed: Options.create refuses unknown names."""
    defaults: Mapping[str, object] = DEFAULTS

    def show(function: Function) -> Function:
        signature = inspect.signature(function)
        parameters = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
        parameters += [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=defaults[name],
                annotation=getattr(annotation, "__forward_arg__", annotation),
            )
            for name, annotation in options.__annotations__.items()
        ]
        shown = signature.replace(parameters=parameters)
        function.__signature__ = shown  # type: ignore[attr-defined]
        return function

    return show


def batch_options_of(namespace: object) -> BatchOptions:
    """The batch options an object holds as attributes of their names (the command's parsed
    arguments: its option of each name)."""
    return cast(BatchOptions, {name: getattr(namespace, name) for name in BATCH_OPTION_NAMES})


@dataclass(frozen=True, eq=False)
class Options:
    """A checked request: grid shape or voxel size, bounds, box fit, padding, variant, fill
    mode, sort, memory budget, progress callback, mode, surface kind and attributes. Build it
    with `Options.create`."""

    shape: Shape | None  # None with voxel_size, or for the default grid
    voxel_size: VoxelSize | None  # h, or (hx, hy, hz)
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
    box_fit: str = "cover"  # bounds not a whole number of voxels: "cover" them or "inside"
    pad: Padding = NO_PADDING  # empty voxels added: ((x_lo, x_hi), (y_lo, y_hi), (z_lo, z_hi))
    fit: str | None = None  # the mesh normalised by this preset where it is read (normalize.py)

    @classmethod
    @option_keywords(VoxelizeOptions)
    def create(cls, grid: GridLike | None = None, **options: Unpack[VoxelizeOptions]) -> Options:
        """Check every option (GridError, VariantError, FillModeError, MemoryBudgetError,
        ModeError, ArgumentError; TypeError for a name that is no option).

        mode: "solid" (voxels whose centres are inside), "surface" (voxels the triangles
        touch, of the kind `surface`: "conservative", the default, or "thin") or "both" (the
        solid united with the conservative surface). attributes: ["face"] also gives each
        surface voxel the smallest index of the triangles that mark it (DenseGrid and SVO).
        labels: a label grid of the mesh's parts; overlap: "last" or "smallest", the part an
        overlap of parts belongs to. colors: every set voxel's colour; fill_color: None
        (or "nearest"), the colour of the nearest surface voxel along the column, else the
        colour of every voxel the surface does not mark ("#RRGGBB[AA]" or 3-4 integers).

        Placement (docs/guide/grids.md): voxel_size h or (hx, hy, hz); bounds, the box the
        grid is (voxel (0, 0, 0)'s corner at its min corner; a box that cuts the mesh crops
        it); box_fit, where bounds are not a whole number of voxels: "cover" (default) or
        "inside"; pad, empty voxels added around the grid: k, (kx, ky, kz) or ((x_lo, x_hi),
        (y_lo, y_hi), (z_lo, z_hi)); fit="unit-cube", the mesh normalised to the unit cube
        and the grid placed on it with `pad` voxels of border inside the grid:
        voxelize(fit_mesh(mesh), N, bounds=unit_cube_bounds(N, pad)) (voxelizer.normalize)."""
        unknown = options.keys() - DEFAULTS.keys()
        if unknown:
            raise TypeError(
                f"unexpected keyword argument {sorted(unknown)[0]!r} (the options are "
                f"{', '.join(OPTION_NAMES)})"
            )
        given: VoxelizeOptions = {**DEFAULTS, **options}
        if given["fit"] is not None:
            return _fitted(cls, grid, given)
        voxel_size, bounds = given["voxel_size"], given["bounds"]
        if grid is not None and voxel_size is not None:
            raise GridError("give a grid or a voxel size, not both")
        box = None
        if bounds is not None:
            box = check_bounds(bounds)
            box.flags.writeable = False
        shape = None if grid is None else check_shape(grid)
        size = None if voxel_size is None else check_voxel_size(voxel_size)
        box_fit = check_box_fit(given["box_fit"])
        check_grid_request(shape, size, box, box_fit)
        mode = _choice(given["mode"], MODES, "mode", ModeError)
        max_memory = given["max_memory"]
        return cls(
            mode=mode,
            surface=_surface_kind(mode, given["surface"], given["fill_mode"]),
            attributes=_attributes(mode, given["attributes"]),
            shape=shape,
            voxel_size=size,
            bounds=box,
            box_fit=box_fit,
            pad=check_pad(given["pad"]),
            variant=_choice(given["variant"], VARIANT_CHOICES, "variant", VariantError),
            fill_mode=_choice(given["fill_mode"], FILL_CHOICES, "fill mode", FillModeError),
            sort=_choice(given["sort"], SORTS, "sort", VariantError),
            max_memory=None if max_memory is None else parse_size(max_memory),
            progress=_callback(given["progress"]),
            labels=_flag(given["labels"], "labels"),
            colors=_flag(given["colors"], "colors"),
            overlap=_choice(given["overlap"], OVERLAP_RULES, "overlap rule", ModeError),
            fill_color=_fill_color(given["fill_color"]),
        )

    def keywords(self) -> VoxelizeOptions:
        """The checked options again as keywords of a voxelize call (whose grid is `shape`)."""
        words = {name: getattr(self, name) for name in OPTION_NAMES}
        if self.fit is not None:  # the request as given: create derives the box again
            assert self.shape is not None and self.bounds is not None  # create derived them
            words.update(bounds=None, pad=unit_cube_border(self.shape[0], self.bounds))
        return cast(VoxelizeOptions, words)


def _fitted(cls: type[Options], grid: GridLike | None, given: VoxelizeOptions) -> Options:
    """Options for fit="unit-cube": a cube grid of N (default DEFAULT_GRID) on the bounds
    unit_cube_bounds(N, pad), pad one number (the border inside the grid)."""
    fit = given["fit"]
    if not isinstance(fit, str) or fit not in FITS:
        raise ModeError(f"unknown fit {fit!r} (choose from {', '.join(FITS)})")
    if given["voxel_size"] is not None or given["bounds"] is not None:
        raise GridError("fit places the grid itself: leave out voxel_size and bounds")
    pad = check_pad(given["pad"])
    if len({side for axis in pad for side in axis}) != 1:
        raise GridError(f"with fit, pad is one number of voxels (the border), not {pad}")
    shape = check_shape(DEFAULT_GRID if grid is None else grid)
    if len(set(shape)) != 1:
        raise GridError(f"fit places the mesh on a cube: the grid is N, not {shape}")
    n = shape[0]
    border = int(pad[0][0])
    bounds = unit_cube_bounds(n, border)
    checked = cls.create(n, **{**given, "fit": None, "pad": NO_PADDING, "bounds": bounds})  # type: ignore[arg-type]
    return replace(checked, fit=fit)


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


def _callback(progress: object) -> Progress | None:
    """The progress callback, refused before the work if it cannot be called."""
    if progress is not None and not callable(progress):
        raise ArgumentError(
            f"progress must be a callable taking (stage, done, total), not {progress!r}"
        )
    return progress  # callable: called as Progress documents


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
    if fill_mode not in ("parity", AUTO_FILL):
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
