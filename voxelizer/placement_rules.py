"""The placement rules: from what a user asks of a grid (voxelizer.grid_spec, checked) and a
box, the grid's shape, origin and voxel sizes, with the formulas docs/guide/grids.md states
(voxelizer.placement.GridPlacement applies them). Each refusal is a GridError naming the
value."""

from __future__ import annotations

import math

import numpy as np

from .errors import GridError, MeshError
from .grid_spec import (
    AXES,
    DEFAULT_GRID,
    MAX_RESOLUTION,
    Padding,
    Shape,
    VoxelSize,
    shape_text,
    voxel_size_text,
    voxel_sizes,
)

# The smallest side the voxel-size rule without bounds makes (and the .vox reader's grids).
MIN_RESOLUTION = 8
# A box within this many voxels of a whole number of voxels counts as whole (bounds with a
# voxel size: 4.5 / 0.05 is 90.00000000000001 in float64, and means 90).
WHOLE_VOXEL_TOLERANCE = 1e-6


def check_grid_request(
    shape: Shape | None, voxel_size: VoxelSize | None, bounds: np.ndarray | None, box_fit: str
) -> None:
    """GridError for checked options that do not go together."""
    if shape is not None and voxel_size is not None:
        raise GridError("give a grid or a voxel size, not both")
    if box_fit != "cover" and (bounds is None or shape is not None):
        raise GridError(
            f"box_fit={box_fit!r} fits voxels of a given size into bounds: it needs bounds "
            "and no grid (with bounds and a grid the box is always a whole number of voxels)"
        )


def around_mesh(
    extent: np.ndarray,
    bmin: np.ndarray,
    bmax: np.ndarray,
    shape: Shape | None,
    voxel_size: VoxelSize | None,
) -> tuple[Shape, np.ndarray, np.ndarray]:
    """Without bounds: cubes of the largest side / n, or n from the voxel size rounded up to
    a multiple of 4 (at least 8); centred on the mesh's box."""
    if voxel_size is None:
        shape = (DEFAULT_GRID,) * 3 if shape is None else shape
        sides = np.array(shape, np.float64)
        h = float((extent / sides).max())
        if not h > 0:  # an extent so small that h underflows
            raise MeshError(f"the mesh's extent {float(extent.max()):g} is too small for a grid")
        return shape, (bmin + bmax) / 2.0 - sides * h / 2.0, np.full(3, h)
    spacing = voxel_sizes(voxel_size)
    shape = shape_for(extent, spacing, voxel_size)
    sides = np.array(shape, np.float64)
    return shape, bmin - (sides * spacing - extent) / 2.0, spacing


def exact_box(
    extent: np.ndarray,
    bmin: np.ndarray,
    shape: Shape | None,
    voxel_size: VoxelSize | None,
    box_fit: str,
) -> tuple[Shape, np.ndarray, np.ndarray]:
    """With bounds: the box itself, voxel (0, 0, 0)'s corner at its min corner."""
    origin = np.array(bmin, np.float64)
    if shape is not None:
        spacing = extent / np.array(shape, np.float64)
        for axis in range(3):
            if not spacing[axis] > 0:
                raise GridError(
                    f"the bounds' side {extent[axis]:g} along {AXES[axis]} is too small "
                    f"for {shape[axis]} voxels"
                )
        return shape, origin, spacing
    if voxel_size is None:  # cubes that fit DEFAULT_GRID along the longest side
        spacing = np.full(3, float(extent.max()) / DEFAULT_GRID)
        size: VoxelSize = float(spacing[0])
    else:
        spacing, size = voxel_sizes(voxel_size), voxel_size
    sides = []
    for axis in range(3):
        voxels = extent[axis] / spacing[axis]
        whole = round(voxels) if math.isfinite(voxels) else voxels
        if abs(voxels - whole) <= WHOLE_VOXEL_TOLERANCE:
            n = whole
        else:
            n = math.ceil(voxels) if box_fit == "cover" else math.floor(voxels)
        if not n <= MAX_RESOLUTION:
            raise GridError(
                f"voxel size {voxel_size_text(size)} needs {voxels:.6g} voxels along "
                f"{AXES[axis]} for the bounds; each side can be at most {MAX_RESOLUTION}"
            )
        if n < 1:
            raise GridError(
                f"the bounds are {extent[axis]:g} along {AXES[axis]}, less than one voxel of "
                f"{spacing[axis]:g}: box_fit='inside' leaves no voxel (use 'cover')"
            )
        sides.append(int(n))
    return (sides[0], sides[1], sides[2]), origin, spacing


def padded_shape(shape: Shape, pad: Padding) -> Shape:
    """The shape with `pad` voxels added before and after each axis."""
    (x_lo, x_hi), (y_lo, y_hi), (z_lo, z_hi) = pad
    return shape[0] + x_lo + x_hi, shape[1] + y_lo + y_hi, shape[2] + z_lo + z_hi


def padded(
    shape: Shape, origin: np.ndarray, spacing: np.ndarray, pad: Padding
) -> tuple[Shape, np.ndarray]:
    """The shape and origin with `pad` voxels added before and after each axis."""
    if pad == ((0, 0), (0, 0), (0, 0)):
        return shape, origin
    sides = padded_shape(shape, pad)
    for axis in range(3):
        if sides[axis] > MAX_RESOLUTION:
            lo, hi = pad[axis]
            raise GridError(
                f"the padded grid has {sides[axis]} voxels along {AXES[axis]} ({shape[axis]} "
                f"and {lo} + {hi} of padding); each side can be at most {MAX_RESOLUTION}"
            )
    low = np.array([before for before, _ in pad], np.float64)
    return sides, origin - low * spacing


def check_finite_box(box: str, bmin: np.ndarray, bmax: np.ndarray, extent: np.ndarray) -> None:
    """GridError unless the box's sides are finite (finite corners far apart overflow)."""
    for axis in range(3):
        if not math.isfinite(extent[axis]):
            raise GridError(
                f"{box} from {bmin[axis]:g} to {bmax[axis]:g} along {AXES[axis]} is too large: "
                f"its side overflows to {extent[axis]:g}"
            )


def check_finite_grid(
    box: str,
    bmin: np.ndarray,
    bmax: np.ndarray,
    sides: np.ndarray,
    origin: np.ndarray,
    spacing: np.ndarray,
) -> None:
    """GridError naming the first value that overflowed: the voxel size, the grid's corners,
    or the box in grid space (the GPU's input). A grid that passes has every referenced
    vertex at a finite grid coordinate."""
    far = origin + sides * spacing
    low, high = (bmin - origin) / spacing, (bmax - origin) / spacing
    for axis in range(3):
        name, h = AXES[axis], float(spacing[axis])
        if not (math.isfinite(h) and h > 0):
            raise GridError(
                f"{box} gives a voxel size of {h:g} along {name}: it must be positive and finite"
            )
        if not math.isfinite(origin[axis]):
            raise GridError(
                f"voxel size {h:g} puts the grid's corner at {origin[axis]:g} along {name}"
            )
        if not math.isfinite(far[axis]):
            raise GridError(
                f"voxel size {h:g} puts the grid's far corner at {far[axis]:g} along {name}"
            )
        if not (math.isfinite(low[axis]) and math.isfinite(high[axis])):
            raise GridError(
                f"voxel size {h:g}: {box} along {name} is {low[axis]:g} to {high[axis]:g} "
                "in grid space, beyond floating point"
            )


def shape_for(extent: np.ndarray, spacing: np.ndarray, voxel_size: VoxelSize) -> Shape:
    """Sides that cover `extent` with voxels of `spacing`: multiples of 4, at least 8."""
    h = voxel_size_text(voxel_size)
    with np.errstate(over="ignore"):
        need = np.ceil(extent / spacing)
    sides = [
        max(MIN_RESOLUTION, 4 * math.ceil(v / 4)) if math.isfinite(v) else v for v in need.tolist()
    ]
    if max(sides) > MAX_RESOLUTION:
        largest = max(range(3), key=lambda axis: sides[axis])
        if math.isfinite(sides[largest]) and sides[largest] > 1e6:  # no 300-digit numbers
            raise GridError(
                f"voxel size {h} is too small: it needs {need[largest]:.3g} voxels along "
                f"{AXES[largest]}; each side of the grid can be at most {MAX_RESOLUTION}"
            )
        if not all(math.isfinite(v) for v in sides):
            raise GridError(
                f"voxel size {h} is too small: each side of the grid can be at "
                f"most {MAX_RESOLUTION}"
            )
        raise GridError(
            f"voxel size {h} needs a {shape_text(sides)} grid; each side can be "
            f"at most {MAX_RESOLUTION}"
        )
    nx, ny, nz = (int(v) for v in sides)
    return nx, ny, nz
