"""The SVO built on the GPU from the device-resident bit grid (docs/svo-format.md).

Bottom-up classification (bricks from the grid, then each level from its children), an
exclusive scan of the "stored" flags of every level, then compaction writes every stored node
and brick at its place. The host reads back only the per-level totals (to size the outputs)
and the finished arrays, never the dense grid. A grid too large for one buffer is converted
slab by slab, each slab as a forest of cubes that merge.py joins into one tree.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..gpu.buffers import Binding, BufferPool
from ..gpu.commands import Sequence, workgroups
from ..gpu.device import Device
from ..gpu.kernels import COMMON_DEFINES, WG_SIZE, Kernel
from ..gpu.pipelines import ComputePipeline
from ..gpu.scan import Scan
from ..grid import grid_bytes
from ..stats import Stats
from ..svo import octree_levels, padded_resolution
from . import kernels


def octree_shape(n: int) -> tuple[int, int]:
    """(P, L): the padded power-of-two size (at least 8) and the number of internal levels."""
    padded = padded_resolution(n)
    return padded, octree_levels(padded)


@dataclass(frozen=True)
class Forest:
    """Which cubes of the octree one conversion builds, from which grid buffer.

    The cubes of side `cube_side` at cube row `cube_y` (all cubes_per_row^2 of them, in the
    order cx + cubes_per_row * cz), read from a grid buffer holding column rows from
    `buffer_row`. A single cube of side P is the whole octree (`whole`)."""

    shape: tuple[int, int, int]
    cube_side: int
    cube_y: int
    buffer_row: int
    buffer_rows: int

    @property
    def padded(self) -> int:
        return octree_shape(max(self.shape))[0]

    @property
    def whole(self) -> bool:
        return self.cube_side == self.padded

    @property
    def cubes_per_row(self) -> int:
        return self.padded // self.cube_side

    @property
    def cubes(self) -> int:
        return self.cubes_per_row**2

    @property
    def levels(self) -> int:
        """Internal levels inside a cube; the bricks are level `levels`."""
        return octree_levels(self.cube_side)

    @property
    def level_sizes(self) -> list[int]:
        """Entries per level over all cubes: the internal levels, then the bricks."""
        return [self.cubes * 8**level for level in range(self.levels + 1)]

    @property
    def brick_runs(self) -> int:
        """Runs of bricks along z that one classification thread handles (shaders/svo.glsl)."""
        return self.level_sizes[-1] // min(8, 1 << self.levels)

    @property
    def grid_bytes(self) -> int:
        """The grid buffer the forest reads: its rows of columns."""
        nx, _, nz = self.shape
        return grid_bytes(nx, self.buffer_rows, nz)

    def classify_bytes(self) -> int:
        """Device bytes build_svo_on_gpu allocates before it knows the output's size: a state
        and a stored flag per entry of every level, and a mask per run of bricks (the outputs,
        nodes and bricks, are sized by the classification and not planned)."""
        return 8 * sum(self.level_sizes) + 4 * self.brick_runs

    def largest_classify_buffer(self) -> int:
        return 4 * self.level_sizes[-1]

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
        nx, ny, nz = shape
        return Forest((nx, ny, nz), octree_shape(max(shape))[0], 0, 0, ny)


class SVOPipelines:
    """The classification and compaction pipelines, compiled once per device (the scan
    between them is gpu.scan.Scan)."""

    def __init__(self, device: Device):
        def build(kernel: Kernel) -> ComputePipeline:
            return ComputePipeline(device, kernel, COMMON_DEFINES)

        self.classify_bricks = build(kernels.CLASSIFY_BRICKS)
        self.classify_nodes = build(kernels.CLASSIFY_NODES)
        self.write_nodes = build(kernels.WRITE_NODES)
        self.write_bricks = build(kernels.WRITE_BRICKS)

    def destroy(self) -> None:
        for pipeline in (
            self.classify_bricks,
            self.classify_nodes,
            self.write_nodes,
            self.write_bricks,
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


def build_svo_on_gpu(
    device: Device,
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
    levels, cubes = forest.levels, forest.cubes
    unused = pool.binding("unused", 16)
    sizes = forest.level_sizes
    states = [pool.binding(f"svo_states{lv}", 4 * s) for lv, s in enumerate(sizes)]
    stored = [pool.binding(f"svo_stored{lv}", 4 * s) for lv, s in enumerate(sizes)]
    source = forest.source()

    # Submission 1: classify bottom-up, scan each level's stored flags; read back the totals.
    started = time.perf_counter()
    sequence.begin()
    sequence.mark("start")
    if words is not None:
        sequence.upload(grid.buffer, words)
        sequence.barrier()
    runs = forest.brick_runs
    run_mixed = pool.binding("svo_run_mixed", 4 * runs)
    sequence.dispatch(
        svo.classify_bricks,
        {
            "grid": grid,
            "child_states": unused,
            "states": states[levels],
            "stored": stored[levels],
            "run_mixed": run_mixed,
        },
        {"source": source, "count": runs},
        workgroups(runs, WG_SIZE),
    )
    sequence.barrier()
    for level in reversed(range(levels)):
        sequence.dispatch(
            svo.classify_nodes,
            {
                "grid": unused,
                "child_states": states[level + 1],
                "states": states[level],
                "stored": stored[level],
            },
            {"source": source, "count": sizes[level]},
            workgroups(sizes[level], WG_SIZE),
        )
        sequence.barrier()
    sequence.mark("svo_classify")
    totals = pool.get("svo_totals", 4 * (levels + 1))
    sequence.fill(totals, 0)
    cube_staging = None if forest.whole else sequence.download(states[0].buffer, 4 * cubes)
    for level in range(1 if forest.whole else 0, levels + 1):
        total = scan.record(
            sequence, pool, stored[level].buffer, sizes[level], f"svo_stored{level}"
        )
        sequence.copy(total, totals, 4, target_offset=4 * level)
    sequence.barrier()
    sequence.mark("svo_scan")
    totals_staging = sequence.download(totals, 4 * (levels + 1))
    stats.add_gpu(sequence.submit())
    counts = totals_staging.read(np.uint32, levels + 1).astype(np.int64)
    cube_states: np.ndarray | None = None
    if forest.whole:
        counts[0] = 1  # the root is always stored
    else:
        assert cube_staging is not None
        cube_states = cube_staging.read(np.uint32, cubes).copy()
    stats.add_host(svo_classify_submission=(time.perf_counter() - started) * 1e3)

    level_offsets = np.zeros(levels + 1, np.int64)
    level_offsets[1:] = np.cumsum(counts[:levels])
    node_count, brick_count = int(level_offsets[-1]), int(counts[levels])

    # Submission 2: write nodes and bricks at their scanned positions; download them.
    started = time.perf_counter()
    sequence.begin()
    sequence.mark("start")
    if node_count:
        nodes = pool.binding("svo_nodes", 8 * node_count)
        for level in range(levels):
            child_start = int(level_offsets[level + 1]) if level + 1 < levels else 0
            sequence.dispatch(
                svo.write_nodes,
                {
                    "grid": unused,
                    "states": states[level],
                    "positions": stored[level],
                    "child_states": states[level + 1],
                    "child_positions": stored[level + 1],
                    "output": nodes,
                },
                {
                    "source": source,
                    "count": sizes[level],
                    "level_start": int(level_offsets[level]),
                    "child_start": child_start,
                    "is_root": int(forest.whole and level == 0),
                },
                workgroups(sizes[level], WG_SIZE),
            )
    if brick_count:
        bricks = pool.binding("svo_bricks", 8 * brick_count)
        sequence.dispatch(
            svo.write_bricks,
            {
                "grid": grid,
                "states": states[levels],
                "positions": stored[levels],
                "child_states": unused,
                "child_positions": unused,
                "output": bricks,
                "run_mixed": run_mixed,
            },
            {
                "source": source,
                "count": runs,
                "level_start": 0,
                "child_start": 0,
                "is_root": 0,
            },
            workgroups(runs, WG_SIZE),
        )
    sequence.barrier()
    sequence.mark("svo_write")
    nodes_staging = sequence.download(nodes.buffer, 8 * node_count) if node_count else None
    bricks_staging = sequence.download(bricks.buffer, 8 * brick_count) if brick_count else None
    sequence.mark("svo_download")
    stats.add_gpu(sequence.submit())
    stats.add_host(svo_write_submission=(time.perf_counter() - started) * 1e3)

    started = time.perf_counter()
    node_array = (
        nodes_staging.read(np.uint32, 2 * node_count).reshape(node_count, 2)
        if nodes_staging is not None
        else np.zeros((0, 2), np.uint32)
    )
    brick_array = (
        bricks_staging.read(np.uint64, brick_count)
        if bricks_staging is not None
        else np.zeros(0, np.uint64)
    )
    stats.add_host(svo_download=(time.perf_counter() - started) * 1e3)
    return SVOArrays(node_array, brick_array, level_offsets.astype(np.uint32), cube_states)
