"""The mesh check the fill pass makes: columns whose crossings do not balance (an open surface)
and columns where the winding number leaves {0, 1} (overlapping, nested or inside-out parts),
counted on the GPU and compared with analytic counts and with the CPU reference
(reference.column_counts); the warnings made from them, the edge-level report (check_mesh,
--check, --stats), and the same counts on every path through the passes."""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest
import trimesh

import voxelizer
from voxelizer import VARIANTS, OpenMeshWarning, OverlapWarning, Voxelizer, check_mesh
from voxelizer.choices import SORTS
from voxelizer.pipeline import binning, passes
from voxelizer.reference import column_counts

from ..helpers import (
    PROJECT_MODELS,
    assert_same_voxels,
    cli_usage_error,
    load_model,
    random_soup,
    reference_grid,
    run_cli,
    shared_model,
)
from ..shapes import box, box_expected, combine, inverted, reference_voxels, stacked_tetrahedra

N = 16
PARITY_MODES = ("parity", "vote", "union")  # the fill modes that count columns and warn
CUBE = [[0, 0, 0], [N, N, N]]  # bounds that make world space grid space (h = 1)
CLOSED_MODELS = [
    "bunny.ply",
    "dragon.ply",
    "armadillo.ply",
    "featuretype.stl",
    "torus.stl",
    "gear.ply",
    "hollow_sphere.ply",
    "torus_knot.ply",
]


def _counts(gpu, mesh, n=N, **options) -> tuple[int, int]:
    """(open_columns, overlap_columns) of a grid-space mesh, every warning turned off."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grid = gpu.voxelize_dense(mesh, n, bounds=[[0, 0, 0], [n, n, n]], **options)
    return grid.stats.counts["open_columns"], grid.stats.counts["overlap_columns"]


def _reference(mesh, n=N, fill_mode: str = "parity") -> tuple[int, int]:
    vertices, faces = mesh
    return column_counts(vertices.astype(np.float32), faces, n, fill_mode)


def _without(mesh, z: float):
    """The box without its faces at height z (its top or bottom)."""
    v, f = mesh
    return v, f[~np.all(v[f][:, :, 2] == z, axis=1)]


def _tetrahedron(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A closed tetrahedron, consistently oriented (outward or inward, as the points fall)."""
    return points, np.array([[0, 1, 2], [0, 3, 1], [0, 2, 3], [1, 3, 2]])


# --- analytic meshes, exact counts ------------------------------------------------------------

# Column centres lie on the box's x = 2.5 and 9.5 and y = 3.5 and 7.5: the top-left rule
# gives the face the centres with 2.5 <= x < 9.5 and 3.5 <= y < 7.5, 7 x 4 of them.
OPEN_LO, OPEN_HI, OPEN_COLUMNS = [2.5, 3.5, 3.0], [9.5, 7.5, 12.0], 28


def test_a_closed_box_counts_nothing_and_does_not_warn(gpu):
    closed = box(OPEN_LO, OPEN_HI)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grid = gpu.voxelize_dense(closed, N, bounds=CUBE)
    assert (grid.stats.counts["open_columns"], grid.stats.counts["overlap_columns"]) == (0, 0)
    assert_same_voxels(grid.to_numpy(), box_expected(OPEN_LO, OPEN_HI, N))


@pytest.mark.parametrize("face", ["top", "bottom"])
def test_a_box_without_a_face_opens_the_columns_under_it(gpu, face):
    """28 columns by the tie rule; a box without its bottom winds -1 above the top face's
    crossing, but an open column is never counted as an overlap."""
    mesh = _without(box(OPEN_LO, OPEN_HI), OPEN_HI[2] if face == "top" else OPEN_LO[2])
    with pytest.warns(OpenMeshWarning) as caught:
        grid = gpu.voxelize_dense(mesh, N, bounds=CUBE)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert message.startswith(f"the mesh is not closed: {OPEN_COLUMNS} columns cross its surface")
    assert "fill_mode='winding'" in message and "fill_mode='auto'" in message
    counts = grid.stats.counts
    assert (counts["open_columns"], counts["overlap_columns"]) == (OPEN_COLUMNS, 0)
    assert _reference(mesh) == (OPEN_COLUMNS, 0)


def test_a_box_without_a_side_is_open_at_its_edges_but_no_column_sees_it(gpu):
    """Columns never cross a vertical face: parity means inside in every column, no warning;
    the edge-level report still finds the hole."""
    v, f = box(OPEN_LO, OPEN_HI)
    mesh = (v, f[~np.all(v[f][:, :, 0] == OPEN_LO[0], axis=1)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grid = gpu.voxelize_dense(mesh, N, bounds=CUBE)
    assert grid.stats.counts["open_columns"] == 0
    assert_same_voxels(grid.to_numpy(), box_expected(OPEN_LO, OPEN_HI, N))
    report = check_mesh(mesh)
    assert not report.closed and report.boundary_edges == 4  # the square's sides; a diagonal


def test_two_overlapping_boxes_count_the_columns_through_the_overlap(gpu):
    """Their xy overlap holds the centres 4.5..7.5 by 6.5..8.5 (4 x 3, edges by the tie rule),
    and their z overlap [5, 9] holds voxel centres, where the winding is 2."""
    mesh = combine(box([1.5, 2.5, 1], [8.5, 9.5, 9]), box([4.5, 6.5, 5], [12, 12, 14]))
    with pytest.warns(OverlapWarning) as caught:
        grid = gpu.voxelize_dense(mesh, N, bounds=CUBE)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "12 columns pass" in message and "fill_mode='union'" in message
    counts = grid.stats.counts
    assert (counts["open_columns"], counts["overlap_columns"]) == (0, 12)
    assert _reference(mesh) == (0, 12)
    # union mode fills them, says nothing, and counts the same columns on the host
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        union = gpu.voxelize_dense(mesh, N, bounds=CUBE, fill_mode="union")
    assert union.stats.counts["union_runs"] == 2 and union.stats.counts["overlap_columns"] == 12


def test_vote_warns_of_overlaps_counted_along_three_axes(gpu):
    """Vote takes parity along each axis, so overlapping parts come out as their exclusive or
    there too: it warns, with the columns along x, y and z summed as the reference sums them."""
    mesh = combine(box([1.5, 2.5, 1], [8.5, 9.5, 9]), box([4.5, 6.5, 5], [12, 12, 14]))
    expected = _reference(mesh, fill_mode="vote")
    assert expected[0] == 0 and expected[1] > 12
    with pytest.warns(OverlapWarning, match=f"{expected[1]} columns pass \\(along x, y and z\\)"):
        grid = gpu.voxelize_dense(mesh, N, bounds=CUBE, fill_mode="vote")
    counts = grid.stats.counts
    assert (counts["open_columns"], counts["overlap_columns"]) == expected


def test_boxes_overlapping_between_voxel_centres_do_not_count(gpu):
    """z overlap [5.75, 6.25] holds no voxel centre: the winding is 2 nowhere it is sampled."""
    mesh = combine(box([1, 1, 1], [8, 8, 6.25]), box([5, 5, 5.75], [12, 12, 14]))
    assert _counts(gpu, mesh) == (0, 0) == _reference(mesh)


def test_nested_boxes_overlap_and_a_cavity_does_not(gpu):
    outer, inner = box([1, 1, 1], [14, 14, 14]), box([4.5, 4.5, 5], [9.5, 8.5, 11])
    assert _counts(gpu, combine(outer, inner)) == (0, 5 * 4)  # w = 2 inside the inner box
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hollow = gpu.voxelize_dense(combine(outer, inverted(inner)), N, bounds=CUBE)
    assert (hollow.stats.counts["open_columns"], hollow.stats.counts["overlap_columns"]) == (0, 0)


def test_an_inside_out_box_winds_minus_one(gpu):
    """Parity fills it as the box, but the winding is -1: parity is not the union there."""
    mesh = inverted(box([2, 3, 4], [10, 9, 12]))
    with pytest.warns(OverlapWarning, match="48 columns pass"):
        grid = gpu.voxelize_dense(mesh, N, bounds=CUBE)
    assert grid.stats.counts["overlap_columns"] == 8 * 6 and grid.stats.counts["open_columns"] == 0
    assert_same_voxels(grid.to_numpy(), box_expected([2, 3, 4], [10, 9, 12], N))


def test_crossings_at_the_grid_top_and_bottom_count(gpu):
    """A box filling the whole height: its top lies above the top voxel centre (it flips no
    voxel) and its bottom below the first; both still count, so removing either opens it."""
    full = box([2, 2, 0], [6, 6, N])
    assert _counts(gpu, full) == (0, 0)
    assert _counts(gpu, _without(full, N)) == (16, 0) == _reference(_without(full, N))
    assert _counts(gpu, _without(full, 0)) == (16, 0) == _reference(_without(full, 0))


# --- models ------------------------------------------------------------------------------------


def test_an_open_scan_warns_in_parity_and_vote_and_union(gpu):
    mesh = load_model("bunny_scan.ply")
    for fill_mode in PARITY_MODES:
        with pytest.warns(OpenMeshWarning, match=r"not closed: [\d,]+ columns cross") as caught:
            grid = gpu.voxelize_dense(mesh, 48, fill_mode=fill_mode)
        assert len(caught) == 1, [str(w.message) for w in caught]
        assert grid.stats.counts["open_columns"] > 0
    with warnings.catch_warnings():  # the winding fill is meant for open meshes
        warnings.simplefilter("error")
        grid = gpu.voxelize_dense(mesh, 48, fill_mode="winding")
    assert "open_columns" not in grid.stats.counts
    assert check_mesh(shared_model("bunny_scan.ply")).boundary_edges == 223


@pytest.mark.parametrize("name", CLOSED_MODELS)
def test_closed_models_count_nothing_and_do_not_warn(gpu, name):
    mesh = load_model(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for fill_mode in ("parity", "vote"):
            counts = gpu.voxelize(mesh, 64, fill_mode=fill_mode).stats.counts
            assert (counts["open_columns"], counts["overlap_columns"]) == (0, 0)


def test_the_counts_equal_the_reference_on_models(gpu):
    for name, shape in (("bunny_scan.ply", 40), ("suzanne.ply", (48, 24, 32))):
        mesh = load_model(name)
        for fill_mode in ("parity", "vote"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                grid = gpu.voxelize_dense(mesh, shape, fill_mode=fill_mode)
            g = grid.placement.grid_vertices(mesh.vertices)
            expected = column_counts(g, mesh.faces, grid.shape, fill_mode)
            counts = grid.stats.counts
            assert (counts["open_columns"], counts["overlap_columns"]) == expected, (
                name,
                fill_mode,
            )


def _two_bunnies():
    bunny = load_model("bunny.ply")
    shift = (bunny.bounds[1] - bunny.bounds[0]) * [0.3, 0.1, 0.2]
    return combine((bunny.vertices, bunny.faces), (bunny.vertices + shift, bunny.faces))


@pytest.mark.slow
def test_every_variant_sort_and_split_counts_the_same(gpu):
    """An open scan and two overlapping bunnies at 256³, whole and with a budget that forces
    slabs, triangle batches and split parts (the per-column sums across dispatches)."""
    # 6 MiB: 2 slabs, batches of thousands; 7 MiB for the two bunnies' 70k vertices in the
    # indexed variants (float32 positions and fine coordinates: more than half of 6 MiB)
    for mesh, indexed_budget in (
        (load_model("bunny_scan.ply"), 6 << 20),
        (_two_bunnies(), 7 << 20),
    ):
        found = set()
        for variant in VARIANTS:
            split_budget = indexed_budget if VARIANTS[variant]["INDEXED"] else 6 << 20
            for sort in SORTS:
                for max_memory in (None, split_budget):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        svo = gpu.voxelize(
                            mesh, 256, variant=variant, sort=sort, max_memory=max_memory
                        )
                    counts = svo.stats.counts
                    if max_memory is not None:
                        assert counts["slabs"] > 1 and counts["parts"] > counts["slabs"]
                        assert counts["triangle_batch"] < counts["triangles"]
                    found.add((counts["open_columns"], counts["overlap_columns"]))
        assert len(found) == 1, found
        (open_columns, overlap_columns), *_ = found
        assert (open_columns > 0) != (overlap_columns > 0)  # the scan is open, the pair overlaps


# --- random meshes against the CPU reference ---------------------------------------------------


@pytest.mark.parametrize("variant", ["naive", "combined"])
def test_random_meshes_match_the_reference(gpu, variant):
    """Closed tetrahedra of either orientation (nested, crossing, flat) and open soups on
    quarter-voxel lattices, so that crossings tie with column centres, edges and voxel
    centres: the counts equal the reference's exactly."""
    rng = np.random.default_rng(15)
    seen = set()
    for trial in range(24):
        n = int(rng.choice([8, 12, 16, 20]))
        alone = trial % 4 == 0  # one tetrahedron, turned outward: nothing overlaps
        shapes = [
            _tetrahedron(rng.integers(0, 4 * n + 1, (4, 3)) / 4) for _ in range(1 if alone else 6)
        ]
        if trial % 3:
            g, faces = random_soup(rng, n, 12, 2 * (trial % 3), 4)
            shapes.append((g.astype(np.float64), faces))
        vertices, faces = combine(*shapes)
        vertices[0], vertices[1] = 0, n  # a tetrahedron spans the grid: bounds fit the mesh
        if alone and np.linalg.det(vertices[1:4] - vertices[0]) > 0:
            faces[:4] = faces[:4, ::-1]  # (its faces as _tetrahedron lists them face inward)
        expected = _reference((vertices, faces), n)
        got = _counts(gpu, (vertices, faces), n, variant=variant)
        assert got == expected, trial
        seen.add((expected[0] > 0, expected[1] > 0))
    assert seen == {(False, False), (False, True), (True, False), (True, True)}


def test_closed_consistently_oriented_meshes_never_count_an_overlap(gpu):
    """Disjoint boxes (touching faces included), outward: the winding is 0 or 1 everywhere."""
    rng = np.random.default_rng(7)
    for _ in range(8):
        boxes = []
        for x in range(0, N - 4, 5):
            lo = [x + rng.integers(0, 2) / 4, rng.integers(0, 8) / 2, rng.integers(0, 8) / 2]
            hi = [x + 5, lo[1] + 1 + rng.integers(0, 12) / 2, lo[2] + 1 + rng.integers(0, 12) / 2]
            boxes.append(box(lo, hi))
        mesh = combine(*boxes)
        assert _counts(gpu, mesh) == (0, 0) == _reference(mesh)


# --- the paths through the passes ---------------------------------------------------------------


def test_one_submission_per_slab_in_the_common_case(gpu, monkeypatch):
    """A slab of one part is counted, grouped and filled in one submission: the two-step path
    is not taken, and the pair count, tiles and voxels are those of the reference."""
    taken = []
    for name in ("_count_pairs", "_fill"):
        original = getattr(passes.PassRunner, name)
        monkeypatch.setattr(
            passes.PassRunner,
            name,
            lambda self, *args, _name=name, _original=original, **kw: (
                taken.append(_name) or _original(self, *args, **kw)
            ),
        )
    mesh = load_model("torus.stl")
    grid = gpu.voxelize_dense(mesh, 48)
    assert taken == []
    assert "passes_submission" in grid.stats.host_ms
    assert grid.stats.counts["pairs"] > 0 and grid.stats.counts["tiles"] > 0
    assert_same_voxels(grid.to_numpy(), reference_grid("torus.stl", 48).to_numpy())


@pytest.mark.slow
def test_a_tile_with_more_pairs_than_a_fill_round_in_one_and_two_submissions(monkeypatch):
    """70,000 flat tetrahedra stacked over one tile, with an inside-out box (overlap columns)
    and a lone triangle (open columns) over the same tile: 280,000 pairs, more than one fill
    round takes. A fresh Voxelizer's first call has too little room for them (its pair
    buffers hold SPECULATIVE_PAIRS) and runs the two-step path with three rounds, the column
    sums carried between them; the second has the room but one round, so the tile is reported
    unfinished and the part runs again. Both give the reference's voxels and counts."""
    count, n = 70_000, 8
    vertices, faces = stacked_tetrahedra(count)
    lone = (np.array([[0.1, 3.1, 4.0], [3.9, 3.1, 4.0], [0.1, 3.9, 4.0]]), np.array([[0, 1, 2]]))
    spanning = (np.array([[0.0, 0, 0], [n, n, n], [0, 0, 0]]), np.array([[0, 1, 2]]))
    mesh = combine(
        (vertices, faces),
        inverted(box([0.25, 0.25, 0.25], [3.75, 2.75, 7.75])),
        lone,
        spanning,  # zero area: the mesh spans the grid, so that world space is grid space
    )
    expected_voxels = reference_voxels(mesh, n)
    expected_counts = _reference(mesh, n)
    assert expected_counts[0] > 0 and expected_counts[1] > 0
    outcomes = []
    original = passes.PassRunner._count_and_fill

    def spy(self, *args, **kw):
        result = original(self, *args, **kw)
        outcomes.append(result.filled is not None)
        return result

    monkeypatch.setattr(passes.PassRunner, "_count_and_fill", spy)
    with Voxelizer() as fresh:
        for call in range(2):
            assert _counts(fresh, mesh, n) == expected_counts, call
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                grid = fresh.voxelize_dense(mesh, n, bounds=[[0, 0, 0], [n, n, n]])
            assert_same_voxels(grid.to_numpy(), expected_voxels)
            assert grid.stats.counts["pairs"] > binning.SPECULATIVE_PAIRS
    assert outcomes == [False] * 4


# --- the edge-level report and the command line ---------------------------------------------


def test_check_mesh_takes_what_voxelize_takes():
    closed = check_mesh(PROJECT_MODELS / "gear.ply")
    assert closed.closed and closed.boundary_edges == closed.nonmanifold_edges == 0
    v, f = box([0, 0, 0], [1, 1, 1])
    assert check_mesh((v, f[1:])).boundary_edges == 3
    assert check_mesh(trimesh.Trimesh(v, f[1:], process=False)).boundary_edges == 3
    assert voxelizer.check_mesh(load_model("torus.stl")) == check_mesh(shared_model("torus.stl"))


def test_cli_warns_in_one_line(capsys, tmp_path):
    code, _, stderr = run_cli(capsys, shared_model("bunny_scan.ply"), "--grid", 32)
    assert code == 0
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("voxelize: warning: the mesh is not closed: 6 columns cross")
    path = tmp_path / "overlap.ply"
    v, f = combine(box([0, 0, 0], [2, 2, 2]), box([1, 1, 1], [3, 3, 3]))
    trimesh.Trimesh(v, f, process=False).export(path)
    code, _, stderr = run_cli(capsys, path, "--grid", 8)
    assert code == 0
    assert stderr.startswith("voxelize: warning: the mesh has overlapping, nested or inside-out")
    assert len(stderr.strip().splitlines()) == 1 and "--fill-mode union" in stderr


def test_cli_check_prints_the_report_and_voxelizes_nothing(capsys, tmp_path):
    code, stdout, stderr = run_cli(capsys, shared_model("bunny_scan.ply"), "--check")
    assert code == 0 and stderr == ""
    lines = stdout.strip().splitlines()
    assert lines[0] == "bunny_scan.ply: 69,451 triangles, not closed"
    assert lines[1].split() == ["boundary_edges", "223"]
    assert [line.split()[0] for line in lines[1:]] == [
        "boundary_edges",
        "nonmanifold_edges",
        "degenerate_triangles",
        "duplicate_triangles",
    ]
    code, stdout, _ = run_cli(capsys, PROJECT_MODELS / "gear.ply", "--check")
    assert code == 0 and stdout.splitlines()[0].endswith("triangles, closed")
    stderr = cli_usage_error(
        capsys, PROJECT_MODELS / "gear.ply", "--check", "-o", tmp_path / "x.svo"
    )
    assert "--check only reports on the mesh: leave out -o" in stderr
    assert not (tmp_path / "x.svo").exists()


def test_cli_check_reports_every_mesh_of_a_folder_and_goes_on_past_a_bad_one(capsys, tmp_path):
    shutil.copyfile(PROJECT_MODELS / "gear.ply", tmp_path / "a.ply")
    shutil.copyfile(shared_model("bunny_scan.ply"), tmp_path / "b.ply")
    (tmp_path / "c.stl").write_text("not a mesh")
    code, stdout, stderr = run_cli(capsys, tmp_path, "--check")
    assert code == 1
    headers = [line for line in stdout.splitlines() if not line.startswith(" ")]
    assert headers[0].startswith("a.ply: ") and headers[0].endswith(", closed")
    assert headers[1] == "b.ply: 69,451 triangles, not closed" and len(headers) == 2
    assert stderr.startswith("voxelize: error: ") and "c.stl" in stderr
    assert len(stderr.strip().splitlines()) == 1


def test_cli_statistics_keep_the_edge_report(capsys, tmp_path):
    out = tmp_path / "stats.json"
    code, stdout, _ = run_cli(
        capsys, shared_model("bunny_scan.ply"), "--grid", 32, "--stats", "--stats-json", out
    )
    assert code == 0
    stats = json.loads(out.read_text())
    counts = stats["counts"]
    assert counts["boundary_edges"] == 223 and counts["nonmanifold_edges"] == 0
    assert counts["open_columns"] == 6 and counts["overlap_columns"] == 0
    assert {"degenerate_triangles", "duplicate_triangles"} <= set(counts)
    assert "check_topology" in stats["host_ms"]
    assert any(line.split() == ["boundary_edges", "223"] for line in stdout.splitlines())
    assert any(line.split() == ["open_columns", "6"] for line in stdout.splitlines())
