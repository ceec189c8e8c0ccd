"""Thin and empty solid results: when a solid voxelization lost most of the mesh.

A voxel of the solid is set iff its centre is inside the mesh, so a part thinner than a
voxel (a sheet, a thin rod, a one-sided table top) falls between the centres and vanishes.
The check compares the solid's count with the voxels the mesh's surface touches (the
conservative surface, closed cubes): a result with fewer than THIN_RATIO of them, or none at
all, is thin. A closed mesh thicker than a couple of voxels is far above the line (a sphere
of radius R voxels has about 2R/9 solid voxels per surface voxel, so 0.5 at R = 2).

It costs nothing for such meshes: the surface's voxels are first estimated from the mesh's
projected areas (Mesh.axis_areas, one host pass over the triangles, cached per mesh), and
only a solid below ESTIMATE_MARGIN times the line of that estimate gets the surface pass run
to count them exactly (`surface_voxels` in the counts). The verdict, ThinResultWarning, is
made from the counts alone (thin_warning), so batches and Ray actors report it as data.
"""

from __future__ import annotations

import numpy as np

from .errors import ThinResultWarning
from .mesh import Mesh
from .placement import GridPlacement

# A solid with fewer voxels than this share of its surface's voxels is reported as thin.
THIN_RATIO = 0.15
# The area estimate misses the voxels that edges and thin features touch besides their area
# (a rod of radius 0.1 voxel has an area of 0.8 voxel per voxel of length, but touches 1 to
# 4): the exact count is made where the solid is below the line of ESTIMATE_MARGIN times the
# estimate, so that no thin result passes for want of an exact count.
ESTIMATE_MARGIN = 3.0


def estimated_surface_voxels(mesh: Mesh | np.ndarray, placement: GridPlacement) -> float:
    """About how many voxels the mesh's surface touches on this grid: its projected areas
    (|n_x| + |n_y| + |n_z|) A over h^2 (each projection over its plane's voxel face: hy hz,
    hx hz, hx hy), at most the grid's voxels. `mesh`: the mesh, or its axis_areas (what a
    batch's writing process is given)."""
    axis_areas = mesh.axis_areas if isinstance(mesh, Mesh) else mesh
    hx, hy, hz = placement.spacing
    shape = placement.shape
    with np.errstate(over="ignore", invalid="ignore"):
        if isinstance(placement.voxel_size, float):
            h = placement.voxel_size
            estimate = float(np.sum(axis_areas) / (h * h))
        else:
            faces = np.array([hy * hz, hx * hz, hx * hy])
            estimate = float(np.sum(axis_areas / faces))
    total = float(shape[0] * shape[1] * shape[2])
    return min(estimate, total) if np.isfinite(estimate) else total


def needs_surface_count(
    solid_voxels: int, mesh: Mesh | np.ndarray, placement: GridPlacement
) -> bool:
    """Whether a solid of `solid_voxels` may be thin on this placement: empty, or below the
    line of the estimated surface with its margin. False for every mesh that is plainly
    thick, without a GPU call. `mesh`: the mesh (its axis_areas read only where the grid's
    size does not decide), or its axis_areas."""
    if solid_voxels == 0:
        return True
    shape = placement.shape
    if solid_voxels >= THIN_RATIO * ESTIMATE_MARGIN * shape[0] * shape[1] * shape[2]:
        return False  # above the line of any surface (without the pass over the triangles)
    line = THIN_RATIO * ESTIMATE_MARGIN * estimated_surface_voxels(mesh, placement)
    return solid_voxels < line


def thin_warning(counts: dict[str, int], mode: str, fill_mode: str) -> ThinResultWarning | None:
    """The ThinResultWarning these counts call for (in the API's words), or None: mode
    "solid" only, where the solid is empty or its count is below THIN_RATIO times the
    surface's exact count (`surface_voxels`, present where the check made it)."""
    if mode != "solid" or "solid_voxels" not in counts:
        return None
    solid = counts["solid_voxels"]
    surface = counts.get("surface_voxels")
    if solid and (surface is None or solid >= THIN_RATIO * surface):
        return None
    if surface:
        ratio = solid / surface
        measure = (
            f"{solid:,} solid voxels for the {surface:,} its surface touches "
            f"({_percent(ratio)}, under {THIN_RATIO:.0%})"
        )
    else:
        measure = f"{solid:,} solid voxels"
    what = "empty" if solid == 0 else "thin"
    remedy = "mode='both' keeps its thin parts and sheets as the voxels their surface touches"
    if counts.get("open_columns", 0) and fill_mode != "winding":
        remedy += "; fill_mode='winding' fills what its open surface nearly encloses"
    return ThinResultWarning(
        f"the solid result is {what}: {measure}; most of the mesh is thinner than a voxel "
        f"(sheets, thin parts) and lies between the voxel centres: {remedy}"
    )


def _percent(ratio: float) -> str:
    """A ratio as a percentage with the digits that tell it from zero."""
    if ratio == 0:
        return "0%"
    digits = 0 if ratio >= 0.1 else 1 if ratio >= 0.01 else 2
    return f"{ratio:.{digits}%}"
