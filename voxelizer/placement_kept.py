"""Placements kept on the Mesh they place: a mesh placed the same way again (the same Mesh
voxelized again, or a batch's mesh placed first by its reading process, which sends it with
the placement kept on it) gets the placement and whether the grid meets it by a lookup, not
by placing it anew (Mesh.kept)."""

from __future__ import annotations

import numpy as np

from .grid_spec import NO_PADDING, Padding, Shape, VoxelSize
from .mesh import Mesh
from .placement import GridPlacement


def kept_placement(
    mesh: Mesh,
    shape: Shape | None,
    voxel_size: VoxelSize | None,
    bounds: np.ndarray | None,
    *,
    box_fit: str = "cover",
    pad: Padding = NO_PADDING,
) -> GridPlacement:
    """GridPlacement.around, kept on the Mesh for these arguments (the last ones asked
    for). The placement is shared by the calls that ask for it: its origin is read-only,
    as its spacing is."""

    def place() -> GridPlacement:
        placement = GridPlacement.around(mesh, shape, voxel_size, bounds, box_fit=box_fit, pad=pad)
        placement.origin.flags.writeable = False
        return placement

    box = None if bounds is None else np.asarray(bounds, np.float64).tobytes()
    return mesh.kept("placement", (shape, voxel_size, box, box_fit, pad), place)


def kept_holds_part_of(mesh: Mesh, placement: GridPlacement) -> bool:
    """placement.holds_part_of(mesh), kept on the Mesh for the placement (the last one)."""
    return mesh.kept("holds_part_of", placement.cache_key(), lambda: placement.holds_part_of(mesh))
