"""Mesh files that unpack (.zip, .tar.gz, .tar.bz2, .stl.bz2 and the like) and the files a
glTF names: read within the host's memory, from regular files only.

A few KB of compressed zeros can unpack to gigabytes. Archives that declare their members'
sizes (zip, tar) are checked against the memory available before anything is unpacked; a
.bz2 stream declares nothing, so it is unpacked here a piece at a time and refused as soon
as it outgrows that memory. A glTF's buffers and images are read only from regular files
inside its folder (never a FIFO, which would block, nor a device such as /dev/zero).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from ..budget import available_host_memory, check_host_fits
from ..errors import MemoryBudgetError, MeshError
from .files import read_regular

if TYPE_CHECKING:
    import trimesh

ARCHIVE_TYPES = ("zip", "tar.gz", "tar.bz2", "bz2")
# Host memory per unpacked byte while a mesh is parsed, the unpacked bytes included: a
# binary STL read by the native reader peaks at 3.3 times its size, by trimesh at 7.5.
NATIVE_MEMORY_FACTOR = 4
LIBRARY_MEMORY_FACTOR = 8
UNPACK_PIECE = 1 << 20  # bytes unpacked at a time from a .bz2 stream


def check_unpacked_size(path: Path, file: BinaryIO, file_type: str) -> None:
    """MeshError before trimesh unpacks a .zip or .tar archive whose members (all of which
    it unpacks) would not fit host memory while read, or that cannot be read as one."""
    import tarfile  # (with zipfile: for archives only, not with every reader)
    import zipfile

    label = file_type.upper()
    try:
        if file_type == "zip":
            with zipfile.ZipFile(file) as archive:
                unpacked = sum(info.file_size for info in archive.infolist())
                _check_fits(path, label, unpacked, LIBRARY_MEMORY_FACTOR)
        else:  # a tar stream: walked header by header, no further than memory allows
            with tarfile.open(fileobj=file, mode="r|*") as archive:
                for member in archive:
                    end = member.offset_data + member.size
                    _check_fits(path, label, end, LIBRARY_MEMORY_FACTOR)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise MeshError(f"{path}: cannot read mesh ({label} file): {exc}") from None
    finally:
        file.seek(0)


def bunzipped(path: Path, file: BinaryIO, factor: int) -> bytes:
    """The bytes of a .bz2 file (one stream or several in a row, as the bz2 module reads
    them), unpacked a piece at a time: MeshError as soon as they outgrow what host memory
    can parse (`factor` bytes of memory per byte), long before a bomb is all unpacked."""
    import bz2  # (for .bz2 files only)

    limit = _unpack_limit(factor)
    pieces: list[bytes] = []
    size = 0
    unpacker = bz2.BZ2Decompressor()
    first = True
    try:
        pending = file.read(UNPACK_PIECE)
        while pending or not unpacker.needs_input:
            try:
                piece = unpacker.decompress(pending, UNPACK_PIECE)
            except OSError:
                if first:
                    raise
                break  # bytes after the last stream that are no stream: the bz2 module's rule
            pending = b""
            pieces.append(piece)
            size += len(piece)
            if limit is not None and size > limit:
                _check_fits(path, "BZ2", size, factor, "(or more) ")  # unless memory was freed
                limit = _unpack_limit(factor)
            if unpacker.eof:  # another stream may follow
                pending = unpacker.unused_data or file.read(UNPACK_PIECE)
                if not pending:
                    break
                unpacker, first = bz2.BZ2Decompressor(), False
            elif unpacker.needs_input:
                pending = file.read(UNPACK_PIECE)
                if not pending:
                    raise EOFError("the compressed stream ends early")
    except (OSError, EOFError, ValueError) as exc:
        raise MeshError(f"{path}: cannot read mesh (BZ2 file): {exc}") from None
    return b"".join(pieces)


def _unpack_limit(factor: int) -> int | None:
    available = available_host_memory()
    return None if available is None else available // factor


def _check_fits(path: Path, label: str, unpacked: int, factor: int, more: str = "") -> None:
    try:
        check_host_fits(unpacked * factor, f"reading the {unpacked:,} bytes {more}it unpacks to")
    except MemoryBudgetError as exc:
        raise MeshError(f"{path}: cannot read mesh ({label} file): {exc}") from None


def regular_file_resolver(path: Path) -> trimesh.resolvers.Resolver:
    """trimesh's resolver of the files a glTF (or an OBJ's material) names, inside the mesh's
    folder as trimesh's own keeps them, reading regular files only (MeshError for a FIFO, a
    device, a symlink loop) and only what host memory holds."""
    import trimesh

    class RegularFileResolver(trimesh.resolvers.FilePathResolver):
        def get(self, name: str) -> bytes:
            for candidate in (name.strip(), name.strip().lstrip("/"), os.path.split(name)[-1]):
                try:
                    found = self.absolute(candidate)
                except (ValueError, RuntimeError, OSError):  # outside the folder, a loop
                    continue
                if os.path.lexists(found):
                    try:
                        return read_regular(found, MeshError)
                    except (MeshError, MemoryBudgetError) as exc:
                        raise MeshError(f"{path}: cannot read mesh: it names {exc}") from None
            raise FileNotFoundError(name)

        def namespaced(self, namespace: str) -> Any:
            return RegularFileResolver(os.path.join(self.parent, namespace))

    return RegularFileResolver(str(path))
