"""Held-out meshes for the grid options (any size, exact boxes, crops, voxels of three sizes):
closed shapes in grid space whose faces lie on voxel-centre planes (or 1e-6 voxel off them),
whose vertices sit on column centres and whose edges run through them, placed in world space
with a dyadic origin and voxel sizes, so that the placement's float64 grid coordinates are
the grid-space vertices as written (exactly, for the dyadic offsets), and a crop's are them
minus whole voxels.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .cad_shapes import tray, wedge
from .shapes import Shape, box, combine, octahedron

# The lattice the cases are drawn on, and a box through the middle of every shape on it.
LATTICE = (20, 16, 24)
CROP_OFFSET = (5, 3, 7)
CROP_SHAPE = (9, 7, 11)


class Placed(NamedTuple):
    """A grid-space mesh put in world space on a lattice of `spacing` from `origin`."""

    grid_vertices: np.ndarray  # float64 grid space of the whole lattice
    faces: np.ndarray
    origin: np.ndarray
    spacing: np.ndarray

    @property
    def vertices(self) -> np.ndarray:
        """World positions: origin + g * spacing (exact: all dyadic)."""
        return self.origin + self.grid_vertices * self.spacing

    def box(self, offset, shape) -> list[list[float]]:
        """The world box of the lattice's voxels [offset, offset + shape)."""
        low = self.origin + np.array(offset, np.float64) * self.spacing
        high = self.origin + (np.array(offset) + np.array(shape)) * self.spacing
        return [low.tolist(), high.tolist()]


def tie_shapes(e: float = 0.0) -> Shape:
    """Closed, disjoint shapes on LATTICE with ties everywhere (e = 0) or near them: a tray
    with walls on centre planes, a wedge whose slope holds column centres, an octahedron with
    its vertices on column centres, a box one voxel thick."""
    return combine(
        tray(
            (1.5 + e, 1.5 - e, 1.5 + e),
            (9.5 - e, 8.5 + e, 12.5 - e),
            (3.5 + e, 3.5 - e, 6.5 + e),
            (7.5 - e, 6.5),
        ),
        wedge((10.5 + e, 1.5, 2.5 - e), (18.5, 9.5 - e, 20.5 + e)),
        octahedron((6.5, 12.5, 15.5), 3.0),
        box((11.5, 10.5 + e, 9.5), (12.5, 14.5, 22.5 - e)),
    )


def placed(shape: Shape, spacing=(0.125, 0.25, 1.0), origin=(-1.25, 0.5, 3.0)) -> Placed:
    vertices, faces = shape
    return Placed(
        np.asarray(vertices, np.float64),
        np.asarray(faces, np.int64),
        np.array(origin, np.float64),
        np.array(spacing, np.float64),
    )
