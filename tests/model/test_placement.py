"""Where a grid of any shape (nx, ny, nz) sits: shapes, the placement rules for a grid, a voxel
size or bounds, and the one rounding step from world to grid space (voxelizer/placement.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tests import shapes
from voxelizer import GridError, MeshError
from voxelizer.io import load_mesh
from voxelizer.mesh import Mesh
from voxelizer.parallel import MIN_ROWS
from voxelizer.placement import (
    DEFAULT_GRID,
    PLACEMENT_BLOCK_ROWS,
    GridPlacement,
    check_shape,
    fixed_gap,
    shape_text,
)


def random_mesh(seed: int, scale=(1.0, 1.0, 1.0), shift=(0.0, 0.0, 0.0)) -> Mesh:
    """Points in general position (a convex hull is not needed: placement sees only bounds)."""
    rng = np.random.default_rng(seed)
    vertices = rng.random((30, 3)) * np.array(scale) + np.array(shift)
    return load_mesh((vertices, rng.integers(0, 30, (20, 3))))


def test_check_shape():
    assert check_shape(16) == (16, 16, 16)
    assert check_shape((16, 8, 12)) == check_shape([16, 8, 12]) == (16, 8, 12)
    assert check_shape(np.array([16, 8, 12])) == (16, 8, 12)
    assert all(type(n) is int for n in check_shape(np.array([16, 8, 12])))
    for bad, message in [
        ((16, 8), "three sides"),
        ((8, 8, 8, 8), "three sides"),
        ((16, 0, 12), "side y must be at least 1, not 0"),
        ((16, 8, -4), "side z must be at least 1, not -4"),
        ((65536 + 1, 8, 8), "side x 65537 is larger than the supported maximum 65536"),
        ((16, 8.0, 12), "integer"),
        ("16x8x12", "integer N or three"),
        (None, "integer N or three"),
        (True, "integer N or three"),
        (2.0, "integer N or three"),
        (0, "grid must be at least 1"),
        (np.zeros((3, 1), int), "integer N or three"),
    ]:
        with pytest.raises(GridError, match=message):
            check_shape(bad)
    assert shape_text((512, 256, 128)) == "512x256x128"
    # any side from 1 to 8192
    assert check_shape((1, 3, 5)) == (1, 3, 5) and check_shape(8192) == (8192,) * 3


def test_placement_holds_a_shape():
    placement = GridPlacement((16, 8, 12), [1, 2, 3], 0.5)
    assert placement.shape == (16, 8, 12) and placement.resolution == 16
    assert placement.origin.dtype == np.float64 and placement.voxel_size == 0.5
    assert GridPlacement(24, np.zeros(3), 1.0).shape == (24, 24, 24)
    assert GridPlacement((16, 8, 10), np.zeros(3), 1.0).shape == (16, 8, 10)
    with pytest.raises(GridError):
        GridPlacement((16, 0, 10), np.zeros(3), 1.0)


@pytest.mark.parametrize("seed", range(8))
def test_cube_placement_is_the_old_rule_bit_for_bit(seed):
    """h = longest side / N, the grid centred on the box, exactly as before shapes existed."""
    mesh = random_mesh(
        seed,
        scale=np.random.default_rng(seed + 100).random(3) * 7 + 0.1,
        shift=(-3.3, 1e3 * seed, 0.7),
    )
    bmin, bmax = mesh.bounds
    for n in (8, 36, 512, 8192):
        h = float((bmax - bmin).max()) / n
        origin = (bmin + bmax) / 2.0 - n * h / 2.0
        for grid in (n, (n, n, n)):
            placement = GridPlacement.fit(mesh, grid)
            assert placement.voxel_size == h and np.array_equal(placement.origin, origin)
            assert placement.shape == (n, n, n)
    default = GridPlacement.fit(mesh)
    assert default.shape == (DEFAULT_GRID,) * 3
    assert default.voxel_size == GridPlacement.fit(mesh, 512).voxel_size


def test_shape_placement():
    mesh = load_mesh(shapes.box((0, 0, 0), (3, 1, 2)))
    placement = GridPlacement.fit(mesh, (16, 8, 12))
    # h = max(3/16, 1/8, 2/12) = 3/16: x fills the grid, y and z are centred with room to spare.
    assert placement.voxel_size == 0.1875
    assert np.array_equal(placement.origin, [0.0, 0.5 - 4 * 0.1875, 1.0 - 6 * 0.1875])
    g = placement.grid_vertices(mesh.vertices)
    assert g[:, 0].min() == 0 and g[:, 0].max() == 16
    assert (g[:, 1] >= 0).all() and (g[:, 1] <= 8).all() and (g[:, 2] <= 12).all()
    # The y axis binds when the grid is short along y.
    placement = GridPlacement.fit(mesh, (64, 8, 64))
    assert placement.voxel_size == 0.125
    assert np.array_equal(placement.origin, [1.5 - 4.0, 0.0, 1.0 - 4.0])


def test_voxel_size_placement():
    mesh = load_mesh(shapes.box((0, 0, 0), (3, 1, 2)))
    placement = GridPlacement.fit(mesh, voxel_size=0.25)
    # sides 12, 4, 8 voxels of 0.25, rounded up to multiples of 4 (at least 8): 12, 8, 8.
    assert placement.shape == (12, 8, 8) and placement.voxel_size == 0.25
    assert np.array_equal(placement.origin, [0.0, -0.5, 0.0])
    placement = GridPlacement.fit(mesh, voxel_size=0.1875)  # 16, 5.33.. -> 8, 10.67.. -> 12
    assert placement.shape == (16, 8, 12)
    assert np.array_equal(placement.origin, [0.0, -(8 * 0.1875 - 1) / 2, -(12 * 0.1875 - 2) / 2])
    assert GridPlacement.fit(mesh, voxel_size=0.3).shape == (12, 8, 8)  # 10, 3.3, 6.7 voxels
    assert GridPlacement.fit(mesh, voxel_size=100.0).shape == (8, 8, 8)
    assert GridPlacement.fit(mesh, voxel_size=3 / 8192).shape == (8192, 2732, 5464)
    assert GridPlacement.fit(mesh, voxel_size=3 / 65536).shape == (65536, 21848, 43692)
    with pytest.raises(GridError, match=r"voxel size .* needs a 65540x21848x43692 grid"):
        GridPlacement.fit(mesh, voxel_size=3 / 65537)
    with pytest.raises(GridError, match="too small"):
        GridPlacement.fit(mesh, voxel_size=1e-320)
    # a grid of 10^300 voxels a side is not spelt out digit by digit
    with pytest.raises(GridError) as caught:
        GridPlacement.fit(mesh, voxel_size=1e-300)
    assert str(caught.value) == (
        "voxel size 1e-300 is too small: it needs 3e+300 voxels along x; each side of the grid "
        "can be at most 65536"
    )
    for bad in (0.0, -1.0, float("nan"), float("inf"), "0.25", True):
        with pytest.raises(GridError, match="voxel size"):
            GridPlacement.fit(mesh, voxel_size=bad)
    with pytest.raises(GridError, match="not both"):
        GridPlacement.fit(mesh, 16, voxel_size=0.25)


def test_flat_mesh_gets_the_minimum_side():
    mesh = load_mesh(shapes.box((0, 0, 5), (4, 2, 5)))  # flat in z
    placement = GridPlacement.fit(mesh, voxel_size=0.5)
    assert placement.shape == (8, 8, 8) and placement.origin[2] == 5 - 2.0
    placement = GridPlacement.fit(mesh, (16, 8, 8))
    assert placement.voxel_size == 0.25 and placement.origin[2] == 5 - 1.0


def test_zero_extent_stays_a_mesh_error():
    mesh = Mesh(np.ones((3, 3)), np.array([[0, 1, 2]]))  # unchecked, as load_mesh refuses it
    for kwargs in ({}, {"grid": (16, 8, 8)}, {"voxel_size": 0.5}):
        with pytest.raises(MeshError, match="zero extent"):
            GridPlacement.fit(mesh, **kwargs)


def test_bounds():
    """With bounds the grid is the box: voxel (0, 0, 0)'s corner at its min corner, no
    recentring (docs/guide/grids.md); the voxels of a shape divide it exactly, a voxel size
    covers it (box_fit tests are in test_grids.py)."""
    mesh = load_mesh(shapes.box((-0.5, 0, 1), (0.5, 1, 2)))
    box = [[-1, -2, -3], [1, 2, 3]]
    placement = GridPlacement.fit(mesh, voxel_size=0.25, bounds=box)
    assert placement.shape == (8, 16, 24)
    assert np.array_equal(placement.origin, [-1.0, -2.0, -3.0])
    placement = GridPlacement.fit(mesh, voxel_size=0.125, bounds=np.array(box) + 0.1)
    assert placement.shape == (16, 32, 48)
    assert np.array_equal(placement.origin, np.array(box[0], float) + 0.1)
    placement = GridPlacement.fit(mesh, 16, bounds=box)  # voxels of 2/16, 4/16 and 6/16
    assert placement.voxel_size == (0.125, 0.25, 0.375)
    assert np.array_equal(placement.origin, [-1.0, -2.0, -3.0])
    placement = GridPlacement.fit(mesh, (8, 16, 24), bounds=box)
    assert placement.voxel_size == 0.25 and np.array_equal(placement.origin, [-1, -2, -3])
    placement = GridPlacement.fit(mesh, bounds=box)  # cubes of the longest side / 512
    assert placement.shape == (171, 342, 512) and placement.voxel_size == 6 / 512
    assert np.array_equal(placement.origin, [-1, -2, -3])
    # The mesh may touch the bounds (the box is closed).
    GridPlacement.fit(mesh, 16, bounds=[[-0.5, 0, 1], [0.5, 1, 2]])


@pytest.mark.parametrize(
    "bounds, message",
    [
        ([[0, 0, 0], [1, 1]], "bounds must be"),
        ([0, 0, 0, 1, 1, 1], "shape"),
        ([[0, 0, 0], [1, 1, float("nan")]], "finite: zmax is nan"),
        ([[0, 0, 0], [1, float("inf"), 1]], "finite: ymax is inf"),
        ([[-float("inf"), 0, 0], [1, 1, 1]], "finite: xmin is -inf"),
        ([[0, 0, 2], [1, 1, 2]], "zmin 2 must be less than zmax 2"),
        ([[0, 1, 0], [1, 0, 1]], "ymin 1 must be less than ymax 0"),
        ([["a", 0, 0], [1, 1, 1]], "numbers"),
    ],
)
def test_bad_bounds(bounds, message):
    mesh = load_mesh(shapes.box((-0.5, 0, 1), (0.5, 1, 2)))
    with pytest.raises(GridError, match=message):
        GridPlacement.fit(mesh, 16, bounds=bounds)


def test_grid_vertices_clip_per_axis():
    placement = GridPlacement((16, 8, 12), np.zeros(3), 1.0)
    g = placement.grid_vertices(np.array([[-1.0, 9.0, 12.5], [17.0, -0.5, 3.0]]))
    assert g.dtype == np.float32
    assert g.tolist() == [[0, 8, 12], [16, 0, 3]]


def test_placing_many_vertices_block_by_block_equals_placing_each_alone():
    """Vertices are placed a cache-sized block at a time (PLACEMENT_BLOCK_ROWS), in several
    threads: across the blocks' seams every row equals the row placed alone, the rounding
    gap is the largest over all rows, and no rows at all give empty arrays."""
    rows = 4 * PLACEMENT_BLOCK_ROWS + 12_345
    assert rows > MIN_ROWS  # so the rows are split between threads too
    vertices = np.random.default_rng(7).uniform(-1.0, 33.0, (rows, 3))
    placement = GridPlacement((32, 32, 32), np.zeros(3), 1.0)
    mesh = Mesh(vertices, np.arange(rows - rows % 3).reshape(-1, 3))
    grid, fine = placement.placed_vertices(mesh)
    seams = [
        r for b in range(1, 5) for r in (b * PLACEMENT_BLOCK_ROWS - 1, b * PLACEMENT_BLOCK_ROWS)
    ]
    for row in [0, *seams, rows - 1]:
        assert np.array_equal(grid[row], placement.grid_vertices(vertices[row : row + 1])[0])
        assert np.array_equal(fine[row], placement.fine_vertices(vertices[row : row + 1])[0])
    used = mesh.used
    assert placement.placed_fixed_gap(mesh) == fixed_gap(grid[used], fine[used])
    assert placement.grid_vertices(np.zeros((0, 3))).shape == (0, 3)
    assert placement.fine_vertices(np.zeros((0, 3))).shape == (0, 3)


def test_placed_vertices_are_computed_once_per_mesh_and_grid():
    """A repeated call on the same Mesh and grid reuses its placed vertices (read-only, equal
    to placing them afresh); another grid replaces them, and going back places them again."""
    mesh = load_mesh(shapes.octahedron((10.0, 20.0, 30.0), 7.5))
    placements = [GridPlacement.around(mesh, n, None, None) for n in (64, 96, 64)]
    first = placements[0].placed_vertices(mesh)
    assert all(a is b for a, b in zip(first, placements[0].placed_vertices(mesh)))
    assert all(a is b for a, b in zip(first, placements[2].placed_vertices(mesh)))  # same grid
    for placement in placements[1:]:
        grid, fine = placement.placed_vertices(mesh)
        assert not grid.flags.writeable and not fine.flags.writeable
        assert np.array_equal(grid, placement.grid_vertices(mesh.vertices))
        assert np.array_equal(fine, placement.fine_vertices(mesh.vertices))
    assert not np.array_equal(placements[1].placed_vertices(mesh)[1], first[1])
    again = placements[0].placed_vertices(mesh)  # placed afresh, to the same values
    assert again[1] is not first[1] and np.array_equal(again[1], first[1])
