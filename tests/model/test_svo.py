"""The SVO object: arrays exactly as docs/svo-format.md says, every query against the dense grid."""

from __future__ import annotations

import numpy as np
import pytest

from voxelizer import SVO, DenseGrid, SVOFormatError
from voxelizer.octree import build_arrays, morton_decode, morton_encode
from voxelizer.placement import GridPlacement

from ..helpers import PROJECT_MODELS, SHARED_MODELS, noisy_blobs, placed, svo_cases

MODELS = (
    sorted(SHARED_MODELS.glob("*.ply"))
    + sorted(SHARED_MODELS.glob("*.stl"))
    + sorted(PROJECT_MODELS.glob("*.ply"))
)


def spec_arrays(voxels: np.ndarray):
    """The format built the slow, obvious way: breadth-first from the root, children in
    octant order, each cube classified by slicing the padded grid."""
    n = voxels.shape[0]
    p = max(8, 1 << (n - 1).bit_length())
    grid = np.zeros((p, p, p), bool)
    grid[:n, :n, :n] = voxels
    levels = (p // 4).bit_length() - 1

    def state(corner, side):
        cube = grid[tuple(slice(a, a + side) for a in corner)]
        return "full" if cube.all() else "mixed" if cube.any() else "empty"

    nodes, bricks, offsets, level_nodes = [], [], [], [(0, 0, 0)]
    for level in range(levels):
        offsets.append(len(nodes))
        side = p >> (level + 1)
        next_nodes = []
        for corner in level_nodes:
            mixed = full = 0
            first = len(next_nodes) + (offsets[-1] + len(level_nodes) if level + 1 < levels else 0)
            for c in range(8):
                child = tuple(corner[a] + ((c >> a) & 1) * side for a in range(3))
                kind = state(child, side)
                if kind == "mixed":
                    mixed |= 1 << c
                    next_nodes.append(child)
                full |= (kind == "full") << c
            nodes.append([mixed | full << 8, first])
        level_nodes = next_nodes
    for x, y, z in level_nodes:
        bits = (
            grid[x : x + 4, y : y + 4, z : z + 4].transpose(2, 1, 0).ravel()
        )  # index x + 4y + 16z
        bricks.append(sum(1 << int(b) for b in np.flatnonzero(bits)))
    offsets.append(len(nodes))
    return (
        np.array(nodes, np.uint32).reshape(-1, 2),
        np.array(bricks, np.uint64),
        np.array(offsets, np.uint32),
    )


def blobs(n: int, seed: int, count: int = 6) -> np.ndarray:
    """Unions of random boxes: full nodes at several levels as well as mixed bricks."""
    rng = np.random.default_rng(seed)
    voxels = np.zeros((n, n, n), bool)
    for _ in range(count):
        lo = rng.integers(0, n, 3)
        hi = lo + rng.integers(1, n, 3)
        voxels[lo[0] : hi[0], lo[1] : hi[1], lo[2] : hi[2]] = True
    return voxels


def dense_cases():
    rng = np.random.default_rng(7)
    for n in (8, 12, 16, 20, 28, 32):
        yield f"blobs{n}", blobs(n, n)
        yield f"noise{n}", rng.random((n, n, n)) < 0.3
    yield "full12", np.ones((12, 12, 12), bool)
    yield "empty20", np.zeros((20, 20, 20), bool)


@pytest.mark.parametrize(
    "name, voxels", list(dense_cases()), ids=lambda v: v if isinstance(v, str) else ""
)
def test_build_arrays_matches_the_spec_built_the_slow_way(name, voxels):
    built = build_arrays(voxels)
    expected = spec_arrays(voxels)
    for got, want, what in zip(built, expected, ("nodes", "bricks", "level_offsets")):
        assert got.dtype == want.dtype and np.array_equal(got, want), what
    assert np.array_equal(placed(voxels).to_numpy(), voxels)


def one(n: int, *cells) -> np.ndarray:
    voxels = np.zeros((n, n, n), bool)
    for cell in cells:
        voxels[cell] = True
    return voxels


@pytest.mark.parametrize(
    "voxels, nodes, bricks, offsets",
    [
        (one(8), [[0, 0]], [], [0, 1]),  # empty: the root alone
        (np.ones((8, 8, 8), bool), [[0xFF00, 0]], [], [0, 1]),
        (
            np.ones((16, 16, 16), bool),
            [[0xFF00, 1]],
            [],
            [0, 1, 1],
        ),  # first_child: next level's start
        (
            one(8, (5, 1, 6)),
            [[1 << 5, 0]],
            [1 << 37],
            [0, 1],
        ),  # brick (1,0,1) = octant 5, bit 1+4+32
        (one(16, (15, 15, 15)), [[0x80, 1], [0x80, 0]], [1 << 63], [0, 1, 2]),
        (one(8, (slice(4, 8), slice(0, 4), slice(0, 4))), [[0x200, 0]], [], [0, 1]),  # a full brick
        (
            one(16, (slice(8, 16), slice(8, 16), slice(0, 8))),
            [[0x800, 1]],
            [],
            [0, 1, 1],
        ),  # octant 3
        # 12^3 solid in P = 16: octant 0 full; in the 7 others only the children below 12 are full
        (
            np.ones((12, 12, 12), bool),
            [
                [0x1FE, 1],
                [0x5500, 0],
                [0x3300, 0],
                [0x1100, 0],
                [0x0F00, 0],
                [0x0500, 0],
                [0x0300, 0],
                [0x0100, 0],
            ],
            [],
            [0, 1, 8],
        ),
    ],
)
def test_small_cases_give_the_exact_arrays(voxels, nodes, bricks, offsets):
    got_nodes, got_bricks, got_offsets = build_arrays(voxels)
    assert got_nodes.tolist() == nodes
    assert got_bricks.tolist() == bricks
    assert got_offsets.tolist() == offsets
    svo = placed(voxels)
    assert svo.count() == voxels.sum() and np.array_equal(svo.to_numpy(), voxels)


def test_morton_codes_interleave_bits():
    assert morton_encode(np.array([1]), np.array([0]), np.array([0]), 3)[0] == 1
    assert morton_encode(np.array([0]), np.array([1]), np.array([0]), 3)[0] == 2
    assert morton_encode(np.array([0]), np.array([0]), np.array([1]), 3)[0] == 4
    assert morton_encode(np.array([2]), np.array([3]), np.array([1]), 3)[0] == 0b011_110
    codes = np.arange(4096)
    xyz = morton_decode(codes, 4)
    assert np.array_equal(morton_encode(xyz[:, 0], xyz[:, 1], xyz[:, 2], 4), codes)


@pytest.fixture(scope="module")
def model_svos(gpu):
    """(name, dense grid, SVO) for every shared and generated model at grids 36 and 100."""
    out = []
    for path in MODELS:
        for n in (36, 100):
            grid = gpu.voxelize_dense(path, n)
            out.append((f"{path.name}@{n}", grid, SVO.from_dense(grid.to_numpy(), grid.placement)))
    return out


def test_models_round_trip_exactly(model_svos):
    assert len(model_svos) == 2 * len(MODELS) >= 20  # 7 shared models, 3 generated
    for name, grid, svo in model_svos:
        voxels = grid.to_numpy()
        assert np.array_equal(svo.to_numpy(), voxels), name
        assert svo.count() == grid.count() and svo.volume() == grid.count() * grid.voxel_size**3
        assert svo.padded_resolution == (64 if grid.resolution == 36 else 128)


def test_geometry_properties():
    svo = placed(blobs(36, 1), origin=(1.0, -2.0, 0.5), h=0.25)
    assert (svo.resolution, svo.padded_resolution, svo.depth, svo.levels) == (36, 64, 6, 4)
    assert np.array_equal(svo.bounds, [[1.0, -2.0, 0.5], [10.0, 7.0, 9.5]])
    assert len(svo.level_offsets) == svo.levels + 1 and svo.level_offsets[-1] == svo.node_count
    assert svo.nbytes == 8 * svo.node_count + 8 * svo.brick_count + 4 * 5
    assert svo.nodes.dtype == np.uint32 and svo.bricks.dtype == np.uint64
    for array in (svo.nodes, svo.bricks, svo.level_offsets):
        with pytest.raises(ValueError):
            array[...] = 0
    svo.origin[0] = 99.0  # a copy
    assert svo.origin[0] == 1.0
    assert "36x36x36" in repr(svo) and f"{svo.count():,} solid voxels" in repr(svo)


def test_equality_compares_arrays_and_placement():
    voxels = blobs(20, 3)
    a, b = placed(voxels), placed(voxels.copy())
    assert a == b and a != placed(voxels, h=2.0) and a != placed(voxels, origin=(0, 0, 1.0))
    voxels[0, 0, 0] = not voxels[0, 0, 0]
    assert a != placed(voxels) and a != "an svo"


def test_indexing_descends_the_tree(model_svos):
    rng = np.random.default_rng(11)
    for name, grid, svo in model_svos[::3]:
        voxels, n = grid.to_numpy(), grid.resolution
        for i, j, k in rng.integers(0, n, (200, 3)):
            assert svo[i, j, k] == voxels[i, j, k], name
        for i, j, k in np.argwhere(voxels)[::997]:
            assert svo[int(i), int(j), int(k)]
    svo = model_svos[0][2]
    for bad in ((-1, 0, 0), (0, 36, 0), (0, 0, 10**9)):
        with pytest.raises(IndexError):
            svo[bad]
    for bad in ((0, 0), (0.5, 0, 0), (True, 0, 0), 3):
        with pytest.raises(TypeError):
            svo[bad]


def test_contains_agrees_with_the_dense_grid(model_svos):
    rng = np.random.default_rng(5)
    for name, grid, svo in model_svos[::2]:
        voxels, n, h, origin = grid.to_numpy(), grid.resolution, grid.voxel_size, grid.origin
        cells = rng.integers(0, n, (3000, 3))
        points = origin + (cells + rng.uniform(0.01, 0.99, cells.shape)) * h
        assert np.array_equal(svo.contains(points), voxels[tuple(cells.T)]), name


def test_contains_on_faces_corners_and_outside():
    voxels = blobs(20, 9)
    origin, h = np.array([-1.3, 0.7, 2.1]), 0.1
    svo = placed(voxels, origin, h)
    # Points exactly on voxel corners (all three coordinates on faces) belong to the higher voxel.
    cells = np.argwhere(np.ones((20, 20, 20), bool))
    corners = origin + cells * h
    assert np.array_equal(svo.contains(corners), voxels[tuple(cells.T)])
    # Points on one face only: the middle of the face between voxel i-1 and i along each axis.
    for axis in range(3):
        offset = np.full(3, 0.5)
        offset[axis] = 0.0
        assert np.array_equal(svo.contains(origin + (cells + offset) * h), voxels[tuple(cells.T)])
    # Outside: beyond the high faces (which belong to no voxel), below the low ones, not finite.
    full = placed(np.ones((8, 8, 8), bool), origin, h)
    top = origin + 8 * h
    middle = origin + 4 * h
    outside = np.array(
        [
            top,
            [top[0], origin[1], origin[2]],
            origin - 1e-12,
            origin - [1, 0, 0],
            [np.nan, *middle[1:]],
            [np.inf, *middle[1:]],
            [-np.inf, *middle[1:]],
            [1e300, *middle[1:]],
            [middle[0], -1e300, middle[2]],
        ]
    )
    assert not full.contains(outside).any()
    assert full.contains(np.array([origin, top - 1e-9])).all()
    assert full.contains(np.zeros((0, 3))).shape == (0,)
    with pytest.raises(ValueError):
        full.contains(np.zeros(3))


def test_solid_boxes_tile_the_solid_in_morton_order(model_svos):
    for name, _grid, svo in model_svos[::4] + [("blobs", None, placed(blobs(32, 4, count=3)))]:
        voxels = svo.to_numpy()
        corners, sizes = svo.solid_boxes()
        assert corners.dtype == sizes.dtype == np.int64 and corners.shape == (len(sizes), 3)
        assert (sizes & (sizes - 1) == 0).all() and (corners % sizes[:, None] == 0).all()
        assert (sizes**3).sum() == svo.count()  # disjoint, since together they paint the count
        painted = np.zeros((svo.padded_resolution,) * 3, bool)
        for (x, y, z), s in zip(corners, sizes):
            painted[x : x + s, y : y + s, z : z + s] = True
        assert np.array_equal(painted[: svo.resolution, : svo.resolution, : svo.resolution], voxels)
        keys = morton_encode(corners[:, 0], corners[:, 1], corners[:, 2], svo.depth)
        assert (np.diff(keys) > 0).all(), name
        assert (sizes > 1).any() or name != "blobs"
    boxes = svo.world_boxes()
    assert np.allclose(boxes[:, 0], svo.origin + corners * svo.voxel_size)
    assert np.allclose(boxes[:, 1] - boxes[:, 0], sizes[:, None] * svo.voxel_size)


def coarse(voxels: np.ndarray, f: int, n: int, rule: str) -> np.ndarray:
    """Expected level of detail, block by block in plain loops."""
    out = np.zeros((n, n, n), bool)
    for i, j, k in np.ndindex(n, n, n):
        block = voxels[i * f : (i + 1) * f, j * f : (j + 1) * f, k * f : (k + 1) * f]
        out[i, j, k] = block.any() if rule == "any" else 2 * block.sum() > f**3
    return out


@pytest.mark.parametrize("rule", ["any", "majority"])
def test_level_of_detail(rule):
    voxels = blobs(36, 2) ^ (np.random.default_rng(1).random((36, 36, 36)) < 0.1)
    svo = placed(voxels, origin=(0.5, 0, 0), h=0.5)
    assert svo.lod(0, rule) is svo
    for level, n in ((1, 20), (2, 12), (3, 8)):  # ceil(36 / 2^level) up to a multiple of 4, >= 8
        lod = svo.lod(level, rule)
        assert lod.resolution == n and lod.voxel_size == 0.5 * 2**level
        assert np.array_equal(lod.origin, svo.origin) and lod.padded_resolution == 64 >> level
        assert np.array_equal(lod.to_numpy(), coarse(voxels, 2**level, n, rule))
    if rule == "any":  # conservative: every fine solid voxel centre is inside the coarse solid
        centres = svo.placement.voxel_centres(np.argwhere(voxels))
        assert svo.lod(2).contains(centres).all()
    for bad in (-1, 4, 1.0, True):
        with pytest.raises(ValueError):
            svo.lod(bad)
    with pytest.raises(ValueError):
        svo.lod(1, "mean")


@pytest.mark.parametrize(
    "corrupt, message",
    [
        (lambda a: a["nodes"].__setitem__((0, 1), 5), "first_child"),
        (lambda a: a["nodes"].__setitem__((1, 0), 0), "not mixed"),
        (lambda a: a["nodes"].__setitem__((0, 0), a["nodes"][0, 0] | 1 << 20), "bits 16-31"),
        (lambda a: a["bricks"].__setitem__(0, np.uint64(2**64 - 1)), "empty or full"),
        (lambda a: a.__setitem__("bricks", a["bricks"][:-1]), "bricks"),
        (lambda a: a.__setitem__("level_offsets", a["level_offsets"][:-1]), "level_offsets"),
        (lambda a: a["level_offsets"].__setitem__(1, 2), "level_offsets"),
        (lambda a: a.__setitem__("nodes", a["nodes"].astype(np.float64)), "fit uint32"),
        (lambda a: a.__setitem__("nodes", a["nodes"].ravel()[:-1]), "two words"),
    ],
)
def test_constructor_rejects_broken_arrays(corrupt, message):
    nodes, bricks, offsets = build_arrays(blobs(20, 6) ^ one(20, (1, 2, 3)))
    arrays = {"nodes": nodes.copy(), "bricks": bricks.copy(), "level_offsets": offsets.copy()}
    corrupt(arrays)
    with pytest.raises(SVOFormatError, match=message):
        SVO(
            arrays["nodes"],
            arrays["bricks"],
            arrays["level_offsets"],
            GridPlacement(20, np.zeros(3), 1.0),
        )


def test_padding_must_stay_empty():
    nodes, bricks, offsets = build_arrays(one(32, (31, 0, 0)))
    with pytest.raises(SVOFormatError, match="padding"):  # the same tree on a 28^3 grid
        SVO(nodes, bricks, offsets, GridPlacement(28, np.zeros(3), 1.0))
    nodes, bricks, offsets = build_arrays(np.ones((16, 16, 16), bool))
    with pytest.raises(SVOFormatError, match="padding"):
        SVO(nodes, bricks, offsets, GridPlacement(12, np.zeros(3), 1.0))


@pytest.mark.slow
def test_large_grid_is_quick():
    """N = 1024: build, count and query without per-voxel Python."""
    n = 1024
    squares = ((np.arange(n) + 0.5) / n - 0.5) ** 2
    room = 0.2 - squares[:, None] - squares[None, :]  # a ball: z^2 < 0.2 - x^2 - y^2
    voxels = squares[None, None, :] < room[:, :, None]
    svo = placed(voxels, h=1.0 / n)
    assert svo.count() == int(voxels.sum())
    dense = svo.to_numpy()
    assert all(np.array_equal(dense[i : i + 64], voxels[i : i + 64]) for i in range(0, n, 64))
    points = np.random.default_rng(0).random((100_000, 3))
    cells = np.minimum((points * n).astype(int), n - 1)
    assert np.array_equal(svo.contains(points), voxels[tuple(cells.T)])


# --- non-cubic grids ------------------------------------------------------------------------


def in_cube(voxels: np.ndarray) -> np.ndarray:
    """The same voxels in the corner of a cube of the longest side (the rest empty)."""
    n = max(voxels.shape)
    cube = np.zeros((n, n, n), bool)
    cube[: voxels.shape[0], : voxels.shape[1], : voxels.shape[2]] = voxels
    return cube


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
    assert np.array_equal(svo.to_numpy(), voxels)
    assert np.array_equal(svo._lookup(np.argwhere(np.ones(voxels.shape, bool))), voxels.ravel())


def test_build_arrays_rejects_bad_shapes():
    for shape in [(16, 0, 8), (8, 8), (8, 8, 8, 8)]:
        with pytest.raises(ValueError, match="bool \\(nx, ny, nz\\) array"):
            build_arrays(np.zeros(shape, bool))


def test_svo_queries_respect_the_shape():
    voxels = noisy_blobs((16, 8, 12), 5)
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
    voxels = noisy_blobs((40, 12, 8), 2)
    svo = placed(voxels, origin=(0.5, -1.0, 2.0), h=0.25)
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
            assert np.array_equal(lod.to_numpy(), coarse), (level, rule)
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
    with pytest.raises(SVOFormatError, match="padding"):
        SVO(nodes, bricks, offsets, GridPlacement((16, 8, 16), np.zeros(3), 1.0))


def test_svo_equality_compares_shapes():
    voxels = np.zeros((16, 16, 16), bool)
    voxels[1, 1, 1] = True
    a = placed(voxels)
    b = placed(voxels[:, :, :12])
    assert a != b and a == placed(voxels.copy())


def test_svo_protocol_matches_the_dense_grid():
    """What SVO shares with DenseGrid (placement.Placed): to_numpy, np.asarray, count, shape,
    origin, voxel size and placement give the same answers for the same voxels."""
    voxels = noisy_blobs((16, 8, 12), 12)
    placement = GridPlacement((16, 8, 12), np.array([1.0, 2.0, 3.0]), 0.5)
    svo, grid = SVO.from_dense(voxels, placement), DenseGrid(voxels, placement)
    for result in (svo, grid):
        assert np.array_equal(result.to_numpy(), voxels) and result.to_numpy().dtype == bool
        assert np.array_equal(np.asarray(result), voxels)
        assert result.count() == int(voxels.sum()) and result.shape == (16, 8, 12)
        assert np.array_equal(result.origin, [1, 2, 3]) and result.voxel_size == 0.5
        assert result.placement is placement
    assert np.array_equal(np.asarray(svo, dtype=np.int32), voxels.astype(np.int32))
    first = svo.to_numpy()
    first[...] = False  # a fresh array: the octree is not touched
    assert np.array_equal(svo.to_numpy(), voxels)
