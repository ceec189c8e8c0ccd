"""fill_mode="winding" where two crossings share a mark (the gap between two voxel centres
of a column): the marking fill records one sign per mark, which cannot hold their sum, so
it flags the tile and the signed fill counts that tile's crossings (shaders/fill.comp,
MARK_CROSSINGS). Coincident, nearly coincident and opposite faces, a face on a voxel centre
beside another in its gap, a soup with every face twice; in one fill round and in several,
in one batch of triangles and across batches, on one slab and on several; in both kernel
shapes (registers and memory): every voxel as the reference's or the closed form's, with
tiles flagged where gaps are shared and none where they are not. The plan counts the
signs' plane."""

from __future__ import annotations

import numpy as np
import pytest
import trimesh

from voxelizer import Voxelizer
from voxelizer.mesh import Mesh
from voxelizer.pipeline.kernels import FILL_PAIRS_PER_ROUND
from voxelizer.pipeline.plan import make_plan
from voxelizer.reference.winding import winding_columns

from ..helpers import assert_same_voxels
from ..shapes import Shape, box, box_expected, combine, inverted, tetrahedron

N = 32
CUBE = [[0, 0, 0], [N, N, N]]  # bounds that make world space grid space (h = 1)

OUTER = ([4, 5, 4.125], [27, 26, 20.25])  # a box of the grid's own units
# Bottoms 0.25 apart in one gap (centres 3.5 and 4.5): inside the inner box w = 2, and a
# single sign per mark would give 1 there and 0 above the inner box's top, inside the outer.
NESTED_BOTTOMS = (OUTER, ([8, 9, 4.375], [20, 21, 12.75]))
# The outer bottom exactly on the centres of layer 16 (its crossing marks voxel 17, the tie
# rule), the inner bottom in the same gap (16.5, 17.5].
ON_A_CENTRE = (([4, 5, 16.5], [27, 26, 28.25]), ([8, 9, 17.25], [20, 21, 24]))


def _open_top(lo, hi) -> Shape:
    """box(lo, hi) without its top face (open: the curtain's c is not 0)."""
    vertices, faces = box(lo, hi)
    return vertices, faces[vertices[faces][:, :, 2].min(axis=1) < hi[2]]


def _sheet(z: float, lo, hi, up: bool) -> Shape:
    """A horizontal square at height z over [lo, hi] in x and y, facing up or down."""
    vertices = np.array(
        [[lo[0], lo[1], z], [hi[0], lo[1], z], [hi[0], hi[1], z], [lo[0], hi[1], z]]
    )
    faces = np.array([[0, 1, 2], [0, 2, 3]])
    return vertices, faces if up else faces[:, ::-1].copy()


def _soup_twice(shape: Shape) -> Shape:
    """Every face twice, as a soup of separate corners."""
    vertices, faces = shape
    corners = vertices[np.concatenate([faces, faces])].reshape(-1, 3)
    return corners, np.arange(len(corners)).reshape(-1, 3)


def _winding(vox: Voxelizer, shape: Shape, grid=N, bounds=None, **options):
    vertices, faces = shape
    bounds = CUBE if bounds is None else bounds
    return vox.voxelize_dense(
        Mesh(vertices, faces), grid, fill_mode="winding", bounds=bounds, **options
    )


def _reference(shape: Shape, grid: tuple[int, int, int] = (N, N, N)) -> np.ndarray:
    vertices, faces = shape
    return winding_columns(vertices.astype(np.float32), faces, grid)


def _flagged(result) -> int:
    return result.stats.counts["winding_flagged_tiles"]


CLOSED_CASES = {
    "nested bottoms": (combine(*(box(*b) for b in NESTED_BOTTOMS)), box_expected(*OUTER, N)),
    "a bottom on a centre": (
        combine(*(box(*b) for b in ON_A_CENTRE)),
        box_expected(*ON_A_CENTRE[0], N),
    ),
    "a box and itself inside out": (combine(box(*OUTER), inverted(box(*OUTER))), None),
    "a cavity given twice and once outward": (
        combine(
            box(*OUTER),
            inverted(box(*NESTED_BOTTOMS[1])),
            inverted(box(*NESTED_BOTTOMS[1])),
            box(*NESTED_BOTTOMS[1]),
        ),
        box_expected(*OUTER, N) & ~box_expected(*NESTED_BOTTOMS[1], N),
    ),
    "a soup of every face twice": (_soup_twice(box(*OUTER)), box_expected(*OUTER, N)),
}


@pytest.mark.parametrize("variant", ["naive", "branchless"])
@pytest.mark.parametrize("case", list(CLOSED_CASES))
def test_closed_shapes_with_shared_marks(shaped: Voxelizer, case: str, variant: str) -> None:
    """Closed shapes (c = 0: w = s exactly) whose crossings share marks: the closed form
    (empty for a box cancelled by itself inside out), the reference, flagged tiles."""
    shape, expected = CLOSED_CASES[case]
    got = _winding(shaped, shape, variant=variant)
    expected = np.zeros((N, N, N), bool) if expected is None else expected
    assert_same_voxels(got.to_numpy(), expected)
    assert_same_voxels(got.to_numpy(), _reference(shape))
    assert _flagged(got) > 0
    svo = shaped.voxelize(Mesh(*shape), N, fill_mode="winding", bounds=CUBE, variant=variant)
    assert_same_voxels(svo.to_numpy(), expected)


OPEN_CASES = {
    "nested open boxes": combine(
        _open_top([4, 5, 6.25], [27, 26, 25]), _open_top([8, 9, 6.375], [20, 21, 18.5])
    ),
    "sheets a sixth of a voxel apart, facing apart, in an open box": combine(
        _open_top([4, 5, 6.25], [27, 26, 25]),
        _sheet(16.25, [4, 4], [28, 28], up=False),
        _sheet(16.4375, [8, 2], [30, 24], up=True),
    ),
    "an open box on a centre and a sheet in its gap": combine(
        _open_top([4, 5, 8.5], [27, 26, 24]), _sheet(9.25, [6, 7], [22, 30], up=False)
    ),
    "an open box given twice": _soup_twice(_open_top([4.25, 5, 6.25], [27, 26.5, 25])),
}


@pytest.mark.parametrize("case", list(OPEN_CASES))
def test_open_shapes_with_shared_marks(shaped: Voxelizer, case: str) -> None:
    """Open shapes (the curtain counts) whose crossings share marks: the reference on every
    voxel, flagged tiles."""
    shape = OPEN_CASES[case]
    got = _winding(shaped, shape)
    assert_same_voxels(got.to_numpy(), _reference(shape))
    assert _flagged(got) > 0 and got.stats.counts["winding_boundary_edges"] > 0


def test_an_ordinary_mesh_flags_no_tile(gpu: Voxelizer) -> None:
    """One crossing per mark: no tile is flagged, and s comes from the signs alone."""
    shape = combine(_open_top([4, 5, 6.25], [27, 26, 25]), box([9, 10, 9.5], [15, 16, 20]))
    got = _winding(gpu, shape)
    assert_same_voxels(got.to_numpy(), _reference(shape))
    assert _flagged(got) == 0 and got.count() > 1000


def _stacked_nested_boxes(copies: int, nz: int) -> tuple[Shape, np.ndarray]:
    """`copies` of two nested boxes over one tile of an (8, 8, nz) grid, their bottoms in one
    gap: 4 pairs of the tile per box, every mark shared by `copies` or 2 `copies` crossings;
    and the outer box's closed form."""
    outer = ([0, 0, 1.125], [4, 4, 0.75 * nz + 0.25])
    inner = ([0, 0, 1.375], [4, 4, 0.5 * nz - 0.25])
    vertices, faces = combine(box(*outer), box(*inner))
    faces = np.concatenate([faces] * copies)
    return (vertices, faces), box_expected(*outer, (8, 8, nz))


@pytest.mark.parametrize(("copies", "nz"), [(1, 8), (4_200, 8), (1, 1024)])
def test_many_crossings_in_one_mark_and_several_rounds(shaped: Voxelizer, copies, nz) -> None:
    """Up to 8,400 crossings in one mark: 4,200 copies of the nested boxes make 33,600
    pairs of one tile, two fill rounds (a mark shared across rounds is found in memory);
    the deep grid's 32 words are the GPU shape's memory path, past its registers."""
    shape, expected = _stacked_nested_boxes(copies, nz)
    bounds = [[0, 0, 0], [8, 8, nz]]
    got = _winding(shaped, shape, grid=(8, 8, nz), bounds=bounds)
    assert_same_voxels(got.to_numpy(), expected)
    assert _flagged(got) > 0
    assert (got.stats.counts["pairs"] > FILL_PAIRS_PER_ROUND) == (copies > 1)


def _tetrahedra(count: int, lo, hi, seed: int) -> Shape:
    """`count` small closed tetrahedra at random in the box [lo, hi]."""
    rng = np.random.default_rng(seed)
    corners = rng.uniform(lo, hi, (count, 1, 3)) + rng.uniform(0, 2, (count, 4, 3))
    return combine(*(tetrahedron(*c) for c in corners))


def test_a_mark_shared_across_batches_of_triangles(shaped: Voxelizer) -> None:
    """The two nested boxes first and last among 4,000 other triangles: under a budget that
    batches the triangles, their shared marks are made by different batches (the later one
    finds the earlier one's mark in memory), and the signed fill groups every batch again."""
    a, b = ([4, 5, 4.125], [27, 26, 40.25]), ([8, 9, 4.375], [20, 21, 12.75])
    filler = _tetrahedra(1_000, [36, 4, 4], [60, 60, 60], seed=5)
    shape = combine(box(*a), filler, box(*b))
    bounds = [[0, 0, 0], [64, 64, 64]]
    whole = _winding(shaped, shape, grid=64, bounds=bounds)
    batched = _winding(shaped, shape, grid=64, bounds=bounds, max_memory=2 << 20)
    last_batch = len(shape[1]) - len(box(*b)[1])  # the first triangle of box b
    assert batched.stats.counts["triangle_batch"] <= last_batch  # a and b: other batches
    assert batched.stats.counts["parts"] >= 2 and _flagged(batched) > 0
    expected = _reference(shape, (64, 64, 64))
    assert_same_voxels(whole.to_numpy(), expected)
    assert_same_voxels(batched.to_numpy(), expected)
    assert expected[8:20, 9:21, 13:40].all()  # the outer box above the inner one


@pytest.mark.slow
def test_shared_marks_on_several_slabs(gpu: Voxelizer) -> None:
    """A sphere and its copy a quarter voxel higher (w = 2 inside both, 1 inside one: their
    union), most bottoms and tops of the two in one gap, on slabs of rows with batches of
    triangles, dense and as an SVO: the reference's voxels."""
    ball = trimesh.creation.icosphere(subdivisions=5)
    vertices = np.asarray(ball.vertices) * [120, 120, 60] + [128.3, 127.8, 64.1]
    faces = np.asarray(ball.faces, np.int64)
    shape = combine((vertices, faces), (vertices + [0, 0, 0.25], faces))
    grid = (256, 256, 128)
    bounds = [[0, 0, 0], list(grid)]
    whole = _winding(gpu, shape, grid=grid, bounds=bounds)
    small = _winding(gpu, shape, grid=grid, bounds=bounds, max_memory=4 << 20)
    svo = gpu.voxelize(Mesh(*shape), grid, fill_mode="winding", bounds=bounds, max_memory=4 << 20)
    assert whole.stats.counts["slabs"] == 1 and small.stats.counts["slabs"] > 1
    assert small.stats.counts["parts"] > 2 * small.stats.counts["slabs"]  # batches
    assert _flagged(small) > 100
    expected = _reference(shape, grid)
    assert_same_voxels(whole.to_numpy(), expected)
    assert_same_voxels(small.to_numpy(), expected)
    assert_same_voxels(svo.to_numpy(), expected)


def test_the_plan_counts_the_signs(gpu: Voxelizer) -> None:
    """The signs' plane beside the grid: under a tight budget the slabs of fill_mode
    "winding" get fewer rows than a fill with the grid alone; 8192³ still plans."""
    device, shape = gpu.device, (256, 256, 256)

    def rows(budget: int, planes: int) -> int:
        plan = make_plan(
            device, shape, triangles=1000, vertices=500, indexed=False, budget=budget,
            svo=True, dense=False, grid_planes=planes,
        )  # fmt: skip
        return plan.slab_rows

    assert rows(64 << 20, 2) == 256
    budgets = [size << 20 for size in (3, 4, 6, 8, 16)]
    assert all(rows(budget, 2) <= rows(budget, 1) for budget in budgets)
    assert rows(4 << 20, 2) < rows(4 << 20, 1) and rows(8 << 20, 2) < rows(8 << 20, 1)
    huge = make_plan(
        device, (8192,) * 3, triangles=10**6, vertices=5 * 10**5, indexed=False, budget=None,
        svo=True, dense=False, grid_planes=2,
    )  # fmt: skip
    assert huge.slab_rows >= 8 and len(huge.slabs()) == 8192 // huge.slab_rows
