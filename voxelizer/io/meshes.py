"""Mesh input: whatever the user hands us (a file, a trimesh.Trimesh, a Mesh, arrays) becomes
a checked Mesh. Files are read with trimesh, exactly as stored: no merging, no repair."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Union

from ..errors import MeshError
from ..mesh import Mesh, check_mesh, checked_mesh

if TYPE_CHECKING:
    import trimesh

MeshLike = Union[Mesh, str, os.PathLike, tuple, "trimesh.Trimesh"]


def load_mesh(source: MeshLike) -> Mesh:
    """Accept a path to anything trimesh reads, a trimesh.Trimesh, a Mesh, or (vertices, faces)."""
    if isinstance(source, Mesh):
        return check_mesh(source, "mesh")
    if isinstance(source, (str, os.PathLike)):
        return read_mesh_file(Path(source))
    if isinstance(source, tuple) and len(source) == 2:
        return checked_mesh(source[0], source[1], "(vertices, faces)")
    if hasattr(source, "vertices") and hasattr(source, "faces"):
        return checked_mesh(source.vertices, source.faces, type(source).__name__)
    raise MeshError(
        f"cannot voxelize a {type(source).__name__}: pass a file path, a trimesh.Trimesh "
        "or a (vertices, faces) pair"
    )


def read_mesh_file(path: Path) -> Mesh:
    """The triangles of a mesh file, or MeshError saying why there are none to voxelize."""
    import trimesh  # only reading files needs it: arrays and Mesh objects load without it

    if not path.exists():
        raise MeshError(f"{path}: no such file")
    if not path.is_file():
        raise MeshError(f"{path}: not a file")
    try:
        loaded = trimesh.load(str(path), process=False, force="mesh")
    except Exception as exc:  # trimesh raises many types for bad files
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MeshError(f"{path}: cannot read mesh ({detail})") from exc
    # A point cloud or a path has no faces (every Geometry with faces has vertices too).
    if not hasattr(loaded, "faces") or not hasattr(loaded, "vertices") or loaded.faces is None:
        raise MeshError(f"{path}: the file holds no triangles")
    return checked_mesh(loaded.vertices, loaded.faces, str(path))
