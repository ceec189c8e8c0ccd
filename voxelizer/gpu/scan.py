"""Exclusive prefix sum of uints on the GPU (shaders/scan.comp), a primitive of its own.

The passes scan the triangles' tile counts, the tile flags and the histogram of the counting
sort; the SVO build scans the stored flags of every level. Each needs only the scan's two
kernels, so they are built here, once per device, apart from any pass.
"""

from __future__ import annotations

from collections.abc import Mapping

from .buffers import Buffer, BufferPool
from .commands import Binding, Sequence, workgroups
from .device import Device
from .kernels import COMMON_DEFINES, WG_SIZE, Kernel, subgroup_defines
from .pipelines import ComputePipeline

SCAN_ITEMS = 16  # values per thread (a multiple of 4): fewer workgroups
SCAN_BLOCK = WG_SIZE * SCAN_ITEMS  # values one workgroup scans

_SCAN_BINDINGS = {"values": 0, "block_sums": 1}
# Scan every block of SCAN_BLOCK values in place and write each block's total.
SCAN_BLOCKS = Kernel("scan", _SCAN_BINDINGS, (("count", "uint"),), {"SCAN_ADD": 0})
# Add each block's scanned offset back to its values.
ADD_BLOCK_OFFSETS = Kernel(
    "scan", _SCAN_BINDINGS, (("count", "uint"),), {"SCAN_ADD": 1}, cpu_shaped=True
)


def scan_defines(subgroups: Mapping[str, int]) -> dict[str, int]:
    """What the scan kernels are compiled with besides their own defines."""
    return {**COMMON_DEFINES, "SCAN_ITEMS": SCAN_ITEMS, **subgroups}


class Scan:
    """The multi-level exclusive scan: its two pipelines, built once per device."""

    def __init__(self, device: Device):
        defines = scan_defines(subgroup_defines(device))
        self.scan_blocks = ComputePipeline(device, SCAN_BLOCKS, defines)
        self.add_offsets = ComputePipeline(device, ADD_BLOCK_OFFSETS, defines)

    def record(
        self, sequence: Sequence, pool: BufferPool, values: Buffer, count: int, name: str
    ) -> Buffer:
        """Record an exclusive scan of the first `count` (> 0) uints of `values`, in place,
        each dispatch followed by a barrier. Returns the buffer whose first uint holds their
        total once the sequence has run. `name` keeps the block sums of concurrent scans in
        separate pool buffers."""
        return self._record_level(sequence, pool, values, count, name, 0)

    def _record_level(
        self,
        sequence: Sequence,
        pool: BufferPool,
        values: Buffer,
        count: int,
        name: str,
        level: int,
    ) -> Buffer:
        blocks = workgroups(count, SCAN_BLOCK)
        sums = pool.binding(f"{name}_sums{level}", blocks * 4)
        # Whole quads: the pool's buffers are whole uvec4s, and the shader moves quads.
        bound = {"values": Binding(values, workgroups(count, 4) * 16), "block_sums": sums}
        sequence.dispatch(self.scan_blocks, bound, {"count": count}, blocks)
        sequence.barrier()
        if blocks == 1:
            return sums.buffer
        total = self._record_level(sequence, pool, sums.buffer, blocks, name, level + 1)
        sequence.dispatch(self.add_offsets, bound, {"count": count}, blocks)
        sequence.barrier()
        return total

    def destroy(self) -> None:
        self.scan_blocks.destroy()
        self.add_offsets.destroy()
