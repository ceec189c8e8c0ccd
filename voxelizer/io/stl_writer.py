"""Writing the voxels' outer faces (voxelizer.surface) as a binary STL, the format of 3D
printing: an 80-byte header, the triangle count, then per triangle its unit normal and
three corners as float32 world coordinates (and a zero attribute word).

STL stores each triangle's corners, not shared vertices, so a slicer merges corners by
position. The surface's vertices are all distinct (voxelizer.surface), so the STL is
closed as the PLY is exactly when their float32 roundings stay distinct too: true for any
grid within 2^17 voxels of the world origin in units of its voxel (every position is then
a multiple of h/64 held apart by more than float32's step); for a grid placed far from the
origin relative to its voxel size the writer refuses (OutputError) rather than write a mesh
whose corners run together. Normals are computed from the float64 corners.
"""

from __future__ import annotations

import os
import struct

import numpy as np

from ..errors import OutputError
from ..placement import Placed
from ..surface import FINE, fine_surface
from .output import open_output

HEADER = b"binary STL of voxel faces, written by voxelizer"  # never "solid" (ASCII's word)
TRIANGLE = np.dtype([("normal", "<f4", (3,)), ("corners", "<f4", (3, 3)), ("attribute", "<u2")])
ROWS = 1 << 18  # triangles converted and written at once


def write_stl(result: Placed, path: str | os.PathLike, overwrite: bool = False) -> None:
    """The outer faces of the voxels as a binary STL in float32 world coordinates."""
    fine, triangles = fine_surface(result.to_numpy())
    origin = np.asarray(result.placement.origin, np.float64)
    vertices = origin + fine / FINE * result.placement.spacing
    del fine
    rounded = vertices.astype(np.float32)
    distinct = np.unique(rounded.view(np.dtype((np.void, 12))).reshape(-1))
    if len(distinct) != len(vertices):
        raise OutputError(
            f"{path}: cannot write a closed STL: {len(vertices) - len(distinct):,} of the "
            "voxel mesh's vertices run together in float32 world coordinates (the grid lies "
            "far from the origin for its voxel size); write .ply, which keeps float64",
            path=path,
        )
    with open_output(path, overwrite) as fh:
        fh.write(HEADER.ljust(80, b" ") + struct.pack("<I", len(triangles)))
        for start in range(0, len(triangles), ROWS):
            rows = triangles[start : start + ROWS]
            corners = vertices[rows]  # (R, 3, 3) float64
            normal = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
            length = np.linalg.norm(normal, axis=1, keepdims=True)
            records = np.zeros(len(rows), TRIANGLE)
            records["normal"] = normal / np.where(length > 0, length, 1.0)
            records["corners"] = rounded[rows]
            fh.write(records.data)
