"""Where a triangle grid sits: its shape, origin and cell size, chosen from a resolution, a
cell size or a density, and the one rounding step from world to grid space.

Contract (the build and the CPU reference rely on it):

* the box is the given bounds, else the bounding box of the vertices the faces use; every
  used vertex lies inside it;
* the grid has (nx, ny, nz) cells, each side from 1 to MAX_RESOLUTION, and cells of
  cell_size (three positive floats); cell (i, j, k) is the closed box
  origin + [(i, j, k), (i + 1, j + 1, k + 1)] * cell_size, and the grid is centred on the
  box (origin = box centre - shape * cell_size / 2);
* resolution=(nx, ny, nz): cell_size = box side / n on each axis (the grid is the box);
* cell_size=h (one float or three): n = the fewest cells that cover the box side (at least
  1), the grid centred on the box;
* density=λ (Kalojanov and Slusallek's heuristic, λ cells per triangle): n = side *
  cbrt(λ T / V) rounded (at least 1; T triangles, V the box's volume), cell_size = side /
  n, so that cells are near cubes; on a flat box the heuristic runs over its sides that are
  not zero (a square root for a plane), and a zero side gets one cell as deep as the
  largest cell side;
* grid-space vertices g = (v - origin) / cell_size are computed in float64, clipped to
  [0, n] per axis and rounded to float32; the fixed-point corners that every decision of the
  build is exact for are roundEven(g * 2^16), as for the surface modes
  (voxelizer/placement.py, FIXED_BITS).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import GridError
from ..placement import FINE_LATTICE_MAX as MAX_RESOLUTION  # (the finest lattice)
from ..placement import check_bounds

Shape = tuple[int, int, int]
DEFAULT_DENSITY = 4.0  # cells per triangle when neither a resolution nor a cell size is given
# Cells a grid may have: their counts and ends are uint32 on the device, keyed from 0.
MAX_CELLS = 1 << 31


@dataclass(frozen=True, eq=False)
class CellPlacement:
    """A grid of `shape` cells of `cell_size` with its corner (0, 0, 0) at `origin`."""

    shape: Shape
    origin: np.ndarray  # float64 (3,)
    cell_size: np.ndarray  # float64 (3,), each > 0

    def __post_init__(self) -> None:
        shape = tuple(int(n) for n in self.shape)
        if len(shape) != 3 or not all(1 <= n <= MAX_RESOLUTION for n in shape):
            raise GridError(
                f"a triangle grid has 1 to {MAX_RESOLUTION} cells along each axis, not {shape}"
            )
        if math.prod(shape) > MAX_CELLS:
            raise GridError(
                f"a triangle grid of {math.prod(shape):,} cells is more than the "
                f"{MAX_CELLS:,} it may have; ask for fewer cells"
            )
        origin = np.array(self.origin, np.float64).reshape(3)
        size = np.array(self.cell_size, np.float64).reshape(3)
        if not (np.isfinite(origin).all() and np.isfinite(size).all() and (size > 0).all()):
            raise GridError(f"cell sizes must be positive and finite, not {size.tolist()}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "origin", origin)
        object.__setattr__(self, "cell_size", size)

    @property
    def cells(self) -> int:
        return math.prod(self.shape)

    @classmethod
    def fit(
        cls,
        low: np.ndarray,
        high: np.ndarray,
        triangles: int,
        resolution: int | Sequence[int] | None = None,
        cell_size: float | Sequence[float] | None = None,
        density: float | None = None,
        bounds: object = None,
    ) -> CellPlacement:
        """The placement for vertices within [low, high] (their bounding box, float64 (3,))
        and `triangles` triangles: at most one of resolution, cell_size and density (none:
        DEFAULT_DENSITY). With `bounds` ([[xmin, ymin, zmin], [xmax, ymax, zmax]]) the grid
        is placed on that box instead, which must contain the vertices."""
        given = [
            name for name, value in _choices(resolution, cell_size, density) if value is not None
        ]
        if len(given) > 1:
            raise GridError(
                f"give one of resolution, cell_size and density, not {' and '.join(given)}"
            )
        low = np.asarray(low, np.float64)
        high = np.asarray(high, np.float64)
        if bounds is not None:
            box = check_bounds(bounds)
            if (low < box[0]).any() or (high > box[1]).any():
                raise GridError("bounds must contain the mesh (a triangle grid does not crop)")
            low, high = box[0], box[1]
        side = high - low
        if resolution is not None:
            shape = _resolution(resolution)
            size = _with_flat_sides(side / np.array(shape, np.float64), side)
        elif cell_size is not None:
            size = _cell_size(cell_size)
            shape = tuple(max(1, math.ceil(s / h)) for s, h in zip(side, size))
            _check_sides(shape, "cell_size")
        else:
            shape = _density_shape(side, triangles, DEFAULT_DENSITY if density is None else density)
            size = _with_flat_sides(side / np.array(shape, np.float64), side)
        sides = (shape[0], shape[1], shape[2])
        origin = (low + high) / 2 - np.array(sides, np.float64) * size / 2
        return cls(sides, origin, size)

    def grid_vertices(self, vertices: np.ndarray) -> np.ndarray:
        """float32 (V, 3) grid-space coordinates: (v - origin) / cell_size in float64, clipped
        to [0, n] per axis, then rounded once to float32."""
        g = (np.asarray(vertices, np.float64) - self.origin) / self.cell_size
        np.clip(g, 0.0, np.array(self.shape, np.float64), out=g)
        return g.astype(np.float32)

    def grid_points(self, points: np.ndarray) -> np.ndarray:
        """float32 (N, 3) grid-space coordinates of world points, not clipped."""
        g = (np.asarray(points, np.float64) - self.origin) / self.cell_size
        return g.astype(np.float32)

    def grid_directions(self, directions: np.ndarray) -> np.ndarray:
        """float32 (N, 3) grid-space directions (d / cell_size): a ray's parameter t is the
        same in both spaces."""
        return (np.asarray(directions, np.float64) / self.cell_size).astype(np.float32)


def _choices(*values: object) -> list[tuple[str, object]]:
    return list(zip(("resolution", "cell_size", "density"), values))


def _resolution(resolution: int | Sequence[int]) -> Shape:
    if isinstance(resolution, (str, bytes)) or not isinstance(resolution, (Sequence, np.ndarray)):
        values: list[object] = [resolution] * 3
    else:
        values = list(resolution)
    if len(values) != 3 or any(
        isinstance(n, bool) or not isinstance(n, (int, np.integer)) for n in values
    ):
        raise GridError(f"resolution must be an integer or three integers, not {resolution!r}")
    shape = (int(values[0]), int(values[1]), int(values[2]))  # type: ignore[call-overload]
    _check_sides(shape, "resolution")
    return shape


def _check_sides(shape: Sequence[int], what: str) -> None:
    if not all(1 <= n <= MAX_RESOLUTION for n in shape):
        raise GridError(
            f"{what} gives {'x'.join(map(str, shape))} cells: each side must be 1 to "
            f"{MAX_RESOLUTION}"
        )


def _cell_size(cell_size: float | Sequence[float]) -> np.ndarray:
    try:
        size = np.broadcast_to(np.asarray(cell_size, np.float64), (3,)).copy()
    except (TypeError, ValueError):
        raise GridError(f"cell_size must be a number or three numbers, not {cell_size!r}") from None
    if not (np.isfinite(size).all() and (size > 0).all()):
        raise GridError(f"cell_size must be positive and finite, not {cell_size!r}")
    return size


def _density_shape(side: np.ndarray, triangles: int, density: float) -> Shape:
    if isinstance(density, bool) or not isinstance(density, (int, float, np.integer, np.floating)):
        raise GridError(f"density must be a number, not {density!r}")
    if not (math.isfinite(density) and density > 0):
        raise GridError(f"density must be positive and finite, not {density!r}")
    flat = side <= 0
    extent = side[~flat]
    per_unit = (density * triangles / float(np.prod(extent))) ** (1.0 / len(extent))
    sides = np.where(flat, 1, np.maximum(np.rint(side * per_unit), 1))
    shape = tuple(int(min(n, MAX_RESOLUTION)) for n in sides)
    return shape[0], shape[1], shape[2]


def _with_flat_sides(size: np.ndarray, side: np.ndarray) -> np.ndarray:
    """Cell sizes where a zero side of the box (a flat mesh) gets the largest other size."""
    flat = side <= 0
    if flat.any():
        size = size.copy()
        size[flat] = size[~flat].max() if (~flat).any() else 1.0
    return size
