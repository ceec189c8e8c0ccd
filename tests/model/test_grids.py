"""Grids as users ask for them, on the host (docs/guide/grids.md): the placement rules with
their formulas (exact boxes, cover and inside, padding, voxels of three sizes), crops and the
lattice they are voxelized on, cell centres and world_to_index, the errors; and the CPU
references on all of these against an exact rational evaluation (tests/exact_rational.py)
and against the uncropped grid. The GPU against the reference: tests/test_grids_gpu.py."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

import voxelizer
from voxelizer import SVO, DenseGrid, GridError, OutputError
from voxelizer.io import load_mesh
from voxelizer.mesh import Mesh
from voxelizer.placement import (
    FINE_BITS,
    MAX_RESOLUTION,
    GridPlacement,
    WorkGrid,
    check_pad,
    check_voxel_size,
)
from voxelizer.reference import voxelize_reference
from voxelizer.reference.surface import voxelize_surface_reference
from voxelizer.reference.winding import voxelize_winding_reference

from .. import shapes
from ..exact_rational import exact_solid
from ..grid_cases import CROP_OFFSET, CROP_SHAPE, LATTICE, placed, tie_shapes
from ..helpers import assert_same_voxels


def unit_box() -> Mesh:
    return load_mesh(shapes.box((-0.5, 0, 1), (0.5, 1, 2)))


# --- the placement rules ------------------------------------------------------------------


def test_bounds_and_a_grid_divide_the_box_exactly():
    """origin = bmin, h = side / n per axis: voxels of three sizes where the box's sides are
    not in the grid's proportions, cubes (one float) where they are."""
    box = [[-2.0, -2.0, -1.5], [2.5, 2.5, 2.1]]
    placement = GridPlacement.fit(unit_box(), (90, 90, 36), bounds=box)
    assert placement.shape == (90, 90, 36)
    assert np.array_equal(placement.origin, box[0])
    side = 2.1 - -1.5
    assert placement.voxel_size == (4.5 / 90, 4.5 / 90, side / 36)
    assert not placement.cubic
    assert np.array_equal(placement.spacing, [4.5 / 90, 4.5 / 90, side / 36])
    cube = GridPlacement.fit(unit_box(), (30, 30, 60), bounds=[[0, 0, 0], [1, 1, 2]])
    assert cube.voxel_size == 1 / 30 and cube.cubic


@pytest.mark.parametrize(
    "box_fit, shape, far",
    [("cover", (90, 90, 72), (2.5, 2.5, 2.1)), ("cover", (91, 91, 72), None)],
)
def test_bounds_and_a_voxel_size_whole_voxels(box_fit, shape, far):
    """4.5 / 0.05 is 90.00000000000001 in float64 and counts as the whole 90 (within
    WHOLE_VOXEL_TOLERANCE); the grid starts at the box's min corner, no recentring."""
    box = [[-2.0, -2.0, -1.5], [2.5, 2.5, 2.1]]
    if far is None:  # the box, 0.0001 wider: no longer whole, and covered
        box = [[-2.0, -2.0, -1.5], [2.5001, 2.5001, 2.1]]
    placement = GridPlacement.fit(unit_box(), voxel_size=0.05, bounds=box, box_fit=box_fit)
    assert placement.shape == shape and placement.voxel_size == 0.05
    assert np.array_equal(placement.origin, box[0])
    if far is not None:
        assert np.allclose(placement.bounds[1], far, rtol=0, atol=1e-12)


def test_cover_and_inside():
    """n = ceil(side / h) (cover: the grid reaches past the far corner by less than a voxel)
    or floor(side / h) (inside: it stops short of it by less than one)."""
    box = np.array([[0.0, 0.0, 0.0], [1.0, 0.7, 0.3]])
    h = (0.25, 0.2, 0.125)
    cover = GridPlacement.fit(unit_box(), voxel_size=h, bounds=box)
    inside = GridPlacement.fit(unit_box(), voxel_size=h, bounds=box, box_fit="inside")
    assert cover.shape == (4, 4, 3) and inside.shape == (4, 3, 2)
    for placement in (cover, inside):
        assert np.array_equal(placement.origin, box[0]) and placement.voxel_size == h
    assert (cover.bounds[1] >= box[1]).all() and (cover.bounds[1] - box[1] < h).all()
    assert (inside.bounds[1] <= box[1]).all() and (box[1] - inside.bounds[1] < h).all()
    with pytest.raises(GridError, match=r"less than one voxel.*box_fit='inside' leaves no voxel"):
        GridPlacement.fit(unit_box(), voxel_size=0.5, bounds=box, box_fit="inside")
    assert GridPlacement.fit(unit_box(), voxel_size=0.5, bounds=box).shape == (2, 2, 1)


def test_bounds_alone_are_cubes_of_the_longest_side_over_512():
    placement = GridPlacement.fit(unit_box(), bounds=[[0, 0, 0], [2, 1, 0.5]])
    assert placement.voxel_size == 2 / 512 and placement.shape == (512, 256, 128)
    assert np.array_equal(placement.origin, [0, 0, 0])


def test_voxel_sizes_without_bounds_follow_the_old_rule_per_axis():
    """Centred on the mesh, each side the voxels that cover it rounded up to a multiple of 4
    (at least 8), as cubes always were."""
    mesh = load_mesh(shapes.box((0, 0, 0), (3, 1, 2)))
    placement = GridPlacement.fit(mesh, voxel_size=(0.25, 0.0625, 0.5))
    assert placement.shape == (12, 16, 8)
    assert placement.voxel_size == (0.25, 0.0625, 0.5)
    assert np.array_equal(placement.origin, [0.0, 0.0, -(8 * 0.5 - 2) / 2])
    # three equal sizes are cubes, the same placement as one
    same = GridPlacement.fit(mesh, voxel_size=[0.25] * 3)
    assert same.voxel_size == 0.25 and same.cubic
    assert same.shape == GridPlacement.fit(mesh, voxel_size=0.25).shape


def test_any_side_from_one():
    mesh = unit_box()
    for grid in [1, 3, 5, (1, 2, 3), (30, 100, 255), (1000, 7, 1)]:
        placement = GridPlacement.fit(mesh, grid)
        assert placement.shape == ((grid,) * 3 if isinstance(grid, int) else grid)
    # the old rule, exactly: h = longest side / n, centred
    placement = GridPlacement.fit(mesh, (30, 50, 100))
    h = 1 / 30
    assert placement.voxel_size == h
    assert np.array_equal(placement.origin, [0.0, 0.5, 1.5] - np.array([30, 50, 100]) * h / 2)


@pytest.mark.parametrize(
    "pad, low, high",
    [
        (2, (2, 2, 2), (2, 2, 2)),
        ((1, 0, 3), (1, 0, 3), (1, 0, 3)),
        (((1, 2), (0, 4), (3, 0)), (1, 0, 3), (2, 4, 0)),
        ((1, (0, 4), 3), (1, 0, 3), (1, 4, 3)),
        (np.array([1, 2, 3]), (1, 2, 3), (1, 2, 3)),
    ],
)
def test_padding_adds_voxels_around(pad, low, high):
    """pad adds whole voxels before and after each axis: n + lo + hi, origin - lo * h; around
    a grid that holds the mesh they are empty."""
    mesh = load_mesh(shapes.box((0, 0, 0), (3, 1, 2)))
    checked = check_pad(pad)
    assert checked == tuple(zip(low, high)) and check_pad(checked) == checked
    for kwargs in ({"grid": (12, 4, 8)}, {"voxel_size": (0.25, 0.25, 0.5)},
                   {"voxel_size": 0.25, "bounds": [[0, 0, 0], [3, 1, 2]]}):  # fmt: skip
        plain = GridPlacement.fit(mesh, **kwargs)
        padded = GridPlacement.fit(mesh, **kwargs, pad=pad)
        assert padded.shape == tuple(n + a + b for n, a, b in zip(plain.shape, low, high))
        assert np.array_equal(padded.origin, plain.origin - np.array(low) * plain.spacing)
        assert padded.voxel_size == plain.voxel_size
        got = voxelize_reference(mesh, **kwargs, pad=pad).to_numpy()
        inner = got[
            low[0] : low[0] + plain.shape[0],
            low[1] : low[1] + plain.shape[1],
            low[2] : low[2] + plain.shape[2],
        ]
        assert_same_voxels(inner, voxelize_reference(mesh, **kwargs).to_numpy())
        assert inner.sum() == got.sum()  # the border is empty


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"grid": 0}, "grid must be at least 1, not 0"),
        ({"grid": (4, -2, 4)}, "grid side y must be at least 1, not -2"),
        ({"grid": 65537}, "grid 65537 is larger than the supported maximum 65536"),
        ({"voxel_size": 0.0}, "voxel size must be positive and finite, not 0.0"),
        ({"voxel_size": (0.1, -0.1, 0.1)}, "voxel size along y must be positive and finite"),
        ({"voxel_size": (0.1, float("nan"), 0.1)}, "along y must be positive and finite, not nan"),
        ({"voxel_size": (0.1, 0.1)}, "one number or three"),
        ({"voxel_size": 1e-5, "bounds": [[0, 0, 0], [1, 1, 1]]}, "needs 100000 voxels along x"),
        ({"bounds": [[0, 0, 0], [1, float("inf"), 1]]}, "bounds must be finite: ymax is inf"),
        (
            {"bounds": [[0, 0, 0], [1, 1, 1]], "grid": 8, "box_fit": "inside"},
            "needs bounds and no grid",
        ),
        ({"box_fit": "inside"}, "needs bounds and no grid"),
        ({"voxel_size": 0.1, "box_fit": "tight"}, "unknown box fit 'tight'"),
        ({"pad": -1}, "pad must be from 0 to 65536 voxels, not -1"),
        ({"pad": 1.5}, "whole number of voxels"),
        ({"pad": (1, 2)}, "pad must be k, \\(kx, ky, kz\\)"),
        ({"pad": ((1, 2), (0, 0), (1,))}, "per side"),
        ({"grid": 65534, "pad": 2}, "65538 voxels along x \\(65534 and 2 \\+ 2 of padding\\)"),
    ],
)
def test_bad_grids_name_the_value(kwargs, message):
    with pytest.raises(GridError, match=message) as caught:
        GridPlacement.fit(unit_box(), **kwargs)
    assert "\n" not in str(caught.value)


def test_voxel_size_checks():
    assert check_voxel_size(0.5) == 0.5
    assert check_voxel_size((0.5, 0.5, 0.5)) == 0.5
    assert check_voxel_size(np.array([0.5, 0.25, 1])) == (0.5, 0.25, 1.0)
    for bad in ("0.5", True, None, [0.1, "a", 0.2]):
        with pytest.raises(GridError):
            check_voxel_size(bad)


# --- crops: the lattice a grid is voxelized on ----------------------------------------------


def test_a_grid_that_holds_the_mesh_is_its_own_lattice():
    mesh = unit_box()
    for placement in (
        GridPlacement.fit(mesh, 30),
        GridPlacement.fit(mesh, voxel_size=0.1, bounds=[[-1, -1, 0], [1, 2, 3]]),
    ):
        work = placement.work(mesh)
        assert work == WorkGrid(placement.shape, (0, 0, 0), placement.shape) and not work.crops


def test_a_crop_lattice_holds_the_box_and_the_mesh():
    case = placed(tie_shapes())
    mesh = Mesh(case.vertices, case.faces)
    crop = GridPlacement.fit(
        mesh, voxel_size=case.spacing, bounds=case.box(CROP_OFFSET, CROP_SHAPE)
    )
    assert crop.shape == CROP_SHAPE and not crop.clip
    work = crop.work(mesh)
    low = np.floor(case.grid_vertices.min(axis=0)).astype(int)
    high = np.ceil(case.grid_vertices.max(axis=0)).astype(int)
    assert work.crops and work.window == CROP_SHAPE
    assert work.offset == tuple(int(v) for v in np.array(CROP_OFFSET) - low)
    assert work.shape == tuple(int(v) for v in high - low)
    # the fine coordinates move by whole voxels, exactly
    grid, fine = crop.placed_vertices(mesh)
    own = crop.fine_vertices(mesh.vertices)
    assert np.array_equal(fine, own + (np.array(work.offset, np.int64) << FINE_BITS))
    assert np.array_equal(own, np.rint(np.ldexp(case.grid_vertices - CROP_OFFSET, FINE_BITS)))
    assert (grid >= 0).all() and (grid <= np.array(work.shape)).all()


def test_a_crop_lattice_over_the_maximum_is_refused():
    mesh = load_mesh(shapes.box((0, 0, 0), (100, 1, 1)))
    crop = GridPlacement.fit(mesh, voxel_size=0.01, bounds=[[50, 0, 0], [51, 1, 1]])
    with pytest.raises(GridError, match=r"the box cuts the mesh.*needs 10000"):
        crop.work(mesh)


def test_a_box_beside_the_mesh_holds_none_of_it():
    mesh = unit_box()
    beside = GridPlacement.fit(mesh, 8, bounds=[[1, 0, 1], [2, 1, 2]])  # touching x = 0.5? no
    assert not beside.holds_part_of(mesh)
    touching = GridPlacement.fit(mesh, 8, bounds=[[0.5, 0, 1], [2, 1, 2]])
    assert touching.holds_part_of(mesh)
    assert not voxelize_reference(mesh, 8, bounds=[[1, 0, 1], [2, 1, 2]]).to_numpy().any()


# --- cell centres and world positions -------------------------------------------------------


def test_centres_and_world_to_index():
    placement = GridPlacement((3, 4, 5), [1.0, -2.0, 0.5], (0.5, 0.25, 2.0))
    xs, ys, zs = (placement.axis_centres(axis) for axis in range(3))
    assert np.array_equal(xs, [1.25, 1.75, 2.25]) and np.array_equal(
        zs, 0.5 + 2.0 * (np.arange(5) + 0.5)
    )
    x, y, z = placement.centres()
    assert x.shape == y.shape == z.shape == (3, 4, 5)
    assert x.strides[1:] == (0, 0) and not x.flags.writeable  # one axis's values, no copy
    full = np.stack(np.meshgrid(xs, ys, zs, indexing="ij"), axis=-1)
    assert np.array_equal(np.stack([x, y, z], axis=-1), full)
    indices = np.argwhere(np.ones((3, 4, 5), bool))
    assert np.array_equal(placement.centres(indices), full.reshape(-1, 3))
    assert np.array_equal(placement.world_to_index(full.reshape(-1, 3)), indices)
    # a point on a face between voxels belongs to the upper one; outside: indices outside
    corners = placement.origin + np.array([[0.5, 0.25, 2.0], [1.5, 1.0, 10.0], [-0.01, 0, 0]])
    got = placement.world_to_index(corners)
    assert got.tolist() == [[1, 1, 1], [3, 4, 5], [-1, 0, 0]]
    assert placement.inside(got).tolist() == [True, False, False]
    with pytest.raises(GridError, match="finite"):
        placement.world_to_index([[np.nan, 0, 0]])
    with pytest.raises(GridError, match=r"shape \(\.\.\., 3\)"):
        placement.world_to_index([1.0, 2.0])


def test_world_to_index_of_a_vertex_is_where_the_voxelizer_sees_it():
    mesh = load_mesh(shapes.sphere((0.1, 0.2, 0.3), 1.0))
    placement = GridPlacement.fit(
        mesh, voxel_size=(0.1, 0.05, 0.2), bounds=[[-1, -1, -1], [1, 1, 1.2]]
    )
    index = placement.world_to_index(mesh.vertices)
    g = placement.fine_vertices(mesh.vertices)
    assert np.array_equal(index, np.floor(np.ldexp(g.astype(np.float64), -FINE_BITS)).astype(int))


# --- the references: exact, cropped as uncropped ------------------------------------------


@pytest.mark.parametrize("e", [0.0, 1e-6])
def test_voxels_of_three_sizes_are_exact(e):
    """Voxels of 1/8 x 1/4 x 1 (1:8): the reference equals the exact rational evaluation of
    the grid coordinates, faces on centre planes, vertices on column centres."""
    case = placed(tie_shapes(e))
    mesh = Mesh(case.vertices, case.faces)
    grid = voxelize_reference(
        mesh, voxel_size=tuple(case.spacing), bounds=case.box((0, 0, 0), LATTICE)
    )
    assert grid.shape == LATTICE and grid.voxel_size == (0.125, 0.25, 1.0)
    g = (case.vertices - case.origin) / case.spacing  # the placement's own float64 steps
    expected = exact_solid(g, case.faces, LATTICE)
    assert expected.any()
    assert_same_voxels(grid.to_numpy(), expected)


@pytest.mark.parametrize("e", [0.0, 1e-6])
def test_a_crop_through_the_middle_is_exact_and_the_uncropped_sub_array(e):
    """A box through the middle of every shape: vertices far outside it, crossings below it
    counted; the voxels are the exact evaluation of the crop's own coordinates (negative and
    beyond the box too), and the uncropped grid's voxels there."""
    case = placed(tie_shapes(e))
    mesh = Mesh(case.vertices, case.faces)
    spacing = tuple(case.spacing)
    crop = voxelize_reference(mesh, voxel_size=spacing, bounds=case.box(CROP_OFFSET, CROP_SHAPE))
    g = (case.vertices - crop.origin) / case.spacing
    assert (g < 0).any() and (g > np.array(CROP_SHAPE)).any()
    expected = exact_solid(g, case.faces, CROP_SHAPE)
    assert expected.any() and not expected.all()
    assert_same_voxels(crop.to_numpy(), expected)
    whole = voxelize_reference(mesh, voxel_size=spacing, bounds=case.box((0, 0, 0), LATTICE))
    assert_same_voxels(crop.to_numpy(), sub_array(whole.to_numpy()))


def sub_array(voxels: np.ndarray) -> np.ndarray:
    (i, j, k), (nx, ny, nz) = CROP_OFFSET, CROP_SHAPE
    return voxels[i : i + nx, j : j + ny, k : k + nz]


@pytest.mark.parametrize("fill_mode", ["vote", "union", "winding"])
def test_every_fill_mode_crops_as_the_uncropped_grid(fill_mode):
    case = placed(tie_shapes())
    mesh = Mesh(case.vertices, case.faces)
    spacing = tuple(case.spacing)
    voxelize = voxelize_reference
    if fill_mode == "winding":

        def voxelize(mesh, fill_mode, **kwargs):
            return voxelize_winding_reference(mesh, **kwargs)

    crop = voxelize(
        mesh, fill_mode=fill_mode, voxel_size=spacing, bounds=case.box(CROP_OFFSET, CROP_SHAPE)
    )
    whole = voxelize(
        mesh, fill_mode=fill_mode, voxel_size=spacing, bounds=case.box((0, 0, 0), LATTICE)
    )
    assert crop.to_numpy().any()
    assert_same_voxels(crop.to_numpy(), sub_array(whole.to_numpy()))


@pytest.mark.parametrize(
    "mode, surface, fill_mode",
    [
        ("surface", "conservative", "parity"),
        ("surface", "thin", "parity"),
        ("both", "conservative", "vote"),
    ],
)
def test_the_surface_modes_crop_as_the_uncropped_grid(mode, surface, fill_mode):
    case = placed(tie_shapes())
    mesh = Mesh(case.vertices, case.faces)
    kwargs = {
        "mode": mode,
        "surface": surface,
        "fill_mode": fill_mode,
        "voxel_size": tuple(case.spacing),
    }
    crop = voxelize_surface_reference(mesh, bounds=case.box(CROP_OFFSET, CROP_SHAPE), **kwargs)
    whole = voxelize_surface_reference(mesh, bounds=case.box((0, 0, 0), LATTICE), **kwargs)
    assert crop.to_numpy().any()
    assert_same_voxels(crop.to_numpy(), sub_array(whole.to_numpy()))


@pytest.mark.parametrize("seed", range(3))
def test_random_crops_of_a_model_as_the_uncropped_grid(seed):
    """The bundled gear (float32 vertices), dyadic voxels and boxes: every crop of a random
    window equals the grid around the whole mesh there, parity and vote."""
    mesh = load_mesh("models/gear.ply")
    h = 1 / 32
    low = np.floor(mesh.bounds[0] / h) * h - 2 * h
    lattice = (np.ceil((mesh.bounds[1] - low) / h) + 2).astype(int)
    rng = np.random.default_rng(seed)
    offset = rng.integers(0, lattice // 2)
    shape = rng.integers(1, lattice - offset)
    box = [low + offset * h, low + (offset + shape) * h]
    whole_box = [low, low + lattice * h]
    for fill_mode in ("parity", "vote"):
        crop = voxelize_reference(mesh, fill_mode=fill_mode, voxel_size=h, bounds=box).to_numpy()
        whole = voxelize_reference(
            mesh, fill_mode=fill_mode, voxel_size=h, bounds=whole_box
        ).to_numpy()
        (i, j, k), (nx, ny, nz) = offset, shape
        assert crop.shape == tuple(shape)
        assert_same_voxels(crop, whole[i : i + nx, j : j + ny, k : k + nz])


def test_any_size_is_the_exact_contract():
    """Sizes that are not multiples of 4 (1, 3, 5, 30): the reference equals the exact
    evaluation of the placed coordinates."""
    mesh = load_mesh(shapes.sphere((0.1, -0.2, 0.3), 1.0, subdivisions=2))
    for grid in [1, 3, 5, 30, (7, 1, 13)]:
        placement = GridPlacement.fit(mesh, grid)
        g = np.ldexp(placement.fine_vertices(mesh.vertices).astype(np.float64), -FINE_BITS)
        expected = exact_solid(g, mesh.faces, placement.shape)
        assert_same_voxels(voxelize_reference(mesh, grid).to_numpy(), expected)
    assert voxelize_reference(mesh, 3).to_numpy()[1, 1, 1]  # the centre is inside


def test_the_largest_sides_stay_in_range():
    assert MAX_RESOLUTION == 65536
    assert math.isclose(
        GridPlacement.fit(unit_box(), voxel_size=1 / 65536, bounds=[[0, 0, 0], [1, 1, 1]]).spacing[
            0
        ],
        1 / 65536,
    )


# --- writers and converters: the three sizes, any shape ----------------------------------


def three_size_grid(shape=(7, 5, 3)) -> DenseGrid:
    rng = np.random.default_rng(5)
    placement = GridPlacement(shape, [0.5, -1.0, 2.0], (0.1, 0.2, 0.05))
    return DenseGrid(rng.random(shape) < 0.4, placement)


@pytest.mark.parametrize("suffix", [".npz", ".vti", ".svo"])
@pytest.mark.parametrize("shape", [(7, 5, 3), (1, 1, 1), (30, 9, 13)], ids=str)
def test_files_keep_the_three_sizes_and_any_shape(tmp_path, suffix, shape):
    grid = three_size_grid(shape)
    path = tmp_path / f"grid{suffix}"
    voxelizer.save(grid, path)
    back = voxelizer.load(path)
    assert back.shape == shape and back.voxel_size == (0.1, 0.2, 0.05)
    assert np.array_equal(back.origin, grid.origin)
    assert_same_voxels(back.to_numpy(), grid.to_numpy())
    if suffix == ".svo":  # version 4: the three sizes after version 3's header
        data = path.read_bytes()
        assert struct.unpack_from("<I", data, 8)[0] == 4
        assert struct.unpack_from("<3d", data, 128) == (0.1, 0.2, 0.05)


def test_cubic_voxels_keep_their_file_versions(tmp_path):
    """Cubes of any shape are still version 2 (3 with face ids): older readers read them."""
    placement = GridPlacement((30, 9, 13), np.zeros(3), 0.25)
    svo = SVO.from_dense(np.ones((30, 9, 13), bool), placement)
    voxelizer.save(svo, tmp_path / "cube.svo")
    assert struct.unpack_from("<I", (tmp_path / "cube.svo").read_bytes(), 8)[0] == 2
    voxelizer.save(svo, tmp_path / "cube.npz")
    with np.load(tmp_path / "cube.npz") as data:
        assert data["voxel_size"].shape == () and float(data["voxel_size"]) == 0.25


@pytest.mark.parametrize("suffix", [".binvox", ".vox"])
def test_formats_of_one_size_refuse_three(tmp_path, suffix):
    grid = three_size_grid((8, 8, 8))
    with pytest.raises(OutputError, match=rf"\{suffix} holds cubic voxels only.*0.1x0.2x0.05"):
        voxelizer.save(grid, tmp_path / f"grid{suffix}")
    assert not (tmp_path / f"grid{suffix}").exists()


def test_converters_keep_the_three_sizes():
    grid = three_size_grid()
    vg = grid.to_trimesh()
    assert np.allclose(np.diag(vg.transform)[:3], [0.1, 0.2, 0.05])
    assert np.allclose(vg.points, grid.centres(np.argwhere(grid.to_numpy())))
    image = grid.to_pyvista()
    assert np.allclose(image.spacing, (0.1, 0.2, 0.05))
    mesh = grid.to_mesh()
    assert np.isclose(abs(mesh.volume), grid.count() * 0.1 * 0.2 * 0.05)
    with pytest.raises(GridError, match="cubic voxels only"):
        grid.to_open3d()
    svo = SVO.from_dense(grid.to_numpy(), grid.placement)
    assert np.isclose(svo.volume(), grid.count() * 0.1 * 0.2 * 0.05)
    assert "voxel_size=0.1x0.2x0.05" in repr(svo) and "0.1x0.2x0.05" in grid._repr_html_()
    centres = grid.centres(np.argwhere(grid.to_numpy()))
    assert svo.contains(centres).all()


def test_an_empty_svo_is_the_root_alone():
    for shape in [(1, 1, 1), (9, 3, 5), (100, 2, 2)]:
        placement = GridPlacement(shape, np.zeros(3), (1.0, 2.0, 3.0))
        assert SVO.empty(placement) == SVO.from_dense(np.zeros(shape, bool), placement)
