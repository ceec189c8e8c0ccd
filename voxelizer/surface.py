"""The boundary of a voxel solid as a closed triangle mesh: one quad per solid-empty face.

Faces meet at shared vertices, except where the solid touches itself only at a corner or
along an edge. Along such an edge (two solid and two empty voxels around it, diagonally)
four faces meet; they are joined in two pairs, and the two sheets get separate vertices at
one end at least, so that every edge of the mesh has exactly two faces: a closed,
consistently wound surface (trimesh's `is_watertight`) whose volume is exactly count * h^3.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing

if TYPE_CHECKING:
    import trimesh  # imported where a mesh is made: `import voxelizer` stays light

# Corners of a face across axis a (axes b = a+1, c = a+2 mod 3), counter-clockwise seen
# from +a, as (db, dc) offsets; reversed for a face looking towards -a.
_QUAD = np.array([[0, 0], [1, 0], [1, 1], [0, 1]])


def voxel_surface(
    voxels: np.ndarray, origin: numpy.typing.ArrayLike, voxel_size: float
) -> trimesh.Trimesh:
    """Outward-facing quads (2 triangles each) between every solid voxel and an empty one."""
    import trimesh

    voxels = np.asarray(voxels, bool)
    shape = np.array(voxels.shape)
    padded = np.pad(voxels, 1)
    corner_parts: list[np.ndarray] = []
    solid_parts: list[np.ndarray] = []
    empty_parts: list[np.ndarray] = []
    for axis in range(3):
        b, c = (axis + 1) % 3, (axis + 2) % 3
        for sign in (1, -1):
            neighbour = np.roll(padded, -sign, axis=axis)
            cells = np.argwhere(padded & ~neighbour) - 1  # voxel indices, unpadded
            step = np.zeros(3, np.int64)
            step[axis] = sign
            quad = _QUAD if sign > 0 else _QUAD[::-1]
            offsets = np.zeros((4, 3), np.int64)
            offsets[:, axis] = sign > 0
            offsets[:, b], offsets[:, c] = quad[:, 0], quad[:, 1]
            corner_parts.append(cells[:, None, :] + offsets[None])
            solid_parts.append(_cell_id(cells, shape))
            empty_parts.append(_cell_id(cells + step, shape))
    corners = np.concatenate(corner_parts)  # (F, 4, 3) lattice points
    solid_ids, empty_ids = np.concatenate(solid_parts), np.concatenate(empty_parts)
    vertex_of_corner = _split_vertices(corners, solid_ids, empty_ids, shape)
    ids, first = np.unique(vertex_of_corner, return_index=True)
    quads = np.searchsorted(ids, vertex_of_corner).reshape(-1, 4)
    triangles = np.concatenate([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]])
    vertices = np.asarray(origin, np.float64) + corners.reshape(-1, 3)[first] * float(voxel_size)
    return trimesh.Trimesh(vertices, triangles, process=False)


def _cell_id(cells: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """Linear index of cells in the grid padded by one on each side (so -1 and each side fit)."""
    return np.ravel_multi_index(tuple((cells + 1).T), tuple(shape + 2))


def _split_vertices(
    corners: np.ndarray, solid_ids: np.ndarray, empty_ids: np.ndarray, shape: np.ndarray
) -> np.ndarray:
    """(F * 4,) vertex label per quad corner: corners of one lattice point that the surface
    joins get one label.

    Half-edge k of quad f runs from corner k to corner k+1. Each edge of the lattice carries
    2 or 4 half-edges; they are joined in pairs, and a pair glues the corners at each end.
    Around an edge with 4 (two solid voxels touching diagonally) the pairs are first the
    faces of the same solid voxel; if both pairs then still end at the same two labels, that
    edge switches to pairing the faces of the same empty voxel. Switching only ever joins
    solids more, so an edge that switched stays resolved, and the loop ends.
    """
    faces = len(corners)
    lattice = np.ravel_multi_index(tuple(corners.reshape(-1, 3).T), tuple(shape + 1))
    start = np.arange(4 * faces)
    end = (start // 4) * 4 + (start + 1) % 4
    low = np.minimum(lattice[start], lattice[end])
    axis = np.argmax(np.abs(corners.reshape(-1, 3)[end] - corners.reshape(-1, 3)[start]), axis=1)
    edge = low * 3 + axis
    face = start // 4
    by_solid = np.lexsort((solid_ids[face], edge)).reshape(-1, 2)
    by_empty = np.lexsort((empty_ids[face], edge)).reshape(-1, 2)
    # Groups hold 2 or 4 half-edges and start at even positions of the sorted order, so in
    # both orders pair t is positions 2t, 2t+1, and a group of 4 is pairs t, t+1.
    _, sizes = np.unique(edge, return_counts=True)
    pinch = np.flatnonzero(np.repeat(sizes, sizes)[0::2] == 4)[0::2]  # first pair of each
    use_empty = np.zeros(len(by_solid), bool)
    while True:
        pairs = np.where(use_empty[:, None], by_empty, by_solid)
        label = _join(pairs, start, end)
        h = pairs[:, 0]
        upward = lattice[start[h]] < lattice[end[h]]
        ends = np.stack(
            [
                np.where(upward, label[start[h]], label[end[h]]),
                np.where(upward, label[end[h]], label[start[h]]),
            ],
            axis=1,
        )
        collide = pinch[(ends[pinch] == ends[pinch + 1]).all(axis=1)]
        if not len(collide):
            return label
        if use_empty[collide].all():  # cannot happen (see above); never loop forever
            raise RuntimeError("voxel surface: an edge with four faces stayed unresolved")
        use_empty[collide] = use_empty[collide + 1] = True


def _join(pairs: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Connected components of the corners glued by the half-edge pairs, as smallest members.

    Paired half-edges run in opposite directions, so the start of one meets the end of the
    other. Every corner is glued to exactly two others (through the half-edge it starts and
    the one it ends), so the components are short cycles around one lattice point.
    """
    h1, h2 = pairs[:, 0], pairs[:, 1]
    across_start = np.empty_like(start)  # corner glued through the half-edge it starts
    across_end = np.empty_like(start)  # corner glued through the half-edge it ends
    across_start[start[h1]], across_start[start[h2]] = end[h2], end[h1]
    across_end[end[h1]], across_end[end[h2]] = start[h2], start[h1]
    label = np.arange(len(start))
    while True:
        new = np.minimum(label, np.minimum(label[across_start], label[across_end]))
        new = new[new]
        if np.array_equal(new, label):
            return label
        label = new
