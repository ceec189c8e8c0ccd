"""Grids as users ask for them, on the GPU (lavapipe here), bit for bit against the CPU
reference: any size (1, 3, 5, 30, 100, 255, 1000 voxels a side), dense grids and SVOs, every
variant and fill mode and the surface modes; crops through the middle of closed meshes
against the uncropped run's sub-array and the exact rational evaluation; voxels of three
sizes (1:8); padding; a box beside the mesh. The command line's grid options:
tests/faces/test_grids_cli.py."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import voxelizer
from voxelizer import SVO, VARIANTS, EmptyGridWarning, GridError, Mesh
from voxelizer.reference import voxelize_reference
from voxelizer.reference.surface import voxelize_surface_reference
from voxelizer.reference.winding import voxelize_winding_reference
from voxelizer.trigrid.reference import reference_cells

from .. import shapes
from ..exact_rational import exact_solid
from ..grid_cases import CROP_OFFSET, CROP_SHAPE, LATTICE, placed, tie_shapes
from ..helpers import assert_same_voxels, load_model

FILL_MODES = ("parity", "vote", "union", "winding")


def reference(mesh: Mesh, grid=None, fill_mode: str = "parity", **kwargs) -> np.ndarray:
    """The CPU reference of any solid fill mode."""
    if fill_mode == "winding":
        return voxelize_winding_reference(mesh, grid, **kwargs).to_numpy()
    return voxelize_reference(mesh, grid, fill_mode, **kwargs).to_numpy()


def assert_dense_and_svo(gpu, mesh, expected: np.ndarray, grid=None, **kwargs) -> None:
    """The dense grid and the SVO of the call equal `expected`, with its shape."""
    dense = gpu.voxelize_dense(mesh, grid, warn=False, **kwargs)  # (tiny grids may be thin)
    assert dense.shape == expected.shape and dense.stats.shape == expected.shape
    assert_same_voxels(dense.to_numpy(), expected)
    assert dense.count() == int(expected.sum())
    svo = gpu.voxelize(mesh, grid, warn=False, **kwargs)
    assert svo == SVO.from_dense(expected, svo.placement)
    assert np.array_equal(svo.origin, dense.origin) and svo.voxel_size == dense.voxel_size


# --- any size -------------------------------------------------------------------------------

SMALL_SIZES = [1, 3, 5, (1, 3, 5), (5, 1, 3), 30, (30, 7, 13), (100, 30, 5)]


@pytest.mark.parametrize("grid", SMALL_SIZES, ids=str)
@pytest.mark.parametrize("variant", VARIANTS)
def test_any_size_every_variant(gpu, variant, grid):
    mesh = load_model("torus_knot.ply")
    expected = reference(mesh, grid)
    assert_dense_and_svo(gpu, mesh, expected, grid, variant=variant)


@pytest.mark.parametrize("fill_mode", FILL_MODES)
def test_any_size_every_fill_mode(gpu, fill_mode):
    mesh = load_model("hollow_sphere.ply")
    for grid in [(31, 18, 9), 5]:
        assert_dense_and_svo(gpu, mesh, reference(mesh, grid, fill_mode), grid, fill_mode=fill_mode)


@pytest.mark.parametrize(
    "mode, surface", [("surface", "conservative"), ("surface", "thin"), ("both", None)]
)
def test_any_size_surface_modes(gpu, mode, surface):
    """A mesh on the grid's far faces (the grid fits its box exactly): the thin surface's
    crossings there mark the last voxel, not the padding's, and the padding holds no mark."""
    mesh = load_mesh_of(shapes.box((0.0, 0.0, 0.0), (3.0, 1.5, 1.0)))
    for grid in [(6, 3, 2), (30, 15, 10), (13, 7, 5)]:
        expected = voxelize_surface_reference(mesh, grid, mode, surface or "conservative")
        kwargs = {"mode": mode, "surface": surface}
        assert expected.to_numpy()[-1].any()  # the far face's layer
        assert_dense_and_svo(gpu, mesh, expected.to_numpy(), grid, **kwargs)
        faces = gpu.voxelize_dense(mesh, grid, attributes=["face"], **kwargs).to_numpy("face")
        svo = gpu.voxelize(mesh, grid, attributes=["face"], **kwargs)
        assert np.array_equal(svo.to_numpy("face"), faces)  # the padding marks nothing
        marked = faces >= 0  # every surface voxel carries a face id, and only those
        surface_voxels = voxelize_surface_reference(
            mesh, grid, "surface", surface or "conservative"
        )
        assert_same_voxels(marked, surface_voxels.to_numpy())


def load_mesh_of(shape) -> Mesh:
    return voxelizer.load_mesh(shape)


@pytest.mark.parametrize("grid", [255, (1000, 5, 3), (3, 1000, 1), (1, 5, 1000)], ids=str)
def test_large_odd_sizes(gpu, grid):
    mesh = load_model("torus_knot.ply")
    assert_dense_and_svo(gpu, mesh, reference(mesh, grid), grid)


@pytest.mark.slow
def test_a_1000_cube(gpu):
    """1000³ (a multiple of 4: no padding; its SVO is 1024's tree) against the reference on
    a mesh whose voxels the reference can afford: a few large triangles."""
    mesh = load_mesh_of(shapes.octahedron((0.1, 0.2, 0.3), 1.0))
    grid = gpu.voxelize_dense(mesh, 1000)
    expected = reference(mesh, 1000)
    assert_same_voxels(grid.to_numpy(), expected)


def test_slabs_of_an_odd_size(gpu):
    """A grid voxelized in slabs of rows (a small budget), its rows not a multiple of 4."""
    mesh = load_model("torus_knot.ply")
    grid = (93, 199, 133)
    expected = reference(mesh, grid)
    for kwargs in ({"max_memory": "2MiB"}, {"max_memory": "2MiB", "mode": "both"}):
        dense = gpu.voxelize_dense(mesh, grid, **kwargs)
        assert dense.stats.counts["slab_rows"] < 199
        got = dense.to_numpy()
        if "mode" in kwargs:
            expected = voxelize_surface_reference(mesh, grid, "both").to_numpy()
        assert_same_voxels(got, expected)
        assert voxelizer.voxelize(mesh, grid, **kwargs) == SVO.from_dense(expected, dense.placement)


# --- crops ----------------------------------------------------------------------------------


def crop_case(e: float = 0.0):
    case = placed(tie_shapes(e))
    return case, Mesh(case.vertices, case.faces)


@pytest.mark.parametrize("fill_mode", FILL_MODES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_crops_through_the_middle(gpu, variant, fill_mode):
    """A box through the middle of closed shapes with voxels of 1/8 x 1/4 x 1: the GPU
    equals the reference and the uncropped run's sub-array, dense and SVO; parity also the
    exact evaluation of the crop's own coordinates."""
    case, mesh = crop_case()
    spacing = tuple(case.spacing)
    crop_box = case.box(CROP_OFFSET, CROP_SHAPE)
    kwargs = {"variant": variant, "fill_mode": fill_mode, "voxel_size": spacing}
    expected = reference(mesh, None, fill_mode, voxel_size=spacing, bounds=crop_box)
    assert expected.any() and not expected.all()
    if fill_mode == "parity":
        g = (case.vertices - np.array(crop_box[0])) / case.spacing
        assert_same_voxels(expected, exact_solid(g, case.faces, CROP_SHAPE))
    assert_dense_and_svo(gpu, mesh, expected, bounds=crop_box, **kwargs)
    whole = gpu.voxelize_dense(mesh, bounds=case.box((0, 0, 0), LATTICE), **kwargs).to_numpy()
    (i, j, k), (nx, ny, nz) = CROP_OFFSET, CROP_SHAPE
    assert_same_voxels(expected, whole[i : i + nx, j : j + ny, k : k + nz])


@pytest.mark.parametrize(
    "mode, surface", [("surface", "conservative"), ("surface", "thin"), ("both", "conservative")]
)
def test_crops_of_the_surface_modes(gpu, mode, surface):
    case, mesh = crop_case()
    kwargs = {"mode": mode, "surface": surface, "voxel_size": tuple(case.spacing)}
    crop_box = case.box(CROP_OFFSET, CROP_SHAPE)
    expected = voxelize_surface_reference(mesh, bounds=crop_box, **kwargs).to_numpy()
    assert_dense_and_svo(gpu, mesh, expected, bounds=crop_box, **kwargs)
    whole_box = case.box((0, 0, 0), LATTICE)
    whole = gpu.voxelize_dense(mesh, bounds=whole_box, attributes=["face"], **kwargs)
    (i, j, k), (nx, ny, nz) = CROP_OFFSET, CROP_SHAPE
    window = (slice(i, i + nx), slice(j, j + ny), slice(k, k + nz))
    assert_same_voxels(expected, whole.to_numpy()[window])
    # face ids: the uncropped grid's there, dense and in the SVO
    ids = whole.to_numpy("face")[window]
    crop = gpu.voxelize_dense(mesh, bounds=crop_box, attributes=["face"], **kwargs)
    assert np.array_equal(crop.to_numpy("face"), ids)
    svo = gpu.voxelize(mesh, bounds=crop_box, attributes=["face"], **kwargs)
    assert np.array_equal(svo.to_numpy("face"), ids) and (ids >= 0).any()


@pytest.mark.parametrize("fill_mode", FILL_MODES)
def test_a_model_cut_in_half(gpu, fill_mode):
    """The torus knot cut through its middle by a box of whole voxels of 1/16: the lower
    half along z and x equals the grid around the whole knot there."""
    mesh = load_model("torus_knot.ply")
    h = 1 / 16
    whole_box = [[-2.0, -2.0, -1.0], [2.0, 2.0, 1.0]]
    half_box = [[0.0, -2.0, -1.0], [2.0, 2.0, 0.0]]
    whole = gpu.voxelize_dense(mesh, voxel_size=h, bounds=whole_box, fill_mode=fill_mode)
    half = gpu.voxelize_dense(mesh, voxel_size=h, bounds=half_box, fill_mode=fill_mode)
    assert half.shape == (32, 64, 16)
    assert_same_voxels(half.to_numpy(), whole.to_numpy()[32:, :, :16])
    assert half.to_numpy().any()


# --- voxels of three sizes, padding ----------------------------------------------------------


@pytest.mark.parametrize("e", [0.0, 1e-6])
def test_voxels_of_three_sizes_are_exact(gpu, e):
    """1/8 x 1/4 x 1 (1:8): faces on centre planes, vertices on column centres."""
    case, mesh = crop_case(e)
    box = case.box((0, 0, 0), LATTICE)
    g = (case.vertices - case.origin) / case.spacing
    expected = exact_solid(g, case.faces, LATTICE)
    for variant in VARIANTS:
        assert_dense_and_svo(
            gpu, mesh, expected, voxel_size=tuple(case.spacing), bounds=box, variant=variant
        )


@pytest.mark.parametrize(
    "ratio", [pytest.param((1, 1, 8), marks=pytest.mark.slow), (8, 1, 1), (1, 8, 2)], ids=str
)
def test_a_model_on_voxels_of_three_sizes(gpu, ratio):
    mesh = load_model("bunny.ply")
    size = tuple(0.004 * r for r in ratio)
    expected = reference(mesh, voxel_size=size)
    assert_dense_and_svo(gpu, mesh, expected, voxel_size=size)
    dense = gpu.voxelize_dense(mesh, voxel_size=size)
    assert dense.voxel_size == size and np.array_equal(dense.spacing, size)


@pytest.mark.parametrize("pad", [1, (0, 2, 1), ((1, 0), (0, 3), (2, 2))], ids=str)
def test_padding(gpu, pad):
    mesh = load_model("gear.ply")
    for kwargs in ({"grid": 30}, {"voxel_size": 0.05, "bounds": [[-1, -1, -0.2], [1, 1, 0.2]]}):
        grid = kwargs.pop("grid", None)
        expected = reference(mesh, grid, pad=pad, **kwargs)
        assert_dense_and_svo(gpu, mesh, expected, grid, pad=pad, **kwargs)


# --- a box beside the mesh ------------------------------------------------------------------


def test_a_box_beside_the_mesh_is_empty_with_a_warning(gpu):
    mesh = load_model("gear.ply")
    beside = [[2.0, 2.0, 2.0], [3.0, 3.0, 3.0]]
    with pytest.warns(EmptyGridWarning, match="holds no part of the mesh"):
        dense = gpu.voxelize_dense(mesh, 16, bounds=beside)
    assert dense.shape == (16, 16, 16) and dense.count() == 0 and not dense.to_numpy().any()
    assert dense.stats.gpu_ms == {} and dense.stats.counts["empty_grid"] == 1
    with pytest.warns(EmptyGridWarning):
        svo = gpu.voxelize(mesh, 30, bounds=beside, mode="both")
    assert svo == SVO.from_dense(np.zeros((30, 30, 30), bool), svo.placement)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gpu.voxelize_dense(mesh, 8, bounds=beside, warn=False).count() == 0


@pytest.mark.parametrize("fill_mode", ["vote", "union", "winding"])
def test_both_with_face_ids_on_an_odd_size(gpu, fill_mode):
    """Mode "both" with the host's solids on a grid padded to whole tiles (z too for vote,
    whose padding may fill): the reference's voxels, and the SVO's face ids the grid's."""
    mesh = load_model("torus_knot.ply")
    grid = (29, 18, 11)
    kwargs = {"mode": "both", "fill_mode": fill_mode}
    expected = voxelize_surface_reference(mesh, grid, "both", fill_mode=fill_mode).to_numpy()
    dense = gpu.voxelize_dense(mesh, grid, attributes=["face"], warn=False, **kwargs)
    assert_same_voxels(dense.to_numpy(), expected)
    svo = gpu.voxelize(mesh, grid, attributes=["face"], warn=False, **kwargs)
    assert svo == SVO.from_dense(expected, svo.placement, face_ids=dense.to_numpy("face"))


# --- triangle grids on cells of three sizes ---------------------------------------------------


@pytest.mark.parametrize("cell_size", [(0.05, 0.1, 0.4), (0.4, 0.05, 0.05)], ids=str)
def test_a_triangle_grid_on_cells_of_three_sizes(gpu, cell_size):
    """Triangle grids take cells of three sizes (1:8) and odd sides: the cells the GPU lists
    are the reference's, and each triangle is listed in the cell holding its centroid,
    found in world units per axis."""
    mesh = load_model("gear.ply")
    grid = gpu.triangle_grid(mesh, cell_size=cell_size)
    low, high = mesh.bounds
    assert grid.shape == tuple(int(np.ceil(s / h)) for s, h in zip(high - low, cell_size))
    assert np.array_equal(grid.cell_size, cell_size)
    arrays = grid.to_numpy()
    offsets, _ = reference_cells(arrays["corners"].astype(np.int64), grid.shape)
    assert np.array_equal(arrays["offsets"], offsets)
    centroids = mesh.vertices[mesh.indices].mean(axis=1)
    cells = np.floor((centroids - grid.origin) / np.array(cell_size)).astype(np.int64)
    cells = np.minimum(cells, np.array(grid.shape) - 1)  # a flat top face: its last cells
    for triangle in range(0, mesh.triangle_count, max(1, mesh.triangle_count // 50)):
        assert triangle in grid.triangles_in(*cells[triangle])
    grid = gpu.triangle_grid(mesh, (30, 7, 1))  # the box cut into cells of three sizes
    assert grid.shape == (30, 7, 1)
    assert np.allclose(grid.cell_size * (30, 7, 1), high - low)


def test_a_triangle_grid_refuses_a_box_that_cuts_the_mesh(gpu):
    """Unlike voxel grids, a triangle grid does not crop: one line says so."""
    with pytest.raises(GridError, match="a triangle grid does not crop"):
        gpu.triangle_grid(load_model("gear.ply"), 8, bounds=[[0, 0, 0], [1, 1, 1]])
