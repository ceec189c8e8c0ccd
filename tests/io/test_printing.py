"""Outputs for 3D printing: the binary STL of the voxel faces (float32, closed once its
corners are merged by position, as a slicer merges them), float32 PLY where that is exact,
and the PNG slice stack read back by Pillow."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import trimesh
from PIL import Image

import voxelizer
from voxelizer import OutputError
from voxelizer.grid import DenseGrid
from voxelizer.io.slices import layer_names
from voxelizer.placement import GridPlacement
from voxelizer.surface import FINE, fine_surface

from ..helpers import PROJECT_MODELS, cli_usage_error, noisy_blobs, run_cli


@pytest.fixture(scope="module")
def gear(gpu) -> voxelizer.SVO:
    return gpu.voxelize(PROJECT_MODELS / "gear.ply", (32, 24, 20))


def test_stl_is_binary_float32_closed_and_of_the_voxels_volume(gear, tmp_path):
    path = tmp_path / "gear.stl"
    voxelizer.save(gear, path)
    data = path.read_bytes()
    (count,) = struct.unpack_from("<I", data, 80)
    assert not data.startswith(b"solid") and len(data) == 84 + 50 * count
    records = np.frombuffer(
        data,
        [("normal", "<f4", (3,)), ("corners", "<f4", (3, 3)), ("attribute", "<u2")],
        count,
        84,
    )
    fine, triangles = fine_surface(gear.to_numpy())
    assert count == len(triangles)
    vertices = gear.placement.origin + fine / FINE * gear.voxel_size
    assert np.array_equal(records["corners"], vertices[triangles].astype(np.float32))
    mesh = trimesh.load(path)  # merged by position
    assert mesh.is_watertight and mesh.is_winding_consistent
    assert len(mesh.vertices) == len(fine)
    assert mesh.volume == pytest.approx(gear.count() * gear.voxel_size**3, rel=1e-5)
    normals = np.cross(
        mesh.triangles[:, 1] - mesh.triangles[:, 0], mesh.triangles[:, 2] - mesh.triangles[:, 0]
    )
    assert (np.einsum("ij,ij->i", normals, records["normal"]) > 0).all()  # outwards


def test_stl_refuses_a_grid_whose_corners_run_together_in_float32(tmp_path):
    voxels = noisy_blobs((16, 16, 16), 4)
    far = DenseGrid(voxels, GridPlacement((16, 16, 16), np.full(3, 1e7), 1e-3))
    with pytest.raises(OutputError, match="run together in float32"):
        voxelizer.save(far, tmp_path / "far.stl")
    assert not (tmp_path / "far.stl").exists()


def test_ply_is_float32_where_that_is_exact(tmp_path):
    voxels = noisy_blobs((16, 16, 16), 5)
    exact = DenseGrid(voxels, GridPlacement((16, 16, 16), (-4.0, 2.0, 0.5), 0.25))
    inexact = DenseGrid(voxels, GridPlacement((16, 16, 16), (0.1, 0.2, 0.3), 0.1))
    for grid, kind in ((exact, b"property float x"), (inexact, b"property double x")):
        path = tmp_path / f"{kind[9:14].decode()}.ply"
        voxelizer.save(grid, path)
        assert kind in path.read_bytes()[:400]
        mesh = trimesh.load(path, process=False)
        fine, _ = fine_surface(voxels)
        expected = grid.placement.origin + fine / FINE * grid.voxel_size
        assert np.array_equal(mesh.vertices, expected)  # exactly, in either width


def read_stack(folder) -> tuple[dict, np.ndarray]:
    """The sidecar and the voxels the slice images hold, read with Pillow."""
    sidecar = json.loads((folder / "slices.json").read_text())
    layers = []
    for name in sidecar["files"]:
        with Image.open(folder / name) as image:
            assert image.mode == "1" and image.size == (sidecar["width"], sidecar["height"])
            layers.append(np.array(image)[::-1].T)  # rows from the top: y down -> [i, j]
    return sidecar, np.stack(layers, axis=2)


def test_slices_are_1_bit_pngs_of_the_layers(gear, tmp_path):
    folder = tmp_path / "slices"
    voxelizer.write_slices(gear, folder)
    sidecar, voxels = read_stack(folder)
    assert np.array_equal(voxels, gear.to_numpy())
    assert sidecar["layer_height"] == gear.voxel_size and sidecar["layers"] == 20
    assert sidecar["origin"] == gear.origin.tolist()
    assert sidecar["files"] == layer_names(20) and layer_names(20)[0] == "layer_00000.png"
    assert len(layer_names(123456)[0]) == len("layer_000000.png")


def test_slices_refuse_a_stack_and_replace_it_when_asked(gear, gpu, tmp_path):
    folder = tmp_path / "stack"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    voxelizer.write_slices(gear, folder)  # a folder of other files is fine
    with pytest.raises(OutputError, match="holds a slice stack"):
        voxelizer.write_slices(gear, folder)
    shorter = gpu.voxelize(PROJECT_MODELS / "gear.ply", (16, 16, 8))
    voxelizer.write_slices(shorter, folder, overwrite=True)
    _, voxels = read_stack(folder)
    assert np.array_equal(voxels, shorter.to_numpy())
    names = sorted(path.name for path in folder.iterdir())
    assert names == sorted([*layer_names(8), "slices.json", "notes.txt"])  # no older layers
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="not a folder"):
        voxelizer.write_slices(gear, tmp_path / "file")


def test_cli_writes_an_stl_and_slices(tmp_path, capsys):
    out, folder = tmp_path / "part.stl", tmp_path / "layers"
    model = PROJECT_MODELS / "gear.ply"
    code, stdout, stderr = run_cli(capsys, model, "--grid", 24, "-o", out, "--slices", folder)
    assert code == 0, stderr
    assert stdout.strip().endswith(f"-> {out}, {folder}")
    grid = voxelizer.voxelize_dense(model, 24)
    _, voxels = read_stack(folder)
    assert np.array_equal(voxels, grid.to_numpy())
    assert trimesh.load(out).is_watertight
    code, _, stderr = run_cli(capsys, model, "--grid", 24, "--slices", folder)
    assert code == 1 and "holds a slice stack (use --force to overwrite)" in stderr
    assert "--slices is for one model" in cli_usage_error(
        capsys, model, model, "--out-dir", tmp_path / "o", "--slices", folder
    )
