""".npz files of a dense grid: np.packbits of the [i, j, k] array with its shape, origin and
voxel size, so that numpy alone can read them back."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import IO

import numpy as np

from ..errors import FormatError, GridError
from ..grid import DenseGrid
from ..placement import GridPlacement, Placed, check_shape
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
    """The DenseGrid of an .npz file written by write_npz; FormatError if it is not one."""
    path = Path(path)
    try:
        with np.load(path) as data:
            missing = [key for key in NPZ_KEYS if key not in data.files]
            if missing:
                raise FormatError(f"{path}: not a voxel grid (.npz without {', '.join(missing)})")
            shape = tuple(int(s) for s in data["shape"])
            sizes = np.array(data["voxel_size"], np.float64)
            if sizes.shape not in ((), (3,)):
                raise FormatError(f"{path}: voxel_size must be one number or three")
            size = float(sizes) if sizes.shape == () else tuple(sizes.tolist())
            placement = GridPlacement(
                check_shape(shape), np.array(data["origin"], np.float64), size
            )
            bits = data["bits"]
            if bits.dtype != np.uint8 or bits.size != -(-int(np.prod(shape)) // 8):
                raise FormatError(f"{path}: {bits.size} bytes of bits do not fit the shape {shape}")
            voxels = np.unpackbits(bits, count=int(np.prod(shape))).astype(bool).reshape(shape)
            faces = None
            if FACE_IDS_KEY in data.files:
                faces = data[FACE_IDS_KEY]
                if faces.dtype != np.int32 or faces.shape != voxels.shape:
                    raise FormatError(f"{path}: face ids are not int32 of the shape {shape}")
                if (faces < -1).any() or (~voxels & (faces >= 0)).any():
                    raise FormatError(f"{path}: a face id below -1, or on an empty voxel")
            labels, names, colors = _attribute_arrays(path, data, voxels)
    except OSError as exc:
        raise FormatError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except (ValueError, TypeError, GridError, zipfile.BadZipFile, EOFError) as exc:
        raise FormatError(f"{path}: not a voxel grid .npz file ({exc})") from exc
    return DenseGrid(voxels, placement, face_ids=faces).with_attributes(labels, colors, names)


def _attribute_arrays(
    path: Path, data: np.lib.npyio.NpzFile, voxels: np.ndarray
) -> tuple[np.ndarray | None, tuple[str, ...], np.ndarray | None]:
    """The labels, their names and the colours of an .npz file, checked against its voxels
    (FormatError), or None and () where it has none."""
    labels: np.ndarray | None = None
    colors: np.ndarray | None = None
    names: tuple[str, ...] = ()
    if LABELS_KEY in data.files:
        labels = data[LABELS_KEY]
        names = (
            tuple(str(name) for name in data[LABEL_NAMES_KEY])
            if LABEL_NAMES_KEY in data.files
            else ()
        )
        if labels.dtype != np.uint16 or labels.shape != voxels.shape:
            raise FormatError(f"{path}: labels are not uint16 of the shape {voxels.shape}")
        if ((labels > 0) != voxels).any() or (labels.size and int(labels.max()) > len(names)):
            raise FormatError(f"{path}: labels do not match the voxels, or lack names")
    if COLORS_KEY in data.files:
        colors = data[COLORS_KEY]
        if colors.dtype != np.uint8 or colors.shape != (*voxels.shape, 4):
            raise FormatError(f"{path}: colours are not uint8 of the shape {(*voxels.shape, 4)}")
    return labels, names, colors
