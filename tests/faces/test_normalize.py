"""Normalisation presets (voxelizer.normalize): the unit cube and a border of voxels,
as learning datasets place their meshes and grids."""

from __future__ import annotations

import numpy as np
import pytest

import voxelizer
from voxelizer import GridError, ModeError
from voxelizer.normalize import fit_mesh, unit_cube_bounds

from ..helpers import SHARED_MODELS
from ..shapes import box


def test_unit_cube_centres_and_scales_the_longest_side():
    mesh = fit_mesh(box([2, 4, 6], [6, 5, 7]))  # 4 x 1 x 1, centred at (4, 4.5, 6.5)
    assert np.array_equal(mesh.bounds, [[-0.5, -0.125, -0.125], [0.5, 0.125, 0.125]])
    bunny = fit_mesh(SHARED_MODELS / "bunny.ply")
    low, high = bunny.bounds
    assert (high - low).max() == 1.0 and np.allclose((low + high) / 2, 0)
    assert low.min() >= -0.5 and high.max() <= 0.5
    with pytest.raises(ModeError, match="unknown fit"):
        fit_mesh(bunny, "sphere")


@pytest.mark.parametrize(("grid", "pad"), [(32, 1), (64, 2), (128, 0)])
def test_the_padded_grid_holds_the_mesh_on_grid_minus_twice_the_border(gpu, grid, pad):
    """32³ with one voxel of border: the longest side spans voxels 1 to 30 (h = 1/30)."""
    mesh = fit_mesh(box([0, 0, 0], [2, 1, 1]))
    result = gpu.voxelize_dense(mesh, grid, bounds=unit_cube_bounds(grid, pad))
    assert result.voxel_size == pytest.approx(1 / (grid - 2 * pad))
    assert np.allclose(result.origin, -0.5 - pad / (grid - 2 * pad))
    filled = np.argwhere(result.to_numpy())
    assert filled[:, 0].min() == pad and filled[:, 0].max() == grid - pad - 1
    assert len(filled) == (grid - 2 * pad) * ((grid - 2 * pad) // 2) ** 2


def test_a_border_leaves_room_for_the_mesh():
    assert np.array_equal(unit_cube_bounds(8), [[-0.5] * 3, [0.5] * 3])
    with pytest.raises(GridError, match="pad must be"):
        unit_cube_bounds(8, 4)
    with pytest.raises(GridError, match="pad must be"):
        unit_cube_bounds(8, -1)
    assert (
        voxelizer.voxelize(
            fit_mesh(SHARED_MODELS / "suzanne.ply"), 16, bounds=unit_cube_bounds(16, 3)
        ).count()
        > 0
    )
