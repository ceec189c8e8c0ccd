"""Grids and meshes larger than one step holds: slabs, triangle batches, split parts.

A memory budget forced small makes the same voxelization run in slabs of rows (converted to
SVO forests and merged), batches of triangles and parts of tile rows; every split must give
exactly the arrays of the unsplit run."""

from __future__ import annotations

import numpy as np
import pytest

from voxelizer import VARIANTS, MemoryBudgetError, Voxelizer
from voxelizer.pipeline import binning, layout, passes
from voxelizer.pipeline.plan import MIN_PAIR_BUDGET, make_plan
from voxelizer.reference import solid_columns

from ..helpers import assert_same_svo, assert_same_voxels, load_model
from ..shapes import box, combine, octahedron, reference_voxels


@pytest.fixture(scope="module")
def bunny():
    return load_model("bunny.ply")


@pytest.mark.parametrize(
    "variant",
    [v if v == "branchless" else pytest.param(v, marks=pytest.mark.slow) for v in VARIANTS],
)
def test_slabs_batches_and_parts_equal_the_whole_run_at_256(gpu, bunny, variant):
    """(The quick run's other variants in slabs: test_surface.py, test_face_ids.py and the
    digests of test_outputs_unchanged.py.)"""
    whole = gpu.voxelize(bunny, 256, variant=variant)
    assert whole.stats.counts["slabs"] == 1
    split = gpu.voxelize(bunny, 256, variant=variant, max_memory=4 << 20)
    counts = split.stats.counts
    assert counts["slabs"] >= 2 and counts["parts"] > counts["slabs"]
    assert counts["triangle_batch"] < counts["triangles"]
    assert_same_svo(split, whole)
    dense = gpu.voxelize_dense(bunny, 256, variant=variant, max_memory=4 << 20)
    assert dense.stats.counts["slabs"] >= 2
    assert_same_voxels(dense.to_numpy(), whole.to_numpy())


def test_bitonic_sort_in_parts_equals_the_whole_run(gpu, bunny):
    whole = gpu.voxelize(bunny, 128, sort="bitonic")
    split = gpu.voxelize(bunny, 128, sort="bitonic", max_memory=3 << 20)
    assert split.stats.counts["parts"] > 1
    assert_same_svo(split, whole)


def test_slabs_at_512_equal_the_whole_run(gpu):
    dragon = load_model("dragon.ply")
    whole = gpu.voxelize(dragon, 512)
    split = gpu.voxelize(dragon, 512, max_memory=24 << 20)
    assert split.stats.counts["slab_rows"] < 512
    assert_same_svo(split, whole)


def test_the_budget_bounds_what_the_passes_allocate(gpu, bunny):
    """Buffers of earlier, larger runs stay in the pool; a fresh Voxelizer shows the peak."""
    with Voxelizer() as fresh:
        svo = fresh.voxelize(bunny, 256, max_memory=6 << 20)
        memory = svo.stats.memory
        assert memory.device_peak_bytes + memory.staging_peak_bytes <= 6 << 20


def test_a_budget_too_small_for_one_slab_is_refused(gpu, bunny):
    with pytest.raises(MemoryBudgetError, match="does not fit"):
        gpu.voxelize(bunny, 1024, max_memory=1 << 20)


def test_vote_needs_the_whole_grid_at_once(gpu, bunny):
    with pytest.raises(MemoryBudgetError, match="whole grid at once"):
        gpu.voxelize(bunny, 256, fill_mode="vote", max_memory=4 << 20)


def test_plans_prefer_one_slab_and_halve_rows_to_fit(gpu):
    device = gpu.device
    tiny = {"triangles": 1000, "vertices": 500, "indexed": False}
    whole = make_plan(device, (256, 256, 256), **tiny, budget=64 << 20, svo=True, dense=False)
    assert whole.whole and len(whole.slabs()) == 1
    small = make_plan(device, (256, 256, 256), **tiny, budget=4 << 20, svo=True, dense=False)
    assert not small.whole and small.slab_rows in (8, 16, 32, 64, 128)
    rows = [(s.row_lo, s.row_hi) for s in small.slabs()]
    assert rows[0][0] == 0 and rows[-1][1] == 256
    assert all(a[1] == b[0] for a, b in zip(rows, rows[1:]))


def test_a_slab_that_would_leave_the_pairs_short_is_halved(gpu, bunny):
    """At 3 MiB a slab of 128 rows of a 256x128x256 SVO fits half the budget, but with a
    quarter for the triangles less than MIN_PAIR_BUDGET would be left for the pairs: the
    plan halves the slab instead of refusing, and the voxels stay exact."""
    shape, budget = (256, 128, 256), 3 << 20
    triangles, vertices = len(bunny.faces), len(bunny.vertices)
    plan = make_plan(
        gpu.device, shape, triangles=triangles, vertices=vertices, indexed=False, budget=budget,
        svo=True, dense=False,
    )  # fmt: skip
    assert plan.slab_rows < 128 and plan.pair_budget >= MIN_PAIR_BUDGET
    whole = gpu.voxelize(bunny, shape)
    assert_same_svo(gpu.voxelize(bunny, shape, max_memory=budget), whole)


def test_indexed_variants_batch_triangles_beside_their_vertices(gpu, bunny):
    """Two bunnies' 70k vertices (float32 positions and fine coordinates) take more than the
    triangles' quarter of 7 MiB: the indexed variants still batch thousands of triangles (not
    one at a time, which ran ~10^5 parts), and vertices beyond half the budget are refused in
    words."""
    shift = (bunny.bounds[1] - bunny.bounds[0]) * [0.3, 0.1, 0.2]
    pair = combine((bunny.vertices, bunny.faces), (bunny.vertices + shift, bunny.faces))
    triangles, vertices = len(pair[1]), len(pair[0])
    assert layout.vertex_bytes(True, vertices) > (7 << 20) // 4
    shape, budget = (256, 256, 256), 7 << 20
    plan = make_plan(
        gpu.device, shape, triangles=triangles, vertices=vertices, indexed=True, budget=budget,
        svo=True, dense=False,
    )  # fmt: skip
    assert 1000 < plan.batch_triangles < triangles
    for variant in ("indexed", "combined"):
        split = gpu.voxelize(pair, 256, variant=variant, max_memory=7 << 20)
        assert split.stats.counts["parts"] < 100
        assert_same_svo(split, gpu.voxelize(pair, 256, variant=variant))
    with pytest.raises(MemoryBudgetError, match="indexed variants hold all"):
        gpu.voxelize(pair, 64, variant="indexed", max_memory=3 << 20)


@pytest.mark.slow
def test_a_part_whose_pair_count_could_wrap_32_bits_is_split(gpu, monkeypatch):
    """With the scan's range shrunk to 2^14 pairs, the octahedron's faces (about 2,800 tiles
    each) make the setup pass flag a possible wrap; the bounding-box bound confirms it, the
    window is split until each part's bound fits, and the result stays exact."""
    n = 1024
    solid = octahedron((512.25, 500.5, 520.75), 300.0)
    vertices, faces = solid[0].astype(np.float32), solid[1]
    monkeypatch.setattr(binning, "COUNT_RANGE", 1 << 14)
    windows = []
    count_pairs = passes.PassRunner._count_pairs
    monkeypatch.setattr(
        passes.PassRunner,
        "_count_pairs",
        lambda self, window, batch, grid: (
            windows.append(window) or count_pairs(self, window, batch, grid)
        ),
    )
    voxels = gpu.voxelize_grid(vertices, faces, n)
    assert len(windows) >= 3 and all(w.row_hi - w.row_lo < n for w in windows[1:])
    assert_same_voxels(voxels, reference_voxels(solid, n))


@pytest.mark.slow
def test_2048_cubed_in_slabs_is_exact_for_a_box_and_an_octahedron(gpu):
    """A box with faces on voxel boundaries gives an exactly known solid; the octahedron's
    voxels equal the reference computed on a grid around it. The mesh spans [0, 2048]^3 (a
    zero-area triangle between two corners fixes the placement: voxel = one world unit), and
    rows sampled across every slab are compared."""
    n = 2048
    box_lo, box_hi = np.array([100, 200, 300]), np.array([1900, 1500, 1800])
    centre, radius, margin = np.array([1024.0, 1750.0, 1024.0]), 200.25, 208
    box_vertices, box_faces = box(box_lo, box_hi)
    oct_vertices, oct_faces = octahedron(centre, radius)
    corners = np.array([[0, 0, 0], [n, n, n], [0, 0, 0]], np.float64)
    vertices = np.vstack([box_vertices, oct_vertices, corners])
    faces = np.vstack([box_faces, oct_faces + 8, [[14, 15, 16]]])
    svo = gpu.voxelize((vertices, faces), n)
    assert svo.stats.counts["slabs"] > 1
    assert svo.voxel_size == 1.0 and np.array_equal(svo.origin, [0, 0, 0])

    offset = (centre - margin).astype(np.int64)  # whole voxels: the shift is exact in float32
    local = solid_columns((oct_vertices - offset).astype(np.float32), oct_faces, 2 * margin)
    box_volume = int(np.prod(box_hi - box_lo))
    assert svo.count() == box_volume + int(np.count_nonzero(local))

    i, k = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    for j in (0, 199, 200, 255, 256, 1023, 1499, 1500, 1600, 1750, 1751, 1949, 2047):
        expected = (
            (i >= box_lo[0])
            & (i < box_hi[0])
            & (k >= box_lo[2])
            & (k < box_hi[2])
            & (box_lo[1] <= j < box_hi[1])
        )
        if 0 <= j - offset[1] < 2 * margin:
            expected[offset[0] : offset[0] + 2 * margin, offset[2] : offset[2] + 2 * margin] |= (
                local[:, j - offset[1], :]
            )
        centres = np.stack([i.ravel(), np.full(i.size, j), k.ravel()], axis=1) + 0.5
        assert np.array_equal(svo.contains(centres).reshape(n, n), expected), f"row {j}"
