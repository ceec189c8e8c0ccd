"""Joining the forests of a slab-by-slab conversion into one octree (docs/svo-format.md).

A grid too large for one buffer is voxelized in slabs of S column rows, S a power of two,
and each slab is converted on the GPU as a forest: the (P/S)^2 cubes of side S in that slab,
each a subtree in the format's layout (svo_build.Forest). Here the cubes take their places:

* the T = log2(P/S) levels above the cubes are classified from the cubes' states
  (octree.node_levels, as octree.build_arrays does above the bricks);
* every level below is the concatenation, in Morton order of the cubes, of each mixed cube's
  nodes at that level; a cube's nodes are contiguous there because Morton order is
  depth-first, so only their first_child values move, by one offset per cube.

Nothing here touches voxels: the work is proportional to the stored nodes and bricks.
"""

from __future__ import annotations

import numpy as np

from ..octree import POPCOUNT8, morton_encode, node_levels, octree_levels, padded_resolution
from .svo_build import SVOArrays

EMPTY, FULL, MIXED = 0, 1, 2  # node states (shaders/svo.glsl)


def merge_forests(
    shape: tuple[int, int, int], cube_side: int, slabs: list[tuple[int, SVOArrays]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(nodes, bricks, level_offsets) of the octree from the forests of its slabs, given as
    (cube row, forest arrays) pairs; cube rows without a forest are empty."""
    per_side = padded_resolution(max(shape)) // cube_side
    top = per_side.bit_length() - 1  # levels above the cubes
    inner = octree_levels(cube_side)  # levels inside a cube; the bricks are `inner`
    if top < 1 or inner < 1:
        raise ValueError(f"cubes of side {cube_side} do not split a {shape} grid's octree")

    # The cubes' states in Morton order, and every mixed cube in Morton order: its slab, its
    # index c = cx + per_side * cz in the slab's forest, and its node counts per level.
    cube_x, cube_z = np.arange(per_side**2) % per_side, np.arange(per_side**2) // per_side
    states = np.zeros(per_side**3, np.uint8)
    codes: list[np.ndarray] = []
    slab_parts: list[np.ndarray] = []
    cube_parts: list[np.ndarray] = []
    count_parts: list[np.ndarray] = []
    for slab, (cube_y, arrays) in enumerate(slabs):
        assert arrays.cube_states is not None  # a forest of several cubes
        code = morton_encode(cube_x, np.full_like(cube_x, cube_y), cube_z, top)
        states[code] = arrays.cube_states
        mixed = np.flatnonzero(arrays.cube_states == MIXED)
        codes.append(code[mixed])
        slab_parts.append(np.full_like(mixed, slab))
        cube_parts.append(mixed)
        count_parts.append(counts_per_cube(arrays, inner))
    order = np.argsort(np.concatenate(codes), kind="stable")
    slab_of, cube_of = np.concatenate(slab_parts)[order], np.concatenate(cube_parts)[order]
    counts = np.stack(count_parts)  # (slabs, inner + 1, cubes)
    length = counts[slab_of, :, cube_of]  # (mixed cubes, inner + 1)
    start = (np.cumsum(counts, axis=2) - counts)[slab_of, :, cube_of]  # in the slab's level

    words, level_offsets = node_levels(
        states == MIXED, states == FULL, top, children_are_nodes=True
    )
    for level in range(inner):
        level_offsets.append(level_offsets[-1] + int(length[:, level].sum()))
    for level in range(inner):
        nodes = _gather(
            [a.nodes[a.level_offsets[level] : a.level_offsets[level + 1]] for _, a in slabs],
            slab_of,
            start[:, level],
            length[:, level],
        )
        child = level + 1  # the bricks when child == inner
        global_start = level_offsets[top + child] if child < inner else 0
        slab_start = np.array(
            [int(a.level_offsets[child]) if child < inner else 0 for _, a in slabs], np.int64
        )
        before = np.cumsum(length[:, child]) - length[:, child]
        shift = global_start + before - slab_start[slab_of] - start[:, child]
        nodes[:, 1] = nodes[:, 1] + np.repeat(shift, length[:, level])
        words.append(nodes.astype(np.uint32))
    bricks = _gather([a.bricks for _, a in slabs], slab_of, start[:, inner], length[:, inner])
    return np.concatenate(words), bricks.astype(np.uint64), np.array(level_offsets, np.uint32)


def counts_per_cube(arrays: SVOArrays, inner: int) -> np.ndarray:
    """(inner + 1, cubes): stored nodes of each cube at each level of a forest, bricks last.

    A cube's nodes at level l + 1 are the stored children of its nodes at level l, which the
    mixed masks count; level 0 holds the root of every mixed cube."""
    assert arrays.cube_states is not None  # a forest of several cubes
    cubes = len(arrays.cube_states)
    counts = np.zeros((inner + 1, cubes), np.int64)
    counts[0] = arrays.cube_states == MIXED
    for level in range(inner):
        nodes = arrays.nodes[arrays.level_offsets[level] : arrays.level_offsets[level + 1]]
        children = POPCOUNT8[nodes[:, 0] & 0xFF]
        owner = np.repeat(np.arange(cubes), counts[level])
        counts[level + 1] = np.bincount(owner, weights=children, minlength=cubes)
    return counts


def _gather(
    arrays: list[np.ndarray], slab_of: np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> np.ndarray:
    """The runs arrays[slab_of[r]][starts[r]:starts[r] + lengths[r]], concatenated (as int64)."""
    bases = np.cumsum([0] + [len(a) for a in arrays[:-1]])
    joined = np.concatenate(arrays).astype(np.int64)
    ends = np.cumsum(lengths)
    index = (
        np.arange(int(ends[-1]) if len(ends) else 0)
        - np.repeat(ends - lengths, lengths)
        + np.repeat(bases[slab_of] + starts, lengths)
    )
    return joined[index]
