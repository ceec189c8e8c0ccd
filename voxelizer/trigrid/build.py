"""The build of triangle grids on the GPU, and the engine that owns their kernels and buffers.

A build is the conservative binning of the surface modes (setup.comp and emit.comp with
CONSERVATIVE 1, in two dimensions) run in three (shaders/cells.comp), in one submission and
with no read-back between its passes:

  upload -> count (one thread per triangle: its fixed-point corners, and a count in every
  cell it touches; a triangle with many columns leaves units instead) -> scan of the unit
  counts -> count over the units -> scan of the cell counts (each cell's first slot) ->
  emit (every touched cell's next slot takes the triangle), over the triangles, then over
  the units; afterwards each cell's entry is its end (levels.py records a level's passes).

The triangle ids are sized before the count has run: for the count of the last build of
these very vertices, else for an estimate (`reference_estimate`). The emission reads the
count's 64-bit total and does nothing where the references do not fit; the host reads the
total after the submission and then, only then, sizes the ids exactly and emits in a second
submission. A one-level build whose buffers, sizes and push constants are those of the
build recorded last, uploading or not as it did (a rebuild of the same mesh; or a new mesh
of the same size, placed alike, after a new one: an animation's frames), into the buffers
the last grid gave back, records nothing: the engine writes the new geometry into the
staging buffers, if it uploads, and replays that recording.

No pair array and no sort: a cell's entry is its count, then its cursor, then its end
(Taranta's memory saving: 4 bytes per reference and 4 per cell, besides the records). The
scan is gpu/scan.py's, and the indirect dispatches over units are sized by the passes'
pair_dispatch kernel. A two-level grid (Kalojanov et al. 2011) builds its top level so,
with each reference's cell kept, and in the same submission subgrid.comp gives each top
cell its own resolution from its references; its leaves are then counted and emitted the
same way over the top level's references, in a second submission.

Ownership: the engine (one per device, `GridEngine`) holds the pipelines, a buffer pool and
a sequence for builds, another pair for what a query needs while it runs; every build's
result is a `DeviceGrid` that owns the buffers it keeps (records, cell ends, triangle ids,
and the leaves), freed by its `destroy()` or when the engine closes. One build or query runs
at a time per engine (its lock); a device's queue is shared with the voxelizer's passes,
each submission under the device's queue lock.
"""

from __future__ import annotations

import math
import struct
import threading
import time
import weakref
from dataclasses import dataclass, field

import numpy as np

from ..errors import GridError, VoxelizerError
from ..gpu.buffers import STORAGE, Binding, Buffer, BufferPool, Usage
from ..gpu.commands import Sequence, workgroups
from ..gpu.device import Device
from ..gpu.kernels import WG_SIZE, Kernel
from ..gpu.pipelines import ComputePipeline
from ..gpu.scan import Scan
from ..interrupts import interrupts_deferred
from ..placement import FINE_LATTICE_MAX as MAX_RESOLUTION  # (the finest lattice)
from ..stats import Stats
from . import kernels
from .levels import NO_WRAP, Level, LevelPasses
from .placement import CellPlacement

# Load balance (shaders/cells.comp): a triangle with at most SMALL_COLUMNS columns is done
# by one thread; a larger one in units of CHUNK_COLUMNS columns, one thread each.
SMALL_COLUMNS = 8
CHUNK_COLUMNS = 8
MAX_THREAD_COLUMNS = 4096  # cells.comp's loop budget
RECORD_BYTES = 48  # TriangleRecord (triangle.glsl)
# A two-level grid's top level: Kalojanov et al.'s top density (cells per triangle), and the
# most leaves along one axis of a top cell (subgrid.comp: 255^3 leaves a cell at most, so
# that a workgroup's sum of 256 cells stays within 32 bits).
TOP_DENSITY = 1.0 / 16.0
LEAF_LIMIT = 255
SPARE_SLACK = 1 << 20  # a spare buffer up to twice the size asked for, plus this, is reused
# The references a build sizes its ids for before the count (reference_estimate): this many
# per item, and this many per cell of a face of the lattice's cube (a surface crosses the
# grid about so: a mesh of many small triangles, one of few large ones).
ESTIMATE_PER_ITEM = 4
ESTIMATE_PER_FACE_CELL = 12


def reference_estimate(items: int, cells: int) -> int:
    """References to size the ids for before the count: enough for the scanned and sculpted
    models measured (the shared models at densities 1/16 to 32 and resolutions 16 to 256:
    1.06 to 3.7 times their count), not for a CAD part's long thin triangles (0.7 to 0.97
    of featuretype.stl's), whose build then takes a second submission."""
    return ESTIMATE_PER_ITEM * items + ESTIMATE_PER_FACE_CELL * math.ceil(cells ** (2 / 3))


@dataclass(eq=False)
class DeviceGrid:
    """The device buffers of one built grid, owned (freed by destroy), and their sizes.

    buffers: "records" (48 bytes a triangle: its fixed-point corners as given), "cell_ends"
    (uint32 a cell), "triangle_ids" (uint32 a reference); for two levels also
    "resolutions" (uvec4 a top cell), "leaf_base" (uint32 a top cell), "leaf_ends" (uint32 a
    leaf) and "leaf_ids" (uint32 a leaf reference)."""

    engine: GridEngine
    placement: CellPlacement
    levels: int
    triangles: int
    references: int
    leaves: int = 0
    leaf_references: int = 0
    buffers: dict[str, Buffer] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Device bytes of the structure (the buffers it keeps)."""
        return sum(buffer.size for buffer in self.buffers.values())

    @property
    def alive(self) -> bool:
        return bool(self.buffers) or self.triangles == 0

    def destroy(self) -> None:
        """Free the buffers (once: later calls, and the engine's close, do nothing more)."""
        buffers, self.buffers = self.buffers, {}
        self.engine.forget(self)
        self.engine.release(buffers)


@dataclass
class _Recording:
    """The build recorded last on the build sequence, reusable: what it was recorded for
    (sizes, push constants and the buffers of its grid; the build pool's generation says
    whether every pool buffer it names is alive), what it reads back, and the bytes the
    build holds at its peak."""

    key: tuple[object, ...]
    buffers: dict[str, Buffer]
    generation: int
    read: tuple[Buffer, Buffer | None]
    used: dict[str, int]


class GridEngine:
    """Triangle grids on one device: the kernels (built on first use, per variant of the
    exact tests), a buffer pool and a sequence for builds, another for queries, one build
    or query at a time."""

    def __init__(self, device: Device):
        self.device = device
        self.pool = BufferPool(device)
        self.sequence = Sequence(device, self.pool)
        # The builds': a recording there stays valid until the next build (_Recording).
        self.build_pool = BufferPool(device)
        self.build_sequence = Sequence(device, self.build_pool)
        self._recording: _Recording | None = None
        # The reference counts of the last build, and of which grid-space vertices, placed
        # how: a rebuild sizes its ids for them exactly.
        self._learned: tuple[weakref.ref[np.ndarray], tuple[object, ...], int, int] | None = None
        self.scan = Scan(device)
        self.lock = threading.Lock()
        self._pipelines: dict[tuple[Kernel, int], ComputePipeline] = {}
        self._grids: set[DeviceGrid] = set()  # built and not destroyed yet
        self._closed = False
        self._spares: dict[str, Buffer] = {}  # the buffers of the grid destroyed last
        # The read-only arrays whose upload the pool's geometry buffers hold (_upload_geometry)
        self._resident: tuple[weakref.ref[np.ndarray], weakref.ref[np.ndarray]] | None = None
        self._level_passes: LevelPasses | None = None  # (made on first use)

    def pipeline(self, kernel: Kernel, branchless: int = 1) -> ComputePipeline:
        """The kernel on this device, with the variant of the exact tests (built on first use)."""
        key = (kernel, branchless)
        if key not in self._pipelines:
            self._pipelines[key] = ComputePipeline(
                self.device, kernel, kernels.trigrid_defines(branchless)
            )
        return self._pipelines[key]

    @property
    def _levels(self) -> LevelPasses:
        """The levels' passes, on the build sequence."""
        if self._level_passes is None:
            self._level_passes = LevelPasses(self.device, self.build_sequence, self.build_pool,
                                             self.scan, self.pipeline(kernels.PAIR_DISPATCH))  # fmt: skip
        return self._level_passes

    def check_open(self) -> None:
        if self._closed:
            raise VoxelizerError("the device of this triangle grid is closed")

    def own(self, grid: DeviceGrid, name: str, size: int, usage: Usage = STORAGE) -> Buffer:
        """A buffer of `size` bytes that `grid` keeps (GridError where one buffer cannot
        hold it)."""
        if size > self.device.max_storage_range:
            raise GridError(
                f"the triangle grid's {name} need {size:,} bytes, more than one buffer of "
                f"{self.device.name} holds ({self.device.max_storage_range:,}); ask for fewer "
                "cells (a lower density)"
            )
        spare = self._spares.pop(name, None)
        if spare is not None and size <= spare.size <= 2 * size + SPARE_SLACK:
            grid.buffers[name] = spare  # (a dict entry: nothing to interrupt)
            return spare
        if spare is not None:
            spare.destroy()
        with interrupts_deferred():  # kept by the grid before a Ctrl-C unwinds
            buffer = Buffer(self.device, size, usage, name=f"trigrid_{name}")
            grid.buffers[name] = buffer
        return buffer

    def adopt(self, grid: DeviceGrid) -> None:
        """Free `grid`'s buffers when the engine closes, if they are still held then."""
        self._grids.add(grid)

    def forget(self, grid: DeviceGrid) -> None:
        self._grids.discard(grid)

    def release(self, buffers: dict[str, Buffer]) -> None:
        """Keep a destroyed grid's buffers for the next build to reuse (those of the last
        grid only: a rebuild of the same mesh, an animation's next frame, allocate nothing),
        freeing those they replace; free them at once when the engine is closed."""
        for name, buffer in buffers.items():
            old = None if self._closed else self._spares.get(name)
            if self._closed:
                old = buffer
            else:
                self._spares[name] = buffer
            if old is not None:
                old.destroy()

    def forget_geometry(self) -> None:
        """The next build uploads its geometry, whatever the device holds."""
        self._resident = None

    def _upload_geometry(self, vertices: np.ndarray, faces: np.ndarray) -> dict[str, Binding]:
        """Record the upload of the grid-space vertices and the faces, unless the device
        holds these very arrays already (read-only ones, given again: a rebuild of the same
        mesh and placement uploads nothing)."""
        sequence, pool = self.build_sequence, self.build_pool
        geometry = {
            "vertices": pool.binding("trigrid_vertices", vertices.nbytes),
            "indices": pool.binding("trigrid_indices", faces.nbytes),
        }
        if self._holds_geometry(vertices, faces):
            return geometry
        self._resident = None
        sequence.upload(geometry["vertices"].buffer, np.ascontiguousarray(vertices, np.float32))
        sequence.upload(geometry["indices"].buffer, np.ascontiguousarray(faces, np.uint32))
        sequence.barrier()
        sequence.mark("upload")
        self._remember_geometry(vertices, faces)
        return geometry

    def close(self) -> None:
        with self.lock:
            if self._closed:
                return
            self._closed = True
            for grid in list(self._grids):
                grid.destroy()
            for spare in self._spares.values():
                spare.destroy()
            self._spares.clear()
            for pipeline in self._pipelines.values():
                pipeline.destroy()
            self._pipelines.clear()
            self.scan.destroy()
            self._recording = None
            for sequence, pool in ((self.sequence, self.pool),
                                   (self.build_sequence, self.build_pool)):  # fmt: skip
                sequence.destroy()
                pool.destroy()

    @property
    def submissions(self) -> int:
        """Submissions of builds so far (one a build, unless its references outgrew the
        ids sized before its count; a two-level build's leaves take one more)."""
        return self.build_sequence.submissions

    # -- the build ---------------------------------------------------------------------------

    def build(
        self,
        vertices: np.ndarray,
        faces: np.ndarray,
        placement: CellPlacement,
        *,
        levels: int = 1,
        leaf_density: float = 4.0,
        top_placement: CellPlacement | None = None,
        branchless: int = 1,
        small_columns: int = SMALL_COLUMNS,
        chunk_columns: int = CHUNK_COLUMNS,
    ) -> tuple[DeviceGrid, Stats]:
        """Build the grid of float32 grid-space `vertices` (placement.grid_vertices) and
        uint32 `faces`. levels=2: `placement` is the top level's, each top cell cut by
        `leaf_density` leaves per reference."""
        if not (
            1 <= small_columns <= MAX_THREAD_COLUMNS and 1 <= chunk_columns <= MAX_THREAD_COLUMNS
        ):
            raise ValueError(f"columns per thread must be 1 to {MAX_THREAD_COLUMNS}")
        with self.lock:
            self.check_open()
            stats = Stats(device=self.device.name, shape=placement.shape)
            grid = DeviceGrid(self, placement, levels, len(faces), 0)
            submitted = self.submissions
            try:
                self._build(grid, vertices, faces, stats, leaf_density, branchless,
                            small_columns, chunk_columns)  # fmt: skip
            except BaseException:
                grid.destroy()
                raise
            self.adopt(grid)
            stats.counts.update(structure_bytes=grid.nbytes)
            stats.count(submissions=self.submissions - submitted)
            return grid, stats

    def _build(
        self,
        grid: DeviceGrid,
        vertices: np.ndarray,
        faces: np.ndarray,
        stats: Stats,
        leaf_density: float,
        branchless: int,
        small_columns: int,
        chunk_columns: int,
    ) -> None:
        placement = grid.placement
        triangles = len(faces)
        started = time.perf_counter()
        two = grid.levels == 2
        records = self.own(grid, "records", triangles * RECORD_BYTES)
        ends = self.own(grid, "cell_ends", placement.cells * 4)
        learned = self._learned_counts(vertices, grid, leaf_density)
        capacity = self._capacity(triangles, placement.cells, learned[0] if learned else None)
        ids = self.own(grid, "triangle_ids", capacity * 4)
        top = Level(
            "cells",
            1,
            self.pipeline(kernels.CELLS, branchless),
            {"records": records},
            triangles,
            placement.shape,
            placement.cells,
            small_columns,
            chunk_columns,
            emit_cells=two,
            capacity=min(ids.size // 4, NO_WRAP),
        )
        uploads = not self._holds_geometry(vertices, faces)
        key = (placement.shape, triangles, vertices.nbytes, faces.nbytes, branchless,
               small_columns, chunk_columns, top.capacity, uploads)  # fmt: skip
        recording = self._recording
        if (
            not two
            and recording is not None
            and recording.key == key
            and recording.buffers == grid.buffers
            and self.build_sequence.replayable
            and recording.generation == self.build_pool.generation
            and self._stage_geometry(vertices, faces, uploads)
        ):
            self._replay(stats)
            read, used = recording.read, dict(recording.used)
            stats.count(replayed=1)
        else:
            used = {}  # bytes of every buffer the build holds at its peak
            self._recording = None
            sequence = self.build_sequence
            sequence.begin(reusable=not two)
            sequence.mark("start")
            geometry = self._upload_geometry(vertices, faces)
            used.update(vertices=vertices.nbytes, indices=faces.nbytes)
            read = self._levels.record_count(top, ends, geometry, used)
            cells = self._reference_cells(top, used)
            self._levels.record_emit(top, ends, ids, cells)
            if two:
                leaf_totals = self._record_resolve(grid, leaf_density, branchless)
            self._submit(stats, "build")
            if sequence.replayable:
                self._recording = _Recording(key, dict(grid.buffers), self.build_pool.generation,
                                             read, dict(used))  # fmt: skip
        grid.references = self._total(read, "references")
        if grid.references > top.capacity:  # (the emission did nothing)
            self._emit_again(grid, top, ends, "triangle_ids", stats, used)
            if two:
                leaf_totals = self._record_resolve(grid, leaf_density, branchless)
            self._submit(stats, "emit")
        if two:
            learned_leaves = learned[1] if learned else None
            self._build_leaves(grid, top, leaf_totals, stats, used, learned_leaves)
        self._levels.clear()
        self._learned = (weakref.ref(vertices), self._placed(grid, leaf_density),
                         grid.references, grid.leaf_references)  # fmt: skip
        used.update({name: buffer.size for name, buffer in grid.buffers.items()})
        self._finish_stats(stats, grid, used, started)

    def _stage_geometry(self, vertices: np.ndarray, faces: np.ndarray, uploads: bool) -> bool:
        """Before a replay that uploads: the arrays into the staging buffers its copies read
        (as _upload_geometry would). Returns whether they were there to write into."""
        if not uploads:
            return True
        self._resident = None
        sequence, pool = self.build_sequence, self.build_pool
        generation = pool.generation
        for name, array, dtype in (("vertices", vertices, np.float32),
                                   ("indices", faces, np.uint32)):  # fmt: skip
            target = pool.get(f"trigrid_{name}", array.nbytes)
            sequence.stage(target, np.ascontiguousarray(array, dtype))
        if pool.generation != generation:  # (not the sizes recorded: recorded afresh)
            return False
        self._remember_geometry(vertices, faces)
        return True

    def _remember_geometry(self, vertices: np.ndarray, faces: np.ndarray) -> None:
        """The device holds these arrays now: read-only ones are not uploaded again."""
        if not (vertices.flags.writeable or faces.flags.writeable):
            self._resident = (weakref.ref(vertices), weakref.ref(faces))

    def _holds_geometry(self, vertices: np.ndarray, faces: np.ndarray) -> bool:
        """Whether the device holds these very (read-only) arrays already."""
        held = self._resident
        arrays = (vertices, faces)
        return held is not None and all(ref() is array for ref, array in zip(held, arrays))

    def _placed(self, grid: DeviceGrid, leaf_density: float) -> tuple[object, ...]:
        return (grid.placement.shape, grid.levels, leaf_density)

    def _learned_counts(
        self, vertices: np.ndarray, grid: DeviceGrid, leaf_density: float
    ) -> tuple[int, int] | None:
        """The reference counts of the last build, if it was of these very vertices, placed
        alike (the vertices are in grid space: the same array, the same placement)."""
        learned = self._learned
        if learned is None or learned[0]() is not vertices:
            return None
        if learned[1] != self._placed(grid, leaf_density):
            return None
        return learned[2], learned[3]

    def _capacity(self, items: int, cells: int, learned: int | None) -> int:
        """References to size the ids for before the count: those learned, else the
        estimate, within what one buffer holds."""
        wanted = learned if learned is not None else reference_estimate(items, cells)
        return max(1, min(wanted, self.device.max_storage_range // 4, NO_WRAP))

    def _reference_cells(self, level: Level, used: dict[str, int]) -> Binding | None:
        """Each top reference's cell, for the leaves of a two-level grid (sized as the ids)."""
        if not level.emit_cells:
            return None
        used["reference_cells"] = level.capacity * 4
        return self.build_pool.binding("trigrid_reference_cells", level.capacity * 4)

    def _emit_again(
        self,
        grid: DeviceGrid,
        level: Level,
        ends: Buffer,
        ids_name: str,
        stats: Stats,
        used: dict[str, int],
    ) -> None:
        """Begin a second submission for references that outgrew the ids sized before the
        count: the ids sized exactly, and the emission (the count left the cells' first
        slots in place)."""
        total = grid.leaf_references if ids_name == "leaf_ids" else grid.references
        stats.count(emissions_again=1)
        self._recording = None
        grid.buffers.pop(ids_name).destroy()
        ids = self.own(grid, ids_name, total * 4)
        level.capacity = total
        sequence = self.build_sequence
        sequence.begin()
        sequence.mark("start")
        self._levels.record_emit(level, ends, ids, self._reference_cells(level, used))

    def _finish_stats(
        self, stats: Stats, grid: DeviceGrid, used: dict[str, int], started: float
    ) -> None:
        stats.memory.device_buffers = dict(used)
        stats.count(
            triangles=grid.triangles,
            cells=grid.placement.cells,
            references=grid.references,
            leaves=grid.leaves,
            leaf_references=grid.leaf_references,
        )
        stats.add_host(build=(time.perf_counter() - started) * 1e3)

    def _record_resolve(self, grid: DeviceGrid, leaf_density: float, branchless: int) -> Buffer:
        """Record each top cell's resolution (subgrid.comp) and the scan of the leaf counts
        into each top cell's first leaf, after the top level's emission. Returns the staging
        buffer of the leaves' total, for after the submission."""
        placement, sequence, pool = grid.placement, self.build_sequence, self.build_pool
        # (recorded again after a second emission: into the same buffers)
        resolutions = grid.buffers.get("resolutions") or self.own(
            grid, "resolutions", placement.cells * 16
        )
        leaf_base = grid.buffers.get("leaf_base") or self.own(
            grid, "leaf_base", placement.cells * 4
        )
        totals = pool.binding("trigrid_leaf_totals", 16)
        sequence.fill(totals.buffer, 0, 16)
        sequence.barrier()
        limits = [max(1, min(LEAF_LIMIT, MAX_RESOLUTION // n)) for n in placement.shape]
        side = placement.cell_size / placement.cell_size.max()
        sequence.dispatch(
            self.pipeline(kernels.RESOLVE_TOP, branchless),
            {"cell_ends": grid.buffers["cell_ends"], "resolutions": resolutions,
             "leaf_counts": leaf_base, "totals": totals},
            {"cell_count": placement.cells, "density": float(leaf_density),
             "side_x": float(side[0]), "side_y": float(side[1]), "side_z": float(side[2]),
             "limit_x": limits[0], "limit_y": limits[1], "limit_z": limits[2]},
            workgroups(placement.cells, WG_SIZE),
        )  # fmt: skip
        sequence.barrier()
        sequence.mark("resolve")
        self.scan.record(sequence, pool, leaf_base, placement.cells, "trigrid_leaf_base")
        sequence.mark("leaf_base_scan")
        return sequence.download(totals.buffer, 8)

    def _build_leaves(
        self,
        grid: DeviceGrid,
        top: Level,
        leaf_totals: Buffer,
        stats: Stats,
        used: dict[str, int],
        learned: int | None,
    ) -> None:
        """Count and emit the leaves over the top references, in one more submission (two
        where their references outgrow the ids sized before their count)."""
        grid.leaves = self._total((leaf_totals, None), "leaves")
        leaf_ends = self.own(grid, "leaf_ends", grid.leaves * 4)
        capacity = self._capacity(grid.references, grid.leaves, learned)
        leaf_ids = self.own(grid, "leaf_ids", capacity * 4)
        top_cells = self.build_pool.binding("trigrid_reference_cells", grid.references * 4)
        leaves = Level(
            "leaves",
            2,
            top.cells,
            {
                "records": grid.buffers["records"],
                "top_ids": grid.buffers["triangle_ids"],
                "top_cells": top_cells,
                "resolutions": grid.buffers["resolutions"],
                "leaf_base": grid.buffers["leaf_base"],
            },
            grid.references,
            grid.placement.shape,
            grid.leaves,
            top.small_columns,
            top.chunk_columns,
            capacity=min(leaf_ids.size // 4, NO_WRAP),
        )
        sequence = self.build_sequence
        sequence.begin()
        sequence.mark("start")
        read = self._levels.record_count(leaves, leaf_ends, {}, used)
        self._levels.record_emit(leaves, leaf_ends, leaf_ids, None)
        self._submit(stats, "leaves")
        grid.leaf_references = self._total(read, "leaf references")
        if grid.leaf_references > leaves.capacity:
            self._emit_again(grid, leaves, leaf_ends, "leaf_ids", stats, used)
            self._submit(stats, "leaf_emit")

    def _replay(self, stats: Stats) -> None:
        """Submit the build recorded last again, and wait."""
        started = time.perf_counter()
        stats.add_gpu(self.build_sequence.replay())
        stats.add_host(build_submission=(time.perf_counter() - started) * 1e3)

    def _submit(self, stats: Stats, label: str) -> None:
        """Submit and wait, the GPU and host milliseconds added to `stats`."""
        started = time.perf_counter()
        stats.add_gpu(self.build_sequence.submit())
        stats.add_host({f"{label}_submission": (time.perf_counter() - started) * 1e3})

    def _total(self, read: tuple[Buffer, Buffer | None], what: str) -> int:
        """The 64-bit total read back (and checked against the 32-bit scan's, when given)."""
        totals, scanned = read
        low, high = struct.unpack_from("=II", totals.mapped())  # (its two words, low first)
        total = low + (high << 32)
        limit = min(self.device.max_storage_range // 4, (1 << 32) - 1)
        if total > limit:
            raise GridError(
                f"the triangle grid would hold {total:,} {what}, more than one buffer of "
                f"{self.device.name} holds ({limit:,}); ask for fewer cells (a lower density)"
            )
        if scanned is not None and struct.unpack_from("=I", scanned.mapped())[0] != total:
            raise VoxelizerError(f"internal error: the scan of the {what} does not add up")
        return total
