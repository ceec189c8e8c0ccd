"""Where the grid sits in world space, and the one rounding step from world to grid space.

Contract shared by the GPU passes and the CPU reference:

* h = (longest side of the bounding box of the mesh's referenced vertices) / N;
* the grid is centred on the box centre on every axis: origin = (bmin + bmax)/2 - N*h/2;
* grid-space vertices g = (v - origin) / h are computed in float64 and rounded once to
  float32, then clipped to [0, N] (a no-op up to that rounding, since the box lies inside the
  grid). Every later decision depends only on these float32 values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import GridError, MeshError
from .mesh import Mesh

MIN_RESOLUTION = 8
# Grid coordinates become fixed point with this many fractional bits (shaders/exact.glsl and
# voxelizer/reference.py); N * 2**FIXED_BITS <= 2**29 keeps every product in range.
FIXED_BITS = 16
MAX_RESOLUTION = 8192
# Parity along x, y or z (fill_mode="vote"): the vertex coordinates are rotated cyclically so
# that the axis comes last, the GPU's column axis; argsort(order) transposes the result back.
COLUMN_AXIS_ORDERS = ((1, 2, 0), (2, 0, 1), (0, 1, 2))


def check_resolution(resolution: object) -> int:
    """Return the grid size as an int, or raise GridError saying what is allowed."""
    if isinstance(resolution, bool) or not isinstance(resolution, (int, np.integer)):
        raise GridError(f"grid must be an integer, not {resolution!r}")
    n = int(resolution)
    if n < MIN_RESOLUTION or n % 4:
        raise GridError(f"grid must be a multiple of 4 from {MIN_RESOLUTION} up, not {n}")
    if n > MAX_RESOLUTION:
        raise GridError(f"grid {n} is larger than the supported maximum {MAX_RESOLUTION}")
    return n


@dataclass(frozen=True, eq=False)
class GridPlacement:
    resolution: int
    origin: np.ndarray  # world position of the grid's corner (0, 0, 0), float64 (3,)
    voxel_size: float  # h, world units

    @classmethod
    def fit(cls, mesh: Mesh, resolution: int) -> "GridPlacement":
        n = check_resolution(resolution)
        bmin, bmax = mesh.bounds
        h = float((bmax - bmin).max()) / n
        if not h > 0:
            raise MeshError("the mesh has zero extent (all vertices are equal)")
        origin = (bmin + bmax) / 2.0 - n * h / 2.0
        return cls(n, origin, h)

    def grid_vertices(self, vertices: np.ndarray) -> np.ndarray:
        """float32 grid-space positions: the only input the voxelization decisions see."""
        g = ((np.asarray(vertices, np.float64) - self.origin) / self.voxel_size).astype(np.float32)
        return np.clip(g, np.float32(0), np.float32(self.resolution))

    def voxel_centres(self, indices: np.ndarray) -> np.ndarray:
        """World positions of the centres of voxels given as (M, 3) integer indices."""
        return self.origin + (np.asarray(indices, np.float64) + 0.5) * self.voxel_size


class Placed:
    """What every voxel model says about where it sits: mixed into DenseGrid and SVO."""

    placement: GridPlacement

    @property
    def resolution(self) -> int:
        """N: voxels per side."""
        return self.placement.resolution

    @property
    def origin(self) -> np.ndarray:
        """World position of the corner of voxel (0, 0, 0)."""
        return self.placement.origin.copy()

    @property
    def voxel_size(self) -> float:
        return self.placement.voxel_size
