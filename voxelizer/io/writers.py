"""Output files of a voxelization, chosen by extension: .svo, .binvox, .vox, .npz, .vti, .ply,
.obj, .glb, .stl. Every writer takes a DenseGrid or an SVO (anything Placed).

Every writer refuses to replace an existing file unless asked (OutputError with `exists`
set) and reports any OSError as an OutputError (see voxelizer.io.output).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..errors import OutputError
from ..grid import DenseGrid
from ..placement import Placed, shape_text
from .output import open_output


def save(
    result: Placed,
    path: str | os.PathLike,
    *,
    overwrite: bool = False,
    up_axis: str | None = None,
) -> None:
    """Write a DenseGrid or an SVO in the format its extension names (OUTPUT_FORMATS).

    `up_axis` ("z" or "y", .vox only): the grid axis that becomes MagicaVoxel's up (see
    voxelizer.io.vox_writer); without it the grid's own axes are kept.
    """
    suffix = Path(path).suffix.lower()
    if suffix not in WRITERS:
        raise OutputError(
            f"cannot write {suffix or 'files without an extension'}: "
            f"use {', '.join(OUTPUT_FORMATS)}",
            path=path,
        )
    if up_axis is None:
        module, name = WRITERS[suffix]
        writer: Callable[[Placed, str | os.PathLike, bool], None]
        writer = getattr(importlib.import_module(module, __package__), name)
        writer(result, path, overwrite)
    elif suffix == ".vox":
        from .vox_writer import write_vox

        write_vox(result, path, overwrite, up_axis=up_axis)
    else:
        raise OutputError(f"{path}: up_axis is for .vox files only", path=path)


def check_output_shape(path: str | os.PathLike, shape: tuple[int, int, int]) -> None:
    """OutputError unless the format that `path` names holds a grid of this shape: .binvox
    holds cubes only. The command calls it before the GPU work, the writer again."""
    if Path(path).suffix.lower() == ".binvox" and len(set(shape)) != 1:
        raise OutputError(
            f"{path}: .binvox holds cubic grids only, not {shape_text(shape)} "
            "(use .svo, .npz or .vox)",
            path=path,
        )


def write_binvox(result: Placed, path: str | os.PathLike, overwrite: bool = False) -> None:
    """binvox 1: voxel (i, j, k) is the binvox voxel (x, y, z) = (i, j, k).

    binvox puts voxel centres at translate + scale * (index + 1/2) / dim, so translate is the
    grid origin and scale is N * h. Data: y fastest, then z, then x, as (value, count) byte
    pairs with runs of at most 255. Cubic grids only: binvox has one scale for the whole grid,
    which readers divide by each side (trimesh 4 cannot even load other shapes).
    """
    check_output_shape(path, result.shape)
    n = result.shape[0]
    columns = result.columns if isinstance(result, DenseGrid) else None
    if columns is None:
        flat = result.to_numpy().transpose(0, 2, 1).ravel()
    else:  # unpacked from the GPU's words in the file's order at once
        flat = columns.to_numpy_xzy().ravel()
    origin = np.asarray(result.placement.origin, np.float64)
    header = (
        f"#binvox 1\ndim {n} {n} {n}\n"
        f"translate {float(origin[0])!r} {float(origin[1])!r} {float(origin[2])!r}\n"
        f"scale {float(n * result.voxel_size)!r}\ndata\n"
    )
    runs = _binvox_runs(flat)
    with open_output(path, overwrite) as fh:
        fh.write(header.encode("ascii"))
        fh.write(runs.tobytes())


def _binvox_runs(flat: np.ndarray) -> np.ndarray:
    """Run-length pairs (value, count <= 255) of a flat bool array, as uint8 (2 * runs,)."""
    starts = np.concatenate([[0], np.flatnonzero(flat[1:] != flat[:-1]) + 1])
    lengths = np.diff(np.concatenate([starts, [len(flat)]]))
    pieces = (lengths + 254) // 255  # a run longer than 255 becomes several pairs
    values = np.repeat(flat[starts], pieces)
    counts = np.full(int(pieces.sum()), 255, np.int64)
    last = np.cumsum(pieces) - 1
    counts[last] = lengths - 255 * (pieces - 1)
    return np.stack([values.astype(np.uint8), counts.astype(np.uint8)], axis=1).ravel()


# suffix -> (module of voxelizer.io, its writer): a format's module is imported when a file of
# it is written, so that `import voxelizer` (and a batch, which writes one format) pays for
# no format it does not use.
WRITERS: dict[str, tuple[str, str]] = {
    ".svo": (".svo_file", "write_svo"),
    ".binvox": (".writers", "write_binvox"),
    ".vox": (".vox_writer", "write_vox"),
    ".npz": (".npz_file", "write_npz"),
    ".vti": (".vti_file", "write_vti"),
    ".ply": (".mesh_writer", "write_mesh"),
    ".obj": (".mesh_writer", "write_mesh"),
    ".glb": (".mesh_writer", "write_mesh"),
    ".stl": (".stl_writer", "write_stl"),
}
# The formats that hold each attribute of a result (the others write the voxels alone).
ATTRIBUTE_FORMATS = {
    "face": (".svo", ".npz"),
    "label": (".svo", ".npz", ".vti"),
    "color": (".svo", ".npz", ".vti", ".vox", ".ply", ".obj", ".glb"),
}
OUTPUT_FORMATS = tuple(WRITERS)
