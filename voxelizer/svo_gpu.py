"""The SVO built on the GPU from the device-resident bit grid (docs/svo-format.md).

Bottom-up classification (bricks from the grid, then each level from its children), an
exclusive scan of the "stored" flags of every level, then compaction writes every stored node
and brick at its place. The host reads back only the per-level totals (to size the outputs)
and the finished arrays, never the dense grid.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .gpu.buffers import BufferPool
from .gpu.commands import Binding, Sequence, pack
from .gpu.compiler import compile_shader
from .gpu.device import Device
from .gpu.pipelines import ComputePipeline
from .grid import column_words
from .passes import WG_SIZE, PassPipelines, _groups, _record_scan
from .svo import padded_resolution


def octree_shape(n: int) -> tuple[int, int]:
    """(P, L): the padded power-of-two size (at least 8) and the number of internal levels."""
    padded = padded_resolution(n)
    return padded, (padded // 4).bit_length() - 1


class SVOPipelines:
    """The classification and compaction pipelines, compiled once per device."""

    def __init__(self, device: Device):
        def build(name: str, bindings: tuple, push_size: int, **defines: int) -> ComputePipeline:
            spirv = compile_shader(name, {"WG_SIZE": WG_SIZE, "TILE_SHIFT": 2, **defines})
            return ComputePipeline(device, spirv, bindings, push_size, f"{name}{defines}")

        self.classify_bricks = build("svo_classify", (0, 1, 2, 3), 8, CLASSIFY_BRICKS=1)
        self.classify_nodes = build("svo_classify", (0, 1, 2, 3), 8, CLASSIFY_BRICKS=0)
        self.write_nodes = build("svo_write", (0, 1, 2, 3, 4, 5), 20, WRITE_BRICKS=0)
        self.write_bricks = build("svo_write", (0, 1, 2, 3, 4, 5), 20, WRITE_BRICKS=1)

    def destroy(self) -> None:
        for pipeline in (self.classify_bricks, self.classify_nodes, self.write_nodes,
                         self.write_bricks):
            pipeline.destroy()


@dataclass
class SVOArrays:
    nodes: np.ndarray  # uint32 (node_count, 2)
    bricks: np.ndarray  # uint64 (brick_count,)
    level_offsets: np.ndarray  # uint32 (L + 1,)
    gpu_ms: dict[str, float]
    host_ms: dict[str, float]


def build_svo_on_gpu(device: Device, passes: PassPipelines, svo: SVOPipelines, pool: BufferPool,
                     sequence: Sequence, n: int, words: np.ndarray | None = None) -> SVOArrays:
    """Convert the n^3 grid left in the pool's "grid" buffer by run_passes into SVO arrays,
    or, when given, the grid `words` (GPU layout, see grid.pack_columns) uploaded first."""
    padded, levels = octree_shape(n)
    grid_bytes = n * n * column_words(n) * 4
    grid = Binding(pool.get("grid", grid_bytes), grid_bytes)
    unused = Binding(pool.get("unused", 16), 16)
    sizes = [8 ** level for level in range(levels + 1)]  # internal levels, then the bricks
    states = [Binding(pool.get(f"svo_states{lv}", 4 * s), 4 * s) for lv, s in enumerate(sizes)]
    stored = [Binding(pool.get(f"svo_stored{lv}", 4 * s), 4 * s) for lv, s in enumerate(sizes)]
    host_ms: dict[str, float] = {}

    # Submission 1: classify bottom-up, scan each level's stored flags; read back the totals.
    started = time.perf_counter()
    sequence.begin()
    sequence.mark("start")
    if words is not None:
        sequence.upload(grid.buffer, words)
        sequence.barrier()
    sequence.dispatch(svo.classify_bricks, {0: grid, 1: unused, 2: states[levels], 3: stored[levels]},
                      pack("II", sizes[levels], n), _groups(sizes[levels], WG_SIZE))
    sequence.barrier()
    for level in reversed(range(levels)):
        sequence.dispatch(svo.classify_nodes,
                          {0: unused, 1: states[level + 1], 2: states[level], 3: stored[level]},
                          pack("II", sizes[level], n), _groups(sizes[level], WG_SIZE))
        sequence.barrier()
    sequence.mark("svo_classify")
    totals = pool.get("svo_totals", 4 * (levels + 1))
    sequence.fill(totals, 0)
    for level in range(1, levels + 1):
        total = _record_scan(sequence, passes, pool, stored[level].buffer, sizes[level],
                             f"svo_stored{level}")
        sequence.copy(total, totals, 4, target_offset=4 * level)
    sequence.barrier()
    sequence.mark("svo_scan")
    totals_staging = sequence.download(totals, 4 * (levels + 1))
    gpu_ms = sequence.submit()
    counts = totals_staging.read(np.uint32, levels + 1).astype(np.int64)
    counts[0] = 1  # the root is always stored
    host_ms["svo_classify_submission"] = (time.perf_counter() - started) * 1e3

    level_offsets = np.zeros(levels + 1, np.int64)
    level_offsets[1:] = np.cumsum(counts[:levels])
    node_count, brick_count = int(level_offsets[-1]), int(counts[levels])

    # Submission 2: write nodes and bricks at their scanned positions; download them.
    started = time.perf_counter()
    sequence.begin()
    sequence.mark("start")
    nodes = Binding(pool.get("svo_nodes", 8 * node_count), 8 * node_count)
    for level in range(levels):
        child_start = int(level_offsets[level + 1]) if level + 1 < levels else 0
        sequence.dispatch(svo.write_nodes,
                          {0: unused, 1: states[level], 2: stored[level], 3: states[level + 1],
                           4: stored[level + 1], 5: nodes},
                          pack("IIIII", sizes[level], n, int(level_offsets[level]), child_start,
                               int(level == 0)),
                          _groups(sizes[level], WG_SIZE))
    if brick_count:
        bricks = Binding(pool.get("svo_bricks", 8 * brick_count), 8 * brick_count)
        sequence.dispatch(svo.write_bricks,
                          {0: grid, 1: states[levels], 2: stored[levels], 3: unused, 4: unused,
                           5: bricks},
                          pack("IIIII", sizes[levels], n, 0, 0, 0), _groups(sizes[levels], WG_SIZE))
    sequence.barrier()
    sequence.mark("svo_write")
    nodes_staging = sequence.download(nodes.buffer, 8 * node_count)
    bricks_staging = sequence.download(bricks.buffer, 8 * brick_count) if brick_count else None
    sequence.mark("svo_download")
    for label, ms in sequence.submit().items():
        gpu_ms[label] = gpu_ms.get(label, 0.0) + ms
    host_ms["svo_write_submission"] = (time.perf_counter() - started) * 1e3

    started = time.perf_counter()
    node_array = nodes_staging.read(np.uint32, 2 * node_count).reshape(node_count, 2)
    brick_array = (bricks_staging.read(np.uint64, brick_count) if brick_count
                   else np.zeros(0, np.uint64))
    host_ms["svo_download"] = (time.perf_counter() - started) * 1e3
    return SVOArrays(node_array, brick_array, level_offsets.astype(np.uint32), gpu_ms, host_ms)
