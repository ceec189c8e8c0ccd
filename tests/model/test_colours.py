"""Voxel colours: textures sampled as trimesh's own `to_color()` samples them, at the same
points; vertex colours interpolated at the voxel centre's nearest point of its face;
materials and the fill along the columns; bad textures and UVs; the coloured .vox read by
py-vox-io and midvoxio, the coloured voxel meshes by trimesh; the arrays in .npz, .vti and
.svo files."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import trimesh
from midvoxio.voxio import vox_to_arr
from PIL import Image
from pyvox.parser import VoxParser

import voxelizer
from voxelizer import ColorWarning, ModeError
from voxelizer.attributes.appearance import VERTEX, Appearance
from voxelizer.attributes.colours import filled_colors
from voxelizer.attributes.palette import palette_of
from voxelizer.io.mesh_writer import triangle_cells
from voxelizer.surface import FINE, fine_surface

from ..helpers import PROJECT_MODELS, SHARED_MODELS, cli_usage_error, run_cli
from ..shapes import box, sphere

TIE = 1e-6  # a sample this close to a pixel's (or a colour's) rounding boundary is a tie


TEXTURED_MODELS = ("CesiumMilkTruck.glb", "BoxTextured.glb")  # trimesh's test models


TEXTURED_ENV = "VOXELIZER_TEXTURED_MODELS"  # a folder holding trimesh's models/ files


def textured_model(name: str) -> Path | None:
    """One of trimesh's textured models where $VOXELIZER_TEXTURED_MODELS (a copy of trimesh's
    models/ folder), a checkout of trimesh or the shared models hold it, else None."""
    root = Path(trimesh.__file__).resolve().parents[1] / "models"
    folders = [Path(os.environ[TEXTURED_ENV])] if os.environ.get(TEXTURED_ENV) else []
    found = [f / name for f in (*folders, root, SHARED_MODELS) if (f / name).is_file()]
    return found[0] if found else None


def make_textured_box(path: Path) -> Path:
    """A box whose six sides map into a 24x20 texture of distinct pixels, as a GLB written
    by trimesh (base colour factor 1: the texture's own colours)."""
    vertices, faces = box((-1.0, -0.7, -0.4), (0.9, 0.8, 1.1))
    soup = vertices[faces].reshape(-1, 3)
    normals = np.cross(
        vertices[faces[:, 1]] - vertices[faces[:, 0]], vertices[faces[:, 2]] - vertices[faces[:, 0]]
    )
    axis = np.repeat(np.argmax(np.abs(normals), axis=1), 3)
    low, high = vertices.min(axis=0), vertices.max(axis=0)
    unit = (soup - low) / (high - low)
    others = np.array([[1, 2], [0, 2], [0, 1]])[axis]
    uv = np.take_along_axis(unit, others, axis=1) * 0.9 + 0.05
    y, x = np.mgrid[0:20, 0:24]
    pixels = np.stack([x * 10, y * 12, (x * 7 + y * 5) % 256], axis=2).astype(np.uint8)
    material = trimesh.visual.material.PBRMaterial(
        baseColorTexture=Image.fromarray(pixels), baseColorFactor=[255, 255, 255, 255]
    )
    mesh = trimesh.Trimesh(
        soup,
        np.arange(len(soup)).reshape(-1, 3),
        visual=trimesh.visual.TextureVisuals(uv=uv, material=material),
        process=False,
    )
    mesh.export(path)
    return path


def nearest_points(mesh: voxelizer.Mesh, placement, voxels: np.ndarray, faces: np.ndarray):
    """trimesh's nearest point of each face to the voxel's centre, as barycentric weights."""
    corners = mesh.vertices[mesh.faces[faces]]
    centres = placement.voxel_centres(voxels)
    points = trimesh.triangles.closest_point(corners, centres)
    return trimesh.triangles.points_to_barycentric(corners, points)


def assert_sampled_as_trimesh(gpu, path: Path, grid: int) -> int:
    """Colours of the surface voxels against trimesh's to_color() of each face's material
    at the same points (the material's colour for faces with UVs outside [0, 1], which
    trimesh wraps and voxelizer refuses, warning); returns how many voxels were compared."""
    mesh = voxelizer.load_mesh(path)
    corner_uvs = mesh.appearance.corner_uvs
    outside_faces = ((corner_uvs < 0) | (corner_uvs > 1)).any(axis=(1, 2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ColorWarning)
        result = gpu.voxelize_dense(
            path, grid, mode="surface", attributes=["face"], colors=True, warn=False
        )
    outside_warned = [w for w in caught if "outside [0, 1]" in str(w.message)]
    ids = result.to_numpy("face")
    voxels = np.argwhere(ids >= 0)
    faces = ids[tuple(voxels.T)]
    got = result.to_numpy("color")[tuple(voxels.T)]
    weights = nearest_points(mesh, result.placement, voxels, faces)
    geometries = [g for g in trimesh.load(path, process=False, force="scene").dump()]
    first = np.cumsum([0] + [len(g.faces) for g in geometries])
    owner = np.searchsorted(first, faces, side="right") - 1
    outside = outside_faces[faces]
    assert len(outside_warned) == int(outside.any())
    compared = 0
    for number, geometry in enumerate(geometries):
        rows = np.flatnonzero(owner == number)
        material = geometry.visual.material
        texture = getattr(material, "baseColorTexture", None)
        if texture is None:
            expected = np.tile(material.baseColorFactor, (len(rows), 1))
            assert np.array_equal(got[rows], expected)
            compared += len(rows)
            continue
        corner_uvs = geometry.visual.uv[geometry.faces[faces[rows] - first[number]]]
        assert np.array_equal(corner_uvs, mesh.appearance.corner_uvs[faces[rows]])
        uvs = np.einsum("rc,rck->rk", weights[rows], corner_uvs)
        width, height = texture.size
        pixel = np.stack([uvs[:, 0] * (width - 1), (1 - uvs[:, 1]) * (height - 1)], axis=1)
        clear = (np.abs(pixel - np.floor(pixel) - 0.5) > TIE).all(axis=1)
        assert clear.mean() > 0.99
        expected = geometry.visual.copy(uv=uvs).to_color().vertex_colors
        factor = material.baseColorFactor
        assert factor is None or (np.asarray(factor) == 255).all()
        expected = np.where(outside[rows, None], 255, np.asarray(expected))  # factor: white
        assert np.array_equal(got[rows][clear], expected[clear])
        compared += int(clear.sum())
    return compared


def test_a_textured_glb_is_sampled_as_trimesh_samples_it(gpu, tmp_path):
    path = make_textured_box(tmp_path / "box.glb")
    assert assert_sampled_as_trimesh(gpu, path, 32) > 500


@pytest.mark.slow
@pytest.mark.parametrize("name", TEXTURED_MODELS)
def test_trimesh_textured_models_are_sampled_as_trimesh_samples_them(gpu, tmp_path, name):
    """trimesh's own textured models, where they are found (textured_model); else (trimesh
    from a wheel has no models/) a textured box trimesh writes stands in for them."""
    path = textured_model(name) or make_textured_box(tmp_path / name)
    assert assert_sampled_as_trimesh(gpu, path, 64) > 1000


def coloured_sphere() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    vertices, faces = sphere((0.0, 0.0, 0.0), 1.0, subdivisions=2)
    colors = np.random.default_rng(5).integers(0, 256, (len(vertices), 4), dtype=np.uint8)
    colors[:, 3] = 255
    return vertices, faces, colors


def test_vertex_colours_are_interpolated_at_the_nearest_point(gpu):
    vertices, faces, colors = coloured_sphere()
    sources = np.full(len(faces), VERTEX, np.uint8)
    appearance = Appearance(sources, np.full(len(faces), -1, np.int32), vertex_colors=colors)
    mesh = voxelizer.Mesh(vertices, faces, appearance=appearance)
    result = gpu.voxelize_dense(mesh, 32, mode="surface", attributes=["face"], colors=True)
    ids = result.to_numpy("face")
    voxels = np.argwhere(ids >= 0)
    weights = nearest_points(mesh, result.placement, voxels, ids[tuple(voxels.T)])
    exact = np.einsum("rc,rck->rk", weights, colors[faces[ids[tuple(voxels.T)]]].astype(float))
    clear = (np.abs(exact - np.floor(exact) - 0.5) > TIE).all(axis=1)
    assert clear.mean() > 0.99
    got = result.to_numpy("color")[tuple(voxels.T)]
    assert np.array_equal(got[clear], np.floor(exact[clear] + 0.5).astype(np.uint8))


def write_two_material_obj(folder: Path, texture: str | None = None, uv: float = 0.5) -> Path:
    """Two boxes, groups "red" and "blue" with materials of those Kd colours (the second
    with the texture file `texture`, at UV (uv, uv), if given)."""
    lines = ["mtllib parts.mtl"]
    base = 0
    for name, lo, hi in (("red", (0, 0, 0), (1, 1, 1)), ("blue", (1.5, 0, 0), (2.5, 1, 2))):
        v, f = box(lo, hi)
        lines += [f"g {name}", f"usemtl {name}"]
        lines += [f"v {x!r} {y!r} {z!r}" for x, y, z in v.tolist()]
        lines.append(f"vt {uv} {uv}")
        lines += [f"f {a + base + 1}/1 {b + base + 1}/1 {c + base + 1}/1" for a, b, c in f]
        base += len(v)
    (folder / "parts.obj").write_text("\n".join(lines) + "\n")
    mtl = "newmtl red\nKd 1 0 0\nnewmtl blue\nKd 0 0 1\n"
    if texture is not None:
        mtl += f"map_Kd {texture}\n"
    (folder / "parts.mtl").write_text(mtl)
    return folder / "parts.obj"


def test_material_colours_and_the_fill_along_the_columns(gpu, tmp_path):
    path = write_two_material_obj(tmp_path)
    result = gpu.voxelize_dense(path, 32, colors=True)
    colors, voxels = result.to_numpy("color"), result.to_numpy()
    found = {tuple(c) for c in colors[voxels].tolist()}
    assert found == {(255, 0, 0, 255), (0, 0, 255, 255)}
    assert (colors[~voxels] == 0).all()
    x = result.placement.voxel_centres(np.argwhere(voxels))[:, 0]
    red = (colors[voxels] == (255, 0, 0, 255)).all(axis=1)
    assert np.array_equal(red, x < 1.25)  # each box its own colour, inside too
    filled = gpu.voxelize_dense(path, 32, colors=True, fill_color="#00ff0080")
    surface = gpu.voxelize_dense(path, 32, mode="surface", warn=False).to_numpy()
    inside = voxels & ~surface
    assert inside.any() and (filled.to_numpy("color")[inside] == (0, 255, 0, 128)).all()


def test_filled_colors_take_the_nearest_mark_of_the_column():
    voxels = np.zeros((1, 2, 12), bool)
    voxels[0, 0, 0:10] = True
    voxels[0, 1, 3:6] = True  # a column without marks
    marked = np.array([[0, 0, 2], [0, 0, 6]])
    marked_colors = np.array([[10, 0, 0, 255], [20, 0, 0, 255]], np.uint8)
    out = filled_colors(voxels, marked, marked_colors, None)
    reds = out[0, 0, :, 0].tolist()
    assert reds == [10, 10, 10, 10, 10, 20, 20, 20, 20, 20, 0, 0]  # k=4: a tie, the lower
    assert (out[0, 1, 3:6] == (200, 200, 200, 255)).all()  # no mark: the default grey
    out = filled_colors(voxels, marked, marked_colors, (1, 2, 3, 4))
    assert out[0, 0, :10, 0].tolist() == [1, 1, 10, 1, 1, 1, 20, 1, 1, 1]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_filled_colors_match_a_column_by_column_search(seed, monkeypatch):
    """Random voxels and marks, against a search of each column; slabs of one x row."""
    monkeypatch.setattr("voxelizer.attributes.colours.CHUNK_VOXELS", 1)
    rng = np.random.default_rng(seed)
    voxels = rng.random((5, 4, 9)) < 0.6
    marked = np.argwhere(rng.random(voxels.shape) < 0.15)
    marked_colors = rng.integers(0, 256, (len(marked), 4), dtype=np.uint8)
    got = filled_colors(voxels, marked, marked_colors, None)
    expected = np.zeros(got.shape, np.uint8)
    for i, j, k in np.argwhere(voxels):
        in_column = np.flatnonzero((marked[:, 0] == i) & (marked[:, 1] == j))
        if not len(in_column):
            expected[i, j, k] = (200, 200, 200, 255)
            continue
        distance = np.abs(marked[in_column, 2] - k) * 2 + (marked[in_column, 2] > k)
        expected[i, j, k] = marked_colors[in_column[np.argmin(distance)]]
    assert np.array_equal(got, expected)
    filled = filled_colors(voxels, marked, marked_colors, (9, 8, 7, 6))
    own = np.zeros(voxels.shape, bool)
    own[tuple(marked.T)] = True
    assert (filled[voxels & ~own] == (9, 8, 7, 6)).all()
    assert np.array_equal(filled[voxels & own], got[voxels & own])


def test_an_unreadable_texture_warns_and_takes_the_material_colour(gpu, tmp_path):
    (tmp_path / "broken.png").write_bytes(b"not an image at all")
    path = write_two_material_obj(tmp_path, texture="broken.png")
    with pytest.warns(ColorWarning, match=r"broken\.png: cannot read it .* material's colour"):
        result = gpu.voxelize_dense(path, 24, colors=True)
    found = {tuple(c) for c in result.to_numpy("color")[result.to_numpy()].tolist()}
    assert found == {(255, 0, 0, 255), (0, 0, 255, 255)}
    path = write_two_material_obj(tmp_path, texture="missing.png")
    with pytest.warns(ColorWarning, match=r"missing\.png: cannot read it"):
        gpu.voxelize_dense(path, 24, colors=True)


def test_uvs_outside_the_unit_square_warn_and_take_the_material_colour(gpu, tmp_path):
    Image.fromarray(np.full((4, 4, 3), 77, np.uint8)).save(tmp_path / "grey.png")
    path = write_two_material_obj(tmp_path, texture="grey.png", uv=1.5)
    with pytest.warns(ColorWarning, match=r"texture coordinates outside \[0, 1\]"):
        result = gpu.voxelize_dense(path, 24, colors=True)
    found = {tuple(c) for c in result.to_numpy("color")[result.to_numpy()].tolist()}
    assert found == {(255, 0, 0, 255), (0, 0, 255, 255)}
    path = write_two_material_obj(tmp_path, texture="grey.png", uv=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ColorWarning)
        result = gpu.voxelize_dense(path, 24, colors=True)
    found = {tuple(c) for c in result.to_numpy("color")[result.to_numpy()].tolist()}
    assert found == {(255, 0, 0, 255), (77, 77, 77, 255)}


def test_a_mesh_without_colours_is_light_grey(gpu):
    result = gpu.voxelize(PROJECT_MODELS / "gear.ply", 16, colors=True)
    colors = result.to_numpy("color")[result.to_numpy()]
    assert len(colors) and (colors == (200, 200, 200, 255)).all()


def test_colour_options_are_checked(capsys):
    for value, message in (("#12345", "hexadecimal"), ((1, 2), "three or four"), (5, "three")):
        with pytest.raises(ModeError, match=message):
            voxelizer.Options.create(colors=True, fill_color=value)
    assert voxelizer.Options.create(fill_color=(1, 2, 3)).fill_color == (1, 2, 3, 255)
    assert voxelizer.Options.create(fill_color="nearest").fill_color is None
    model = PROJECT_MODELS / "gear.ply"
    assert "--fill-color: colour 'red'" in cli_usage_error(
        capsys, model, "--colors", "--fill-color", "red"
    )
    assert "--fill-color is for --colors" in cli_usage_error(
        capsys, model, "--fill-color", "ff0000"
    )


# --- files ----------------------------------------------------------------------------------


def sphere_result(gpu, grid: int = 40):
    vertices, faces, colors = coloured_sphere()
    sources = np.full(len(faces), VERTEX, np.uint8)
    appearance = Appearance(sources, np.full(len(faces), -1, np.int32), vertex_colors=colors)
    return gpu.voxelize_dense(
        voxelizer.Mesh(vertices, faces, appearance=appearance), grid, colors=True
    )


def test_vox_palette_is_exact_up_to_255_colours(gpu, tmp_path):
    result = gpu.voxelize_dense(write_two_material_obj(tmp_path), 24, colors=True)
    check_vox(result, tmp_path / "two.vox", exact=True)


def test_vox_palette_of_many_colours_is_a_median_cut(gpu, tmp_path):
    result = sphere_result(gpu)
    colors = result.to_numpy("color")[result.to_numpy()]
    assert len(np.unique(colors, axis=0)) > 255
    check_vox(result, tmp_path / "sphere.vox", exact=False)


def check_vox(result, path: Path, exact: bool) -> None:
    """py-vox-io and midvoxio read back every voxel, each with the palette colour its own
    colour maps to (itself when exact)."""
    voxelizer.save(result, path)
    voxels, colors = result.to_numpy(), result.to_numpy("color")
    palette, index, is_exact = palette_of(colors[voxels], 255)
    assert is_exact == exact and len(palette) <= 255
    expected = np.zeros(colors.shape, np.uint8)
    expected[voxels] = palette[index]
    if exact:
        assert np.array_equal(expected, colors)
    parsed = VoxParser(str(path)).parse()
    got = np.zeros(colors.shape, np.uint8)
    for voxel in parsed.models[0].voxels:
        got[voxel.x, voxel.y, voxel.z] = parsed.palette[voxel.c - 1]
    assert np.array_equal(got, expected)
    arr = vox_to_arr(str(path))  # midvoxio: RGBA floats from 0 to 1 per voxel
    assert np.array_equal(np.round(arr * 255).astype(np.uint8)[voxels], expected[voxels])
    assert (arr[~voxels] == 0).all()


def test_median_cut_entries_are_the_means_of_their_voxels():
    colors = np.random.default_rng(2).integers(0, 256, (5000, 4), dtype=np.uint8)
    palette, index, exact = palette_of(colors, 255)
    assert not exact and len(palette) == 255
    for entry in range(255):
        members = colors[index == entry].astype(float)
        assert len(members)
        assert np.array_equal(palette[entry], np.floor(members.mean(axis=0) + 0.5))
    again = palette_of(colors, 255)
    assert np.array_equal(again[0], palette) and np.array_equal(again[1], index)


@pytest.mark.parametrize("suffix", [".ply", ".glb", ".obj"])
def test_trimesh_reads_coloured_voxel_meshes(gpu, tmp_path, suffix):
    result = sphere_result(gpu, 24)
    path = tmp_path / f"sphere{suffix}"
    voxelizer.save(result, path)
    mesh = trimesh.load(path, force="mesh", process=False)
    assert mesh.visual.kind == "vertex"
    h = result.voxel_size
    assert mesh.volume == pytest.approx(result.count() * h**3, rel=1e-6)
    fine = np.round((mesh.vertices - result.placement.origin) / h * FINE).astype(np.int64)
    cells = triangle_cells(fine, mesh.faces)
    corner_colors = mesh.visual.vertex_colors[mesh.faces]  # (T, 3, 4)
    expected = result.to_numpy("color")[tuple(cells.T)]
    assert np.array_equal(corner_colors, np.repeat(expected[:, None], 3, axis=1))
    assert len(mesh.faces) == len(fine_surface(result.to_numpy())[1])
    mesh.merge_vertices(merge_tex=True, merge_norm=True)  # by position, as a default load
    assert mesh.is_watertight


def test_labels_and_colours_survive_npz_vti_and_svo(gpu, tmp_path):
    path = write_two_material_obj(tmp_path)
    svo = gpu.voxelize(path, 24, colors=True, labels=True, mode="both", attributes=["face"])
    assert svo.attributes == ("face", "label", "color") and svo.label_names == ("red", "blue")
    for suffix in (".svo", ".npz", ".vti"):
        voxelizer.save(svo, tmp_path / f"x{suffix}")
        loaded = voxelizer.load(tmp_path / f"x{suffix}")
        for attribute in ("label", "color"):
            assert np.array_equal(loaded.to_numpy(attribute), svo.to_numpy(attribute))
        if suffix != ".vti":  # (.vti holds the label array, not the names)
            assert loaded.label_names == ("red", "blue")
    assert voxelizer.load(tmp_path / "x.svo") == svo
    assert (tmp_path / "x.svo").read_bytes()[8] == 5  # version 5
    dense = gpu.voxelize_dense(path, 24, colors=True, labels=True, mode="both")
    voxelizer.save(dense, tmp_path / "d.svo")
    loaded = voxelizer.load(tmp_path / "d.svo")
    assert np.array_equal(loaded.to_numpy("color"), dense.to_numpy("color"))


def test_cli_colours_into_a_vox_and_refusals(tmp_path, capsys):
    path = write_two_material_obj(tmp_path)
    out = tmp_path / "parts.vox"
    code, _, stderr = run_cli(capsys, path, "--grid", 24, "--colors", "-o", out)
    assert code == 0, stderr
    parsed = VoxParser(str(out)).parse()
    used = {tuple(parsed.palette[v.c - 1]) for v in parsed.models[0].voxels}
    assert used == {(255, 0, 0, 255), (0, 0, 255, 255)}
    stderr = cli_usage_error(capsys, path, "--colors", "-o", tmp_path / "x.binvox")
    assert "--colors: .binvox holds no colors" in stderr
