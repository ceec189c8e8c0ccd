"""How close each pass runs to the memory bandwidth of the device.

A pass's bytes are the least it must move through device memory: each input read once, each
output written once, sized from the workload counts. Dividing them by the device bandwidth
gives the time the pass would take if memory were the only limit; that time over the measured
time is the bandwidth fraction (1.0 = running at the roofline). Atomics, caches and the extra
rounds of an algorithm (the log^2 n steps of the bitonic sort) are not counted: they are what
the fraction exposes. Uploads and downloads cross the host link, not device memory, and are
left out.

Sizes (T triangles, V vertices, P tile-triangle pairs, K non-empty tiles, S = (N/4)^2 tile
keys, G bytes of the bit grid, R bytes of a triangle record, 8 bytes per pair, 16 per tile):

    setup         geometry (36 T soup, 12 T + 12 V indexed) in; R T records + 4 T counts out
    scan          4 T in, 4 T out
    emit          R T + 4 T in; 8 P out
    sort          8 P in, 8 P out; counting sort also its histogram, 4 S out and 4 S in
    mark          counting: 4 S in, 4 S out; bitonic: 8 P in, 4 P out
    compact       flags (4 S counting, 4 P bitonic) in; 16 K out
    fill          8 P pairs + R P records + 16 K tiles in; G out
    svo_classify  G in; 4 bytes of masks per internal node, 4 per count out (the counts: one
                  per node whose children are nodes, one per group of 8 leaves, the root's)
    svo_scan      the counts, 4 bytes each, in and out
    svo_write     masks and counts of the nodes whose children are nodes, 8 bytes each, and
                  8 bytes of voxels per stored brick in; 8 per node and 8 per brick out
"""

from __future__ import annotations

import re

from voxelizer.gpu.kernels import TILE_SHIFT
from voxelizer.grid import grid_bytes as grid_size_bytes
from voxelizer.pipeline.layout import PAIR_BYTES, RECORD_BYTES, TILE_BYTES
from voxelizer.pipeline.svo_build import octree_shape

DEVICE_BANDWIDTH_GBPS = {"H200": 4800.0, "H100": 3350.0}  # HBM, from the data sheets
TRANSFERS = ("upload", "download", "svo_download")  # host link, not device memory


def device_bandwidth(device_name: str) -> float | None:
    """Peak memory bandwidth in GB/s for a device we know by name, else None (no column)."""
    for key, gbps in DEVICE_BANDWIDTH_GBPS.items():
        if re.search(key, device_name, re.IGNORECASE):
            return gbps
    return None


def pass_bytes(
    grid: int,
    triangles: int,
    vertices: int,
    pairs: int,
    tiles: int,
    indexed: bool,
    sort: str,
    svo_nodes: int | None = None,
    svo_bricks: int | None = None,
) -> dict[str, int]:
    """Least bytes each pass reads plus writes in device memory (see the module docstring)."""
    t, p, k = triangles, pairs, tiles
    keys = (grid >> TILE_SHIFT) ** 2
    grid_bytes = grid_size_bytes(grid, grid, grid)
    geometry = 12 * t + 12 * vertices if indexed else 36 * t
    counting = sort == "counting"
    flags = keys if counting else p
    estimate = {
        "setup": geometry + RECORD_BYTES * t + 4 * t,
        "scan": 8 * t,
        "emit": RECORD_BYTES * t + 4 * t + PAIR_BYTES * p,
        "sort": 2 * PAIR_BYTES * p + (8 * keys if counting else 0),
        "mark": 8 * keys if counting else PAIR_BYTES * p + 4 * p,
        "compact": 4 * flags + TILE_BYTES * k,
        "fill": (PAIR_BYTES + RECORD_BYTES) * p + TILE_BYTES * k + grid_bytes,
    }
    if svo_nodes is not None and svo_bricks is not None:
        _, levels = octree_shape(grid)
        internal = sum(8**level for level in range(levels))
        upper = sum(8**level for level in range(levels - 1))  # their children are nodes
        counts = 1 + upper + 8 ** max(levels - 2, 0)  # shaders/svo.glsl, count_start
        estimate["svo_classify"] = grid_bytes + 4 * internal + 4 * counts
        estimate["svo_scan"] = 8 * counts
        estimate["svo_write"] = 8 * upper + 8 * svo_bricks + 8 * svo_nodes + 8 * svo_bricks
    return estimate


def bandwidth_fractions(
    estimate: dict[str, int], gpu_ms: dict[str, float], gbps: float
) -> dict[str, float]:
    """Fraction of `gbps` each timed pass reaches, and "total" over all of them together."""
    fractions, moved, spent = {}, 0, 0.0
    for name, nbytes in estimate.items():
        ms = gpu_ms.get(name, 0.0)
        if ms > 0:
            fractions[name] = nbytes / (gbps * 1e9 * ms * 1e-3)
            moved, spent = moved + nbytes, spent + ms
    if spent > 0:
        fractions["total"] = moved / (gbps * 1e9 * spent * 1e-3)
    return fractions
