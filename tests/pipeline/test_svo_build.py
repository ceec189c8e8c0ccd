"""The SVO build on the GPU (pipeline/svo_build.py) from given bit grids, against the CPU build.

Grids are uploaded straight into the build (the path fill_mode="vote" and "union" take), so
any voxels can be tried: empty and full grids, single voxels on brick, leaf, word and column
edges, noise that makes every brick mixed (more than the arrays' first capacity: the second
compaction), shapes whose columns are not whole uvec4s, a grid of one leaf (L = 1), and
forests of cubes of side 8, 16 and 32, one per row of slabs, merged as runner.py merges
them. Every result must equal SVO.from_dense array for array."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest

from voxelizer import SVO
from voxelizer.gpu.buffers import BufferPool
from voxelizer.gpu.commands import Sequence
from voxelizer.gpu.scan import Scan
from voxelizer.grid import grid_bytes, pack_columns
from voxelizer.pipeline.merge import merge_forests
from voxelizer.pipeline.svo_build import Forest, SVOArrays, SVOPipelines, build_svo_on_gpu
from voxelizer.placement import GridPlacement
from voxelizer.stats import Stats

from ..helpers import assert_same_svo


@dataclass
class Builder:
    """What build_svo_on_gpu needs, on the session's device, with a pool of its own."""

    pool: BufferPool
    sequence: Sequence
    scan: Scan
    pipelines: SVOPipelines

    def build(self, voxels: np.ndarray, forest: Forest) -> SVOArrays:
        rows = voxels[:, forest.buffer_row : forest.buffer_row + forest.buffer_rows]
        nx, _, nz = voxels.shape
        grid = self.pool.binding("grid", grid_bytes(nx, forest.buffer_rows, nz))
        return build_svo_on_gpu(
            self.scan, self.pipelines, self.pool, self.sequence, forest, grid, Stats(),
            pack_columns(rows),
        )  # fmt: skip

    def whole(self, voxels: np.ndarray) -> SVO:
        arrays = self.build(voxels, Forest.whole_grid(voxels.shape))
        assert arrays.cube_states is None
        return _svo(voxels.shape, *arrays.octree())

    def slabs(self, voxels: np.ndarray, cube_side: int) -> SVO:
        """Slabs of `cube_side` rows, each a forest, merged (as runner.Pipeline does)."""
        ny = voxels.shape[1]
        forests = []
        for row in range(0, ny, cube_side):
            forest = Forest(
                voxels.shape, cube_side, row // cube_side, row, min(cube_side, ny - row)
            )
            forests.append((forest.cube_y, self.build(voxels, forest)))
        return _svo(voxels.shape, *merge_forests(voxels.shape, cube_side, forests))


def _svo(shape: tuple[int, int, int], nodes, bricks, level_offsets) -> SVO:
    placement = GridPlacement(shape, np.zeros(3), 1.0)
    return SVO(nodes, bricks, level_offsets, placement)


@pytest.fixture(scope="module")
def builder(gpu) -> Iterator[Builder]:
    """One for the module: its pipelines are compiled once, and each test's grids go through
    a pool that earlier, larger grids have used."""
    device = gpu.device
    pool = BufferPool(device)
    made = Builder(pool, Sequence(device, pool), Scan(device), SVOPipelines(device))
    yield made
    made.sequence.destroy()
    made.scan.destroy()
    made.pipelines.destroy()
    pool.destroy()


def expected(voxels: np.ndarray) -> SVO:
    return SVO.from_dense(voxels, GridPlacement(voxels.shape, np.zeros(3), 1.0))


def ball(shape: tuple[int, int, int], centre, radius: float) -> np.ndarray:
    i, j, k = np.indices(shape, sparse=True)
    return (i + 0.5 - centre[0]) ** 2 + (j + 0.5 - centre[1]) ** 2 + (
        k + 0.5 - centre[2]
    ) ** 2 < radius**2


def grids(shape: tuple[int, int, int]) -> dict[str, np.ndarray]:
    """Voxels of every kind on a grid of `shape`."""
    rng = np.random.default_rng(sum(shape))
    n = np.array(shape)
    edges = np.zeros(shape, bool)
    for corner in [(0, 0, 0), tuple(n - 1), (3, 4, 7), (4, 3, 8), (7, 8, 31), (8, 7, 32)]:
        if all(c < s for c, s in zip(corner, shape)):
            edges[corner] = True
    full_but_one = np.ones(shape, bool)
    full_but_one[tuple(n // 2)] = False
    half = np.zeros(shape, bool)
    half[:, :, : shape[2] // 2] = True
    return {
        "empty": np.zeros(shape, bool),
        "full": np.ones(shape, bool),
        "full_but_one": full_but_one,
        "edges": edges,
        "half": half,
        "ball": ball(shape, n * 0.45, 0.4 * n.min()),
        "noise": rng.random(shape) < 0.3,
        "blocks": np.kron(rng.random(tuple(-(-n // 8))) < 0.5, np.ones((8, 8, 8), bool))[
            : shape[0], : shape[1], : shape[2]
        ],
    }


SHAPES = [
    (8, 8, 8),  # one leaf: the root's children are bricks (L = 1)
    (16, 16, 16),  # the root is the group node (L = 2)
    (32, 32, 32),
    (64, 64, 64),
    (128, 128, 128),  # columns of 4 words: whole uvec4s
    (24, 8, 12),  # padding along every axis
    (12, 100, 36),  # the longest side along y; columns of 2 words
    (132, 20, 200),  # columns of 7 words: read word by word
    (40, 36, 256),  # columns of 8 words, P larger than x and y
]


KINDS = list(grids((8, 8, 8)))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_whole_grids_equal_the_cpu_build(builder, shape, kind):
    voxels = grids(shape)[kind]
    got = builder.whole(voxels)
    assert_same_svo(got, expected(voxels))
    assert got.count() == int(np.count_nonzero(voxels))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("shape", "cube_side"),
    [((64, 64, 64), 8), ((64, 40, 64), 16), ((40, 128, 24), 32), ((128, 128, 128), 16)],
    ids=["64-in-8", "64x40x64-in-16", "40x128x24-in-32", "128-in-16"],
)
def test_forests_of_slabs_merge_to_the_cpu_build(builder, shape, cube_side, kind):
    voxels = grids(shape)[kind]
    assert_same_svo(builder.slabs(voxels, cube_side), expected(voxels))


def test_arrays_past_their_first_capacity_are_compacted_again(builder):
    """Noise makes every brick mixed: far more than the first capacity; the second
    compaction writes all of them, and the grown arrays serve the next call at once."""
    voxels = np.random.default_rng(7).random((64, 64, 64)) < 0.5
    forest = Forest.whole_grid(voxels.shape)
    want = expected(voxels)
    nodes, bricks = forest.capacity_estimate()
    assert want.brick_count > bricks and want.node_count <= nodes
    for _ in range(2):
        assert_same_svo(builder.whole(voxels), want)
    assert builder.pool.sizes(host_visible=True)["svo_bricks_host"] >= 8 * want.brick_count


def test_a_smaller_grid_after_a_larger_one_reads_nothing_stale(builder):
    """The pool's buffers keep a larger grid's masks, counts and arrays; a smaller or
    emptier grid built next must not pick any of them up."""
    large = np.random.default_rng(3).random((128, 128, 128)) < 0.4
    builder.whole(large)
    for voxels in (ball((64, 64, 64), (30, 31, 33), 20.0), np.zeros((64, 64, 64), bool)):
        assert_same_svo(builder.whole(voxels), expected(voxels))


def test_forests_past_the_grid_read_no_stale_masks(builder):
    """Where a forest's cubes extend past the grid (x and z padded to P, a last slab of fewer
    rows) the classification reads only the grid's blocks and the rest of the masks and
    counts must be cleared: a full grid built first leaves every entry set."""
    builder.whole(np.ones((128, 128, 128), bool))
    voxels = grids((40, 100, 24))["ball"]
    forest = Forest(voxels.shape, 32, 3, 96, 4)
    assert not forest.covered
    assert_same_svo(builder.slabs(voxels, 32), expected(voxels))
