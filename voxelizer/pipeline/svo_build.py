"""The SVO built on the GPU from the device-resident bit grid (docs/svo-format.md).

One submission: classification bottom-up (the leaf and group nodes from one coalesced read of
the grid, shaders/svo_classify.comp stage 0; the levels above from their children), one
exclusive scan over every level's counts, then compaction writes every stored node, the mixed
bricks (reading the grid again only under leaves that hold one) and copies the arrays, as
long as the GPU's counts say, to host-visible memory (shaders/svo_write.comp). The host reads
only the totals and the finished arrays, never the dense grid, and waits once. The passes
record it (`record_svo`) into their own last submission where they know that one finishes
the grid, and read it after that wait (`RecordedSVO.finish`).

The arrays' sizes are known only on the GPU, so they are written into buffers of a capacity
chosen in advance (what earlier calls needed, at least an estimate from the grid's size);
when the counts exceed it, nothing is written past it and a second submission runs the
compaction again into buffers grown to the counts. A grid too large for one buffer is
converted slab by slab, each slab as a forest of cubes that merge.py joins into one tree.

Why this shape: the bit grid (1 GiB at 2048^3) is the one large thing to read, so it is read
once, with consecutive threads on consecutive words, and everything written per node is 4
bytes per leaf (8 x 8 x 8 voxels) or less; bricks are never held per brick, only as the
8-bit masks of their leaves. Everything after the classification touches the nodes, which
are a few MB.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..gpu.buffers import INDIRECT, Binding, Buffer, BufferPool
from ..gpu.commands import Sequence, workgroups
from ..gpu.device import Device
from ..gpu.kernels import COMMON_DEFINES, WG_SIZE, Kernel
from ..gpu.pipelines import ComputePipeline
from ..gpu.scan import SCAN_BLOCK, Scan
from ..grid import grid_bytes
from ..log import get_logger
from ..octree import octree_levels, padded_resolution
from ..stats import Stats
from . import kernels

_log = get_logger(__name__)

MAX_CHUNK_WORDS = 32  # words of a column one classification workgroup reads (MAX_CHUNK)
BLOCK_COLUMNS = 16  # columns per side of that workgroup's block (BLOCK)
ONE_GROUP_NODES = 1024  # levels this small are classified together by one workgroup
# First capacity of the output arrays, per (P/4) x (S/4) bricks of a forest's cross-section:
# above what the shared models' surfaces store (docs/benchmarks.md, "Figures behind the
# code"); a mesh with more surface costs one more submission, once per Voxelizer.
BRICKS_PER_CROSS_SECTION = 4
NODES_PER_BRICK = 0.5
MIN_CAPACITY = 1024


def octree_shape(n: int) -> tuple[int, int]:
    """(P, L): the padded power-of-two size (at least 8) and the number of internal levels."""
    padded = padded_resolution(n)
    return padded, octree_levels(padded)


def _quad(count: int) -> int:
    return -(-count // 4) * 4


def _scan_sums_bytes(count: int) -> int:
    """The block sums gpu.scan.Scan keeps for a scan of `count` values (whole uvec4s)."""
    total = 0
    while True:
        count = workgroups(count, SCAN_BLOCK)
        total += 16 * workgroups(count, 4)
        if count == 1:
            return total


@dataclass(frozen=True)
class Forest:
    """Which cubes of the octree one conversion builds, from which grid buffer.

    The cubes of side `cube_side` at cube row `cube_y` (all cubes_per_row^2 of them, in the
    order cx + cubes_per_row * cz), read from a grid buffer holding column rows from
    `buffer_row`. A single cube of side P is the whole octree (`whole`). The sizes derived
    from these are computed once per Forest (a conversion reads them dozens of times)."""

    shape: tuple[int, int, int]
    cube_side: int
    cube_y: int
    buffer_row: int
    buffer_rows: int

    @cached_property
    def padded(self) -> int:
        return octree_shape(max(self.shape))[0]

    @property
    def whole(self) -> bool:
        return self.cube_side == self.padded

    @cached_property
    def cubes_per_row(self) -> int:
        return self.padded // self.cube_side

    @cached_property
    def cubes(self) -> int:
        return self.cubes_per_row**2

    @cached_property
    def levels(self) -> int:
        """Internal levels inside a cube (L); level L - 1 holds the leaves, whose children
        are bricks."""
        return octree_levels(self.cube_side)

    @cached_property
    def level_sizes(self) -> tuple[int, ...]:
        """Nodes per internal level over all cubes, root level first."""
        return tuple(self.cubes * 8**level for level in range(self.levels))

    @cached_property
    def mask_entries(self) -> int:
        """The masks buffer: every internal level, each from a whole uvec4 (svo.glsl)."""
        return sum(_quad(size) for size in self.level_sizes)

    @property
    def group_level(self) -> int:
        return max(self.levels - 2, 0)

    @cached_property
    def count_end(self) -> int:
        """Index of the counts buffer's final 0 (svo.glsl, count_end); the scan covers it."""
        leaf_start = self.mask_entries - _quad(self.level_sizes[-1])
        return _quad(self.cubes) + leaf_start + self.level_sizes[self.group_level]

    @cached_property
    def chunk_words(self) -> int:
        """Words of each column one classification workgroup reads: the padded z extent in
        words, at most MAX_CHUNK_WORDS (a multiple of 4 from P = 128 on)."""
        return min(MAX_CHUNK_WORDS, max(1, self.padded // 32))

    def classify_blocks(self) -> tuple[int, int, int]:
        """The classification's workgroups from the grid: (blocks of 16 x 16 columns along x,
        block rows, chunks of each column) over the part of the forest that holds grid voxels."""
        nx, ny, nz = self.shape
        rows = min(self.cube_side, ny - self.cube_y * self.cube_side)  # > 0: the slab's rows
        chunks = workgroups(workgroups(nz, 32), self.chunk_words)
        return workgroups(nx, BLOCK_COLUMNS), workgroups(rows, BLOCK_COLUMNS), chunks

    @cached_property
    def covered(self) -> bool:
        """Whether the classification's blocks reach every leaf of the forest (a cubic grid
        of a power-of-two side, or a slab inside one); otherwise the rest is cleared."""
        whole = (
            max(1, self.padded // BLOCK_COLUMNS),
            max(1, self.cube_side // BLOCK_COLUMNS),
            max(1, self.padded // (32 * self.chunk_words)),
        )
        return self.classify_blocks() == whole

    @property
    def grid_bytes(self) -> int:
        """The grid buffer the forest reads: its rows of columns."""
        nx, _, nz = self.shape
        return grid_bytes(nx, self.buffer_rows, nz)

    def capacity_estimate(self) -> tuple[int, int]:
        """(nodes, bricks) the output arrays first hold (see BRICKS_PER_CROSS_SECTION)."""
        bricks = BRICKS_PER_CROSS_SECTION * (self.padded // 4) * (self.cube_side // 4)
        nodes = int(bricks * NODES_PER_BRICK)
        return max(MIN_CAPACITY, nodes), max(MIN_CAPACITY, bricks)

    def classify_bytes(self) -> int:
        """Device and staging bytes build_svo_on_gpu allocates: the masks, the counts and
        their scan's block sums, the totals, and the output arrays at their first capacity
        (nodes, leaf positions and bricks on the device, nodes and bricks host-visible)."""
        nodes, bricks = self.capacity_estimate()
        return (
            4 * self.mask_entries
            + 4 * (self.count_end + 1)
            + _scan_sums_bytes(self.count_end + 1)
            + 16 * 2  # the two indirect dispatches
            + 4 * (self.levels + 2 + self.cubes)
            + nodes * (8 + 4 + 8)
            + bricks * (8 + 8)
        )

    def largest_classify_buffer(self) -> int:
        nodes, bricks = self.capacity_estimate()
        return max(4 * self.mask_entries, 4 * (self.count_end + 1), 8 * nodes, 8 * bricks)

    def source(self) -> dict[str, int]:
        """The push constant `source` of the SVO kernels (shaders/svo.glsl, BrickSource)."""
        nx, ny, nz = self.shape
        return {
            "cube_levels": self.levels,
            "cubes_per_row": self.cubes_per_row,
            "cube_y": self.cube_y,
            "buffer_row": self.buffer_row,
            "nx": nx,
            "ny": ny,
            "nz": nz,
        }

    @staticmethod
    def whole_grid(shape: tuple[int, int, int]) -> Forest:
        """The one cube of the whole octree: the same Forest for the same shape (its sizes
        computed once for a stream of calls on one grid)."""
        return _whole_grid(tuple(shape))


@functools.lru_cache(maxsize=64)
def _whole_grid(shape: tuple[int, int, int]) -> Forest:
    nx, ny, nz = shape
    padded = octree_shape(max(shape))[0]
    return Forest((nx, ny, nz), cube_side=padded, cube_y=0, buffer_row=0, buffer_rows=ny)


class SVOPipelines:
    """The classification and compaction pipelines, compiled once per device (the scan
    between them is gpu.scan.Scan)."""

    def __init__(self, device: Device):
        def build(kernel: Kernel) -> ComputePipeline:
            return ComputePipeline(device, kernel, COMMON_DEFINES)

        self.classify_grid = build(kernels.CLASSIFY_GRID)
        self.classify_nodes = build(kernels.CLASSIFY_NODES)
        self.write_nodes = build(kernels.WRITE_NODES)
        self.write_bricks = build(kernels.WRITE_BRICKS)
        self.download = build(kernels.DOWNLOAD_ARRAYS)

    def destroy(self) -> None:
        for pipeline in (
            self.classify_grid,
            self.classify_nodes,
            self.write_nodes,
            self.write_bricks,
            self.download,
        ):
            pipeline.destroy()


OctreeArrays = tuple[np.ndarray, np.ndarray, np.ndarray]  # nodes, bricks, level_offsets


@dataclass
class SVOArrays:
    """One conversion's result: the format's arrays, or a forest's for merge.py."""

    nodes: np.ndarray  # uint32 (node_count, 2)
    bricks: np.ndarray  # uint64 (brick_count,)
    level_offsets: np.ndarray  # uint32 (levels + 1,)
    cube_states: np.ndarray | None  # uint32 per cube (a forest of several cubes), else None

    def octree(self) -> OctreeArrays:
        return self.nodes, self.bricks, self.level_offsets


@dataclass
class _Outputs:
    """The compaction's arrays at their present capacity (entries)."""

    nodes: Buffer
    leaves: Buffer
    bricks: Buffer
    host_nodes: Buffer
    host_bricks: Buffer
    node_capacity: int
    brick_capacity: int

    @staticmethod
    def get(pool: BufferPool, nodes: int, bricks: int) -> _Outputs:
        """The pool's output buffers, grown to hold at least `nodes` and `bricks` entries (they
        keep what earlier calls grew them to)."""
        node_buffer = pool.get("svo_nodes", 8 * nodes)
        host_nodes = pool.get("svo_nodes_host", node_buffer.size, host_visible=True)
        leaves = pool.get("svo_leaves", node_buffer.size // 2)
        brick_buffer = pool.get("svo_bricks", 8 * bricks)
        host_bricks = pool.get("svo_bricks_host", brick_buffer.size, host_visible=True)
        return _Outputs(
            node_buffer,
            leaves,
            brick_buffer,
            host_nodes,
            host_bricks,
            min(node_buffer.size, host_nodes.size, 2 * leaves.size) // 8,
            min(brick_buffer.size, host_bricks.size) // 8,
        )


def build_svo_on_gpu(
    scan: Scan,
    svo: SVOPipelines,
    pool: BufferPool,
    sequence: Sequence,
    forest: Forest,
    grid: Binding,
    stats: Stats,
    words: np.ndarray | None = None,
) -> SVOArrays:
    """Convert the bit grid the passes left in `grid` into SVO arrays (or, when given, the
    grid `words`, in the GPU layout of grid.pack_columns, uploaded into `grid` first).

    For the whole octree the arrays are the format's; for a forest of several cubes they are
    the cubes' subtrees, level by level (level 0: the mixed cube roots), in cube order, and
    merge.merge_forests puts them in their places."""
    started = time.perf_counter()
    sequence.begin()
    sequence.mark("start")
    if words is not None:
        sequence.upload(grid.buffer, words)
        sequence.barrier()
    recorded = record_svo(scan, svo, pool, sequence, forest, grid)
    stats.add_gpu(sequence.submit())
    recorded.record_ms = (time.perf_counter() - started) * 1e3  # the submission's, too
    return recorded.finish(stats)


@dataclass
class RecordedSVO:
    """A conversion recorded into a sequence (record_svo): once the sequence has run,
    `finish` reads its arrays."""

    svo: SVOPipelines
    pool: BufferPool
    sequence: Sequence
    forest: Forest
    grid: Binding
    masks: Binding
    counts: Binding
    totals: Buffer
    outputs: _Outputs
    record_ms: float  # host time of the recording, charged to svo_submission by finish

    def finish(self, stats: Stats) -> SVOArrays:
        """The arrays, after the submission that ran the recording; when the GPU's counts
        exceed the outputs' capacity, the compaction runs again into grown buffers (a
        submission of its own)."""
        forest, sequence = self.forest, self.sequence
        started = time.perf_counter()
        level_offsets, node_count, brick_count, cube_states = _read_totals(forest, self.totals)
        outputs = self.outputs
        if node_count > outputs.node_capacity or brick_count > outputs.brick_capacity:
            _log.debug(
                "SVO arrays: %d nodes and %d bricks exceed the capacity of %d and %d; "
                "compacting again",
                node_count,
                brick_count,
                outputs.node_capacity,
                outputs.brick_capacity,
            )
            outputs = _Outputs.get(self.pool, node_count, brick_count)
            sequence.begin()
            sequence.mark("start")
            _record_compaction(
                sequence, self.svo, self.pool, forest, self.grid, self.masks, self.counts,
                self.totals, outputs,
            )  # fmt: skip
            stats.add_gpu(sequence.submit())
        stats.add_host(svo_submission=(time.perf_counter() - started) * 1e3 + self.record_ms)

        started = time.perf_counter()
        node_array = outputs.host_nodes.read(np.uint32, 2 * node_count).reshape(node_count, 2)
        brick_array = outputs.host_bricks.read(np.uint64, brick_count)
        stats.add_host(svo_download=(time.perf_counter() - started) * 1e3)
        return SVOArrays(node_array, brick_array, level_offsets, cube_states)


def record_svo(
    scan: Scan,
    svo: SVOPipelines,
    pool: BufferPool,
    sequence: Sequence,
    forest: Forest,
    grid: Binding,
) -> RecordedSVO:
    """Record the conversion of the bits in `grid` into the sequence (begun, with the grid's
    writes recorded before it or done by an earlier submission); the caller submits it and
    then calls `finish`. Passes that know the grid is final record it in their own last
    submission: one submission and one wait per slab instead of two."""
    started = time.perf_counter()
    levels = forest.levels
    source = forest.source()
    masks = pool.binding("svo_masks", 4 * forest.mask_entries)
    counts = pool.binding("svo_counts", 4 * (forest.count_end + 1))
    totals = pool.get("svo_totals", 4 * (levels + 2 + forest.cubes), host_visible=True)
    outputs = _Outputs.get(pool, *forest.capacity_estimate())

    # The level-0 gaps of the counts (R and C_0 start on whole uvec4s) and the final 0 are
    # part of the scan; nothing else writes them. Nor the leaves and groups past the grid.
    if not forest.covered:
        sequence.fill(masks.buffer, 0, masks.size)
        sequence.fill(counts.buffer, 0, counts.size)
    else:
        if forest.cubes % 4:
            sequence.fill(counts.buffer, 0, 4 * 2 * _quad(forest.cubes))
        sequence.fill(counts.buffer, 0, size=4, offset=4 * forest.count_end)
    sequence.barrier()
    across, rows, chunks = forest.classify_blocks()
    sequence.dispatch(
        svo.classify_grid,
        {"grid": grid, "masks": masks, "counts": counts},
        {
            "source": source,
            "chunk_words": forest.chunk_words,
            "blocks_across": across,
            "chunks": chunks,
        },
        across * rows * chunks,
    )
    sequence.barrier()
    level = levels - 3  # the group level (L - 2) came from the grid
    while level >= 0:
        size = forest.level_sizes[level]
        if size > ONE_GROUP_NODES:
            low, groups = level, workgroups(size, WG_SIZE)
        else:
            low, groups = 0, 1
        sequence.dispatch(
            svo.classify_nodes,
            {"masks": masks, "counts": counts},
            {"source": source, "level_high": level, "level_low": low},
            groups,
        )
        sequence.barrier()
        level = low - 1
    sequence.mark("svo_classify")
    scan.record(sequence, pool, counts.buffer, forest.count_end + 1, "svo_counts")
    sequence.mark("svo_scan")
    _record_compaction(sequence, svo, pool, forest, grid, masks, counts, totals, outputs)
    record_ms = (time.perf_counter() - started) * 1e3
    return RecordedSVO(svo, pool, sequence, forest, grid, masks, counts, totals, outputs, record_ms)


def _record_compaction(
    sequence: Sequence,
    svo: SVOPipelines,
    pool: BufferPool,
    forest: Forest,
    grid: Binding,
    masks: Binding,
    counts: Binding,
    totals: Buffer,
    outputs: _Outputs,
) -> None:
    """Record the nodes, the bricks and the copy of both into host-visible memory; the
    indirect dispatches are sized by the first of them from the scanned counts."""
    brick_dispatch = pool.get("svo_brick_dispatch", 16, INDIRECT)
    download_dispatch = pool.get("svo_download_dispatch", 16, INDIRECT)
    push = {
        "source": forest.source(),
        "node_capacity": outputs.node_capacity,
        "brick_capacity": outputs.brick_capacity,
        "max_groups_x": sequence.device.max_groups_x,
    }
    node_threads = max(forest.mask_entries - _quad(forest.level_sizes[-1]), forest.cubes)
    sequence.dispatch(
        svo.write_nodes,
        {
            "counts": counts,
            "masks": masks,
            "nodes": Binding(outputs.nodes),
            "leaves": Binding(outputs.leaves),
            "totals": Binding(totals),
            "brick_dispatch": Binding(brick_dispatch),
            "download_dispatch": Binding(download_dispatch),
        },
        push,
        workgroups(node_threads, WG_SIZE),
    )
    sequence.barrier()
    sequence.dispatch_indirect(
        svo.write_bricks,
        {
            "counts": counts,
            "grid": grid,
            "nodes": Binding(outputs.nodes),
            "leaves": Binding(outputs.leaves),
            "bricks": Binding(outputs.bricks),
        },
        push,
        brick_dispatch,
    )
    sequence.barrier()
    sequence.mark("svo_write")
    sequence.dispatch_indirect(
        svo.download,
        {
            "counts": counts,
            "nodes": Binding(outputs.nodes),
            "bricks": Binding(outputs.bricks),
            "host_nodes": Binding(outputs.host_nodes),
            "host_bricks": Binding(outputs.host_bricks),
        },
        push,
        download_dispatch,
    )
    sequence.barrier()
    sequence.mark("svo_download")


def _read_totals(forest: Forest, totals: Buffer) -> tuple[np.ndarray, int, int, np.ndarray | None]:
    """(level offsets, node count, brick count, cube states or None) as the GPU wrote them."""
    levels = forest.levels
    values = totals.read(np.uint32, levels + 2 + forest.cubes)
    level_offsets = values[: levels + 1].copy()
    node_count, brick_count = int(values[levels]), int(values[levels + 1])
    cube_states = None if forest.whole else values[levels + 2 :].copy()
    return level_offsets, node_count, brick_count, cube_states
