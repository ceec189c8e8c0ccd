"""Surface voxelization on the GPU (modes "surface" and "both") equals the CPU reference
(voxelizer/reference/surface.py) bit for bit: every shared model, every variant, random soups
with ties, degenerate triangles, boxes on voxel boundaries, thin plates, non-cubic grids,
slabs and parts forced by small budgets, the SVO, and the face ids."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from voxelizer import SVO, VARIANTS, Voxelizer
from voxelizer.gpu.device import Device
from voxelizer.io import load_mesh
from voxelizer.pipeline.kernels import SURFACE_GROUP_PAIRS
from voxelizer.reference.surface import (
    surface_columns,
    surface_face_ids,
    voxelize_surface_reference,
)

from ..helpers import (
    assert_same_svo,
    assert_same_voxels,
    load_model,
    quick_diagonal,
    random_soup,
)
from ..shapes import box, box_surface, box_thin, combine, octahedron

SHARED = [
    "bunny.ply",
    "bunny_scan.ply",
    "dragon.ply",
    "armadillo.ply",
    "featuretype.stl",
    "torus.stl",
    "suzanne.ply",
]
GENERATED = ["torus_knot.ply", "hollow_sphere.ply", "gear.ply"]
# (mode, surface) of every surface voxelization
KINDS = [("surface", "conservative"), ("surface", "thin"), ("both", None)]
KIND_IDS = ["conservative", "thin", "both"]


@cache
def reference(name: str, grid, mode: str, surface: str | None, fill_mode: str = "parity"):
    """The reference's voxels of a model, once per model, grid and kind for every variant."""
    mesh = load_model(name)
    return voxelize_surface_reference(
        mesh, grid, mode, surface or "conservative", fill_mode
    ).to_numpy()


@cache
def reference_faces(name: str, grid, surface: str) -> np.ndarray:
    mesh = load_model(name)
    placement = voxelize_surface_reference(mesh, grid).placement
    return surface_face_ids(placement.grid_vertices(mesh.vertices), mesh.faces, grid, surface)


@pytest.mark.parametrize("mode, surface, name", quick_diagonal(KINDS, SHARED + GENERATED))
def test_models_match_reference(gpu, name, mode, surface):
    grid = gpu.voxelize_dense(load_model(name), 64, mode=mode, surface=surface)
    assert grid.count() > 0
    assert_same_voxels(grid.to_numpy(), reference(name, 64, mode, surface))
    assert (grid.stats.mode, grid.stats.surface) == (mode, surface or "")


@pytest.mark.parametrize("mode, surface, variant", quick_diagonal(KINDS, list(VARIANTS)))
def test_every_variant_matches_reference(gpu, variant, mode, surface):
    for name, n in (("armadillo.ply", 48), ("gear.ply", 40)):
        grid = gpu.voxelize_dense(load_model(name), n, variant=variant, mode=mode, surface=surface)
        assert_same_voxels(grid.to_numpy(), reference(name, n, mode, surface))


@pytest.mark.parametrize(
    "surface, variant", quick_diagonal([("conservative",), ("thin",)], list(VARIANTS))
)
def test_random_soups_with_ties_match_reference(gpu, variant, surface):
    """Open, overlapping and degenerate soups (repeated indices make segments and points),
    many vertices on voxel corners, edges and centres."""
    rng = np.random.default_rng(11)
    for trial in range(30):
        n = int(rng.choice([8, 12, 16, 20]))
        step = (None, 2, 4)[trial % 3]
        count, triangles = int(rng.integers(3, 30)), int(rng.integers(1, 40))
        g, faces = random_soup(rng, n, count, triangles, step)
        if np.all(g[faces].max(axis=(0, 1)) == g[faces].min(axis=(0, 1))):
            continue
        got = gpu.voxelize_grid(g, faces, n, variant=variant, mode="surface", surface=surface)
        assert_same_voxels(got, surface_columns(g, faces, n, surface))


@pytest.mark.parametrize("surface", ["conservative", "thin"])
def test_segments_and_points_mark_the_voxels_they_touch(gpu, surface):
    """Degenerate triangles only: segments along axes, diagonals and grid lines, and points on
    centres, faces, edges and corners of voxels."""
    g = np.array(
        [
            [1.5, 1.5, 1.5], [6.5, 1.5, 1.5],  # segment along x through centres
            [2.0, 3.0, 0.0], [2.0, 3.0, 8.0],  # on a grid line: four columns, all k
            [0.25, 7.75, 0.5], [7.5, 0.5, 7.75],  # a diagonal
            [4.0, 4.0, 4.0],  # a corner of eight voxels
            [5.5, 6.0, 2.5],  # on a face
            [3.5, 3.5, 3.5],  # a centre
        ],
        np.float32,
    )  # fmt: skip
    faces = np.array([[0, 1, 0], [2, 3, 3], [4, 5, 4], [6, 6, 6], [7, 7, 7], [8, 8, 8]])
    for variant in ("naive", "branchless"):
        got = gpu.voxelize_grid(g, faces, 8, variant=variant, mode="surface", surface=surface)
        expected = surface_columns(g, faces, 8, surface)
        assert_same_voxels(got, expected)
    assert expected[1:7, 1, 1].all() and expected[1:3, 2:4, :].all()
    assert expected[3:5, 3:5, 3:5].all() and expected[5, 5:7, 2].all()


@pytest.mark.parametrize(
    "lo, hi",
    [
        ((2, 1, 3), (6, 5, 7)),
        ((0, 0, 0), (12, 4, 12)),
        ((3, 3, 3), (4, 4, 4)),
        ((1, 2, 0), (9, 3, 12)),
    ],
)
def test_boxes_with_faces_on_voxel_boundaries(gpu, lo, hi):
    """The closed-cube rule decides every voxel beside a face: both sides of it are marked."""
    vertices, faces = box(lo, hi)
    g = vertices.astype(np.float32)
    for variant in ("naive", "combined"):
        conservative = gpu.voxelize_grid(g, faces, 12, variant=variant, mode="surface")
        assert_same_voxels(conservative, box_surface(lo, hi, (12, 12, 12)))
        thin = gpu.voxelize_grid(g, faces, 12, variant=variant, mode="surface", surface="thin")
        assert_same_voxels(thin, box_thin(lo, hi, (12, 12, 12)))
        both = gpu.voxelize_grid(g, faces, 12, variant=variant, mode="both")
        solid = gpu.voxelize_grid(g, faces, 12, variant=variant)
        assert_same_voxels(both, solid | conservative)


def table(n: int) -> tuple[np.ndarray, np.ndarray]:
    """A table in grid space: a top 0.4 voxels thick and four legs 0.3 voxels wide, all
    between voxel centres, so no centre lies inside any part."""
    top = box((4.0, 4.0, 0.75 * n), (n - 4.0, n - 4.0, 0.75 * n + 0.4))
    legs = [
        box((x, y, 2.0), (x + 0.3, y + 0.3, 0.75 * n))
        for x in (5.0, n - 6.0)
        for y in (5.0, n - 6.0)
    ]
    return combine(top, *legs)


def test_thin_parts_survive_in_surface_and_both_but_not_in_solid(gpu):
    n = 32
    vertices, faces = table(n)
    g = vertices.astype(np.float32)
    solid = gpu.voxelize_grid(g, faces, n)
    surface = gpu.voxelize_grid(g, faces, n, mode="surface")
    both = gpu.voxelize_grid(g, faces, n, mode="both")
    assert not solid.any()  # no centre inside: the solid loses the whole table
    leg = surface[5, 5, 2 : 3 * n // 4]
    assert leg.all() and both[5, 5, 2 : 3 * n // 4].all()
    assert surface[4 : n - 4, 4 : n - 4, 3 * n // 4].all()  # the top
    assert_same_voxels(surface, surface_columns(g, faces, n))
    assert_same_voxels(both, surface)
    thin = gpu.voxelize_grid(g, faces, n, mode="surface", surface="thin")
    assert_same_voxels(thin, surface_columns(g, faces, n, "thin"))


@pytest.mark.parametrize(
    "mode, surface",
    [
        pytest.param(*KINDS[0], marks=pytest.mark.slow),
        KINDS[1],
        pytest.param(*KINDS[2], marks=pytest.mark.slow),
    ],
    ids=KIND_IDS,
)
def test_non_cubic_grids_and_slabs_match_reference(gpu, mode, surface):
    """A small budget forces slabs of rows, triangle batches and split parts; the dense grid
    and the SVO (forests merged) still equal the reference. (The quick run's conservative
    surface and "both" in slabs: test_outputs_unchanged.py, and face ids in slabs below.)"""
    name, shape = "bunny.ply", (256, 128, 256)
    expected = reference(name, shape, mode, surface)
    whole = gpu.voxelize_dense(load_model(name), shape, mode=mode, surface=surface)
    assert_same_voxels(whole.to_numpy(), expected)
    split = gpu.voxelize_dense(
        load_model(name), shape, mode=mode, surface=surface, max_memory="3MiB"
    )
    counts = split.stats.counts
    assert counts["slabs"] > 1 and counts["surface_parts"] > counts["slabs"]
    assert counts["triangle_batch"] < counts["triangles"]
    assert_same_voxels(split.to_numpy(), expected)
    svo = gpu.voxelize(load_model(name), shape, mode=mode, surface=surface, max_memory="3MiB")
    assert svo.stats.counts["slabs"] > 1
    assert_same_svo(svo, SVO.from_dense(expected, svo.placement))


@pytest.mark.parametrize("fill_mode", ["vote", "union"])
def test_both_with_other_fill_modes(gpu, fill_mode):
    name = "bunny_scan.ply"  # open: vote and union differ from parity
    expected = reference(name, 48, "both", None, fill_mode)
    dense = gpu.voxelize_dense(load_model(name), 48, mode="both", fill_mode=fill_mode)
    assert_same_voxels(dense.to_numpy(), expected)
    svo = gpu.voxelize(load_model(name), 48, mode="both", fill_mode=fill_mode)
    assert_same_svo(svo, SVO.from_dense(expected, svo.placement))


def test_columns_deeper_than_one_chunk(gpu):
    """nz = 1100: the pass's word loops run over many of a column's 35 words (and its voxel
    loops, with face ids, over a thousand voxels); a steep octahedron spans them."""
    vertices, faces = octahedron((1.0, 1.0, 50.0), 1.0)
    vertices[:, 2] = (vertices[:, 2] - 50.0) * 125.0 + 50.0  # 250 tall, 2 wide: 1000 voxels
    shape = (8, 8, 1100)
    mesh = (vertices, faces)
    for mode, surface in KINDS:
        grid = gpu.voxelize_dense(mesh, shape, mode=mode, surface=surface)
        expected = voxelize_surface_reference(
            load_mesh(mesh), shape, mode, surface or "conservative"
        ).to_numpy()
        assert grid.to_numpy()[:, :, 600:].any()
        assert_same_voxels(grid.to_numpy(), expected)
    faces_grid = gpu.voxelize_dense(mesh, shape, mode="surface", attributes=["face"])
    placement = faces_grid.placement
    assert np.array_equal(
        faces_grid.face_ids,
        surface_face_ids(placement.grid_vertices(vertices), faces, shape),
    )


def assert_surface_matches_reference(gpu, mesh, shape) -> dict[str, int]:
    """Every kind and the face ids of a mesh equal the reference; returns the counts of the
    last voxelization (with face ids)."""
    for mode, surface in KINDS:
        grid = gpu.voxelize_dense(mesh, shape, mode=mode, surface=surface)
        expected = voxelize_surface_reference(
            load_mesh(mesh), shape, mode, surface or "conservative"
        ).to_numpy()
        assert expected.any()
        assert_same_voxels(grid.to_numpy(), expected)
    for surface in ("conservative", "thin"):
        faces_grid = gpu.voxelize_dense(
            mesh, shape, mode="surface", surface=surface, attributes=["face"]
        )
        vertices = faces_grid.placement.grid_vertices(mesh[0])
        expected_ids = surface_face_ids(vertices, mesh[1], shape, surface)
        assert np.array_equal(faces_grid.face_ids, expected_ids)
    return faces_grid.stats.counts


@pytest.mark.slow
def test_triangles_that_span_deep_columns(gpu):
    """1,500 slanted triangles that each span the whole height of a 2,048-deep column, in
    the same few tiles: 64 words (2,048 face-id voxels) per marked column, many such columns
    per workgroup (llvmpipe's loop budget), and workgroups meeting in the same words."""
    rng = np.random.default_rng(5)
    count = 1500
    low = rng.uniform(0.8, 1.2, (count, 3)) * [1, 1, 0]
    high = low + rng.uniform(-0.1, 0.1, (count, 3)) * [1, 1, 0] + [0, 0, 500.0]
    side = low + rng.uniform(-0.2, 0.2, (count, 3)) * [1, 1, 0] + [0, 0, rng.uniform(0, 500)]
    corners = [[0, 0, 0], [2, 0, 0], [0, 2, 0]]  # a triangle that spans the grid's xy
    vertices = np.concatenate([low, high, side, corners])
    faces = np.concatenate([np.arange(3 * count).reshape(3, count).T, [3 * count + np.arange(3)]])
    assert_surface_matches_reference(gpu, (vertices, faces), (8, 8, 2048))


def crowded_tile(count: int) -> tuple[np.ndarray, np.ndarray]:
    """`count` small triangles in columns 1 and 2 of a 32 x 32 x 40 grid (tile 0), and one
    that spans the grid's box."""
    rng = np.random.default_rng(6)
    corner = rng.uniform(0.35, 0.65, (count, 1, 3)) * [1, 1, 15]
    vertices = (corner + rng.uniform(-0.05, 0.05, (count, 3, 3))).reshape(-1, 3)
    vertices = np.concatenate([vertices, [[0, 0, 0], [8, 0, 10], [0, 8, 10]]])
    return vertices, np.arange(3 * count + 3).reshape(count + 1, 3)


@pytest.mark.slow
def test_a_crowded_tile_is_shared_among_workgroups(gpu):
    """140,000 small triangles inside one tile: their pairs fill thousands of workgroups
    (SURFACE_GROUP_PAIRS each), which all OR into the same few columns and lower the same
    face ids."""
    count = 140_000
    counts = assert_surface_matches_reference(gpu, crowded_tile(count), (32, 32, 40))
    # one pair for each small triangle (columns 1 and 2: tile 0), one per tile for the box's
    box_tiles = counts["surface_pairs"] - count
    assert 0 < box_tiles <= 64
    assert count // SURFACE_GROUP_PAIRS > 1000


def test_the_pair_total_holds_the_last_tile(gpu):
    """A small triangle in the grid's first tile and one in its last (the highest tile key):
    the pairs' total, the scan of the per-tile counts, holds both."""
    near = [[0, 0, 0], [0.05, 0, 0.02], [0, 0.05, 0.05]]
    far = [[1, 1, 1], [0.95, 1, 0.98], [1, 0.95, 0.95]]
    mesh = (np.array(near + far, np.float32), np.array([[0, 1, 2], [3, 4, 5]]))
    counts = assert_surface_matches_reference(gpu, mesh, (32, 32, 32))
    assert counts["surface_pairs"] == 2


def test_bitonic_sort_and_devices_without_subgroup_operations(gpu, monkeypatch):
    name = "dragon.ply"
    for mode, surface in KINDS:
        got = gpu.voxelize_dense(load_model(name), 48, sort="bitonic", mode=mode, surface=surface)
        assert_same_voxels(got.to_numpy(), reference(name, 48, mode, surface))
    monkeypatch.setattr(Device, "has_subgroup", lambda device, feature: False)
    with Voxelizer() as plain:
        for mode, surface in KINDS:
            for variant in ("naive", "combined"):
                got = plain.voxelize_dense(
                    load_model(name), 48, variant=variant, mode=mode, surface=surface
                )
                assert_same_voxels(got.to_numpy(), reference(name, 48, mode, surface))


# -- which triangle made each voxel -----------------------------------------------------------


@pytest.mark.parametrize("surface", ["conservative", "thin"])
@pytest.mark.parametrize("variant", ["branchless", "indexed"])
def test_face_ids_match_reference(gpu, variant, surface):
    name, n = "suzanne.ply", 40
    grid = gpu.voxelize_dense(
        load_model(name), n, variant=variant, mode="surface", surface=surface, attributes=["face"]
    )
    ids = grid.face_ids
    assert ids is not None and ids.dtype == np.int32
    assert np.array_equal(ids, reference_faces(name, n, surface))
    assert np.array_equal(ids >= 0, grid.to_numpy())


def test_face_ids_in_slabs_batches_and_both(gpu):
    """Parts and triangle batches lower the same ids (each batch's indices offset by its
    first triangle); in mode "both" the solid voxels inside have none."""
    name, shape = "bunny.ply", (128, 96, 160)
    expected = reference_faces(name, shape, "conservative")
    split = gpu.voxelize_dense(
        load_model(name), shape, mode="surface", attributes=["face"], max_memory="4MiB"
    )
    assert split.stats.counts["slabs"] > 1
    assert split.stats.counts["triangle_batch"] < split.stats.counts["triangles"]
    assert np.array_equal(split.face_ids, expected)
    both = gpu.voxelize_dense(load_model(name), shape, mode="both", attributes=["face"])
    assert np.array_equal(both.face_ids, expected)
    assert_same_voxels(both.to_numpy(), reference(name, shape, "both", None))
    assert (both.to_numpy() & (both.face_ids < 0)).any()  # solid voxels inside the surface
