"""The SVO built on the GPU from the device-resident bit grid (docs/svo-format.md).

Bottom-up classification (bricks from the grid, then each level from its children), an
exclusive scan of the "stored" flags of every level, then compaction writes every stored node
and brick at its place. The host reads back only the per-level totals (to size the outputs)
and the finished arrays, never the dense grid. A grid too large for one buffer is converted
slab by slab, each slab as a forest of cubes that voxelizer/svo_merge.py joins into one tree.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..gpu.buffers import BufferPool
from ..gpu.commands import Binding, Sequence, pack
from ..gpu.compiler import compile_shader
from ..gpu.device import Device
from ..gpu.pipelines import ComputePipeline
from ..grid import column_words
from ..svo import padded_resolution
from .passes import WG_SIZE, PassPipelines, _groups, _record_scan


def octree_shape(n: int) -> tuple[int, int]:
    """(P, L): the padded power-of-two size (at least 8) and the number of internal levels."""
    padded = padded_resolution(n)
    return padded, (padded // 4).bit_length() - 1


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
        return (self.cube_side // 4).bit_length() - 1

    def push(self) -> bytes:
        nx, ny, nz = self.shape
        return pack("7I", self.levels, self.cubes_per_row, self.cube_y, self.buffer_row, nx, ny, nz)

    @staticmethod
    def whole_grid(shape: tuple[int, int, int]) -> Forest:
        return Forest(tuple(shape), octree_shape(max(shape))[0], 0, 0, shape[1])


class SVOPipelines:
    """The classification and compaction pipelines, compiled once per device."""

    def __init__(self, device: Device):
        def build(name: str, bindings: tuple, push_size: int, **defines: int) -> ComputePipeline:
            spirv = compile_shader(name, {"WG_SIZE": WG_SIZE, "TILE_SHIFT": 2, **defines})
            return ComputePipeline(device, spirv, bindings, push_size, f"{name}{defines}")

        self.classify_bricks = build("svo_classify", (0, 1, 2, 3, 4), 32, CLASSIFY_BRICKS=1)
        self.classify_nodes = build("svo_classify", (0, 1, 2, 3), 32, CLASSIFY_BRICKS=0)
        self.write_nodes = build("svo_write", (0, 1, 2, 3, 4, 5), 44, WRITE_BRICKS=0)
        self.write_bricks = build("svo_write", (0, 1, 2, 3, 4, 5, 6), 44, WRITE_BRICKS=1)

    def destroy(self) -> None:
        for pipeline in (
            self.classify_bricks,
            self.classify_nodes,
            self.write_nodes,
            self.write_bricks,
        ):
            pipeline.destroy()


@dataclass
class SVOArrays:
    nodes: np.ndarray  # uint32 (node_count, 2)
    bricks: np.ndarray  # uint64 (brick_count,)
    level_offsets: np.ndarray  # uint32 (levels + 1,)
    cube_states: np.ndarray | None  # uint32 per cube (a forest of several cubes), else None
    gpu_ms: dict[str, float]
    host_ms: dict[str, float]


def build_svo_on_gpu(
    device: Device,
    passes: PassPipelines,
    svo: SVOPipelines,
    pool: BufferPool,
    sequence: Sequence,
    forest: Forest,
    words: np.ndarray | None = None,
) -> SVOArrays:
    """Convert the grid left in the pool's "grid" buffer by the passes into SVO arrays (or,
    when given, the grid `words`, in the GPU layout of grid.pack_columns, uploaded first).

    For the whole octree the arrays are the format's; for a forest of several cubes they are
    the cubes' subtrees, level by level (level 0: the mixed cube roots), in cube order, and
    svo_merge puts them in their places."""
    levels, cubes = forest.levels, forest.cubes
    grid_bytes = forest.shape[0] * forest.buffer_rows * column_words(forest.shape[2]) * 4
    grid = Binding(pool.get("grid", grid_bytes), grid_bytes)
    unused = Binding(pool.get("unused", 16), 16)
    sizes = [cubes * 8**level for level in range(levels + 1)]  # internal levels, then bricks
    states = [Binding(pool.get(f"svo_states{lv}", 4 * s), 4 * s) for lv, s in enumerate(sizes)]
    stored = [Binding(pool.get(f"svo_stored{lv}", 4 * s), 4 * s) for lv, s in enumerate(sizes)]
    source = forest.push()
    host_ms: dict[str, float] = {}

    # Submission 1: classify bottom-up, scan each level's stored flags; read back the totals.
    started = time.perf_counter()
    sequence.begin()
    sequence.mark("start")
    if words is not None:
        sequence.upload(grid.buffer, words)
        sequence.barrier()
    runs = sizes[levels] // min(8, 1 << levels)  # runs of bricks along z (shaders/svo.glsl)
    run_mixed = Binding(pool.get("svo_run_mixed", 4 * runs), 4 * runs)
    sequence.dispatch(
        svo.classify_bricks,
        {0: grid, 1: unused, 2: states[levels], 3: stored[levels], 4: run_mixed},
        source + pack("I", runs),
        _groups(runs, WG_SIZE),
    )
    sequence.barrier()
    for level in reversed(range(levels)):
        sequence.dispatch(
            svo.classify_nodes,
            {0: unused, 1: states[level + 1], 2: states[level], 3: stored[level]},
            source + pack("I", sizes[level]),
            _groups(sizes[level], WG_SIZE),
        )
        sequence.barrier()
    sequence.mark("svo_classify")
    totals = pool.get("svo_totals", 4 * (levels + 1))
    sequence.fill(totals, 0)
    cube_states = None if forest.whole else sequence.download(states[0].buffer, 4 * cubes)
    for level in range(1 if forest.whole else 0, levels + 1):
        total = _record_scan(
            sequence, passes, pool, stored[level].buffer, sizes[level], f"svo_stored{level}"
        )
        sequence.copy(total, totals, 4, target_offset=4 * level)
    sequence.barrier()
    sequence.mark("svo_scan")
    totals_staging = sequence.download(totals, 4 * (levels + 1))
    gpu_ms = sequence.submit()
    counts = totals_staging.read(np.uint32, levels + 1).astype(np.int64)
    if forest.whole:
        counts[0] = 1  # the root is always stored
    else:
        cube_states = cube_states.read(np.uint32, cubes).copy()
    host_ms["svo_classify_submission"] = (time.perf_counter() - started) * 1e3

    level_offsets = np.zeros(levels + 1, np.int64)
    level_offsets[1:] = np.cumsum(counts[:levels])
    node_count, brick_count = int(level_offsets[-1]), int(counts[levels])

    # Submission 2: write nodes and bricks at their scanned positions; download them.
    started = time.perf_counter()
    sequence.begin()
    sequence.mark("start")
    if node_count:
        nodes = Binding(pool.get("svo_nodes", 8 * node_count), 8 * node_count)
        for level in range(levels):
            child_start = int(level_offsets[level + 1]) if level + 1 < levels else 0
            sequence.dispatch(
                svo.write_nodes,
                {
                    0: unused,
                    1: states[level],
                    2: stored[level],
                    3: states[level + 1],
                    4: stored[level + 1],
                    5: nodes,
                },
                source
                + pack(
                    "IIII",
                    sizes[level],
                    int(level_offsets[level]),
                    child_start,
                    int(forest.whole and level == 0),
                ),
                _groups(sizes[level], WG_SIZE),
            )
    if brick_count:
        bricks = Binding(pool.get("svo_bricks", 8 * brick_count), 8 * brick_count)
        sequence.dispatch(
            svo.write_bricks,
            {
                0: grid,
                1: states[levels],
                2: stored[levels],
                3: unused,
                4: unused,
                5: bricks,
                6: run_mixed,
            },
            source + pack("IIII", runs, 0, 0, 0),
            _groups(runs, WG_SIZE),
        )
    sequence.barrier()
    sequence.mark("svo_write")
    nodes_staging = sequence.download(nodes.buffer, 8 * node_count) if node_count else None
    bricks_staging = sequence.download(bricks.buffer, 8 * brick_count) if brick_count else None
    sequence.mark("svo_download")
    for label, ms in sequence.submit().items():
        gpu_ms[label] = gpu_ms.get(label, 0.0) + ms
    host_ms["svo_write_submission"] = (time.perf_counter() - started) * 1e3

    started = time.perf_counter()
    node_array = (
        nodes_staging.read(np.uint32, 2 * node_count).reshape(node_count, 2)
        if node_count
        else np.zeros((0, 2), np.uint32)
    )
    brick_array = (
        bricks_staging.read(np.uint64, brick_count) if brick_count else np.zeros(0, np.uint64)
    )
    host_ms["svo_download"] = (time.perf_counter() - started) * 1e3
    return SVOArrays(
        node_array, brick_array, level_offsets.astype(np.uint32), cube_states, gpu_ms, host_ms
    )
