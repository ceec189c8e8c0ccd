"""Triangle grids, the build: the GPU's cells against the CPU reference (voxelizer/trigrid/
reference.py, the surface reference's exact test), cell by cell, on the shared models and on
edge cases (triangles in cell faces, on cell corners, degenerate ones, a single huge one),
with both variants of the exact tests and with the load balance forced on every triangle;
the two-level grid's leaves; the placement; the arrays, files and memory a grid reports."""

from __future__ import annotations

import os
import struct
import zipfile

import numpy as np
import pytest

import voxelizer
import voxelizer.budget
from voxelizer.errors import FormatError, GridError, MemoryBudgetError, MeshError
from voxelizer.io import load_mesh
from voxelizer.trigrid import GridEngine, build_triangle_grid
from voxelizer.trigrid.files import read_triangle_grid
from voxelizer.trigrid.placement import DEFAULT_DENSITY, CellPlacement
from voxelizer.trigrid.reference import reference_cells, reference_leaves

from ..helpers import load_model, random_soup, time_limit
from ..shapes import box, sphere


@pytest.fixture(scope="module")
def engine(gpu):
    """The triangle grids' engine on the session's device."""
    grids = GridEngine(gpu.device)
    yield grids
    grids.close()


def lattice_mesh(vertices, faces, n) -> voxelizer.Mesh:
    """A mesh whose grid space is its own coordinates: with bounds [0, n]^3 and resolution n
    (built by `on_lattice`), cell (i, j, k) is the box [i, i + 1] x [j, j + 1] x [k, k + 1]."""
    return load_mesh((np.asarray(vertices, np.float64), np.asarray(faces, np.int64)))


def on_lattice(engine, vertices, faces, n, **options):
    mesh = lattice_mesh(vertices, faces, n)
    return build_triangle_grid(engine, mesh, n, bounds=[[0, 0, 0], [n, n, n]], **options)


def assert_matches_reference(grid) -> None:
    """Every cell lists exactly the reference's triangles (sorted within each cell)."""
    arrays = grid.to_numpy()
    offsets, ids = reference_cells(arrays["corners"].astype(np.int64), grid.shape)
    assert np.array_equal(arrays["offsets"], offsets), "cell counts differ"
    assert np.array_equal(sorted_by_cell(arrays["offsets"], arrays["triangle_ids"]), ids)
    if grid.levels == 2:
        resolutions = arrays["leaf_resolution"].reshape(-1, 3)
        base, leaf_offsets, leaf_ids = reference_leaves(
            arrays["corners"].astype(np.int64), grid.shape, resolutions
        )
        assert np.array_equal(arrays["leaf_start"].reshape(-1), base)
        assert np.array_equal(arrays["leaf_offsets"], leaf_offsets), "leaf counts differ"
        got = sorted_by_cell(arrays["leaf_offsets"], arrays["leaf_triangle_ids"])
        assert np.array_equal(got, leaf_ids)


def sorted_by_cell(offsets: np.ndarray, ids: np.ndarray) -> np.ndarray:
    cells = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    return ids[np.lexsort((ids, cells))]


# -- the models --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["gear.ply", "torus_knot.ply", "hollow_sphere.ply", "bunny.ply", "featuretype.stl"]
)
def test_cells_match_the_reference_on_models(engine, name):
    grid = build_triangle_grid(engine, load_model(name))
    assert_matches_reference(grid)
    assert grid.reference_count >= grid.triangle_count  # every triangle lies in the grid
    grid.close()


@pytest.mark.slow
@pytest.mark.parametrize("density", [0.5, 8.0])
def test_cells_match_the_reference_on_the_dragon(engine, density):
    grid = build_triangle_grid(engine, load_model("dragon.ply"), density=density)
    assert_matches_reference(grid)
    grid.close()


@pytest.mark.parametrize("branchless", [0, 1])
@pytest.mark.parametrize("columns", [(8, 8), (1, 1), (1, 3)])
def test_variants_and_load_balance_give_the_same_cells(engine, branchless, columns):
    """Both variants of the exact tests, and the units of large triangles (small_columns=1:
    every triangle of more than one column is spread over threads, chunk_columns columns
    each), give the reference's cells."""
    small, chunk = columns
    grid = build_triangle_grid(
        engine,
        load_model("torus_knot.ply"),
        density=2.0,
        branchless=branchless,
        small_columns=small,
        chunk_columns=chunk,
    )
    assert_matches_reference(grid)


@pytest.mark.parametrize("seed", range(3))
def test_lattice_soups_match_the_reference(engine, seed):
    """Random soups on the 1/2 lattice of an 8^3 grid: corners on cell faces, edges and
    corners, collinear and repeated corners (degenerate triangles), overlaps."""
    rng = np.random.default_rng(seed)
    vertices, faces = random_soup(rng, 8, 40, 300, step=2)
    grid = on_lattice(engine, vertices, faces, 8, small_columns=2, chunk_columns=2)
    assert_matches_reference(grid)


# -- edge cases ---------------------------------------------------------------------------------


def cells_of(grid, triangle: int) -> set[tuple[int, int, int]]:
    offsets, ids = grid.offsets, grid.triangle_ids
    counts = np.diff(offsets)
    cells = np.repeat(np.arange(len(counts)), counts)[ids == triangle]
    return {tuple(int(v) for v in np.unravel_index(c, grid.shape)) for c in cells}


def test_a_triangle_in_a_cell_face_is_in_the_cells_on_both_sides(engine):
    # in the plane z = 2, inside the square [1, 2] x [1, 2] of the xy-plane
    vertices = [[1.25, 1.25, 2], [1.75, 1.25, 2], [1.5, 1.75, 2], [0, 0, 0], [4, 4, 4]]
    grid = on_lattice(engine, vertices, [[0, 1, 2], [3, 3, 4]], 4)
    assert cells_of(grid, 0) == {(1, 1, 1), (1, 1, 2)}
    assert_matches_reference(grid)


def test_a_triangle_on_a_cell_edge_line_is_in_the_four_cells_around_it(engine):
    # along the line x = 2, y = 2 (the edge shared by four columns), z in [1.25, 1.75]
    vertices = [[2, 2, 1.25], [2, 2, 1.75], [2, 2, 1.5], [0, 0, 0], [4, 4, 4]]
    grid = on_lattice(engine, vertices, [[0, 1, 2], [3, 3, 4]], 4)
    assert cells_of(grid, 0) == {(i, j, 1) for i in (1, 2) for j in (1, 2)}
    assert_matches_reference(grid)


def test_a_triangle_through_a_cell_corner_is_in_the_eight_cells_around_it(engine):
    # a small triangle with one corner on the cell corner (2, 2, 2), the rest in cell (2, 2, 2)
    vertices = [[2, 2, 2], [2.5, 2.25, 2.25], [2.25, 2.5, 2.5], [0, 0, 0], [4, 4, 4]]
    grid = on_lattice(engine, vertices, [[0, 1, 2], [3, 3, 4]], 4)
    assert cells_of(grid, 0) == {(i, j, k) for i in (1, 2) for j in (1, 2) for k in (1, 2)}
    assert_matches_reference(grid)


def test_degenerate_triangles_mark_what_their_segment_or_point_touches(engine):
    vertices = [
        [0.5, 0.5, 0.5],  # a point inside cell (0, 0, 0)
        [3, 1, 1],  # a point on the corner (3, 1, 1)
        [0.5, 2.5, 1.5],  # a segment from here...
        [3.5, 2.5, 1.5],  # ...to here, along x through four cells
        [0, 0, 0],
        [4, 4, 4],
    ]
    faces = [[0, 0, 0], [1, 1, 1], [2, 3, 2], [2, 3, 3], [4, 4, 5]]
    grid = on_lattice(engine, vertices, faces, 4)
    assert cells_of(grid, 0) == {(0, 0, 0)}
    assert cells_of(grid, 1) == {(i, j, k) for i in (2, 3) for j in (0, 1) for k in (0, 1)}
    assert cells_of(grid, 2) == cells_of(grid, 3) == {(i, 2, 1) for i in range(4)}
    assert_matches_reference(grid)


@pytest.mark.parametrize("columns", [(8, 8), (4096, 4096)])
def test_a_single_huge_triangle(engine, columns):
    """One triangle across the whole 48^3 grid, tilted on every axis (thousands of cells):
    the same cells whether its columns are spread over units or done by one thread."""
    small, chunk = columns
    vertices = [[0, 0, 5], [48, 7, 48], [3, 48, 29]]
    grid = on_lattice(engine, vertices, [[0, 1, 2]], 48, small_columns=small, chunk_columns=chunk)
    assert grid.reference_count > 2000
    assert_matches_reference(grid)


def test_huge_triangles_beside_small_ones(engine):
    """The non-homogeneous case: a dense sphere in a corner of a large box whose walls are a
    few triangles spanning the whole grid."""
    ball = sphere([8, 8, 8], 6, subdivisions=3)
    walls = box([0, 0, 0], [64, 64, 64])
    vertices = np.concatenate([ball[0], walls[0]])
    faces = np.concatenate([ball[1], walls[1] + len(ball[0])])
    grid = build_triangle_grid(engine, load_mesh((vertices, faces)), density=2.0)
    assert_matches_reference(grid)
    two = build_triangle_grid(engine, load_mesh((vertices, faces)), levels=2)
    assert_matches_reference(two)


def test_a_flat_mesh_gets_one_cell_across_its_plane(engine):
    vertices = np.array([[0, 0, 1], [10, 0, 1], [10, 5, 1], [0, 5, 1]], np.float64)
    grid = build_triangle_grid(engine, load_mesh((vertices, [[0, 1, 2], [0, 2, 3]])))
    assert grid.shape[2] == 1 and grid.cell_size[2] == grid.cell_size.max()
    assert abs(grid.origin[2] + grid.cell_size[2] / 2 - 1) < 1e-12  # centred on the plane
    assert_matches_reference(grid)


# -- two levels ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["torus_knot.ply", pytest.param("bunny.ply", marks=pytest.mark.slow)]
)
def test_two_level_leaves_match_the_reference(engine, name):
    density = 1.0 if name == "torus_knot.ply" else DEFAULT_DENSITY  # (fewer leaves: faster)
    grid = build_triangle_grid(engine, load_model(name), levels=2, density=density)
    assert_matches_reference(grid)
    arrays = grid.to_numpy()
    resolution = arrays["leaf_resolution"].reshape(-1, 3)
    counts = np.diff(arrays["offsets"])
    assert ((resolution == 0).all(axis=1) == (counts == 0)).all()  # empty cells: no leaves
    # each cell's resolution: side * cbrt(density * references / volume), rounded, >= 1
    side = grid.cell_size / grid.cell_size.max()
    full = counts > 0
    wanted = side * np.cbrt(density * counts[full, None] / side.prod())
    assert (np.abs(resolution[full] - np.maximum(np.rint(wanted), 1)) <= 1).all()
    leaves = grid.leaves_in(*np.unravel_index(int(np.argmax(counts)), grid.shape))
    assert len(leaves) == resolution[np.argmax(counts)].prod()


# -- placement -----------------------------------------------------------------------------------


def test_resolution_cell_size_and_density_place_the_grid(engine):
    mesh = load_mesh((np.array([[0, 0, 0], [4, 2, 1], [1, 2, 0]], np.float64), [[0, 1, 2]]))
    grid = build_triangle_grid(engine, mesh, (8, 4, 2))
    assert grid.shape == (8, 4, 2)
    assert np.allclose(grid.cell_size, [0.5, 0.5, 0.5]) and np.allclose(grid.origin, 0)
    grid = build_triangle_grid(engine, mesh, cell_size=0.3)
    assert grid.shape == (14, 7, 4)
    assert np.allclose(grid.origin + np.array(grid.shape) * 0.3 / 2, [2, 1, 0.5])
    grid = build_triangle_grid(engine, mesh, density=64)
    # cbrt(64 * 1 / 8) = 2 cells per unit
    assert grid.shape == (8, 4, 2)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"resolution": 8, "density": 2}, "one of"),
        ({"resolution": 0}, "1 to 8192"),
        ({"resolution": (4, 4)}, "three integers"),
        ({"resolution": 2.5}, "integer"),
        ({"cell_size": -1.0}, "positive"),
        ({"cell_size": 1e-6}, "1 to 8192"),
        ({"density": float("nan")}, "positive"),
        ({"levels": 3}, "levels"),
        ({"bounds": [[0, 0, 0], [1, 1, 1]]}, "contain"),
    ],
)
def test_bad_placements_are_grid_errors(gpu, options, message):
    with pytest.raises(GridError, match=message):
        gpu.triangle_grid(load_model("gear.ply"), **options)


def test_a_bad_mesh_is_a_mesh_error(gpu):
    with pytest.raises(MeshError):
        gpu.triangle_grid((np.zeros((3, 3)), [[0, 1, 2]]))


def test_placement_rejects_too_many_cells():
    with pytest.raises(GridError, match="more than"):
        CellPlacement((8192, 8192, 64), np.zeros(3), np.ones(3))


# -- arrays, files, memory -----------------------------------------------------------------------


def test_arrays_and_triangles_in(gpu):
    grid = voxelizer.triangle_grid(load_model("torus_knot.ply"), (12, 10, 6))
    arrays = grid.to_numpy()
    assert arrays["triangle_ids"].dtype == np.int32 and arrays["offsets"].dtype == np.int64
    assert grid.cell_start.shape == grid.cell_count.shape == (12, 10, 6)
    cell = np.unravel_index(int(np.argmax(grid.cell_count)), grid.shape)
    listed = grid.triangles_in(*cell)
    assert len(listed) == grid.cell_count[cell] and (np.diff(listed) > 0).all()
    with pytest.raises(IndexError):
        grid.triangles_in(12, 0, 0)
    assert grid.device_bytes == grid.stats.counts["structure_bytes"]
    assert grid.stats.memory.device_peak_bytes > grid.device_bytes
    assert grid.nbytes == sum(array.nbytes for array in grid.to_numpy().values())
    grid.close()
    assert grid.device_bytes == 0
    assert np.array_equal(grid.to_numpy()["offsets"], arrays["offsets"])  # read before
    with pytest.raises(voxelizer.VoxelizerError, match="closed"):
        grid.intersect([0, 0, 0], [1, 0, 0])


@pytest.mark.parametrize("levels", [1, 2])
def test_npz_files_keep_the_grid(gpu, tmp_path, levels):
    grid = voxelizer.triangle_grid(load_model("torus_knot.ply"), levels=levels)
    path = tmp_path / "grid.npz"
    voxelizer.save_triangle_grid(grid, path)
    with pytest.raises(voxelizer.OutputError, match="exists"):
        voxelizer.save_triangle_grid(grid, path)
    with np.load(path) as data:  # numpy alone reads it
        assert set(data.files) == set(grid.to_numpy())
    loaded = voxelizer.load_triangle_grid(path)
    assert loaded.levels == levels and loaded.shape == grid.shape
    for name, array in grid.to_numpy().items():
        assert np.array_equal(loaded.to_numpy()[name], array), name
    rng = np.random.default_rng(0)
    origins = rng.normal(size=(200, 3)) * 40
    directions = -origins + rng.normal(size=(200, 3))
    for got, expected in zip(
        loaded.intersect(origins, directions), grid.intersect(origins, directions)
    ):
        assert np.array_equal(got, expected)
    loaded.close()


def test_a_file_that_is_not_a_triangle_grid_is_a_format_error(gpu, tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, bits=np.zeros(3))
    with pytest.raises(FormatError, match="not a triangle grid"):
        voxelizer.load_triangle_grid(path)
    grid = voxelizer.triangle_grid(load_model("gear.ply"))
    arrays = grid.to_numpy()
    arrays["triangle_ids"] = arrays["triangle_ids"] + 10_000  # past the triangles
    np.savez(path, **arrays)
    with pytest.raises(FormatError, match="out of range"):
        voxelizer.load_triangle_grid(path)


def test_a_triangle_grid_file_is_read_with_the_npz_readers_limits(tmp_path, monkeypatch):
    """np.load read any path: a FIFO blocked for ever, an array header claiming a terabyte
    was allocated (MemoryError), and zeros that inflate past memory were inflated."""
    fifo = tmp_path / "fifo.npz"
    os.mkfifo(fifo)
    with time_limit(2.0), pytest.raises(FormatError, match=r"not a file \(a FIFO\)"):
        read_triangle_grid(fifo)
    claims = tmp_path / "claims.npz"
    header = {"descr": "<i8", "fortran_order": False, "shape": (1 << 37,)}
    text = repr(header).encode("latin1")
    text += b" " * (-(len(text) + 11) % 64) + b"\n"
    with zipfile.ZipFile(claims, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("offsets.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text)
    with pytest.raises(FormatError, match="shorter than its header says"):
        read_triangle_grid(claims)
    zeros = tmp_path / "zeros.npz"
    np.savez_compressed(zeros, offsets=np.zeros(1 << 21, np.int64))  # 16 MiB in a few KB
    monkeypatch.setattr(voxelizer.budget, "_read_available_host_memory", lambda: 1 << 20)
    monkeypatch.setattr(voxelizer.budget, "_available_read", None)
    try:
        with pytest.raises(MemoryBudgetError):
            read_triangle_grid(zeros)
    finally:
        voxelizer.budget._available_read = None


def test_to_torch(gpu):
    grid = voxelizer.triangle_grid(load_model("gear.ply"))
    try:
        import torch
    except ModuleNotFoundError:  # not a skip: without torch, the error must say how to get it
        with pytest.raises(ModuleNotFoundError, match=r"to_torch\(\).*pip install torch"):
            grid.to_torch()
        return
    tensors = grid.to_torch()
    assert tensors["triangle_ids"].dtype == torch.int32
    assert tensors["offsets"].dtype == torch.int64
    for name, array in grid.to_numpy().items():
        assert np.array_equal(tensors[name].numpy(), array), name
