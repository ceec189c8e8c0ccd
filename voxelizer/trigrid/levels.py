"""The count and the emission of one level of a triangle grid (shaders/cells.comp), recorded
on the build's sequence (build.py says how a build runs them): the items' count, the scan of
their units, the count over the units, the scan of the cells' counts; then the emission over
the items and over the units, which does nothing where the references do not fit the ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..gpu.buffers import INDIRECT, Binding, Buffer, BufferPool
from ..gpu.commands import Sequence, workgroups
from ..gpu.device import Device
from ..gpu.kernels import WG_SIZE
from ..gpu.pipelines import ComputePipeline
from ..gpu.scan import Scan
from . import kernels
from .placement import Shape

NO_WRAP = 0xFFFFFFFF  # pair_dispatch.comp's capacity: any unit count fits


@dataclass
class Level:
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
    capacity: int = 0  # references the ids hold (the emission does nothing if they do not fit)

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
            "capacity": min(self.capacity, NO_WRAP),
        }


class LevelPasses:
    """Records levels' counts and emissions on a sequence, from its pool's buffers; keeps
    each level's units, totals and unit dispatch from its count's recording to its
    emission's (until `clear`)."""

    def __init__(
        self,
        device: Device,
        sequence: Sequence,
        pool: BufferPool,
        scan: Scan,
        pair_dispatch: ComputePipeline,
    ):
        self.device = device
        self.sequence = sequence
        self.pool = pool
        self.scan = scan
        self.pair_dispatch = pair_dispatch
        self._state: dict[str, tuple[Binding, Binding, Buffer, Buffer]] = {}

    def clear(self) -> None:
        self._state.clear()

    def record_count(
        self,
        level: Level,
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
        no_wrap = pool.binding("trigrid_no_wrap", 16)
        sequence.fill(ends, 0, level.cell_count * 4)
        sequence.fill(totals.buffer, 0, 16)
        sequence.fill(no_wrap.buffer, 0, 16)
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
        arguments = self._unit_dispatch(level, unit_total, no_wrap)
        bindings["unit_total"] = unit_total
        sequence.dispatch_indirect(level.cells, bindings, level.push(0, True), arguments, 16)
        sequence.barrier()
        sequence.mark(f"{name}_count_units")
        cell_total = self.scan.record(
            sequence, pool, ends, level.cell_count, f"trigrid_{name}_ends"
        )
        sequence.mark(f"{name}_scan")
        self._state[name] = (units, totals, unit_total, arguments)
        return sequence.download(totals.buffer, 8), sequence.download(cell_total, 4)

    def _cells_bindings(
        self, level: Level, given: Mapping[str, Binding | Buffer]
    ) -> dict[str, Binding | Buffer]:
        """Every buffer cells.comp declares: the level's and the step's, a stand-in for the
        rest (which the step does not touch)."""
        stand_in = self.pool.binding("trigrid_stand_in", 16)
        bindings: dict[str, Binding | Buffer] = dict.fromkeys(kernels.CELLS.bindings, stand_in)
        bindings.update(level.shared)
        bindings.update(given)
        return bindings

    def _unit_dispatch(self, level: Level, unit_total: Buffer, no_wrap: Binding) -> Buffer:
        """Record the indirect dispatch size of the passes over the units (pair_dispatch.comp:
        its second command, at byte 16; `no_wrap` holds zero)."""
        sequence, pool = self.sequence, self.pool
        arguments = pool.get(f"trigrid_{level.name}_unit_dispatch", 32, INDIRECT)
        sequence.dispatch(
            self.pair_dispatch,
            {"pair_total": unit_total, "wrap_flag": no_wrap, "pair_dispatch": arguments},
            {"triangle_count": 0, "capacity": NO_WRAP, "max_groups_x": self.device.max_groups_x},
            1,
        )
        sequence.barrier()
        return arguments

    def record_emit(self, level: Level, ends: Buffer, ids: Buffer, cells: Binding | None) -> None:
        """Record the emission of one level (its units' state from record_count), which
        does nothing where the count's total exceeds level.capacity."""
        sequence = self.sequence
        units, totals, unit_total, arguments = self._state[level.name]
        given: dict[str, Binding | Buffer] = {
            "cell_ends": ends,
            "triangle_ids": ids,
            "units": units,
            "totals": totals,
            "unit_total": unit_total,
        }
        if cells is not None:
            given["reference_cells"] = cells
        bindings = self._cells_bindings(level, given)
        # Over the items, then over the units, with no barrier between: each takes its own
        # slots (atomically), and neither reads what the other writes.
        sequence.dispatch(
            level.cells, bindings, level.push(1, False), workgroups(level.items, WG_SIZE)
        )
        sequence.dispatch_indirect(level.cells, bindings, level.push(1, True), arguments, 16)
        sequence.barrier()
        sequence.mark(f"{level.name}_emit")
