"""Mesh input: whatever the user hands us becomes float64 vertices and int64 triangles."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Union

import numpy as np

from .errors import MeshError


@dataclass(frozen=True, eq=False)
class Mesh:
    """An indexed triangle mesh exactly as loaded: no merging, no repair, no reordering.

    Build one with load_mesh, which checks it. What is derived from it (the used vertices,
    the bounds, the topology) is computed once per Mesh, so voxelizing the same Mesh again
    costs nothing on the host before the passes."""

    vertices: np.ndarray  # (V, 3) float64
    faces: np.ndarray  # (T, 3) int64, each index < V

    @property
    def triangle_count(self) -> int:
        return int(self.faces.shape[0])

    @cached_property
    def indices(self) -> np.ndarray:
        """(T, 3) uint32, contiguous: the faces as the GPU reads them (converted once)."""
        return np.ascontiguousarray(self.faces, np.uint32)

    @cached_property
    def used(self) -> np.ndarray:
        """bool (V,): vertices that some face refers to (stray vertices do not count)."""
        return np.bincount(self.faces.reshape(-1), minlength=len(self.vertices)) > 0

    @cached_property
    def problem(self) -> str:
        """Why this mesh cannot be voxelized, or "" (checked once per Mesh)."""
        faces = self.faces
        if faces.size == 0 or faces.min() < 0 or faces.max() >= len(self.vertices):
            return "no triangles, or a face refers to a vertex that does not exist"
        if not np.isfinite(self.vertices[self.used]).all():
            return "vertex coordinates contain NaN or infinity"
        low, high = self.bounds
        if np.all(low == high):
            return "the mesh has zero extent (all vertices are equal)"
        return ""

    @cached_property
    def bounds(self) -> np.ndarray:
        """(2, 3) min and max corner of the used vertices."""
        used = self.vertices[self.used]
        return np.array([used.min(axis=0), used.max(axis=0)])

    @cached_property
    def topology(self) -> Topology:
        """Counts that say whether parity fill means "inside" for this mesh.

        Triangles and edges are compared by vertex position, so a mesh whose faces share
        positions but not indices (an STL soup) still counts as closed. A boundary edge has
        one face, a non-manifold edge more than two. Degenerate triangles (zero area) and
        duplicates (the same three positions as another face) are valid input: the passes
        skip the former, and a duplicate pair of opposite windings cancels out.
        """
        corners = self.faces
        boundary, nonmanifold = _edge_uses(corners, len(self.vertices))
        if boundary or nonmanifold:  # maybe only unshared indices: compare by position
            rows = np.ascontiguousarray(self.vertices + 0.0)  # + 0.0 merges -0.0 into 0.0
            _, position_ids = np.unique(
                rows.view(np.dtype((np.void, 24))).ravel(), return_inverse=True
            )
            corners = position_ids.reshape(-1)[self.faces]
            boundary, nonmanifold = _edge_uses(corners, len(rows))

        a, b, c = (self.vertices[self.faces[:, i]] for i in range(3))
        (ux, uy, uz), (vx, vy, vz) = (b - a).T, (c - a).T
        area = (uy * vz - uz * vy != 0) | (uz * vx - ux * vz != 0) | (ux * vy - uy * vx != 0)
        triples = np.sort(corners, axis=1)
        if len(self.vertices) < 1 << 21:  # three ids fit one int64 key
            keys = (triples[:, 0] << 42) | (triples[:, 1] << 21) | triples[:, 2]
            duplicates = len(keys) - len(np.unique(keys))
        else:
            ordered = triples[np.lexsort(triples.T[::-1])]
            duplicates = int(np.count_nonzero((ordered[1:] == ordered[:-1]).all(axis=1)))
        return Topology(boundary, nonmanifold, int(np.count_nonzero(~area)), duplicates)


def _edge_uses(corners: np.ndarray, vertex_count: int) -> tuple[int, int]:
    """(edges used by one face, edges used by more than two) of (T, 3) corner ids."""
    first = corners.reshape(-1)
    second = corners[:, [1, 2, 0]].reshape(-1)
    keep = first != second  # collapsed edges of degenerate triangles
    low, high = np.minimum(first, second)[keep], np.maximum(first, second)[keep]
    keys = np.sort(low * vertex_count + high)
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1], True])
    uses = np.diff(starts)
    return int(np.count_nonzero(uses == 1)), int(np.count_nonzero(uses > 2))


@dataclass(frozen=True)
class Topology:
    boundary_edges: int
    nonmanifold_edges: int
    degenerate_triangles: int
    duplicate_triangles: int

    @property
    def closed(self) -> bool:
        return self.boundary_edges == 0 and self.nonmanifold_edges == 0


MeshLike = Union["Mesh", str, os.PathLike, tuple, "trimesh.Trimesh"]  # noqa: F821


def load_mesh(source: MeshLike) -> Mesh:
    """Accept a path to anything trimesh reads, a trimesh.Trimesh, a Mesh, or (vertices, faces)."""
    if isinstance(source, Mesh):
        _check(source, "mesh")
        return source
    if isinstance(source, (str, os.PathLike)):
        return _load_file(Path(source))
    if isinstance(source, tuple) and len(source) == 2:
        return _checked(source[0], source[1], "(vertices, faces)")
    if hasattr(source, "vertices") and hasattr(source, "faces"):
        return _checked(source.vertices, source.faces, type(source).__name__)
    raise MeshError(
        f"cannot voxelize a {type(source).__name__}: pass a file path, a trimesh.Trimesh "
        "or a (vertices, faces) pair"
    )


def _load_file(path: Path) -> Mesh:
    import trimesh

    if not path.exists():
        raise MeshError(f"{path}: no such file")
    if not path.is_file():
        raise MeshError(f"{path}: not a file")
    try:
        loaded = trimesh.load(str(path), process=False, force="mesh")
    except Exception as exc:  # trimesh raises many types for bad files
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MeshError(f"{path}: cannot read mesh ({detail})") from exc
    if not hasattr(loaded, "faces") or loaded.faces is None:
        raise MeshError(f"{path}: the file holds no triangles")
    return _checked(loaded.vertices, loaded.faces, str(path))


def _checked(vertices, faces, what: str) -> Mesh:
    try:
        v = np.asarray(vertices, dtype=np.float64)
        f = np.asarray(faces)
    except (TypeError, ValueError) as exc:
        raise MeshError(f"{what}: vertices and faces must be numeric arrays ({exc})") from exc
    if f.size == 0 or v.size == 0:
        raise MeshError(f"{what}: the mesh has no triangles")
    if v.ndim != 2 or v.shape[1] != 3:
        raise MeshError(f"{what}: vertices must have shape (V, 3), not {v.shape}")
    if f.ndim != 2 or f.shape[1] != 3:
        raise MeshError(f"{what}: faces must have shape (T, 3) (triangles only), not {f.shape}")
    if not np.issubdtype(f.dtype, np.integer):
        raise MeshError(f"{what}: faces must be integer vertex indices")
    if f.min() < 0 or f.max() >= len(v):
        raise MeshError(f"{what}: a face refers to a vertex that does not exist")
    mesh = Mesh(np.ascontiguousarray(v), np.ascontiguousarray(f, dtype=np.int64))
    _check(mesh, what)
    return mesh


def _check(mesh: Mesh, what: str) -> None:
    """Raise MeshError if the mesh cannot be voxelized (its verdict is cached per Mesh)."""
    if mesh.problem:
        raise MeshError(f"{what}: {mesh.problem}")
