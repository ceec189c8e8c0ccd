"""The CPU reference on non-cubic grids (voxelizer/reference/solid.py): known solids voxel by
voxel, columns and votes against the cube's, cropped."""

from __future__ import annotations

import numpy as np
import pytest

from tests import shapes
from voxelizer.io import load_mesh
from voxelizer.reference import solid_columns, vote_columns, voxelize_reference


def box_expected(lo, hi, shape) -> np.ndarray:
    """Closed form for a grid-space box (ties as in tests/test_shapes: lo <= c < hi along x
    and y, lo < c <= hi along z)."""
    x, y, z = (np.arange(n) + 0.5 for n in shape)
    x = (lo[0] <= x) & (x < hi[0])
    y = (lo[1] <= y) & (y < hi[1])
    z = (lo[2] < z) & (z <= hi[2])
    return x[:, None, None] & y[None, :, None] & z[None, None, :]


def test_box_between_centres_on_a_16x8x12_grid():
    """Faces a quarter voxel from the centres: the solid is known voxel by voxel."""
    lo, hi = np.array([2.25, 1.25, 3.25]), np.array([13.75, 6.75, 9.75])
    mesh = load_mesh(shapes.box(lo, hi))
    bounds = [[0, 0, 0], [16, 8, 12]]
    grid = voxelize_reference(mesh, (16, 8, 12), bounds=bounds)
    assert grid.shape == (16, 8, 12) and grid.voxel_size == 1.0
    assert np.array_equal(grid.origin, [0, 0, 0])
    expected = np.zeros((16, 8, 12), bool)
    expected[2:14, 1:7, 3:10] = True
    assert grid.count() == 12 * 6 * 7 == 504
    assert np.array_equal(grid.to_numpy(), expected)
    assert np.array_equal(
        voxelize_reference(mesh, (16, 8, 12), "vote", bounds=bounds).to_numpy(), expected
    )
    assert np.array_equal(expected, box_expected(lo, hi, (16, 8, 12)))
    # Through voxel_size. At h = 0.5 every face holds voxel centres: ties, decided by the
    # parity rule's nudge (vote decides ties its own way); at h = 0.25, none.
    for h, shape, modes in [
        (0.5, (32, 16, 24), ["parity"]),
        (0.25, (64, 32, 48), ["parity", "vote"]),
    ]:
        for mode in modes:
            grid = voxelize_reference(mesh, None, mode, voxel_size=h, bounds=bounds)
            assert grid.shape == shape and np.array_equal(grid.origin, [0, 0, 0])
            assert np.array_equal(grid.to_numpy(), box_expected(lo / h, hi / h, shape))


def test_world_box_on_a_fitted_shape():
    """An off-centre box: the grid is centred on it, and every axis keeps its own side."""
    mesh = load_mesh(shapes.box((10, 20, 30), (14, 22, 33)))
    grid = voxelize_reference(mesh, (32, 24, 28))  # h = max(4/32, 2/24, 3/28) = 0.125
    assert grid.voxel_size == 0.125
    assert np.array_equal(grid.origin, [10.0, 21 - 1.5, 31.5 - 1.75])
    expected = np.zeros((32, 24, 28), bool)
    expected[:, 4:20, 2:26] = True  # y: [20, 22] is grid [4, 20]; z: [30, 33] is [2, 26]
    # Centres exactly on faces: inside on the low x/y faces and the top face (tests/test_shapes).
    assert np.array_equal(grid.to_numpy(), expected)


@pytest.mark.parametrize("shape", [(16, 8, 12), (8, 20, 12), (12, 16, 8)])
def test_non_cubic_columns_are_the_cube_cropped(shape):
    """A shape that fits the smaller grid gives, column for column, the cube's voxels."""
    n = max(shape)
    centre = np.array(shape) / 2
    radius = min(shape) / 2 - 0.3
    rng = np.random.default_rng(sum(shape))
    cases = [
        shapes.sphere(centre + 0.01 * rng.random(3), radius),
        shapes.octahedron(centre, radius),
        shapes.hollow_sphere(centre + 0.02, radius, radius / 2),
    ]
    for vertices, faces in cases:
        g = vertices.astype(np.float32)
        crop = (slice(0, shape[0]), slice(0, shape[1]), slice(0, shape[2]))
        solid = solid_columns(g, faces, shape)
        assert solid.shape == shape and solid.any()
        assert np.array_equal(solid, solid_columns(g, faces, n)[crop])


def test_vote_permutes_the_shape_with_the_axes():
    """An open box (top face missing) on quarter-voxel coordinates, where mirroring is exact:
    the six votes on the non-cubic grid are the cube's, cropped."""
    vertices, faces = shapes.box((1.25, 2.5, 1.75), (6.5, 5.25, 9.75))
    top = vertices[faces].min(axis=1)[:, 2] == 9.75
    faces = faces[~top]
    shape = (8, 12, 16)
    votes = vote_columns(vertices.astype(np.float32), faces, shape)
    cube = vote_columns(vertices.astype(np.float32), faces, 16)
    assert votes.shape == shape
    assert np.array_equal(votes, cube[:8, :12, :16])
    # Open at the top only: four or more of six rays still see a closed box inside it.
    expected = np.zeros(shape, bool)
    expected[1:6, 2:5, 2:10] = True  # centres on the low y face are inside (tests/test_shapes)
    assert np.array_equal(votes, expected)


def test_reference_rejects_vertices_outside_a_side():
    vertices, faces = shapes.box((1, 1, 1), (7, 9, 7))
    with pytest.raises(ValueError, match="lie in"):
        solid_columns(vertices.astype(np.float32), faces, (8, 8, 8))
    assert solid_columns(vertices.astype(np.float32), faces, (8, 12, 8)).any()
