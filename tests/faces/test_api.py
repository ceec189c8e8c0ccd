"""The Python API: inputs it accepts, what a DenseGrid says, and the typed errors."""

from __future__ import annotations

import numpy as np
import pytest
import trimesh

import voxelizer
from voxelizer import (
    DeviceError,
    GridError,
    MeshError,
    VariantError,
    VoxelizerError,
    choices,
    load_mesh,
    voxelize_dense,
)
from voxelizer.choices import variant_candidates

from ..helpers import PROJECT_MODELS, assert_same_voxels, load_model, reference_grid, shared_model


def test_every_input_form_gives_the_same_voxels(gpu):
    path = shared_model("torus.stl")
    loaded = trimesh.load(path, process=False)
    expected = reference_grid("torus.stl", 48).to_numpy()
    for source in (path, str(path), loaded, (loaded.vertices, loaded.faces), load_mesh(path)):
        assert_same_voxels(gpu.voxelize_dense(source, 48).to_numpy(), expected)


def test_dense_grid_describes_its_placement(gpu):
    vertices = np.array([[0, 0, 0], [4, 0, 0], [0, 2, 0], [0, 0, 1]], float)
    faces = np.array([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]])
    grid = gpu.voxelize_dense((vertices, faces), 16)
    assert grid.resolution == 16 and grid.voxel_size == 0.25
    # centred on the box centre (2, 1, 0.5): origin = centre - 16 * 0.25 / 2
    assert np.allclose(grid.origin, [0.0, -1.0, -1.5])
    voxels = grid.to_numpy()
    assert voxels.shape == (16, 16, 16) and voxels.dtype == bool
    assert grid.count() == int(voxels.sum()) > 0
    # every solid voxel's centre satisfies the tetrahedron's half-spaces (x/4 + y/2 + z < 1)
    centres = grid.placement.voxel_centres(np.argwhere(voxels))
    assert (centres.min(axis=0) > 0).all()
    assert (centres[:, 0] / 4 + centres[:, 1] / 2 + centres[:, 2] < 1).all()
    assert set(grid.stats.gpu_ms) >= {"setup", "scan", "emit", "sort", "mark", "compact", "fill"}


@pytest.mark.parametrize("dense", [True, False])
def test_count_voxels_false_leaves_the_count_to_the_caller(gpu, dense):
    """count_voxels=False (a batch counts on its writer threads): no count in the stats,
    the same voxels, and count() gives what the stats would have said."""
    call = gpu.voxelize_dense if dense else gpu.voxelize
    path = shared_model("torus.stl")
    counted = call(path, 32)
    uncounted = call(path, 32, count_voxels=False)
    assert "solid_voxels" not in uncounted.stats.counts
    assert uncounted.count() == counted.stats.counts["solid_voxels"] == counted.count() > 0
    assert np.array_equal(uncounted.to_numpy(), counted.to_numpy())


def test_module_function_uses_the_default_variant_and_device():
    grid = voxelize_dense(PROJECT_MODELS / "gear.ply", grid=32)
    on_cpu = voxelizer.Voxelizer().device.is_cpu
    assert voxelizer.DEFAULT_VARIANT == "auto"
    assert grid.stats.variant == variant_candidates("auto", on_cpu)[0]
    assert grid.count() == reference_grid("gear.ply", 32).count()


def test_auto_prefers_indices_on_a_gpu_and_the_soup_on_a_cpu_device():
    assert variant_candidates("auto", cpu_device=False) == ("combined", "branchless")
    assert variant_candidates("auto", cpu_device=True) == ("branchless",)
    assert variant_candidates("indexed", cpu_device=True) == ("indexed",)


@pytest.mark.parametrize("output", ["svo", "dense"])
def test_auto_takes_the_next_variant_where_the_budget_cannot_hold_the_vertices(output, monkeypatch):
    """The GPU's order on any device: bunny's 34,817 vertices take 1.67 MB in the indexed
    variants, more than half of a 3 MiB budget, so "combined" is refused and "auto" runs
    "branchless"; both agree with the reference where they run."""
    monkeypatch.setattr(choices, "AUTO_ON_CPU", choices.AUTO_ON_GPU)
    mesh = load_mesh(shared_model("bunny.ply"))
    call = voxelizer.voxelize if output == "svo" else voxelizer.voxelize_dense
    with pytest.raises(voxelizer.MemoryBudgetError, match="indexed variants hold"):
        call(mesh, 48, variant="combined", max_memory="3MiB")
    tight = call(mesh, 48, max_memory="3MiB")
    roomy = call(mesh, 48)
    assert (tight.stats.variant, roomy.stats.variant) == ("branchless", "combined")
    expected = reference_grid("bunny.ply", 48).to_numpy()
    for result in (tight, roomy):
        assert_same_voxels(result.to_numpy(), expected)


@pytest.mark.parametrize(
    "grid",
    [
        0,
        -4,
        65537,
        65537 * 4,
        2.5,
        "64",
        True,
        (8, 8),
        (8, 8, 0),
        (8, 8, 8, 8),
        [16, -16, 4],
        (16.0, 16, 16),
    ],
)
def test_bad_grids_raise_grid_error(gpu, grid):
    with pytest.raises(GridError):
        gpu.voxelize_dense(PROJECT_MODELS / "gear.ply", grid)


def test_unknown_variant(gpu):
    with pytest.raises(VariantError, match="unknown variant 'fast'"):
        gpu.voxelize_dense(PROJECT_MODELS / "gear.ply", 16, variant="fast")


@pytest.mark.parametrize(
    "source, message",
    [
        ((np.zeros((0, 3)), np.zeros((0, 3), int)), "no triangles"),
        ((np.ones((3, 3)), np.array([[0, 1, 2]])), "zero extent"),
        ((np.array([[0, 0, 0], [1, 0, 0], [np.nan, 1, 0]]), np.array([[0, 1, 2]])), "NaN"),
        (
            (np.array([[0, 0, 0], [1, 0, 0], [np.inf, 1, 0]]), np.array([[0, 1, 2]])),
            "NaN or infinity",
        ),
        ((np.eye(3), np.array([[0, 1, 3]])), "does not exist"),
        ((np.eye(3), np.array([[0, 1, -1]])), "does not exist"),
        ((np.eye(3), np.array([[0, 1, 2, 0]])), "triangles only"),
        ((np.eye(3), np.array([[0.0, 1.0, 2.0]])), "integer"),
        (42, "cannot voxelize a int"),
    ],
)
def test_bad_meshes_raise_mesh_error(gpu, source, message):
    with pytest.raises(MeshError, match=message):
        gpu.voxelize_dense(source, 16)


def test_unknown_device_raises_device_error():
    with pytest.raises(DeviceError, match="no Vulkan device matches"):
        voxelizer.Voxelizer("no-such-device")


def test_errors_share_one_base_class():
    for error in (
        MeshError,
        GridError,
        VariantError,
        DeviceError,
        voxelizer.ShaderError,
        voxelizer.OutputError,
    ):
        assert issubclass(error, VoxelizerError)


def test_list_devices_names_the_device_in_use(gpu):
    assert gpu.device_name in [info.name for info in voxelizer.list_devices()]


def test_grid_space_entry_rejects_vertices_outside_the_grid(gpu):
    with pytest.raises(MeshError, match="inside"):
        gpu.voxelize_grid(
            np.array([[0, 0, 0], [9, 0, 0], [0, 1, 1]], np.float32), np.array([[0, 1, 2]]), 8
        )


def test_degenerate_and_duplicate_triangles_change_nothing(gpu):
    mesh = load_model("torus.stl")
    expected = reference_grid("torus.stl", 40).to_numpy()
    # a zero-area triangle, a vertical triangle, and a triangle used twice with both windings
    extra_vertices = np.array([[0.1, 0.1, 0.1], [0.2, 0.2, 0.2], [0.3, 0.3, 0.3]])
    vertices = np.concatenate([mesh.vertices, extra_vertices])
    v0 = len(mesh.vertices)
    f = mesh.faces
    faces = np.concatenate([f, [[v0, v0 + 1, v0 + 2]], f[:1], f[:1, ::-1]])
    grid = gpu.voxelize_dense((vertices, faces), 40)
    assert_same_voxels(grid.to_numpy(), expected)
    report = voxelizer.check_mesh((vertices, faces))
    assert report.degenerate_triangles == 1 and report.duplicate_triangles == 2
