"""Parts and colours as the readers find them: OBJ objects, groups, materials, texture
coordinates and vertex colours; PLY part, colour and texture properties; the solids of an
ASCII STL; the primitives and materials of a glTF scene. Plain files carry none."""

from __future__ import annotations

import numpy as np
import pytest
import trimesh
from PIL import Image

import voxelizer
from voxelizer.attributes.appearance import FACE, MATERIAL, TEXTURE, VERTEX

from ..helpers import PROJECT_MODELS, SHARED_MODELS
from ..shapes import box

QUAD_OBJ = """\
mtllib m.mtl
v 0 0 0
v 1 0 0
v 1 1 0
v 0 1 0
v 0 0 1
v 1 0 1
vt 0 0
vt 1 0
vt 1 1
vt 0 1
f 1 2 3
o first
usemtl shiny
f 1/1 2/2 3/3 4/4
g second
usemtl dull
f 1/4/1 5/3/1 6/2/1
f -6/-4 -5/-3 -1/-1
o first
f 2//1 3//1 6//1
"""


def test_obj_objects_groups_and_materials(tmp_path):
    path = tmp_path / "q.obj"
    path.write_text(QUAD_OBJ)
    (tmp_path / "m.mtl").write_text(
        "newmtl shiny\nKd 1 0.5 0\nd 0.5\nnewmtl dull\nKd 0.2 0.2 0.2\n"
    )
    mesh = voxelizer.load_mesh(path)
    # mixed polygons are fanned face by face: tri, quad (2), tri, tri, tri
    assert mesh.faces.tolist()[:3] == [[0, 1, 2], [0, 1, 2], [2, 3, 0]]
    assert mesh.parts.names == ("default", "first", "second")
    assert mesh.parts.ids.tolist() == [0, 1, 1, 2, 2, 1]
    appearance = mesh.appearance
    assert [m.name for m in appearance.materials] == ["dull", "shiny"]
    assert appearance.face_materials.tolist() == [-1, 1, 1, 0, 0, 0]
    assert appearance.materials[1].color == (255, 128, 0, 128)
    assert appearance.materials[0].color == (51, 51, 51, 255)
    uvs = appearance.corner_uvs
    assert uvs[1].tolist() == [[0, 0], [1, 0], [1, 1]] and uvs[2].tolist() == [
        [1, 1],
        [0, 1],
        [0, 0],
    ]
    assert uvs[3].tolist() == [[0, 1], [1, 1], [1, 0]]
    assert uvs[4].tolist() == [[0, 0], [1, 0], [0, 1]]  # negative vt: counted back
    assert np.isnan(uvs[0]).all() and np.isnan(uvs[5]).all()
    assert (appearance.sources == MATERIAL).all()  # no textures


def test_obj_vertex_colours(tmp_path):
    v, f = box((0, 0, 0), (1, 1, 1))
    rgb = np.linspace(0, 1, 24).reshape(8, 3)
    lines = [f"v {x} {y} {z} {r} {g} {b}" for (x, y, z), (r, g, b) in zip(v.tolist(), rgb)]
    lines += [f"f {a + 1} {b + 1} {c + 1}" for a, b, c in f]
    path = tmp_path / "c.obj"
    path.write_text("\n".join(lines) + "\n")
    mesh = voxelizer.load_mesh(path)
    assert mesh.parts is None and (mesh.appearance.sources == VERTEX).all()
    assert np.array_equal(mesh.appearance.vertex_colors[:, :3], np.floor(rgb * 255 + 0.5))
    assert np.array_equal(mesh.vertices, v)


def test_obj_texture_from_the_material_library(tmp_path):
    Image.fromarray(np.full((2, 2, 3), 9, np.uint8)).save(tmp_path / "t x.png")
    path = tmp_path / "q.obj"
    path.write_text(QUAD_OBJ)
    (tmp_path / "m.mtl").write_text("newmtl shiny\nKd 1 1 1\nmap_Kd -s 1 1 1 t x.png\n")
    mesh = voxelizer.load_mesh(path)
    appearance = mesh.appearance
    shiny = next(m for m in appearance.materials if m.name == "shiny")
    assert shiny.texture is not None and shiny.texture.pixels()[0, 0].tolist() == [9, 9, 9, 255]
    assert appearance.sources.tolist() == [MATERIAL, TEXTURE, TEXTURE, MATERIAL, MATERIAL, MATERIAL]
    assert any("'dull' is not defined" in problem for problem in appearance.problems)


def test_plain_files_carry_no_parts_or_colours(tmp_path):
    for path in (PROJECT_MODELS / "gear.ply", SHARED_MODELS / "torus.stl"):
        mesh = voxelizer.load_mesh(path)
        assert mesh.parts is None and mesh.appearance is None
    obj = tmp_path / "plain.obj"
    obj.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nf 1 2 3\nf 1 2 4\nf 1 3 4\nf 2 3 4\n")
    mesh = voxelizer.load_mesh(obj)
    assert mesh.parts is None and mesh.appearance is None


def ply_with(properties: dict, faces_as_quads: bool, fmt: str, tmp_path):
    """A PLY of a box written by trimesh's exporter, with extra properties added by
    rewriting: face or vertex colours, a part property."""
    v, f = box((0, 0, 0), (1, 2, 3))
    mesh = trimesh.Trimesh(v, f, process=False)
    for name, values in properties.items():
        if name == "vertex_colors":
            mesh.visual.vertex_colors = values
        elif name == "face_colors":
            mesh.visual.face_colors = values
    data = trimesh.exchange.ply.export_ply(mesh, encoding=fmt)
    path = tmp_path / f"b_{fmt}.ply"
    path.write_bytes(data)
    return path, mesh


@pytest.mark.parametrize("fmt", ["binary", "ascii"])
def test_ply_vertex_and_face_colours(tmp_path, fmt):
    colors = np.random.default_rng(1).integers(0, 256, (8, 4), dtype=np.uint8)
    path, _ = ply_with({"vertex_colors": colors}, False, fmt, tmp_path)
    mesh = voxelizer.load_mesh(path)
    assert (mesh.appearance.sources == VERTEX).all()
    assert np.array_equal(mesh.appearance.vertex_colors, colors)
    face_colors = np.random.default_rng(2).integers(0, 256, (12, 4), dtype=np.uint8)
    path, _ = ply_with({"face_colors": face_colors}, False, fmt, tmp_path)
    mesh = voxelizer.load_mesh(path)
    assert (mesh.appearance.sources == FACE).all()
    assert np.array_equal(mesh.appearance.face_colors, face_colors)


@pytest.mark.parametrize("fmt", ["binary_little_endian", "ascii"])
def test_ply_part_property_of_polygons(tmp_path, fmt):
    """Quads with an int `part` property: both triangles of a quad in its part."""
    v, _ = box((0, 0, 0), (1, 1, 1))
    quads = [[0, 2, 6, 4], [1, 5, 7, 3], [0, 4, 5, 1], [2, 3, 7, 6], [0, 1, 3, 2], [4, 6, 7, 5]]
    parts = [7, 7, 3, 3, 9, 7]
    header = (
        f"ply\nformat {fmt} 1.0\nelement vertex 8\nproperty float x\nproperty float y\n"
        "property float z\nelement face 6\nproperty list uchar int vertex_indices\n"
        "property int part\nend_header\n"
    ).encode()
    if fmt == "ascii":
        body = "".join(f"{x} {y} {z}\n" for x, y, z in v.tolist())
        body += "".join(f"4 {' '.join(map(str, q))} {p}\n" for q, p in zip(quads, parts))
        data = header + body.encode()
    else:
        data = header + v.astype("<f4").tobytes()
        for q, p in zip(quads, parts):
            data += bytes([4]) + np.array([*q, p], "<i4").tobytes()
    path = tmp_path / "parts.ply"
    path.write_bytes(data)
    mesh = voxelizer.load_mesh(path)
    reference = trimesh.load(path, process=False)
    assert np.array_equal(mesh.faces, reference.faces)
    assert mesh.parts.names == ("part 7", "part 3", "part 9")
    # trimesh's fan: all quads' first halves, then their second halves
    assert mesh.parts.ids.tolist() == [0, 0, 1, 1, 2, 0] * 2


def test_ascii_stl_solids_are_parts(tmp_path):
    text = ""
    for name, lo in (("left", 0), ("right", 2), ("", 4)):
        v, f = box((lo, 0, 0), (lo + 1, 1, 1))
        solid = trimesh.exchange.stl.export_stl_ascii(trimesh.Trimesh(v, f, process=False))
        text += solid.replace("solid ", f"solid {name}", 1).rstrip() + "\n"
    path = tmp_path / "three.stl"
    path.write_text(text)
    mesh = voxelizer.load_mesh(path)
    assert mesh.parts.names[:2] == ("left", "right") and mesh.parts.count == 3
    assert mesh.parts.ids.tolist() == [0] * 12 + [1] * 12 + [2] * 12
    one = tmp_path / "one.stl"
    v, f = box((0, 0, 0), (1, 1, 1))
    one.write_text(trimesh.exchange.stl.export_stl_ascii(trimesh.Trimesh(v, f, process=False)))
    assert voxelizer.load_mesh(one).parts is None


def test_glb_primitives_are_parts_with_their_materials(tmp_path):
    scene = trimesh.Scene()
    colours = ([255, 0, 0, 255], [0, 0, 255, 128])
    for number, colour in enumerate(colours):
        v, f = box((2 * number, 0, 0), (2 * number + 1, 1, 1))
        material = trimesh.visual.material.PBRMaterial(baseColorFactor=colour, name=f"m{number}")
        mesh = trimesh.Trimesh(v, f, visual=trimesh.visual.TextureVisuals(material=material))
        scene.add_geometry(mesh, geom_name=f"box{number}")
    path = tmp_path / "two.glb"
    scene.export(path)
    mesh = voxelizer.load_mesh(path)
    reference = trimesh.load(path, force="mesh", process=False)
    assert np.array_equal(mesh.vertices, reference.vertices)
    assert np.array_equal(mesh.faces, reference.faces)
    dumped = trimesh.load(path, force="scene", process=False).dump()  # to_mesh's order
    names = tuple(g.metadata["name"] for g in dumped)
    assert sorted(names) == ["box0", "box1"] and mesh.parts.names == names
    assert mesh.parts.ids.tolist() == [0] * 12 + [1] * 12
    ordered = [tuple(colours[int(name[-1])]) for name in names]
    assert [m.color for m in mesh.appearance.materials] == ordered
    assert (mesh.appearance.sources == MATERIAL).all()
    result = voxelizer.voxelize_dense(scene, 16, colors=True, labels=True)
    labels, colors = result.to_numpy("label"), result.to_numpy("color")
    assert set(np.unique(labels).tolist()) == {0, 1, 2}
    for label, name in enumerate(result.label_names, start=1):
        assert (colors[labels == label] == colours[int(name[-1])]).all()


def test_instances_of_one_geometry_are_parts_of_distinct_names(tmp_path):
    """Two nodes placing one glTF mesh (CesiumMilkTruck's wheels) are two parts, the later
    one named NAME (2), so that every label has a name of its own."""
    scene = trimesh.Scene()
    v, f = box((0, 0, 0), (1, 1, 1))
    wheel = trimesh.Trimesh(v, f, process=False)
    scene.add_geometry(wheel, geom_name="wheel", node_name="front")
    base = scene.graph.base_frame
    scene.graph.update(frame_to="back", frame_from=base, matrix=_shifted(2.0), geometry="wheel")
    path = tmp_path / "wheels.glb"
    scene.export(path)
    assert len(trimesh.load(path, force="scene").geometry) == 1  # one mesh, two nodes
    mesh = voxelizer.load_mesh(path)
    assert mesh.parts.names == ("wheel", "wheel (2)")
    grid = voxelizer.voxelize_dense(path, 16, labels=True)
    assert grid.label_names == ("wheel", "wheel (2)")
    assert set(np.unique(grid.to_numpy("label")).tolist()) == {0, 1, 2}


def _shifted(x: float) -> np.ndarray:
    matrix = np.eye(4)
    matrix[0, 3] = x
    return matrix


def test_several_meshes_are_parts_named_by_their_files(tmp_path):
    red = tmp_path / "red.obj"
    red.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nf 1 3 2\nf 1 2 4\nf 1 4 3\nf 2 3 4\n")
    v, f = box((2, 0, 0), (3, 1, 1))
    mesh = voxelizer.load_mesh(PROJECT_MODELS / "gear.ply")
    grid = voxelizer.voxelize_dense([red, (v, f), mesh], 16, labels=True)
    assert grid.label_names == ("red", "mesh 2", "mesh 3")
    assert set(np.unique(grid.to_numpy("label")).tolist()) <= {0, 1, 2, 3}
    with pytest.raises(voxelizer.MeshError, match="empty list"):
        voxelizer.voxelize_dense([], 16)
