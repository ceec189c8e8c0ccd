"""Label grids: which part each set voxel belongs to.

A solid voxel belongs to the part whose closed surface holds its centre, decided for each
part alone by the same exact rule as any solid (each part is voxelized through the pipeline
on the shared grid). Where parts overlap, OVERLAP_RULES decide: "last" (the part that comes
last in the mesh wins) or "smallest" (the part of fewest solid voxels wins; of two equal
ones, the later). A surface voxel (modes "surface" and "both") belongs to the part of its
face: the face whose id it carries, the smallest index of the faces that mark it.

Labels are uint16: 0 for an empty voxel, part p (0-based) is label p + 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..grid import ColumnBits
from ..mesh import Mesh
from ..placement import Shape
from .appearance import Parts

OVERLAP_RULES = ("last", "smallest")
DEFAULT_OVERLAP = "last"
Voxels = np.ndarray | ColumnBits  # what a pipeline run gives: bools, or the GPU's words


def part_meshes(mesh: Mesh, parts: Parts) -> list[Mesh | None]:
    """One Mesh per part: its faces, and only the vertices they use (the same float64
    values, so each part is placed exactly as in the whole mesh); None for a part that
    cannot be voxelized alone (no area, no extent: it holds no solid)."""
    meshes: list[Mesh | None] = []
    order = np.argsort(parts.ids, kind="stable")
    bounds = np.searchsorted(parts.ids[order], np.arange(parts.count + 1))
    for part in range(parts.count):
        faces = mesh.faces[order[bounds[part] : bounds[part + 1]]]
        used, local = np.unique(faces, return_inverse=True)
        piece = Mesh(mesh.vertices[used], local.reshape(-1, 3).astype(np.int64))
        meshes.append(piece if len(faces) and not piece.problem else None)
    return meshes


def bools(voxels: Voxels) -> np.ndarray:
    """bool [i, j, k] of a run's voxels."""
    return voxels.to_numpy() if isinstance(voxels, ColumnBits) else np.asarray(voxels, bool)


def voxel_count(voxels: Voxels | None) -> int:
    if voxels is None:
        return 0
    if isinstance(voxels, ColumnBits):
        return voxels.count()
    return int(np.count_nonzero(voxels))


def label_grid(
    part_voxels: Sequence[Voxels | None], rule: str, shape: Shape
) -> tuple[np.ndarray, np.ndarray]:
    """(uint16 labels, bool union) of the parts' solids (None: no solid), overlaps decided
    by `rule` (OVERLAP_RULES)."""
    if rule not in OVERLAP_RULES:
        raise ValueError(f"overlap rule must be one of {', '.join(OVERLAP_RULES)}, not {rule!r}")
    order = list(range(len(part_voxels)))
    if rule == "smallest":  # the larger first, so that smaller parts write over them
        counts = [voxel_count(voxels) for voxels in part_voxels]
        order.sort(key=lambda part: (-counts[part], part))
    labels = np.zeros(shape, np.uint16)
    for part in order:
        voxels = part_voxels[part]
        if voxels is not None:
            labels[bools(voxels)] = part + 1
    return labels, labels > 0


def surface_labels(
    labels: np.ndarray, marked: np.ndarray, face_ids: np.ndarray, parts: Parts | None
) -> None:
    """Give the marked voxels (M, 3) the part of their faces (M,), in place."""
    part = np.zeros(len(face_ids), np.int64) if parts is None else parts.ids[face_ids]
    labels[tuple(marked.T)] = part + 1
