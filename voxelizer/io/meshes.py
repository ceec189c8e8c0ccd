"""Mesh input: whatever the user hands us (a file, a trimesh.Trimesh, a Mesh, arrays) becomes
a checked Mesh. Files are read as stored, with no repair; only an STL's corners, which the
format repeats for every triangle, are merged where their positions are equal.

PLY, STL and OBJ are read natively (ply_file, stl_file, obj_file: numpy on the mapped file);
every other format goes through trimesh, imported only then."""

from __future__ import annotations

import io
import logging
import mmap
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Union

import numpy as np

from ..errors import MeshError
from ..mesh import Mesh, checked_mesh, usable_mesh
from .files import open_regular, os_error_text
from .mesh_archives import (
    ARCHIVE_TYPES,
    LIBRARY_MEMORY_FACTOR,
    NATIVE_MEMORY_FACTOR,
    bunzipped,
    check_unpacked_size,
    regular_file_resolver,
)
from .mesh_parsing import MalformedMesh, MeshBytes, ReadMesh, text_bytes
from .obj_file import read_obj
from .ply_file import read_ply
from .stl_file import read_stl

if TYPE_CHECKING:
    import trimesh

MeshLike = Union[Mesh, str, os.PathLike, tuple, "trimesh.Trimesh"]

NATIVE_READERS: dict[str, Callable[[MeshBytes], ReadMesh]] = {
    "ply": read_ply,
    "stl": read_stl,
    "obj": read_obj,
}
"""The formats read without trimesh, by extension."""


def load_mesh(source: MeshLike) -> Mesh:
    """Accept a path to a mesh file (PLY, STL, OBJ, or anything trimesh reads), a
    trimesh.Trimesh or trimesh.Scene (with its parts and colours), a Mesh, or (vertices,
    faces)."""
    if isinstance(source, Mesh):
        return usable_mesh(source, "mesh")
    if isinstance(source, (str, os.PathLike)):
        return read_mesh_file(Path(source))
    if isinstance(source, tuple) and len(source) == 2:
        return checked_mesh(source[0], source[1], "(vertices, faces)")
    if type(source).__module__.startswith("trimesh") and hasattr(source, "dump"):
        from .trimesh_meshes import mesh_of_trimesh  # a Scene: its instances are its parts

        return mesh_of_trimesh(source, type(source).__name__)
    if hasattr(source, "vertices") and hasattr(source, "faces"):
        if type(source).__module__.startswith("trimesh") and hasattr(source, "visual"):
            from .trimesh_meshes import mesh_of_trimesh

            return mesh_of_trimesh(source, type(source).__name__)
        return checked_mesh(source.vertices, source.faces, type(source).__name__)
    raise MeshError(
        f"cannot voxelize a {type(source).__name__}: pass a file path, a trimesh.Trimesh "
        "or a (vertices, faces) pair"
    )


def read_mesh_file(path: Path) -> Mesh:
    """The triangles of a mesh file, or MeshError saying why there are none to voxelize.
    Only a regular file is read (a FIFO, a device or a folder is refused)."""
    with open_regular(path, MeshError, missing="no such file") as file:
        file_type = _mesh_file_type(path)
        label = file_type.upper()
        try:
            if os.fstat(file.fileno()).st_size == 0:
                raise MeshError(f"{path}: cannot read mesh ({label} file): the file is empty")
            if file_type == "bz2":  # one compressed file: unpacked here, within memory
                return _read_bunzipped(path, file)
            if file_type not in NATIVE_READERS:
                return _read_with_trimesh(path, file, file_type)
            data = _mapped(file)
        except OSError as exc:
            raise MeshError(f"{path}: cannot read mesh ({os_error_text(exc)})") from exc
    return _read_natively(path, data, file_type)


def _read_natively(path: Path, data: MeshBytes, file_type: str) -> Mesh:
    """The mesh of a PLY, STL or OBJ file's bytes (or its mapping, closed here)."""
    try:
        try:
            read = NATIVE_READERS[file_type](data)
        finally:
            if isinstance(data, mmap.mmap):
                with suppress(BufferError):  # a view held by a traceback: closed when freed
                    data.close()
    except MalformedMesh as exc:
        raise MeshError(f"{path}: cannot read mesh ({file_type.upper()} file): {exc}") from None
    if len(read.faces) == 0:
        raise MeshError(f"{path}: the mesh has no triangles")
    appearance = None if read.appearance is None else read.appearance(path)
    return usable_mesh(Mesh(read.vertices, read.faces, read.parts, appearance), str(path))


def _read_bunzipped(path: Path, file: BinaryIO) -> Mesh:
    """A mesh file compressed with bzip2 (mesh.stl.bz2): the format is the name's without
    .bz2; unpacked within host memory, then read as that format."""
    inner = Path(path.name[: -len(".bz2")]) if path.name.lower().endswith(".bz2") else Path("")
    inner_type = _mesh_file_type(inner) if inner.suffix else ""
    if not inner_type or inner_type in ARCHIVE_TYPES:
        raise MeshError(
            f"{path}: cannot read mesh (BZ2 file): name it after the mesh it holds "
            "(mesh.stl.bz2, mesh.ply.bz2, ...)"
        )
    native = inner_type in NATIVE_READERS
    data = bunzipped(path, file, NATIVE_MEMORY_FACTOR if native else LIBRARY_MEMORY_FACTOR)
    if native:
        return _read_natively(path, data, inner_type)
    return _read_with_trimesh(path, io.BytesIO(data), inner_type)


def _mapped(file: BinaryIO) -> MeshBytes:
    """The file mapped into memory (binary data is read in place), or read whole where it
    cannot be mapped."""
    try:
        return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return file.read()


def _read_with_trimesh(path: Path, file: BinaryIO, file_type: str) -> Mesh:
    """A format of trimesh's own (OFF, GLB, ...) or an archive of meshes, read by it from the
    open file (archives checked first: check_unpacked_size)."""
    import trimesh  # only these formats need it: importing voxelizer does not

    label = file_type.upper()
    try:
        if file_type in ARCHIVE_TYPES:
            check_unpacked_size(path, file, file_type)
        # The formats we check ourselves are read whole and handed over as bytes in UTF-8:
        # trimesh's own decoding needs charset_normalizer for any other byte in a comment.
        checked = _CHECKED_FORMATS.get(file_type)
        source: BinaryIO = io.BytesIO(checked(file.read())) if checked is not None else file
        with _quiet_trimesh_log():  # its warnings are tracebacks, and the error below says it
            loaded = trimesh.load(
                source,
                file_type=file_type,
                resolver=regular_file_resolver(path),
                process=False,
                force="scene",  # its instances are the parts (to_mesh's order: trimesh_meshes)
            )
    except MeshError:
        raise
    except MalformedMesh as exc:
        raise MeshError(f"{path}: cannot read mesh ({label} file): {exc}") from None
    except OSError as exc:
        raise MeshError(f"{path}: cannot read mesh ({os_error_text(exc)})") from exc
    except Exception as exc:  # trimesh raises many types for bad files
        raise MeshError(
            f"{path}: cannot read mesh ({label} file): {_library_detail(exc, file_type)}"
        ) from exc
    from .trimesh_meshes import mesh_of_trimesh  # a point cloud or a path: no triangles

    return mesh_of_trimesh(loaded, str(path))


def _mesh_file_type(path: Path) -> str:
    """The format `path` is read as, from its extension, or MeshError naming the choice.
    The native formats need no trimesh; any other extension is checked against its list."""
    name = path.name.lower()
    suffix = path.suffix.lower().lstrip(".")
    if suffix in NATIVE_READERS:
        return suffix
    formats = _trimesh_formats(path, suffix)
    supported = ", ".join(f".{name}" for name in formats)
    for compound in (fmt for fmt in formats if "." in fmt):  # tar.gz before gz
        if name.endswith(f".{compound}"):
            return compound
    if not suffix:
        raise MeshError(
            f"cannot tell the mesh format of {path}: no file extension (supported: {supported})"
        )
    if suffix not in formats:
        raise MeshError(f"{path}: unknown mesh format .{suffix} (supported: {supported})")
    return suffix


def _trimesh_formats(path: Path, suffix: str) -> list[str]:
    """The mesh formats that can be read: the native ones and all of trimesh's."""
    try:
        import trimesh
    except ImportError:
        native = ", ".join(f".{name}" for name in sorted(NATIVE_READERS))
        raise MeshError(
            f"{path}: the mesh format .{suffix} needs trimesh (pip install trimesh); "
            f"without it voxelizer reads {native}"
        ) from None
    names = {name for name in trimesh.available_formats() if "_" not in name}
    return sorted(names | set(NATIVE_READERS))


def _library_detail(exc: Exception, file_type: str) -> str:
    """What the library's exception means for this file, or its first line (or type)."""
    text = str(exc).strip()
    detail = text.splitlines()[0] if text else type(exc).__name__
    if "could not be read to its end" in detail:  # numpy parsing numbers from text
        return "a value that is not a number"
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
    without guessing: a byte that is not UTF-8 becomes U+FFFD (it never is a number). A
    UTF-16 or UTF-32 file (with its byte order mark) is converted first."""
    data = text_bytes(data)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace").encode("utf-8")
    return data


def _checked_off(data: bytes) -> bytes:
    """Check the counts line against the rows that follow it (trimesh would silently drop
    missing faces and fail obscurely on missing vertices)."""
    text = _as_utf8(data)
    rows = [line.split(b"#", 1)[0].split() for line in text.splitlines()]
    rows = [row for row in rows if row]
    if not rows or not rows[0][0].endswith(b"OFF"):
        raise MalformedMesh("it does not start with OFF")
    counts_row = 0 if len(rows[0]) > 1 else 1
    counts = rows[counts_row][1:] if counts_row == 0 else rows[1] if len(rows) > 1 else []
    try:
        vertex_count, face_count = int(counts[0]), int(counts[1])
    except (IndexError, ValueError):
        raise MalformedMesh("no vertex and face counts after OFF") from None
    vertex_rows = rows[counts_row + 1 : counts_row + 1 + vertex_count]
    face_rows = rows[counts_row + 1 + vertex_count : counts_row + 1 + vertex_count + face_count]
    if vertex_count < 0 or face_count < 0 or len(face_rows) < face_count:
        raise MalformedMesh(
            f"the header says {vertex_count:,} vertices and {face_count:,} faces, "
            f"the file has {len(rows) - counts_row - 1:,} rows after it"
        )
    for number, row in enumerate(vertex_rows):
        if len(row) < 3:
            raise MalformedMesh(f"vertex {number} has {len(row)} coordinates, not 3")
    for number, row in enumerate(face_rows):
        if not row[0].isdigit() or len(row) < 1 + int(row[0]):
            raise MalformedMesh(f"face {number} does not list its vertex count and indices")
    return text


_CHECKED_FORMATS = {"off": _checked_off}
"""Formats read by trimesh whose files we check first, for a clear message."""


def load_meshes(sources: list[MeshLike]) -> Mesh:
    """Several meshes as one, each a part (its own parts as parts of it, named "NAME/PART"):
    vertices and faces one mesh after another, named by file name (without the extension)
    or "mesh N" (counted from 1)."""
    from ..attributes.appearance import joined_appearance, joined_parts

    if not sources:
        raise MeshError("an empty list of meshes: give one mesh or more")
    meshes = [load_mesh(source) for source in sources]
    names = [
        Path(source).stem if isinstance(source, (str, os.PathLike)) else f"mesh {number}"
        for number, source in enumerate(sources, start=1)
    ]
    if len(meshes) == 1 and meshes[0].parts is not None:
        return meshes[0]
    vertex_counts = [len(mesh.vertices) for mesh in meshes]
    face_counts = [mesh.triangle_count for mesh in meshes]
    offsets = np.cumsum([0, *vertex_counts[:-1]])
    vertices = np.vstack([mesh.vertices for mesh in meshes])
    faces = np.vstack([mesh.faces + offset for mesh, offset in zip(meshes, offsets)])
    parts = joined_parts([mesh.parts for mesh in meshes], face_counts, names)
    appearance = joined_appearance([mesh.appearance for mesh in meshes], vertex_counts, face_counts)
    return usable_mesh(Mesh(vertices, faces, parts, appearance), "the meshes")
