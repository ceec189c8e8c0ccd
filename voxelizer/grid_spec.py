"""What a user may ask of a grid, checked: its shape, voxel size, bounds, padding and how a
voxel size fits a box. Each check returns the value in one form or raises a GridError that
names the value (the command line prints it as one line and exits with status 2).

The rules that turn these into a placement are voxelizer.placement's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .errors import GridError

# Grids up to FINE_LATTICE_MAX a side run the dense passes on the finest lattice; larger ones,
# up to MAX_RESOLUTION, the sparse path on a lattice LARGE_LATTICE_SHIFT bits coarser
# (placement.lattice_shift).
FINE_LATTICE_MAX = 8192
LARGE_LATTICE_SHIFT = 3
MAX_RESOLUTION = FINE_LATTICE_MAX << LARGE_LATTICE_SHIFT  # voxels along each side, at most
DEFAULT_GRID = 512  # the cube used when neither a grid nor a voxel size is asked for
AXES = "xyz"
# How a grid of a given voxel size fits bounds that are not a whole number of voxels:
# "cover" the box (the last voxel may reach past its far corner) or lie "inside" it.
BOX_FITS = ("cover", "inside")

Shape = tuple[int, int, int]
GridLike = int | Sequence[int]  # N for the cube N^3, or (nx, ny, nz)
# h for cubes, or (hx, hy, hz): a float for cubic voxels, three floats for others
VoxelSize = float | tuple[float, float, float]
VoxelSizeLike = float | Sequence[float]
# Empty voxels added before and after each axis, numpy.pad's form (checked, it checks again
# to itself): ((x_lo, x_hi), (y_lo, y_hi), (z_lo, z_hi))
Padding = tuple[tuple[int, int], tuple[int, int], tuple[int, int]]
PadLike = int | Sequence[int] | Sequence[Sequence[int]]
NO_PADDING: Padding = ((0, 0), (0, 0), (0, 0))


def check_resolution(resolution: object, what: str = "grid") -> int:
    """Return one grid side as an int from 1 to MAX_RESOLUTION, or raise GridError."""
    if isinstance(resolution, bool) or not isinstance(resolution, (int, np.integer)):
        raise GridError(f"{what} must be an integer, not {resolution!r}")
    n = int(resolution)
    if n < 1:
        raise GridError(f"{what} must be at least 1, not {n}")
    if n > MAX_RESOLUTION:
        raise GridError(f"{what} {n} is larger than the supported maximum {MAX_RESOLUTION}")
    return n


def check_shape(grid: object) -> Shape:
    """(nx, ny, nz) from an int N (the cube N^3) or three ints, or GridError saying why not."""
    if isinstance(grid, (int, np.integer)) and not isinstance(grid, bool):
        n = check_resolution(grid)
        return (n, n, n)
    if isinstance(grid, np.ndarray):
        grid = grid.tolist() if grid.ndim == 1 else grid
    if isinstance(grid, (str, bytes)) or not isinstance(grid, Sequence):
        raise GridError(f"grid must be an integer N or three integers (nx, ny, nz), not {grid!r}")
    if len(grid) != 3:
        raise GridError(f"grid must have three sides (nx, ny, nz), not {len(grid)}: {grid!r}")
    nx, ny, nz = (check_resolution(side, f"grid side {axis}") for axis, side in zip(AXES, grid))
    return nx, ny, nz


def shape_text(shape: Sequence[int]) -> str:
    """'512x256x128': how a shape is written on the command line and in summaries."""
    return "x".join(str(int(n)) for n in shape)


def check_bounds(bounds: object) -> np.ndarray:
    """float64 (2, 3) [[xmin, ymin, zmin], [xmax, ymax, zmax]], finite with min < max, or
    GridError."""
    try:
        given = np.asarray(bounds)
        if given.dtype.kind in "cb":  # complex or bool: never cast silently
            raise GridError(f"bounds must be real numbers, not {given.dtype}")
        box = given.astype(np.float64)
    except (TypeError, ValueError):
        raise GridError(
            f"bounds must be numbers [[xmin, ymin, zmin], [xmax, ymax, zmax]], not {bounds!r}"
        ) from None
    if box.shape != (2, 3):
        raise GridError(
            f"bounds must have shape (2, 3) [[xmin, ymin, zmin], [xmax, ymax, zmax]], "
            f"not {box.shape}"
        )
    for corner, side in ((0, "min"), (1, "max")):
        for axis in range(3):
            if not math.isfinite(box[corner, axis]):
                raise GridError(f"bounds must be finite: {AXES[axis]}{side} is {box[corner, axis]}")
    for axis in range(3):
        if not box[0, axis] < box[1, axis]:
            raise GridError(
                f"bounds: {AXES[axis]}min {box[0, axis]:g} must be less than "
                f"{AXES[axis]}max {box[1, axis]:g}"
            )
    return box


def _one_voxel_size(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise GridError(f"{what} must be a number, not {value!r}")
    h = float(value)
    if not (math.isfinite(h) and h > 0):
        raise GridError(f"{what} must be positive and finite, not {h!r}")
    return h


def check_voxel_size(voxel_size: object) -> VoxelSize:
    """h (cubic voxels) as a positive finite float, or three of them (hx, hy, hz) as a tuple
    (three equal sizes are the float), or GridError naming the value."""
    if isinstance(voxel_size, np.ndarray) and voxel_size.ndim == 0:  # a 0-d array's number
        voxel_size = voxel_size[()]
    if isinstance(voxel_size, np.ndarray) and voxel_size.ndim == 1:
        voxel_size = voxel_size.tolist()
    if isinstance(voxel_size, Sequence) and not isinstance(voxel_size, (str, bytes)):
        if len(voxel_size) != 3:
            raise GridError(
                f"voxel size must be one number or three (hx, hy, hz), not {len(voxel_size)}: "
                f"{voxel_size!r}"
            )
        hx, hy, hz = (_one_voxel_size(v, f"voxel size along {a}") for a, v in zip(AXES, voxel_size))
        return hx if hx == hy == hz else (hx, hy, hz)
    return _one_voxel_size(voxel_size, "voxel size")


def voxel_sizes(voxel_size: VoxelSize) -> np.ndarray:
    """The three sizes (hx, hy, hz) of a checked voxel size, float64 (3,)."""
    return np.array(
        voxel_size if isinstance(voxel_size, tuple) else (voxel_size,) * 3, dtype=np.float64
    )


def voxel_size_text(voxel_size: VoxelSize) -> str:
    """'0.05' for cubes, '0.05x0.05x0.1' for others."""
    if isinstance(voxel_size, tuple):
        return "x".join(f"{h:g}" for h in voxel_size)
    return f"{voxel_size:g}"


def check_box_fit(box_fit: object) -> str:
    """ "cover" or "inside", or GridError."""
    if not isinstance(box_fit, str) or box_fit not in BOX_FITS:
        raise GridError(f"unknown box fit {box_fit!r} (choose from {', '.join(BOX_FITS)})")
    return box_fit


def check_pad(pad: object) -> Padding:
    """((x_lo, x_hi), (y_lo, y_hi), (z_lo, z_hi)) from k (every side), (kx, ky, kz) (both
    sides of each axis) or that form itself (numpy.pad's), each a whole number of voxels
    from 0 to MAX_RESOLUTION; or GridError."""

    def side(value: object, what: str) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise GridError(f"{what} must be a whole number of voxels, not {value!r}")
        if not 0 <= int(value) <= MAX_RESOLUTION:
            raise GridError(f"{what} must be from 0 to {MAX_RESOLUTION} voxels, not {int(value)}")
        return int(value)

    if isinstance(pad, np.ndarray):
        pad = pad.tolist()
    if not isinstance(pad, Sequence) or isinstance(pad, (str, bytes)):
        k = side(pad, "pad")
        return (k, k), (k, k), (k, k)
    if len(pad) != 3:
        raise GridError(
            f"pad must be k, (kx, ky, kz) or ((x_lo, x_hi), (y_lo, y_hi), (z_lo, z_hi)), "
            f"not {pad!r}"
        )
    pairs = []
    for axis, value in zip(AXES, pad):
        if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
            if len(value) != 2:
                raise GridError(
                    f"pad per side must be ((x_lo, x_hi), (y_lo, y_hi), (z_lo, z_hi)), not {pad!r}"
                )
            pairs.append(
                (side(value[0], f"pad before {axis}"), side(value[1], f"pad after {axis}"))
            )
        else:
            k = side(value, f"pad along {axis}")
            pairs.append((k, k))
    return pairs[0], pairs[1], pairs[2]
