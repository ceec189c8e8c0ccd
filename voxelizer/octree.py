"""The arrays of docs/svo-format.md on the CPU: Morton codes, bricks packed from and into a
dense grid, node levels built bottom-up from child states, and the format's arrays of a dense
grid (`build_arrays`, the reference the GPU build is checked against). Everything here is
vectorized over whole levels; nothing loops per voxel or per node.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

import numpy as np

from .errors import ArgumentError
from .placement import Shape

FULL_BRICK = np.uint64(0xFFFF_FFFF_FFFF_FFFF)
POPCOUNT8 = np.array([bin(i).count("1") for i in range(256)], np.uint8)
SPREAD_NIBBLE = np.uint64(1 | 1 << 15 | 1 << 30 | 1 << 45)  # bit b of a nibble -> bit 16b
NIBBLE_LANES = np.uint64(0x0001_0001_0001_0001)
SLAB_VOXELS = 1 << 24  # voxels converted per step between the dense grid and bricks
FILL_STEP = 1 << 16  # voxels set per step when full cubes are painted into a dense grid
# OCTANT_BITS[o]: the bits x + 4y + 16z of a brick in its 2x2x2 octant o = x//2 + 2(y//2) + 4(z//2)
OCTANT_BITS = [
    np.uint64(
        sum(
            1 << (x + 4 * y + 16 * z)
            for x in range(4)
            for y in range(4)
            for z in range(4)
            if (x // 2) | (y // 2) << 1 | (z // 2) << 2 == octant
        )
    )
    for octant in range(8)
]


def padded_resolution(n: int) -> int:
    """P: n (the longest side of the grid) rounded up to a power of two, at least 8."""
    return max(8, 1 << (int(n) - 1).bit_length())


def octree_levels(side: int) -> int:
    """Internal node levels of a cube of `side` voxels (a power of two, at least 8) above its
    4x4x4 bricks: log2(side / 4). For the whole octree, side is P and the result is L."""
    return (int(side) // 4).bit_length() - 1


def log2_exact(p: int) -> int:
    return int(p).bit_length() - 1


def _spread(v: np.ndarray, bits: int) -> np.ndarray:
    """Bit b of v moved to bit 3b: one axis of a Morton code."""
    v = np.asarray(v, np.int64)
    out = np.zeros_like(v)
    for b in range(bits):
        out |= ((v >> b) & 1) << (3 * b)
    return out


def morton_encode(x: np.ndarray, y: np.ndarray, z: np.ndarray, bits: int) -> np.ndarray:
    """Morton codes of integer positions (each < 2**bits): x, y, z bit b -> bit 3b, 3b+1, 3b+2."""
    return _spread(x, bits) | (_spread(y, bits) << 1) | (_spread(z, bits) << 2)


def morton_decode(codes: np.ndarray, bits: int) -> np.ndarray:
    """(M, 3) int64 positions of Morton codes (the inverse of morton_encode)."""
    codes = np.asarray(codes, np.int64)
    out = np.zeros(codes.shape + (3,), np.int64)
    for axis in range(3):
        for b in range(bits):
            out[..., axis] |= ((codes >> (3 * b + axis)) & 1) << b
    return out


def popcount64(values: np.ndarray) -> np.ndarray:
    """int64 set bits of each uint64."""
    return np.bitwise_count(np.asarray(values, np.uint64)).astype(np.int64)


def fill_cubes(out: np.ndarray, corners: np.ndarray, side: int) -> None:
    """Set the cubes of `side` voxels of out whose corners (M, 3) are given in units of side,
    a bounded number of voxels at a time."""
    if side**3 >= FILL_STEP:  # few cubes, each large: one slice each
        for x, y, z in (corners * side).tolist():
            out[x : x + side, y : y + side, z : z + side] = True
        return
    offsets = np.indices((side, side, side)).reshape(3, -1).T
    step = FILL_STEP // side**3
    for start in range(0, len(corners), step):
        x, y, z = (corners[start : start + step, None, :] * side + offsets).reshape(-1, 3).T
        out[x, y, z] = True


def _mask(flags: np.ndarray) -> np.ndarray:
    """(n*8,) bool in octant order -> (n,) uint8 with bit c set iff flag c of the group is."""
    return np.packbits(flags.reshape(-1, 8), axis=1, bitorder="little").ravel()


def brick_slabs(shape: Shape) -> Iterator[tuple[int, int]]:
    """Ranges of brick rows along x small enough to convert SLAB_VOXELS voxels at a time."""
    nx, ny, nz = shape
    rows = max(1, SLAB_VOXELS // (4 * ny * nz))
    for start in range(0, nx // 4, rows):
        yield start, min(nx // 4, start + rows)


def brick_codes(shape: Shape, levels: int, start: int, stop: int) -> np.ndarray:
    """Morton codes (C order, shape (stop - start, ny/4, nz/4)) of the bricks of x-rows
    start..stop-1 of the grid."""
    sx, sy, sz = (_spread(np.arange(n // 4), levels) for n in shape)
    return sx[start:stop, None, None] | (sy[None, :, None] << 1) | (sz[None, None, :] << 2)


def box_brick_codes(levels: int, lo: Sequence[int], hi: Sequence[int]) -> np.ndarray:
    """Morton codes (C order, shape hi - lo) of the bricks lo..hi-1 (brick indices, per axis)."""
    sx, sy, sz = (_spread(np.arange(a, b), levels) for a, b in zip(lo, hi))
    return sx[:, None, None] | (sy[None, :, None] << 1) | (sz[None, None, :] << 2)


def region_voxels(
    brick_values: Callable[[np.ndarray], np.ndarray],
    levels: int,
    lo: tuple[int, int, int],
    hi: tuple[int, int, int],
) -> np.ndarray:
    """bool of the voxels lo <= (i, j, k) < hi, unpacked from the bricks that cover them,
    whose values `brick_values` gives for an array of Morton codes: about 2^24 voxels at a
    time."""
    first = [a // 4 for a in lo]
    last = [-(-b // 4) for b in hi]
    out = np.empty([4 * (b - a) for a, b in zip(first, last)], bool)
    rows = max(1, (1 << 18) // ((last[1] - first[1]) * (last[2] - first[2])))
    for start in range(first[0], last[0], rows):
        stop = min(last[0], start + rows)
        codes = box_brick_codes(levels, (start, *first[1:]), (stop, *last[1:]))
        unpack_bricks(brick_values(codes), out[4 * (start - first[0]) : 4 * (stop - first[0])])
    crop = tuple(slice(a - 4 * f, b - 4 * f) for a, b, f in zip(lo, hi, first))
    return np.ascontiguousarray(out[crop])


def mapped_read_only(array: np.ndarray) -> bool:
    """Whether `array` views a file mapped read-only (np.memmap mode "r")."""
    base: object = array
    while isinstance(base, np.ndarray):
        if isinstance(base, np.memmap):
            return base.mode == "r" and not array.flags.writeable
        base = base.base
    return False


def check_box(box: object, shape: Shape) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(lo, hi) of a region query: voxel-index corners, lo inclusive, hi exclusive, each
    side non-empty and inside the grid; ArgumentError saying what is wrong otherwise."""
    try:
        lo, hi = (tuple(operator.index(v) for v in corner) for corner in box)  # type: ignore[attr-defined]
    except (TypeError, ValueError):  # (not iterable, not two corners, not integers)
        raise ArgumentError(
            f"box must be two corners (lo, hi) of three integers, not {box!r}"
        ) from None
    if len(lo) != 3 or len(hi) != 3:
        raise ArgumentError(f"box must be two corners (lo, hi) of three integers, not {box!r}")
    if not all(0 <= a < b <= n for a, b, n in zip(lo, hi, shape)):
        raise ArgumentError(
            f"box {lo}..{hi} is not a non-empty region of the {'x'.join(map(str, shape))} grid "
            "(lo inclusive, hi exclusive, 0 <= lo < hi <= the shape on every axis)"
        )
    return (lo[0], lo[1], lo[2]), (hi[0], hi[1], hi[2])


def brick_shape(shape: Sequence[int]) -> Shape:
    """The shape rounded up to whole bricks (a multiple of 4 on each side)."""
    x, y, z = (-(-int(n) // 4) * 4 for n in shape)
    return x, y, z


def build_arrays(voxels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """bool[i, j, k] grid of shape (nx, ny, nz), each side from 1 up ->
    (nodes, bricks, level_offsets).

    The CPU reference of the format: brick values, then node states bottom-up, each level
    kept in Morton order so that the children of node m are entries 8m..8m+7 of the level
    below. The tree covers the cube P^3, P = padded_resolution(max(shape)); padding voxels
    (index >= the side on any axis) are empty: they fill whole bricks, and the rest of the
    bricks that straddle a side (for a side that is not a multiple of 4).
    """
    voxels = np.asarray(voxels)
    if voxels.dtype != bool or voxels.ndim != 3 or not all(voxels.shape):
        raise ArgumentError(
            f"expected a bool (nx, ny, nz) array with each side at least 1, got "
            f"{voxels.dtype} {voxels.shape}"
        )
    if brick_shape(voxels.shape) != voxels.shape:  # padded to whole bricks, empty
        padded = np.zeros(brick_shape(voxels.shape), bool)
        padded[: voxels.shape[0], : voxels.shape[1], : voxels.shape[2]] = voxels
        voxels = padded
    shape = voxels.shape
    levels = octree_levels(padded_resolution(max(shape)))
    # Only the non-empty bricks inside the shape are kept (never the (P/4)^3 of the cube).
    code_parts, value_parts = [], []
    for start, stop in brick_slabs(shape):
        codes = brick_codes(shape, levels, start, stop).ravel()
        values = pack_bricks(voxels[4 * start : 4 * stop])
        solid = values != 0
        code_parts.append(codes[solid])
        value_parts.append(values[solid])
    codes, values = np.concatenate(code_parts), np.concatenate(value_parts)
    order = np.argsort(codes)
    codes, values = codes[order], values[order]
    full = values == FULL_BRICK
    words, level_offsets = _sparse_node_levels(codes, full, levels)
    nodes = np.concatenate(words)
    return nodes, values[~full], np.array(level_offsets, np.uint32)


def _sparse_node_levels(
    brick_codes: np.ndarray, brick_full: np.ndarray, levels: int
) -> tuple[list[np.ndarray], list[int]]:
    """node_levels (children the bricks) from the non-empty bricks alone: their sorted Morton
    codes and which are full. Work and memory follow the non-empty bricks, not the cube.

    Every non-empty node is full (8 full children) or mixed; empty nodes have no entry and
    add nothing to a scan of stored children, so each level's words are those of node_levels.
    """
    # per level: (codes of the non-empty nodes, mixed_mask, full_mask, node is mixed)
    masks: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
    codes, child_full = brick_codes, brick_full
    for level in reversed(range(levels)):
        bit = np.left_shift(1, codes & 7).astype(np.uint8)
        first = np.flatnonzero(np.diff(codes >> 3, prepend=-1) != 0)  # each parent's first child
        parents = codes[first] >> 3
        if len(codes):
            mixed_mask = np.bitwise_or.reduceat(np.where(child_full, 0, bit), first)
            full_mask = np.bitwise_or.reduceat(np.where(child_full, bit, 0), first)
        else:
            mixed_mask = full_mask = np.zeros(0, np.uint8)
        full = full_mask == 0xFF
        masks[level] = (parents, mixed_mask.astype(np.uint8), full_mask.astype(np.uint8), ~full)
        codes, child_full = parents, full
    level_offsets = [0]
    words = []
    for level in range(levels):
        codes, mixed_mask, full_mask, mixed = masks[level]
        if level == 0:  # the root alone (code 0), stored even when empty or full
            if not len(codes):
                mixed_mask = full_mask = np.zeros(1, np.uint8)
        else:
            mixed_mask, full_mask = mixed_mask[mixed], full_mask[mixed]
        start = level_offsets[-1] + len(mixed_mask)
        next_start = start if level + 1 < levels else 0
        children = POPCOUNT8[mixed_mask].astype(np.int64)
        word = np.empty((len(mixed_mask), 2), np.uint32)
        word[:, 0] = mixed_mask | (full_mask.astype(np.uint32) << 8)
        word[:, 1] = next_start + np.cumsum(children) - children
        words.append(word)
        level_offsets.append(start)
    return words, level_offsets


def node_levels(
    child_mixed: np.ndarray, child_full: np.ndarray, levels: int, children_are_nodes: bool
) -> tuple[list[np.ndarray], list[int]]:
    """The `levels` node levels above dense child states (Morton order): their stored words
    per level, and the level offsets (the last one is where the children's level starts).

    Bottom-up, every node's masks and state; top-down, the root plus every mixed node. The
    last level's first_child points into the next node level, or, when the children are the
    bricks (`children_are_nodes` false), into the bricks array."""
    # per level: (mixed_mask, full_mask, node is mixed)
    masks: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for level in reversed(range(levels)):
        mixed_mask, full_mask = _mask(child_mixed), _mask(child_full)
        full = full_mask == 0xFF
        mixed = ~full & ((mixed_mask | full_mask) != 0)
        masks[level] = (mixed_mask, full_mask, mixed)
        child_mixed, child_full = mixed, full
    level_offsets = [0]
    words = []
    for level in range(levels):
        mixed_mask, full_mask, mixed = masks[level]
        stored = np.zeros(1, np.int64) if level == 0 else np.flatnonzero(mixed)
        start = level_offsets[-1] + len(stored)
        next_start = start if children_are_nodes or level + 1 < levels else 0
        children = POPCOUNT8[mixed_mask].astype(np.int64)
        before = np.cumsum(children) - children  # stored children of earlier nodes
        word = np.empty((len(stored), 2), np.uint32)
        word[:, 0] = mixed_mask[stored] | (full_mask[stored].astype(np.uint32) << 8)
        word[:, 1] = next_start + before[stored]
        words.append(word)
        level_offsets.append(start)
    return words, level_offsets


def pack_bricks(slab: np.ndarray) -> np.ndarray:
    """bool (4s, 4my, 4mz) -> uint64 (s * my * mz,), brick (bx, by, bz) in C order, bit
    x + 4y + 16z.

    Packs along k, where memory is contiguous: each (x, y) column of a brick is a nibble of
    4 z bits, spread to bits 0, 16, 32, 48 by one multiplication (the shifted copies never
    overlap, so nothing carries) and shifted into place by x + 4y.
    """
    s, my, mz = (side // 4 for side in slab.shape)
    z_bytes = np.packbits(slab, axis=2, bitorder="little")
    nibbles = np.stack([z_bytes & 0xF, z_bytes >> 4], axis=-1).reshape(4 * s, 4 * my, -1)
    nibbles = nibbles[:, :, :mz].reshape(s, 4, my, 4, mz)  # bx, x, by, y, bz
    out = np.zeros((s, my, mz), np.uint64)
    for x in range(4):
        for y in range(4):
            column = nibbles[:, x, :, y, :].astype(np.uint64)
            out |= ((column * SPREAD_NIBBLE) & NIBBLE_LANES) << np.uint64(x + 4 * y)
    return out.ravel()


def unpack_bricks(values: np.ndarray, out: np.ndarray) -> None:
    """uint64 (s, my, mz) bricks -> their voxels, written into bool out (4s, 4my, 4mz)."""
    s, my, mz = values.shape
    bits = np.unpackbits(
        values.astype("<u8").view(np.uint8).reshape(s, my, mz, 8), axis=3, bitorder="little"
    )  # bit x + 4y + 16z
    # bx x by y bz z
    cells = bits.view(bool).reshape(s, my, mz, 4, 4, 4).transpose(0, 5, 1, 4, 2, 3)
    out.reshape(cells.shape)[...] = cells


class OctreeSink(Protocol):
    """Where an octree is written as it is made, in the format's order (docs/svo-format.md):
    first its sizes, then every node level by level, then the bricks, in pieces of any size.
    An SVO in memory (ArraysSink) or an .svo file written as it goes (voxelizer.io's)."""

    def begin(self, level_offsets: np.ndarray, brick_count: int, solid: int) -> None:
        """The octree's level offsets (their last entry: the node count), its brick count and
        its solid voxels, before any node."""

    def nodes(self, words: np.ndarray) -> None:
        """The next nodes, uint32 (n, 2)."""

    def bricks(self, values: np.ndarray) -> None:
        """The next bricks, uint64 (n,), after every node."""


class ArraysSink:
    """An OctreeSink that keeps the octree's arrays in memory, allocated once at `begin`."""

    def __init__(self) -> None:
        self.level_offsets = np.zeros(1, np.uint32)
        self.node_words = np.zeros((0, 2), np.uint32)
        self.brick_values = np.zeros(0, np.uint64)
        self.solid = 0
        self._nodes_at = 0
        self._bricks_at = 0

    def begin(self, level_offsets: np.ndarray, brick_count: int, solid: int) -> None:
        self.level_offsets = np.asarray(level_offsets, np.uint32)
        self.node_words = np.empty((int(self.level_offsets[-1]), 2), np.uint32)
        self.brick_values = np.empty(brick_count, np.uint64)
        self.solid = solid

    def nodes(self, words: np.ndarray) -> None:
        end = self._nodes_at + len(words)
        self.node_words[self._nodes_at : end] = words
        self._nodes_at = end

    def bricks(self, values: np.ndarray) -> None:
        end = self._bricks_at + len(values)
        self.brick_values[self._bricks_at : end] = values
        self._bricks_at = end

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(nodes, bricks, level_offsets), once every piece has come."""
        if self._nodes_at != len(self.node_words) or self._bricks_at != len(self.brick_values):
            raise ValueError("the octree is not complete")
        return self.node_words, self.brick_values, self.level_offsets


COUNT_CHUNK = 1 << 22  # entries counted at a time: the counts of a mapped file stay small


def octree_solid(nodes: np.ndarray, bricks: np.ndarray, level_offsets: np.ndarray) -> int:
    """Solid voxels of an octree's arrays (docs/svo-format.md): every full child its cube,
    every brick its bits; a chunk at a time, so that arrays mapped from a file are read
    through once without a copy of their size."""
    levels = len(level_offsets) - 1
    padded = 4 << levels
    total = 0
    for level in range(levels):
        start, stop = int(level_offsets[level]), int(level_offsets[level + 1])
        side = padded >> (level + 1)
        for first in range(start, stop, COUNT_CHUNK):
            words = np.asarray(nodes[first : min(first + COUNT_CHUNK, stop), 0])
            total += int(np.bitwise_count(words & np.uint32(0xFF00)).sum(dtype=np.int64)) * side**3
    for first in range(0, len(bricks), COUNT_CHUNK):
        chunk = np.asarray(bricks[first : first + COUNT_CHUNK], np.uint64)
        total += int(np.bitwise_count(chunk).sum(dtype=np.int64))
    return total
