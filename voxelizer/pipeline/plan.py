"""How much of a voxelization one step holds: slabs of the grid, batches of triangles, pairs.

Everything the passes allocate is counted against one budget (device buffers and their
staging copies; on a CPU device both are host memory). Each stage states what it allocates
next to its allocations (layout.py: `Window.grid_bytes`, `column_sums_bytes`,
`triangle_bytes`, `vertex_bytes`, `pair_bytes`; the SVO build: `Forest.classify_bytes`); the
plan only composes them. The grid is voxelized whole when it, its SVO classification and any download fit one storage buffer
and half the budget; otherwise in slabs of S column rows, S the largest power of two that
fits, so that each slab converts to a forest of S-cubes (svo_build.Forest, merge.py).
Triangles go up in batches that fit a quarter of the budget (beside the vertex buffer the
indexed variants hold whole, which must not starve the batches); what is left bounds the
tile-triangle pairs of one part (passes.PassRunner splits parts that would hold more), and
a slab is halved while it would leave the pairs less than MIN_PAIR_BUDGET.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

from ..errors import MemoryBudgetError
from ..gpu.device import Device
from ..log import get_logger
from ..placement import Shape, shape_text
from .cubes import CUBE_BYTES, GAP_BYTES, CubeSpace, batch_shift_for
from .layout import (
    FINE_VERTEX_BYTES,
    RECORD_BYTES,
    TILE_SIDE,
    Window,
    column_sums_bytes,
    geometry_bytes,
    triangle_bytes,
    vertex_bytes,
)
from .svo_build import Forest, octree_shape

_log = get_logger(__name__)
MIN_SLAB_ROWS = 8  # a forest cube has at least one internal level
MIN_PAIR_BUDGET = 1 << 20
DEFAULT_BUDGET_SHARE = 2  # default budget: the largest device-local heap / this

assert MIN_SLAB_ROWS % TILE_SIDE == 0


@dataclass(frozen=True)
class Plan:
    shape: Shape
    budget: int
    slab_rows: int  # S, or ny when the grid is voxelized whole
    whole: bool
    batch_triangles: int
    pair_budget: int

    def slabs(self) -> list[Window]:
        return list(_slab_windows(self.shape, self.slab_rows))

    def forest(self, slab: Window) -> Forest:
        if self.whole:
            return Forest.whole_grid(self.shape)
        return Forest(
            self.shape,
            cube_side=self.slab_rows,
            cube_y=slab.row_lo // self.slab_rows,
            buffer_row=slab.row_lo,
            buffer_rows=slab.rows,
        )


@functools.lru_cache(maxsize=256)
def _slab_windows(shape: Shape, slab_rows: int) -> tuple[Window, ...]:
    """Plan.slabs: the same windows for the same grid and slab (a stream of calls asks again)."""
    nx, ny, nz = shape
    return tuple(
        Window(nx=nx, nz=nz, row_lo=lo, row_hi=min(lo + slab_rows, ny), buffer_row=lo)
        for lo in range(0, ny, slab_rows)
    )


def default_budget(device: Device) -> int:
    return device.largest_heap() // DEFAULT_BUDGET_SHARE


def make_plan(
    device: Device,
    shape: Shape,
    *,
    triangles: int,
    vertices: int,
    indexed: bool,
    budget: int | None,
    svo: bool,
    dense: bool,
    whole_only: bool = False,
    voxel_bytes: int = 0,
    exact: bool = True,
    grid_planes: int = 1,
) -> Plan:
    """The plan of a grid of `shape` for `triangles` and `vertices` (the indexed variants'
    or the soup's), within `budget` bytes (None: the device's default), for an SVO (`svo`,
    its classification on the device) and/or a dense result (`dense`, the bits back through
    a staging copy). `whole_only`: the grid in one slab, or MemoryBudgetError.
    `voxel_bytes`: bytes per voxel of a per-voxel attribute the slab also holds on the
    device (face ids), downloaded through a staging copy of the same size. `exact`: the fill
    runs (not a surface alone), and holds the fine vertices its near ties read.
    `grid_planes`: device buffers of the grid's size (a bit per voxel) the slab holds, the
    grid and others (fill_mode="winding": the signs of the marks)."""
    budget = default_budget(device) if budget is None else int(budget)
    limit = device.max_storage_range
    nx, ny, nz = shape
    per_triangle = triangle_bytes(indexed, exact)
    fixed = vertex_bytes(indexed, vertices, exact)
    # The triangles' quarter of the budget holds the vertices too, leaving a batch at least
    # an eighth.
    by_budget = max(budget // 4 - fixed, budget // 8) // per_triangle
    by_buffer = limit // max(RECORD_BYTES, geometry_bytes(indexed))
    batch = max(1, min(triangles, by_budget, by_buffer))
    triangle_budget = fixed + batch * per_triangle
    sizes = _SlabSizes(
        shape, svo=svo, dense=dense, voxel_bytes=voxel_bytes, grid_planes=grid_planes
    )
    rows, whole, total = _slab_rows(
        sizes, device, budget=budget, room=budget - triangle_budget, whole_only=whole_only
    )
    # (checked after the slabs: a grid that fits no budget this small says so first)
    _check_vertices(device, budget=budget, vertices=vertices, indexed=indexed, exact=exact)
    pair_budget = budget - total - triangle_budget
    if pair_budget < MIN_PAIR_BUDGET:
        raise MemoryBudgetError(
            f"a budget of {budget:,} bytes leaves too little room for the "
            f"tile-triangle pairs of a {shape_text(shape)} grid"
        )
    if _log.isEnabledFor(logging.INFO):  # (its words are made for every call otherwise)
        _log.info(
            "plan: %s grid %s, triangles in batches of %s, budget %s bytes (%s for pairs)",
            shape_text(shape),
            "whole" if whole else f"in {-(-ny // rows)} slabs of {rows} rows",
            f"{batch:,}",
            f"{budget:,}",
            f"{pair_budget:,}",
        )
    return Plan(
        shape=(nx, ny, nz), budget=budget, slab_rows=rows, whole=whole, batch_triangles=batch,
        pair_budget=pair_budget,
    )  # fmt: skip


@dataclass(frozen=True)
class _SlabSizes:
    """The bytes a slab of the grid holds on the device: the grid (and `grid_planes` - 1
    planes like it), the fill's column sums, the SVO classification (`svo`), the staging
    copy of the bits (`dense`) and a per-voxel attribute with its staging copy."""

    shape: Shape
    svo: bool
    dense: bool
    voxel_bytes: int
    grid_planes: int

    def of(self, rows: int, whole: bool) -> tuple[int, int]:
        """(bytes of the slab's buffers, the largest single buffer): the same for the same
        sizes, so remembered (a stream of meshes on one grid asks again and again)."""
        return _slab_bytes(self, rows, whole)

    def _of(self, rows: int, whole: bool) -> tuple[int, int]:
        nx, _, nz = self.shape
        window = Window(nx=nx, nz=nz, row_lo=0, row_hi=rows, buffer_row=0)
        forest = (
            Forest.whole_grid(self.shape)
            if whole
            else Forest(self.shape, cube_side=rows, cube_y=0, buffer_row=0, buffer_rows=rows)
        )
        grid = window.grid_bytes
        sums = column_sums_bytes(nx, rows)  # the fill's, for a slab of several parts
        classify = forest.classify_bytes() if self.svo else 0
        download = grid if self.dense else 0  # the staging copy the bits come back through
        attribute = nx * rows * nz * self.voxel_bytes
        largest = max(grid, sums, forest.largest_classify_buffer() if self.svo else 0, attribute)
        total = self.grid_planes * grid + sums + classify + download + 2 * attribute
        return total, largest


@functools.lru_cache(maxsize=256)
def _slab_bytes(sizes: _SlabSizes, rows: int, whole: bool) -> tuple[int, int]:
    return sizes._of(rows, whole)


def _slab_rows(
    sizes: _SlabSizes, device: Device, *, budget: int, room: int, whole_only: bool
) -> tuple[int, bool, int]:
    """(rows per slab, whether the grid is whole, the slab's bytes): the whole grid where it
    fits one buffer and half the budget and leaves the pairs their room (what `room` holds
    beside the triangles); else the largest slab that does; failing that, the smallest slab
    that fits (the pairs' check after it then says what is short)."""
    shape, limit = sizes.shape, device.max_storage_range

    def fits(total: int, largest: int) -> bool:
        return largest <= limit and total <= budget // 2

    def leaves_pairs(total: int) -> bool:
        return room - total >= MIN_PAIR_BUDGET

    total, largest = sizes.of(shape[1], True)
    if fits(total, largest) and (whole_only or leaves_pairs(total)):
        return shape[1], True, total
    if whole_only:
        raise MemoryBudgetError(
            f"a {shape_text(shape)} grid needs {largest:,} bytes in one buffer and "
            f"{total:,} in all; this mode needs the whole grid at once (device "
            f"{device.name}: at most {limit:,} per buffer, budget {budget:,})"
        )
    rows = octree_shape(max(shape))[0] // 2
    total, largest = sizes.of(rows, False)
    while rows > MIN_SLAB_ROWS and not (fits(total, largest) and leaves_pairs(total)):
        rows //= 2
        total, largest = sizes.of(rows, False)
    if rows < MIN_SLAB_ROWS or not fits(total, largest):
        need = sizes.of(MIN_SLAB_ROWS, False)
        raise MemoryBudgetError(
            f"a {shape_text(shape)} grid does not fit: even a slab of {MIN_SLAB_ROWS} rows "
            f"needs {need[0]:,} bytes ({need[1]:,} in one buffer); the budget is {budget:,} "
            f"and {device.name} binds at most {limit:,} per buffer"
        )
    return rows, False, total


def _check_vertices(
    device: Device, *, budget: int, vertices: int, indexed: bool, exact: bool
) -> None:
    """MemoryBudgetError where the vertex buffers the passes hold whole do not fit: more than
    half the budget, or the fine coordinates more than one buffer."""
    fixed = vertex_bytes(indexed, vertices, exact)
    limit = device.max_storage_range
    if fixed > budget // 2:
        held = "the indexed variants hold" if indexed else "the passes hold the fine coordinates of"
        advice = "raise the budget"
        if indexed:
            advice += " or use the naive or branchless variant"
        raise MemoryBudgetError(
            f"{held} all {vertices:,} vertices ({fixed:,} bytes), more than "
            f"half the budget of {budget:,}; {advice}"
        )
    if exact and vertices * FINE_VERTEX_BYTES > limit:
        raise MemoryBudgetError(
            f"the fine coordinates of {vertices:,} vertices ({vertices * FINE_VERTEX_BYTES:,} "
            f"bytes) do not fit one storage buffer of device {device.name} ({limit:,} bytes)"
        )


# -- the sparse grid of the large voxelizations (sparse_slabs.py) -------------------------------

# Bytes a slab holds per surface cube beyond its words and gap record: the SVO build's
# classification of the cube's levels (svo_build.Forest.classify_bytes, about 600 per cube)
# and its arrays' share on the device and in staging memory (a mixed cube of a surface stores
# a few hundred bytes of nodes and bricks), with room to spare.
SPARSE_BUILD_BYTES_PER_CUBE = 4096
# llvmpipe's guard ends an invocation's loops after 65,535 iterations in all (shaders/tiles.glsl):
# on a CPU device, a part's rows are few enough that no triangle's tile loops reach it.
LOOP_GUARD = 65535


@dataclass(frozen=True)
class SparsePlan:
    """How a sparse voxelization (a grid over FINE_LATTICE_MAX a side, as an SVO) holds within
    `budget` bytes of the device: triangles in batches, a part's pairs within `pair_budget`,
    a part at most `part_rows` rows (whole tile rows), and a slab's surface cubes, their
    records, their SVO build and the slab's cube bits within `cube_budget`."""

    shape: Shape
    budget: int
    batch_triangles: int
    pair_budget: int
    part_rows: int
    cube_budget: int

    def slot_bytes(self) -> int:
        return CUBE_BYTES + GAP_BYTES + SPARSE_BUILD_BYTES_PER_CUBE

    def max_slots(self, space: CubeSpace) -> int:
        """Surface cubes a slab of `space` holds within the budget (its cube bits first), about."""
        return max(0, (self.cube_budget - 8 * space.words) // self.slot_bytes())

    def holds(self, space: CubeSpace, slots: int) -> bool:
        """Whether a slab of `space` with `slots` surface cubes fits the budget: its cube bits,
        the cubes' words in whole batches, their records and SVO build."""
        words = space.with_batches(batch_shift_for(slots)).cube_bytes(slots)
        extra = (GAP_BYTES + SPARSE_BUILD_BYTES_PER_CUBE) * slots
        return 8 * space.words + words + extra <= self.cube_budget


def make_sparse_plan(
    device: Device,
    shape: Shape,
    *,
    triangles: int,
    vertices: int,
    indexed: bool,
    budget: int | None,
    largest_triangle_tiles: tuple[int, int] = (1, 1),
) -> SparsePlan:
    """The plan of a sparse voxelization of `triangles` and `vertices` on a grid of `shape`
    within `budget` bytes of the device (None: its default): a quarter for the triangles,
    a quarter for a part's pairs, half for a slab's cubes. `largest_triangle_tiles`: the
    widest triangle's extent in tiles (across, along the rows), which bounds a part's rows on
    a CPU device (LOOP_GUARD)."""
    budget = default_budget(device) if budget is None else int(budget)
    per_triangle = triangle_bytes(indexed)
    fixed = vertex_bytes(indexed, vertices)
    by_budget = max(budget // 4 - fixed, budget // 8) // per_triangle
    by_buffer = device.max_storage_range // max(RECORD_BYTES, geometry_bytes(indexed))
    batch = max(1, min(triangles, by_budget, by_buffer))
    _check_vertices(device, budget=budget, vertices=vertices, indexed=indexed, exact=True)
    pair_budget = budget // 4
    cube_budget = min(budget // 2, device.max_storage_range)
    _, ny, _ = shape
    part_rows = -(-ny // TILE_SIDE) * TILE_SIDE
    if device.is_cpu:
        across, along = largest_triangle_tiles
        while part_rows > TILE_SIDE and (
            across * min(along, part_rows // TILE_SIDE + 1) + 3 * (part_rows // TILE_SIDE)
            > LOOP_GUARD
        ):
            part_rows = max(TILE_SIDE, part_rows // 2 // TILE_SIDE * TILE_SIDE)
    plan = SparsePlan(
        shape=shape, budget=budget, batch_triangles=batch, pair_budget=pair_budget,
        part_rows=part_rows, cube_budget=cube_budget,
    )  # fmt: skip
    if plan.max_slots(CubeSpace.of(shape, 0, 1)) < 1 or pair_budget < MIN_PAIR_BUDGET:
        raise MemoryBudgetError(
            f"a budget of {budget:,} bytes is too small for a {shape_text(shape)} grid: a "
            f"slab of one row of cubes needs {plan.slot_bytes() + 8 * CubeSpace.of(shape, 0, 1).words:,} "
            f"bytes for its cubes and {MIN_PAIR_BUDGET:,} for its pairs, beside the triangles"
        )
    _log.info(
        "sparse plan: %s grid, triangles in batches of %s, budget %s bytes, parts of %d rows",
        shape_text(shape), f"{batch:,}", f"{budget:,}", part_rows,
    )  # fmt: skip
    return plan
