"""Thin and empty solid results (voxelizer.thin, ThinResultWarning): sheets, thin rods and a
one-sided table warn with the ratio and the remedy in the words of the face that voxelized
them; closed meshes, the shared models among them, stay silent and cost no surface pass."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import trimesh

from voxelizer import ThinResultWarning, Voxelizer, load_mesh, mesh_warnings
from voxelizer.mesh import Mesh
from voxelizer.parallel import MIN_ROWS
from voxelizer.thin import ESTIMATE_MARGIN, THIN_RATIO, needs_surface_count, thin_warning

from ..helpers import PROJECT_MODELS, SHARED_MODELS, run_cli
from ..shapes import box, combine, sphere

SHEET = (
    np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], float),
    np.array([[0, 1, 2], [0, 2, 3]]),
)


def table(leg: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """A unit table: a one-sided square top at z = 1 on four closed legs `leg` wide."""
    top = (SHEET[0] + [0, 0, 1], SHEET[1])
    legs = [
        box([x, y, 0], [x + leg, y + leg, 1])
        for x in (0.05, 0.94 - leg + 0.01)
        for y in (0.05, 0.94 - leg + 0.01)
    ]
    return combine(top, *legs)


def rod(width: float = 0.004) -> tuple[np.ndarray, np.ndarray]:
    """A closed square rod of unit length, `width` thick."""
    return box([0, 0, 0], [width, width, 1])


def voxelized(gpu: Voxelizer, mesh, grid, **options):
    """(result, the ThinResultWarnings it gave)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = gpu.voxelize(mesh, grid, **options)
    return result, [w.message for w in caught if isinstance(w.message, ThinResultWarning)]


def surface_count(gpu: Voxelizer, mesh, grid) -> int:
    return gpu.voxelize(mesh, grid, mode="surface", warn=False).count()


@pytest.mark.parametrize("grid", [8, 32, 64])
def test_the_one_sided_table_warns_with_the_ratio_and_mode_both(gpu, grid):
    result, thin = voxelized(gpu, table(), grid)
    counts = result.stats.counts
    assert counts["solid_voxels"] < THIN_RATIO * counts["surface_voxels"]
    # the surface count is the surface pass's own, on the same grid
    assert counts["surface_voxels"] == surface_count(gpu, table(), grid)
    assert len(thin) == 1
    text = str(thin[0])
    assert f"{counts['surface_voxels']:,} its surface touches" in text
    assert "mode='both'" in text
    # the top is open: winding is named as well
    assert counts["open_columns"] > 0 and "fill_mode='winding'" in text
    # the remedy holds: mode both keeps the top and the legs, and does not warn
    both, thin_both = voxelized(gpu, table(), grid, mode="both")
    assert not thin_both and both.count() >= counts["surface_voxels"]


def test_an_empty_result_names_zero_and_is_empty(gpu):
    result, thin = voxelized(gpu, table(), 32)
    assert result.stats.counts["solid_voxels"] == 0
    assert len(thin) == 1 and "the solid result is empty: 0 solid voxels" in str(thin[0])
    assert "(0%, under 15%)" in str(thin[0])


@pytest.mark.parametrize("grid", [8, 64, 128])  # the rod is 0.5 voxel wide at 128
def test_a_thin_closed_rod_warns_without_naming_winding(gpu, grid):
    result, thin = voxelized(gpu, rod(), grid)
    assert result.stats.counts["open_columns"] == 0
    assert len(thin) == 1
    assert "mode='both'" in str(thin[0]) and "winding" not in str(thin[0])


def test_a_sheet_filled_by_winding_is_empty_and_warns(gpu):
    """Parity fills a lone sheet's half space (an open mesh: OpenMeshWarning says so); the
    winding fill leaves it empty, and the thin warning says what keeps it."""
    result, thin = voxelized(gpu, SHEET, 32, fill_mode="winding")
    assert result.count() == 0 and len(thin) == 1
    assert "mode='both'" in str(thin[0]) and "fill_mode='winding'" not in str(thin[0])
    assert result.stats.counts["surface_voxels"] == 2 * 32 * 32  # (the cells' faces touch)


def test_dense_results_are_checked_too(gpu):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grid = gpu.voxelize_dense(rod(), 32)
    assert grid.stats.counts["surface_voxels"] > 0
    assert any(isinstance(w.message, ThinResultWarning) for w in caught)


def test_a_plate_warns_below_the_ratio_and_not_above(gpu):
    """A closed plate 64 voxels wide: a quarter of a voxel thick it covers no voxel centre;
    three voxels thick it holds three layers (0.75 of a two-layer surface, with its rim)."""
    h = 1 / 64
    thin_plate = box([0, 0, 0.5 + 0.1 * h], [1, 1, 0.5 + 0.35 * h])
    thick_plate = box([0, 0, 0.5 - 1.5 * h], [1, 1, 0.5 + 1.5 * h])
    bounds = [[0, 0, 0], [1, 1, 1]]
    thin_result, thin = voxelized(gpu, thin_plate, 64, bounds=bounds)
    assert thin_result.count() == 0 and len(thin) == 1
    thick_result, thick = voxelized(gpu, thick_plate, 64, bounds=bounds)
    assert thick_result.count() == 3 * 64 * 64 and not thick


def test_the_line_is_the_ratio_exactly():
    counts = {"solid_voxels": 15, "surface_voxels": 100, "open_columns": 0}
    assert THIN_RATIO == 0.15
    assert thin_warning(counts, "solid", "parity") is None
    counts["solid_voxels"] = 14
    warning = thin_warning(counts, "solid", "parity")
    assert isinstance(warning, ThinResultWarning) and "(14%, under 15%)" in str(warning)
    # the other modes keep their surface: never thin
    assert thin_warning(counts, "both", "parity") is None
    assert thin_warning(counts, "surface", "parity") is None
    # without an exact surface count (a thick result), no verdict but empty
    assert thin_warning({"solid_voxels": 3}, "solid", "parity") is None
    assert thin_warning({"solid_voxels": 0}, "solid", "parity") is not None
    # as data, with the other warnings
    found = mesh_warnings({**counts, "open_columns": 5}, "parity", "solid")
    assert [type(w).__name__ for w in found] == ["ThinResultWarning", "OpenMeshWarning"]


CLOSED = ["bunny.ply", "dragon.ply", "armadillo.ply", "torus.stl", "featuretype.stl"]
OPEN = ["bunny_scan.ply", "suzanne.ply"]


@pytest.mark.parametrize("name", CLOSED + OPEN)
@pytest.mark.parametrize("grid", [8, 32, 128])
def test_the_shared_models_do_not_warn(gpu, name, grid):
    result, thin = voxelized(gpu, SHARED_MODELS / name, grid)
    assert not thin, thin
    if grid >= 32:  # plainly thick: no surface pass was run to tell
        assert "surface_voxels" not in result.stats.counts
        assert "thin_check" not in result.stats.host_ms


@pytest.mark.parametrize("path", sorted(PROJECT_MODELS.glob("*.ply")), ids=lambda p: p.name)
def test_the_bundled_models_and_a_sphere_do_not_warn(gpu, path):
    for mesh, grid in ((path, 32), (sphere([0, 0, 0], 1.0), 8)):
        result, thin = voxelized(gpu, mesh, grid)
        assert not thin and result.count() > 0


def test_a_knot_thinner_than_a_voxel_warns(gpu):
    """The bundled torus knot's tube is about a voxel across at 8³ (20 solid voxels for 180
    surface ones); at 16³ it holds (204 for 632, 32%)."""
    assert len(voxelized(gpu, PROJECT_MODELS / "torus_knot.ply", 8)[1]) == 1
    assert not voxelized(gpu, PROJECT_MODELS / "torus_knot.ply", 16)[1]


def test_thick_results_skip_the_estimate_too():
    """A solid above the line of the whole grid needs neither the surface pass nor the pass
    over the triangles (Mesh.axis_areas is not computed)."""
    mesh = load_mesh(sphere([0, 0, 0], 1.0))
    from voxelizer.placement import GridPlacement

    placement = GridPlacement.fit(mesh, 16)
    assert not needs_surface_count(int(THIN_RATIO * ESTIMATE_MARGIN * 16**3) + 1, mesh, placement)
    assert "axis_areas" not in mesh.__dict__
    assert needs_surface_count(0, mesh, placement)
    assert needs_surface_count(10, mesh, placement)  # a sphere of 16³ has ~2,100 solid voxels
    assert "axis_areas" in mesh.__dict__


def test_axis_areas_are_the_projected_areas():
    mesh = load_mesh(box([0, 0, 0], [1, 2, 3]))
    assert np.allclose(mesh.axis_areas, [2 * 6, 2 * 3, 2 * 2])
    bunny = trimesh.load(SHARED_MODELS / "bunny.ply")
    projected = np.abs(bunny.face_normals * bunny.area_faces[:, None]).sum(axis=0)
    assert np.allclose(load_mesh(bunny).axis_areas, projected, rtol=1e-9, atol=0)


def test_axis_areas_over_row_chunks_and_stray_vertices():
    """A mesh of more faces than one row chunk takes (voxelizer.parallel: the sums come in
    chunks, on threads), faces in no order, a vertex no face uses: each axis's area as
    np.cross gives it."""
    rng = np.random.default_rng(7)
    vertices = rng.normal(size=(200_001, 3)) * [1.0, 2.0, 3.0]
    faces = rng.integers(0, 200_000, size=(2 * MIN_ROWS + 12_345, 3))  # vertex 200,000: stray
    mesh = Mesh(vertices, faces)
    corners = vertices[faces]
    normals = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    assert np.allclose(mesh.axis_areas, np.abs(normals).sum(axis=0) / 2, rtol=1e-12, atol=0)


def test_the_command_line_says_it_in_its_own_words(gpu, capsys, tmp_path):
    path = tmp_path / "table.ply"
    trimesh.Trimesh(*table(), process=False).export(path)
    code, _, err = run_cli(capsys, path, "--grid", 32, "-o", tmp_path / "table.npz", "--quiet")
    assert code == 0
    line = next(line for line in err.splitlines() if "solid result is empty" in line)
    assert line.startswith("voxelize: warning:")
    assert "--mode both" in line and "--fill-mode winding" in line
    assert "mode='both'" not in line
