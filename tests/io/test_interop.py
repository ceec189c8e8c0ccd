"""Results read elsewhere: every writer's file read back (by voxelizer.load and by the tools it
is for: trimesh, the binvox package, PyVista/VTK), and the converters to Open3D, PyVista,
PyTorch, DLPack and notebooks, each checked voxel for voxel and for its placement.

| format  | read back by                  | voxels | placement                                       |
| ------- | ----------------------------- | ------ | ----------------------------------------------- |
| .svo    | voxelizer.load                | exact  | exact                                           |
| .npz    | voxelizer.load                | exact  | exact                                           |
| .vti    | voxelizer.load                | exact  | exact                                           |
| .vti    | pyvista, vtk                  | exact  | exact; VTK's cell centres ours to 1e-12         |
| .binvox | voxelizer.load                | exact  | origin exact, h = scale/N within 1 ulp          |
| .binvox | trimesh                       | exact  | its own: first centre at translate, pitch       |
|         |                               |        | scale/(N-1); re-placed, ours to 1e-12           |
| .binvox | binvox (PyPI)                 | exact  | dims, translate, scale as written               |
| .vox    | voxelizer.load                | exact  | not stored: origin 0, voxel size 1 (tiled grids |
|         |                               |        | may change shape: the models' extent)           |
| meshes  | trimesh (.ply, .obj, .glb)    | -      | volume = count * h^3, low corner in place       |
"""

from __future__ import annotations

import base64
import importlib.util
import struct

import numpy as np
import pytest
import trimesh
from trimesh.exchange.binvox import load_binvox, parse_binvox

import voxelizer
from voxelizer import SVO, DenseGrid, FormatError
from voxelizer.io import load, save
from voxelizer.render import encode_png, render_views

from ..helpers import (
    assert_same_voxels,
    model_path,
    read_vox,
    reference_grid,
    vox_voxels,
)

HAS_TORCH = importlib.util.find_spec("torch") is not None


@pytest.fixture(scope="module")
def knot() -> DenseGrid:
    """A real mesh on a cube (binvox needs one), from the CPU reference."""
    return reference_grid("torus_knot.ply", 48)


@pytest.fixture(scope="module")
def gear_svo(gpu) -> SVO:
    """A real mesh on a non-cubic grid, as the GPU builds its octree."""
    svo = gpu.voxelize(model_path("gear.ply"), (40, 24, 16))
    assert_same_voxels(svo.to_numpy(), reference_grid("gear.ply", (40, 24, 16)).to_numpy())
    return svo


def results(knot: DenseGrid, gear_svo: SVO) -> dict[str, DenseGrid | SVO]:
    return {
        "knot-dense": knot,
        "knot-svo": SVO.from_dense(knot.to_numpy(), knot.placement),
        "gear-svo": gear_svo,
        "gear-dense": DenseGrid(gear_svo.to_numpy(), gear_svo.placement),
    }


CASES = ["knot-dense", "knot-svo", "gear-svo", "gear-dense"]


def assert_same_placement(got, expected) -> None:
    assert got.shape == expected.shape
    assert np.array_equal(got.origin, expected.origin), (got.origin, expected.origin)
    assert got.voxel_size == expected.voxel_size


# --- every writer, read back by voxelizer.load ------------------------------------------------


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("suffix", [".svo", ".npz", ".vti"])
def test_placed_formats_round_trip_exactly(tmp_path, knot, gear_svo, case, suffix):
    result = results(knot, gear_svo)[case]
    path = tmp_path / f"result{suffix}"
    save(result, path)
    loaded = load(path)
    assert isinstance(loaded, SVO if suffix == ".svo" else DenseGrid)
    assert_same_voxels(loaded.to_numpy(), result.to_numpy())
    assert_same_placement(loaded, result)


@pytest.mark.parametrize("case", ["knot-dense", "gear-svo"])
def test_npz_read_with_numpy_alone(tmp_path, knot, gear_svo, case):
    """The README's numpy-only recipe gives the voxels and the placement."""
    result = results(knot, gear_svo)[case]
    path = tmp_path / "m.npz"
    save(result, path)
    d = np.load(path)
    voxels = np.unpackbits(d["bits"], count=d["shape"].prod()).reshape(d["shape"]).astype(bool)
    assert_same_voxels(voxels, result.to_numpy())
    assert np.array_equal(d["origin"], result.origin)
    assert float(d["voxel_size"]) == result.voxel_size


@pytest.mark.parametrize("case", ["knot-dense", "knot-svo"])
def test_binvox_round_trip(tmp_path, knot, gear_svo, case):
    """Origin exact; h comes back as scale / N, the file's scale being N * h in decimal."""
    result = results(knot, gear_svo)[case]
    path = tmp_path / "knot.binvox"
    save(result, path)
    loaded = load(path)
    assert isinstance(loaded, DenseGrid)
    assert_same_voxels(loaded.to_numpy(), result.to_numpy())
    assert loaded.shape == result.shape and np.array_equal(loaded.origin, result.origin)
    assert abs(loaded.voxel_size - result.voxel_size) <= np.spacing(result.voxel_size)
    index = np.argwhere(result.to_numpy())
    assert np.allclose(
        loaded.placement.voxel_centres(index),
        result.placement.voxel_centres(index),
        rtol=0,
        atol=1e-12,
    )


@pytest.mark.parametrize("case", CASES)
def test_vox_round_trip_keeps_voxels_not_placement(tmp_path, knot, gear_svo, case):
    result = results(knot, gear_svo)[case]
    path = tmp_path / "result.vox"
    save(result, path)
    loaded = load(path)
    assert isinstance(loaded, DenseGrid) and loaded.shape == result.shape
    assert_same_voxels(loaded.to_numpy(), result.to_numpy())
    assert np.array_equal(loaded.origin, [0, 0, 0]) and loaded.voxel_size == 1.0
    # the same as the scene graph's own reading in tests/helpers.py
    n = max(result.shape)
    expected = np.zeros((n, n, n), bool)
    expected[: result.shape[0], : result.shape[1], : result.shape[2]] = result.to_numpy()
    assert np.array_equal(vox_voxels(read_vox(path), n), expected)


@pytest.mark.parametrize("shape", [(512, 24, 16), (300, 300, 300), (600, 24, 16)])
def test_vox_of_several_tiles(tmp_path, shape):
    """A grid over 256 per side is tiles placed by the scene graph. The shape read back is the
    models' extent rounded up to a multiple of 4, which is the grid's own where the outer
    tiles hold voxels; a tile without voxels is not written, so the extent can be smaller
    (the knot fills the middle of the 600 voxels only). The voxels are the same."""
    result = reference_grid("torus_knot.ply", shape)
    voxels = result.to_numpy()
    path = tmp_path / "tiles.vox"
    save(result, path)
    parsed = read_vox(path)
    high = []  # each tile's far corner: its transform is at its model's centre
    for node in parsed["nodes"].values():
        if node[0] == "T" and node[2]:
            size = np.array(parsed["models"][parsed["nodes"][node[1]][1]][0])
            high.append(np.array(node[2]["_t"].split(), int) - size // 2 + size)
    assert high, "a grid over 256 per side is placed by a scene graph"
    extent = tuple(int(-(-side // 4) * 4) for side in np.max(high, axis=0))
    loaded = load(path)
    assert loaded.shape == extent and np.array_equal(loaded.origin, [0, 0, 0])
    if shape != (600, 24, 16):
        assert extent == shape
    common = tuple(slice(0, min(a, b)) for a, b in zip(loaded.shape, shape))
    assert_same_voxels(loaded.to_numpy()[common], voxels[common])
    assert loaded.count() == result.count()  # and none outside the common box


def test_vox_single_model_file(tmp_path, knot):
    """A file of one SIZE/XYZI model and no scene graph (as older MagicaVoxel writes)."""
    sub = knot.to_numpy()[4:44, 8:40, 12:36]  # a 40x32x24 box of the knot
    xyz = np.argwhere(sub).astype(np.uint8)
    xyzi = np.concatenate([xyz, np.full((len(xyz), 1), 7, np.uint8)], axis=1)
    chunks = (
        b"SIZE" + struct.pack("<ii3i", 12, 0, *sub.shape)
        + b"XYZI" + struct.pack("<iii", 4 + xyzi.size, 0, len(xyz)) + xyzi.tobytes()
    )  # fmt: skip
    path = tmp_path / "single.vox"
    path.write_bytes(
        b"VOX " + struct.pack("<i", 150) + b"MAIN" + struct.pack("<ii", 0, len(chunks)) + chunks
    )
    loaded = load(path)
    assert loaded.shape == (40, 32, 24) and loaded.voxel_size == 1.0
    assert_same_voxels(loaded.to_numpy(), sub)


@pytest.mark.parametrize("suffix", [".ply", ".obj", ".glb"])
def test_meshes_hold_the_voxels_volume(tmp_path, gear_svo, suffix):
    path = tmp_path / f"gear{suffix}"
    save(gear_svo, path)
    mesh = trimesh.load(path, force="mesh", process=False)
    assert mesh.is_watertight
    assert mesh.volume == pytest.approx(gear_svo.count() * gear_svo.voxel_size**3, rel=1e-6)
    low = gear_svo.origin + np.argwhere(gear_svo.to_numpy()).min(axis=0) * gear_svo.voxel_size
    assert np.allclose(mesh.bounds[0], low, rtol=0, atol=1e-6)


@pytest.mark.parametrize("case", ["knot-dense", "gear-svo"])
def test_dense_grids_and_octrees_give_the_same_trimesh_objects(knot, gear_svo, case):
    """to_mesh() and to_trimesh() on either kind of result: the same faces, and a VoxelGrid
    whose index (i, j, k) is our voxel with our centre."""
    result = results(knot, gear_svo)[case]
    other = (
        SVO.from_dense(result.to_numpy(), result.placement)
        if isinstance(result, DenseGrid)
        else DenseGrid(result.to_numpy(), result.placement)
    )
    mesh, other_mesh = result.to_mesh(), other.to_mesh()
    assert np.array_equal(mesh.vertices, other_mesh.vertices)
    assert np.array_equal(mesh.faces, other_mesh.faces)
    assert mesh.is_watertight
    assert mesh.volume == pytest.approx(result.count() * result.voxel_size**3, rel=1e-9)
    grid = result.to_trimesh()
    assert isinstance(grid, trimesh.voxel.VoxelGrid)
    assert np.array_equal(grid.matrix, result.to_numpy())
    assert np.array_equal(grid.transform, other.to_trimesh().transform)
    index = np.argwhere(result.to_numpy())
    assert np.allclose(
        grid.indices_to_points(index), result.placement.voxel_centres(index), rtol=0, atol=1e-12
    )


# --- binvox in trimesh and the binvox package ----------------------------------------------


def test_trimesh_reads_binvox_with_its_own_placement(tmp_path, knot):
    """trimesh takes translate as the first voxel's centre and scale / (N - 1) as the pitch;
    the binvox spec (and voxelizer.load) has the first centre half a voxel in, pitch
    scale / N. The voxels are the same; rebuilding the transform places them as ours."""
    path = tmp_path / "knot.binvox"
    save(knot, path)
    with open(path, "rb") as fh:
        grid = load_binvox(fh)
    with open(path, "rb") as fh:
        header = parse_binvox(fh)
    assert np.array_equal(grid.matrix, knot.to_numpy())
    n = knot.resolution
    assert np.array_equal(header.translate, knot.origin) and header.scale == n * knot.voxel_size
    assert np.allclose(grid.transform[:3, 3], header.translate, rtol=0, atol=0)
    assert np.allclose(np.diag(grid.transform)[:3], header.scale / (n - 1), rtol=1e-15)
    # the fix: pitch scale / N, first centre at translate + pitch / 2
    pitch = header.scale / n
    placed = trimesh.voxel.VoxelGrid(
        grid.encoding,
        trimesh.transformations.scale_and_translate(pitch, header.translate + pitch / 2),
    )
    index = np.argwhere(knot.to_numpy())
    assert np.allclose(
        placed.indices_to_points(index), knot.placement.voxel_centres(index), rtol=0, atol=1e-12
    )


def test_binvox_package_reads_the_file(tmp_path, knot):
    from binvox import Binvox

    path = tmp_path / "knot.binvox"
    save(knot, path)
    model = Binvox.read(str(path), "dense")
    assert model.axis_order == "xyz" and np.array_equal(model.data, knot.to_numpy())
    n = knot.resolution
    assert model.dims == [n, n, n] and np.array_equal(model.translate, knot.origin)
    assert model.scale == pytest.approx(n * knot.voxel_size, rel=1e-15)
    # its transform_coord maps an index to the voxel's low corner: translate + scale * i / N
    index = np.argwhere(knot.to_numpy())[0]
    corner = knot.origin + index * knot.voxel_size
    assert np.allclose(model.transform_coord(tuple(index)), corner, rtol=0, atol=1e-12)


# --- .vti in PyVista and VTK ------------------------------------------------------------------


def cell_centres_and_solid(image) -> tuple[np.ndarray, np.ndarray]:
    """Centres of the cells where "solid" is set, and the "solid" array (VTK cell order)."""
    solid = np.asarray(image.cell_data["solid"])
    return np.asarray(image.cell_centers().points)[solid != 0], solid


@pytest.mark.parametrize("case", ["knot-dense", "gear-svo"])
def test_pyvista_and_vtk_read_the_vti(tmp_path, knot, gear_svo, case):
    import pyvista as pv
    import vtk

    result = results(knot, gear_svo)[case]
    path = tmp_path / "result.vti"
    save(result, path)
    image = pv.read(path)
    assert isinstance(image, pv.ImageData)
    assert image.dimensions == tuple(n + 1 for n in result.shape)
    assert np.array_equal(image.origin, result.origin)
    assert image.spacing == (result.voxel_size,) * 3
    centres, solid = cell_centres_and_solid(image)
    assert solid.dtype == np.uint8
    voxels = solid.reshape(result.shape[::-1]).transpose(2, 1, 0).astype(bool)
    assert_same_voxels(voxels, result.to_numpy())
    index = np.argwhere(result.to_numpy().transpose(2, 1, 0))[:, ::-1]  # VTK's cell order
    assert np.allclose(centres, result.placement.voxel_centres(index), rtol=0, atol=1e-12)

    reader = vtk.vtkXMLImageDataReader()
    reader.SetFileName(str(path))
    reader.Update()
    data = reader.GetOutput()
    assert data.GetDimensions() == image.dimensions
    array = data.GetCellData().GetArray("solid")
    values = np.array([array.GetValue(i) for i in range(array.GetNumberOfTuples())])
    assert np.array_equal(values, solid)


@pytest.mark.parametrize("binary", [True, False])
def test_a_vti_saved_by_pyvista_loads_again(tmp_path, knot, binary):
    """Our reader also takes VTK's own layouts (inline base64 with zlib, ascii)."""
    path = tmp_path / "resaved.vti"
    knot.to_pyvista().save(path, binary=binary)
    loaded = load(path)
    assert_same_voxels(loaded.to_numpy(), knot.to_numpy())
    assert_same_placement(loaded, knot)


# --- converters -----------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["knot-dense", "gear-svo"])
def test_to_open3d(knot, gear_svo, case):
    result = results(knot, gear_svo)[case]
    grid = result.to_open3d()
    assert np.array_equal(grid.origin, result.origin) and grid.voxel_size == result.voxel_size
    assert np.array_equal(np.asarray(getattr(grid, "rotation", np.eye(3))), np.eye(3))
    indices = np.array([voxel.grid_index for voxel in grid.get_voxels()])
    expected = np.argwhere(result.to_numpy())
    assert len(indices) == len(expected) == result.count()
    assert np.array_equal(indices[np.lexsort(indices.T[::-1])], expected)
    centres = np.array([grid.get_voxel_center_coordinate(index) for index in expected])
    assert np.allclose(centres, result.placement.voxel_centres(expected), rtol=0, atol=1e-12)


@pytest.mark.parametrize("case", ["knot-dense", "gear-svo"])
def test_to_pyvista(knot, gear_svo, case):
    import pyvista as pv

    result = results(knot, gear_svo)[case]
    image = result.to_pyvista()
    assert isinstance(image, pv.ImageData) and image.n_cells == np.prod(result.shape)
    assert image.dimensions == tuple(n + 1 for n in result.shape)
    assert np.array_equal(image.origin, result.origin)
    assert image.spacing == (result.voxel_size,) * 3
    centres, solid = cell_centres_and_solid(image)
    assert solid.dtype == np.uint8 and int(solid.sum()) == result.count()
    index = np.argwhere(result.to_numpy().transpose(2, 1, 0))[:, ::-1]
    assert np.allclose(centres, result.placement.voxel_centres(index), rtol=0, atol=1e-12)
    # cell (i, j, k) is voxel (i, j, k): VTK's own cell lookup agrees
    i, j, k = index[len(index) // 2]
    assert image.find_containing_cell(result.placement.voxel_centres([[i, j, k]])[0]) == (
        i + result.shape[0] * (j + result.shape[1] * k)
    )


def test_to_torch(knot, gear_svo):
    if not HAS_TORCH:  # not a skip: without torch, the error must say how to get it
        for result in (knot, gear_svo):
            with pytest.raises(ModuleNotFoundError, match=r"to_torch\(\).*pip install torch"):
                result.to_torch()
        return
    import torch

    for result in (knot, gear_svo):
        tensor = result.to_torch()
        assert tensor.dtype == torch.bool and tuple(tensor.shape) == result.shape
        assert np.array_equal(tensor.numpy(), result.to_numpy())
        assert torch.equal(torch.from_dlpack(result), tensor)


def test_dlpack_exports_the_voxels(knot, gear_svo):
    for result in (knot, gear_svo):
        assert result.__dlpack_device__() == (1, 0)  # kDLCPU
        array = np.from_dlpack(result)
        assert array.dtype in (np.bool_, np.uint8)  # uint8 0/1 only before numpy 1.25
        assert np.array_equal(array.astype(bool), result.to_numpy())
        assert np.array_equal(np.asarray(result), result.to_numpy())


def test_notebook_reprs(knot, gear_svo):
    for result in (knot, gear_svo):
        png = result._repr_png_()
        assert png == encode_png(render_views(result.to_numpy()))
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        page = result._repr_html_()
        assert type(result).__name__ in page and "x".join(map(str, result.shape)) in page
        assert f"{result.count():,} solid voxels" in page and f"{result.voxel_size:g}" in page
        assert base64.b64encode(png).decode() in page


def test_notebook_reprs_skip_the_image_of_huge_grids(monkeypatch, gear_svo):
    from voxelizer import convert

    monkeypatch.setattr(convert, "PREVIEW_MAX_VOXELS", 40 * 24 * 16 - 1)
    assert gear_svo._repr_png_() is None
    page = gear_svo._repr_html_()
    assert "<img" not in page and "voxelizer.write_preview" in page


# --- readers refuse broken files ---------------------------------------------------------------


def test_broken_binvox_files(tmp_path, knot):
    path = tmp_path / "knot.binvox"
    save(knot, path)
    data = path.read_bytes()
    cases = {
        "truncated.binvox": (data[:-1], "odd number of bytes"),
        "short.binvox": (data[:-2], "the runs cover"),
        "text.binvox": (b"hello", "not a binvox file"),
        "boxy.binvox": (data.replace(b"dim 48 48 48", b"dim 48 48 40"), "cubic grids"),
        "odd.binvox": (data.replace(b"dim 48 48 48", b"dim 0 0 0"), "at least 1"),
        "scale.binvox": (data.replace(b"scale ", b"scale -"), "scale must be positive"),
        "noheader.binvox": (data[: data.index(b"data\n")], "no 'data' line"),
    }
    for name, (content, message) in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(FormatError, match=message) as caught:
            load(tmp_path / name)
        assert str(tmp_path / name) in str(caught.value)


def test_broken_vox_files(tmp_path, gear_svo):
    path = tmp_path / "gear.vox"
    save(gear_svo, path)
    data = path.read_bytes()
    xyzi, size = data.index(b"XYZI"), data.index(b"SIZE")
    too_many, too_large = bytearray(data), bytearray(data)
    struct.pack_into("<i", too_many, xyzi + 12, 10**6)  # the voxel count
    struct.pack_into("<i", too_large, size + 20, 300)  # the model's z side
    cases = {
        "truncated.vox": (data[:-5], "longer than the file"),
        "magic.vox": (b"VOXX" + data[4:], "not a MagicaVoxel file"),
        "count.vox": (bytes(too_many), "does not hold"),
        "size.vox": (bytes(too_large), "each side must be 1 to 256"),
    }
    for name, (content, message) in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(FormatError, match=message) as caught:
            load(tmp_path / name)
        assert str(tmp_path / name) in str(caught.value)


def test_broken_vti_files(tmp_path, gear_svo):
    path = tmp_path / "gear.vti"
    save(gear_svo, path)
    data = path.read_bytes()
    cases = {
        "truncated.vti": (data[:-40], "compressed"),
        "text.vti": (b"not xml", "not a VTK XML file"),
        "name.vti": (data.replace(b'Name="solid"', b'Name="other"'), 'no cell array "solid"'),
        "extent.vti": (data.replace(b"0 40 0 24 0 16", b"0 40 0 24 16 16"), "at least 1"),
        "spacing.vti": (data.replace(b'Spacing="', b'Spacing="2 '), "Spacing must be 3 numbers"),
    }
    for name, (content, message) in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(FormatError, match=message) as caught:
            load(tmp_path / name)
        assert str(tmp_path / name) in str(caught.value)


def test_load_knows_the_new_formats():
    assert set(voxelizer.io.INPUT_FORMATS) == {".svo", ".npz", ".vti", ".binvox", ".vox"}
    assert ".vti" in voxelizer.io.OUTPUT_FORMATS
