"""The mesh's connected components, their orientation, and how fill_mode="union" groups them.

Parity (the exact rule) XORs every surface of the mesh, so two closed parts that overlap
cancel where they overlap. fill_mode="union" counts each closed component by its winding
instead: a component whose signed volume is positive (outward) adds one inside it, one
whose signed volume is negative (inward, the cavity of a hollow part) subtracts one, and a
voxel is solid iff the sum is positive. Overlapping parts give their union; a cavity shell
inside its part stays empty.

A component is a set of faces joined through shared edges, edges compared by vertex
position (as Mesh.topology does), so a soup of unshared corners splits as its indexed mesh
would. Edges rather than vertices: two parts that merely touch at a corner stay two parts.
A component is closed when every one of its edges has exactly two faces. Signs are taken
relative to the closed component of largest volume (its sign counts as outward), so a mesh
that is inside out as a whole fills as if it were not, as parity does. The components
that are not closed have no meaningful signed volume; they are filled together by parity,
with sign +1: on their own they give what fill_mode="parity" gives, and the cracked pieces
of one surface still fill as that surface.

This module is host code on numpy only; the GPU runs and the sum are the pipeline's
(pipeline/runner.py), the CPU reference of the rule is reference.union_columns.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from .mesh import Mesh

# Component boxes closer than this (grid units) count as overlapping: the parity of a closed
# component can set only voxel centres in its box, so runs whose boxes keep this gap never
# set the same voxel, whatever the rounding to float32 and fixed point does at the edges.
BOX_GAP = 1.0


@dataclass(frozen=True)
class Components:
    """Each face's component, and per component its orientation and whether it is closed."""

    labels: np.ndarray  # int64 (T,): component of each face, 0 .. count - 1
    signs: np.ndarray  # int64 (count,): +1 outward (or open), -1 inward
    closed: np.ndarray  # bool (count,)

    @property
    def count(self) -> int:
        return len(self.signs)


@dataclass(frozen=True)
class Run:
    """One parity run of fill_mode="union": faces whose parity is added with `sign`."""

    sign: int
    faces: np.ndarray  # int64 face indices into the mesh


_cache: weakref.WeakKeyDictionary[Mesh, Components] = weakref.WeakKeyDictionary()


def mesh_components(mesh: Mesh) -> Components:
    """split_components of a Mesh, computed once per Mesh (like its topology)."""
    found = _cache.get(mesh)
    if found is None:
        found = _cache[mesh] = split_components(mesh.vertices, mesh.faces)
    return found


def split_components(vertices: np.ndarray, faces: np.ndarray) -> Components:
    """The edge-connected components of (V, 3) vertices and (T, 3) faces (see the module)."""
    faces = np.asarray(faces, np.int64).reshape(-1, 3)
    points = np.asarray(vertices, np.float64)
    rows = np.ascontiguousarray(points + 0.0)  # + 0.0 merges -0.0 into 0.0
    _, position = np.unique(rows.view(np.dtype((np.void, 24))).ravel(), return_inverse=True)
    corners = position.reshape(-1)[faces]

    # Every edge (by position), with its face; collapsed edges join nothing.
    first, second = corners.reshape(-1), corners[:, [1, 2, 0]].reshape(-1)
    edge_face = np.repeat(np.arange(len(faces)), 3)
    keep = first != second
    low, high = np.minimum(first, second)[keep], np.maximum(first, second)[keep]
    keys = low * (int(corners.max(initial=0)) + 1) + high
    order = np.argsort(keys, kind="stable")
    keys, edge_face = keys[order], edge_face[keep][order]
    same = keys[1:] == keys[:-1]  # consecutive uses of one edge: their faces are joined
    labels = _connected(len(faces), edge_face[:-1][same], edge_face[1:][same])
    _, labels = np.unique(labels, return_inverse=True)
    count = int(labels.max(initial=-1)) + 1

    # Closed: each of the component's edges used by exactly two faces.
    starts = np.flatnonzero(np.r_[True, ~same, True])
    uses = np.diff(starts)
    bad_edges = edge_face[starts[:-1][uses != 2]]
    closed = np.ones(count, bool)
    closed[labels[bad_edges]] = False

    # Orientation: the sign of the signed volume (6x: sum of det(a, b, c), about a corner),
    # in coordinates scaled by a power of two to below 1 (exactly), so that the products of
    # three coordinates neither overflow (a mesh near 1e300) nor vanish (one near 1e-300).
    centred = points - (points[faces].reshape(-1, 3).min(axis=0) if len(faces) else 0.0)
    largest = float(np.abs(centred[faces]).max(initial=0.0))
    if 0.0 < largest < np.inf:
        centred = np.ldexp(centred, -np.frexp(largest)[1])
    a, b, c = (centred[faces[:, i]] for i in range(3))
    volume = np.bincount(labels, np.einsum("ij,ij->i", a, np.cross(b, c)), minlength=count)
    inward = closed & (volume < 0)
    # Relative to the largest closed component, so that a mesh inside out as a whole (every
    # face flipped) fills as parity does, rather than not at all.
    if closed.any() and inward[np.flatnonzero(closed)[np.argmax(np.abs(volume[closed]))]]:
        inward = closed & (volume > 0)
    signs = np.where(inward, -1, 1).astype(np.int64)
    return Components(labels.astype(np.int64), signs, closed)


def _connected(count: int, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """A representative per node of the graph with edges (left, right), by hooking the larger
    root onto the smaller and jumping pointers: a few rounds, each vectorized."""
    parent = np.arange(count)
    while True:
        a, b = parent[left], parent[right]
        differ = a != b
        if not differ.any():
            return parent
        np.minimum.at(parent, np.maximum(a, b)[differ], np.minimum(a, b)[differ])
        while True:
            jumped = parent[parent]
            if np.array_equal(jumped, parent):
                break
            parent = jumped


def union_runs(parts: Components, grid_vertices: np.ndarray, faces: np.ndarray) -> list[Run]:
    """The parity runs that fill_mode="union" sums: closed components of one sign whose boxes
    (of grid-space vertices) are at least BOX_GAP apart share a run, found by a greedy
    colouring of the box-overlap graph per sign; the open components make one more run.

    Components in one run have disjoint interiors, so the parity of the run (an XOR) is their
    union. Runs = colours + (1 if any component is open): one for a single closed part or for
    parts that do not overlap, and per sign at most 1 + the largest number of same-sign
    components whose boxes overlap any one component's box (the greedy bound). Each run costs
    one voxelization of its own triangles (all runs together pass every triangle once), plus
    a download of the grid and its sum on the host.
    """
    faces = np.asarray(faces, np.int64).reshape(-1, 3)
    corners = np.asarray(grid_vertices, np.float64)[faces]  # (T, 3 corners, 3)
    order = np.argsort(parts.labels, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(parts.labels[order]) != 0])
    low = np.minimum.reduceat(corners.min(axis=1)[order], starts) - BOX_GAP / 2
    high = np.maximum.reduceat(corners.max(axis=1)[order], starts) + BOX_GAP / 2

    run_of = np.zeros(parts.count, np.int64)  # run index of each component
    signs: list[int] = []
    for sign in (1, -1):
        chosen = np.flatnonzero(parts.closed & (parts.signs == sign))
        colours = _greedy_colours(low[chosen], high[chosen])
        run_of[chosen] = len(signs) + colours
        signs += [sign] * (int(colours.max(initial=-1)) + 1)
    if not parts.closed.all():
        run_of[~parts.closed] = len(signs)
        signs.append(1)
    face_runs = run_of[parts.labels]
    by_run = np.argsort(face_runs, kind="stable")
    bounds = np.searchsorted(face_runs[by_run], np.arange(len(signs) + 1))
    return [Run(sign, by_run[bounds[r] : bounds[r + 1]]) for r, sign in enumerate(signs)]


def _greedy_colours(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """A colour per box such that boxes of one colour do not overlap: each box, in order of
    its low corner along a sweep axis, takes the smallest colour that none of the boxes it
    overlaps already has. Only boxes that start within the longest box's extent before it
    are tested (sweep and prune), along the axis where that leaves the fewest."""
    count = len(low)
    colours = np.full(count, -1, np.int64)
    if count == 0:
        return colours
    reach = (high - low).max(axis=0)
    starts = []
    for axis in range(3):
        ordered = np.sort(low[:, axis])
        starts.append(np.searchsorted(ordered, ordered - reach[axis], "left"))
    axis = int(np.argmin([int((np.arange(count) - s).sum()) for s in starts]))
    order = np.argsort(low[:, axis], kind="stable")
    low, high, first = low[order], high[order], starts[axis]
    for i in range(count):
        near = np.arange(first[i], i)
        overlap = ((low[near] <= high[i]) & (high[near] >= low[i])).all(axis=1)
        taken = set(colours[order[near[overlap]]].tolist())
        colour = 0
        while colour in taken:
            colour += 1
        colours[order[i]] = colour
    return colours
