"""The shapes every stage of the pipeline agrees on: the bytes of what the passes' buffers
hold (shaders/triangle.glsl, compact.comp, fill.comp), the window of grid rows one run of the
passes covers (shaders/common.glsl, Window), and the buffers the marking and signed fills of
fill_mode="winding" hand between the passes and the winding work (winding.py).

Each stage states what it allocates next to its allocations with the sizes here; the memory
plan (plan.py) only composes them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..gpu.buffers import Binding
from ..gpu.kernels import TILE_SHIFT, WG_SIZE
from ..grid import grid_bytes

TILE_SIDE = 1 << TILE_SHIFT
SORT_BLOCK = 2 * WG_SIZE  # values one sort workgroup holds in shared memory
RECORD_BYTES = 48  # TriangleRecord
TILE_BYTES = 16  # Tile in compact.comp / fill.comp
PAIR_BYTES = 8
FINE_VERTEX_BYTES = 24  # a vertex's fine coordinates, 3 int64 (shaders/fill.comp)
INDEX_BYTES = 12  # a triangle's vertex indices, 3 uint32
COLUMN_SUM_BYTES = 8  # (balance, moment) per column (shaders/fill.comp)
FACE_ID_BYTES = 4  # per voxel of a slab, for the face ids of a surface (uint32, none = -1)
NO_FACE = 0xFFFFFFFF


@dataclass(frozen=True)
class Window:
    """Column rows [row_lo, row_hi) of an (nx, ny, nz) grid, whole tile rows, written into a
    grid buffer that starts at row buffer_row (shaders/common.glsl, Window): the push
    constant `window` takes it as it is."""

    nx: int
    nz: int
    row_lo: int
    row_hi: int
    buffer_row: int

    @property
    def rows(self) -> int:
        return self.row_hi - self.row_lo

    @property
    def tiles(self) -> int:
        return (self.nx >> TILE_SHIFT) * (self.rows >> TILE_SHIFT)

    @property
    def grid_bytes(self) -> int:
        return grid_bytes(self.nx, self.rows, self.nz)

    def halves(self) -> tuple[Window, Window]:
        tile_rows = self.rows >> TILE_SHIFT
        middle = self.row_lo + (tile_rows // 2 << TILE_SHIFT)
        return (
            replace(self, row_hi=middle),
            replace(self, row_lo=middle),
        )


@dataclass(frozen=True)
class CrossingMarks:
    """What the marking fill of fill_mode="winding" writes besides the marks in the grid: the
    step of the crossing at each mark (a plane laid out as the grid), and a flag per tile of
    the slab where two crossings share a mark (entry 0 counts them; cleared with the grid)."""

    signs: Binding
    tile_flags: Binding


@dataclass(frozen=True)
class SignedCrossings:
    """What the signed fill of fill_mode="winding" adds to the flips stage: the slab's
    segments (winding_columns.comp's group offsets per tile), the sums it adds to, the box
    of columns and voxels that can be solid, and the tiles it runs for (those flagged in
    CrossingMarks.tile_flags, `flagged_tiles` of them)."""

    offsets: Binding
    crossings: Binding
    box: dict[str, int]
    tile_flags: Binding
    flagged_tiles: int


def geometry_bytes(indexed: bool) -> int:
    """Bytes uploaded per triangle: three float32 corners (soup) or three uint32 indices."""
    return 12 if indexed else 36


def triangle_bytes(indexed: bool, exact: bool = True) -> int:
    """Bytes one triangle of a batch holds: its geometry on the device and in the staging
    buffer (and, for the soup variants, the vertex indices the fill's near ties read,
    `exact`: in host-visible memory), its record (setup) and its tile count (setup, scan)."""
    indices = INDEX_BYTES if exact and not indexed else 0
    return 2 * geometry_bytes(indexed) + indices + RECORD_BYTES + 4


def vertex_bytes(indexed: bool, vertices: int, exact: bool = True) -> int:
    """Bytes held for every vertex: the fine coordinates (where the fill runs, `exact`: in
    host-visible memory the fill reads directly), and the float32 positions of the indexed
    variants (device and staging)."""
    return (FINE_VERTEX_BYTES * exact + (2 * 12 if indexed else 0)) * vertices


def column_sums_bytes(nx: int, rows: int) -> int:
    """Device bytes of the fill's per-column sums over a slab of `rows` column rows."""
    return nx * rows * COLUMN_SUM_BYTES


def pair_slots(pair_count: int, sort: str) -> int:
    """Pairs the pair buffer holds for `pair_count` pairs: the bitonic sort's power of two
    (at least a sort block), or the count itself."""
    if sort == "bitonic":
        return max(SORT_BLOCK, 1 << max(pair_count - 1, 0).bit_length())
    return pair_count


def pair_bytes(pair_count: int, window_tiles: int, sort: str) -> int:
    """Device bytes the grouping and fill of one part need beyond the triangle records."""
    if sort == "bitonic":
        slots = pair_slots(pair_count, sort)
        return slots * PAIR_BYTES + pair_count * 4 + min(pair_count, window_tiles) * TILE_BYTES
    return 2 * pair_count * PAIR_BYTES + window_tiles * (4 * 4 + TILE_BYTES)
