"""Mesh input: whatever the user hands us (a file, a trimesh.Trimesh, a Mesh, arrays) becomes
a checked Mesh. Files are read with trimesh, exactly as stored: no merging, no repair."""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Union

from ..errors import MeshError
from ..mesh import Mesh, checked_mesh, usable_mesh

if TYPE_CHECKING:
    import trimesh

MeshLike = Union[Mesh, str, os.PathLike, tuple, "trimesh.Trimesh"]


def load_mesh(source: MeshLike) -> Mesh:
    """Accept a path to anything trimesh reads, a trimesh.Trimesh, a Mesh, or (vertices, faces)."""
    if isinstance(source, Mesh):
        return usable_mesh(source, "mesh")
    if isinstance(source, (str, os.PathLike)):
        return read_mesh_file(Path(source))
    if isinstance(source, tuple) and len(source) == 2:
        return checked_mesh(source[0], source[1], "(vertices, faces)")
    if hasattr(source, "vertices") and hasattr(source, "faces"):
        return checked_mesh(source.vertices, source.faces, type(source).__name__)
    raise MeshError(
        f"cannot voxelize a {type(source).__name__}: pass a file path, a trimesh.Trimesh "
        "or a (vertices, faces) pair"
    )


def read_mesh_file(path: Path) -> Mesh:
    """The triangles of a mesh file, or MeshError saying why there are none to voxelize."""
    import trimesh  # only reading files needs it: arrays and Mesh objects load without it

    if not path.exists():
        raise MeshError(f"{path}: no such file")
    if not path.is_file():
        raise MeshError(f"{path}: not a file")
    file_type = _mesh_file_type(path)
    label = file_type.upper()
    try:
        if path.stat().st_size == 0:
            raise MeshError(f"{path}: cannot read mesh ({label} file): the file is empty")
        # The formats we check ourselves are read whole and handed over as bytes in UTF-8:
        # trimesh's own decoding needs charset_normalizer for any other byte in a comment.
        checked = _CHECKED_FORMATS.get(file_type)
        source: str | io.BytesIO = str(path)
        if checked is not None:
            source = io.BytesIO(checked(path.read_bytes()))
        with _quiet_trimesh_log():  # its warnings are tracebacks, and the error below says it
            loaded = trimesh.load(
                source,
                file_type=file_type if checked is not None else None,
                resolver=trimesh.resolvers.FilePathResolver(str(path)),
                process=False,
                force="mesh",
            )
    except MeshError:
        raise
    except _MalformedMeshFile as exc:
        raise MeshError(f"{path}: cannot read mesh ({label} file): {exc}") from None
    except OSError as exc:
        raise MeshError(f"{path}: cannot read mesh ({exc.strerror or exc})") from exc
    except Exception as exc:  # trimesh raises many types for bad files
        raise MeshError(
            f"{path}: cannot read mesh ({label} file): {_library_detail(exc, file_type)}"
        ) from exc
    # A point cloud or a path has no faces (every Geometry with faces has vertices too).
    if not hasattr(loaded, "faces") or not hasattr(loaded, "vertices") or loaded.faces is None:
        raise MeshError(f"{path}: the file holds no triangles")
    return checked_mesh(loaded.vertices, loaded.faces, str(path))


class _MalformedMeshFile(ValueError):
    """A fact about the file breaks its format: the message says which, for the MeshError."""


def _mesh_file_type(path: Path) -> str:
    """The format trimesh reads `path` as, from its extension, or MeshError naming the choice."""
    import trimesh

    formats = sorted(name for name in trimesh.available_formats() if "_" not in name)
    supported = ", ".join(f".{name}" for name in formats)
    name = path.name.lower()
    for compound in (fmt for fmt in formats if "." in fmt):  # tar.gz before gz
        if name.endswith(f".{compound}"):
            return compound
    suffix = path.suffix.lower().lstrip(".")
    if not suffix:
        raise MeshError(
            f"cannot tell the mesh format of {path}: no file extension (supported: {supported})"
        )
    if suffix not in formats:
        raise MeshError(f"{path}: unknown mesh format .{suffix} (supported: {supported})")
    return suffix


def _library_detail(exc: Exception, file_type: str) -> str:
    """What the library's exception means for this file, or its first line (or type)."""
    text = str(exc).strip()
    detail = text.splitlines()[0] if text else type(exc).__name__
    if file_type == "obj" and isinstance(exc, IndexError):  # a face past the last vertex
        return f"a face refers to a vertex that does not exist ({detail})"
    if "could not be read to its end" in detail:  # numpy parsing numbers from text
        return "a value that is not a number"
    if "unexpected length" in detail:  # trimesh, of binary PLY data
        return "the data does not match the header's elements and properties"
    return f"trimesh: {detail}"


@contextmanager
def _quiet_trimesh_log() -> Iterator[None]:
    """Silence trimesh's logger while it reads: it logs tracebacks for files it then rejects."""
    logger = logging.getLogger("trimesh")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)


def _as_utf8(data: bytes) -> bytes:
    """Text whose names and comments may be in any encoding, as UTF-8 that trimesh decodes
    without guessing: a byte that is not UTF-8 becomes U+FFFD (it never is a number)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace").encode("utf-8")
    return data


_STL_HEADER_BYTES = 84  # 80 bytes of anything, then the triangle count (uint32)
_STL_TRIANGLE_BYTES = 50  # normal, three corners (12 float32) and a uint16


def _checked_stl(data: bytes) -> bytes:
    """A binary STL whose size matches its triangle count (what trimesh tries first), else a
    complete ASCII STL; otherwise say what the size or the text lacks."""
    size = len(data)
    if size >= _STL_HEADER_BYTES:
        count = int.from_bytes(data[80:84], "little")
        expected = _STL_HEADER_BYTES + _STL_TRIANGLE_BYTES * count
        if size == expected:
            return data
        binary = (
            f"the {count:,} triangles in the header of a binary STL need {expected:,} bytes, "
            f"the file has {size:,}"
        )
    else:
        binary = f"{size:,} bytes, shorter than the 84-byte header of a binary STL"
    if data.lstrip()[:5].lower() != b"solid":
        raise _MalformedMeshFile(f"cut off or corrupt: {binary}")
    if b"endsolid" not in data.lower():
        raise _MalformedMeshFile(
            f"an ASCII STL cut off (no endsolid line), or a binary STL whose size is wrong "
            f"({binary})"
        )
    return _as_utf8(data)


def _checked_obj(data: bytes) -> bytes:
    """OBJ is text without counts: only its encoding needs care."""
    return _as_utf8(data)


def _checked_off(data: bytes) -> bytes:
    """Check the counts line against the rows that follow it (trimesh would silently drop
    missing faces and fail obscurely on missing vertices)."""
    text = _as_utf8(data)
    rows = [line.split(b"#", 1)[0].split() for line in text.splitlines()]
    rows = [row for row in rows if row]
    if not rows or not rows[0][0].endswith(b"OFF"):
        raise _MalformedMeshFile("it does not start with OFF")
    counts_row = 0 if len(rows[0]) > 1 else 1
    counts = rows[counts_row][1:] if counts_row == 0 else rows[1] if len(rows) > 1 else []
    try:
        vertex_count, face_count = int(counts[0]), int(counts[1])
    except (IndexError, ValueError):
        raise _MalformedMeshFile("no vertex and face counts after OFF") from None
    vertex_rows = rows[counts_row + 1 : counts_row + 1 + vertex_count]
    face_rows = rows[counts_row + 1 + vertex_count : counts_row + 1 + vertex_count + face_count]
    if vertex_count < 0 or face_count < 0 or len(face_rows) < face_count:
        raise _MalformedMeshFile(
            f"the header says {vertex_count:,} vertices and {face_count:,} faces, "
            f"the file has {len(rows) - counts_row - 1:,} rows after it"
        )
    for number, row in enumerate(vertex_rows):
        if len(row) < 3:
            raise _MalformedMeshFile(f"vertex {number} has {len(row)} coordinates, not 3")
    for number, row in enumerate(face_rows):
        if not row[0].isdigit() or len(row) < 1 + int(row[0]):
            raise _MalformedMeshFile(f"face {number} does not list its vertex count and indices")
    return text


# The property types of PLY headers (the names trimesh reads), in bytes.
_PLY_TYPE_BYTES = dict.fromkeys(("char", "uchar", "int8", "uint8"), 1)
_PLY_TYPE_BYTES |= dict.fromkeys(("short", "ushort", "int16", "uint16", "float16"), 2)
_PLY_TYPE_BYTES |= dict.fromkeys(("int", "uint", "int32", "uint32", "float", "float32"), 4)
_PLY_TYPE_BYTES |= dict.fromkeys(("int64", "uint64", "double", "float64"), 8)
_PLY_FORMATS = (b"ascii", b"binary_little_endian", b"binary_big_endian")


def _checked_ply(data: bytes) -> bytes:
    """Parse the header: the first line ply, a format line, elements with counts and
    properties of known types up to end_header; then check that the data after it holds
    at least the rows the counts ask for (trimesh fails obscurely, or silently drops rows)."""
    if b"ply" not in data.lstrip()[:80].split(b"\n", 1)[0].lower():
        raise _MalformedMeshFile("it does not start with a ply line")
    lines: list[bytes] = []
    position = 0
    while True:
        if position >= len(data):
            raise _MalformedMeshFile("the header is cut off (no end_header line)")
        end = data.find(b"\n", position)
        end = len(data) if end < 0 else end + 1
        line = data[position:end]
        position = end
        if line.split()[:1] == [b"end_header"]:
            break
        if line.strip():  # trimesh cannot read a blank header line, and it means nothing
            lines.append(line.rstrip(b"\r\n"))
    format_words = lines[1].split() if len(lines) > 1 else []
    if format_words[:1] != [b"format"] or len(format_words) < 2:
        raise _MalformedMeshFile("the second line is not a format line")
    if format_words[1] not in _PLY_FORMATS:
        raise _MalformedMeshFile(f"unknown format {_as_text(format_words[1])!r}")
    # Each element's name, count, and per property: is it a list, the bytes of the value (of
    # a list: of its count), the bytes of a list's item.
    elements: list[tuple[str, int, list[tuple[bool, int, int]]]] = []
    for line in lines[2:]:
        words = line.split()
        keyword = words[0]
        if keyword == b"element":
            if len(words) != 3 or not words[2].isdigit():
                raise _MalformedMeshFile(f"bad element line {_as_text(line)!r}")
            elements.append((_as_text(words[1]), int(words[2]), []))
        elif keyword == b"property":
            if not elements:
                raise _MalformedMeshFile("a property line before any element line")
            is_list = words[1:2] == [b"list"]
            types = words[2:4] if is_list else words[1:2]
            known = all(_as_text(word) in _PLY_TYPE_BYTES for word in types)
            if len(words) != (5 if is_list else 3) or not known:
                raise _MalformedMeshFile(f"bad property line {_as_text(line)!r}")
            sizes = [_PLY_TYPE_BYTES[_as_text(word)] for word in types]
            elements[-1][2].append((is_list, sizes[0], sizes[-1] if is_list else 0))
    body = data[position:]
    declared = ", ".join(f"{count:,} {name}" for name, count, _ in elements)
    if format_words[1] == b"ascii":
        body = _as_utf8(body)
        data_lines = [line for line in body.splitlines() if line.strip()]
        needed = sum(count for _, count, _ in elements)
        if len(data_lines) < needed:
            raise _MalformedMeshFile(
                f"the data is cut off: the header declares {declared} ({needed:,} lines), "
                f"the file has {len(data_lines):,}"
            )
        last_row = 0
        for name, count, properties in elements:
            last_row += count
            if count and not _ply_row_complete(data_lines[last_row - 1].split(), properties):
                raise _MalformedMeshFile(f"the data is cut off: the last {name} row is incomplete")
    else:
        big_endian = format_words[1] == b"binary_big_endian"
        needed = _ply_binary_bytes(body, elements, "big" if big_endian else "little")
        if len(body) < needed:
            raise _MalformedMeshFile(
                f"the data is cut off: the header declares {declared} ({needed:,} bytes), "
                f"the file has {len(body):,} after the header"
            )
    header = b"".join(_as_utf8(line) + b"\n" for line in lines) + b"end_header\n"
    return header + body


def _ply_binary_bytes(
    body: bytes,
    elements: list[tuple[str, int, list[tuple[bool, int, int]]]],
    byteorder: Literal["little", "big"],
) -> int:
    """The bytes of binary PLY data if every list of an element is as long as in its first
    row (as trimesh reads it); more than the body has when a first row is missing."""
    offset = 0
    for _, count, properties in elements:
        row_bytes = 0
        for is_list, size, item_size in properties:
            if is_list and count:
                start = offset + row_bytes
                if start + size > len(body):
                    return start + size
                row_bytes += int.from_bytes(body[start : start + size], byteorder) * item_size
            row_bytes += size
        offset += count * row_bytes
    return offset


def _ply_row_complete(words: list[bytes], properties: list[tuple[bool, int, int]]) -> bool:
    """Whether an ASCII PLY row holds every property (a list: its count, then that many)."""
    used = 0
    for is_list, _, _ in properties:
        if is_list:
            if used >= len(words) or not words[used].isdigit():
                return False
            used += int(words[used])
        used += 1
    return used <= len(words)


def _as_text(line: bytes) -> str:
    """A header line for a message, whatever its bytes."""
    return line.decode("utf-8", "replace")


_CHECKED_FORMATS = {
    "ply": _checked_ply,
    "stl": _checked_stl,
    "obj": _checked_obj,
    "off": _checked_off,
}
