"""The sparse grid's stage (shaders/sparse_cubes.comp, sparse_fill.comp): for one slab of cube
rows, the surface cubes marked from a part's binned pairs, their slots, the flips of every
part into their words, then the parity up each stack with the gaps between the surface cubes
counted, and the replicas of the gaps whose columns differ. Records only; the loop
(sparse_slabs.py) submits and reads back.

What a slab holds on the device (`SlabCubes`): the cube bits and their scan (4 bytes each per
word of CubeSpace.words), the surface cubes' words (CubeSpace.cube_bytes), and per slot its
gap count and place (cubes.GAP_BYTES).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..gpu.buffers import Binding, Buffer, BufferPool
from ..gpu.commands import Sequence, workgroups
from ..gpu.device import Device
from ..gpu.kernels import WG_SIZE, Kernel, subgroup_defines
from ..gpu.pipelines import ComputePipeline
from ..gpu.scan import Scan
from .binning import Binned
from .cubes import CubeSpace
from .kernels import (
    FILL_PAIRS_PER_ROUND,
    SPARSE_FILL,
    SPARSE_MARK,
    SPARSE_PARITY,
    SPARSE_REPLICATE,
    SPARSE_WORDS,
    pass_defines,
)

FILL_STATE_BYTES = 16  # largest_tile, lost_crossings (shaders/sparse_fill.comp)


class SparsePipelines:
    """The sparse kernels of one variant on one lattice (placement.lattice_shift), compiled
    once per device."""

    def __init__(self, device: Device, variant: str, shift: int):
        defines = pass_defines(variant, subgroup_defines(device), shift)

        def build(kernel: Kernel) -> ComputePipeline:
            return ComputePipeline(device, kernel, defines)

        self.mark = build(SPARSE_MARK)
        self.words = build(SPARSE_WORDS)
        self.fill = build(SPARSE_FILL)
        self.parity = build(SPARSE_PARITY)
        self.replicate = build(SPARSE_REPLICATE)

    def all(self) -> list[ComputePipeline]:
        return [self.mark, self.words, self.fill, self.parity, self.replicate]

    def destroy(self) -> None:
        for pipeline in self.all():
            pipeline.destroy()


@dataclass(frozen=True)
class SlabCubes:
    """A slab's buffers: its cube bits, their scan into slots, the surface cubes' words (for
    `slots` of them), per slot its gap count and place, and the fill's state."""

    space: CubeSpace
    cube_bits: Binding
    word_slots: Binding
    cubes: Binding
    gap_counts: Binding
    cube_list: Binding
    fill_state: Binding
    slots: int


def slab_bits(pool: BufferPool, space: CubeSpace) -> tuple[Binding, Binding]:
    """The slab's cube bits and their scan (the pool's buffers)."""
    size = 4 * space.words
    return pool.binding("sparse_cube_bits", size), pool.binding("sparse_word_slots", size)


def slab_cubes(pool: BufferPool, space: CubeSpace, slots: int) -> SlabCubes:
    """The slab's buffers for `slots` surface cubes in batches of `space`'s side."""
    bits, word_slots = slab_bits(pool, space)
    return SlabCubes(
        space=space,
        cube_bits=bits,
        word_slots=word_slots,
        cubes=pool.binding("sparse_cubes", space.cube_bytes(slots)),
        gap_counts=pool.binding("sparse_gap_counts", 4 * max(slots, 1)),
        cube_list=pool.binding("sparse_cube_list", 8 * max(slots, 1)),
        fill_state=pool.binding("sparse_fill_state", FILL_STATE_BYTES),
        slots=slots,
    )


class SparsePass:
    """Records the sparse stage of one mesh's slabs into the shared command sequence; its
    buffers are the pool's."""

    def __init__(
        self,
        pipelines: SparsePipelines,
        scan: Scan,
        pool: BufferPool,
        sequence: Sequence,
        fixed_error: int,
    ):
        self.pipelines, self.scan, self.pool, self.sequence = pipelines, scan, pool, sequence
        self.fixed_error = fixed_error

    def record_clear_bits(self, space: CubeSpace) -> None:
        bits, _ = slab_bits(self.pool, space)
        self.sequence.fill(bits.buffer, 0, bits.size)
        self.sequence.barrier()

    def record_mark(self, binned: Binned, space: CubeSpace) -> None:
        """Mark the cubes the part's pairs may flip voxels in (after its binning)."""
        bits, _ = slab_bits(self.pool, space)
        pairs = binned.pair_count
        self.sequence.dispatch(
            self.pipelines.mark,
            {"records": binned.counted.records, "pairs": binned.pairs, "cube_bits": bits},
            {
                "window": binned.counted.window,
                "space": space,
                "pair_count": pairs,
                "fixed_error": self.fixed_error,
            },
            workgroups(pairs, WG_SIZE),
        )
        self.sequence.barrier()
        self.sequence.mark("sparse_mark")

    def record_slots(self, space: CubeSpace) -> Buffer:
        """The slots of the slab's marked cubes: the scan of each word's bits. Returns the
        buffer of the total (the slab's surface cubes), to download."""
        bits, word_slots = slab_bits(self.pool, space)
        self.sequence.dispatch(
            self.pipelines.words,
            {"cube_bits": bits, "word_slots": word_slots},
            {"space": space, "word_count": space.words},
            workgroups(space.words, WG_SIZE),
        )
        self.sequence.barrier()
        total = self.scan.record(
            self.sequence, self.pool, word_slots.buffer, space.words, "sparse_word_slots"
        )
        self.sequence.mark("sparse_slots")
        return total

    def record_clear_cubes(self, cubes: SlabCubes) -> None:
        self.sequence.fill(cubes.cubes.buffer, 0, cubes.cubes.size)
        self.sequence.fill(cubes.fill_state.buffer, 0, FILL_STATE_BYTES)
        self.sequence.barrier()

    def record_fill(self, binned: Binned, cubes: SlabCubes, rounds: int) -> None:
        """The flips of a binned part into the slab's surface cubes, `rounds` rounds (round
        0 records the largest tile's pairs in the fill state)."""
        counted = binned.counted
        assert counted.uploaded.fine is not None and counted.uploaded.indices is not None
        bindings: dict[str, Binding | Buffer] = {
            "records": counted.records,
            "pairs": binned.pairs,
            "tiles": binned.tiles,
            "fill_dispatch": binned.fill_args,
            "cubes": cubes.cubes,
            "cube_bits": cubes.cube_bits,
            "word_slots": cubes.word_slots,
            "fine_vertices": counted.uploaded.fine,
            "indices": counted.uploaded.indices,
            "fill_state": cubes.fill_state,
        }
        for fill_round in range(rounds):
            self.sequence.dispatch_indirect(
                self.pipelines.fill,
                bindings,
                {
                    "window": counted.window,
                    "space": cubes.space,
                    "fill_round": fill_round,
                    "fixed_error": self.fixed_error,
                },
                binned.fill_args,
            )
            self.sequence.barrier()
        self.sequence.mark("sparse_fill")

    def record_parity(self, cubes: SlabCubes) -> None:
        """Parity up every stack of the slab, with the gaps' counts and the cubes' places."""
        space = cubes.space
        self.sequence.dispatch(
            self.pipelines.parity,
            {
                "cube_bits": cubes.cube_bits,
                "word_slots": cubes.word_slots,
                "cubes": cubes.cubes,
                "gap_counts": cubes.gap_counts,
                "cube_list": cubes.cube_list,
            },
            {"space": space},
            space.stacks,
        )
        self.sequence.barrier()
        self.sequence.mark("sparse_parity")

    def record_replicas(
        self, cubes: SlabCubes, jobs: np.ndarray, replicas: Binding, replica_shift: int
    ) -> None:
        """The replicas of the jobs (source slot, replica slot) into `replicas`, batches of
        2^replica_shift cubes a side (cleared first: unused slots stay empty)."""
        job_buffer = self.pool.binding("sparse_replica_jobs", jobs.nbytes)
        self.sequence.upload(job_buffer.buffer, np.ascontiguousarray(jobs, np.uint32))
        self.sequence.fill(replicas.buffer, 0, replicas.size)
        self.sequence.barrier()
        self.sequence.dispatch(
            self.pipelines.replicate,
            {"cubes": cubes.cubes, "replicas": replicas, "jobs": job_buffer},
            {"space": cubes.space, "replica_shift": replica_shift, "job_count": len(jobs)},
            len(jobs),
        )
        self.sequence.barrier()
        self.sequence.mark("sparse_replicas")


def fill_rounds(largest_tile: int) -> int:
    """Rounds of the fill a part whose largest tile has that many pairs needs."""
    return max(1, workgroups(largest_tile, FILL_PAIRS_PER_ROUND))
