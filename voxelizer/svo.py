"""SVO: the sparse voxel octree users work with, exactly as docs/svo-format.md lays it out.

Empty space has no nodes, a cube that is solid all through is one bit in its parent's full
mask, and only the 4x4x4 bricks that mix solid and empty voxels are stored (64 bits each).
Everything here is vectorized over whole levels; nothing loops per voxel or per node.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import numpy.typing

from .budget import check_dense_fits
from .errors import ArgumentError, GridIndexError, SVOFormatError
from .grid import bit_count
from .grid_spec import voxel_size_text
from .mesh import real_array
from .octree import (
    FULL_BRICK,
    OCTANT_BITS,
    POPCOUNT8,
    brick_codes,
    brick_shape,
    brick_slabs,
    build_arrays,
    check_box,
    fill_cubes,
    log2_exact,
    morton_decode,
    morton_encode,
    octree_levels,
    octree_solid,
    padded_resolution,
    popcount64,
    region_voxels,
    unpack_bricks,
)
from .placement import GridPlacement, Placed, shape_text
from .stats import Stats
from .svo_arrays import FaceIds, SolidValuesLike, frozen_array


class SVO(Placed):
    """A solid voxelization as a sparse voxel octree (docs/svo-format.md).

    Holds the three arrays of the format and the grid placement. The arrays are checked
    against the format on construction (SVOFormatError) and read-only afterwards;
    `verify=False` (arrays from this package's own GPU build, tested equal to the CPU
    reference) defers the walk of the tree, and with it the check, to its first use.
    """

    def __init__(
        self,
        nodes: np.ndarray,
        bricks: np.ndarray,
        level_offsets: np.ndarray,
        placement: GridPlacement,
        stats: Stats | None = None,
        *,
        verify: bool = True,
        face_ids: FaceIds | None = None,
        values: SolidValuesLike | None = None,
    ):
        self.placement = placement
        self.stats = stats if stats is not None else Stats()
        self._padded = padded_resolution(placement.resolution)
        nodes = np.asarray(nodes)
        if nodes.size % 2:
            raise SVOFormatError(f"nodes must have two words per node, not shape {nodes.shape}")
        self._nodes = frozen_array(nodes.reshape(-1, 2), np.uint32, "nodes")
        self._bricks = frozen_array(np.asarray(bricks).reshape(-1), np.uint64, "bricks")
        self._level_offsets = frozen_array(
            np.asarray(level_offsets).reshape(-1), np.uint32, "level_offsets"
        )
        self._faces = face_ids
        self._values = values  # labels and colours of the solid voxels
        self._walked: _Tree | None = _check_structure(self) if verify else None

    @property
    def _tree(self) -> _Tree:
        if self._walked is None:
            self._walked = _check_structure(self)
        return self._walked

    @classmethod
    def empty(cls, placement: GridPlacement, stats: Stats | None = None) -> SVO:
        """The octree of a grid with no solid voxel: the root alone, its masks 0."""
        levels = octree_levels(padded_resolution(placement.resolution))
        nodes = np.array([[0, 1 if levels > 1 else 0]], np.uint32)
        offsets = np.array([0] + [1] * levels, np.uint32)
        return cls(nodes, np.zeros(0, np.uint64), offsets, placement, stats)

    @classmethod
    def from_dense(
        cls,
        voxels: np.ndarray,
        placement: GridPlacement,
        stats: Stats | None = None,
        *,
        face_ids: np.ndarray | None = None,
    ) -> SVO:
        """The octree of a dense bool[i, j, k] grid (DenseGrid.to_numpy()), built on the CPU;
        with `face_ids` (int32 of the same shape, -1 where no triangle marks the voxel, as
        DenseGrid.face_ids) the octree carries them."""
        svo = cls(*build_arrays(voxels), placement, stats)
        if face_ids is None:
            return svo
        face_ids = np.asarray(face_ids)
        if face_ids.shape != svo.shape or face_ids.dtype != np.int32:
            raise ArgumentError(f"expected int32 face ids of shape {svo.shape}")
        marked = np.argwhere(face_ids >= 0)
        return svo.with_face_ids(marked, face_ids[tuple(marked.T)])

    def with_face_ids(self, voxels: np.ndarray, ids: np.ndarray) -> SVO:
        """This octree carrying face ids: `ids` (M,) of the marked voxels (M, 3) [i, j, k],
        each a set voxel, none twice (ArgumentError otherwise); every other voxel has none (-1).
        The tree's arrays are shared, not copied."""
        voxels = np.asarray(voxels, np.int64).reshape(-1, 3)
        ids = np.asarray(ids)
        if ids.shape != (len(voxels),) or ids.dtype.kind not in "ui" or (ids < 0).any():
            raise ArgumentError("expected one non-negative integer id per voxel")
        faces = _face_arrays(self, voxels, ids.astype(np.int32))  # walks this tree first
        out = copy.copy(self)
        out._faces = faces
        return out

    def with_values(self, values: SolidValuesLike | None) -> SVO:
        """This octree (its arrays shared) with these labels and colours, or SVOFormatError."""
        if values is not None and values.check(self.count()):
            raise SVOFormatError(values.check(self.count()))
        out = copy.copy(self)
        out._values = values
        return out

    @property
    def attributes(self) -> tuple[str, ...]:
        faces = () if self._faces is None else ("face",)
        return faces + (() if self._values is None else self._values.names)

    @property
    def values(self) -> SolidValuesLike | None:
        """The labels and colours of the solid voxels, or None."""
        return self._values

    @property
    def label_names(self) -> tuple[str, ...]:
        """The parts' names: label l (to_numpy(attribute="label")) is label_names[l - 1]."""
        return () if self._values is None else self._values.label_names

    @property
    def face_ids(self) -> FaceIds | None:
        """The face ids stored beside the bricks (FaceIds), or None when not asked for."""
        if self._faces is not None and self._walked is None:
            self._walked = _check_structure(self)  # checks them with the tree
        return self._faces

    # --- geometry -------------------------------------------------------------------------

    @property
    def padded_resolution(self) -> int:
        """P: the longest side rounded up to a power of two (at least 8); the root covers P^3
        voxels."""
        return self._padded

    @property
    def depth(self) -> int:
        """log2(P): halvings from the root to one voxel."""
        return log2_exact(self._padded)

    @property
    def levels(self) -> int:
        """L = log2(P/4): internal node levels; the children of level L-1 are bricks."""
        return self.depth - 2

    @property
    def bounds(self) -> np.ndarray:
        """(2, 3) world min and max corner of the (nx, ny, nz) grid."""
        origin = np.asarray(self.placement.origin, np.float64)
        return np.array([origin, origin + np.array(self.shape, np.float64) * self.spacing])

    # --- the arrays -----------------------------------------------------------------------

    @property
    def nodes(self) -> np.ndarray:
        return self._nodes

    @property
    def bricks(self) -> np.ndarray:
        return self._bricks

    @property
    def level_offsets(self) -> np.ndarray:
        return self._level_offsets

    @property
    def node_count(self) -> int:
        return len(self._nodes)

    @property
    def brick_count(self) -> int:
        return len(self._bricks)

    @property
    def nbytes(self) -> int:
        """Bytes of the three arrays (the format's size, without file header, padding, checksum)."""
        return 8 * self.node_count + 8 * self.brick_count + 4 * (self.levels + 1)

    # --- contents -------------------------------------------------------------------------

    def count(self) -> int:
        """Solid voxels, from the structure: full children count their cube, bricks their
        bits (a chunk at a time: an octree mapped from a file is read through once)."""
        return octree_solid(self._nodes, self._bricks, self._level_offsets)

    def volume(self) -> float:
        """Solid volume in world units: count * h^3."""
        if isinstance(self.voxel_size, float):
            return self.count() * self.voxel_size**3
        hx, hy, hz = self.voxel_size
        return self.count() * hx * hy * hz

    def to_numpy(
        self,
        attribute: str | None = None,
        *,
        box: tuple[Sequence[int], Sequence[int]] | None = None,
    ) -> np.ndarray:
        """bool (nx, ny, nz) indexed [i, j, k]: the same array as DenseGrid.to_numpy(), built
        anew on every call (the octree is the stored form). attribute="face": int32 of the
        same shape, the face id of every marked voxel and -1 elsewhere (empty voxels too),
        as DenseGrid.face_ids. box=(lo, hi): the region lo <= (i, j, k) < hi alone (voxel
        indices, hi exclusive), read from the bricks it covers (to_numpy()[lo:hi] of a grid
        too large to be dense)."""
        shape, levels = self.shape, self.levels
        if box is not None:
            if attribute is not None:
                raise ArgumentError("box= reads the solid alone, not an attribute")
            return self._region(*check_box(box, shape))
        if attribute in ("label", "color") and self._values is not None:
            check_dense_fits(shape, "SVO.to_numpy", voxel_bytes=2 if attribute == "label" else 4)
            return self._values.dense(self, attribute)
        if attribute is not None:
            return self._face_grid(attribute)
        check_dense_fits(shape, "SVO.to_numpy")
        full_starts, full_stops = self._full_ranges()
        bricks = brick_shape(shape)  # whole bricks, cut to the shape at the end
        out = np.empty(bricks, bool)
        for start, stop in brick_slabs(bricks):
            codes = brick_codes(bricks, levels, start, stop)
            unpack_bricks(
                self._brick_values(codes, full_starts, full_stops), out[4 * start : 4 * stop]
            )
        if bricks == shape:
            return out
        return np.ascontiguousarray(out[: shape[0], : shape[1], : shape[2]])

    def _region(self, lo: tuple[int, int, int], hi: tuple[int, int, int]) -> np.ndarray:
        check_dense_fits(tuple(b - a for a, b in zip(lo, hi)), "SVO.to_numpy")
        full_starts, full_stops = self._full_ranges()
        return region_voxels(
            lambda codes: self._brick_values(codes, full_starts, full_stops), self.levels, lo, hi
        )

    def _face_grid(self, attribute: str) -> np.ndarray:
        if attribute in ("label", "color"):
            raise ArgumentError(f"this SVO has no {attribute}s (voxelize with {attribute}s=True)")
        if attribute != "face":
            raise ArgumentError(f"attribute must be 'face', 'label' or 'color', not {attribute!r}")
        faces = self.face_ids
        if faces is None:
            raise ArgumentError("this SVO has no face ids (voxelize with attributes=['face'])")
        check_dense_fits(self.shape, "SVO.to_numpy", voxel_bytes=4)
        out = np.full(self.shape, -1, np.int32)
        for codes, masks, ids in (
            (self._tree.brick_codes, self._bricks, faces.brick_ids),
            (faces.full_codes.astype(np.int64), faces.full_masks, faces.full_ids),
        ):
            x, y, z = _mask_voxels(codes, masks, self.levels).T
            out[x, y, z] = ids
        return out

    def __getitem__(self, index: tuple[int, int, int]) -> bool:
        """Voxel (i, j, k), by descending the tree; IndexError outside the shape."""
        if (
            not isinstance(index, tuple)
            or len(index) != 3
            or not all(
                isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_))
                for i in index
            )
        ):
            raise ArgumentError(f"index with three integers (i, j, k), not {index!r}")
        if not all(0 <= int(i) < n for i, n in zip(index, self.shape)):
            raise GridIndexError(
                f"voxel {tuple(int(i) for i in index)} is outside the {shape_text(self.shape)} grid"
            )
        return bool(self._lookup(np.array([index], np.int64))[0])

    def contains(self, points: np.ndarray) -> np.ndarray:
        """bool (M,): is each world point in a solid voxel?

        Voxel i spans [origin + i*h, origin + (i+1)*h) on each axis (corners computed in
        float64 exactly so), so a point on a face between two voxels belongs to the higher
        one. Points outside the grid, or not finite, are not contained.
        """
        points = real_array(points, np.float64, "points", ArgumentError)
        if points.ndim != 2 or points.shape[1] != 3:
            raise ArgumentError(f"points must be an (M, 3) array, not {points.shape}")
        origin, h = np.asarray(self.placement.origin, np.float64), self.placement.spacing
        with np.errstate(invalid="ignore", over="ignore"):
            cell = np.floor((points - origin) / h)
            cell += origin + (cell + 1) * h <= points  # rounding put the point one cell low
            cell -= origin + cell * h > points  # or one cell high
        inside = (np.isfinite(points) & (cell >= 0) & (cell < np.array(self.shape))).all(axis=1)
        result = np.zeros(len(points), bool)
        result[inside] = self._lookup(cell[inside].astype(np.int64))
        return result

    def _lookup(self, ijk: np.ndarray) -> np.ndarray:
        """Vectorized descent for (M, 3) voxel indices inside the grid."""
        result = np.zeros(len(ijk), bool)
        active = np.arange(len(ijk))
        node = np.zeros(len(ijk), np.int64)
        for level in range(self.levels):
            shift = self.depth - 1 - level
            octant = ((ijk[active] >> shift) & 1) @ np.array([1, 2, 4])
            bit = np.left_shift(1, octant)
            word = self._nodes[node]
            mixed_mask = word[:, 0].astype(np.int64) & 0xFF
            result[active[((word[:, 0] >> 8) & bit) != 0]] = True
            go_on = (mixed_mask & bit) != 0
            node = word[go_on, 1].astype(np.int64) + POPCOUNT8[mixed_mask[go_on] & (bit[go_on] - 1)]
            active = active[go_on]
        bit = (ijk[active] & 3) @ np.array([1, 4, 16])
        result[active] = (self._bricks[node] >> bit.astype(np.uint64)) & np.uint64(1) != 0
        return result

    def solid_boxes(self) -> tuple[np.ndarray, np.ndarray]:
        """The solid as disjoint cubes in voxel units: (min corner (M, 3) int64, side (M,) int64).

        One cube per full node (its whole cube) and per solid voxel of a brick, in Morton
        order of their min corners, which is the depth-first order of the tree.
        """
        depth, levels = self.depth, self.levels
        corners, sizes, keys = [], [], []
        for level, codes in enumerate(self._tree.full_codes, start=1):
            side = self._padded >> level
            corners.append(morton_decode(codes, level) * side)
            sizes.append(np.full(len(codes), side, np.int64))
            keys.append(codes << (3 * (depth - level)))
        as_bytes = self._bricks.astype("<u8").view(np.uint8).reshape(-1, 8)
        brick, bit = np.nonzero(np.unpackbits(as_bytes, axis=1, bitorder="little"))
        local = np.stack([bit & 3, (bit >> 2) & 3, bit >> 4], axis=1)
        codes = self._tree.brick_codes[brick]
        corners.append(morton_decode(codes, levels) * 4 + local)
        sizes.append(np.ones(len(bit), np.int64))
        keys.append((codes << 6) | morton_encode(local[:, 0], local[:, 1], local[:, 2], 2))
        order = np.argsort(np.concatenate(keys), kind="stable")
        return np.concatenate(corners)[order], np.concatenate(sizes)[order]

    def solid_bricks(self) -> tuple[np.ndarray, np.ndarray]:
        """(Morton codes, ascending; masks) of the bricks with solid voxels, full cubes' too."""
        codes, masks = [self._tree.brick_codes], [self._bricks]
        for level, full in enumerate(self._tree.full_codes, start=1):
            shift = 3 * (self.levels - level)
            if len(full):
                codes.append(((full << shift)[:, None] + np.arange(1 << shift)).reshape(-1))
                masks.append(np.full(len(codes[-1]), FULL_BRICK))
        all_codes = np.concatenate(codes)
        order = np.argsort(all_codes, kind="stable")
        return all_codes[order], np.concatenate(masks)[order]

    def world_boxes(self) -> np.ndarray:
        """(M, 2, 3) world min and max corners of solid_boxes(), same order."""
        corners, sizes = self.solid_boxes()
        origin, h = np.asarray(self.placement.origin, np.float64), self.placement.spacing
        low = origin + corners * h
        return np.stack([low, origin + (corners + sizes[:, None]) * h], axis=1)

    def lod(self, level: int, rule: str = "any") -> SVO:
        """The same solid with voxels 2**level times larger (level 0 is this SVO).

        `rule="any"`: a coarse voxel is solid iff any of its fine voxels is. Conservative:
        the coarse solid covers every fine solid voxel, so thin parts never vanish (the
        usual choice for culling, collision and display). `rule="majority"`: iff more than
        half of its 8**level fine voxels are (closer in volume; thin parts may vanish).
        Same origin; each side n becomes ceil(n / 2**level) rounded up to a multiple of 4 (at
        least 8); fine voxels beyond the shape count as empty. level goes up to depth - 3
        (root of 8^3). Face ids do not carry over to a coarser level.
        """
        if (
            isinstance(level, bool)
            or not isinstance(level, (int, np.integer))
            or not 0 <= level <= self.depth - 3
        ):
            raise ArgumentError(
                f"level must be an integer from 0 to {self.depth - 3}, not {level!r}"
            )
        if rule not in ("any", "majority"):
            raise ArgumentError(f"rule must be 'any' or 'majority', not {rule!r}")
        if level == 0:
            return self
        f = 1 << level
        cx, cy, cz = (max(8, -(-n // (4 * f)) * 4) for n in self.shape)
        coarse = (cx, cy, cz)
        check_dense_fits(coarse, "SVO.lod")
        # A coarse voxel is a cube of the tree at `cells`: solid through a full cube at or
        # above it, else by the solid voxels of the full cubes and bricks below it.
        cells = self.depth - level
        voxels = np.zeros(coarse, bool)
        for full_level, codes in enumerate(self._tree.full_codes[:cells], start=1):
            fill_cubes(voxels, morton_decode(codes, full_level), 1 << (cells - full_level))
        codes, counts = self._solid_below(cells)
        solid = codes[counts > 0] if rule == "any" else codes[counts * 2 > f**3]
        x, y, z = morton_decode(solid, cells).T
        voxels[x, y, z] = True
        placement = GridPlacement(coarse, self.origin, tuple(self.placement.spacing * f))
        return SVO.from_dense(voxels, placement)

    def _solid_below(self, cells: int) -> tuple[np.ndarray, np.ndarray]:
        """(Morton codes, solid voxels) of the cubes at tree level `cells` (3 to L + 1) that
        hold bricks or full cubes smaller than themselves; sizes follow the tree."""
        codes: list[np.ndarray] = [np.zeros(0, np.int64)]
        counts: list[np.ndarray] = [np.zeros(0, np.int64)]
        for full_level, full in enumerate(self._tree.full_codes, start=1):
            if full_level > cells:
                codes.append(full >> 3 * (full_level - cells))
                counts.append(np.full(len(full), (self._padded >> full_level) ** 3, np.int64))
        bricks, brick_codes = self._bricks, self._tree.brick_codes
        if cells <= self.levels:
            codes.append(brick_codes >> 3 * (self.levels - cells))
            counts.append(popcount64(bricks))
        else:  # cubes of 2^3 voxels: the 8 octants of each brick
            for octant in range(8):
                codes.append(brick_codes << 3 | octant)
                counts.append(popcount64(bricks & OCTANT_BITS[octant]))
        unique, where = np.unique(np.concatenate(codes), return_inverse=True)
        sums = np.bincount(where.ravel(), np.concatenate(counts), len(unique))
        return unique, sums.astype(np.int64)  # exact: at most P^3 < 2^53

    # --- helpers --------------------------------------------------------------------------

    def _level(self, level: int) -> np.ndarray:
        return self._nodes[self._level_offsets[level] : self._level_offsets[level + 1]]

    def _full_ranges(self) -> tuple[np.ndarray, np.ndarray]:
        return _full_ranges(self._tree, self.levels)

    def _brick_values(
        self, codes: np.ndarray, full_starts: np.ndarray, full_stops: np.ndarray
    ) -> np.ndarray:
        """uint64 values of the bricks with these Morton codes: the stored brick, all ones in
        a full cube (ranges of _full_ranges), else 0. Found by binary search, so the cost
        follows the codes asked for and the tree, never the padded cube."""
        values = np.zeros(codes.shape, np.uint64)
        in_range = np.searchsorted(full_starts, codes, side="right") - 1
        values[codes < full_stops[in_range]] = FULL_BRICK
        stored = self._tree.brick_codes
        if len(stored):
            at = np.minimum(np.searchsorted(stored, codes), len(stored) - 1)
            found = stored[at] == codes
            values[found] = self._bricks[at[found]]
        return values

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SVO):
            return NotImplemented
        return (
            self.shape == other.shape
            and self.voxel_size == other.voxel_size
            and np.array_equal(self.placement.origin, other.placement.origin)
            and np.array_equal(self._level_offsets, other._level_offsets)
            and np.array_equal(self._nodes, other._nodes)
            and np.array_equal(self._bricks, other._bricks)
            and self._faces == other._faces
            and self._values == other._values
        )

    __hash__ = None  # type: ignore[assignment]  # unhashable: __eq__ compares by value

    def __repr__(self) -> str:
        return (
            f"SVO({shape_text(self.shape)}, {self.count():,} {self.stats.voxel_noun()}, "
            f"{self.node_count:,} nodes, "
            f"{self.brick_count:,} bricks, {self.nbytes:,} bytes, "
            f"voxel_size={voxel_size_text(self.voxel_size)})"
        )


def _mask_voxels(codes: np.ndarray, masks: np.ndarray, levels: int) -> np.ndarray:
    """(M, 3) int64 voxels of the set bits of bricks (Morton codes, uint64 masks), brick by
    brick in bit order: the order of the face ids."""
    as_bytes = np.ascontiguousarray(masks, "<u8").view(np.uint8).reshape(-1, 8)
    brick, bit = np.nonzero(np.unpackbits(as_bytes, axis=1, bitorder="little"))
    local = np.stack([bit & 3, (bit >> 2) & 3, bit >> 4], axis=1)
    return morton_decode(codes[brick], levels) * 4 + local


def _face_arrays(svo: SVO, voxels: np.ndarray, ids: np.ndarray) -> FaceIds:
    """FaceIds of the marked voxels (M, 3) with their ids (M,): those in stored bricks at
    their brick's offset (the popcount of the bricks before it and of the bits below), the
    rest, each in a full cube, grouped by brick. One sort by Morton order does the grouping."""
    levels, bricks, stored = svo.levels, svo.bricks, svo._tree.brick_codes
    inside = ((voxels >= 0) & (voxels < np.array(svo.shape))).all(axis=1)
    if not inside.all():
        raise ArgumentError("a marked voxel lies outside the grid")
    codes = morton_encode(voxels[:, 0] >> 2, voxels[:, 1] >> 2, voxels[:, 2] >> 2, levels)
    keys = codes << 6 | ((voxels & 3) @ np.array([1, 4, 16]))
    order = np.argsort(keys)
    keys, ids = keys[order], ids[order]
    if (np.diff(keys) == 0).any():
        raise ArgumentError("a voxel is marked twice")
    codes, bits = keys >> 6, (keys & 63).astype(np.uint64)
    at = np.minimum(np.searchsorted(stored, codes), max(len(stored) - 1, 0))
    in_brick = stored[at] == codes if len(stored) else np.zeros(len(codes), bool)
    counts = popcount64(bricks)
    brick_ids = np.full(int(counts.sum()), -1, np.int32)
    brick, bit = at[in_brick], bits[in_brick]
    if ((bricks[brick] >> bit) & np.uint64(1) == 0).any():
        raise ArgumentError("a marked voxel is not set")
    below = popcount64(bricks[brick] & ((np.uint64(1) << bit) - np.uint64(1)))
    brick_ids[np.cumsum(counts)[brick] - counts[brick] + below] = ids[in_brick]
    rest = ~in_brick
    codes, bits = codes[rest], bits[rest]
    full_starts, full_stops = svo._full_ranges()
    in_range = np.searchsorted(full_starts, codes, side="right") - 1
    if (codes >= full_stops[in_range]).any():
        raise ArgumentError("a marked voxel is not set")
    first = np.flatnonzero(np.diff(codes, prepend=-1) != 0)  # each brick's first voxel
    if len(codes):
        full_masks = np.bitwise_or.reduceat(np.uint64(1) << bits, first)
    else:
        full_masks = np.zeros(0, np.uint64)
    return FaceIds.frozen(brick_ids, codes[first], full_masks, ids[rest])


def _full_ranges(tree: _Tree, levels: int) -> tuple[np.ndarray, np.ndarray]:
    """The full cubes as sorted, disjoint ranges [start, stop) of brick Morton codes, after a
    sentinel range that holds no code (so that every search lands on a range)."""
    starts, stops = [np.array([-1])], [np.array([-1])]
    for level, codes in enumerate(tree.full_codes, start=1):
        shift = 3 * (levels - level)
        starts.append(codes << shift)
        stops.append((codes + 1) << shift)
    order = np.argsort(np.concatenate(starts))
    return np.concatenate(starts)[order], np.concatenate(stops)[order]


def _check_faces(svo: SVO, tree: _Tree, faces: FaceIds) -> None:
    """The face ids against the tree: one per set voxel of the stored bricks, and the listed
    bricks of full cubes ascending, each in a full cube, with one id (>= 0) per marked voxel."""
    if len(faces.brick_ids) != bit_count(svo.bricks):
        raise SVOFormatError(
            f"{len(faces.brick_ids)} face ids beside the bricks, which hold "
            f"{bit_count(svo.bricks)} set voxels"
        )
    codes = faces.full_codes.astype(np.int64)
    if (
        (np.diff(codes) <= 0).any()
        or (faces.full_masks == 0).any()
        or len(faces.full_ids) != bit_count(faces.full_masks)
        or (faces.full_ids < 0).any()
    ):
        raise SVOFormatError("the face ids of full cubes are not sorted, or do not fit their masks")
    full_starts, full_stops = _full_ranges(tree, svo.levels)
    in_range = np.searchsorted(full_starts, codes, side="right") - 1
    if (codes >= full_stops[in_range]).any():
        raise SVOFormatError("face ids listed for a brick outside the full cubes")


class _Tree:
    """Morton codes found by walking a checked tree."""

    def __init__(self, brick_codes: np.ndarray, full_codes: list[np.ndarray]):
        self.brick_codes = brick_codes  # positions of the stored bricks, in storage order
        self.full_codes = full_codes  # per level 1..L: positions of the full children there


def _check_structure(svo: SVO) -> _Tree:
    """Check the arrays against docs/svo-format.md and return the walked tree.

    Level offsets, masks, first_child of every node (the exclusive scan of stored children),
    only mixed nodes and bricks below the root, and no solid voxel in the padding.
    """
    nodes, bricks, offsets = svo._nodes, svo._bricks, svo._level_offsets.astype(np.int64)
    levels, shape, p = svo.levels, np.array(svo.shape), svo.padded_resolution
    if len(offsets) != levels + 1:
        raise SVOFormatError(f"level_offsets has {len(offsets)} entries, not L + 1 = {levels + 1}")
    if (
        offsets[0] != 0
        or offsets[-1] != len(nodes)
        or (np.diff(offsets) < 0).any()
        or (levels and offsets[1] != 1)
    ):
        raise SVOFormatError(
            f"level_offsets {offsets.tolist()} do not describe {len(nodes)} nodes "
            "with the root alone at level 0"
        )
    word = nodes[:, 0]
    mixed_mask, full_mask = word & 0xFF, (word >> 8) & 0xFF
    if (word >> 16).any() or (mixed_mask & full_mask).any():
        raise SVOFormatError("a node has bits 16-31 set or a child both mixed and full")
    nonroot = slice(1, None)
    if ((word[nonroot] & 0xFFFF) == 0).any() or (full_mask[nonroot] == 0xFF).any():
        raise SVOFormatError("a stored node below the root is not mixed")
    if ((bricks == 0) | (bricks == FULL_BRICK)).any():
        raise SVOFormatError("a stored brick is empty or full")
    full_codes, codes = [], np.zeros(1, np.int64)
    for level in range(levels):
        start, stop = offsets[level], offsets[level + 1]
        if stop - start != len(codes):
            raise SVOFormatError(
                f"level {level} holds {stop - start} nodes, its parents have "
                f"{len(codes)} mixed children"
            )
        children = POPCOUNT8[mixed_mask[start:stop]].astype(np.int64)
        next_start = stop if level + 1 < levels else 0
        if (nodes[start:stop, 1] != next_start + np.cumsum(children) - children).any():
            raise SVOFormatError(
                f"a first_child at level {level} is not the scan of the stored children"
            )
        child = codes[:, None] * 8 + np.arange(8)
        mixed = np.unpackbits(
            mixed_mask[start:stop].astype(np.uint8)[:, None], axis=1, bitorder="little"
        ).view(bool)
        full = np.unpackbits(
            full_mask[start:stop].astype(np.uint8)[:, None], axis=1, bitorder="little"
        ).view(bool)
        full_codes.append(child[full])
        codes = child[mixed]
    if len(codes) != len(bricks):
        raise SVOFormatError(
            f"{len(bricks)} bricks stored, the last level has {len(codes)} mixed children"
        )
    # Padding (index >= the side on some axis) must be empty: every full cube and every brick
    # lies inside the whole bricks of the shape, every full cube inside the shape, and the
    # bricks that straddle a side have no voxel beyond it.
    outside = SVOFormatError(
        f"solid voxels beyond the {shape_text(svo.shape)} grid (in the padding up to P = {p})"
    )
    for level, found in [*enumerate(full_codes, start=1), (levels, codes)]:
        side = p >> level
        limit = np.array(brick_shape(svo.shape)) if level == levels else shape
        if len(found) and ((morton_decode(found, level).max(axis=0) + 1) * side > limit).any():
            raise outside
    if len(codes) and (shape % 4).any():
        edge = ((morton_decode(codes, levels) + 1) * 4 > shape).any(axis=1)
        if (_mask_voxels(codes[edge], bricks[edge], levels) >= shape).any():
            raise outside
    tree = _Tree(codes, full_codes)
    if svo._faces is not None:
        _check_faces(svo, tree, svo._faces)
    if svo._values is not None and svo._values.check(svo.count()):
        raise SVOFormatError(svo._values.check(svo.count()))
    return tree
