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
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from ..choices import DEFAULT_SORT, VARIANTS, is_indexed
from ..errors import VoxelizerError
from ..gpu.buffers import INDIRECT, STORAGE, Binding, Buffer, BufferPool
from ..gpu.commands import Sequence, workgroups
from ..gpu.device import Device
from ..gpu.kernels import COMMON_DEFINES, TILE_SHIFT, WG_SIZE, Kernel, subgroup_defines
from ..gpu.pipelines import ComputePipeline
from ..gpu.scan import Scan
from ..grid import grid_bytes
from ..parallel import copy_rows, for_row_chunks, map_row_chunks
from ..placement import FINE_BITS, FIXED_BITS, fixed_gap, to_fine
from ..stats import Stats
from . import kernels
from .kernels import FILL_PAIRS_PER_ROUND

TILE_SIDE = 1 << TILE_SHIFT
SORT_BLOCK = 2 * WG_SIZE  # values one sort workgroup holds in shared memory
RECORD_BYTES = 48  # TriangleRecord
TILE_BYTES = 16  # Tile in compact.comp / fill.comp
PAIR_BYTES = 8
FINE_VERTEX_BYTES = 24  # a vertex's fine coordinates, 3 int64 (shaders/fill.comp)
INDEX_BYTES = 12  # a triangle's vertex indices, 3 uint32
# The largest fixed_error the binning allows for (shaders/tiles.glsl): 1/256 voxel. Float32
# corners below 8192 are within 2**-12 + 2**-17 of their float64 values (17 units), mirrored
# ones (fill_mode="vote") within twice that.
MAX_FIXED_ERROR = 1 << (FIXED_BITS - 8)
COLUMN_SUM_BYTES = 8  # (balance, moment) per column (shaders/fill.comp)
COUNT_RANGE = 1 << 32  # pair totals the 32-bit scan of the tile counts can hold
# Pairs the one-submission path records room for at least (PassRunner._speculative_capacity):
# 2 MiB in each of the two pair buffers; more where the pool's buffers have grown.
SPECULATIVE_PAIRS = 1 << 18
# A guess of a part's pairs, so that a new large mesh's first call is one submission too: a
# triangle smaller than a tile makes at most a few pairs, and a pair needs a covered column
# centre, which few surfaces cross more than twice on average over a window (a closed mesh:
# at most its depth complexity). A count above the guess only costs the general path's
# second submission, as before.
GUESSED_PAIRS_PER_TRIANGLE = 4
GUESSED_PAIRS_PER_COLUMN = 2


def pass_defines(variant: str, subgroups: Mapping[str, int]) -> dict[str, int]:
    """What every pass kernel of `variant` is compiled with besides its own defines, given
    the device's subgroup paths (gpu.kernels.subgroup_defines)."""
    return {**VARIANTS[variant], **COMMON_DEFINES, "FIXED_BITS": FIXED_BITS, **subgroups}


class PassPipelines:
    """The pass kernels of one variant on one device, compiled once and reused for every mesh
    (the scan they share with the SVO build is gpu.scan.Scan)."""

    def __init__(self, device: Device, variant: str):
        self.variant = variant  # one of VARIANTS (checked by the caller's Options)
        self.indexed = is_indexed(variant)
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
        self.pair_dispatch = build(kernels.PAIR_DISPATCH)
        self.fill_marks = build(kernels.FILL_MARKS)  # fill_mode="winding"
        self.fill_signed = build(kernels.FILL_SIGNED)

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
            self.pair_dispatch,
            self.fill_marks,
            self.fill_signed,
        ]

    def destroy(self) -> None:
        for pipeline in self.all():
            pipeline.destroy()


FACE_ID_BYTES = 4  # per voxel of a slab, for the face ids of a surface (uint32, none = -1)
NO_FACE = 0xFFFFFFFF


class SurfacePipelines:
    """What surface voxelization adds to a variant's passes: the conservative binning (setup
    and emission with CONSERVATIVE 1, whose pairs come out grouped by tile: no sort) and the
    surface pass of one kind, built once; the pass with face ids on first use."""

    def __init__(self, device: Device, variant: str, surface: str):
        self.variant, self.surface = variant, surface  # checked by the caller's Options
        self._device = device
        self._defines = pass_defines(variant, subgroup_defines(device))
        indexed = is_indexed(variant)
        self._thin = surface == "thin"
        self.setup = self._build(
            kernels.SETUP_INDEXED_CONSERVATIVE if indexed else kernels.SETUP_SOUP_CONSERVATIVE
        )
        self.emit = self._build(kernels.EMIT_CONSERVATIVE)
        self.mark = self._build(
            kernels.SURFACE_THIN if self._thin else kernels.SURFACE_CONSERVATIVE
        )
        self._faces: ComputePipeline | None = None

    def _build(self, kernel: Kernel) -> ComputePipeline:
        return ComputePipeline(self._device, kernel, self._defines)

    @property
    def with_faces(self) -> ComputePipeline:
        """The pass with face ids."""
        if self._faces is None:
            self._faces = self._build(
                kernels.SURFACE_THIN_FACES if self._thin else kernels.SURFACE_CONSERVATIVE_FACES
            )
        return self._faces

    def destroy(self) -> None:
        for pipeline in (self.setup, self.emit, self.mark, *([self._faces] if self._faces else [])):
            pipeline.destroy()
        self._faces = None


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


@dataclass(frozen=True)
class _RecordedFill:
    """A part's fill as recorded: its window, the bindings of its grouped pairs (None: no
    pairs), its dispatch arguments and rounds."""

    window: Window
    bindings: dict[str, Binding | Buffer] | None
    fill_args: Buffer
    rounds: int


@dataclass
class _SlabState:
    """What the submissions of one slab have done to its buffers so far."""

    window: Window
    clear: bool = True  # the next submission clears the grid and the column counts first
    sums_cleared: bool = False  # column_sums zeroed for parts that add to them
    marks: CrossingMarks | None = None  # fill_mode="winding": its tile flags cleared too


class PassRunner:
    """Runs the passes over one window of rows at a time, for one mesh in grid space.

    Triangles go up in batches of at most `batch_triangles` (each batch's records must fit a
    buffer and the budget); a window whose pairs would not fit `pair_budget` bytes is split
    into halves of tile rows, and a single tile row into halves of its batch. Every part
    XORs its crossings into the same grid, so the result does not depend on the split.

    A slab that is one part (the usual case) goes to the GPU in one submission with the
    counting sort: the pair buffers are recorded at a capacity chosen before the pair count
    is known (what the pool holds, at least SPECULATIVE_PAIRS, within the budget), the GPU
    sizes the dispatches from the count (shaders/pair_dispatch.comp), and only a part whose
    pairs do not fit (or whose tiles need more fill rounds) is run again, as the general path
    does it: a submission that counts, then one that groups and fills with exact sizes.
    The fill's column counts (shaders/fill.comp) come back with the last submission of each
    slab and are added to the stats (`open_columns`, `overlap_columns`).
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
        fine: np.ndarray | None = None,
        used: np.ndarray | None = None,
        faces_key: np.ndarray | None = None,
        known_gap: int | None = None,
        soup: np.ndarray | None = None,
    ):
        started = time.perf_counter()
        self.device, self.pipelines, self.pool, self.sequence = device, pipelines, pool, sequence
        self.scan = scan
        self.vertices = np.ascontiguousarray(vertices, np.float32)
        # The fine vertices (placement.fine_vertices) decide the solid; the float32 ones only
        # speed it up, within fixed_error of them (shaders/exact.glsl). `used`: the vertices
        # the faces refer to (Mesh.used, cached per mesh), if the caller has them.
        self.fine = np.ascontiguousarray(
            fine_vertices_of(self.vertices) if fine is None else fine, np.int64
        )
        # uint32 as the indexed variants upload them, or int64 (intp) as the soup gather
        # indexes with them without a conversion of its own; anything else becomes uint32.
        self.faces = np.ascontiguousarray(
            faces, faces.dtype if faces.dtype in (np.uint32, np.intp) else np.uint32
        )
        # A read-only array standing for the faces (the Mesh's: Mesh.frozen_faces, or
        # Mesh.indices where they are the faces), by which the buffers made from them remember
        # them; None: the faces may change, nothing made from them is remembered.
        self._faces_key = faces_key
        # The soup of these vertices and faces, made before the call (Job.soup), or None.
        self._soup = soup if soup is not None and soup.shape == (len(self.faces), 3, 3) else None
        if known_gap is not None:  # the caller's placement found it (placed_fixed_gap)
            self.fixed_error = fixed_error_of_gap(known_gap)
        else:
            if used is None:
                used = used_vertices(len(self.vertices), self.faces)
            self.fixed_error = _fixed_error_of(self.vertices, self.fine, used)
        self.sort = sort
        self.triangles = len(self.faces)
        self.batch_triangles = max(1, min(batch_triangles or self.triangles, self.triangles))
        self.pair_budget = pair_budget
        self.stats = stats if stats is not None else Stats()  # what every part adds to
        self.surface = surface  # the surface kernels (voxelize_surface), if asked for
        self._uploaded: tuple[int, int] | None = None
        self._geometry: dict[str, Binding] = {}  # "soup", or "vertices" and "indices"
        # The near ties' (shaders/fill.comp): every vertex's fine coordinates, uploaded once,
        # and the batch's vertex indices (the indexed variants' "indices", else their own).
        self._fine: Binding | None = None
        self._batch_indices: Binding | None = None
        self._tile_boxes: np.ndarray | None = None
        self._slab = _SlabState(Window(0, 0, 0, 0, 0))
        # The fill recorded last, and the marking fill a slab's signed fill reuses (winding)
        self._last_fill: _RecordedFill | None = None
        self._kept_fill: _RecordedFill | None = None
        self.followed: object | None = None  # what `then` of the last voxelize returned
        # The host arrays the passes read; the soup is gathered straight into staging memory
        # as each batch goes up (`upload`).
        self.stats.add_host(prepare=(time.perf_counter() - started) * 1e3)
        self.stats.count(triangles=self.triangles)

    def voxelize(
        self,
        slab: Window,
        grid: Binding,
        download: bool = False,
        marks: CrossingMarks | None = None,
        signed: SignedCrossings | None = None,
        then: Callable[[], object] | None = None,
    ) -> Buffer | None:
        """Leave the solid bits of the slab's rows in `grid` (cleared first). With `download`,
        the last submission also copies them into a staging buffer, which is returned. For
        fill_mode="winding": with `marks`, instead a bit at the first voxel above every
        crossing, with its sign and the tiles' flags in `marks`; with `signed`, the grid
        (those marks) is left as it is and, in the flagged tiles, each crossing's sign is
        added to its segment (shaders/fill.comp, MARK_CROSSINGS and SIGNED_CROSSINGS).
        Neither computes the parity or the column counts, nor downloads.

        `then` records more work on the finished grid (the SVO build) into the same
        submission, where the slab is done in one (its only part, counted and filled at
        once): what it returned is then left in `followed`, which is None otherwise (the
        caller does that work itself)."""
        self.followed = None
        kept, self._kept_fill = self._kept_fill, None
        if signed is not None and kept is not None and kept.window == slab:
            self._signed_again(kept, signed)
            self.stats.count(parts=1, parts_regrouped=0)
            return None
        batches = [
            (first, min(first + self.batch_triangles, self.triangles))
            for first in range(0, self.triangles, self.batch_triangles)
        ]
        work = [(slab, batch) for batch in batches]
        winding = marks is not None or signed is not None
        self._slab = _SlabState(slab, clear=signed is None, marks=marks)
        fills = 0
        staging: Buffer | None = None
        while work:
            window, batch = work.pop(0)
            alone = fills == 0 and not work  # no other part flips bits in this slab
            if alone and self.sort == "counting" and not winding:
                done, staging, pair_count, may_wrap = self._count_and_fill(
                    window, batch, grid, download, then
                )
                if done:
                    fills = 1
                    break
            else:
                pair_count, may_wrap = self._count_pairs(window, batch, grid)
            if may_wrap and self._pair_bound(window, batch) >= COUNT_RANGE:
                work[:0] = self._split(window, batch)  # the 32-bit total may have wrapped
                continue
            if not self._pairs_fit(window, pair_count):
                work[:0] = self._split(window, batch)
                continue
            finish = alone and not winding
            staging = self._fill(window, pair_count, grid, finish, download, marks, signed)
            fills += 1
        if (fills != 1 and not winding) or (marks is not None and fills == 0):
            # several parts, or none (the grid is still cleared there)
            staging = self._parity_all(grid, download and not winding)
        last = self._last_fill
        one_part = fills == 1 and len(batches) == 1 and last is not None and last.window == slab
        if marks is not None and one_part:
            self._kept_fill = last  # the signed fill of the slab reuses its grouped pairs
        self.stats.count(slabs=int(signed is None), parts=fills)
        if signed is not None:
            self.stats.count(parts_regrouped=fills)
        return staging

    # -- one part: count, then emit, group, compact and fill ---------------------------------

    def _count_pairs(
        self,
        window: Window,
        batch: tuple[int, int],
        grid: Binding,
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
        self._record_clear(grid)
        upload_ms = self._record_count(window, batch, setup)
        total_staging = sequence.download(self._total, 4)
        wrap_staging = sequence.download(self._wrap_flag.buffer, 4)
        self.stats.add_gpu(sequence.submit())
        pair_count = int(total_staging.read(np.uint32, 1)[0])
        may_wrap = bool(wrap_staging.read(np.uint32, 1)[0])
        self.stats.add_host(
            upload=upload_ms, setup_submission=(time.perf_counter() - started) * 1e3 - upload_ms
        )
        return pair_count, may_wrap

    def _count_and_fill(
        self,
        window: Window,
        batch: tuple[int, int],
        grid: Binding,
        download: bool,
        then: Callable[[], object] | None = None,
    ) -> tuple[bool, Buffer | None, int, bool]:
        """The slab's only part in one submission, its pair buffers sized before the count is
        known: (done, the grid's staging copy if done and `download`, pair count, may wrap).
        A part not done keeps its records on the device for _fill (and its grid is cleared
        again if the fill ran). `then` is recorded after the fill (see voxelize); its work is
        wasted where the part is not done."""
        started = time.perf_counter()
        capacity = self._speculative_capacity(window, batch[1] - batch[0])
        if capacity == 0:
            return (False, None, *self._count_pairs(window, batch, grid))
        sequence = self.sequence
        sequence.begin()
        sequence.mark("start")
        self._record_clear(grid)
        upload_ms = self._record_count(window, batch)
        dispatch = self.pool.get("pair_dispatch", 32, INDIRECT)
        sequence.dispatch(
            self.pipelines.pair_dispatch,
            {"pair_total": self._total, "wrap_flag": self._wrap_flag, "pair_dispatch": dispatch},
            {
                "triangle_count": self._count,
                "capacity": capacity,
                "max_groups_x": self.device.max_groups_x,
            },
            1,
        )
        sequence.barrier()
        fill_args = self._record_fill(window, capacity, grid, finish=True, dispatch=dispatch)
        total_staging = sequence.download(self._total, 4)
        wrap_staging = sequence.download(self._wrap_flag.buffer, 4)
        tile_staging = sequence.download(fill_args, 16)
        counts_staging, grid_staging = self._record_results(grid, download)
        recorded_ms = (time.perf_counter() - started) * 1e3
        followed = None if then is None else then()
        then_ms = (time.perf_counter() - started) * 1e3 - recorded_ms  # charged by `then`
        self.stats.add_gpu(sequence.submit())
        pair_count = int(total_staging.read(np.uint32, 1)[0])
        may_wrap = bool(wrap_staging.read(np.uint32, 1)[0])
        counts = counts_staging.read(np.uint32, 4)
        self.stats.add_host(
            upload=upload_ms,
            passes_submission=(time.perf_counter() - started) * 1e3 - upload_ms - then_ms,
        )
        if may_wrap or pair_count > capacity:
            return False, None, pair_count, may_wrap  # nothing emitted: the grid is still clear
        if counts[2]:  # a tile needs more fill rounds: the part runs again
            self._slab.clear = True
            return False, None, pair_count, may_wrap
        self._count_columns(counts)
        self.stats.count(pairs=pair_count, tiles=int(tile_staging.read(np.uint32, 4)[3]))
        self.stats.count_max(sort_size=pair_count)
        self.followed = followed
        return True, grid_staging, pair_count, may_wrap

    def _speculative_capacity(self, window: Window, triangles: int) -> int:
        """Pairs the one-submission path records room for: what the pool's pair buffers hold
        already, at least SPECULATIVE_PAIRS and the guess for the part's `triangles` in the
        window, within the budget and a buffer (0: do not try)."""
        held = min(self.pool.capacity("pairs"), self.pool.capacity("grouped_pairs"))
        columns = window.nx * (window.row_hi - window.row_lo)
        guess = min(GUESSED_PAIRS_PER_TRIANGLE * triangles, GUESSED_PAIRS_PER_COLUMN * columns)
        capacity = max(held // PAIR_BYTES, SPECULATIVE_PAIRS, guess)
        capacity = min(capacity, self.device.max_storage_range // PAIR_BYTES)
        if self.pair_budget is not None:
            room = self.pair_budget - pair_bytes(0, window.tiles, "counting")
            capacity = min(capacity, room // (2 * PAIR_BYTES))
        return max(capacity, 0)

    def _record_clear(self, grid: Binding) -> None:
        """At the start of a slab's submission: clear its grid and column counts, if due."""
        if not self._slab.clear:
            return
        sequence = self.sequence
        sequence.fill(grid.buffer, 0, grid.size)
        sequence.fill(self._column_counts(), 0)
        if self._slab.marks is not None:
            flags = self._slab.marks.tile_flags
            sequence.fill(flags.buffer, 0, flags.size)
        sequence.barrier()
        self._slab.clear = False

    def _column_counts(self) -> Buffer:
        return self.pool.get("column_counts", 16)

    def _column_sums(self, needed: bool) -> Binding:
        """The per-column sums of the fill (zeroed once per slab), or a stand-in when the
        dispatch never touches them."""
        if not needed:
            return self.pool.binding("unused", 16)
        window = self._slab.window
        sums = self.pool.binding(
            "column_sums", column_sums_bytes(window.nx, window.row_hi - window.row_lo)
        )
        if not self._slab.sums_cleared:
            self.sequence.fill(sums.buffer, 0, sums.size)
            self.sequence.barrier()
            self._slab.sums_cleared = True
        return sums

    def _record_results(self, grid: Binding, download: bool) -> tuple[Buffer, Buffer | None]:
        """At the end of a slab's last submission: copy back its column counts, and its grid
        with `download`."""
        counts = self.sequence.download(self._column_counts(), 16)
        if not download:
            return counts, None
        bits = self.sequence.download(grid.buffer, self._slab.window.grid_bytes)
        self.sequence.mark("download")
        return counts, bits

    def _count_columns(self, counts: np.ndarray) -> None:
        self.stats.count(open_columns=int(counts[0]), overlap_columns=int(counts[1]))

    def _record_count(
        self, window: Window, batch: tuple[int, int], setup: ComputePipeline | None = None
    ) -> float:
        """Record upload (if another batch is up), setup (the variant's kernel, or `setup`:
        the conservative binning's, which also counts the pairs of each tile key) and the
        scan of the tile counts (the conservative binning counts pairs per tile key instead:
        it scans those); the records, the scanned offsets (or per-key cursors) and the total
        stay on the device for the next passes.
        Returns the host milliseconds of the upload."""
        sequence = self.sequence
        upload_ms = self._upload(batch, exact=setup is None)
        sequence.barrier()
        sequence.mark("upload")
        count = batch[1] - batch[0]
        records = self.pool.binding("records", count * RECORD_BYTES)
        wrap_flag = self.pool.binding("wrap_flag", 16)
        sequence.fill(wrap_flag.buffer, 0, 16)
        outputs = {"records": records, "wrap_flag": wrap_flag}
        if setup is None:
            outputs["tile_counts"] = self.pool.binding("tile_counts", count * 4)
        else:
            outputs["tile_pairs"] = self.pool.binding("tile_pairs", window.tiles * 4)
            sequence.fill(outputs["tile_pairs"].buffer, 0, window.tiles * 4)
        sequence.barrier()
        tile_limit = (
            (COUNT_RANGE - 1) // count if count * window.tiles >= COUNT_RANGE else 2**32 - 1
        )
        sequence.dispatch(
            setup or self.pipelines.setup,
            {**self._geometry, **outputs},
            {
                "triangle_count": count,
                "window": window,
                "tile_limit": tile_limit,
                "fixed_error": self.fixed_error,
            },
            workgroups(count, WG_SIZE),
        )
        sequence.barrier()
        sequence.mark("setup")
        if setup is None:
            self._offsets = outputs["tile_counts"]
            self._total = self.scan.record(
                sequence, self.pool, self._offsets.buffer, count, "tile_counts"
            )
        else:
            # Conservative emission needs only the per-key cursors, whose total is the pairs'.
            self._tile_cursors = outputs["tile_pairs"]
            self._total = self.scan.record(
                sequence, self.pool, self._tile_cursors.buffer, window.tiles, "tiles"
            )
        sequence.mark("scan")
        self._records, self._count = records, count
        self._wrap_flag = wrap_flag
        return upload_ms

    def _upload(self, batch: tuple[int, int], exact: bool) -> float:
        """Record the uploads the batch's passes need and are not on the device yet: its
        geometry and, for the fill (`exact`), the fine vertices (once per runner) and its
        vertex indices. Returns the host milliseconds (the copies into staging memory)."""
        started = time.perf_counter()
        first, end = batch
        if self._uploaded != batch:
            if self.pipelines.indexed:
                # (the whole array itself where the batch is the mesh: a read-only one, the
                # Mesh's, is copied into staging memory only for another mesh)
                faces = self.faces if (first, end) == (0, self.triangles) else self.faces[first:end]
                arrays: dict[str, np.ndarray] = {"indices": faces.astype(np.uint32, copy=False)}
                if self._uploaded is None:
                    arrays["vertices"] = self.vertices
                for name, array in arrays.items():
                    self._geometry[name] = self.pool.binding(name, array.nbytes)
                    self.sequence.upload(self._geometry[name].buffer, array)
            else:
                soup = self.pool.binding("soup", (end - first) * 36)
                self._geometry["soup"] = soup
                self.sequence.upload_made(
                    soup.buffer,
                    (end - first, 3, 3),
                    np.float32,
                    self._soup_sources(),
                    batch,
                    lambda view: self._gather(first, end, view),
                )
            self._batch_indices = self._geometry.get("indices")
            self._uploaded = batch
        if exact and self._fine is None:
            # Host-visible memory the fill reads as it is: no staging copy, no transfer, and
            # the rare near ties are its only readers.
            fine = self.pool.get("fine", self.fine.nbytes, STORAGE, host_visible=True)
            fine.write_once(self.fine)  # (placement.placed_vertices: once per mesh and grid)
            self._fine = Binding(fine, self.fine.nbytes)
        if exact and self._batch_indices is None:  # the soup variants' faces, for the fill
            # host-visible as the fine vertices, and as rarely read: converted to uint32 from
            # the faces straight into it (no uint32 copy of them on the host first), and again
            # only for another mesh or batch
            size = (end - first) * INDEX_BYTES
            indices = self.pool.get("fine_indices", size, STORAGE, host_visible=True)
            sources = self._faces_sources()
            if not indices.holds(sources, batch):
                indices.forget()  # (the conversion may be interrupted half way)
                copy_rows(indices.view(np.uint32, (end - first, 3)), self.faces[first:end])
                indices.made_from(sources, batch)
            self._batch_indices = Binding(indices, size)
        return (time.perf_counter() - started) * 1e3

    def _soup_sources(self) -> tuple[np.ndarray, ...]:
        """What the soup is made of, as its staging memory remembers it: the grid-space
        vertices and the faces, both read-only where they are a Mesh's (the placed vertices,
        and the faces' key); a repeated call on the same Mesh and grid then gathers nothing."""
        return (self.vertices, *self._faces_sources())

    def _faces_sources(self) -> tuple[np.ndarray]:
        """The faces as buffers made from them remember them: their key, or without one the
        faces themselves (remembered only if read-only)."""
        return (self.faces if self._faces_key is None else self._faces_key,)

    def _gather(self, first: int, end: int, soup: np.ndarray) -> None:
        """The triangle soup of faces [first, end) into `soup`, (count, 3, 3) float32 (the
        staging memory itself: no copy in between); copied from the one made before the
        call where there is one (a reading process's: a copy instead of a gather)."""
        if self._soup is not None:
            copy_rows(soup, self._soup[first:end])
            return

        # Each corner as one 12-byte item, indexed by intp: np.take then moves whole corners
        # and converts no indices (twice as fast as taking float rows by uint32).
        corners = self.vertices.view(np.dtype((np.void, 12))).reshape(-1)
        target = soup.reshape(-1, 3).view(np.dtype((np.void, 12))).reshape(-1)

        def gather(start: int, stop: int) -> None:
            np.take(
                corners,
                self.faces[first + start : first + stop].reshape(-1),
                out=target[3 * start : 3 * stop],
            )

        for_row_chunks(end - first, gather)

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

    def _tile_bindings(
        self, grouped: Binding, tiles: Binding, fill_args: Buffer, grid: Binding
    ) -> dict[str, Binding | Buffer]:
        """What the per-tile passes (the fill, the surface) bind in common."""
        return {
            "records": self._records,
            "pairs": grouped,
            "tiles": tiles,
            "fill_dispatch": fill_args,
            "grid": grid,
        }

    def _fill(
        self,
        window: Window,
        pair_count: int,
        grid: Binding,
        finish: bool,
        download: bool,
        marks: CrossingMarks | None = None,
        signed: SignedCrossings | None = None,
    ) -> Buffer | None:
        """Submission 2: emission, grouping by tile, marking, compaction, fill, of the part
        counted last. With `finish` (the slab's only part) also the parity, and the column
        counts (and the grid, with `download`) come back: their staging buffer is returned.
        `marks` and `signed`: the fills of fill_mode="winding" (voxelize), never finishing."""
        started = time.perf_counter()
        sequence = self.sequence
        sequence.begin()
        sequence.mark("start")
        self._record_clear(grid)
        fill_args = self._record_fill(window, pair_count, grid, finish, marks=marks, signed=signed)
        tile_staging = sequence.download(fill_args, 16) if pair_count else None
        counts_staging, grid_staging = (
            self._record_results(grid, download) if finish else (None, None)
        )
        self.stats.add_gpu(sequence.submit())
        self.stats.add_host(fill_submission=(time.perf_counter() - started) * 1e3)
        tiles = int(tile_staging.read(np.uint32, 4)[3]) if tile_staging is not None else 0
        self.stats.count(pairs=pair_count, tiles=tiles)
        self.stats.count_max(sort_size=self._pair_slots(pair_count) if pair_count else 0)
        if counts_staging is not None:
            counts = counts_staging.read(np.uint32, 4)
            if counts[2]:  # exact rounds: the fill takes every tile whole
                raise VoxelizerError("internal error: fill rounds recorded for too few pairs")
            self._count_columns(counts)
        return grid_staging

    def _record_fill(
        self,
        window: Window,
        pairs: int,
        grid: Binding,
        finish: bool,
        dispatch: Buffer | None = None,
        marks: CrossingMarks | None = None,
        signed: SignedCrossings | None = None,
    ) -> Buffer:
        """Record emission, grouping, marking, compaction and the fill of the part counted
        last: for exactly `pairs` pairs, or, with `dispatch` (shaders/pair_dispatch.comp's
        output), for however many the GPU counted, up to `pairs` (then one fill round: a tile
        with more pairs is reported as unfinished). Returns the fill's dispatch arguments."""
        sequence, pipelines = self.sequence, self.pipelines
        fill_args = self.pool.get("fill_args", 16, INDIRECT)
        if not pairs:
            self._last_fill = _RecordedFill(window, None, fill_args, 0)
            return fill_args
        slots = self._pair_slots(pairs)
        pair_buffer = self.pool.binding("pairs", slots * PAIR_BYTES)
        if self.sort == "bitonic":  # (never with `dispatch`: the network needs the count)
            sequence.fill(
                pair_buffer.buffer,
                0xFFFFFFFF,
                (slots - pairs) * PAIR_BYTES,
                offset=pairs * PAIR_BYTES,
            )  # padding sorts last
            sequence.barrier()
        emit = (
            {"records": self._records, "offsets": self._offsets, "pairs": pair_buffer},
            {"triangle_count": self._count, "window": window, "fixed_error": self.fixed_error},
        )
        if dispatch is None:
            sequence.dispatch(pipelines.emit, *emit, workgroups(self._count, WG_SIZE))
        else:
            sequence.dispatch_indirect(pipelines.emit, *emit, dispatch, offset=0)
        sequence.barrier()
        sequence.mark("emit")
        if self.sort == "bitonic":
            grouped, tile_list = _record_bitonic_tiles(
                sequence, pipelines, self.scan, self.pool, pair_buffer, pairs, slots,
                window.tiles, fill_args, self.device.max_groups_x,
            )  # fmt: skip
        else:
            grouped, tile_list = _record_counting_tiles(
                sequence, pipelines, self.scan, self.pool, pair_buffer, pairs, self._total,
                dispatch, window.tiles, fill_args, self.device.max_groups_x,
            )  # fmt: skip
        rounds = 1 if dispatch is not None else workgroups(pairs, FILL_PAIRS_PER_ROUND)
        bindings = self._tile_bindings(grouped, tile_list, fill_args, grid)
        assert self._fine is not None and self._batch_indices is not None  # (_upload, exact)
        bindings.update(fine_vertices=self._fine, indices=self._batch_indices)
        flips = pipelines.fill_flips
        extra: dict[str, object] = {}
        if signed is not None:  # fill_mode="winding": signs into segments, no column counts
            flips, extra = pipelines.fill_signed, {"box": signed.box}
            bindings.update(
                offsets=signed.offsets, crossings=signed.crossings, tile_flags=signed.tile_flags
            )
        else:  # the marks of fill_mode="winding" leave the column sums alone
            if marks is not None:
                flips = pipelines.fill_marks
                bindings.update(signs=marks.signs, tile_flags=marks.tile_flags)
            bindings["column_counts"] = self._column_counts()
            bindings["column_sums"] = self._column_sums(
                needed=marks is None and (not finish or rounds > 1)
            )
        self._record_rounds(flips, bindings, window, rounds, finish, extra, fill_args)
        self._last_fill = _RecordedFill(window, bindings, fill_args, rounds)
        return fill_args

    def _record_rounds(
        self,
        flips: ComputePipeline,
        bindings: dict[str, Binding | Buffer],
        window: Window,
        rounds: int,
        finish: bool,
        extra: Mapping[str, object],
        fill_args: Buffer,
    ) -> None:
        """The fill's rounds over the grouped pairs in `bindings`."""
        sequence = self.sequence
        later_rounds = self._round_dispatch(rounds)
        bindings["round_dispatch"] = later_rounds
        for fill_round in range(rounds):
            sequence.dispatch_indirect(
                flips,
                bindings,
                {"window": window, "fill_round": fill_round, "fill_rounds": rounds,
                 "finish": int(finish), "fixed_error": self.fixed_error, **extra},
                fill_args if fill_round == 0 else later_rounds.buffer,
                offset=0 if fill_round == 0 else fill_round * 16,
            )  # fmt: skip
            sequence.barrier()
        sequence.mark("fill")

    def _signed_again(self, kept: _RecordedFill, signed: SignedCrossings) -> None:
        """The signed fill of fill_mode="winding" over the pairs the marking fill of the same
        slab grouped (its only part): no binning again, one submission."""
        started = time.perf_counter()
        self.sequence.begin()
        self.sequence.mark("start")
        if kept.bindings is not None:
            bindings = {
                name: binding
                for name, binding in kept.bindings.items()
                if name not in ("column_counts", "column_sums", "signs")
            }
            bindings.update(
                offsets=signed.offsets, crossings=signed.crossings, tile_flags=signed.tile_flags
            )
            self._record_rounds(
                self.pipelines.fill_signed, bindings, kept.window, kept.rounds, False,
                {"box": signed.box}, kept.fill_args,
            )  # fmt: skip
        self.stats.add_gpu(self.sequence.submit())
        self.stats.add_host(fill_submission=(time.perf_counter() - started) * 1e3)

    def _round_dispatch(self, rounds: int) -> Binding:
        """The dispatch arguments of fill rounds 1 .. rounds - 1, cleared (no workgroups):
        a round's tiles ask for the next (shaders/fill.comp), so a part whose largest tile
        takes fewer rounds than its total of pairs does dispatches nothing for the rest."""
        if rounds == 1:
            return self.pool.binding("unused", 16)  # never written: no next round
        arguments = self.pool.get("fill_round_args", rounds * 16, INDIRECT)
        self.sequence.fill(arguments, 0, rounds * 16)
        self.sequence.barrier()
        return Binding(arguments, rounds * 16)

    def _parity_all(self, grid: Binding, download: bool) -> Buffer | None:
        """Parity and column counts over every tile of the slab, after several parts flipped
        bits. Returns the grid's staging copy with `download`."""
        started = time.perf_counter()
        sequence = self.sequence
        slab = self._slab.window
        sequence.begin()
        sequence.mark("start")
        self._record_clear(grid)
        unused = self.pool.binding("unused", 16)
        sequence.dispatch(
            self.pipelines.fill_parity,
            {
                "records": unused,
                "pairs": unused,
                "tiles": unused,
                "fill_dispatch": unused,
                "grid": grid,
                "column_counts": self._column_counts(),
                "column_sums": self._column_sums(needed=True),
                "fine_vertices": unused,
                "indices": unused,
            },
            {"window": slab, "fill_round": 0, "fill_rounds": 1, "finish": 0, "fixed_error": 0},
            slab.tiles,
        )
        sequence.barrier()
        sequence.mark("fill")
        counts_staging, grid_staging = self._record_results(grid, download)
        self.stats.add_gpu(sequence.submit())
        self.stats.add_host(fill_submission=(time.perf_counter() - started) * 1e3)
        self._count_columns(counts_staging.read(np.uint32, 4))
        return grid_staging

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
        self._slab = _SlabState(slab, clear=clear)
        parts = 0
        while work:
            window, batch = work.pop(0)
            pair_count, may_wrap = self._count_pairs(window, batch, grid, self.surface.setup)
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
        """Submission 2 of a surface part: conservative emission, which writes the pairs
        grouped by tile (at the per-key cursors of submission 1), then the surface pass over
        them, SURFACE_GROUP_PAIRS per workgroup."""
        surface = self.surface
        assert surface is not None  # voxelize_surface checked it
        started = time.perf_counter()
        sequence = self.sequence
        sequence.begin()
        sequence.mark("start")
        if clear_ids is not None:
            sequence.fill(clear_ids.buffer, NO_FACE, clear_ids.size)
        if pair_count:
            pairs = self.pool.binding("grouped_pairs", pair_count * PAIR_BYTES)
            sequence.barrier()
            sequence.dispatch(
                surface.emit,
                {"records": self._records, "tile_cursors": self._tile_cursors, "pairs": pairs},
                {"triangle_count": self._count, "window": window, "fixed_error": 0},
                workgroups(self._count, WG_SIZE),
            )
            sequence.barrier()
            sequence.mark("emit")
            bindings: dict[str, Binding | Buffer] = {
                "records": self._records,
                "pairs": pairs,
                "grid": grid,
            }
            kernel = surface.mark
            if face_ids is not None:
                bindings["face_ids"] = face_ids
                kernel = surface.with_faces
            push = {
                "window": window,
                "ny": grid_rows,
                "pair_count": pair_count,
                "triangle_offset": first_triangle,
            }
            sequence.dispatch(
                kernel, bindings, push, workgroups(pair_count, kernels.SURFACE_GROUP_PAIRS)
            )
            sequence.barrier()
            sequence.mark("surface")
        elif clear_ids is not None:
            sequence.barrier()
        self.stats.add_gpu(sequence.submit())
        self.stats.add_host(surface_submission=(time.perf_counter() - started) * 1e3)
        self.stats.count(surface_pairs=pair_count)

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


def triangle_bytes(indexed: bool, exact: bool = True) -> int:
    """Bytes one triangle of a batch holds: its geometry on the device and in the staging
    buffer (and, for the soup variants, the vertex indices the fill's near ties read,
    `exact`: in host-visible memory), its record (setup) and its tile count (setup, scan)."""
    indices = INDEX_BYTES if exact and not indexed else 0
    return 2 * geometry_bytes(indexed) + indices + RECORD_BYTES + 4


def fine_vertices_of(vertices: np.ndarray) -> np.ndarray:
    """The fine coordinates of float32 grid-space vertices given as they are (exact but
    for values below the fine step, 2^-FINE_BITS)."""
    return to_fine(np.asarray(vertices, np.float32).astype(np.float64))


def fixed_error(vertices: np.ndarray, fine: np.ndarray, used: np.ndarray) -> int:
    """delta of shaders/exact.glsl: the ceiling of the largest gap, in fixed-point units,
    between a used vertex's fixed-point coordinates (from its float32 value) and its fine
    ones, computed exactly in int64 (X 2^33 and F are at most 2^62), in row chunks on the
    host's cores. `used`: bool (V,), the vertices some face refers to (stray vertices may be
    anything)."""

    def largest_gap(start: int, stop: int) -> int:
        mask = used[start:stop]
        rows = slice(start, stop) if mask.all() else np.flatnonzero(mask) + start
        return fixed_gap(vertices[rows], fine[rows])

    return fixed_error_of_gap(max(map_row_chunks(len(vertices), largest_gap)))


def fixed_error_of_gap(gap: int) -> int:
    """fixed_error from the largest gap in fine units (placement.fixed_gap)."""
    step = 1 << (FINE_BITS - FIXED_BITS)
    delta = -(-gap // step)
    if delta > MAX_FIXED_ERROR:  # the binning's band (shaders/tiles.glsl) covers no more
        raise VoxelizerError(
            f"internal error: float32 vertices {delta} fixed-point units from the fine ones"
        )
    return delta


_last_fixed_error: tuple[list[weakref.ref[np.ndarray]], int] | None = None


def _fixed_error_of(vertices: np.ndarray, fine: np.ndarray, used: np.ndarray) -> int:
    """fixed_error, remembered for the last inputs that are all read-only (a repeated call
    on the same Mesh and grid: placement.placed_vertices, Mesh.used)."""
    global _last_fixed_error
    arrays = (vertices, fine, used)
    last = _last_fixed_error
    if last is not None and all(ref() is array for ref, array in zip(last[0], arrays)):
        return last[1]
    delta = fixed_error(vertices, fine, used)
    if not any(array.flags.writeable for array in arrays):
        _last_fixed_error = ([weakref.ref(array) for array in arrays], delta)
    return delta


def used_vertices(vertex_count: int, faces: np.ndarray) -> np.ndarray:
    """bool (V,): the vertices some face refers to, in row chunks of the faces."""
    used = np.zeros(vertex_count, bool)

    def mark(start: int, stop: int) -> None:
        used[faces[start:stop].reshape(-1)] = True  # (chunks only ever write True)

    for_row_chunks(len(faces), mark)
    return used


def vertex_bytes(indexed: bool, vertices: int, exact: bool = True) -> int:
    """Bytes held for every vertex: the fine coordinates (where the fill runs, `exact`: in
    host-visible memory the fill reads directly), and the float32 positions of the indexed
    variants (device and staging)."""
    return (FINE_VERTEX_BYTES * exact + (2 * 12 if indexed else 0)) * vertices


def column_sums_bytes(nx: int, rows: int) -> int:
    """Device bytes of the fill's per-column sums over a slab of `rows` column rows."""
    return nx * rows * COLUMN_SUM_BYTES


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
    total: Buffer,
    dispatch: Buffer | None,
    keys: int,
    fill_args: Buffer,
    max_groups_x: int,
) -> tuple[Binding, Binding]:
    """Passes 4-6 by counting: a histogram of the pairs over all tile keys of the window,
    its scan, a scatter into tile order; then flags and compaction over the tile keys. The
    pair kernels read the count from `total` (the tile-count scan's); they run over
    `pair_count` pairs, or, with `dispatch`, as many as pair_dispatch.comp sized them for."""
    counts = pool.binding("tile_pair_counts", keys * 4)
    starts = pool.binding("tile_starts", keys * 4)
    cursors = pool.binding("tile_cursors", keys * 4)
    grouped = pool.binding("grouped_pairs", pair_count * PAIR_BYTES)

    def over_pairs(pipeline: ComputePipeline, counters: Binding) -> None:
        bindings: dict[str, Binding | Buffer] = {
            "pairs": pairs,
            "counters": counters,
            "grouped": grouped,
            "pair_total": total,
        }
        if dispatch is None:
            sequence.dispatch(pipeline, bindings, {}, workgroups(pair_count, WG_SIZE))
        else:
            sequence.dispatch_indirect(pipeline, bindings, {}, dispatch, offset=16)
        sequence.barrier()

    sequence.fill(counts.buffer, 0, keys * 4)
    sequence.barrier()
    over_pairs(pipelines.count_pairs, counts)
    sequence.copy(counts.buffer, starts.buffer, keys * 4)
    sequence.barrier()
    scan.record(sequence, pool, starts.buffer, keys, "tile_starts")
    sequence.copy(starts.buffer, cursors.buffer, keys * 4)
    sequence.barrier()
    over_pairs(pipelines.scatter_pairs, cursors)
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
