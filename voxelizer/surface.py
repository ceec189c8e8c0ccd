"""The boundary of a voxel solid as a closed triangle mesh: one quad per solid-empty face,
that stays closed in tools that merge vertices by position and stays free of contacts.

Faces meet at shared vertices, except where the solid touches itself only along an edge or
at a corner. Along such an edge four faces meet; they are joined in two pairs (the faces of
one voxel, or of one empty cell where that keeps the sheets apart), so every edge of the mesh
has exactly two faces, and the lattice points of the contact get one vertex per sheet.

Those copies must not stay at one position: trimesh's default load merges vertices by
position (and so rebuilds the non-manifold edge), and open3d sees the touching sheets as
self-intersecting. So the copies at a lattice point are moved apart by at most
SPLIT_OFFSET = 1/256 of a voxel, never out of the voxels' bounding box:

- which way: around a contact edge along axis a, the two sheets (each the corner of one
  voxel, or of one empty cell) are separated along one axis fixed by the edge alone, so both
  ends of the edge agree and the sheets stay apart along its whole length: axis a+1 if the
  two cells lie on the diagonal (same signs along a+1 and a+2 seen from the point), else
  a+2. At one point these are difference constraints per axis between its copies, solved
  by levels (longest paths); two copies meeting only at a corner are separated along the
  last axis that has solid on both sides.
- volume, exactly: the triangulation joins each quad's two corners of even coordinate sum,
  and the points are moved one parity class (x, y, z mod 2) at a time. The three corners of
  a triangle lie in three different classes, so while one class moves each triangle has at
  most one moving vertex and the enclosed volume is affine in the moves: it changes by
  sum(d . g) over the moving copies, g = (1/6) sum of b x c over the copy's triangles
  (v, b, c) at the current positions. Each point's moves are completed so that this sum is
  zero, by components that no constraint fixes, or a common shift of all its copies (which
  keeps their differences), or by stretching one axis's differences. So the mesh encloses
  exactly count * h^3 up to the rounding of the vertex coordinates.

Tools that merge vertices by position then find distinct vertices as long as h/256 is
above their tolerance (trimesh: 1e-8 world units, so h above about 3e-6).
"""

from __future__ import annotations

import numpy as np
import numpy.typing
import trimesh

SPLIT_OFFSET = 1 / 256  # the largest move of a split vertex, in voxels

# Corners of a face across axis a (axes b = a+1, c = a+2 mod 3), counter-clockwise seen
# from +a, as (db, dc) offsets; reversed for a face looking towards -a.
_QUAD = np.array([[0, 0], [1, 0], [1, 1], [0, 1]])
# The eight cells around a lattice point p: cell p - 1 + o for o in {0, 1}^3.
_OCTANTS = np.array(list(np.ndindex(2, 2, 2)))


def voxel_surface(
    voxels: np.ndarray, origin: numpy.typing.ArrayLike, voxel_size: float
) -> trimesh.Trimesh:
    """Outward-facing quads (2 triangles each) between every solid voxel and an empty one."""
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
            solid_parts.append(cells)
            empty_parts.append(cells + step)
    corners = np.concatenate(corner_parts)  # (F, 4, 3) lattice points
    solid_cells, empty_cells = np.concatenate(solid_parts), np.concatenate(empty_parts)
    label = _split_vertices(
        corners, _cell_id(solid_cells, shape), _cell_id(empty_cells, shape), shape
    )
    _, first, inverse = np.unique(label, return_index=True, return_inverse=True)
    quads = inverse.reshape(-1, 4)
    lattice = corners.reshape(-1, 3)[first]
    # The diagonal of each quad joins its two corners of even coordinate sum.
    even = corners[:, 0].sum(axis=1) % 2 == 0
    turned = np.take_along_axis(quads, np.where(even[:, None], [0, 1, 2, 3], [1, 2, 3, 0]), 1)
    triangles = np.concatenate([turned[:, [0, 1, 2]], turned[:, [0, 2, 3]]])
    positions = lattice.astype(np.float64)
    contacts = _contacts(quads, corners, lattice, solid_cells, empty_cells, shape + 1)
    _separate(positions, lattice, triangles, contacts, padded)
    vertices = np.asarray(origin, np.float64) + positions * float(voxel_size)
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


def _contacts(
    quads: np.ndarray,
    corners: np.ndarray,
    lattice: np.ndarray,
    solid_cells: np.ndarray,
    empty_cells: np.ndarray,
    points: np.ndarray,
) -> np.ndarray:
    """(M, 4) rows (vertex A, vertex B, axis, sign): at an end of an edge with four faces
    where the two sheets have their own vertices A and B, the sheets must end apart along
    `axis`, A on the `sign` side: sign * (move of A - move of B) > 0.

    A sheet is the two faces of one cell (a voxel, or an empty cell where the faces were
    paired by it); seen from the end point its cell has signs s (+1 where its index is the
    point's). The axis is a+1 if s(a+1) == s(a+2), else a+2, for an edge along a: the same
    at both ends, as the two cells are.
    """
    start = corners.reshape(-1, 3)
    finish = corners[:, [1, 2, 3, 0]].reshape(-1, 3)
    start_id = np.ravel_multi_index(tuple(start.T), tuple(points))
    finish_id = np.ravel_multi_index(tuple(finish.T), tuple(points))
    axis = np.argmax(np.abs(finish - start), axis=1)
    edge = np.minimum(start_id, finish_id) * 3 + axis
    _, inverse, counts = np.unique(edge, return_inverse=True, return_counts=True)
    half = np.flatnonzero(counts[inverse] == 4)  # half-edge h: quad h // 4, side h % 4
    face = half // 4
    rows = []
    for upper in (False, True):
        # the quad corner at the lower (or upper) end of each half-edge
        at_start = (start_id[half] < finish_id[half]) != upper
        vertex = quads[face, np.where(at_start, half % 4, (half + 1) % 4)]
        order = np.lexsort((vertex, edge[half]))
        # per edge: its four faces, sorted by vertex: two sheets of two faces each
        f, v, e = (x[order].reshape(-1, 4) for x in (face, vertex, edge[half]))
        apart = v[:, 1] != v[:, 2]  # else one vertex for all four: the sheets meet here
        f, v, e = f[apart], v[apart], e[apart]
        first = f[:, [0, 1]]  # one sheet's two faces; the other's cell is the opposite one
        cell = np.where(
            (solid_cells[first[:, 0]] == solid_cells[first[:, 1]]).all(axis=1)[:, None],
            solid_cells[first[:, 0]],
            empty_cells[first[:, 0]],
        )
        signs = 2 * (cell - lattice[v[:, 0]]) + 1
        a = e[:, 0] % 3
        b, c = (a + 1) % 3, (a + 2) % 3
        n = np.arange(len(a))
        across = np.where(signs[n, b] == signs[n, c], b, c)
        rows.append(np.stack([v[:, 0], v[:, 2], across, signs[n, across]], axis=1))
    return np.concatenate(rows)


def _separate(
    positions: np.ndarray,
    lattice: np.ndarray,
    triangles: np.ndarray,
    contacts: np.ndarray,
    padded: np.ndarray,
) -> None:
    """Move the vertices that share a lattice point apart (in place, in voxel units), as the
    module docstring says: by at most SPLIT_OFFSET, enclosed volume unchanged."""
    point = np.ravel_multi_index(tuple(lattice.T), tuple(np.array(padded.shape) - 1))
    order = np.argsort(point, kind="stable")
    starts = np.flatnonzero(np.diff(point[order], prepend=-1))
    counts = np.diff(np.append(starts, len(order)))
    split = np.repeat(counts, counts) > 1
    copies = order[split]  # vertices at split points, grouped by point
    if not len(copies):
        return
    group = np.repeat(np.arange(len(counts)), counts)[split]
    _, number = np.unique(group, return_inverse=True)  # split point of each copy, 0..P-1
    slot = np.arange(len(copies)) - np.searchsorted(number, number)  # its place there
    points, width = int(number[-1]) + 1, int(slot.max()) + 1
    where_point = np.full(len(positions), -1)
    where_slot = np.full(len(positions), -1)
    where_point[copies], where_slot[copies] = number, slot
    valid = np.zeros((points, width), bool)
    valid[number, slot] = True
    corner = lattice[copies[np.searchsorted(number, np.arange(points))]]
    occupied = np.stack([padded[tuple((corner + o).T)] for o in _OCTANTS], axis=1)
    allowed = (
        np.stack(  # axes with solid on both sides: moves along them stay in the box
            [occupied[:, _OCTANTS[:, a] == s].any(axis=1) for a in range(3) for s in (0, 1)], 1
        )
        .reshape(points, 3, 2)
        .all(axis=2)
    )

    pt = where_point[contacts[:, 0]]
    a_slot, b_slot = where_slot[contacts[:, 0]], where_slot[contacts[:, 1]]
    axis, sign = contacts[:, 2], contacts[:, 3]
    lone = np.ones(points, bool)
    lone[pt] = False
    if lone.any():  # copies that meet only at the point (two voxel corners): any axis apart
        if (valid[lone].sum(axis=1) != 2).any():
            raise RuntimeError("voxel surface: a split point without contacts has not 2 copies")
        last = 2 - np.argmax(allowed[lone][:, ::-1], axis=1)
        n = int(lone.sum())
        pt = np.concatenate([pt, np.flatnonzero(lone)])
        a_slot, b_slot = (
            np.concatenate([a_slot, np.zeros(n, int)]),
            np.concatenate([b_slot, np.ones(n, int)]),
        )
        axis, sign = np.concatenate([axis, last]), np.concatenate([sign, np.ones(n, int)])
    if not allowed[pt, axis].all():
        raise RuntimeError("voxel surface: sheets to separate along an axis without room")
    moves = _levels(pt, a_slot, b_slot, axis, sign, (points, width))
    constrained = np.zeros((points, width, 3), bool)
    constrained[pt, a_slot, axis] = constrained[pt, b_slot, axis] = True

    colour = (corner % 2) @ np.array([1, 2, 4])
    for k in range(8):
        mine = np.flatnonzero(colour == k)
        if not len(mine):
            continue
        gradient = np.zeros((points, width, 3))
        chosen = np.isin(number, mine)
        gradient[number[chosen], slot[chosen]] = _volume_gradient(positions, triangles)[
            copies[chosen]
        ]
        d = _balanced(moves[mine], gradient[mine], constrained[mine], valid[mine], allowed[mine])
        positions[copies[chosen]] += (
            SPLIT_OFFSET * d[np.searchsorted(mine, number[chosen]), slot[chosen]]
        )


def _levels(
    pt: np.ndarray,
    a_slot: np.ndarray,
    b_slot: np.ndarray,
    axis: np.ndarray,
    sign: np.ndarray,
    size: tuple[int, int],
) -> np.ndarray:
    """(P, K, 3) moves meeting every contact, sign * (move A - move B) >= 1 along its axis:
    the longest path to each copy on each axis (a cycle would be a contradiction), centred."""
    high = np.where(sign > 0, a_slot, b_slot)
    low = np.where(sign > 0, b_slot, a_slot)
    level = np.zeros((*size, 3))
    for _ in range(size[1] + 1):
        before = level.copy()
        np.maximum.at(level, (pt, high, axis), level[pt, low, axis] + 1)
        if np.array_equal(before, level):
            break
    else:
        raise RuntimeError("voxel surface: contradictory contacts at one point")
    member = np.zeros((*size, 3), bool)
    member[pt, high, axis] = member[pt, low, axis] = True
    mean = (level * member).sum(axis=1) / np.maximum(member.sum(axis=1), 1)
    return np.where(member, level - mean[:, None, :], 0.0)


def _balanced(
    moves: np.ndarray,
    gradient: np.ndarray,
    constrained: np.ndarray,
    valid: np.ndarray,
    allowed: np.ndarray,
) -> np.ndarray:
    """The moves of each point completed so that sum(move . gradient) is 0, scaled so the
    largest component is 1. Completed by the free components (valid copy, allowed axis, no
    contact on it) and a common shift per allowed axis, in proportion to the gradient; where
    those cannot change the volume, by stretching the differences on one axis (>= 1 keeps
    every contact)."""
    change = (moves * gradient).sum(axis=(1, 2))
    free = valid[:, :, None] & allowed[:, None, :] & ~constrained
    shared = np.where(allowed, (gradient * valid[:, :, None]).sum(axis=1), 0.0)
    direction = np.where(free, gradient, 0.0) + np.where(valid[:, :, None], shared[:, None], 0)
    weight = (np.where(free, gradient, 0.0) ** 2).sum(axis=(1, 2)) + (shared**2).sum(axis=1)
    scale = np.abs(gradient).sum(axis=(1, 2))
    needed = np.abs(change) > 1e-12 * scale
    shifted = needed & (weight > 1e-6 * scale**2)
    out = moves.copy()
    out[shifted] -= (change / np.where(shifted, weight, 1))[shifted, None, None] * direction[
        shifted
    ]
    stretch = needed & ~shifted
    if stretch.any():
        parts = (moves * gradient).sum(axis=1)[stretch]  # (S, 3) change per axis
        usable = parts * change[stretch, None] < 0
        if not usable.any(axis=1).all():
            raise RuntimeError("voxel surface: split vertices cannot keep the volume")
        axis = np.argmax(np.where(usable, np.abs(parts), -1), axis=1)
        rows = np.flatnonzero(stretch)
        factor = 1 - change[stretch] / parts[np.arange(len(rows)), axis]
        out[rows, :, axis] *= factor[:, None]
    largest = np.abs(out).max(axis=(1, 2))
    return out / np.where(largest > 0, largest, 1)[:, None, None]


def _volume_gradient(positions: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """d(enclosed volume)/d(vertex): (1/6) sum over its triangles (v, b, c) of b x c."""
    a, b, c = (positions[triangles[:, k]] for k in range(3))
    gradient = np.zeros_like(positions)
    for k, (p, q) in enumerate(((b, c), (c, a), (a, b))):
        np.add.at(gradient, triangles[:, k], np.cross(p, q))
    return gradient / 6
