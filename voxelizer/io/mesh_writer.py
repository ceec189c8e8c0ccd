"""Writing the voxels' outer faces (voxelizer.surface) as PLY, OBJ or GLB, with every vertex
exactly as SVO.to_mesh() holds it, so that a reader computes the volume of the same
polyhedron (count * hx * hy * hz) up to the rounding of its own sum.

- PLY: binary little-endian, float64 coordinates (`property double`), int32 indices.
- OBJ: text, each coordinate as Python's repr, the shortest decimal that reads back as the
  same float64.
- GLB: glTF stores positions as float32 only, so the vertices are written in grid units
  (multiples of 1/FINE below 2^17 voxels: exact in float32) and the node's matrix (float64
  in the JSON) places them: scale (hx, hy, hz), translation the grid origin. trimesh applies it in
  float64 and gets to_mesh()'s vertices; open3d applies it in float32.
"""

from __future__ import annotations

import os
from typing import BinaryIO

import numpy as np

from ..placement import Placed
from ..surface import FINE, fine_surface
from .output import open_output

_ROWS = 1 << 16  # vertices or faces formatted at once in an OBJ file


def write_mesh(result: Placed, path: str | os.PathLike, overwrite: bool, *, kind: str) -> None:
    """The outer faces of the voxels (as SVO.to_mesh()) as `kind`: "ply", "obj" or "glb"."""
    fine, triangles = fine_surface(result.to_numpy())
    origin = np.asarray(result.placement.origin, np.float64)
    h = result.placement.spacing
    with open_output(path, overwrite) as fh:
        if kind == "glb":
            fh.write(_glb(fine, triangles, origin, h))
            return
        vertices = origin + fine / FINE * h  # as voxelizer.surface.voxel_surface
        del fine
        if kind == "ply":
            _write_ply(fh, vertices, triangles)
        else:
            _write_obj(fh, vertices, triangles)


def write_ply(result: Placed, path: str | os.PathLike, overwrite: bool = False) -> None:
    """The outer faces as binary PLY, whatever the path's extension."""
    write_mesh(result, path, overwrite=overwrite, kind="ply")


def write_obj(result: Placed, path: str | os.PathLike, overwrite: bool = False) -> None:
    """The outer faces as OBJ text, whatever the path's extension."""
    write_mesh(result, path, overwrite=overwrite, kind="obj")


def write_glb(result: Placed, path: str | os.PathLike, overwrite: bool = False) -> None:
    """The outer faces as GLB, whatever the path's extension."""
    write_mesh(result, path, overwrite=overwrite, kind="glb")


def _write_ply(fh: BinaryIO, vertices: np.ndarray, triangles: np.ndarray) -> None:
    header = (
        "ply\nformat binary_little_endian 1.0\n"
        f"element vertex {len(vertices)}\n"
        "property double x\nproperty double y\nproperty double z\n"
        f"element face {len(triangles)}\n"
        "property list uchar int vertex_indices\nend_header\n"
    )
    fh.write(header.encode("ascii"))
    fh.write(np.ascontiguousarray(vertices, "<f8").data)
    faces = np.empty(len(triangles), [("count", "u1"), ("vertices", "<i4", (3,))])
    faces["count"] = 3
    faces["vertices"] = triangles
    fh.write(faces.data)


def _write_obj(fh: BinaryIO, vertices: np.ndarray, triangles: np.ndarray) -> None:
    for start in range(0, len(vertices), _ROWS):
        rows = vertices[start : start + _ROWS]
        fh.write((("v %r %r %r\n" * len(rows)) % tuple(rows.ravel().tolist())).encode("ascii"))
    for start in range(0, len(triangles), _ROWS):
        rows = triangles[start : start + _ROWS] + 1
        fh.write((("f %d %d %d\n" * len(rows)) % tuple(rows.ravel().tolist())).encode("ascii"))


def _glb(fine: np.ndarray, triangles: np.ndarray, origin: np.ndarray, h: np.ndarray) -> bytes:
    import trimesh  # only for .glb: `import voxelizer` stays light

    grid = trimesh.Trimesh(fine / FINE, triangles, process=False)
    placement = np.eye(4)
    placement[:3, :3] *= h
    placement[:3, 3] = origin
    scene = trimesh.Scene()
    scene.add_geometry(grid, node_name="voxels", geom_name="voxels", transform=placement)
    data = scene.export(file_type="glb")
    assert isinstance(data, bytes)
    return data
