""".npz files of a dense grid: np.packbits of the [i, j, k] array with its shape, origin and
voxel size, so that numpy alone can read them back."""

from __future__ import annotations

import math
import os
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import numpy as np

from ..budget import check_host_fits
from ..errors import FormatError, GridError
from ..grid import ColumnBits, DenseGrid
from ..placement import GridPlacement, Placed, check_shape, shape_text
from .files import open_regular, os_error_text
from .output import open_output

NPZ_KEYS = ("bits", "shape", "origin", "voxel_size")
# zlib level 1, not np.savez_compressed's 6: the bits compress several times faster into a
# somewhat larger file (docs/benchmarks.md, "Figures behind the code"); a dataset batch
# writes thousands.
NPZ_COMPRESS_LEVEL = 1
FACE_IDS_KEY = "face_ids"  # optional: int32 (nx, ny, nz), -1 where no triangle marks the voxel
LABELS_KEY = "labels"  # optional: uint16 (nx, ny, nz), 0 for empty voxels, part p + 1 else
LABEL_NAMES_KEY = "label_names"  # with labels: str (P,), the name of label l at l - 1
COLORS_KEY = "colors"  # optional: uint8 (nx, ny, nz, 4), RGBA, 0 for empty voxels


def write_npz(result: Placed, path: str | os.PathLike, overwrite: bool = False) -> None:
    """Packed bits (np.packbits of the [i, j, k] array) with shape, origin and voxel size
    (a float, or the three sizes (hx, hy, hz) of voxels that are not cubes), and the face
    ids (int32), labels (uint16, with their names) and colours (uint8 RGBA) as [i, j, k]
    arrays when the result carries them."""
    columns = result.columns if isinstance(result, DenseGrid) else None
    size = result.voxel_size
    arrays = {  # the GPU's words packed straight away when the grid still holds them
        "bits": packed_bits(result.to_numpy()) if columns is None else columns.packed_bits(),
        "shape": np.array(result.shape, np.int64),
        "origin": np.asarray(result.placement.origin, np.float64),
        # one float for cubes (as files before voxels of three sizes), else (hx, hy, hz)
        "voxel_size": np.float64(size) if isinstance(size, float) else np.array(size, np.float64),
    }
    if "face" in result.attributes:
        arrays[FACE_IDS_KEY] = result.to_numpy("face")
    if "label" in result.attributes:
        arrays[LABELS_KEY] = result.to_numpy("label")
        arrays[LABEL_NAMES_KEY] = np.array(getattr(result, "label_names", ()), dtype=str)
    if "color" in result.attributes:
        arrays[COLORS_KEY] = result.to_numpy("color")
    with (
        open_output(path, overwrite) as fh,
        zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED, compresslevel=NPZ_COMPRESS_LEVEL) as archive,
    ):
        for name, array in arrays.items():  # the members np.savez_compressed would write
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                write_npy(member, np.asanyarray(array))


def write_npy(member: IO[bytes], array: np.ndarray) -> None:
    """The bytes np.lib.format.write_array writes (a version 1.0 header, then the data in C
    order), the data handed over as a view. write_array copies it into a bytes object first
    for a file that is not a real one (a zip member), a copy that holds the GIL for
    milliseconds: in a batch, the device's thread waits that long for it between its Vulkan
    calls (crc32 and the compressor, which this view goes to, release it)."""
    data = array if array.flags.c_contiguous else array.copy(order="C")  # keeps 0-d as 0-d
    np.lib.format.write_array_header_1_0(member, np.lib.format.header_data_from_array_1_0(data))
    member.write(data.reshape(-1).view(np.uint8).data)


def packed_bits(voxels: np.ndarray) -> np.ndarray:
    """np.packbits(voxels, axis=None): the bits of the [i, j, k] array in C order. A grid
    that is the GPU's [j, i, k] array seen transposed (DenseGrid's, usually) is packed along
    k in its own order, then only the bytes are transposed: eight times less to reorder
    than the bools (whole bytes per column when nz is a multiple of 8)."""
    stored = voxels.transpose(1, 0, 2)
    if voxels.flags.c_contiguous or not stored.flags.c_contiguous or voxels.shape[2] % 8:
        return np.packbits(voxels, axis=None)
    columns = np.packbits(stored, axis=2)  # (ny, nx, nz / 8)
    return np.ascontiguousarray(columns.transpose(1, 0, 2)).reshape(-1)


def read_npz(path: str | os.PathLike) -> DenseGrid:
    """The DenseGrid of an .npz file written by write_npz; FormatError if it is not one.

    The archive is read member by member, each array's header first: its dtype and shape
    must be what the grid's shape implies, and host memory must hold the grid, before any
    array is allocated or inflated (a few KB of zeros can claim gigabytes). The bits are
    inflated straight into their array and unpacked into the bools in place."""
    path = Path(path)
    with _read_errors(path, "not a voxel grid .npz file"), _archive(path) as archive:
        members = _members(archive)
        placement = _placement_of(path, archive, members)
        shape = placement.shape
        voxel_count = math.prod(shape)
        bit_bytes = -(-voxel_count // 8)
        faces_member = members.get(FACE_IDS_KEY)
        attributes = 4 * (faces_member is not None) + 2 * (LABELS_KEY in members)
        attributes += 4 * (COLORS_KEY in members)  # bytes a voxel of ids, labels, colours
        # Whole bytes per column and no arrays to check against the voxels: the grid is
        # kept as column words (an eighth of the bools: voxelizer.grid.ColumnBits).
        as_words = shape[2] % 8 == 0 and attributes == 0
        need = 3 * bit_bytes if as_words else bit_bytes + voxel_count
        check_host_fits(need + attributes * voxel_count, f"{path}: the {shape_text(shape)} grid")
        bits = _bits(archive, members, placement)
        if as_words:
            return DenseGrid.of_columns(ColumnBits.of_packed_bits(bits, shape), placement)
        voxels = np.unpackbits(bits, count=voxel_count).view(bool).reshape(shape)
        del bits
        faces = None
        if faces_member is not None:
            faces = _array(
                archive, faces_member, shape, "i", 4,
                lambda found: f"face ids are not int32 of the shape {shape} ({found})",
            )  # fmt: skip
            if (faces < -1).any() or (~voxels & (faces >= 0)).any():
                raise FormatError(f"{path}: a face id below -1, or on an empty voxel")
        labels, names, colors = _attribute_arrays(path, archive, members, voxels)
    return DenseGrid(voxels, placement, face_ids=faces).with_attributes(labels, colors, names)


def _attribute_arrays(
    path: Path, archive: zipfile.ZipFile, members: dict[str, zipfile.ZipInfo], voxels: np.ndarray
) -> tuple[np.ndarray | None, tuple[str, ...], np.ndarray | None]:
    """The labels, their names and the colours of an .npz file, checked against its voxels
    (FormatError), or None and () where it has none."""
    shape = voxels.shape
    labels: np.ndarray | None = None
    colors: np.ndarray | None = None
    names: tuple[str, ...] = ()
    if LABELS_KEY in members:
        labels = _array(
            archive, members[LABELS_KEY], shape, "u", 2,
            lambda found: f"labels are not uint16 of the shape {shape} ({found})",
        )  # fmt: skip
        if LABEL_NAMES_KEY in members:
            if members[LABEL_NAMES_KEY].file_size > MAX_NAMES_BYTES:
                raise FormatError(f"{path}: the label names take over {MAX_NAMES_BYTES} bytes")
            found = _array(archive, members[LABEL_NAMES_KEY], None, "U", None, _refusal("names"))
            names = tuple(str(name) for name in found.reshape(-1))
        if ((labels > 0) != voxels).any() or (labels.size and int(labels.max()) > len(names)):
            raise FormatError(f"{path}: labels do not match the voxels, or lack names")
    if COLORS_KEY in members:
        colors = _array(
            archive, members[COLORS_KEY], (*shape, 4), "u", 1,
            lambda found: f"colours are not uint8 of the shape {(*shape, 4)} ({found})",
        )  # fmt: skip
    return labels, names, colors


MAX_NAMES_BYTES = 1 << 26  # the label names' array: far more than any file's parts


def read_npz_bits(path: str | os.PathLike) -> tuple[np.ndarray, GridPlacement]:
    """The packed bits (np.packbits of the [i, j, k] grid, one byte array) and the placement
    of an .npz file written by write_npz, checked as read_npz checks them, without unpacking
    them: for readers that keep the bits packed (the torch dataset)."""
    path = Path(path)
    with _read_errors(path, "not a voxel grid .npz file"), _archive(path) as archive:
        members = _members(archive)
        placement = _placement_of(path, archive, members)
        bit_bytes = -(-math.prod(placement.shape) // 8)
        check_host_fits(bit_bytes, f"{path}: the {shape_text(placement.shape)} grid")
        return _bits(archive, members, placement), placement


def read_npz_arrays(path: str | os.PathLike, what: str) -> dict[str, np.ndarray]:
    """Every array of an .npz file (by np.load's names), for readers of .npz files other
    than voxel grids (triangle grids): a regular file, each member's header read before its
    array is allocated and its size within the member's, host memory for all of them, no
    pickled objects; FormatError saying `path`: not `what` otherwise."""
    path = Path(path)
    with _read_errors(path, f"not {what}"), _archive(path) as archive:
        members = _members(archive)
        check_host_fits(sum(info.file_size for info in members.values()), f"{path}: its arrays")
        return {
            name: _array(archive, info, None, "biuf", None, _refusal(name))
            for name, info in members.items()
        }


@contextmanager
def _archive(path: Path) -> Iterator[zipfile.ZipFile]:
    """The .npz file `path` as a zip archive, if it is a regular file (FormatError if not)."""
    with open_regular(path, FormatError) as file, zipfile.ZipFile(file) as archive:
        yield archive


@contextmanager
def _read_errors(path: Path, what: str) -> Iterator[None]:
    """Whatever reading `path` raises, as one FormatError naming it (`what` it is not)."""
    try:
        yield
    except _BadMember as exc:
        raise FormatError(f"{path}: {exc}") from None
    except OSError as exc:
        raise FormatError(f"{path}: cannot read ({os_error_text(exc)})") from exc
    except (ValueError, TypeError, GridError, zipfile.BadZipFile, EOFError, zlib.error) as exc:
        raise FormatError(f"{path}: {what} ({exc})") from exc


def _placement_of(
    path: Path, archive: zipfile.ZipFile, members: dict[str, zipfile.ZipInfo]
) -> GridPlacement:
    missing = [key for key in NPZ_KEYS if key not in members]
    if missing:
        raise FormatError(f"{path}: not a voxel grid (.npz without {', '.join(missing)})")
    return _placement(archive, members)


def _bits(
    archive: zipfile.ZipFile, members: dict[str, zipfile.ZipInfo], placement: GridPlacement
) -> np.ndarray:
    shape = placement.shape
    return _array(
        archive, members["bits"], (-(-math.prod(shape) // 8),), "u", 1,
        lambda found: f"{found} of bits do not fit the shape {shape}",
    )  # fmt: skip


class _BadMember(Exception):
    """A member of the archive that is not what a voxel grid .npz holds (the message says)."""


SMALL_MEMBER_BYTES = 4096  # shape, origin and voxel size: a header and a few numbers


def _members(archive: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    """The archive's arrays by name ("bits" for the member bits.npy), as np.load names them."""
    members: dict[str, zipfile.ZipInfo] = {}
    for info in archive.infolist():
        name = info.filename[: -len(".npy")] if info.filename.endswith(".npy") else info.filename
        members.setdefault(name, info)
    return members


def _placement(archive: zipfile.ZipFile, members: dict[str, zipfile.ZipInfo]) -> GridPlacement:
    """Shape, origin and voxel size, checked as the .svo reader checks its header: integer
    sides (8.5 is no side), a finite origin, a positive finite voxel size."""
    small = {}
    for key in ("shape", "origin", "voxel_size"):
        if members[key].file_size > SMALL_MEMBER_BYTES:
            raise _BadMember(f"{key} holds {members[key].file_size} bytes, not a few numbers")
        small[key] = _array(archive, members[key], None, "iuf", None, _refusal(key))
    shape_values = small["shape"]
    if shape_values.dtype.kind not in "iu" or shape_values.shape != (3,):
        raise _BadMember(
            f"shape must be three integers, not {shape_values.dtype} {shape_values.tolist()}"
        )
    shape = check_shape(shape_values.tolist())
    origin, voxel_size = small["origin"], small["voxel_size"]
    if origin.shape != (3,):
        raise _BadMember(f"origin must be three numbers, not {origin.shape}")
    if voxel_size.shape not in ((), (1,), (3,)):
        raise _BadMember(f"voxel_size must be one number or three, not {voxel_size.shape}")
    sizes = voxel_size.astype(np.float64).reshape(-1)
    if not (np.isfinite(origin).all() and np.isfinite(sizes).all() and (sizes > 0).all()):
        raise _BadMember(
            f"origin and voxel size must be finite, the voxel size positive, not "
            f"{origin.tolist()} and {sizes.tolist()}"
        )
    h = float(sizes[0]) if sizes.size == 1 else tuple(sizes.tolist())
    return GridPlacement(shape, origin.astype(np.float64), h)


def _refusal(name: str) -> Callable[[str], str]:
    return lambda found: f"{name} is {found}"


def _array(
    archive: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    shape: tuple[int, ...] | None,
    kinds: str,
    itemsize: int | None,
    refusal: Callable[[str], str],
) -> np.ndarray:
    """One .npy member: its header read and checked (a dtype of `kinds` with `itemsize`
    bytes, `shape` unless None; refusal(what was found) says why not) before its array is
    allocated, then the data inflated into that array."""
    with archive.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            stored_shape, fortran, dtype = np.lib.format.read_array_header_1_0(member)
        elif version in ((2, 0), (3, 0)):
            stored_shape, fortran, dtype = np.lib.format.read_array_header_2_0(member)
        else:
            raise _BadMember(refusal(f"a .npy member of version {version}"))
        if (
            dtype.kind not in kinds
            or dtype.hasobject
            or (itemsize is not None and dtype.itemsize != itemsize)
            or (shape is not None and tuple(stored_shape) != shape)
        ):
            raise _BadMember(refusal(f"{dtype} of shape {tuple(stored_shape)}"))
        count = math.prod(stored_shape)
        if count * dtype.itemsize > info.file_size:
            raise _BadMember(refusal("a member shorter than its header says"))
        array = np.empty(stored_shape[::-1] if fortran else stored_shape, dtype)
        view = memoryview(array.reshape(-1).view(np.uint8).data)
        at = 0
        while at < len(view):
            read = member.readinto(view[at : at + MEMBER_CHUNK_BYTES])  # type: ignore[attr-defined]
            if not read:
                raise _BadMember(refusal("a member that ends early"))
            at += read
    if fortran:
        array = array.T
    return array.astype(dtype.newbyteorder("="), copy=False)


MEMBER_CHUNK_BYTES = 1 << 24  # inflated at a time into an array: no second copy of it
