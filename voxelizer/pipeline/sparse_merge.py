"""The octree of a sparse voxelization (sparse_slabs.py), written into an OctreeSink in the
format's order (docs/svo-format.md).

Below the cubes of 32^3 voxels (level T = log2(P / 32)), each mixed cube's subtree comes from
the GPU, a forest of cubes at a time (svo_build, one forest per batch of a slab's cubes). At
the cube level the octree is a set of runs along z per stack of cubes: a surface cube that is
full or mixed is a run of one cube; a gap between two surface cubes of a stack is a run of
full cubes, or, where its columns differ (an open surface), of cubes that are all the same
replica's. The T levels above are made from those runs alone (`_coarsen`): a node is full
where all four stacks below are full over its height, mixed where any run touches it, and only
the mixed ones are enumerated. Nothing here touches a voxel, and nothing is proportional to
the volume: a full region costs one run per stack of cubes, wherever it is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..octree import OctreeSink, morton_encode, octree_levels, padded_resolution, popcount64
from ..placement import Shape
from .cubes import CUBE_SHIFT, CUBE_SIDE, CUBE_VOXELS
from .merge import EMPTY, FULL, MIXED, counts_per_cube
from .svo_build import SVOArrays

INNER_LEVELS = octree_levels(CUBE_SIDE)  # the levels of a cube's subtree above its bricks
CHUNK_ITEMS = 1 << 22  # nodes or bricks gathered per piece handed to the sink
_Z_BITS = 18  # run starts (cube or node positions along z, at most 2^17) in a combined key
POPCOUNT_BYTE = np.array([bin(i).count("1") for i in range(256)], np.int64)


@dataclass(frozen=True)
class Runs:
    """Runs along z per stack (x, y): [z0, z1) of one state (FULL or MIXED), sorted by stack
    then z, with the subtree of a mixed cube run (forest, cube; -1 above the cubes or for a
    full run)."""

    x: np.ndarray
    y: np.ndarray
    z0: np.ndarray
    z1: np.ndarray
    state: np.ndarray
    forest: np.ndarray
    cube: np.ndarray

    def keys(self) -> np.ndarray:
        return (self.x << 16) | self.y

    def starts(self) -> np.ndarray:
        """Stack and start in one sortable int64."""
        return (self.keys() << _Z_BITS) | self.z0

    def take(self, rows: np.ndarray) -> Runs:
        return Runs(*(getattr(self, name)[rows] for name in _FIELDS))


_FIELDS = ("x", "y", "z0", "z1", "state", "forest", "cube")


class SparseOctree:
    """What the slabs of a sparse voxelization leave on the host: the forests of their cube
    batches (with each cube's node counts and solid voxels) and the cube level's runs. It
    owns them until `write` hands the octree to a sink."""

    def __init__(self, shape: Shape):
        self.shape = shape
        self.padded = padded_resolution(max(shape))
        self.top = (self.padded >> CUBE_SHIFT).bit_length() - 1  # levels above the cubes
        if self.top < 1:
            raise ValueError(f"a {shape} grid is a single cube: no sparse octree")
        self._forests: list[SVOArrays] = []
        self._counts: list[np.ndarray] = []  # per forest: (INNER_LEVELS + 1, cubes)
        self._solid: list[np.ndarray] = []  # per forest: solid voxels per cube
        self._runs: list[Runs] = []
        self.nbytes = 0  # host bytes held

    def add_forest(self, arrays: SVOArrays) -> int:
        """Keep a batch's forest; returns its index for the runs that refer to it."""
        counts = counts_per_cube(arrays, INNER_LEVELS)
        self._forests.append(arrays)
        self._counts.append(counts)
        self._solid.append(_solid_per_cube(arrays, counts))
        self.nbytes += arrays.nodes.nbytes + arrays.bricks.nbytes + 16 * counts.shape[1]
        return len(self._forests) - 1

    def cube_states(self, forest: int) -> np.ndarray:
        states = self._forests[forest].cube_states
        assert states is not None  # a forest of several cubes
        return states

    def add_runs(self, x: np.ndarray, y: np.ndarray, z0: np.ndarray, z1: np.ndarray,
                 state: np.ndarray, forest: np.ndarray, cube: np.ndarray) -> None:  # fmt: skip
        """Runs at the cube level (any order); empty ones are dropped."""
        keep = (state != EMPTY) & (z1 > z0)
        columns = (x, y, z0, z1, state, forest, cube)
        runs = Runs(*(np.asarray(c, np.int64)[keep] for c in columns))
        self._runs.append(runs)
        self.nbytes += 56 * len(runs.x)

    def write(self, sink: OctreeSink) -> None:
        """Hand the octree to `sink`: sizes, nodes level by level, bricks."""
        runs = _normalized(_concatenated(self._runs))
        cubes = _mixed_cubes(runs, self.top)
        top_masks = _top_levels(runs, self.top)
        lengths, starts = self._cube_counts(cubes)
        offsets = [0]
        for mixed, _ in top_masks:
            offsets.append(offsets[-1] + len(mixed))
        for level in range(INNER_LEVELS):
            offsets.append(offsets[-1] + int(lengths[:, level].sum()))
        solid = self._solid_count(runs)
        sink.begin(np.array(offsets, np.uint32), int(lengths[:, INNER_LEVELS].sum()), solid)
        for level, (mixed, full) in enumerate(top_masks):
            children = POPCOUNT_BYTE[mixed]
            words = np.empty((len(mixed), 2), np.uint32)
            words[:, 0] = mixed.astype(np.uint32) | (full.astype(np.uint32) << 8)
            words[:, 1] = offsets[level + 1] + np.cumsum(children) - children
            sink.nodes(words)
        before = np.cumsum(lengths, axis=0) - lengths  # each cube's place in its level
        for level in range(INNER_LEVELS + 1):
            self._gather(sink, cubes, level, lengths, starts, before, offsets)

    def _cube_counts(self, cubes: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(lengths, starts) (mixed cubes, INNER_LEVELS + 1): each mixed cube's stored nodes
        per level of its subtree (bricks last) and where they start in its forest's level."""
        forest, cube = cubes
        lengths = np.zeros((len(forest), INNER_LEVELS + 1), np.int64)
        starts = np.zeros_like(lengths)
        for f in np.unique(forest).tolist():
            rows = np.flatnonzero(forest == f)
            counts = self._counts[f]
            lengths[rows] = counts[:, cube[rows]].T
            starts[rows] = (np.cumsum(counts, axis=1) - counts)[:, cube[rows]].T
        return lengths, starts

    def _solid_count(self, runs: Runs) -> int:
        length = runs.z1 - runs.z0
        full = runs.state == FULL
        total = int(length[full].sum()) * CUBE_VOXELS
        mixed = np.flatnonzero(runs.state == MIXED)
        for f in np.unique(runs.forest[mixed]).tolist():
            rows = mixed[runs.forest[mixed] == f]
            total += int((self._solid[f][runs.cube[rows]] * length[rows]).sum())
        return total

    def _gather(self, sink: OctreeSink, cubes: tuple[np.ndarray, np.ndarray], level: int,
                lengths: np.ndarray, starts: np.ndarray, before: np.ndarray,
                offsets: list[int]) -> None:  # fmt: skip
        """Level `level` of the cubes' subtrees (INNER_LEVELS: the bricks) into the sink, in
        Morton order of the cubes, a piece of at most about CHUNK_ITEMS at a time; the
        nodes' first_child moved to the children's global places."""
        forest, _ = cubes
        bricks = level == INNER_LEVELS
        ends = np.cumsum(lengths[:, level])
        first = 0
        while first < len(forest):
            done = int(ends[first - 1]) if first else 0
            last = max(int(np.searchsorted(ends, done + CHUNK_ITEMS, side="right")), first + 1)
            rows = np.arange(first, last)
            size = int(ends[last - 1]) - done
            piece = np.empty(size if bricks else (size, 2), np.uint64 if bricks else np.uint32)
            for f in np.unique(forest[rows]).tolist():
                mine = rows[forest[rows] == f]
                self._copy_runs(piece, f, mine, level, lengths, starts, before, offsets, done)
            if bricks:
                sink.bricks(piece)
            else:
                sink.nodes(piece)
            first = last

    def _copy_runs(self, piece: np.ndarray, f: int, rows: np.ndarray, level: int,
                   lengths: np.ndarray, starts: np.ndarray, before: np.ndarray,
                   offsets: list[int], done: int) -> None:  # fmt: skip
        """The runs of forest f's cubes `rows` at `level` into their places in the piece."""
        arrays = self._forests[f]
        count = lengths[rows, level]
        total = int(count.sum())
        if not total:
            return
        within = np.arange(total) - np.repeat(np.cumsum(count) - count, count)
        target = np.repeat(before[rows, level] - done, count) + within
        if level == INNER_LEVELS:
            piece[target] = arrays.bricks[np.repeat(starts[rows, level], count) + within]
            return
        source = np.repeat(int(arrays.level_offsets[level]) + starts[rows, level], count) + within
        words = arrays.nodes[source]
        child = level + 1
        if child < INNER_LEVELS:
            shift = offsets[self.top + child] + before[rows, child] - starts[rows, child]
            shift -= int(arrays.level_offsets[child])
        else:
            shift = before[rows, child] - starts[rows, child]
        first_child = words[:, 1].astype(np.int64) + np.repeat(shift, count)
        piece[target, 0] = words[:, 0]
        piece[target, 1] = first_child.astype(np.uint32)


def _solid_per_cube(arrays: SVOArrays, counts: np.ndarray) -> np.ndarray:
    """Solid voxels of each cube of a forest: its full children at every level (a child at
    level l of a cube's subtree is CUBE_SIDE >> (l + 1) a side) and its bricks' bits; a
    full cube's own (its state, not a stored node) are the runs'."""
    cubes = counts.shape[1]
    solid = np.zeros(cubes, np.int64)
    for level in range(INNER_LEVELS):
        nodes = arrays.nodes[arrays.level_offsets[level] : arrays.level_offsets[level + 1]]
        full = POPCOUNT_BYTE[(nodes[:, 0] >> 8) & 0xFF]
        owner = np.repeat(np.arange(cubes), counts[level])
        side = CUBE_SIDE >> (level + 1)
        solid += np.bincount(owner, weights=full * side**3, minlength=cubes).astype(np.int64)
    owner = np.repeat(np.arange(cubes), counts[INNER_LEVELS])
    bits = popcount64(arrays.bricks)
    solid += np.bincount(owner, weights=bits, minlength=cubes).astype(np.int64)
    return solid


def _concatenated(parts: list[Runs]) -> Runs:
    if not parts:
        return Runs(*(np.zeros(0, np.int64) for _ in _FIELDS))
    return Runs(*(np.concatenate([getattr(p, name) for p in parts]) for name in _FIELDS))


def _normalized(runs: Runs) -> Runs:
    """Sorted by stack and start, adjacent full runs of a stack joined (a node above is full
    over a height iff its stacks' full runs cover it: they must not be cut in two)."""
    runs = runs.take(np.argsort(runs.starts(), kind="stable"))
    keys = runs.keys()
    full = runs.state == FULL
    joins = np.zeros(len(keys), bool)
    joins[1:] = full[1:] & full[:-1] & (keys[1:] == keys[:-1]) & (runs.z0[1:] == runs.z1[:-1])
    if not joins.any():
        return runs
    group = np.cumsum(~joins) - 1
    firsts = np.flatnonzero(~joins)
    z1 = np.maximum.reduceat(runs.z1, firsts)
    kept = runs.take(firsts)
    return Runs(kept.x, kept.y, kept.z0, z1[group[firsts]], kept.state, kept.forest, kept.cube)


def _expand(runs: Runs) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every position (x, y, z) of the runs, with the run of each."""
    length = runs.z1 - runs.z0
    run = np.repeat(np.arange(len(length)), length)
    z = np.arange(int(length.sum())) - np.repeat(np.cumsum(length) - length, length)
    return runs.x[run], runs.y[run], runs.z0[run] + z, run


def _mixed_cubes(runs: Runs, top: int) -> tuple[np.ndarray, np.ndarray]:
    """(forest, cube) of every mixed cube, in Morton order of its position: the cube level's
    stored nodes, the roots of the subtrees."""
    mixed = runs.take(np.flatnonzero(runs.state == MIXED))
    x, y, z, run = _expand(mixed)
    order = np.argsort(morton_encode(x, y, z, top), kind="stable")
    return mixed.forest[run[order]], mixed.cube[run[order]]


def _top_levels(runs: Runs, top: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(mixed_mask, full_mask) of the stored nodes of levels 0 .. top - 1, each level in
    Morton order: the mixed nodes, and the root at level 0 whatever its state."""
    levels: list[tuple[np.ndarray, np.ndarray]] = []
    children = runs
    for level in reversed(range(top)):
        parents = _coarsen(children)
        if level == 0:
            x = y = z = np.zeros(1, np.int64)
        else:
            x, y, z, _ = _expand(parents.take(np.flatnonzero(parents.state == MIXED)))
            order = np.argsort(morton_encode(x, y, z, level), kind="stable")
            x, y, z = x[order], y[order], z[order]
        levels.append(_child_masks(children, x, y, z))
        children = parents
    return levels[::-1]


def _child_masks(
    children: Runs, x: np.ndarray, y: np.ndarray, z: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The mixed and full masks (uint8) of the nodes at (x, y, z) from their children's runs
    (the level below, sorted)."""
    starts = children.starts()
    keys = children.keys()
    mixed = np.zeros(len(x), np.uint8)
    full = np.zeros(len(x), np.uint8)
    for octant in range(8):
        cx, cy, cz = 2 * x + (octant & 1), 2 * y + ((octant >> 1) & 1), 2 * z + (octant >> 2)
        key = (cx << 16) | cy
        at = np.searchsorted(starts, (key << _Z_BITS) | cz, side="right") - 1
        inside = at >= 0
        at = np.maximum(at, 0)
        inside &= (keys[at] == key) & (cz < children.z1[at]) if len(keys) else False
        state = np.where(inside, children.state[at] if len(keys) else EMPTY, EMPTY)
        mixed |= ((state == MIXED) << octant).astype(np.uint8)
        full |= ((state == FULL) << octant).astype(np.uint8)
    return mixed, full


def _coarsen(runs: Runs) -> Runs:
    """The runs one level up: node (X, Y, Z) covers stacks (2X + 0..1, 2Y + 0..1) at heights
    2Z, 2Z + 1. It is full where each of its four stacks has a full run over both heights,
    mixed where any run touches it otherwise; the new runs sorted and joined."""
    key = ((runs.x >> 1) << 16) | (runs.y >> 1)
    full = np.flatnonzero(runs.state == FULL)
    cover0, cover1 = (runs.z0[full] + 1) >> 1, runs.z1[full] >> 1
    covers = cover0 < cover1
    full = full[covers]
    cover0, cover1 = cover0[covers], cover1[covers]
    event_key = np.concatenate([key, key, key[full], key[full]])
    position = np.concatenate([runs.z0 >> 1, ((runs.z1 - 1) >> 1) + 1, cover0, cover1])
    ones, none = np.ones(len(key), np.int64), np.zeros(len(key), np.int64)
    touch = np.concatenate([ones, -ones, np.zeros(2 * len(full), np.int64)])
    cover = np.concatenate(
        [none, none, np.ones(len(full), np.int64), -np.ones(len(full), np.int64)]
    )
    combined = (event_key << _Z_BITS) | position
    order = np.argsort(combined, kind="stable")
    combined, touched, covered = combined[order], np.cumsum(touch[order]), np.cumsum(cover[order])
    last = np.flatnonzero(np.diff(combined, append=-1) != 0)  # each position's last event
    seg_key, seg_start = combined[last] >> _Z_BITS, combined[last] & ((1 << _Z_BITS) - 1)
    touched, covered = touched[last], covered[last]
    same_stack = np.zeros(len(last), bool)
    same_stack[:-1] = seg_key[:-1] == seg_key[1:]
    seg_end = np.append(seg_start[1:], 0)
    state = np.where(covered == 4, FULL, np.where(touched > 0, MIXED, EMPTY))
    keep = same_stack & (state != EMPTY)
    none_ref = np.full(int(keep.sum()), -1, np.int64)
    runs = Runs(seg_key[keep] >> 16, seg_key[keep] & 0xFFFF, seg_start[keep], seg_end[keep],
                state[keep], none_ref, none_ref)  # fmt: skip
    return _joined(runs)


def _joined(runs: Runs) -> Runs:
    """Adjacent runs of a stack in the same state joined (runs sorted, never overlapping)."""
    keys = runs.keys()
    joins = np.zeros(len(keys), bool)
    joins[1:] = (
        (keys[1:] == keys[:-1])
        & (runs.z0[1:] == runs.z1[:-1])
        & (runs.state[1:] == runs.state[:-1])
    )
    if not joins.any():
        return runs
    firsts = np.flatnonzero(~joins)
    z1 = np.maximum.reduceat(runs.z1, firsts)
    kept = runs.take(firsts)
    return Runs(kept.x, kept.y, kept.z0, z1, kept.state, kept.forest, kept.cube)
