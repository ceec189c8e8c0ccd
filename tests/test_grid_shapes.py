"""Grids of any shape (nx, ny, nz), explicit voxel sizes and bounds, on the CPU side: the
placement rules, the reference voxelizer, the GPU bit layout, DenseGrid and SVO (arrays, queries,
.svo versions 1 and 2), the writers, and the memory-size parser and progress line of the CLI."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest

from tests import shapes
from voxelizer import SVO, DenseGrid, GridError, MemoryBudgetError, MeshError, OutputError
from voxelizer.budget import parse_size
from voxelizer.grid import column_words, pack_columns, unpack_columns
from voxelizer.io.preview import render_views
from voxelizer.io.writers import write
from voxelizer.mesh import Mesh, load_mesh
from voxelizer.placement import DEFAULT_GRID, GridPlacement, check_shape, shape_text
from voxelizer.progress import TerminalProgress
from voxelizer.reference import solid_columns, vote_columns, voxelize_reference
from voxelizer.svo import HEADER, HEADER_V1, build_arrays

from .test_formats import read_vox, vox_voxels
from .test_svo import spec_arrays

SHAPES = [(16, 8, 12), (8, 8, 8), (40, 12, 8), (8, 36, 20), (12, 12, 68), (28, 8, 8)]


def random_mesh(seed: int, scale=(1.0, 1.0, 1.0), shift=(0.0, 0.0, 0.0)) -> Mesh:
    """Points in general position (a convex hull is not needed: placement sees only bounds)."""
    rng = np.random.default_rng(seed)
    vertices = rng.random((30, 3)) * np.array(scale) + np.array(shift)
    return load_mesh((vertices, rng.integers(0, 30, (20, 3))))


def blobs(shape, seed: int, count: int = 6) -> np.ndarray:
    """Unions of random boxes (full nodes and mixed bricks), plus noise, of any shape."""
    rng = np.random.default_rng(seed)
    voxels = rng.random(shape) < 0.05
    for _ in range(count):
        lo = rng.integers(0, shape, 3)
        hi = lo + rng.integers(1, max(shape), 3)
        voxels[lo[0] : hi[0], lo[1] : hi[1], lo[2] : hi[2]] = True
    return voxels


def in_cube(voxels: np.ndarray) -> np.ndarray:
    """The same voxels in the corner of a cube of the longest side (the rest empty)."""
    n = max(voxels.shape)
    cube = np.zeros((n, n, n), bool)
    cube[: voxels.shape[0], : voxels.shape[1], : voxels.shape[2]] = voxels
    return cube


# --- shapes and placement -------------------------------------------------------------------


def test_check_shape():
    assert check_shape(16) == (16, 16, 16)
    assert check_shape((16, 8, 12)) == check_shape([16, 8, 12]) == (16, 8, 12)
    assert check_shape(np.array([16, 8, 12])) == (16, 8, 12)
    assert all(type(n) is int for n in check_shape(np.array([16, 8, 12])))
    for bad, message in [
        ((16, 8), "three sides"),
        ((8, 8, 8, 8), "three sides"),
        ((16, 10, 12), "side y must be a multiple of 4"),
        ((16, 8, 4), "side z must be a multiple of 4"),
        ((8192 + 4, 8, 8), "side x 8196 is larger"),
        ((16, 8.0, 12), "integer"),
        ("16x8x12", "integer N or three"),
        (None, "integer N or three"),
        (True, "integer N or three"),
        (2.0, "integer N or three"),
        (30, "multiple of 4"),
        (np.zeros((3, 1), int), "integer N or three"),
    ]:
        with pytest.raises(GridError, match=message):
            check_shape(bad)
    assert shape_text((512, 256, 128)) == "512x256x128"


def test_placement_holds_a_shape():
    placement = GridPlacement((16, 8, 12), [1, 2, 3], 0.5)
    assert placement.shape == (16, 8, 12) and placement.resolution == 16
    assert placement.origin.dtype == np.float64 and placement.voxel_size == 0.5
    assert GridPlacement(24, np.zeros(3), 1.0).shape == (24, 24, 24)
    with pytest.raises(GridError):
        GridPlacement((16, 8, 10), np.zeros(3), 1.0)


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
    with pytest.raises(GridError, match=r"voxel size .* needs a 8196x2732x5464 grid"):
        GridPlacement.fit(mesh, voxel_size=3 / 8193)
    with pytest.raises(GridError, match="too small"):
        GridPlacement.fit(mesh, voxel_size=1e-320)
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
    mesh = load_mesh(shapes.box((-0.5, 0, 1), (0.5, 1, 2)))
    box = [[-1, -2, -3], [1, 2, 3]]
    placement = GridPlacement.fit(mesh, voxel_size=0.25, bounds=box)
    # Extents 2, 4, 6 are multiples of 4h: the grid spans the bounds and starts at their min.
    assert placement.shape == (8, 16, 24)
    assert np.array_equal(placement.origin, [-1.0, -2.0, -3.0])
    placement = GridPlacement.fit(mesh, voxel_size=0.125, bounds=np.array(box) + 0.1)
    assert placement.shape == (16, 32, 48)
    assert np.array_equal(placement.origin, np.array(box[0], float) + 0.1)
    placement = GridPlacement.fit(mesh, 16, bounds=box)  # h = 6 / 16, centred on the bounds
    assert placement.voxel_size == 0.375 and np.array_equal(placement.origin, [-3.0, -3.0, -3.0])
    placement = GridPlacement.fit(mesh, (8, 16, 24), bounds=box)
    assert placement.voxel_size == 0.25 and np.array_equal(placement.origin, [-1, -2, -3])
    placement = GridPlacement.fit(mesh, bounds=box)  # the default cube of 512
    assert placement.shape == (512,) * 3 and placement.voxel_size == 6 / 512
    # The mesh may touch the bounds (the box is closed).
    GridPlacement.fit(mesh, 16, bounds=[[-0.5, 0, 1], [0.5, 1, 2]])


@pytest.mark.parametrize(
    "bounds, message",
    [
        ([[-0.4, 0, 1], [0.5, 1, 2]], r"reaches 0.1 below the bounds along x"),
        ([[-0.5, 0, 1], [0.5, 0.75, 2]], r"reaches 0.25 above the bounds along y"),
        ([[-1, -1, 1.5], [1, 1, 3]], r"reaches 0.5 below the bounds along z .*cropping"),
        ([[0, 0, 0], [1, 1]], "bounds must be"),
        ([0, 0, 0, 1, 1, 1], "shape"),
        ([[0, 0, 0], [1, 1, float("nan")]], "finite"),
        ([[0, 0, 0], [1, float("inf"), 1]], "finite"),
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


# --- the reference on non-cubic grids --------------------------------------------------------


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


# --- GPU bit layout and DenseGrid -------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES + [(8, 12, 40), (12, 8, 64), (8, 8, 100)])
def test_pack_and_unpack_columns(shape):
    voxels = np.random.default_rng(1).random(shape) < 0.5
    words = pack_columns(voxels)
    nx, ny, nz = shape
    assert words.dtype == np.uint32 and words.shape == (nx * ny * column_words(nz),)
    assert np.array_equal(unpack_columns(words, shape), voxels)


def test_column_layout_word_by_word():
    shape = (12, 8, 40)  # two words per column, the second one partly padding
    for i, j, k in [(0, 0, 0), (11, 0, 0), (0, 7, 0), (5, 3, 31), (5, 3, 32), (11, 7, 39)]:
        voxels = np.zeros(shape, bool)
        voxels[i, j, k] = True
        words = pack_columns(voxels)
        expected = np.zeros(12 * 8 * 2, np.uint32)
        expected[(j * 12 + i) * 2 + k // 32] = np.uint32(1) << np.uint32(k % 32)
        assert np.array_equal(words, expected), (i, j, k)
        assert np.array_equal(unpack_columns(expected, shape), voxels)


def test_dense_grid_keeps_its_shape(tmp_path):
    voxels = blobs((16, 8, 12), 3)
    placement = GridPlacement((16, 8, 12), np.array([0.1, -0.2, 0.3]), 0.7)
    grid = DenseGrid(voxels, placement)
    assert grid.shape == (16, 8, 12) and grid.resolution == 16
    assert repr(grid).startswith("DenseGrid(16x8x12, ")
    grid.save_npz(tmp_path / "g.npz")
    loaded = DenseGrid.load_npz(tmp_path / "g.npz")
    assert loaded.shape == (16, 8, 12) and np.array_equal(loaded.to_numpy(), voxels)
    assert np.array_equal(loaded.origin, grid.origin) and loaded.voxel_size == 0.7
    with pytest.raises(ValueError, match="shape"):
        DenseGrid(voxels.transpose(1, 0, 2), placement)


# --- SVO ------------------------------------------------------------------------------------


def placed(voxels, origin=(0.5, -1.0, 2.0), h=0.25) -> SVO:
    return SVO.from_dense(voxels, GridPlacement(voxels.shape, np.array(origin, float), h))


def svo_cases():
    rng = np.random.default_rng(11)
    for shape in SHAPES:
        yield f"blobs{shape_text(shape)}", blobs(shape, sum(shape))
        yield f"noise{shape_text(shape)}", rng.random(shape) < 0.3
    yield "full16x8x12", np.ones((16, 8, 12), bool)
    yield "empty8x40x12", np.zeros((8, 40, 12), bool)


@pytest.mark.parametrize(
    "name, voxels", list(svo_cases()), ids=lambda v: v if isinstance(v, str) else ""
)
def test_svo_arrays_and_dense_round_trip(name, voxels):
    nodes, bricks, offsets = build_arrays(voxels)
    # Padding is empty, so the tree is the one of the cube with the voxels in its corner,
    # and that one is checked against the slow spec build.
    for mine, spec in zip((nodes, bricks, offsets), spec_arrays(in_cube(voxels))):
        assert np.array_equal(mine, spec), name
    svo = placed(voxels)
    assert svo.shape == voxels.shape and svo.resolution == max(voxels.shape)
    assert svo.padded_resolution == max(8, 1 << (max(voxels.shape) - 1).bit_length())
    assert svo.count() == int(voxels.sum())
    assert np.array_equal(svo.to_dense(), voxels)
    assert np.array_equal(svo._lookup(np.argwhere(np.ones(voxels.shape, bool))), voxels.ravel())


def test_build_arrays_rejects_bad_shapes():
    for shape in [(16, 8, 10), (16, 4, 8), (8, 8), (8, 8, 8, 8)]:
        with pytest.raises(ValueError, match="multiple of 4"):
            build_arrays(np.zeros(shape, bool))


def test_svo_queries_respect_the_shape():
    voxels = blobs((16, 8, 12), 5)
    voxels[15, 7, 11] = True
    svo = placed(voxels, origin=(1.0, 2.0, 3.0), h=0.5)
    assert repr(svo).startswith("SVO(16x8x12, ")
    assert np.array_equal(svo.bounds, [[1, 2, 3], [9, 6, 9]])
    assert svo[15, 7, 11] and svo[0, 0, 0] == voxels[0, 0, 0]
    for index in [(16, 0, 0), (0, 8, 0), (0, 0, 12), (15, 15, 15), (-1, 0, 0)]:
        with pytest.raises(IndexError, match="16x8x12"):
            svo[index]
    index = np.argwhere(np.ones((16, 8, 12), bool))
    centres = svo.placement.voxel_centres(index)
    assert np.array_equal(svo.contains(centres), voxels.ravel())
    # Beyond the shape but inside the padded 16^3 cube: outside.
    outside = svo.placement.voxel_centres(np.array([[0, 8, 0], [0, 0, 12], [15, 15, 15]]))
    assert not svo.contains(outside).any()
    assert not svo.contains(np.array([[8.999, 5.999, 9.0]]))[0]  # z face of the grid
    assert svo.contains(np.array([[8.999, 5.999, 8.999]]))[0]


def test_svo_solid_boxes_lod_and_meshes():
    voxels = blobs((40, 12, 8), 2)
    svo = placed(voxels)
    corners, sizes = svo.solid_boxes()
    painted = np.zeros((svo.padded_resolution,) * 3, bool)
    for corner, side in zip(corners, sizes):
        painted[tuple(slice(c, c + side) for c in corner)] = True
    assert np.array_equal(painted, np.pad(voxels, [(0, 64 - 40), (0, 64 - 12), (0, 64 - 8)]))
    for level, shape in [(1, (20, 8, 8)), (2, (12, 8, 8)), (3, (8, 8, 8))]:
        f = 2**level
        for rule in ("any", "majority"):
            lod = svo.lod(level, rule)
            assert lod.shape == shape and lod.voxel_size == 0.25 * f
            assert np.array_equal(lod.origin, svo.origin)
            fine = np.zeros(tuple(s * f for s in shape), bool)
            fine[:40, :12, :8] = voxels
            blocks = fine.reshape(shape[0], f, shape[1], f, shape[2], f)
            coarse = (
                blocks.any(axis=(1, 3, 5))
                if rule == "any"
                else blocks.sum(axis=(1, 3, 5)) * 2 > f**3
            )
            assert np.array_equal(lod.to_dense(), coarse), (level, rule)
    mesh = svo.to_mesh()
    assert mesh.is_watertight and mesh.is_winding_consistent
    assert mesh.volume == pytest.approx(svo.volume(), rel=1e-12)
    grid = svo.to_trimesh()
    assert np.array_equal(grid.matrix, voxels)
    assert np.allclose(grid.points, svo.placement.voxel_centres(np.argwhere(voxels)))


def test_svo_padding_beyond_a_side_must_stay_empty():
    voxels = np.zeros((16, 16, 16), bool)
    voxels[3, 9, 3] = True  # inside 16^3 and 16x12x16, beyond y = 8
    nodes, bricks, offsets = build_arrays(voxels)
    SVO(nodes, bricks, offsets, GridPlacement((16, 12, 16), np.zeros(3), 1.0))
    with pytest.raises(Exception, match="padding"):
        SVO(nodes, bricks, offsets, GridPlacement((16, 8, 16), np.zeros(3), 1.0))


def test_svo_equality_compares_shapes():
    voxels = np.zeros((16, 16, 16), bool)
    voxels[1, 1, 1] = True
    a = placed(voxels)
    b = placed(voxels[:, :, :12])
    assert a != b and a == placed(voxels.copy())


def test_svo_v2_files_round_trip(tmp_path):
    for index, (name, voxels) in enumerate(svo_cases()):
        svo = placed(voxels, origin=(0.1, -2.7e5, 1 / 3), h=0.1 + index)
        path = tmp_path / f"{index}.svo"
        svo.save(path)
        data = path.read_bytes()
        fields = HEADER.unpack_from(data)
        assert fields[:9] == (
            b"VOXSVO\r\n",
            2,
            96,
            *voxels.shape,
            svo.padded_resolution,
            svo.levels,
            0,
        ), name
        assert fields[9:13] == (0.1, -2.7e5, 1 / 3, 0.1 + index)
        loaded = SVO.load(path)
        assert loaded == svo and loaded.shape == voxels.shape
        assert np.array_equal(loaded.origin, svo.origin) and loaded.voxel_size == svo.voxel_size
        assert np.array_equal(loaded.to_dense(), voxels)
        padding = 4 if svo.levels % 2 == 0 else 0
        assert len(data) == HEADER.size + svo.nbytes + padding + 4


def version_1_file(svo: SVO) -> bytes:
    """A version 1 file of a cubic SVO, laid out by hand from docs/svo-format.md."""
    n = svo.resolution
    header = HEADER_V1.pack(
        b"VOXSVO\r\n",
        1,
        88,
        n,
        svo.padded_resolution,
        svo.levels,
        0,
        *svo.origin,
        svo.voxel_size,
        svo.node_count,
        svo.brick_count,
        svo.count(),
    )
    body = (
        header
        + svo.level_offsets.astype("<u4").tobytes()
        + svo.nodes.astype("<u4").tobytes()
        + bytes((88 + 4 * (svo.levels + 1)) % 8)
        + svo.bricks.astype("<u8").tobytes()
    )
    return body + struct.pack("<I", zlib.crc32(body))


def test_version_1_files_still_load(tmp_path):
    for n, seed in [(8, 1), (12, 2), (20, 3), (36, 4)]:
        svo = placed(blobs((n, n, n), seed), origin=(0.1, -2.5, 3.25), h=0.3)
        path = tmp_path / f"v1_{n}.svo"
        path.write_bytes(version_1_file(svo))
        loaded = SVO.load(path)
        assert loaded == svo and loaded.shape == (n, n, n)
        assert np.array_equal(loaded.to_dense(), svo.to_dense())
    data = version_1_file(svo)
    bad = bytearray(data)
    struct.pack_into("<I", bad, 16, 30)  # N
    bad[-4:] = struct.pack("<I", zlib.crc32(bytes(bad[:-4])))
    path.write_bytes(bytes(bad))
    with pytest.raises(Exception, match="multiple of 4"):
        SVO.load(path)
    path.write_bytes(data[:-1])
    with pytest.raises(Exception, match="size"):
        SVO.load(path)


# --- writers ----------------------------------------------------------------------------------


def test_writers_on_a_non_cubic_grid(tmp_path):
    voxels = blobs((40, 12, 8), 9)
    svo = placed(voxels)
    write(svo, tmp_path / "g.npz")
    loaded = DenseGrid.load_npz(tmp_path / "g.npz")
    assert loaded.shape == (40, 12, 8) and np.array_equal(loaded.to_numpy(), voxels)
    write(svo, tmp_path / "g.vox")
    parsed = read_vox(tmp_path / "g.vox")
    assert [size for size, _ in parsed["models"]] == [(40, 12, 8)]
    assert np.array_equal(vox_voxels(parsed, 40)[:, :12, :8], voxels)
    write(svo, tmp_path / "g.svo")
    assert SVO.load(tmp_path / "g.svo") == svo
    for suffix in (".ply", ".obj", ".glb"):
        write(svo, tmp_path / f"g{suffix}")


def test_vox_tiles_follow_each_side(tmp_path):
    voxels = np.zeros((264, 8, 300), bool)
    voxels[0, 0, 0] = voxels[263, 7, 299] = voxels[100, 3, 260] = True
    svo = placed(voxels)
    svo.to_vox(tmp_path / "big.vox")
    parsed = read_vox(tmp_path / "big.vox")
    assert sorted(size for size, _ in parsed["models"]) == [(8, 8, 44), (256, 8, 44), (256, 8, 256)]
    assert np.array_equal(vox_voxels(parsed, 300)[:264, :8, :300], voxels)


def test_binvox_refuses_non_cubic_grids(tmp_path):
    """binvox has one scale for the whole grid, and trimesh cannot load other shapes."""
    svo = placed(blobs((16, 8, 12), 1))
    with pytest.raises(OutputError, match="cubic grids only, not 16x8x12"):
        write(svo, tmp_path / "g.binvox")
    assert not (tmp_path / "g.binvox").exists()
    write(placed(blobs((16, 16, 16), 1)), tmp_path / "cube.binvox")


def test_preview_keeps_proportions():
    voxels = np.zeros((40, 12, 8), bool)
    voxels[2:30, 3:9, 1:7] = True
    image = render_views(voxels)
    # One scale for all views: 40 voxels -> 280 pixels (factor 7); views 40x12, 8x12, 40x8
    # (width x height) side by side with 8-pixel gaps, centred on the tallest.
    assert image.shape == (8 + 12 * 7 + 8, 8 + 280 + 8 + 56 + 8 + 280 + 8, 3)
    third = image[8:-8, 8 + 280 + 8 + 56 + 8 : -8]
    assert (third[:14] == 255).all() and (third[-14:] == 255).all()  # (84 - 56) / 2 above, below
    assert (third[14:-14] != 255).any()
    cube = render_views(np.pad(voxels, [(0, 0), (0, 28), (0, 32)]))
    assert cube.shape == (8 + 280 + 8, 8 + 3 * 288, 3)


# --- memory sizes and the progress line --------------------------------------------------------


@pytest.mark.parametrize(
    "text, size",
    [
        ("512MiB", 512 << 20),
        ("2GiB", 2 << 30),
        ("1.5GB", 1_500_000_000),
        ("100", 100),
        ("1kb", 1000),
        ("1 KB", 1000),
        ("0.3kB", 300),
        ("1.5KiB", 1536),
        ("3TiB", 3 << 40),
        (".5mib", 1 << 19),
        ("7b", 7),
        ("7 B", 7),
        ("1TB", 10**12),
        ("1.0000005kB", 1000),
        (" 64MiB ", 64 << 20),
        ("1.0", 1),
        (4096, 4096),
        (np.int64(5), 5),
    ],
)
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "cannot read"),
        ("x", "cannot read"),
        ("GB", "cannot read"),
        ("-1", "cannot read"),
        ("1e9", "cannot read"),
        ("5 MiBs", "cannot read"),
        ("1,000", "cannot read"),
        ("2 GiB 3", "cannot read"),
        ("12XB", "cannot read"),
        ("1.5", "whole"),
        ("0.5B", "whole"),
        ("0", "at least one byte"),
        (0, "at least one byte"),
        (-5, "at least one byte"),
        ("0.0001kB", "at least one byte"),
        (2.5, "int or a string"),
        (True, "int or a string"),
        (None, "int or a string"),
    ],
)
def test_parse_size_refuses(text, message):
    with pytest.raises(MemoryBudgetError, match=message):
        parse_size(text)


class FakeTerminal(io.StringIO):
    def __init__(self, tty: bool = True):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_line():
    stream, clock = FakeTerminal(), FakeClock()
    progress = TerminalProgress(stream, clock=clock, columns=80)
    assert progress.enabled
    progress("fill", 1, 10)
    clock.now += 0.9
    progress("fill", 2, 10)
    assert stream.getvalue() == ""  # nothing during the first second
    clock.now += 0.2
    progress("fill", 3, 10)
    assert stream.getvalue() == "\rfill:  30% (3/10)"
    clock.now += 0.05
    progress("fill", 4, 10)  # too soon after the last redraw
    progress("svo", 0, 5_000)  # but a new stage redraws at once, over the longer old line
    assert stream.getvalue() == "\rfill:  30% (3/10)\rsvo:   0% (0/5,000)"
    clock.now += 0.01
    progress("svo", 5_000, 5_000)  # and so does the end of a stage
    progress("read", 7, 0)  # no total known
    assert stream.getvalue().endswith("\rsvo: 100% (5,000/5,000)\rread: 7" + " " * 16)
    progress.close()
    assert stream.getvalue().endswith("\r" + " " * 7 + "\r")  # blank what is written
    end = stream.getvalue()
    clock.now += 5
    progress("fill", 9, 10)
    progress.close()
    assert stream.getvalue() == end  # nothing after close, and close only clears once


def test_progress_line_is_cut_to_the_terminal():
    stream, clock = FakeTerminal(), FakeClock()
    progress = TerminalProgress(stream, clock=clock, columns=12, delay=0.0)
    progress("a long stage name", 1, 2)
    assert stream.getvalue() == "\ra long stag"


@pytest.mark.parametrize("tty, quiet", [(False, False), (True, True), (False, True)])
def test_progress_is_silent_off_a_terminal_or_when_quiet(tty, quiet):
    stream, clock = FakeTerminal(tty), FakeClock()
    with TerminalProgress(stream, quiet=quiet, clock=clock) as progress:
        assert not progress.enabled
        for step in range(5):
            clock.now += 1
            progress("fill", step, 4)
    assert stream.getvalue() == ""


def test_progress_close_without_a_line_writes_nothing():
    stream = FakeTerminal()
    TerminalProgress(stream).close()
    assert stream.getvalue() == ""
    assert not TerminalProgress(io.StringIO()).enabled  # no isatty to ask: not a terminal
