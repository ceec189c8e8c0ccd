"""The seven GPU passes of tile-based solid voxelization, recorded on the thin Vulkan layer,
and the surface pass that reuses them (PassRunner.voxelize_surface).

Data flow (all device-resident; the host reads back only the pair count):

  geometry --setup--> records + tile counts --scan--> offsets --emit--> (tile, triangle)
  pairs --sort--> sorted pairs --mark--> first-of-tile flags --scan + compact--> tiles and
  the fill's dispatch size --fill--> dense bit grid

Shader variants come from the same GLSL sources through two defines: BRANCHLESS (arithmetic
selection instead of data-dependent branches) and INDEXED (a vertex buffer plus an index
buffer instead of a triangle soup).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..errors import VoxelizerError
from ..gpu.buffers import INDIRECT, Binding, Buffer, BufferPool
from ..gpu.commands import Sequence, workgroups
from ..gpu.device import Device
from ..gpu.kernels import COMMON_DEFINES, TILE_SHIFT, WG_SIZE, Kernel, subgroup_defines
from ..gpu.pipelines import ComputePipeline
from ..gpu.scan import Scan
from ..grid import grid_bytes
from ..parallel import for_row_chunks
from ..placement import FIXED_BITS
from ..stats import Stats
from . import kernels
from .kernels import (
    FACE_ID_CHUNK_VOXELS,
    FILL_PAIRS_PER_ROUND,
    SURFACE_CHUNK_VOXELS,
    SURFACE_PAIRS_PER_ROUND,
)

VARIANTS = {
    "naive": {"BRANCHLESS": 0, "INDEXED": 0},
    "branchless": {"BRANCHLESS": 1, "INDEXED": 0},
    "indexed": {"BRANCHLESS": 0, "INDEXED": 1},
    "combined": {"BRANCHLESS": 1, "INDEXED": 1},
}
DEFAULT_VARIANT = "branchless"
# Pass 4 groups the pairs by tile: "bitonic" is the sort of the original design, "counting"
# a histogram over the tile keys with a scatter (no sorting network, far fewer dispatches).
SORTS = ("counting", "bitonic")
DEFAULT_SORT = "counting"

TILE_SIDE = 1 << TILE_SHIFT
SORT_BLOCK = 2 * WG_SIZE  # values one sort workgroup holds in shared memory
RECORD_BYTES = 48  # TriangleRecord
TILE_BYTES = 16  # Tile in compact.comp / fill.comp
PAIR_BYTES = 8
COUNT_RANGE = 1 << 32  # pair totals the 32-bit scan of the tile counts can hold


def pass_defines(variant: str, subgroups: Mapping[str, int]) -> dict[str, int]:
    """What every pass kernel of `variant` is compiled with besides its own defines, given
    the device's subgroup paths (gpu.kernels.subgroup_defines)."""
    return {**VARIANTS[variant], **COMMON_DEFINES, "FIXED_BITS": FIXED_BITS, **subgroups}


class PassPipelines:
    """The pass kernels of one variant on one device, compiled once and reused for every mesh
    (the scan they share with the SVO build is gpu.scan.Scan)."""

    def __init__(self, device: Device, variant: str):
        self.variant = variant  # one of VARIANTS (checked by the caller's Options)
        self.indexed = bool(VARIANTS[variant]["INDEXED"])
        defines = pass_defines(variant, subgroup_defines(device))

        def build(kernel: Kernel) -> ComputePipeline:
            return ComputePipeline(device, kernel, defines)

        self.setup = build(kernels.SETUP_INDEXED if self.indexed else kernels.SETUP_SOUP)
        self.emit = build(kernels.EMIT)
        self.sort_blocks = build(kernels.SORT_BLOCKS)
        self.sort_step = build(kernels.SORT_STEP)
        self.sort_merge = build(kernels.SORT_MERGE)
        self.mark = build(kernels.MARK_PAIRS)
        self.compact = build(kernels.COMPACT_PAIRS)
        self.count_pairs = build(kernels.COUNT_PAIRS)
        self.scatter_pairs = build(kernels.SCATTER_PAIRS)
        self.mark_counts = build(kernels.MARK_COUNTS)
        self.compact_counts = build(kernels.COMPACT_COUNTS)
        self.fill_flips = build(kernels.FILL_FLIPS)
        self.fill_parity = build(kernels.FILL_PARITY)

    def all(self) -> list[ComputePipeline]:
        return [
            self.setup,
            self.emit,
            self.sort_blocks,
            self.sort_step,
            self.sort_merge,
            self.mark,
            self.compact,
            self.count_pairs,
            self.scatter_pairs,
            self.mark_counts,
            self.compact_counts,
            self.fill_flips,
            self.fill_parity,
        ]

    def destroy(self) -> None:
        for pipeline in self.all():
            pipeline.destroy()


SURFACES = ("conservative", "thin")  # the surface kinds of mode "surface" (shaders/surface.comp)
FACE_ID_BYTES = 4  # per voxel of a slab, for the face ids of a surface (uint32, none = -1)
NO_FACE = 0xFFFFFFFF


class SurfacePipelines:
    """What surface voxelization adds to a variant's passes (its grouping and compaction are
    the variant's own): the conservative binning (setup and emission with CONSERVATIVE 1) and
    the surface pass of one kind, built once; the pass with face ids on first use."""

    def __init__(self, device: Device, variant: str, surface: str):
        self.variant, self.surface = variant, surface  # checked by the caller's Options
        self._device = device
        self._defines = pass_defines(variant, subgroup_defines(device))
        indexed = bool(VARIANTS[variant]["INDEXED"])
        thin = surface == "thin"
        self.setup = self._build(
            kernels.SETUP_INDEXED_CONSERVATIVE if indexed else kernels.SETUP_SOUP_CONSERVATIVE
        )
        self.emit = self._build(kernels.EMIT_CONSERVATIVE)
        self.mark = self._build(kernels.SURFACE_THIN if thin else kernels.SURFACE_CONSERVATIVE)
        self._face_kernel = (
            kernels.SURFACE_THIN_FACES if thin else kernels.SURFACE_CONSERVATIVE_FACES
        )
        self._faces: ComputePipeline | None = None

    def _build(self, kernel: Kernel) -> ComputePipeline:
        return ComputePipeline(self._device, kernel, self._defines)

    @property
    def mark_with_faces(self) -> ComputePipeline:
        if self._faces is None:
            self._faces = self._build(self._face_kernel)
        return self._faces

    def destroy(self) -> None:
        for pipeline in (self.setup, self.emit, self.mark, self._faces):
            if pipeline is not None:
                pipeline.destroy()
        self._faces = None


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
    def tiles(self) -> int:
        return (self.nx >> TILE_SHIFT) * ((self.row_hi - self.row_lo) >> TILE_SHIFT)

    @property
    def grid_bytes(self) -> int:
        return grid_bytes(self.nx, self.row_hi - self.row_lo, self.nz)

    def halves(self) -> tuple[Window, Window]:
        tile_rows = (self.row_hi - self.row_lo) >> TILE_SHIFT
        middle = self.row_lo + (tile_rows // 2 << TILE_SHIFT)
        return (
            Window(self.nx, self.nz, self.row_lo, middle, self.buffer_row),
            Window(self.nx, self.nz, middle, self.row_hi, self.buffer_row),
        )


class PassRunner:
    """Runs the passes over one window of rows at a time, for one mesh in grid space.

    Triangles go up in batches of at most `batch_triangles` (each batch's records must fit a
    buffer and the budget); a window whose pairs would not fit `pair_budget` bytes is split
    into halves of tile rows, and a single tile row into halves of its batch. Every part
    XORs its crossings into the same grid, so the result does not depend on the split.
    """

    def __init__(
        self,
        device: Device,
        pipelines: PassPipelines,
        scan: Scan,
        pool: BufferPool,
        sequence: Sequence,
        vertices: np.ndarray,
        faces: np.ndarray,
        sort: str = DEFAULT_SORT,
        batch_triangles: int | None = None,
        pair_budget: int | None = None,
        stats: Stats | None = None,
        surface: SurfacePipelines | None = None,
    ):
        self.device, self.pipelines, self.pool, self.sequence = device, pipelines, pool, sequence
        self.scan = scan
        self.vertices = np.ascontiguousarray(vertices, np.float32)
        self.faces = np.ascontiguousarray(faces, np.uint32)
        self.sort = sort
        self.triangles = len(self.faces)
        self.batch_triangles = max(1, min(batch_triangles or self.triangles, self.triangles))
        self.pair_budget = pair_budget
        self.stats = stats if stats is not None else Stats()  # what every part adds to
        self.surface = surface  # the surface kernels (voxelize_surface), if asked for
        self._uploaded: tuple[int, int] | None = None
        self._geometry: dict[str, Binding] = {}  # "soup", or "vertices" and "indices"
        self._tile_boxes: np.ndarray | None = None
        started = time.perf_counter()
        # Soup variants gather once for a single batch, per batch otherwise; the indexed ones
        # upload the vertices once and the indices batch by batch.
        one_gather = not pipelines.indexed and self.batch_triangles == self.triangles
        self._soup = self._gather(0, self.triangles) if one_gather else None
        self.stats.add_host(prepare=(time.perf_counter() - started) * 1e3)
        self.stats.count(triangles=self.triangles)

    def voxelize(self, slab: Window, grid: Binding) -> None:
        """Leave the solid bits of the slab's rows in `grid` (cleared first)."""
        batches = [
            (first, min(first + self.batch_triangles, self.triangles))
            for first in range(0, self.triangles, self.batch_triangles)
        ]
        work = [(slab, batch) for batch in batches]
        fills, clear = 0, True
        while work:
            window, batch = work.pop(0)
            pair_count, may_wrap = self._count_pairs(window, batch, grid if clear else None)
            clear = False
            if may_wrap and self._pair_bound(window, batch) >= COUNT_RANGE:
                work[:0] = self._split(window, batch)  # the 32-bit total may have wrapped
                continue
            if not self._pairs_fit(window, pair_count):
                work[:0] = self._split(window, batch)
                continue
            alone = fills == 0 and not work  # no other part flips bits in this slab
            self._fill(window, pair_count, grid, parity=alone)
            fills += 1
        if fills != 1:  # several parts (or none: the grid is still cleared below)
            self._parity_all(slab, grid, clear)
        self.stats.count(slabs=1, parts=fills)

    # -- one part: count, then emit, group, compact and fill ---------------------------------

    def _count_pairs(
        self,
        window: Window,
        batch: tuple[int, int],
        clear_grid: Binding | None,
        setup: ComputePipeline | None = None,
    ) -> tuple[int, bool]:
        """Submission 1: upload (if another batch is up), setup, scan; read back the total,
        and whether some triangle touches so many tiles that the 32-bit total may have wrapped
        (more than 2^32 / triangles each; the host then bounds the total itself). `setup`
        replaces the variant's setup kernel (the conservative binning of surfaces)."""
        started = time.perf_counter()
        sequence = self.sequence
        sequence.begin()
        sequence.mark("start")
        if clear_grid is not None:
            sequence.fill(clear_grid.buffer, 0, clear_grid.size)
        upload_ms = self._upload(batch)
        sequence.barrier()
        sequence.mark("upload")
        count = batch[1] - batch[0]
        records = self.pool.binding("records", count * RECORD_BYTES)
        offsets = self.pool.binding("tile_counts", count * 4)
        wrap_flag = self.pool.binding("wrap_flag", 16)
        sequence.fill(wrap_flag.buffer, 0, 16)
        sequence.barrier()
        tile_limit = (
            (COUNT_RANGE - 1) // count if count * window.tiles >= COUNT_RANGE else 2**32 - 1
        )
        sequence.dispatch(
            setup or self.pipelines.setup,
            {**self._geometry, "records": records, "tile_counts": offsets, "wrap_flag": wrap_flag},
            {"triangle_count": count, "window": window, "tile_limit": tile_limit},
            workgroups(count, WG_SIZE),
        )
        sequence.barrier()
        sequence.mark("setup")
        total = self.scan.record(sequence, self.pool, offsets.buffer, count, "tile_counts")
        sequence.mark("scan")
        total_staging = sequence.download(total, 4)
        wrap_staging = sequence.download(wrap_flag.buffer, 4)
        self.stats.add_gpu(sequence.submit())
        pair_count = int(total_staging.read(np.uint32, 1)[0])
        may_wrap = bool(wrap_staging.read(np.uint32, 1)[0])
        self._records, self._offsets, self._count = records, offsets, count
        self.stats.add_host(
            upload=upload_ms, setup_submission=(time.perf_counter() - started) * 1e3 - upload_ms
        )
        return pair_count, may_wrap

    def _upload(self, batch: tuple[int, int]) -> float:
        if self._uploaded == batch:
            return 0.0
        started = time.perf_counter()
        first, end = batch
        if self.pipelines.indexed:
            arrays: dict[str, np.ndarray] = {"indices": self.faces[first:end]}
            if self._uploaded is None:
                arrays["vertices"] = self.vertices
        else:
            soup = self._soup[first:end] if self._soup is not None else self._gather(first, end)
            arrays = {"soup": soup}
        for name, array in arrays.items():
            self._geometry[name] = self.pool.binding(name, array.nbytes)
            self.sequence.upload(self._geometry[name].buffer, array)
        self._uploaded = batch
        return (time.perf_counter() - started) * 1e3  # into staging memory

    def _gather(self, first: int, end: int) -> np.ndarray:
        """The triangle soup of faces [first, end): (count, 3, 3) float32."""
        soup = np.empty((end - first, 3, 3), np.float32)

        def gather(start: int, stop: int) -> None:  # np.take: about twice faster than []
            np.take(
                self.vertices,
                self.faces[first + start : first + stop],
                axis=0,
                out=soup[start:stop],
            )

        for_row_chunks(end - first, gather)
        return soup

    def _pair_slots(self, pair_count: int) -> int:
        if self.sort == "bitonic":
            return max(SORT_BLOCK, 1 << max(pair_count - 1, 0).bit_length())
        return pair_count

    def _pairs_fit(self, window: Window, pair_count: int) -> bool:
        slots = self._pair_slots(pair_count)
        if slots * PAIR_BYTES > self.device.max_storage_range:
            return False
        return (
            self.pair_budget is None
            or pair_bytes(pair_count, window.tiles, self.sort) <= self.pair_budget
        )

    def _split(self, window: Window, batch: tuple[int, int]) -> list:
        if window.row_hi - window.row_lo > TILE_SIDE:
            return [(half, batch) for half in window.halves()]
        first, end = batch
        if end - first > 1:
            middle = (first + end) // 2
            return [(window, (first, middle)), (window, (middle, end))]
        raise VoxelizerError(
            "one triangle makes more tile-triangle pairs than the memory "
            "budget holds; raise max_memory"
        )

    def _fill(self, window: Window, pair_count: int, grid: Binding, parity: bool) -> None:
        """Submission 2: emission, grouping by tile, marking, compaction, fill."""
        started = time.perf_counter()
        sequence, pipelines = self.sequence, self.pipelines
        sequence.begin()
        sequence.mark("start")
        fill_args = self.pool.get("fill_args", 16, INDIRECT)
        slots = self._pair_slots(pair_count)
        tiles = 0
        if pair_count:
            pairs = self.pool.binding("pairs", slots * PAIR_BYTES)
            sequence.fill(
                pairs.buffer,
                0xFFFFFFFF,
                (slots - pair_count) * PAIR_BYTES,
                offset=pair_count * PAIR_BYTES,
            )  # bitonic padding sorts last
            sequence.barrier()
            sequence.dispatch(
                pipelines.emit,
                {"records": self._records, "offsets": self._offsets, "pairs": pairs},
                {"triangle_count": self._count, "window": window},
                workgroups(self._count, WG_SIZE),
            )
            sequence.barrier()
            sequence.mark("emit")
            record_tiles = (
                _record_bitonic_tiles if self.sort == "bitonic" else _record_counting_tiles
            )
            grouped, tile_list = record_tiles(
                sequence,
                pipelines,
                self.scan,
                self.pool,
                pairs,
                pair_count,
                slots,
                window.tiles,
                fill_args,
                self.device.max_groups_x,
            )
            fill_bindings: dict[str, Binding | Buffer] = {
                "records": self._records,
                "pairs": grouped,
                "tiles": tile_list,
                "fill_dispatch": fill_args,
                "grid": grid,
            }
            rounds = workgroups(pair_count, FILL_PAIRS_PER_ROUND)
            finish = parity and rounds == 1  # the flips stage computes the parity itself
            for fill_round in range(rounds):
                sequence.dispatch_indirect(
                    pipelines.fill_flips,
                    fill_bindings,
                    {"window": window, "fill_round": fill_round, "all_tiles": 0, "finish": finish},
                    fill_args,
                )
                sequence.barrier()
            if parity and not finish:
                sequence.dispatch_indirect(
                    pipelines.fill_parity,
                    fill_bindings,
                    {"window": window, "fill_round": 0, "all_tiles": 0, "finish": 0},
                    fill_args,
                )
                sequence.barrier()
            sequence.mark("fill")
            tile_staging = sequence.download(fill_args, 16)
        self.stats.add_gpu(sequence.submit())
        self.stats.add_host(fill_submission=(time.perf_counter() - started) * 1e3)
        if pair_count:
            tiles = int(tile_staging.read(np.uint32, 4)[3])
        self.stats.count(pairs=pair_count, tiles=tiles)
        self.stats.count_max(sort_size=slots if pair_count else 0)

    def _parity_all(self, slab: Window, grid: Binding, clear: bool) -> None:
        """Parity over every tile of the slab, after several parts flipped bits."""
        sequence = self.sequence
        sequence.begin()
        sequence.mark("start")
        if clear:
            sequence.fill(grid.buffer, 0, grid.size)
            sequence.barrier()
        unused = self.pool.binding("unused", 16)
        fill_args = self.pool.get("fill_args", 16, INDIRECT)
        sequence.dispatch(
            self.pipelines.fill_parity,
            {
                "records": unused,
                "pairs": unused,
                "tiles": unused,
                "fill_dispatch": fill_args,
                "grid": grid,
            },
            {"window": slab, "fill_round": 0, "all_tiles": 1, "finish": 0},
            slab.tiles,
        )
        sequence.barrier()
        sequence.mark("fill")
        self.stats.add_gpu(sequence.submit())

    # -- surface voxelization: conservative binning, then the surface pass ---------------------

    def voxelize_surface(
        self,
        slab: Window,
        grid: Binding,
        grid_rows: int,
        clear: bool,
        face_ids: Binding | None = None,
    ) -> None:
        """OR the surface voxels of the slab's rows into `grid`: cleared first with `clear`
        (mode "surface"), else holding what the fill left there (mode "both"). With
        `face_ids` (FACE_ID_BYTES per voxel of the slab, column by column as the bits), also
        set each voxel's smallest marking triangle index there (NO_FACE where none). Parts
        split as in voxelize; each ORs its marks and lowers the ids, so the split does not
        show. `grid_rows`: the grid's ny (the thin surface's last row takes its far face)."""
        if self.surface is None:
            raise VoxelizerError("this PassRunner was built without surface kernels")
        work = [
            (slab, (first, min(first + self.batch_triangles, self.triangles)))
            for first in range(0, self.triangles, self.batch_triangles)
        ]
        parts = 0
        while work:
            window, batch = work.pop(0)
            pair_count, may_wrap = self._count_pairs(
                window, batch, grid if clear else None, self.surface.setup
            )
            clear = False
            if may_wrap and self._pair_bound(window, batch) >= COUNT_RANGE:
                work[:0] = self._split(window, batch)
                continue
            if not self._pairs_fit(window, pair_count):
                work[:0] = self._split(window, batch)
                continue
            clear_ids = face_ids if parts == 0 else None
            self._surface_part(window, batch[0], pair_count, grid, grid_rows, face_ids, clear_ids)
            parts += 1
        self.stats.count(surface_parts=parts)

    def _surface_part(
        self,
        window: Window,
        first_triangle: int,
        pair_count: int,
        grid: Binding,
        grid_rows: int,
        face_ids: Binding | None,
        clear_ids: Binding | None,
    ) -> None:
        """Submission 2 of a surface part: conservative emission, grouping by tile,
        compaction (the variant's own kernels), then the surface pass over every chunk of the
        columns, in rounds of at most SURFACE_PAIRS_PER_ROUND pairs per tile."""
        surface = self.surface
        assert surface is not None  # voxelize_surface checked it
        started = time.perf_counter()
        sequence = self.sequence
        sequence.begin()
        sequence.mark("start")
        if clear_ids is not None:
            sequence.fill(clear_ids.buffer, NO_FACE, clear_ids.size)
        slots = self._pair_slots(pair_count)
        tiles = 0
        if pair_count:
            fill_args = self.pool.get("fill_args", 16, INDIRECT)
            pairs = self.pool.binding("pairs", slots * PAIR_BYTES)
            sequence.fill(
                pairs.buffer,
                0xFFFFFFFF,
                (slots - pair_count) * PAIR_BYTES,
                offset=pair_count * PAIR_BYTES,
            )  # bitonic padding sorts last
            sequence.barrier()
            sequence.dispatch(
                surface.emit,
                {"records": self._records, "offsets": self._offsets, "pairs": pairs},
                {"triangle_count": self._count, "window": window},
                workgroups(self._count, WG_SIZE),
            )
            sequence.barrier()
            sequence.mark("emit")
            record_tiles = (
                _record_bitonic_tiles if self.sort == "bitonic" else _record_counting_tiles
            )
            grouped, tile_list = record_tiles(
                sequence,
                self.pipelines,
                self.scan,
                self.pool,
                pairs,
                pair_count,
                slots,
                window.tiles,
                fill_args,
                self.device.max_groups_x,
            )
            bindings: dict[str, Binding | Buffer] = {
                "records": self._records,
                "pairs": grouped,
                "tiles": tile_list,
                "fill_dispatch": fill_args,
                "grid": grid,
            }
            kernel, chunk_voxels = surface.mark, SURFACE_CHUNK_VOXELS
            if face_ids is not None:
                bindings["face_ids"] = face_ids
                kernel, chunk_voxels = surface.mark_with_faces, FACE_ID_CHUNK_VOXELS
            for fill_round in range(workgroups(pair_count, SURFACE_PAIRS_PER_ROUND)):
                for chunk in range(workgroups(window.nz, chunk_voxels)):  # disjoint words
                    push = {
                        "window": window,
                        "ny": grid_rows,
                        "fill_round": fill_round,
                        "chunk": chunk,
                        "triangle_offset": first_triangle,
                    }
                    sequence.dispatch_indirect(kernel, bindings, push, fill_args)
                sequence.barrier()  # the next round ORs into the same words
            sequence.mark("surface")
            tile_staging = sequence.download(fill_args, 16)
        elif clear_ids is not None:
            sequence.barrier()
        self.stats.add_gpu(sequence.submit())
        self.stats.add_host(surface_submission=(time.perf_counter() - started) * 1e3)
        if pair_count:
            tiles = int(tile_staging.read(np.uint32, 4)[3])
        self.stats.count(surface_pairs=pair_count, surface_tiles=tiles)
        self.stats.count_max(sort_size=slots if pair_count else 0)

    def _pair_bound(self, window: Window, batch: tuple[int, int]) -> int:
        """An upper bound of the part's pair count, from the tiles of the triangles' bounding
        boxes inside the window: asked only when the setup pass saw a triangle with many tiles."""
        first, end = batch
        if self._tile_boxes is None:
            self._tile_boxes = _tile_boxes(self.vertices, self.faces)
        x_tiles, ty_lo, ty_hi = self._tile_boxes[:, first:end]
        rows = (
            np.minimum(ty_hi, (window.row_hi >> TILE_SHIFT) - 1)
            - np.maximum(ty_lo, window.row_lo >> TILE_SHIFT)
            + 1
        )
        return int((x_tiles * np.maximum(rows, 0)).sum())


def geometry_bytes(indexed: bool) -> int:
    """Bytes uploaded per triangle: three float32 corners (soup) or three uint32 indices."""
    return 12 if indexed else 36


def triangle_bytes(indexed: bool) -> int:
    """Bytes one triangle of a batch holds: its geometry on the device and in the staging
    buffer, its record (setup) and its tile count (setup, scan)."""
    return 2 * geometry_bytes(indexed) + RECORD_BYTES + 4


def vertex_bytes(indexed: bool, vertices: int) -> int:
    """Bytes the indexed variants hold for the whole vertex buffer, device and staging."""
    return 2 * 12 * vertices if indexed else 0


def pair_bytes(pair_count: int, window_tiles: int, sort: str) -> int:
    """Device bytes the grouping and fill of one part need beyond the triangle records."""
    if sort == "bitonic":
        slots = max(SORT_BLOCK, 1 << max(pair_count - 1, 0).bit_length())
        return slots * PAIR_BYTES + pair_count * 4 + min(pair_count, window_tiles) * TILE_BYTES
    return 2 * pair_count * PAIR_BYTES + window_tiles * (4 * 4 + TILE_BYTES)


def _tile_boxes(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """(3, T) int64: per triangle, the tiles its bounding box can touch along x, and its
    first and last tile row (one tile of margin each way: float only widens the bound)."""
    boxes = []
    for axis in (0, 1):
        a, b, c = (vertices[:, axis][faces[:, k]] for k in range(3))
        low = np.minimum(np.minimum(a, b), c)
        high = np.maximum(np.maximum(a, b), c)
        boxes.append(
            (
                np.floor(low / TILE_SIDE).astype(np.int64) - 1,
                np.floor(high / TILE_SIDE).astype(np.int64) + 1,
            )
        )
    (x_lo, x_hi), (y_lo, y_hi) = boxes
    return np.stack([x_hi - x_lo + 1, y_lo, y_hi])


def _record_bitonic_tiles(
    sequence: Sequence,
    pipelines: PassPipelines,
    scan: Scan,
    pool: BufferPool,
    pairs: Binding,
    pair_count: int,
    padded: int,
    keys: int,
    fill_args: Buffer,
    max_groups_x: int,
) -> tuple[Binding, Binding]:
    """Passes 4-6 as designed: bitonic sort, first-of-tile flags, compaction over the pairs."""
    _record_sort(sequence, pipelines, pairs, padded)
    sequence.mark("sort")
    flags = pool.binding("flags", pair_count * 4)
    sequence.dispatch(
        pipelines.mark,
        {"pairs": pairs, "flags": flags},
        {"count": pair_count},
        workgroups(pair_count, WG_SIZE),
    )
    sequence.barrier()
    sequence.mark("mark")
    scan.record(sequence, pool, flags.buffer, pair_count, "flags")
    tiles = pool.binding("tiles", min(pair_count, keys) * TILE_BYTES)
    sequence.dispatch(
        pipelines.compact,
        {"pairs": pairs, "slots": flags, "tiles": tiles, "fill_dispatch": fill_args},
        {"count": pair_count, "max_groups_x": max_groups_x},
        workgroups(pair_count, WG_SIZE),
    )
    sequence.barrier()
    sequence.mark("compact")
    return pairs, tiles


def _record_counting_tiles(
    sequence: Sequence,
    pipelines: PassPipelines,
    scan: Scan,
    pool: BufferPool,
    pairs: Binding,
    pair_count: int,
    padded: int,
    keys: int,
    fill_args: Buffer,
    max_groups_x: int,
) -> tuple[Binding, Binding]:
    """Passes 4-6 by counting: a histogram of the pairs over all tile keys of the window,
    its scan, a scatter into tile order; then flags and compaction over the tile keys."""
    counts = pool.binding("tile_pair_counts", keys * 4)
    starts = pool.binding("tile_starts", keys * 4)
    cursors = pool.binding("tile_cursors", keys * 4)
    grouped = pool.binding("grouped_pairs", pair_count * PAIR_BYTES)
    sequence.fill(counts.buffer, 0, keys * 4)
    sequence.barrier()
    sequence.dispatch(
        pipelines.count_pairs,
        {"pairs": pairs, "counters": counts, "grouped": grouped},
        {"pair_count": pair_count},
        workgroups(pair_count, WG_SIZE),
    )
    sequence.barrier()
    sequence.copy(counts.buffer, starts.buffer, keys * 4)
    sequence.barrier()
    scan.record(sequence, pool, starts.buffer, keys, "tile_starts")
    sequence.copy(starts.buffer, cursors.buffer, keys * 4)
    sequence.barrier()
    sequence.dispatch(
        pipelines.scatter_pairs,
        {"pairs": pairs, "counters": cursors, "grouped": grouped},
        {"pair_count": pair_count},
        workgroups(pair_count, WG_SIZE),
    )
    sequence.barrier()
    sequence.mark("sort")
    flags = pool.binding("flags", keys * 4)
    sequence.dispatch(
        pipelines.mark_counts,
        {"counts": counts, "flags": flags},
        {"count": keys},
        workgroups(keys, WG_SIZE),
    )
    sequence.barrier()
    sequence.mark("mark")
    scan.record(sequence, pool, flags.buffer, keys, "flags")
    tiles = pool.binding("tiles", min(pair_count, keys) * TILE_BYTES)
    sequence.dispatch(
        pipelines.compact_counts,
        {
            "counts": counts,
            "slots": flags,
            "tiles": tiles,
            "fill_dispatch": fill_args,
            "starts": starts,
        },
        {"count": keys, "max_groups_x": max_groups_x},
        workgroups(keys, WG_SIZE),
    )
    sequence.barrier()
    sequence.mark("compact")
    return grouped, tiles


def _record_sort(sequence: Sequence, pipelines: PassPipelines, pairs: Binding, padded: int) -> None:
    """Bitonic sort of `padded` (a power of two, >= SORT_BLOCK) pairs; see shaders/sort.comp."""
    blocks = padded // SORT_BLOCK
    sequence.dispatch(pipelines.sort_blocks, {"pairs": pairs}, {"k": 0, "j": 0}, blocks)
    sequence.barrier()
    stage = 2 * SORT_BLOCK
    while stage <= padded:
        distance = stage // 2
        while distance >= SORT_BLOCK:
            sequence.dispatch(
                pipelines.sort_step,
                {"pairs": pairs},
                {"k": stage, "j": distance},
                padded // 2 // WG_SIZE,
            )
            sequence.barrier()
            distance //= 2
        sequence.dispatch(pipelines.sort_merge, {"pairs": pairs}, {"k": stage, "j": 0}, blocks)
        sequence.barrier()
        stage *= 2
