"""fill_mode="union": closed components counted by their winding, so that overlapping closed
parts give their union and an inward shell (a cavity) stays empty; the GPU against the CPU
reference of the rule (reference.union_columns), dense and SVO, whole and in slabs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import trimesh

from voxelizer import SVO, VARIANTS, OpenMeshWarning
from voxelizer.components import split_components, union_runs
from voxelizer.io import load_mesh
from voxelizer.reference import solid_columns, union_columns, voxelize_reference

from ..helpers import assert_same_svo, assert_same_voxels, load_model, run_cli
from ..shapes import box, box_expected, combine, inverted, octahedron, sphere

N = 32
CUBE = [[0, 0, 0], [N, N, N]]  # bounds that make world space grid space (h = 1)
SLAB_SHAPE = (256, 256, 128)
SLAB_BUDGET = 3584 << 10  # small enough that SLAB_SHAPE goes in slabs of rows


def _union(gpu, mesh, shape=N, **options) -> tuple[np.ndarray, SVO]:
    """The union voxels, dense and from the SVO, on a grid whose space is world space."""
    bounds = [[0, 0, 0], list(np.broadcast_to(shape, 3))]
    dense = gpu.voxelize_dense(mesh, shape, fill_mode="union", bounds=bounds, **options)
    svo = gpu.voxelize(mesh, shape, fill_mode="union", bounds=bounds, **options)
    assert_same_voxels(svo.to_numpy(), dense.to_numpy())
    return dense.to_numpy(), svo


# --- analytic shapes ------------------------------------------------------------------------


def test_two_overlapping_boxes_give_their_union(gpu):
    lo_a, hi_a, lo_b, hi_b = [2, 3, 4], [18.5, 20, 21.25], [10, 11.75, 12], [29, 28, 30.5]
    mesh = combine(box(lo_a, hi_a), box(lo_b, hi_b))
    a, b = box_expected(lo_a, hi_a, N), box_expected(lo_b, hi_b, N)
    voxels, svo = _union(gpu, mesh)
    assert_same_voxels(voxels, a | b)
    assert svo.stats.counts["union_runs"] == 2 and svo.stats.fill_mode == "union"
    assert np.count_nonzero(a & b) > 500  # parity cuts all of these out
    parity = gpu.voxelize_dense(mesh, N, bounds=CUBE).to_numpy()
    assert_same_voxels(parity, a ^ b)


def test_the_issue_cubes_count_17522(gpu):
    """The report: two 20-unit cubes overlapping by a 10-unit cube, on a 32³ grid."""
    mesh = combine(box([1, 1, 1], [21, 21, 21]), box([11, 11, 11], [31, 31, 31]))
    assert gpu.voxelize_dense(mesh, N).count() == 16_522  # parity: XOR
    assert gpu.voxelize_dense(mesh, N, fill_mode="union").count() == 17_522
    assert gpu.voxelize(mesh, N, fill_mode="union").count() == 17_522


def test_a_box_inside_a_box_gives_the_outer_box(gpu):
    outer, inner = ([1, 2, 3], [30, 29, 28]), ([8, 8, 8], [20, 21.5, 22])
    voxels, _ = _union(gpu, combine(box(*outer), box(*inner)))
    assert_same_voxels(voxels, box_expected(*outer, N))


def test_a_hollow_box_stays_hollow_and_equals_parity(gpu):
    outer, inner = ([1, 2, 3], [30, 29, 28]), ([8, 8, 8], [20, 21.5, 22])
    mesh = combine(box(*outer), inverted(box(*inner)))
    voxels, svo = _union(gpu, mesh)
    expected = box_expected(*outer, N) & ~box_expected(*inner, N)
    assert_same_voxels(voxels, expected)
    assert svo.stats.counts["union_runs"] == 2  # the general path, not the one-run shortcut
    assert_same_voxels(gpu.voxelize_dense(mesh, N, bounds=CUBE).to_numpy(), expected)


@pytest.mark.parametrize("exponent", [996, -1000], ids=["2^996", "2^-1000"])
def test_parts_signs_at_extreme_scales_without_warnings(gpu, exponent):
    """The hollow box scaled by a power of two (the same grid positions): at 2^996 the
    signed volumes overflowed float64 (a warning, and no sign), at 2^-1000 they vanished
    (the cavity filled); the voxels must be those at scale 1, with no numpy warning."""
    outer, inner = ([1, 2, 3], [30, 29, 28]), ([8, 8, 8], [20, 21.5, 22])
    vertices, faces = combine(box(*outer), inverted(box(*inner)))
    scaled = (np.ldexp(vertices, exponent), faces)
    bounds = np.ldexp(np.asarray(CUBE, np.float64), exponent)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        voxels = gpu.voxelize_dense(scaled, N, fill_mode="union", bounds=bounds).to_numpy()
    assert_same_voxels(voxels, box_expected(*outer, N) & ~box_expected(*inner, N))


def test_a_mesh_inside_out_as_a_whole_fills_as_parity(gpu):
    """Signs are relative to the largest closed part: flipping every face changes nothing."""
    outer, inner = ([1, 2, 3], [30, 29, 28]), ([8, 8, 8], [20, 21.5, 22])
    for mesh in (inverted(box(*outer)), combine(inverted(box(*outer)), box(*inner))):
        voxels, _ = _union(gpu, mesh)
        assert_same_voxels(voxels, gpu.voxelize_dense(mesh, N, bounds=CUBE).to_numpy())


def test_open_parts_are_filled_together_by_parity_and_added(gpu):
    """A box with its top as a separate, unshared piece one voxel higher (a crack): both
    pieces are open, filled together by parity (a column ends at the lid), then joined
    with an overlapping closed box. The crack is in vertical walls, which no column
    crosses: every column balances, so nothing warns."""
    v, f = box([4, 4, 4], [14, 14, 14])
    top = np.flatnonzero(v[f].min(axis=1)[:, 2] == 14)
    lid = (v[f[top]].reshape(-1, 3) + [0, 0, 1], np.arange(3 * len(top)).reshape(-1, 3))
    cracked = (v, np.delete(f, top, axis=0))
    mesh = combine(cracked, lid, box([10, 10, 10], [24, 24, 24]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        voxels, svo = _union(gpu, mesh)
    assert svo.stats.counts["open_columns"] == 0
    open_parity = solid_columns(*combine(cracked, lid), N)
    assert_same_voxels(voxels, open_parity | box_expected([10, 10, 10], [24, 24, 24], N))
    without_lid = combine(cracked, box([10, 10, 10], [24, 24, 24]))  # 10 x 10 columns open
    with pytest.warns(OpenMeshWarning, match="100 columns cross .* added to the union"):
        _union(gpu, without_lid)


# --- the component split and the runs -------------------------------------------------------


def test_components_by_edges_and_positions():
    two = combine(box([0, 0, 0], [2, 2, 2]), inverted(box([2, 2, 2], [3, 3, 3])))  # one corner
    parts = split_components(*two)
    assert parts.count == 2 and parts.closed.all() and parts.signs.tolist() == [1, -1]
    v, f = two
    soup = split_components(v[f].reshape(-1, 3), np.arange(f.size).reshape(-1, 3))
    assert np.array_equal(soup.labels, parts.labels)
    assert np.array_equal(soup.signs, parts.signs)
    holed = split_components(v, f[1:])
    assert holed.closed.tolist() == [False, True] and holed.signs.tolist() == [1, 1]


def test_runs_group_parts_whose_boxes_are_apart():
    # a row of 6 boxes, each overlapping the next: two colours; plus a far box and a cavity
    row = [box([4 * i, 0, 0], [4 * i + 5, 3, 3]) for i in range(6)]
    v, f = combine(*row, box([0, 20, 0], [3, 23, 3]), inverted(box([1, 1, 1], [2, 2, 2])))
    runs = union_runs(split_components(v, f), v, f)
    assert [r.sign for r in runs] == [1, 1, -1]
    assert sorted(np.concatenate([r.faces for r in runs]).tolist()) == list(range(len(f)))
    # boxes that only touch (closer than a voxel) never share a run
    v, f = combine(box([0, 0, 0], [4, 4, 4]), box([4.5, 0, 0], [8, 4, 4]))
    assert len(union_runs(split_components(v, f), v, f)) == 2
    v, f = combine(box([0, 0, 0], [4, 4, 4]), box([5.5, 0, 0], [8, 4, 4]))
    assert len(union_runs(split_components(v, f), v, f)) == 1


def test_many_mutually_overlapping_parts_need_one_run_each(gpu):
    spheres = [octahedron([16 + 2 * np.cos(t), 16 + 2 * np.sin(t), 16], 9) for t in range(5)]
    mesh = combine(*spheres)
    voxels, svo = _union(gpu, mesh)
    assert svo.stats.counts["union_runs"] == 5
    expected = np.zeros_like(voxels)
    for shape in spheres:
        expected |= solid_columns(shape[0].astype(np.float32), shape[1], N)
    assert_same_voxels(voxels, expected)


# --- GPU against the CPU reference ------------------------------------------------------------


def _scene() -> tuple[np.ndarray, np.ndarray]:
    """Overlapping spheres and octahedra, a hollow sphere, an open triangle fan, a far box."""
    fan = (np.array([[3, 3, 20], [12, 4, 22], [5, 13, 25]], float), np.array([[0, 1, 2]]))
    return combine(
        sphere([12, 12, 12], 7.3, 2),
        octahedron([17.2, 14.6, 15.1], 8.4),
        inverted(sphere([12, 12, 12], 3.1, 1)),
        sphere([22, 21, 20], 5.2, 2),
        sphere([22, 21, 20], 7.9, 2),
        fan,
        box([2, 26, 2], [6, 30.5, 7]),
    )


@pytest.mark.parametrize("variant", VARIANTS)
def test_gpu_equals_the_reference_of_the_rule(gpu, variant):
    v, f = _scene()
    expected = union_columns(v, f, N)  # float64: the fine coordinates, as placed
    with pytest.warns(OpenMeshWarning):
        voxels, svo = _union(gpu, (v, f), variant=variant)
    assert_same_voxels(voxels, expected)
    assert svo.stats.counts["union_runs"] >= 3
    assert_same_svo(svo, SVO.from_dense(expected, svo.placement))


def test_gpu_equals_the_reference_in_slabs(gpu):
    scale = np.array(SLAB_SHAPE) / N
    v, f = _scene()
    v = v * scale
    expected = union_columns(v, f, SLAB_SHAPE)
    with pytest.warns(OpenMeshWarning):
        voxels, svo = _union(gpu, (v, f), SLAB_SHAPE, max_memory=SLAB_BUDGET)
    assert svo.stats.counts["slabs"] > svo.stats.counts["union_runs"]
    assert_same_voxels(voxels, expected)
    assert_same_svo(svo, SVO.from_dense(expected, svo.placement))


def test_two_overlapping_bunnies_match_the_reference(gpu):
    bunny = load_model("bunny.ply")
    shift = (bunny.bounds[1] - bunny.bounds[0]) * [0.3, 0.1, 0.2]
    mesh = combine((bunny.vertices, bunny.faces), (bunny.vertices + shift, bunny.faces))
    dense = gpu.voxelize_dense(mesh, 48, fill_mode="union")
    svo = gpu.voxelize(mesh, 48, fill_mode="union", variant="combined")
    expected = voxelize_reference(load_mesh(mesh), 48, "union").to_numpy()
    assert_same_voxels(dense.to_numpy(), expected)
    assert_same_voxels(svo.to_numpy(), expected)
    parity = gpu.voxelize_dense(mesh, 48).to_numpy()
    assert np.count_nonzero(expected & ~parity) > 100  # the overlap parity loses


# --- closed models: union is parity -----------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", ["bunny.ply", "torus.stl", "featuretype.stl", "hollow_sphere.ply"])
def test_union_equals_parity_on_closed_models(gpu, name, variant):
    mesh = load_model(name)
    parity = gpu.voxelize_dense(mesh, 40, variant=variant)
    union = gpu.voxelize_dense(mesh, 40, variant=variant, fill_mode="union")
    assert_same_voxels(union.to_numpy(), parity.to_numpy())
    svo = gpu.voxelize(mesh, 40, variant=variant, fill_mode="union")
    assert_same_svo(svo, gpu.voxelize(mesh, 40, variant=variant))
    assert svo.stats.counts["union_runs"] == (2 if name == "hollow_sphere.ply" else 1)


# --- faces: command line, progress ------------------------------------------------------------


def test_cli_fill_mode_union(capsys, tmp_path):
    v, f = combine(box([1, 1, 1], [21, 21, 21]), box([11, 11, 11], [31, 31, 31]))
    path = tmp_path / "cubes.ply"
    trimesh.Trimesh(v, f, process=False).export(path)
    code, out, err = run_cli(capsys, path, "--grid", N, "--fill-mode", "union")
    assert code == 0, err
    assert "17,522 solid voxels" in out
    code, out, err = run_cli(capsys, path, "--grid", N)  # parity warns, in the command's words
    assert code == 0 and "16,522 solid voxels" in out, err
    assert (
        err.startswith("voxelize: warning: the mesh has overlapping") and len(err.splitlines()) == 1
    )
    assert "--fill-mode winding or --fill-mode union fills their union" in err, err
    assert err.rstrip().endswith("(--fill-mode auto picks winding for such meshes only)"), err


def test_progress_counts_the_runs(gpu):
    seen: list[tuple[str, int, int]] = []
    mesh = combine(box([1, 1, 1], [21, 21, 21]), box([11, 11, 11], [31, 31, 31]))
    gpu.voxelize(mesh, N, fill_mode="union", progress=lambda *a: seen.append(a))
    assert seen == [("runs", 1, 2), ("runs", 2, 2)]
