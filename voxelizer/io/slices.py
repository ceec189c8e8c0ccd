"""A PNG slice stack for 3D printing (resin and powder printers print from one mask per
layer): one 1-bit greyscale image per z layer of the grid, at the grid's resolution, with
a sidecar JSON that says how large a pixel and a layer are.

Layer k (file layer_00000.png up, as many digits as the largest index needs, at least 5)
is the voxels (i, j, k): pixel column i, pixel row ny - 1 - j (y up, as seen from +z), white
(1) where the voxel is set, black (0) where it is empty. slices.json: the layer height and
pixel size (the voxel's sides hz and (hx, hy), in the mesh's units), the image size, the layer count, the
world position of the grid's corner and the file names. Written without Pillow (a PNG of
one kind is a few chunks of zlib; Pillow and every image library read it).

The files of one stack appear together or not at all (voxelizer.io.output). The folder is
made if it does not exist; one that already holds a stack (its slices.json or a layer file)
is refused unless overwriting is asked for, and then its older layer files beyond the new
ones are removed too, so that the folder holds one stack.
"""

from __future__ import annotations

import json
import os
import re
import struct
import zlib
from contextlib import suppress
from pathlib import Path

import numpy as np

from ..errors import OutputError
from ..placement import Placed
from .output import all_or_nothing, open_output

SIDECAR = "slices.json"
LAYER_PATTERN = re.compile(r"layer_\d{5,}\.png")


def layer_names(layers: int) -> list[str]:
    """The file names of a stack of `layers` layers."""
    digits = max(5, len(str(max(layers - 1, 0))))
    return [f"layer_{k:0{digits}d}.png" for k in range(layers)]


def write_slices(result: Placed, folder: str | os.PathLike, overwrite: bool = False) -> Path:
    """Write the slice stack of a DenseGrid or an SVO into `folder`; the sidecar's path."""
    folder = Path(folder)
    check_slices_folder(folder, overwrite)
    nx, ny, nz = result.shape
    names = layer_names(nz)
    voxels = result.to_numpy()
    hx, hy, hz = (float(h) for h in result.placement.spacing)
    sidecar = {
        "layer_height": hz,
        "pixel_size": [hx, hy],
        "width": nx,
        "height": ny,
        "layers": nz,
        "origin": [float(v) for v in result.placement.origin],
        "first_layer_bottom": float(result.placement.origin[2]),
        "image": "1-bit greyscale PNG, white = solid; pixel (column i, row ny - 1 - j)",
        "files": names,
    }
    made = not folder.exists()
    if made:
        try:
            folder.mkdir(parents=True)
        except OSError as exc:
            raise OutputError(
                f"{folder}: cannot make the folder ({exc.strerror})", path=folder
            ) from exc
    try:
        with all_or_nothing():
            for k, name in enumerate(names):
                with open_output(folder / name, overwrite) as fh:
                    fh.write(encode_bilevel_png(voxels[:, ::-1, k].T))
            with open_output(folder / SIDECAR, overwrite) as fh:
                fh.write((json.dumps(sidecar, indent=2) + "\n").encode())
    except BaseException:
        if made:
            with suppress(OSError):
                folder.rmdir()
        raise
    for stale in _stack_files(folder) - set(names):
        with suppress(OSError):
            (folder / stale).unlink()
    return folder / SIDECAR


def _stack_files(folder: Path) -> set[str]:
    try:
        return {entry.name for entry in os.scandir(folder) if LAYER_PATTERN.fullmatch(entry.name)}
    except OSError:
        return set()


def check_slices_folder(folder: Path, overwrite: bool) -> None:
    """OutputError for a path that is no folder, or a folder holding a stack (unless
    overwrite)."""
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"{folder}: cannot write slices (not a folder)", path=folder)
    if not folder.exists() and not folder.parent.is_dir():
        raise OutputError(
            f"{folder}: cannot write slices (no such folder: {folder.parent})", path=folder
        )
    if not overwrite and folder.is_dir() and ((folder / SIDECAR).exists() or _stack_files(folder)):
        raise OutputError(
            f"{folder}: holds a slice stack (pass overwrite=True to replace it)",
            path=folder,
            exists=True,
        )


def encode_bilevel_png(image: np.ndarray) -> bytes:
    """1-bit greyscale PNG bytes of a bool (H, W) image: True white, False black."""
    height, width = image.shape
    packed = np.packbits(np.ascontiguousarray(image, bool), axis=1)  # MSB first, as PNG
    rows = np.concatenate([np.zeros((height, 1), np.uint8), packed], axis=1)  # filter 0

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6))
        + chunk(b"IEND", b"")
    )
