"""The boundary of a voxel solid as a closed triangle mesh: one quad per solid-empty face,
2-manifold and free of self-contact, with no two vertices at one position, so that tools
which merge vertices by position (trimesh's default load) or test for self-intersection
(open3d) see the same closed surface, whose volume is exactly count * h^3.

Vertices lie on a sub-grid of FINE steps per voxel (integers here; `origin + fine / FINE * h`
in the world), so every coordinate is exact in grid units.

Contacts. Where the solid touches itself along an edge only (two solid and two empty voxels
around it, diagonally), four faces meet at the edge. They are joined in two pairs, by solid
voxel (S: the two solids apart) or by empty voxel (E: the two empty cells apart), and each
lattice point picks the pairing of each such half-edge so that the faces around it form one
disk (its solid octants connect through faces and E edges, its empty octants through faces
and S edges; `_tables` checks the 256 configurations: always possible but for a corner
contact), so the point keeps one vertex. The two pairs of a contact edge then still share
its segment; the edge gets sub-vertices: at its midpoint one per pair if both ends chose the
same pairing; else one per pair at 1/4 (the lower end's pairing) and at 3/4 (the upper
end's), and a single one at 1/2, where the pairing changes. Where two solid (or two empty)
voxels meet at a corner only (a corner contact), the point gets one vertex per cone, and the
moving cone's three edges a midpoint.

Moves. One copy of each sub-vertex and one cone of each corner contact move by SPLIT_MOVE
(1/64 voxel) along each of two axes. A sub-vertex moves across its edge, parallel to the
line joining its two faces' far sides: within the plane through the edge that separates
the two pairs' cells, so each pair's faces keep to their own side of it and meet the other
pair's only at the edge's ends. A cone's vertex moves along (s_x, -s_y, 0), s its octant's
signs: within the plane s . x = 0 through the point, which the other cone lies behind.
Both move inside the voxels' box, along axes with voxels on both sides, so the bounds are
the box's.

Volume. Every quad with a moved vertex or a sub-vertex is a fan around its centre, so no
triangle holds two moved vertices: the enclosed volume is then affine in each moved
vertex v (the cone from v over its fixed link), changing by (1/3) d . A(v), A(v) the vector
area of its triangles; every move d is perpendicular to A(v) (the two faces of a pair, and
the three of a cone, get equal areas around v), so the volume stays exactly count * h^3 in
exact arithmetic, and the grid-unit coordinates are exact.
"""

from __future__ import annotations

import functools
import itertools
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing

if TYPE_CHECKING:
    import trimesh  # imported where a mesh is made: `import voxelizer` stays light

FINE = 64  # sub-grid steps per voxel: every vertex coordinate is a multiple of h / FINE
SPLIT_MOVE = 1  # how far a split vertex moves along each of two axes, in steps of h / FINE

# Corners of a face across axis a (axes b = a+1, c = a+2 mod 3), counter-clockwise seen
# from +a, as (db, dc) offsets; reversed for a face looking towards -a.
_QUAD = np.array([[0, 0], [1, 0], [1, 1], [0, 1]])
# Octant k of a lattice point p is the cell p - 1 + o(k), o(k) = bits (x, y, z) of k.
_OCTANT = np.array([[(k >> 0) & 1, (k >> 1) & 1, (k >> 2) & 1] for k in range(8)])
_MAX_EXTRAS = 3  # sub-vertices on one edge of a quad
# Places of a contact edge's sub-vertices from its lower end, in steps of 1/FINE: copies 0
# and 1 at 1/4, the single one at 1/2, copies 0 and 1 at 3/4 where the two ends chose
# different pairings, else copies 0 and 1 at 1/2 (0: unused).
_SPLIT_PLACES = np.array([FINE // 4, FINE // 4, FINE // 2, 3 * FINE // 4, 3 * FINE // 4])
_WHOLE_PLACES = np.array([FINE // 2, FINE // 2, 0, 0, 0])


def voxel_surface(
    voxels: np.ndarray, origin: numpy.typing.ArrayLike, voxel_size: numpy.typing.ArrayLike
) -> trimesh.Trimesh:
    """Outward-facing faces between every solid voxel and an empty one (see the module);
    `voxel_size`: h, or (hx, hy, hz)."""
    fine, triangles = fine_surface(voxels)
    sizes = np.broadcast_to(np.asarray(voxel_size, np.float64), (3,))
    vertices = np.asarray(origin, np.float64) + fine / FINE * sizes
    import trimesh

    return trimesh.Trimesh(vertices, triangles, process=False)


def fine_surface(voxels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(vertices (V, 3) int64 in steps of 1/FINE voxel from the grid corner, triangles
    (T, 3) int64, counter-clockwise seen from outside) of the voxels' surface."""
    voxels = np.asarray(voxels, bool)
    padded = np.pad(voxels, 1)
    cells, kinds = _solid_faces(padded)
    corners = cells[:, None, :] + _corner_offsets()[kinds]  # (F, 4, 3) lattice points
    point_shape = tuple(np.array(voxels.shape) + 1)
    points, corner_point = np.unique(
        np.ravel_multi_index(tuple(corners.reshape(-1, 3).T), point_shape), return_inverse=True
    )
    corner_point = corner_point.reshape(-1, 4)
    xyz = np.stack(np.unravel_index(points, point_shape), axis=1)
    config = np.zeros(len(points), np.uint8)
    for k, o in enumerate(_OCTANT):
        config |= padded[xyz[:, 0] + o[0], xyz[:, 1] + o[1], xyz[:, 2] + o[2]].astype(np.uint8) << k
    del padded
    contact_table, pairing_table, cone_table = _tables()
    contact = contact_table[config]
    pairing = pairing_table[config, xyz.sum(axis=1) & 1]
    cone_octant = cone_table[config]

    builder = _Builder(xyz, points, point_shape)
    builder.add_contact_edges(contact, pairing, config)
    builder.add_cones(cone_octant)
    special = ((contact > 0) | (cone_octant >= 0))[corner_point].any(axis=1)
    triangles = [_quad_triangles(corner_point[~special])]
    picked = np.flatnonzero(special)
    triangles.append(
        builder.faces(
            corners[picked], cells[picked], kinds[picked], corner_point[picked], cone_octant
        )
    )
    return builder.vertices(), np.concatenate(triangles)


def _solid_faces(padded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(solid cell (F, 3) int64, unpadded; kind = 2 * axis + (0 if the empty neighbour is
    at +axis else 1)) of every face between a solid and an empty voxel."""
    cells: list[np.ndarray] = []
    kinds: list[np.ndarray] = []
    for axis in range(3):
        for side, sign in enumerate((1, -1)):
            neighbour = np.roll(padded, -sign, axis=axis)
            found = np.argwhere(padded & ~neighbour) - 1
            cells.append(found)
            kinds.append(np.full(len(found), 2 * axis + side, np.int8))
    return np.concatenate(cells), np.concatenate(kinds)


@functools.cache
def _corner_offsets() -> np.ndarray:
    """(6 kinds, 4, 3): a face's corners from its solid cell, counter-clockwise outside."""
    out = np.zeros((6, 4, 3), np.int64)
    for axis in range(3):
        b, c = (axis + 1) % 3, (axis + 2) % 3
        for side, sign in enumerate((1, -1)):
            quad = _QUAD if sign > 0 else _QUAD[::-1]
            out[2 * axis + side, :, axis] = sign > 0
            out[2 * axis + side, :, b], out[2 * axis + side, :, c] = quad[:, 0], quad[:, 1]
    return out


def _quad_triangles(vertex: np.ndarray) -> np.ndarray:
    """Two triangles per quad of (Q, 4) vertex ids."""
    return np.concatenate([vertex[:, [0, 1, 2]], vertex[:, [0, 2, 3]]])


@functools.cache
def _tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per configuration of the 8 octants around a point (bit k: octant k solid):

    - contact (256,) uint8: bit 2a + s set if the half-edge along axis a towards side s
      (1: +a) is a contact edge (the 4 octants around it solid and empty diagonally);
    - pairing (256, 2) uint8, by the point's parity (x + y + z) % 2: bit 2a + s set if that
      contact half-edge pairs its faces by solid voxel (S), clear for E; one disk around the
      point, and of such choices the one agreeing most with "S where the edge's lower end is
      even" (which matches the neighbour's choice along a straight contact line);
    - cone (256,) int8: for a corner contact, the octant whose cone moves (the one of the two
      opposite octants with z bit 1), else -1.
    """
    contact = np.zeros(256, np.uint8)
    pairing = np.zeros((256, 2), np.uint8)
    cone = np.full(256, -1, np.int8)
    for config in range(256):
        state = [(config >> k) & 1 for k in range(8)]
        same: dict[int, list[tuple[int, int]]] = {0: [], 1: []}  # face-adjacent, one state
        for k in range(8):
            for a in range(3):
                if k < (k ^ (1 << a)) and state[k] == state[k ^ (1 << a)]:
                    same[state[k]].append((k, k ^ (1 << a)))
        # (half-edge, its two solid octants, its two empty octants) of each contact half-edge
        edges: list[tuple[int, tuple[int, int], tuple[int, int]]] = []
        for a in range(3):
            b, c = (a + 1) % 3, (a + 2) % 3
            for s in (0, 1):
                on, off = (
                    tuple((1 << a) * s + (1 << b) * ob + (1 << c) * oc for ob, oc in pairs)
                    for pairs in (((0, 0), (1, 1)), ((0, 1), (1, 0)))
                )
                if state[on[0]] == state[on[1]] != state[off[0]] == state[off[1]]:
                    solid, empty = (on, off) if state[on[0]] else (off, on)
                    edges.append((2 * a + s, (solid[0], solid[1]), (empty[0], empty[1])))
                    contact[config] |= 1 << (2 * a + s)
        solids = [k for k in range(8) if state[k]]
        empties = [k for k in range(8) if not state[k]]
        if not edges:
            if (
                solids
                and empties
                and not (_connected(solids, same[1]) and _connected(empties, same[0]))
            ):
                pair = solids if len(solids) == 2 else empties
                cone[config] = next(k for k in pair if k & 4)
            continue
        for parity in (0, 1):
            best: tuple[int, tuple[int, ...]] | None = None
            for choice in itertools.product((0, 1), repeat=len(edges)):  # 1: S
                solid_links = same[1] + [e[1] for e, s in zip(edges, choice) if not s]
                empty_links = same[0] + [e[2] for e, s in zip(edges, choice) if s]
                if _connected(solids, solid_links) and _connected(empties, empty_links):
                    lower_even = [(parity if e[0] & 1 else 1 - parity) == 0 for e in edges]
                    score = sum(s == even for s, even in zip(choice, lower_even))
                    if best is None or score > best[0]:
                        best = (score, choice)
            if best is None:  # never: every configuration with contacts has one disk
                raise AssertionError(f"no pairing makes one disk around octants {config:08b}")
            for e, s in zip(edges, best[1]):
                pairing[config, parity] |= s << e[0]
    return contact, pairing, cone


def _connected(nodes: list[int], links: list[tuple[int, int]]) -> bool:
    """Whether the links join all the nodes."""
    reached = set(nodes[:1])
    grew = True
    while grew:
        grew = False
        for u, v in links:
            if (u in reached) != (v in reached):
                reached |= {u, v}
                grew = True
    return reached >= set(nodes)


class _Builder:
    """The vertices beyond one per lattice point, and the faces that use them."""

    def __init__(self, xyz: np.ndarray, points: np.ndarray, point_shape: tuple[int, ...]):
        self.xyz = xyz  # lattice points of the surface, vertex i = point i
        self.points = points  # their linear ids, sorted
        self.point_shape = point_shape
        self.fine: list[np.ndarray] = [xyz * FINE]
        self.count = len(xyz)
        self.contact_keys = np.zeros(0, np.int64)
        self.contact_first = np.zeros(0, np.int64)  # first sub-vertex of the edge
        self.contact_split = np.zeros(0, bool)  # True: 5 sub-vertices (1/4, 1/2, 3/4)
        self.contact_pairing = np.zeros((0, 2), np.uint8)  # at the lower, upper end
        self.cone_first = 0
        self.cone_of_point = np.zeros(0, np.int64)  # cone number, at a corner contact's point
        self.midpoint_keys = np.zeros(0, np.int64)
        self.midpoint_first = 0

    def _add(self, fine: np.ndarray) -> int:
        """Append vertices (fine coordinates); returns the first new id."""
        first = self.count
        self.fine.append(fine)
        self.count += len(fine)
        return first

    def _edge_key(self, lower: np.ndarray, axis: np.ndarray) -> np.ndarray:
        return np.ravel_multi_index(tuple(lower.T), self.point_shape) * 3 + axis

    def add_contact_edges(
        self, contact: np.ndarray, pairing: np.ndarray, config: np.ndarray
    ) -> None:
        """Sub-vertices of every contact edge, as the module says; copy 0 of each pair moves."""
        keys, lows, highs, axes = [], [], [], []
        for a in range(3):
            low = np.flatnonzero((contact >> (2 * a + 1)) & 1)
            upper = self.xyz[low].copy()
            upper[:, a] += 1
            high = np.searchsorted(
                self.points, np.ravel_multi_index(tuple(upper.T), self.point_shape)
            )
            keys.append(self._edge_key(self.xyz[low], np.full(len(low), a)))
            lows.append(low)
            highs.append(high)
            axes.append(np.full(len(low), a))
        key, low, high, axis = (np.concatenate(x) for x in (keys, lows, highs, axes))
        order = np.argsort(key)
        key, low, high, axis = key[order], low[order], high[order], axis[order]
        at_low = (pairing[low] >> (2 * axis + 1)) & 1
        at_high = (pairing[high] >> (2 * axis)) & 1
        split = at_low != at_high
        sizes = np.where(split, 5, 2)
        first = self.count + np.cumsum(sizes) - sizes
        # Moves: copy 0 is the pair around the cell at +b; it moves by s_c e_b - e_c, s_c the
        # side along c of that cell: solids on the diagonal (octant 7 of the lower end solid)
        # and pairing S, or solids off it and pairing E, put it at +c.
        on_diagonal = (config[low] >> 7) & 1
        b, c = (axis + 1) % 3, (axis + 2) % 3
        rows = np.arange(len(key))

        def move(pairs_by_solid: np.ndarray) -> np.ndarray:
            side_c = np.where(on_diagonal == pairs_by_solid, 1, -1)
            step = np.zeros((len(key), 3), np.int64)
            step[rows, b] = side_c * SPLIT_MOVE
            step[rows, c] = -SPLIT_MOVE
            return step

        # (E, 5) sub-vertex places along the edge, in steps: 1/4 (two copies), 1/2, 3/4 (two
        # copies) where the ends differ, else 1/2 (two copies), then unused slots
        along = np.where(split[:, None], _SPLIT_PLACES, _WHOLE_PLACES)
        places = (
            self.xyz[low][:, None, :] * FINE
            + along[:, :, None] * np.eye(3, dtype=np.int64)[axis][:, None, :]
        )
        places[:, 0] += move(at_low)
        places[split, 3] += move(at_high)[split]
        self._add(places[np.where(split[:, None], True, _WHOLE_PLACES > 0)])
        self.contact_keys, self.contact_first, self.contact_split = key, first, split
        self.contact_pairing = np.stack([at_low, at_high], axis=1)

    def add_cones(self, cone_octant: np.ndarray) -> None:
        """A vertex for the moving cone of each corner contact, and midpoints on its edges."""
        point = np.flatnonzero(cone_octant >= 0)
        sign = 2 * _OCTANT[cone_octant[point]] - 1  # (C, 3) octant signs s
        step = np.stack([sign[:, 0], -sign[:, 1], np.zeros(len(point), np.int64)], axis=1)
        self.cone_first = self._add(self.xyz[point] * FINE + step * SPLIT_MOVE)
        keys = []
        for i in range(3):
            lower = self.xyz[point].copy()
            lower[:, i] -= sign[:, i] < 0
            keys.append(self._edge_key(lower, np.full(len(point), i)))
        self.midpoint_keys = np.unique(np.concatenate(keys))
        point_id, axis = np.divmod(self.midpoint_keys, 3)
        lower = np.stack(np.unravel_index(point_id, self.point_shape), axis=1)
        along = np.zeros((len(axis), 3), np.int64)
        along[np.arange(len(axis)), axis] = FINE // 2
        self.midpoint_first = self._add(lower * FINE + along)
        self.cone_of_point = np.cumsum(cone_octant >= 0) - 1

    def faces(
        self,
        corners: np.ndarray,
        solid: np.ndarray,
        kinds: np.ndarray,
        corner_point: np.ndarray,
        cone_octant: np.ndarray,
    ) -> np.ndarray:
        """Triangles of the faces that touch a contact or a corner contact: their corners'
        vertices (a moving cone's vertex at its own faces), the sub-vertices and midpoints
        on their edges, and a fan around the centre where there are any."""
        count = len(corners)
        rows = np.arange(count)
        normal = np.zeros((count, 3), np.int64)
        normal[rows, kinds // 2] = 1
        empty = solid + normal * np.where(kinds % 2 == 0, 1, -1)[:, None]
        vertex = corner_point.copy()
        cone = cone_octant[corner_point]
        for k in range(4):
            at = np.flatnonzero(cone[:, k] >= 0)
            point = corner_point[at, k]
            cell = self.xyz[point] - 1 + _OCTANT[cone[at, k]]
            mine = (solid[at] == cell).all(axis=1) | (empty[at] == cell).all(axis=1)
            vertex[at[mine], k] = self.cone_first + self.cone_of_point[point[mine]]
        # The boundary of each face: corner k at slot 4k, then the extras of edge k.
        boundary = np.full((count, 4 * (1 + _MAX_EXTRAS)), -1, np.int64)
        boundary[:, 0 :: 1 + _MAX_EXTRAS] = vertex
        for k in range(4):
            start, end = corners[:, k], corners[:, (k + 1) % 4]
            axis = np.argmax(start != end, axis=1)
            lower = np.minimum(start, end)
            key = self._edge_key(lower, axis)
            extras = boundary[:, 4 * k + 1 : 4 * k + 4]  # a view: filled in place
            hit, index = _lookup(self.contact_keys, key)
            b = (axis[hit] + 1) % 3
            # copy 0 of a pair is the one around the cell at +b (see add_contact_edges)
            by_solid = (solid[hit, b] == lower[hit, b]).astype(np.int64)
            by_empty = (empty[hit, b] == lower[hit, b]).astype(np.int64)
            by_solid_at = self.contact_pairing[index]  # at the edge's lower, upper end
            copy = [np.where(by_solid_at[:, e] == 1, 1 - by_solid, 1 - by_empty) for e in (0, 1)]
            first = self.contact_first[index]
            split = self.contact_split[index]
            found = np.full((len(hit), _MAX_EXTRAS), -1, np.int64)
            found[:, 0] = first + copy[0]
            found[split, 1] = first[split] + 2
            found[split, 2] = first[split] + 3 + copy[1][split]
            backwards = split & (start[hit] > end[hit]).any(axis=1)
            found[backwards] = found[backwards, ::-1]
            extras[hit] = found
            hit, index = _lookup(self.midpoint_keys, key)
            extras[hit, 0] = self.midpoint_first + index
        fanned = (boundary >= 0).sum(axis=1) > 4
        triangles = [_quad_triangles(vertex[~fanned])]
        fan = boundary[fanned]
        centres = self._add(corners[fanned].min(axis=1) * FINE + (FINE // 2) * (1 - normal[fanned]))
        row, slot = np.nonzero(fan >= 0)
        ring = fan[row, slot]
        starts = np.flatnonzero(np.diff(row, prepend=-1))  # each face's first vertex
        following = np.arange(1, len(ring) + 1)  # the next one around its face
        if len(ring):
            following[np.append(starts[1:], len(ring)) - 1] = starts
        triangles.append(np.stack([centres + row, ring, ring[following]], axis=1))
        return np.concatenate(triangles)

    def vertices(self) -> np.ndarray:
        return np.concatenate(self.fine)


def _lookup(sorted_keys: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows of `key` found in `sorted_keys`, their positions there)."""
    if not len(sorted_keys):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    index = np.minimum(np.searchsorted(sorted_keys, key), len(sorted_keys) - 1)
    hit = np.flatnonzero(sorted_keys[index] == key)
    return hit, index[hit]
