"""Writing the voxels' outer faces (voxelizer.surface) as PLY, OBJ, GLB or STL, with every
vertex exactly as SVO.to_mesh() holds it, so that a reader computes the volume of the same
polyhedron (count * hx * hy * hz) up to the rounding of its own sum.

- PLY: binary little-endian, int32 indices; coordinates float32 (`property float`) where
  every vertex is exactly a float32 (a voxel size and origin of few binary digits, such as
  h = 0.5 or 0.25 at integer origins), else float64 (`property double`).
- OBJ: text, each coordinate as Python's repr, the shortest decimal that reads back as the
  same float64.
- GLB: glTF stores positions as float32 only, so the vertices are written in grid units
  (multiples of 1/FINE below 2^17 voxels: exact in float32) and the node's matrix (float64
  in the JSON) places them: scale (hx, hy, hz), translation the grid origin. trimesh applies it in
  float64 and gets to_mesh()'s vertices; open3d applies it in float32.
- STL: voxelizer.io.stl_writer (binary, float32 world coordinates).

Colours: a result with colours (colors=True) gets vertex colours (PLY: red, green, blue
and alpha uchar properties; OBJ: `v x y z r g b`; GLB: COLOR_0). Each face has the colour
of the voxel it bounds at its corners, so a vertex where voxels of different colours meet
is written once per colour: the mesh is then closed by position (as readers that merge
vertices by position see it: trimesh's default load of the PLY; of the GLB, after its
merge_vertices()), no longer by index at the colour seams.
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
    """The outer faces of the voxels (as SVO.to_mesh()) as `kind`: "ply", "obj" or "glb",
    with vertex colours when the result has colours."""
    voxels = result.to_numpy()
    fine, triangles = fine_surface(voxels)
    colors = None
    if "color" in result.attributes:
        fine, triangles, colors = coloured_vertices(
            fine, triangles, result.to_numpy("color"), voxels.shape
        )
    del voxels
    origin = np.asarray(result.placement.origin, np.float64)
    h = result.placement.spacing
    with open_output(path, overwrite) as fh:
        if kind == "glb":
            fh.write(_glb(fine, triangles, origin, h, colors))
            return
        vertices = origin + fine / FINE * h  # as voxelizer.surface.voxel_surface
        del fine
        if kind == "ply":
            _write_ply(fh, vertices, triangles, colors)
        else:
            _write_obj(fh, vertices, triangles, colors)


def write_ply(result: Placed, path: str | os.PathLike, overwrite: bool = False) -> None:
    """The outer faces as binary PLY, whatever the path's extension."""
    write_mesh(result, path, overwrite=overwrite, kind="ply")


def write_obj(result: Placed, path: str | os.PathLike, overwrite: bool = False) -> None:
    """The outer faces as OBJ text, whatever the path's extension."""
    write_mesh(result, path, overwrite=overwrite, kind="obj")


def write_glb(result: Placed, path: str | os.PathLike, overwrite: bool = False) -> None:
    """The outer faces as GLB, whatever the path's extension."""
    write_mesh(result, path, overwrite=overwrite, kind="glb")


def triangle_cells(fine: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """(T, 3) int64 [i, j, k] of the solid voxel each surface triangle bounds: a quarter
    voxel inwards from its centroid, along its normal's largest axis (exact integers: the
    triangles lie on voxel faces, tilted by at most a step of 1/FINE near contacts)."""
    corners = fine[triangles]  # (T, 3, 3) in steps of 1/FINE
    normal = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    axis = np.argmax(np.abs(normal), axis=1)
    rows = np.arange(len(triangles))
    inward = np.zeros_like(normal)
    inward[rows, axis] = -np.sign(normal[rows, axis])  # the normals point outwards
    point = corners.sum(axis=1) + inward * (3 * FINE // 4)  # three times the point
    return np.floor_divide(point, 3 * FINE)


def coloured_vertices(
    fine: np.ndarray, triangles: np.ndarray, colors: np.ndarray, shape: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(vertices, triangles, RGBA uint8 vertex colours) of the surface with each triangle
    the colour of its voxel: a vertex is split where triangles of different colours meet."""
    cells = np.clip(triangle_cells(fine, triangles), 0, np.array(shape) - 1)
    face_colors = colors[tuple(cells.T)]  # (T, 4)
    table, colour_of_face = np.unique(
        np.ascontiguousarray(face_colors).view(np.uint32).reshape(-1), return_inverse=True
    )
    keys = triangles * len(table) + colour_of_face.reshape(-1, 1)
    unique, corner_vertex = np.unique(keys, return_inverse=True)
    vertices = fine[unique // len(table)]
    vertex_colors = table[unique % len(table)].view(np.uint8).reshape(-1, 4)
    return vertices, corner_vertex.reshape(-1, 3), vertex_colors


def _write_ply(
    fh: BinaryIO, vertices: np.ndarray, triangles: np.ndarray, colors: np.ndarray | None
) -> None:
    exact32 = bool(np.array_equal(vertices.astype(np.float32), vertices))
    kind, dtype = ("float", "<f4") if exact32 else ("double", "<f8")
    fields = [("xyz", dtype, (3,))]
    header = [
        "ply",
        "format binary_little_endian 1.0",
        f"element vertex {len(vertices)}",
        f"property {kind} x",
        f"property {kind} y",
        f"property {kind} z",
    ]
    if colors is not None:
        header += [f"property uchar {name}" for name in ("red", "green", "blue", "alpha")]
        fields.append(("rgba", "u1", (4,)))
    header += [
        f"element face {len(triangles)}",
        "property list uchar int vertex_indices",
        "end_header",
    ]
    fh.write(("\n".join(header) + "\n").encode("ascii"))
    rows = np.empty(len(vertices), fields)
    rows["xyz"] = vertices
    if colors is not None:
        rows["rgba"] = colors
    fh.write(rows.data)
    faces = np.empty(len(triangles), [("count", "u1"), ("vertices", "<i4", (3,))])
    faces["count"] = 3
    faces["vertices"] = triangles
    fh.write(faces.data)


def _write_obj(
    fh: BinaryIO, vertices: np.ndarray, triangles: np.ndarray, colors: np.ndarray | None
) -> None:
    for start in range(0, len(vertices), _ROWS):
        rows = vertices[start : start + _ROWS]
        if colors is None:
            text = ("v %r %r %r\n" * len(rows)) % tuple(rows.ravel().tolist())
        else:
            rgb = colors[start : start + _ROWS, :3] / 255.0
            values = np.concatenate([rows, rgb], axis=1)
            text = ("v %r %r %r %.6g %.6g %.6g\n" * len(rows)) % tuple(values.ravel().tolist())
        fh.write(text.encode("ascii"))
    for start in range(0, len(triangles), _ROWS):
        rows = triangles[start : start + _ROWS] + 1
        fh.write((("f %d %d %d\n" * len(rows)) % tuple(rows.ravel().tolist())).encode("ascii"))


def _glb(
    fine: np.ndarray,
    triangles: np.ndarray,
    origin: np.ndarray,
    h: np.ndarray,
    colors: np.ndarray | None = None,
) -> bytes:
    import trimesh  # only for .glb: `import voxelizer` stays light

    grid = trimesh.Trimesh(fine / FINE, triangles, vertex_colors=colors, process=False)
    placement = np.eye(4)
    placement[:3, :3] *= h
    placement[:3, 3] = origin
    scene = trimesh.Scene()
    scene.add_geometry(grid, node_name="voxels", geom_name="voxels", transform=placement)
    data = scene.export(file_type="glb")
    assert isinstance(data, bytes)
    return data
