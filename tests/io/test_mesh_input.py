"""Mesh files as users have them: text in any encoding, and broken files that must each get
one clear MeshError naming the file, the format and what is wrong (never a library's bare
message, never a traceback or a hang); and --bounds with negative numbers in any notation."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator

import numpy as np
import pytest
import trimesh

from voxelizer import SVO, api, load_mesh
from voxelizer.errors import MeshError
from voxelizer.mesh import Mesh
from voxelizer.reference import voxelize_reference
from voxelizer.stats import Stats

from ..helpers import (
    assert_loads_or_names_the_file,
    assert_one_line_error,
    cli_usage_error,
    run_cli,
)

BOX = trimesh.creation.box()  # 8 vertices, 12 triangles: small files, every part of them


def box_file(kind: str) -> tuple[str, bytes]:
    """(extension, bytes) of the box in one of the six layouts the fuzz test breaks."""
    exchange = trimesh.exchange
    files = {
        "binary ply": ("ply", lambda: exchange.ply.export_ply(BOX, encoding="binary")),
        "ascii ply": ("ply", lambda: exchange.ply.export_ply(BOX, encoding="ascii")),
        "binary stl": ("stl", lambda: exchange.stl.export_stl(BOX)),
        "ascii stl": ("stl", lambda: exchange.stl.export_stl_ascii(BOX).encode()),
        "obj": ("obj", lambda: exchange.obj.export_obj(BOX).encode()),
        "off": ("off", lambda: exchange.off.export_off(BOX).encode()),
    }
    extension, export = files[kind]
    return extension, export()


KINDS = ["binary ply", "ascii ply", "binary stl", "ascii stl", "obj", "off"]


@pytest.fixture
def no_charset_guessing(monkeypatch):
    """Make charset_normalizer unimportable, as on a machine without it: trimesh falls back
    to it for any byte that is not UTF-8."""
    monkeypatch.setitem(sys.modules, "charset_normalizer", None)


def same_triangles(got: Mesh, expected: Mesh) -> bool:
    return np.array_equal(got.vertices[got.faces], expected.vertices[expected.faces])


# --- text in any encoding -----------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, where, text, end",
    [
        ("ascii stl", b"solid ", "café Ω", b""),  # the solid's name
        ("obj", b"# ", "café Ω", b" "),  # a comment
        ("off", b"OFF\n", "# café Ω", b"\n"),
        ("ascii ply", b"comment ", "café Ω", b" "),
        ("binary ply", b"comment ", "café Ω", b" "),
    ],
)
def test_text_in_any_encoding_loads_the_same_triangles(
    tmp_path, no_charset_guessing, kind, where, text, end
):
    extension, data = box_file(kind)
    assert data.count(where) >= 1
    loaded = {}
    for encoding in ("utf-8", "latin-1", "cp1252", "utf-16-le"):
        # latin-1 and cp1252 have no Ω: it becomes "?", the rest keeps its bytes
        named = data.replace(where, where + text.encode(encoding, "replace") + end, 1)
        path = tmp_path / f"{encoding}.{extension}"
        path.write_bytes(named)
        loaded[encoding] = load_mesh(path)
    if kind != "binary ply":  # a whole text file in UTF-16 or UTF-32 with its byte order mark
        for encoding in ("utf-16", "utf-16-be", "utf-32"):
            named = data.replace(where, where + text.encode() + end, 1).decode()
            mark = "\ufeff" if encoding == "utf-16-be" else ""  # "utf-16" and "utf-32" add it
            path = tmp_path / f"whole-{encoding}.{extension}"
            path.write_bytes((mark + named).encode(encoding))
            loaded[f"whole {encoding}"] = load_mesh(path)
    utf8 = loaded.pop("utf-8")
    assert utf8.triangle_count == 12
    for mesh in loaded.values():
        assert same_triangles(mesh, utf8)


# --- one clear message per broken file ----------------------------------------------------


def cut_binary_stl(data: bytes) -> bytes:
    return data[:600]


def ply_cut_in_header(data: bytes) -> bytes:
    return data[: data.index(b"property float y") + 5]


def ply_cut_in_data(data: bytes) -> bytes:
    return data[:-7]


def obj_face_past_the_last_vertex(data: bytes) -> bytes:
    return data.replace(b"\nf 2 4 1", b"\nf 2 4 9", 1)


def off_with_one_face_too_many(data: bytes) -> bytes:
    return data.replace(b"8 12 0", b"8 13 0", 1)


@pytest.mark.parametrize(
    "kind, corrupt, message",
    [
        ("binary ply", lambda data: b"", r"\(PLY file\): the file is empty"),
        ("off", lambda data: b"", r"\(OFF file\): the file is empty"),
        ("binary ply", ply_cut_in_header, r"\(PLY file\): the header is cut off"),
        ("ascii ply", ply_cut_in_header, r"\(PLY file\): the header is cut off"),
        ("binary ply", ply_cut_in_data, r"\(PLY file\): the data is cut off: .* 12 face"),
        ("ascii ply", ply_cut_in_data, r"\(PLY file\): the data is cut off"),
        ("binary stl", cut_binary_stl, r"the 12 triangles in the header .* 684 bytes, .* 600"),
        ("obj", obj_face_past_the_last_vertex, r"\(OBJ file\): a face refers to a vertex"),
        ("off", off_with_one_face_too_many, r"\(OFF file\): .* 8 vertices and 13 faces"),
        ("binary stl", lambda data: b"\x01" * 40, r"shorter than the 84-byte header"),
    ],
)
def test_a_broken_file_gets_one_line_naming_file_format_and_fault(tmp_path, kind, corrupt, message):
    extension, data = box_file(kind)
    path = tmp_path / f"model.{extension}"
    path.write_bytes(corrupt(data))
    with pytest.raises(MeshError) as caught:
        load_mesh(path)
    text = str(caught.value)
    assert text.startswith(f"{path}: cannot read mesh") and "\n" not in text
    assert re.search(message, text), text


def test_the_extension_decides_the_format_and_a_missing_one_is_named(tmp_path):
    _, data = box_file("binary ply")
    bare = tmp_path / "model"
    bare.write_bytes(data)
    with pytest.raises(MeshError) as caught:
        load_mesh(bare)
    assert re.fullmatch(
        rf"cannot tell the mesh format of {re.escape(str(bare))}: no file extension "
        r"\(supported: .*\.obj, .*\.ply, .*\.stl.*\)",
        str(caught.value),
    )
    unknown = tmp_path / "model.mesh"
    unknown.write_bytes(data)
    with pytest.raises(MeshError, match=r"model\.mesh: unknown mesh format \.mesh \(supported"):
        load_mesh(unknown)
    upper = tmp_path / "MODEL.PLY"
    upper.write_bytes(data)
    assert load_mesh(upper).triangle_count == 12


def test_the_command_line_says_it_in_one_line(tmp_path, capsys):
    _, data = box_file("binary ply")
    path = tmp_path / "model.ply"
    path.write_bytes(ply_cut_in_header(data))
    assert_one_line_error(*run_cli(capsys, path, "--grid", 16), "the header is cut off")


# --- fuzzing: a Mesh or a MeshError, nothing else, quickly --------------------------------


def broken_versions(kind: str, data: bytes, rng: np.random.Generator) -> Iterator[bytes]:
    """Truncations at many offsets, single bit flips, and counts in the header made wrong."""
    for end in sorted(set(rng.integers(0, len(data), 24).tolist()) | {0, 1, len(data) - 1}):
        yield data[:end]
    for bit in rng.integers(0, 8 * len(data), 24).tolist():
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << bit % 8
        yield bytes(flipped)
    for count in (0, 1, 7, 13, 1 << 31, (1 << 32) - 1):
        if kind.endswith("ply"):
            yield data.replace(b"element vertex 8", b"element vertex %d" % count)
            yield data.replace(b"element face 12", b"element face %d" % count)
        elif kind == "off":
            yield data.replace(b"8 12 0", b"8 %d 0" % count)
            yield data.replace(b"8 12 0", b"%d 12 0" % count)
        elif kind == "binary stl":
            yield data[:80] + (count % (1 << 32)).to_bytes(4, "little") + data[84:]
        elif kind == "obj":
            yield data.replace(b"f 2 4 1", b"f 2 4 %d" % (count - 9))
        else:
            yield data.replace(b"endsolid", b"endsolid" * (count % 3))


@pytest.mark.parametrize("kind", KINDS)
def test_broken_mesh_files_load_or_raise_mesh_error(tmp_path, kind):
    extension, data = box_file(kind)
    rng = np.random.default_rng(15)
    for number, broken in enumerate(broken_versions(kind, data, rng)):
        text = assert_loads_or_names_the_file(tmp_path / f"{number}.{extension}", broken)
        assert "list index out of range" not in text and "not supported" not in text


# --- --bounds with negative numbers in any notation ----------------------------------------


@pytest.fixture
def recorded_bounds(monkeypatch):
    """voxelize() replaced by the CPU reference, recording the bounds the command passes."""
    calls = []

    def fake(model, grid, **options):
        calls.append(options["bounds"])
        result = voxelize_reference(
            load_mesh(model), grid, voxel_size=options["voxel_size"], bounds=options["bounds"]
        )
        return SVO.from_dense(result.to_numpy(), result.placement, Stats(device="reference"))

    monkeypatch.setattr(api, "voxelize", fake)
    return calls


@pytest.mark.parametrize(
    "words",
    [
        ["--bounds", "-1e3", "-1e3", "-1e3", "1e3", "1e3", "1e3"],
        ["--bounds", "-1E+3", "-1000", "-.1e4", "1e3", "+1e3", "1000.0"],
        ["--bounds=-1e3,-1e3,-1e3,1e3,1e3,1e3"],
    ],
)
def test_bounds_take_negative_numbers_in_any_notation(tmp_path, capsys, recorded_bounds, words):
    _, data = box_file("binary ply")
    model = tmp_path / "box.ply"
    model.write_bytes(data)
    code, _, stderr = run_cli(capsys, *words, model, "--grid", "8", "--quiet")
    assert code == 0, stderr
    assert np.array_equal(recorded_bounds[-1], [[-1000.0] * 3, [1000.0] * 3])


def test_bounds_still_want_six_numbers(tmp_path, capsys):
    message = cli_usage_error(
        capsys, "box.ply", "--bounds", "-1e3", "-1e3", "-1e3", "1e3", "1e3", "--quiet"
    )
    assert "expected 6 arguments" in message


def test_the_checks_of_a_large_mesh_see_every_chunk():
    """Past 2^18 rows the checks run in row chunks on several threads: a fault or an extreme
    in the last rows only is still found, and the derived arrays equal numpy's own."""
    rng = np.random.default_rng(3)
    vertices = rng.uniform(-1, 1, (400_000, 3))
    faces = rng.integers(0, len(vertices) - 2, (700_000, 3))  # the last two vertices unused
    vertices[-1] = 50.0  # a stray vertex: outside, but counts for nothing
    mesh = Mesh(vertices, faces)
    assert mesh.problem == ""
    used = np.zeros(len(vertices), bool)
    used[faces.reshape(-1)] = True
    assert np.array_equal(mesh.used, used)
    inner = vertices[used]
    assert np.array_equal(mesh.bounds, [inner.min(axis=0), inner.max(axis=0)])
    assert mesh.indices.dtype == np.uint32 and np.array_equal(mesh.indices, faces)
    faces[-1, 2] = len(vertices) - 2  # now used, from the last face
    vertices[-2] = [7.0, -9.0, 8.0]
    low, high = Mesh(vertices, faces).bounds
    assert low[1] == -9.0 and high[0] == 7.0 and high[2] == 8.0
    for fault, message in (
        (lambda v, f: f.__setitem__((-1, 0), len(v)), "does not exist"),
        (lambda v, f: f.__setitem__((-1, 1), -1), "does not exist"),
        (lambda v, f: v.__setitem__((f[-1, 0], 1), np.nan), "NaN or infinity"),
    ):
        v, f = vertices.copy(), faces.copy()
        fault(v, f)
        assert message in Mesh(v, f).problem
