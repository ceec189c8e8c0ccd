"""Grids over 8192 a side: the sparse path (pipeline/sparse_slabs.py), checked against dense
runs of the same placement (through `bounds`) and against the exact reference's columns;
the .svo file streamed as the octree is made; budgets refused before the work.

The meshes are small and placed in a small part of the large grid (through `bounds`), so
that the surface stays small. The parity runs up every stack of 32 x 32 columns of the grid
(surface or not), a cost that follows the grid's cubes and takes minutes for a whole
16384^3 grid on lavapipe; so the grids here are slabs of it (`slab_of_the_grid`): the same
voxels, 16384 (or 32768) along two axes and a few hundred along x or y."""

from __future__ import annotations

import numpy as np
import pytest
import trimesh

import voxelizer
from voxelizer.errors import GridError, MemoryBudgetError, OutputError
from voxelizer.io import load_mesh
from voxelizer.io.svo_file import read_svo
from voxelizer.placement import GridPlacement
from voxelizer.reference.solid import solid_column_samples

N = 16384
H = 2.0**-6  # the voxel side: the grid spans [-128, 128) on each axis
HALF = N * H / 2
BOUNDS = [[-HALF] * 3, [HALF] * 3]


def dyadic(vertices: np.ndarray, bits: int = 12) -> np.ndarray:
    """Vertices rounded to multiples of 2^-bits: exact on both lattices (FINE_BITS 49 and 46),
    so the dense and the sparse runs decide the same coordinates."""
    return np.round(np.asarray(vertices, np.float64) * 2.0**bits) / 2.0**bits


def sphere(centre: tuple[float, float, float], radius: float) -> trimesh.Trimesh:
    mesh = trimesh.creation.icosphere(subdivisions=3, radius=radius)
    return trimesh.Trimesh(dyadic(mesh.vertices + centre), mesh.faces, process=False)


def thin_plate(centre: tuple[float, float, float]) -> trimesh.Trimesh:
    """A plate 6 x 5 world units (384 x 320 voxels) and 0.04 thick (2.56 voxels), tilted
    about x and y so that its crossings fall at every height of its columns."""
    plate = trimesh.creation.box(extents=(6.0, 5.0, 0.04))
    plate.apply_transform(trimesh.transformations.euler_matrix(0.05, -0.03, 0.0))
    return trimesh.Trimesh(dyadic(plate.vertices + centre), plate.faces, process=False)


def slab_of_the_grid(
    axis: int, first: int, thickness: int, n: int = N, h: float = H
) -> tuple[tuple[int, int, int], list[np.ndarray], np.ndarray]:
    """The voxels first .. first + thickness along `axis` (x or y) of the n^3 grid spanning
    [-HALF, HALF), every voxel along the two others, as a grid of their own: its shape, its
    bounds and the index in the n^3 grid of its voxel 0. n along z and the other axis keeps
    the large grid's lattice (FINE_BITS 46), slabs and octree; the thin axis keeps its stacks
    few."""
    shape = [n, n, n]
    shape[axis] = thickness
    offset = np.zeros(3, np.int64)
    offset[axis] = first
    low = -HALF + offset * h
    return (shape[0], shape[1], shape[2]), [low, low + np.array(shape) * h], offset


def voxel_of(world: float) -> int:
    """The index of the voxel whose low face is at `world` (a multiple of H)."""
    index = (world + HALF) / H
    assert index == int(index)
    return int(index)


def dense_beside(gpu, mesh: trimesh.Trimesh, lo: np.ndarray, sides: np.ndarray):
    """The dense run of the voxels lo .. lo + sides of the large grid: a grid of `sides`
    placed on exactly those voxels (bounds from their faces; the voxel side is H again)."""
    low = -HALF + lo * H
    return gpu.voxelize_dense(mesh, tuple(int(s) for s in sides), bounds=[low, low + sides * H])


def crops_match(svo, dense, lo: np.ndarray, boxes: list[tuple[tuple, tuple]]) -> None:
    voxels = dense.to_numpy()
    for a, b in boxes:
        got = svo.to_numpy(box=(tuple(lo + a), tuple(lo + b)))
        want = voxels[a[0] : b[0], a[1] : b[1], a[2] : b[2]]
        assert np.array_equal(got, want), f"box {a}..{b}: {int((got != want).sum())} differ"


@pytest.mark.slow
@pytest.mark.parametrize(
    "mesh, corner, sides, axis, margin, thickness",
    [
        (sphere((-100.5, 3.25, 90.0), 2.0), (-103.0, 0.75, 87.5), (320, 320, 320), 0, 77, 512),
        (thin_plate((17.0, -60.0, 33.0)), (13.5, -63.5, 31.5), (448, 448, 192), 1, 45, 544),
    ],
    ids=["sphere", "thin-plate"],
)
def test_a_16384_grid_equals_dense_runs_of_the_same_voxels(
    gpu, mesh, corner, sides, axis, margin, thickness
):
    """The whole solid (its count) and crops through it (cube faces, the surface, the inside)
    against the dense run of the box that holds the mesh, voxel for voxel; the large grid is
    a slab of the 16384^3 one, across x (sphere) or y (plate), the box `margin` voxels in."""
    lo = np.array([voxel_of(c) for c in corner])
    shape, bounds, offset = slab_of_the_grid(axis, int(lo[axis]) - margin, thickness)
    svo = gpu.voxelize(mesh, shape, bounds=bounds)
    assert svo.shape == shape and svo.voxel_size == H
    sides = np.array(sides)
    dense = dense_beside(gpu, mesh, lo, sides)
    assert dense.count() > 0
    assert svo.count() == dense.count()  # nothing set outside the dense box
    assert svo.stats.counts["surface_cubes"] > 0 and svo.stats.counts["slabs"] > 1
    middle = tuple(int(s) // 2 for s in sides)
    crops_match(
        svo,
        dense,
        lo - offset,
        [
            ((0, 0, 0), tuple(int(s) for s in sides)),
            ((1, 2, 3), (97, 130, 61)),  # crossing cube faces (32 voxels) in every direction
            ((middle[0] - 40, middle[1] - 33, 0), (middle[0] + 41, middle[1] + 7, int(sides[2]))),
            ((middle[0], middle[1], middle[2]), (middle[0] + 1, middle[1] + 1, middle[2] + 1)),
        ],
    )


def test_a_long_thin_grid_over_8192_equals_the_dense_run_of_the_same_voxels(gpu):
    """The sparse path on a grid over 8192 along x alone (16384 x 96 x 96: quick on lavapipe,
    where the cubes above take seconds): a sphere against the dense run of the 96^3 voxels
    around it, voxel for voxel."""
    side = 96
    mesh = sphere((10.0, 0.0, 0.0), 0.625)  # 80 voxels across
    low = np.array([-HALF, -side * H / 2, -side * H / 2])
    svo = gpu.voxelize(mesh, (N, side, side), bounds=[low, low + np.array([N, side, side]) * H])
    assert svo.shape == (N, side, side) and svo.voxel_size == H
    assert svo.stats.counts["surface_cubes"] > 0  # the sparse path's cubes
    corner = np.array([10.0 - side * H / 2, low[1], low[2]])
    dense = gpu.voxelize_dense(mesh, (side,) * 3, bounds=[corner, corner + side * H])
    assert svo.count() == dense.count() > 0  # nothing set outside the dense box
    crops_match(
        svo,
        dense,
        np.array([voxel_of(corner[0]), 0, 0]),
        [((0, 0, 0), (side,) * 3), ((1, 2, 3), (65, 90, 40)), ((31, 0, 47), (33, 96, 49))],
    )


@pytest.mark.slow
def test_a_whole_16384_cube_equals_the_dense_run_of_the_same_voxels(gpu):
    """The one grid over 8192 along all three axes at once (the slabs above are over it along
    two): a small sphere against the dense run of the 96^3 voxels around it. About a minute
    on lavapipe, where the parity's walk of all 16384^2 / 32^2 stacks is most of it."""
    mesh = sphere((-100.5, 3.25, 90.0), 0.625)  # 80 voxels across
    svo = gpu.voxelize(mesh, N, bounds=BOUNDS)
    assert svo.shape == (N, N, N) and svo.voxel_size == H
    lo = np.array([voxel_of(c) for c in (-101.25, 2.5, 89.25)])
    sides = np.array([96, 96, 96])
    dense = dense_beside(gpu, mesh, lo, sides)
    assert svo.count() == dense.count() > 0  # nothing set outside the dense box
    crops_match(svo, dense, lo, [((0, 0, 0), (96, 96, 96)), ((1, 2, 3), (65, 90, 40))])


@pytest.mark.slow
def test_a_32768_grid_equals_the_dense_run_of_the_same_voxels(gpu):
    """The same box cut into voxels half the size (32768 along x and z, a slab of 288 voxels
    across y), a sphere against the dense run of the 160^3 voxels around it."""
    n, h = 2 * N, H / 2
    mesh = sphere((50.25, -20.5, 7.0), 0.5)  # 128 voxels across
    lo = np.array([int((c + HALF) / h) for c in (49.625, -21.125, 6.375)])
    shape, bounds, offset = slab_of_the_grid(1, int(lo[1]) - 37, 288, n, h)
    svo = gpu.voxelize(mesh, shape, bounds=bounds)
    sides = np.array([160, 160, 160])
    low = -HALF + lo * h
    dense = gpu.voxelize_dense(mesh, (160, 160, 160), bounds=[low, low + sides * h])
    assert svo.shape == shape and svo.voxel_size == h and svo.count() == dense.count() > 0
    assert svo.stats.counts["slabs"] > 1
    crops_match(
        svo, dense, lo - offset, [((0, 0, 0), (160, 160, 160)), ((5, 40, 17), (131, 150, 59))]
    )


@pytest.mark.slow
def test_sampled_columns_at_16384_equal_the_exact_reference(gpu):
    """A sphere whose vertices are not on any coarse lattice (jittered): its columns against
    the exact reference on the large grid's lattice (FINE_BITS 46), computed for those
    columns alone; the grid a slab of 320 voxels across x of the 16384^3 one."""
    rng = np.random.default_rng(41)
    base = trimesh.creation.icosphere(subdivisions=3, radius=1.7)
    vertices = base.vertices * (1 + rng.uniform(-0.05, 0.05, (len(base.vertices), 1)))
    mesh = load_mesh((vertices + (30.123, -7.77, -50.5), base.faces))
    centre = ((np.array([30.123, -7.77]) + HALF) / H).astype(int)
    shape, bounds, offset = slab_of_the_grid(0, int(centre[0]) - 150, 320)
    svo = gpu.voxelize(mesh, shape, bounds=bounds)
    placement = GridPlacement.around(mesh, shape, None, np.array(bounds, np.float64))
    _, fine = placement.placed_vertices(mesh)
    columns = centre - offset[:2] + rng.integers(-120, 121, (24, 2))
    columns[0] = centre - offset[:2]  # through the middle
    want = solid_column_samples(fine, mesh.faces, shape, columns)
    assert want.any()
    for (i, j), column in zip(columns.tolist(), want):
        got = svo.to_numpy(box=((i, j, 0), (i + 1, j + 1, N)))[0, 0]
        assert np.array_equal(got, column), f"column ({i}, {j})"


@pytest.mark.slow
def test_the_octree_streams_into_an_svo_file(gpu, tmp_path):
    """out=: the file written as the octree is made equals the SVO built in memory; it comes
    back mapped (count, region queries, voxelizer.load(mmap=True)); an existing file is
    replaced only when asked. The grid: a slab of 256 voxels across x of the 16384^3 one."""
    mesh = sphere((40.0, 40.0, -40.0), 1.5)
    path = tmp_path / "large.svo"
    shape, bounds, offset = slab_of_the_grid(0, voxel_of(38.0), 256)
    in_memory = gpu.voxelize(mesh, shape, bounds=bounds)
    streamed = gpu.voxelize(mesh, shape, bounds=bounds, out=path)
    assert streamed == in_memory and streamed.count() == in_memory.count()
    assert in_memory.stats.counts["slabs"] > 1
    assert read_svo(path) == in_memory  # read whole, every check made
    mapped = voxelizer.load(path, mmap=True)
    assert mapped == in_memory
    lo = tuple(int(v) for v in np.array((voxel_of(38.0),) * 2 + (voxel_of(-42.0),)) - offset)
    box = (lo, tuple(v + 256 for v in lo))
    assert np.array_equal(mapped.to_numpy(box=box), in_memory.to_numpy(box=box))
    assert mapped.to_numpy(box=box).sum() == in_memory.count()
    with pytest.raises(OutputError, match="exists"):
        gpu.voxelize(mesh, shape, bounds=bounds, out=path)
    smaller = sphere((40.0, 40.0, -40.0), 1.0)
    gpu.voxelize(smaller, shape, bounds=bounds, out=path, overwrite=True)
    assert voxelizer.load(path, mmap=True).count() < in_memory.count()


def test_a_budget_too_small_is_refused_before_the_work_and_leaves_no_file(gpu, tmp_path):
    path = tmp_path / "never.svo"
    with pytest.raises(MemoryBudgetError, match=r"budget of 1,048,576 bytes is too small"):
        gpu.voxelize(sphere((0.0, 0.0, 0.0), 1.0), N, bounds=BOUNDS, max_memory="1MiB", out=path)
    assert not path.exists() and list(tmp_path.iterdir()) == []


def test_a_dense_result_of_a_large_grid_is_refused_with_its_size(gpu):
    with pytest.raises(MemoryBudgetError, match=r"dense 16384x16384x16384 voxel array needs"):
        gpu.voxelize_dense(sphere((0.0, 0.0, 0.0), 1.0), N, bounds=BOUNDS)


@pytest.mark.parametrize(
    "options", [{"fill_mode": "winding"}, {"mode": "surface"}, {"mode": "both"}]
)
def test_large_grids_take_the_parity_fill_alone(gpu, options):
    with pytest.raises(GridError, match=r"16384x16384x16384 grid .*'parity' only"):
        gpu.voxelize(sphere((0.0, 0.0, 0.0), 1.0), N, bounds=BOUNDS, **options)


def test_the_largest_grid_is_65536():
    with pytest.raises(GridError, match="larger than the supported maximum 65536"):
        voxelizer.voxelize(sphere((0.0, 0.0, 0.0), 1.0), 65540)
