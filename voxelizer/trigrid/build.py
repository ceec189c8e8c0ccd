"""The build of triangle grids on the GPU, and the engine that owns their kernels and buffers.

A build is the conservative binning of the surface modes (setup.comp and emit.comp with
CONSERVATIVE 1, in two dimensions) run in three (shaders/cells.comp):

  submission 1: upload -> count (one thread per triangle: its fixed-point corners, and a
  count in every cell it touches; a triangle with many columns leaves units instead)
  -> scan of the unit counts -> count over the units -> scan of the cell counts (each
  cell's first slot); the host reads the 64-bit total of references back
  submission 2: emit (every touched cell's next slot takes the triangle), over the
  triangles, then over the units; afterwards each cell's entry is its end.

No pair array and no sort: a cell's entry is its count, then its cursor, then its end
(Taranta's memory saving: 4 bytes per reference and 4 per cell, besides the records). The
scan is gpu/scan.py's, and the indirect dispatches over units are sized by the passes'
pair_dispatch kernel. A two-level grid (Kalojanov et al. 2011) builds its top level so,
with each reference's cell kept; subgrid.comp gives each top cell its own resolution
from its references; its leaves are then counted and emitted the same way over the top
level's references (submissions 3 and 4).

Ownership: the engine (one per device, `GridEngine`) holds the pipelines, a buffer pool for
what a build or a query needs while it runs, and its sequence; every build's result is a
`DeviceGrid` that owns the buffers it keeps (records, cell ends, triangle ids, and the
leaves), freed by its `destroy()` or when the engine closes. One build or query runs at a
time per engine (its lock); a device's queue is shared with the voxelizer's passes, each
submission under the device's queue lock.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ..errors import GridError, VoxelizerError
from ..gpu.buffers import INDIRECT, STORAGE, Binding, Buffer, BufferPool, Usage
from ..gpu.commands import Sequence, workgroups
from ..gpu.device import Device
from ..gpu.kernels import WG_SIZE, Kernel
from ..gpu.pipelines import ComputePipeline
from ..gpu.scan import Scan
from ..interrupts import interrupts_deferred
from ..placement import FINE_LATTICE_MAX as MAX_RESOLUTION  # (the finest lattice)
from ..stats import Stats
from . import kernels
from .placement import CellPlacement, Shape

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
NO_WRAP = 0xFFFFFFFF  # pair_dispatch.comp's capacity: any unit count fits
SPARE_SLACK = 1 << 20  # a spare buffer up to twice the size asked for, plus this, is reused


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
class _Level:
    """One level's count and emission (cells.comp): its kernel, what every step of it binds
    besides its own buffers, and its push constants."""

    name: str
    level: int  # 1: the grid's triangles, 2: the top level's references
    cells: ComputePipeline
    shared: dict[str, Binding | Buffer]
    items: int
    shape: Shape
    cell_count: int
    small_columns: int
    chunk_columns: int
    emit_cells: bool = False  # the emission also writes each reference's cell

    def push(self, stage: int, over_units: bool) -> dict[str, object]:
        return {
            "item_count": self.items,
            "nx": self.shape[0],
            "ny": self.shape[1],
            "nz": self.shape[2],
            "small_columns": self.small_columns,
            "chunk_columns": self.chunk_columns,
            "stage": stage,
            "over_units": int(over_units),
            "emit_cells": int(self.emit_cells),
            "level": self.level,
        }


class GridEngine:
    """Triangle grids on one device: the kernels (built on first use, per variant of the
    exact tests), a buffer pool and a sequence for builds and queries, one at a time."""

    def __init__(self, device: Device):
        self.device = device
        self.pool = BufferPool(device)
        self.sequence = Sequence(device, self.pool)
        self.scan = Scan(device)
        self.lock = threading.Lock()
        self._pipelines: dict[tuple[Kernel, int], ComputePipeline] = {}
        self._grids: set[DeviceGrid] = set()  # built and not destroyed yet
        self._closed = False
        self._spares: dict[str, Buffer] = {}  # the buffers of the grid destroyed last
        # The read-only arrays whose upload the pool's geometry buffers hold (_upload_geometry)
        self._resident: tuple[weakref.ref[np.ndarray], weakref.ref[np.ndarray]] | None = None
        # Per level of the build running: its units, their total and their dispatch size,
        # from the count's recording to the emission's.
        self._level_state: dict[str, tuple[Binding, Buffer, Buffer]] = {}

    def pipeline(self, kernel: Kernel, branchless: int = 1) -> ComputePipeline:
        """The kernel on this device, with the variant of the exact tests (built on first use)."""
        key = (kernel, branchless)
        if key not in self._pipelines:
            self._pipelines[key] = ComputePipeline(
                self.device, kernel, kernels.trigrid_defines(branchless)
            )
        return self._pipelines[key]

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
        sequence, pool = self.sequence, self.pool
        geometry = {
            "vertices": pool.binding("trigrid_vertices", vertices.nbytes),
            "indices": pool.binding("trigrid_indices", faces.nbytes),
        }
        arrays = (vertices, faces)
        held = self._resident
        if held is not None and all(ref() is array for ref, array in zip(held, arrays)):
            return geometry
        self._resident = None
        sequence.upload(geometry["vertices"].buffer, np.ascontiguousarray(vertices, np.float32))
        sequence.upload(geometry["indices"].buffer, np.ascontiguousarray(faces, np.uint32))
        sequence.barrier()
        sequence.mark("upload")
        if not any(array.flags.writeable for array in arrays):
            self._resident = (weakref.ref(vertices), weakref.ref(faces))
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
            self.sequence.destroy()
            self.pool.destroy()

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
            try:
                self._build(grid, vertices, faces, stats, leaf_density, branchless,
                            small_columns, chunk_columns)  # fmt: skip
            except BaseException:
                grid.destroy()
                raise
            self.adopt(grid)
            stats.counts.update(structure_bytes=grid.nbytes)
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
        used: dict[str, int] = {}  # bytes of every buffer the build holds at its peak
        sequence = self.sequence
        sequence.begin()
        sequence.mark("start")
        geometry = self._upload_geometry(vertices, faces)
        used.update(vertices=vertices.nbytes, indices=faces.nbytes)
        records = self.own(grid, "records", triangles * RECORD_BYTES)
        two = grid.levels == 2
        top = _Level(
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
        )
        ends = self.own(grid, "cell_ends", placement.cells * 4)
        read = self._record_count(top, ends, geometry, used)
        self._submit(stats, "count")
        grid.references = self._total(read, "references")
        ids = self.own(grid, "triangle_ids", grid.references * 4)
        sequence.begin()
        sequence.mark("start")
        cells = None
        if two:
            cells = self.pool.binding("trigrid_reference_cells", grid.references * 4)
            used["reference_cells"] = grid.references * 4
        self._record_emit(top, ends, ids, cells)
        if not two:
            self._submit(stats, "emit")
            used.update({name: buffer.size for name, buffer in grid.buffers.items()})
            self._finish_stats(stats, grid, used, started)
            return
        assert cells is not None
        self._build_leaves(grid, top, ends, ids, cells, stats, used, leaf_density, branchless)
        used.update({name: buffer.size for name, buffer in grid.buffers.items()})
        self._finish_stats(stats, grid, used, started)

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

    def _build_leaves(
        self,
        grid: DeviceGrid,
        top: _Level,
        top_ends: Buffer,
        top_ids: Buffer,
        top_cells: Binding,
        stats: Stats,
        used: dict[str, int],
        leaf_density: float,
        branchless: int,
    ) -> None:
        """Submission 2 goes on with each top cell's resolution and the scan of the leaf
        counts; then the leaves are counted (3) and emitted (4) over the top references."""
        placement, sequence = grid.placement, self.sequence
        resolutions = self.own(grid, "resolutions", placement.cells * 16)
        leaf_base = self.own(grid, "leaf_base", placement.cells * 4)
        totals = self.pool.binding("trigrid_leaf_totals", 16)
        sequence.fill(totals.buffer, 0, 16)
        sequence.barrier()
        limits = [max(1, min(LEAF_LIMIT, MAX_RESOLUTION // n)) for n in placement.shape]
        side = placement.cell_size / placement.cell_size.max()
        sequence.dispatch(
            self.pipeline(kernels.RESOLVE_TOP, branchless),
            {"cell_ends": top_ends, "resolutions": resolutions, "leaf_counts": leaf_base,
             "totals": totals},
            {"cell_count": placement.cells, "density": float(leaf_density),
             "side_x": float(side[0]), "side_y": float(side[1]), "side_z": float(side[2]),
             "limit_x": limits[0], "limit_y": limits[1], "limit_z": limits[2]},
            workgroups(placement.cells, WG_SIZE),
        )  # fmt: skip
        sequence.barrier()
        sequence.mark("resolve")
        self.scan.record(sequence, self.pool, leaf_base, placement.cells, "trigrid_leaf_base")
        sequence.mark("leaf_base_scan")
        leaf_totals = sequence.download(totals.buffer, 8)
        self._submit(stats, "emit")
        grid.leaves = self._total((leaf_totals, None), "leaves")
        leaf_ends = self.own(grid, "leaf_ends", grid.leaves * 4)
        leaves = _Level(
            "leaves",
            2,
            self.pipeline(kernels.CELLS, branchless),
            {
                "records": grid.buffers["records"],
                "top_ids": top_ids,
                "top_cells": top_cells,
                "resolutions": resolutions,
                "leaf_base": leaf_base,
            },
            grid.references,
            placement.shape,
            grid.leaves,
            top.small_columns,
            top.chunk_columns,
        )
        sequence.begin()
        sequence.mark("start")
        read = self._record_count(leaves, leaf_ends, {}, used)
        self._submit(stats, "leaf_count")
        grid.leaf_references = self._total(read, "leaf references")
        leaf_ids = self.own(grid, "leaf_ids", grid.leaf_references * 4)
        sequence.begin()
        sequence.mark("start")
        self._record_emit(leaves, leaf_ends, leaf_ids, None)
        self._submit(stats, "leaf_emit")

    def _record_count(
        self,
        level: _Level,
        ends: Buffer,
        geometry: Mapping[str, Binding],
        used: dict[str, int],
    ) -> tuple[Buffer, Buffer | None]:
        """Record the count of one level: its items, the scan of their units, the units, the
        scan of the cell counts. Returns the staging buffers of the 64-bit total and of the
        32-bit scan total, for after the submission."""
        sequence, pool, name = self.sequence, self.pool, level.name
        totals = pool.binding(f"trigrid_{name}_totals", 16)
        units = pool.binding(f"trigrid_{name}_units", level.items * 4)
        used[f"{name}_units"] = level.items * 4
        sequence.fill(ends, 0, level.cell_count * 4)
        sequence.fill(totals.buffer, 0, 16)
        sequence.barrier()
        bindings = self._cells_bindings(
            level, {**geometry, "cell_ends": ends, "units": units, "totals": totals}
        )
        sequence.dispatch(
            level.cells, bindings, level.push(0, False), workgroups(level.items, WG_SIZE)
        )
        sequence.barrier()
        sequence.mark(f"{name}_count")
        unit_total = self.scan.record(
            sequence, pool, units.buffer, level.items, f"trigrid_{name}_units"
        )
        arguments = self._unit_dispatch(level, unit_total)
        bindings["unit_total"] = unit_total
        sequence.dispatch_indirect(level.cells, bindings, level.push(0, True), arguments, 16)
        sequence.barrier()
        sequence.mark(f"{name}_count_units")
        cell_total = self.scan.record(
            sequence, pool, ends, level.cell_count, f"trigrid_{name}_ends"
        )
        sequence.mark(f"{name}_scan")
        self._level_state[name] = (units, unit_total, arguments)
        return sequence.download(totals.buffer, 8), sequence.download(cell_total, 4)

    def _cells_bindings(
        self, level: _Level, given: Mapping[str, Binding | Buffer]
    ) -> dict[str, Binding | Buffer]:
        """Every buffer cells.comp declares: the level's and the step's, a stand-in for the
        rest (which the step does not touch)."""
        stand_in = self.pool.binding("trigrid_stand_in", 16)
        bindings: dict[str, Binding | Buffer] = dict.fromkeys(kernels.CELLS.bindings, stand_in)
        bindings.update(level.shared)
        bindings.update(given)
        return bindings

    def _unit_dispatch(self, level: _Level, unit_total: Buffer) -> Buffer:
        """Record the indirect dispatch size of the passes over the units (pair_dispatch.comp:
        its second command, at byte 16)."""
        arguments = self.pool.get(f"trigrid_{level.name}_unit_dispatch", 32, INDIRECT)
        no_wrap = self.pool.binding("trigrid_no_wrap", 16)
        self.sequence.fill(no_wrap.buffer, 0, 16)
        self.sequence.barrier()
        self.sequence.dispatch(
            self.pipeline(kernels.PAIR_DISPATCH),
            {"pair_total": unit_total, "wrap_flag": no_wrap, "pair_dispatch": arguments},
            {"triangle_count": 0, "capacity": NO_WRAP, "max_groups_x": self.device.max_groups_x},
            1,
        )
        self.sequence.barrier()
        return arguments

    def _record_emit(self, level: _Level, ends: Buffer, ids: Buffer, cells: Binding | None) -> None:
        """Record the emission of one level (its units' state from _record_count)."""
        sequence = self.sequence
        units, unit_total, arguments = self._level_state.pop(level.name)
        given: dict[str, Binding | Buffer] = {
            "cell_ends": ends,
            "triangle_ids": ids,
            "units": units,
            "unit_total": unit_total,
        }
        if cells is not None:
            given["reference_cells"] = cells
        bindings = self._cells_bindings(level, given)
        sequence.dispatch(
            level.cells, bindings, level.push(1, False), workgroups(level.items, WG_SIZE)
        )
        sequence.barrier()
        sequence.mark(f"{level.name}_emit")
        sequence.dispatch_indirect(level.cells, bindings, level.push(1, True), arguments, 16)
        sequence.barrier()
        sequence.mark(f"{level.name}_emit_units")

    def _submit(self, stats: Stats, label: str) -> None:
        """Submit and wait, the GPU and host milliseconds added to `stats`."""
        started = time.perf_counter()
        stats.add_gpu(self.sequence.submit())
        stats.add_host({f"{label}_submission": (time.perf_counter() - started) * 1e3})

    def _total(self, read: tuple[Buffer, Buffer | None], what: str) -> int:
        """The 64-bit total read back (and checked against the 32-bit scan's, when given)."""
        totals, scanned = read
        low, high = (int(v) for v in totals.read(np.uint32, 2))
        total = low + (high << 32)
        limit = min(self.device.max_storage_range // 4, (1 << 32) - 1)
        if total > limit:
            raise GridError(
                f"the triangle grid would hold {total:,} {what}, more than one buffer of "
                f"{self.device.name} holds ({limit:,}); ask for fewer cells (a lower density)"
            )
        if scanned is not None and int(scanned.read(np.uint32, 1)[0]) != total:
            raise VoxelizerError(f"internal error: the scan of the {what} does not add up")
        return total
