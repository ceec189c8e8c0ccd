"""The native mesh readers (voxelizer/io/ply_file.py, stl_file.py, obj_file.py) against
trimesh, the reader they replace: on every shared and bundled model and on generated files of
each variant (binary and ASCII, big-endian, other types, extra properties and elements,
polygons, negative OBJ indices) they give the same vertices and faces; for OBJ files that
trimesh regroups or re-indexes, the same triangles and the same voxels; for STL, trimesh's
triangles in its order on corners merged by position (each position once, checked against
merging by sorting), with the same voxels. Broken files get one
line naming the file, the format and the fault, quickly; reading PLY, STL and OBJ (from the
command line too) never needs trimesh."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import trimesh

from voxelizer import load_mesh
from voxelizer.errors import MeshError
from voxelizer.io.mesh_parsing import merged_corners
from voxelizer.io.stl_file import HEADER_BYTES, TRIANGLE
from voxelizer.mesh import Mesh

from ..helpers import (
    PROJECT_MODELS,
    SHARED_MODELS,
    assert_loads_or_names_the_file,
    assert_same_voxels,
    model_path,
    shared_model,
    time_limit,
)

MODELS = sorted(SHARED_MODELS.glob("*.ply")) + sorted(SHARED_MODELS.glob("*.stl"))
MODELS += sorted(PROJECT_MODELS.glob("*.ply"))
# Their text versions take seconds each to write and read on 2 cores.
LARGE_MODELS = ("armadillo.ply", "bunny.ply", "bunny_scan.ply", "dragon.ply")


def trimesh_arrays(path: Path) -> tuple[np.ndarray, np.ndarray]:
    loaded = trimesh.load(path, process=False, force="mesh")
    return np.asarray(loaded.vertices), np.asarray(loaded.faces)


def with_vertex_normals(vertices: np.ndarray, faces: np.ndarray) -> trimesh.Trimesh:
    """A model whose OBJ export writes `vn` lines and `f v//vn` corners, with its normals made
    here: trimesh's own take a minute a large model without scipy (a Python loop)."""
    corners = vertices[faces]
    face_normals = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    summed = np.zeros_like(vertices)
    np.add.at(summed, faces, face_normals[:, None, :].repeat(3, axis=1))
    length = np.linalg.norm(summed, axis=1, keepdims=True)
    normals = np.divide(summed, length, out=np.tile([0.0, 0.0, 1.0], (len(summed), 1)),
                        where=length > 0)  # fmt: skip
    return trimesh.Trimesh(vertices, faces, vertex_normals=normals, process=False)


def assert_same_arrays(path: Path) -> Mesh:
    """Our reader and trimesh give the same vertices and faces, value for value."""
    mesh = load_mesh(path)
    vertices, faces = trimesh_arrays(path)
    assert mesh.vertices.dtype == np.float64 and mesh.faces.dtype == np.int64
    assert mesh.vertices.flags.c_contiguous and mesh.faces.flags.c_contiguous
    assert np.array_equal(mesh.vertices, vertices), path.name
    assert np.array_equal(mesh.faces, faces), path.name
    return mesh


def sorted_triangles(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """The triangles as corner positions, (T, 9), in a canonical order: equal for meshes that
    differ only in vertex order, unused or duplicated vertices, and face order."""
    soup = vertices[faces].reshape(-1, 9)
    return soup[np.lexsort(soup.T[::-1])]


def assert_same_triangles(path: Path) -> Mesh:
    mesh = load_mesh(path)
    expected = sorted_triangles(*trimesh_arrays(path))
    assert np.array_equal(sorted_triangles(mesh.vertices, mesh.faces), expected), path.name
    return mesh


def merged_reference(corners: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct corner positions in the order they first appear and each corner's row,
    by sorting (np.unique): what merged_corners computes with a hash table."""
    values = np.ascontiguousarray(corners, dtype=corners.dtype) + 0.0  # -0.0 as 0.0
    rows = values.view(np.dtype((np.void, values.itemsize * 3))).ravel()
    _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return values[first[order]], rank[inverse.ravel()]


def assert_same_soup(path: Path) -> Mesh:
    """An STL file: trimesh's triangles in trimesh's order, value for value, on each distinct
    position once, in the order the file first names it."""
    mesh = load_mesh(path)
    vertices, faces = trimesh_arrays(path)
    assert mesh.vertices.dtype == np.float64 and mesh.faces.dtype == np.int64
    assert mesh.vertices.flags.c_contiguous and mesh.faces.flags.c_contiguous
    soup = vertices[faces]
    assert np.array_equal(mesh.vertices[mesh.faces], soup), path.name
    merged, rows = merged_reference(soup.reshape(-1, 3))
    assert np.array_equal(mesh.vertices, merged), path.name
    assert np.array_equal(mesh.faces.reshape(-1), rows), path.name
    return mesh


@pytest.mark.parametrize("path", MODELS, ids=lambda path: path.name)
def test_every_model_reads_as_trimesh_reads_it(path):
    if path.suffix == ".stl":
        mesh = assert_same_soup(path)
        assert len(mesh.vertices) < 3 * mesh.triangle_count  # corners shared by position
    else:
        mesh = assert_same_arrays(path)
    assert mesh.triangle_count > 0


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(path, marks=pytest.mark.slow) if path.name in LARGE_MODELS else path
        for path in MODELS
    ],
    ids=lambda path: path.name,
)
def test_every_model_as_obj_and_ascii_stl_reads_as_trimesh_reads_it(tmp_path, path):
    """Each model written by trimesh's exporters as OBJ (with normals) and as ASCII STL."""
    model = with_vertex_normals(*trimesh_arrays(path))
    obj = tmp_path / "model.obj"
    text = trimesh.exchange.obj.export_obj(model, include_normals=True)
    assert "\nvn " in text and "//" in text  # normals, and corners that name them
    obj.write_bytes(text.encode())
    mesh = load_mesh(obj)
    vertices, faces = trimesh_arrays(obj)
    assert np.array_equal(mesh.vertices[mesh.faces], vertices[faces])  # in the same order
    if len(vertices) == len(mesh.vertices):
        assert np.array_equal(mesh.vertices, vertices) and np.array_equal(mesh.faces, faces)
    else:  # trimesh drops the vertices no face uses; the mesh has every v line
        assert np.array_equal(mesh.vertices[mesh.used], vertices)
    assert mesh.triangle_count == len(model.faces)
    stl = tmp_path / "model.stl"
    stl.write_bytes(trimesh.exchange.stl.export_stl_ascii(model).encode())
    assert assert_same_soup(stl).triangle_count == len(model.faces)


def test_an_stl_closed_by_position_is_closed_by_index(gpu):
    """Merged corners make a closed STL closed in its indices (the topology check needs no
    comparison by position), and its voxels are those of trimesh's triangle soup."""
    path = shared_model("torus.stl")
    mesh = load_mesh(path)
    soup = trimesh_arrays(path)
    edges = np.sort(mesh.faces[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2), axis=1)
    _, uses = np.unique(edges, axis=0, return_counts=True)
    assert (uses == 2).all()  # every edge of two faces, by index
    assert mesh.topology.closed and mesh.topology == Mesh(*soup).topology
    for grid in (40, 64):
        assert_same_voxels(
            gpu.voxelize_dense(mesh, grid).to_numpy(), gpu.voxelize_dense(soup, grid).to_numpy()
        )


@pytest.mark.parametrize("positions", ["few", "many"])
@pytest.mark.parametrize("count", [120_000, 400_000])  # one table; buckets on the cores
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_merged_corners_are_those_of_sorting(dtype, count, positions):
    """Many repeats, -0.0 beside 0.0, rows equal in two coordinates, NaN and infinity, and
    enough rows that the hash table's probing runs several rounds; few positions (343), or
    as many as a soup's (a sixth of its corners)."""
    rng = np.random.default_rng(7)
    if positions == "few":
        base = rng.integers(-3, 4, (4000, 3)).astype(dtype) / 2
    else:
        base = rng.normal(size=(count // 6, 3)).astype(dtype)
    base[:5] = [[np.nan, 0, 0], [np.inf, 0, 0], [-np.inf, 1, 1], [-0.0, 0, 0], [0, -0.0, 0]]
    corners = base[rng.integers(0, len(base), count)]
    strided = np.zeros((len(corners), 5), dtype)[:, 1:4]  # a view of rows of another record
    strided[:] = corners
    merged, rows = merged_corners(strided)
    expected, expected_rows = merged_reference(corners)
    assert merged.dtype == dtype
    assert np.array_equal(merged, expected, equal_nan=True)
    assert np.array_equal(rows, expected_rows)
    assert np.array_equal(merged[rows], corners + 0.0, equal_nan=True)
    assert not np.signbit(merged[merged == 0]).any()
    by_columns, column_rows = merged_corners(np.asfortranarray(corners))  # x, y, z apart
    assert np.array_equal(by_columns, expected, equal_nan=True)
    assert np.array_equal(column_rows, expected_rows)
    empty, none = merged_corners(np.empty((0, 3), dtype))
    assert empty.shape == (0, 3) and none.shape == (0,)


@pytest.mark.parametrize("triangles", [1, 2, 7, 50_000])
def test_merged_corners_of_a_binary_stl_are_those_of_sorting(triangles):
    """The view the binary STL reader hands over (the corners field of its records, 50
    bytes a triangle, unaligned): repeats far apart and side by side, -0.0 beside 0.0, NaN
    (one bit pattern: one row) and infinity, rows equal in two coordinates; the merged rows
    keep their float32 bits and each corner's row is the first of its position."""
    rng = np.random.default_rng(triangles)
    base = rng.integers(-2, 3, (max(2, triangles // 2), 3)).astype(np.float32) / 4
    base[:2] = [[np.nan, -0.0, np.inf], [0.0, 0.0, -np.inf]]
    records = np.zeros(triangles, TRIANGLE)
    records["corners"] = base[rng.integers(0, len(base), (triangles, 3))]
    records["normal"] = rng.normal(size=(triangles, 3))
    data = bytes(80) + np.uint32(triangles).tobytes() + records.tobytes()
    corners = np.frombuffer(data, TRIANGLE, count=triangles, offset=HEADER_BYTES)["corners"]
    merged, rows = merged_corners(corners)
    expected, expected_rows = merged_reference(records["corners"].reshape(-1, 3))
    assert merged.dtype == np.float32 and rows.dtype == np.int64
    assert np.array_equal(merged.view(np.uint32), expected.view(np.uint32))
    assert np.array_equal(rows, expected_rows)


# --- PLY files of every layout ---------------------------------------------------------------

PLY_TYPES = {
    "char": "i1",
    "uchar": "u1",
    "short": "i2",
    "ushort": "u2",
    "int": "i4",
    "uint": "u4",
    "int64": "i8",
    "float": "f4",
    "double": "f8",
    "uint16": "u2",
    "float32": "f4",
    "float64": "f8",
}

# An element: (name, properties, rows). A property is (name, type) or (name, (count, item))
# for a list; a row holds one value per property (a sequence for a list).
Element = tuple[str, list[tuple[str, object]], list[tuple]]


def ply_file(elements: list[Element], encoding: str = "binary_little_endian") -> bytes:
    """A PLY file of these elements, written value by value (independently of any reader)."""
    lines = [b"ply", f"format {encoding} 1.0".encode(), b"comment written by the tests"]
    order = {"binary_little_endian": "<", "binary_big_endian": ">"}.get(encoding)
    body: list[bytes] = []
    for name, properties, rows in elements:
        lines.append(f"element {name} {len(rows)}".encode())
        for prop, kind in properties:
            if isinstance(kind, tuple):
                lines.append(f"property list {kind[0]} {kind[1]} {prop}".encode())
            else:
                lines.append(f"property {kind} {prop}".encode())
        for row in rows:
            values: list[tuple[str, object]] = []
            for (_, kind), value in zip(properties, row):
                if isinstance(kind, tuple):
                    values.append((kind[0], len(value)))
                    values += [(kind[1], item) for item in value]
                else:
                    values.append((str(kind), value))
            if order is None:
                words = [
                    repr(float(v)) if PLY_TYPES[t][0] == "f" else str(int(v)) for t, v in values
                ]
                body.append(" ".join(words).encode() + b"\n")
            else:
                body += [np.array(v, order + PLY_TYPES[t]).tobytes() for t, v in values]
    return b"\n".join(lines) + b"\nend_header\n" + b"".join(body)


def suzanne() -> tuple[np.ndarray, np.ndarray]:
    """Suzanne's float32 vertices and triangles (968 faces: separate shells, open)."""
    return trimesh_arrays(shared_model("suzanne.ply"))


def prism(sides: int = 12) -> tuple[np.ndarray, list[list[int]]]:
    """A closed prism of `sides`-gon caps and quad walls: polygons of two sizes."""
    angles = 2 * np.pi * np.arange(sides) / sides
    ring = np.stack([np.cos(angles), np.sin(angles), np.zeros(sides)], axis=1)
    vertices = np.concatenate([ring, ring + [0.0, 0.0, 1.5]]).astype(np.float32)
    walls = [[i, (i + 1) % sides, sides + (i + 1) % sides, sides + i] for i in range(sides)]
    caps = [list(range(sides))[::-1], list(range(sides, 2 * sides))]
    return vertices, [caps[0], *walls[:5], [0, 1, 2], *walls[5:], caps[1]]  # not sorted by size


def cube_of_quads() -> tuple[np.ndarray, list[list[int]]]:
    vertices = np.array([[x, y, z] for x in (0, 1) for y in (0, 2) for z in (0, 3)], np.float32)
    quads = [[0, 1, 3, 2], [4, 6, 7, 5], [0, 4, 5, 1], [2, 3, 7, 6], [0, 2, 6, 4], [1, 5, 7, 3]]
    return vertices, quads


def xyz_element(vertices: np.ndarray, kind: str = "float", extra: bool = False) -> Element:
    """The vertex element; with `extra`, x, y, z interleaved with other properties."""
    if not extra:
        return ("vertex", [("x", kind), ("y", kind), ("z", kind)], [tuple(v) for v in vertices])
    properties = [
        ("x", kind),
        ("red", "uchar"),
        ("y", kind),
        ("confidence", "double"),
        ("z", kind),
        ("nx", "float"),
    ]
    rows = [(x, i % 256, y, 0.5 * i, z, -1.0) for i, (x, y, z) in enumerate(vertices)]
    return ("vertex", properties, rows)


def face_element(
    faces, count="uchar", index="int", name="vertex_indices", extra=False, varying=False
) -> Element:
    """The face element; with `extra`, a value before the indices and a second list after
    them (of 2 weights, or with `varying` of 0, 1 or 2)."""
    if not extra:
        return ("face", [(name, (count, index))], [(list(f),) for f in faces])
    properties = [("flags", "uchar"), (name, (count, index)), ("weights", ("uchar", "float"))]
    rows = [(i % 7, list(f), [0.25] * (i % 3 if varying else 2)) for i, f in enumerate(faces)]
    return ("face", properties, rows)


CAMERA: Element = ("camera", [("view", "float"), ("fov", "int")], [(1.5, 60), (2.5, 45)])
MATERIAL: Element = ("material", [("shine", "double"), ("ids", ("uchar", "int"))], [(1.0, [1, 2])])


@cache  # made once: collection and each test read it
def ply_variants() -> dict[str, bytes]:
    vertices, triangles = suzanne()
    polygon_vertices, polygons = prism()
    cube, quads = cube_of_quads()
    plain = [xyz_element(vertices), face_element(triangles)]
    return {
        "binary little endian": ply_file(plain),
        "binary big endian": ply_file(plain, "binary_big_endian"),
        "ascii": ply_file(plain, "ascii"),
        "double coordinates": ply_file([xyz_element(vertices, "double"), face_element(triangles)]),
        "extra properties": ply_file(
            [xyz_element(vertices, extra=True), face_element(triangles, extra=True)]
        ),
        "extra properties, big endian": ply_file(
            [xyz_element(vertices, extra=True), face_element(triangles, extra=True)],
            "binary_big_endian",
        ),
        "extra properties, ascii": ply_file(
            [xyz_element(vertices, extra=True), face_element(triangles, extra=True)], "ascii"
        ),
        "extra elements": ply_file([CAMERA, *plain, MATERIAL]),
        "extra elements, ascii": ply_file([CAMERA, *plain, MATERIAL], "ascii"),
        "ushort counts, uint indices": ply_file(
            [xyz_element(vertices), face_element(triangles, "ushort", "uint")]
        ),
        "int counts, short vertex_index": ply_file(
            [xyz_element(vertices), face_element(triangles, "int", "short", "vertex_index")],
            "binary_big_endian",
        ),
        "int64 indices": ply_file(
            [xyz_element(vertices), face_element(triangles, "uchar", "int64")]
        ),
        "quads": ply_file([xyz_element(cube), face_element(quads)]),
        "quads, ascii": ply_file([xyz_element(cube), face_element(quads)], "ascii"),
        "polygons, ascii": ply_file(
            [xyz_element(polygon_vertices), face_element(polygons)], "ascii"
        ),
    }


@pytest.mark.parametrize("variant", list(ply_variants()))
def test_ply_variants_read_as_trimesh_reads_them(tmp_path, variant):
    path = tmp_path / "model.ply"
    path.write_bytes(ply_variants()[variant])
    mesh = assert_same_arrays(path)
    assert mesh.triangle_count in (968, 12, 1 + 2 * 12 + 2 * 10)  # suzanne, cube, prism


@pytest.mark.parametrize("encoding", ["ascii", "binary_little_endian", "binary_big_endian"])
def test_comments_before_the_format_line_are_allowed(tmp_path, encoding):
    """Comment and obj_info lines may come before the format line (as other readers allow):
    the mesh reads the same as without them."""
    plain = box_ply(encoding)
    remarked = plain.replace(b"ply\n", b"ply\ncomment made by hand\nobj_info a box\n", 1)
    assert remarked != plain
    (tmp_path / "plain.ply").write_bytes(plain)
    (tmp_path / "remarked.ply").write_bytes(remarked)
    expected, read = load_mesh(tmp_path / "plain.ply"), load_mesh(tmp_path / "remarked.ply")
    assert np.array_equal(read.vertices, expected.vertices)
    assert np.array_equal(read.faces, expected.faces)


@pytest.mark.parametrize("encoding", ["binary_little_endian", "binary_big_endian"])
def test_binary_ply_with_lists_of_differing_lengths(tmp_path, encoding):
    """Binary rows whose lists differ in length (polygons of several sizes, vertices with a
    list) are walked row by row; trimesh cannot read these, so the ASCII file of the same
    elements, which it reads, is the reference."""
    vertices, polygons = prism()
    vertex: Element = (
        "vertex",
        [("x", "float"), ("tags", ("uchar", "short")), ("y", "float"), ("z", "float")],
        [(x, [7] * (i % 4), y, z) for i, (x, y, z) in enumerate(vertices)],
    )
    elements = [CAMERA, vertex, face_element(polygons, extra=True, varying=True), MATERIAL]
    binary, text = tmp_path / "binary.ply", tmp_path / "ascii.ply"
    binary.write_bytes(ply_file(elements, encoding))
    text.write_bytes(ply_file(elements, "ascii"))
    with pytest.raises(ValueError, match="unexpected length"):
        trimesh.load(binary, process=False, force="mesh")
    expected_vertices, expected_faces = trimesh_arrays(text)
    for path in (binary, text):
        mesh = load_mesh(path)
        assert np.array_equal(mesh.vertices, expected_vertices)
        assert np.array_equal(mesh.faces, expected_faces)
    # triangles first, then the quads' halves, then the 12-gons' fans: trimesh's order
    assert mesh.faces[0].tolist() == [0, 1, 2] and mesh.triangle_count == 1 + 2 * 12 + 2 * 10


# --- STL -------------------------------------------------------------------------------------


@cache  # made once: collection and each test read it
def stl_variants() -> dict[str, bytes]:
    vertices, faces = suzanne()
    mesh = trimesh.Trimesh(vertices, faces, process=False)
    text = trimesh.exchange.stl.export_stl_ascii(mesh).encode()
    facets = text.split(b"facet normal")
    two_solids = (
        b"facet normal".join(facets[:500]) + b"endsolid first\nsolid second\nfacet normal"
    ) + b"facet normal".join(facets[500:])
    binary = trimesh.exchange.stl.export_stl(mesh)
    return {
        "binary": binary,
        "binary, header starting with solid": b"solid made by a CAD tool".ljust(80) + binary[80:],
        "ascii": text,
        "ascii, two solids": two_solids,
        "ascii, capitals, CRLF and tabs": text.upper().replace(b"\n", b"\r\n").replace(b" ", b"\t"),
    }


@pytest.mark.parametrize("variant", list(stl_variants()))
def test_stl_variants_read_as_trimesh_reads_them(tmp_path, variant):
    """The same arrays; of several solids, trimesh merges each solid's vertices (it does not
    pass process=False on to the parts of a scene): the same triangles then."""
    path = tmp_path / "model.stl"
    path.write_bytes(stl_variants()[variant])
    if "two solids" in variant:
        mesh = assert_same_triangles(path)
    else:
        mesh = assert_same_soup(path)
    assert mesh.triangle_count == 968
    assert len(np.unique(mesh.vertices, axis=0)) == len(mesh.vertices)  # each position once


def test_stl_with_zero_normals_and_degenerate_facets(tmp_path):
    """Normals are never read: zero normals (common from exporters) change nothing; a facet
    with two equal corners keeps its place and merges its corners."""
    vertices, faces = suzanne()
    faces = np.concatenate([faces, [[0, 0, 1]]])
    binary = bytearray(
        trimesh.exchange.stl.export_stl(trimesh.Trimesh(vertices, faces, process=False))
    )
    records = np.frombuffer(binary, TRIANGLE, offset=HEADER_BYTES)
    assert np.abs(records["normal"]).max() > 0
    zeroed = records.copy()
    zeroed["normal"] = 0
    path = tmp_path / "zero-normals.stl"
    path.write_bytes(bytes(binary[:HEADER_BYTES]) + zeroed.tobytes())
    mesh = assert_same_soup(path)
    assert mesh.faces[-1, 0] == mesh.faces[-1, 1] != mesh.faces[-1, 2]
    assert np.array_equal(mesh.vertices[mesh.faces], vertices[faces].astype(np.float32))


# --- OBJ -------------------------------------------------------------------------------------


def obj_text(vertices: np.ndarray, faces, corner: str = "{v}", negative: bool = False) -> bytes:
    """An OBJ file: `corner` formats each corner from its v, vt and vn indices (from 1, or
    negative); a vertex's corners use one of two normals, alternating, so that trimesh splits
    the vertices by normal."""
    lines = [f"v {x!r} {y!r} {z!r}" for x, y, z in vertices.tolist()]
    lines += [f"vt {i / len(vertices)!r} 0.5" for i in range(len(vertices))]
    lines += ["vn 0 0 1", "vn 0 0 -1"]
    corners = 0
    for face in faces:
        refs = []
        for v in face:
            normal = 1 + corners % 2
            corners += 1
            if negative:
                refs.append(corner.format(v=v - len(vertices), t=v - len(vertices), n=normal - 3))
            else:
                refs.append(corner.format(v=v + 1, t=v + 1, n=normal))
        lines.append("f " + " ".join(refs))
    return ("\n".join(lines) + "\n").encode()


def obj_in_pieces(vertices: np.ndarray, faces: np.ndarray, negative: bool) -> bytes:
    """Three objects, each its vertices then its faces, with materials, groups, smoothing
    groups and comments between them; negative indices count back from each object's end."""
    text = ["# three objects", "mtllib missing.mtl"]
    pieces = np.array_split(np.arange(len(faces)), 3)
    defined = 0
    for number, piece in enumerate(pieces):
        used = np.unique(faces[piece])
        local = {int(v): i for i, v in enumerate(used)}
        text += [f"o part{number}", f"g group{number}", f"usemtl paint{number % 2}", "s 1"]
        text += [f"v {x!r} {y!r} {z!r} 1.0" for x, y, z in vertices[used].tolist()]
        for face in faces[piece].tolist():
            if negative:
                refs = [local[v] - len(used) for v in face]
            else:
                refs = [defined + local[v] + 1 for v in face]
            text.append("f " + " ".join(map(str, refs)))
        text.append("# end of a part")
        defined += len(used)
    return ("\n".join(text) + "\n").encode()


@cache  # made once: collection and each test read it
def obj_variants() -> dict[str, tuple[bytes, str]]:
    """(file, how it compares with trimesh): "arrays" when trimesh keeps the file's vertices
    and face order, "triangles" when it regroups faces by material or splits vertices by
    their normals and texture coordinates."""
    vertices, faces = suzanne()
    cube, quads = cube_of_quads()
    polygon_vertices, polygons = prism()
    coloured = re.sub(rb"(?m)^(v [^\n]*)$", rb"\1 0.5 0.25 1.0", obj_text(vertices, faces))
    return {
        "v": (obj_text(vertices, faces), "arrays"),
        "negative": (obj_text(vertices, faces, negative=True), "arrays"),
        "v/vt": (obj_text(vertices, faces, "{v}/{t}"), "triangles"),
        "v//vn": (obj_text(vertices, faces, "{v}//{n}"), "triangles"),
        "v/vt/vn": (obj_text(vertices, faces, "{v}/{t}/{n}"), "triangles"),
        "negative v/vt/vn": (obj_text(vertices, faces, "{v}/{t}/{n}", negative=True), "triangles"),
        "colour columns": (coloured, "arrays"),
        "quads": (obj_text(cube, quads), "arrays"),
        "polygons": (obj_text(polygon_vertices, polygons, "{v}//{n}"), "triangles"),
        "objects, groups, materials": (obj_in_pieces(vertices, faces, False), "triangles"),
    }


@pytest.mark.parametrize("variant", list(obj_variants()))
def test_obj_variants_read_as_trimesh_reads_them(tmp_path, variant):
    data, compared = obj_variants()[variant]
    path = tmp_path / "model.obj"
    path.write_bytes(data)
    if compared == "arrays":
        assert_same_arrays(path)
    else:
        assert_same_triangles(path)


def test_obj_keeps_its_vertices_and_face_order(tmp_path):
    """The mesh is the file's: every v line in order, faces in order (trimesh keeps only the
    vertices faces use, split by normal and texture coordinate, and groups by material)."""
    vertices, faces = suzanne()
    path = tmp_path / "model.obj"
    path.write_bytes(obj_text(vertices, faces, "{v}/{t}/{n}"))
    mesh = load_mesh(path)
    assert np.array_equal(mesh.vertices, vertices) and np.array_equal(mesh.faces, faces)
    path.write_bytes(obj_in_pieces(vertices, faces, negative=False))
    pieces = load_mesh(path)
    assert np.array_equal(pieces.vertices[pieces.faces], vertices[faces])


def test_negative_obj_indices_count_back_from_their_own_line(tmp_path):
    """Objects written one after another with negative indices (as many exporters do): each
    index counts back from the last vertex above its face. trimesh counts back from the
    file's last vertex instead, so the file with positive indices is the reference."""
    vertices, faces = suzanne()
    relative, absolute = tmp_path / "relative.obj", tmp_path / "absolute.obj"
    relative.write_bytes(obj_in_pieces(vertices, faces, negative=True))
    absolute.write_bytes(obj_in_pieces(vertices, faces, negative=False))
    mesh, expected = load_mesh(relative), load_mesh(absolute)
    assert np.array_equal(mesh.vertices, expected.vertices)
    assert np.array_equal(mesh.faces, expected.faces)
    assert np.array_equal(mesh.vertices[mesh.faces], vertices[faces])
    assert_same_triangles(absolute)


def test_obj_polygons_and_odd_lines(tmp_path):
    """Mixed polygons are fanned face by face as trimesh's fallback does; indented lines,
    tabs, continued lines, a UTF-16 file and points, lines and parameters are read too."""
    vertices, polygons = prism()
    plain = obj_text(vertices, polygons)
    path = tmp_path / "model.obj"
    path.write_bytes(plain)
    expected = assert_same_arrays(path)
    assert expected.faces[:3].tolist() == [[11, 10, 9], [11, 9, 8], [11, 8, 7]]  # the cap's fan
    odd = plain.replace(b"\nv ", b"\n  \tv\t").replace(b"\nf 3 ", b"\nf 3 \\\n ")
    odd += b"p 1\nl 1 2 3\nvp 0.5\ncstype bezier\n"
    for data in (odd, b"\xff\xfe" + odd.decode().encode("utf-16-le")):
        path.write_bytes(data)
        mesh = load_mesh(path)
        assert np.array_equal(mesh.vertices, expected.vertices)
        assert np.array_equal(mesh.faces, expected.faces)


def test_obj_read_natively_has_the_voxels_of_trimesh_reading_it(tmp_path, gpu):
    """Where trimesh re-indexes an OBJ file, the two meshes still give the same voxels."""
    vertices, faces = trimesh_arrays(model_path("torus_knot.ply"))
    path = tmp_path / "torus_knot.obj"
    path.write_bytes(obj_text(vertices, faces, "{v}/{t}/{n}"))
    ours = load_mesh(path)
    theirs = trimesh_arrays(path)
    assert len(theirs[0]) > len(ours.vertices)  # trimesh split vertices by their normals
    for grid in (40, 64):
        assert_same_voxels(
            gpu.voxelize_dense(ours, grid).to_numpy(), gpu.voxelize_dense(theirs, grid).to_numpy()
        )


# --- broken files ------------------------------------------------------------------------------

BOX = trimesh.creation.box()  # 8 vertices, 12 triangles


def box_ply(encoding: str = "binary_little_endian", count: str = "uchar") -> bytes:
    return ply_file(
        [xyz_element(np.asarray(BOX.vertices)), face_element(BOX.faces, count=count)], encoding
    )


def box_stl() -> bytes:
    return trimesh.exchange.stl.export_stl_ascii(BOX).encode()


def box_obj() -> bytes:
    return obj_text(np.asarray(BOX.vertices), BOX.faces)


def cut_after(data: bytes, marker: bytes) -> bytes:
    return data[: data.index(marker) + len(marker)]


THREE_VERTICES = b"v 0 0 0\nv 1 0 0\nv 0 1 0\n"

BROKEN: list[tuple[str, Callable[[], bytes], str]] = [
    # PLY: the header
    ("ply", lambda: b"solid\n" + box_ply()[4:], "it does not start with a ply line"),
    ("ply", lambda: cut_after(box_ply(), b"property float y"), "the header is cut off"),
    (
        "ply",
        lambda: box_ply().replace(b"binary_little_endian", b"binary_middle_endian"),
        "unknown format 'binary_middle_endian'",
    ),
    (
        "ply",
        lambda: box_ply().replace(b"format ", b"formats "),
        "no format line follows the ply line",
    ),
    (
        "ply",
        lambda: box_ply().replace(b"property float x", b"property float128 x"),
        "bad property line 'property float128 x'",
    ),
    ("ply", lambda: box_ply().replace(b"vertex 8", b"vertex -8"), "bad element line 'element"),
    (
        "ply",
        lambda: box_ply().replace(b"element vertex 8\n", b"").replace(b"comment", b"element v 8\n"),
        "the header declares faces but no vertex element",
    ),
    (
        "ply",
        lambda: box_ply().replace(b"property float z", b"property float w"),
        "the vertex element has no x, y and z values",
    ),
    (
        "ply",
        lambda: box_ply("ascii").replace(
            b"list uchar int vertex_indices",
            b"int a\nproperty int b\nproperty int c\nproperty int d",
        ),
        "the face element has no vertex_indices list",
    ),
    # PLY: the data
    (
        "ply",
        lambda: box_ply()[:-7],
        r"the data is cut off: the header declares 8 vertex, 12 face \(252 bytes\), "
        r"the file has 245 after the header",
    ),
    (
        "ply",
        lambda: box_ply().replace(b"face 12", b"face 4000000000"),
        r"the data is cut off: the header declares 8 vertex, 4,000,000,000 face \(52,000,000,096",
    ),
    (
        "ply",
        lambda: box_ply().replace(b"vertex 8", b"vertex 4000000000"),
        r"the data is cut off: the header declares 4,000,000,000 vertex, 12 face",
    ),
    (
        "ply",
        lambda: box_ply(count="uint")[:-48] + (1 << 31).to_bytes(4, "little") + bytes(44),
        r"the data is cut off",
    ),
    (
        "ply",
        lambda: box_ply(count="char")[:-13] + b"\xff" + bytes(12),
        r"a list of negative length \(-1\)",
    ),
    (
        "ply",
        lambda: box_ply() + b"\n",
        r"the data does not match the header's elements and properties \(8 vertex, 12 face: "
        r"252 bytes, the file has 253\)",
    ),
    ("ply", lambda: box_ply("ascii")[:-4], r"the data is cut off: .* \(72 values\), the file has"),
    ("ply", lambda: box_ply("ascii") + b"1 2 3\n", r"72 values, the file has 75"),
    (
        "ply",
        lambda: re.sub(rb"\n3 (\d+ \d+ \d+)\n", rb"\nnan \1\n", box_ply("ascii"), count=1),
        r"a list length that is not a whole number \(nan\)",
    ),
    (
        "ply",
        lambda: box_ply("ascii").replace(b"\n3 ", b"\n3 x", 1),
        r"line 19: value 'x\d' is not a number",
    ),
    (
        "ply",
        lambda: re.sub(rb"\n3 \d+ ", b"\n3 1.5 ", box_ply("ascii"), count=1),
        r"a vertex index that is not a whole number \(1\.5\)",
    ),
    (
        "ply",
        lambda: box_ply()[:-4] + (99).to_bytes(4, "little"),
        r"a face refers to a vertex that does not exist \(face 11 refers to vertex 99, "
        r"the file has 8 vertices\)",
    ),
    (
        "ply",
        lambda: box_ply("binary_big_endian")[:-4] + (-2).to_bytes(4, "big", signed=True),
        r"face 11 refers to vertex -2",
    ),
    # STL
    ("stl", lambda: b"\x01" * 40, "40 bytes, shorter than the 84-byte header of a binary STL"),
    (
        "stl",
        lambda: trimesh.exchange.stl.export_stl(BOX)[:600],
        r"cut off or corrupt: the 12 triangles in the header of a binary STL need 684 bytes, "
        r"the file has 600",
    ),
    ("stl", lambda: box_stl().replace(b"endsolid", b"end"), r"an ASCII STL cut off \(no endsolid"),
    (
        "stl",
        lambda: box_stl().replace(b"vertex ", b"vertex x", 1),
        r"line 4: vertex coordinate 'x-",
    ),
    (
        "stl",
        lambda: box_stl().replace(b"vertex ", b"vertex 7 ", 1),
        "line 4: a vertex with 4 values",
    ),
    (
        "stl",
        lambda: box_stl().replace(b"endloop", b"vertex 0 0 0\nendloop", 1),
        "37 vertex lines, not three per facet",
    ),
    # OBJ
    ("obj", lambda: box_obj().replace(b"v ", b"v x", 1), r"line 1: vertex coordinate 'x-0\.5'"),
    ("obj", lambda: b"v 0 0\n" + box_obj(), r"line 1: a vertex with 2 values, not 3"),
    ("obj", lambda: THREE_VERTICES + b"f 0 1 2\n", r"line 4: vertex index 0 \(OBJ counts from 1\)"),
    ("obj", lambda: THREE_VERTICES + b"f 1 2 1.5\n", r"line 4: vertex index '1\.5' is not an int"),
    (
        "obj",
        lambda: THREE_VERTICES + b"f 1 2 3\nf 1 2 9\n",
        r"a face refers to a vertex that does not exist \(line 5 refers to vertex 9, the file "
        r"has 3 vertices\)",
    ),
    ("obj", lambda: THREE_VERTICES + b"f -1 -2 -4\n", r"\(line 4 refers to vertex -4, the file"),
    (
        "obj",
        lambda: THREE_VERTICES + b"f 1//1 2//1 /3\n",
        r"line 4: a face corner without a vertex index",
    ),
]


@pytest.mark.parametrize(
    "extension, broken, message", BROKEN, ids=[f"{e} {m[:32]}" for e, _, m in BROKEN]
)
def test_a_broken_file_gets_one_line_naming_file_format_and_fault(
    tmp_path, extension, broken, message
):
    path = tmp_path / f"model.{extension}"
    path.write_bytes(broken())
    with time_limit(2.0), pytest.raises(MeshError) as caught:
        load_mesh(path)
    text = str(caught.value)
    assert text.startswith(f"{path}: cannot read mesh ({extension.upper()} file): "), text
    assert "\n" not in text and re.search(message, text), text


@pytest.mark.parametrize(
    "extension, data",
    [
        ("ply", lambda: ply_file([xyz_element(np.asarray(BOX.vertices)), face_element([])])),
        (
            "ply",
            lambda: ply_file([xyz_element(np.asarray(BOX.vertices)), face_element([])], "ascii"),
        ),
        ("stl", lambda: b"solid empty\nendsolid empty\n"),
        ("stl", lambda: bytes(84)),
        ("obj", lambda: THREE_VERTICES + b"l 1 2\nf 1 2\n"),
    ],
)
def test_a_file_without_triangles_says_so(tmp_path, extension, data):
    path = tmp_path / f"model.{extension}"
    path.write_bytes(data())
    with pytest.raises(MeshError, match=f"^{re.escape(str(path))}: the mesh has no triangles$"):
        load_mesh(path)


def fuzzed(data: bytes, rng: np.random.Generator) -> list[bytes]:
    """Truncations at many offsets, single bit flips, and digits replaced by other bytes."""
    versions = [data[:end] for end in sorted(set(rng.integers(0, len(data), 20).tolist()))]
    for bit in rng.integers(0, 8 * len(data), 20).tolist():
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << bit % 8
        versions.append(bytes(flipped))
    digits = [i for i, byte in enumerate(data) if chr(byte).isdigit()]
    for at in rng.choice(digits, 12).tolist() if digits else []:
        word = [b"-", b"/", b".", b" ", b"0", b"9", b"\n", b"#", b"x", b"\x00", b"nan", b"1e999"]
        versions.append(data[:at] + word[rng.integers(len(word))] + data[at + 1 :])
    return versions


def fuzz_cases() -> list[tuple[str, bytes]]:
    vertices, polygons = prism(6)
    varying = [xyz_element(vertices, extra=True), face_element(polygons, extra=True, varying=True)]
    cube, quads = cube_of_quads()
    return [
        ("ply", ply_file(varying, "binary_big_endian")),
        ("ply", ply_file(varying, "ascii")),
        ("ply", ply_file([CAMERA, xyz_element(cube, "double"), face_element(quads), MATERIAL])),
        ("stl", trimesh.exchange.stl.export_stl(BOX)),
        ("stl", box_stl() + b"solid second\n" + box_stl()[6:]),
        ("obj", obj_text(vertices, polygons, "{v}/{t}/{n}", negative=True)),
        ("obj", obj_in_pieces(np.asarray(BOX.vertices), BOX.faces, negative=True)),
    ]


@pytest.mark.parametrize("case", range(len(fuzz_cases())))
def test_broken_files_of_every_layout_load_or_raise_mesh_error_quickly(tmp_path, case):
    extension, data = fuzz_cases()[case]
    for number, broken in enumerate(fuzzed(data, np.random.default_rng(case))):
        assert_loads_or_names_the_file(tmp_path / f"{number}.{extension}", broken)


def test_deep_indentation_and_long_lines_read_quickly(tmp_path):
    """Lines indented by a megabyte, or a line of ten million blanks, take no time per blank."""
    path = tmp_path / "model.obj"
    path.write_bytes(b" " * (1 << 20) + box_obj() + b"\t" * 10_000_000 + b"\n# end\n")
    started = time.perf_counter()
    with time_limit(5.0):
        mesh = load_mesh(path)
    assert mesh.triangle_count == 12 and time.perf_counter() - started < 5.0


# --- no trimesh --------------------------------------------------------------------------------

WITHOUT_TRIMESH = """
import sys
import voxelizer
from voxelizer.cli import main
for name in [name for name in sys.modules if name.split(".")[0] == "trimesh"]:
    del sys.modules[name]
sys.modules["trimesh"] = None  # from here on, any `import trimesh` fails
for path in sys.argv[1:]:
    mesh = voxelizer.load_mesh(path)
    print(path, mesh.triangle_count)
    assert main([path, "--grid", "8", "-o", path + ".npz", "--quiet"]) == 0
"""


def test_reading_ply_stl_and_obj_needs_no_trimesh(tmp_path):
    """The API and the command line read the three formats with trimesh unimportable."""
    paths = []
    for extension, data in [("ply", box_ply()), ("stl", box_stl()), ("obj", box_obj())]:
        paths.append(tmp_path / f"box.{extension}")
        paths[-1].write_bytes(data)
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_TRIMESH, *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(paths[0]), "12", str(paths[1]), "12", str(paths[2]), "12"]
    assert all(Path(f"{path}.npz").is_file() for path in paths)
    off = tmp_path / "box.off"
    off.write_text(trimesh.exchange.off.export_off(BOX))
    blocked = subprocess.run(
        [sys.executable, "-c", WITHOUT_TRIMESH, str(off)], capture_output=True, text=True
    )
    assert blocked.returncode != 0  # the fallback for other formats needs it, and says so
    assert "box.off: the mesh format .off needs trimesh (pip install trimesh)" in blocked.stderr
