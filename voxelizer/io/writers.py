"""Output files of a voxelization: .svo, .binvox, .vox, .npz, .vti, .ply, .obj, .glb, .stl,
chosen by a file's extension (save) or by an OutputFormat decoded once (a batch's). Every writer takes a
DenseGrid or an SVO (anything Placed).

Every writer refuses to replace an existing file unless asked (OutputError with `exists`
set) and reports any OSError as an OutputError (see voxelizer.io.output).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ArgumentError, OutputError
from ..grid import ColumnBits, DenseGrid
from ..grid_spec import VoxelSize, voxel_size_text
from ..placement import Placed, shape_text
from .files import as_path
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
    if not isinstance(result, Placed):
        raise ArgumentError(
            f"voxelizer.save writes an SVO or a DenseGrid, not {type(result).__name__}"
        )
    path = as_path(path, "voxelizer.save")
    OutputFormat.of_path(path).write(result, path, overwrite=overwrite, up_axis=up_axis)


@dataclass(frozen=True)
class OutputFormat:
    """A format voxels are written in, decoded once from its name (`npz`, `.npz`) or from a
    file's extension; what holds it (a batch's tasks) asks it what the format needs and has
    it write. Build it with `named` or `of_path`."""

    suffix: str  # one of OUTPUT_FORMATS: ".npz"

    @classmethod
    def named(cls, name: str | OutputFormat) -> OutputFormat:
        """The format of a name, `npz` or `.npz` in any case (an OutputFormat as it is);
        OutputError for a format no writer has."""
        if isinstance(name, OutputFormat):
            return name
        if not isinstance(name, str):
            raise ArgumentError(f"a format is a name such as 'npz', not {name!r}")
        suffix = "." + name.lower().lstrip(".")
        if suffix not in WRITERS:
            raise OutputError(
                f"cannot write {name!r}: use one of {', '.join(s[1:] for s in OUTPUT_FORMATS)}"
            )
        return cls(suffix)

    @classmethod
    def of_path(cls, path: str | os.PathLike) -> OutputFormat:
        """The format a file's extension names; OutputError (naming the file) for another."""
        suffix = Path(path).suffix.lower()
        if suffix not in WRITERS:
            raise OutputError(
                f"cannot write {suffix or 'files without an extension'}: "
                f"use {', '.join(OUTPUT_FORMATS)}",
                path=path,
            )
        return cls(suffix)

    @property
    def name(self) -> str:
        return self.suffix[1:]

    @property
    def dense(self) -> bool:
        """Whether it is written from the dense grid: every format but .svo, whose writer
        takes the octree (a DenseGrid too, converted on the host)."""
        return self.suffix != ".svo"

    @property
    def takes_up_axis(self) -> bool:
        """Whether its writer turns the grid for an up axis: .vox (MagicaVoxel's +z up)."""
        return self.suffix == ".vox"

    def write(
        self,
        result: Placed,
        path: str | os.PathLike,
        *,
        overwrite: bool = False,
        up_axis: str | None = None,
    ) -> None:
        """Write `result` to `path` in this format, whatever the path's extension (see save)."""
        if up_axis is None:
            module, name = WRITERS[self.suffix]
            writer: Callable[[Placed, str | os.PathLike, bool], None]
            writer = getattr(importlib.import_module(module, __package__), name)
            writer(result, path, overwrite)
        elif self.takes_up_axis:
            from .vox_writer import write_vox

            write_vox(result, path, overwrite=overwrite, up_axis=up_axis)
        else:
            raise OutputError(f"{path}: up_axis is for .vox files only", path=path)


def check_output_shape(
    path: str | os.PathLike, shape: tuple[int, int, int], voxel_size: VoxelSize = 1.0
) -> None:
    """OutputError unless the format that `path` names holds a grid of this shape and voxel
    size: .binvox holds cubic grids of cubic voxels only, .vox cubic voxels (MagicaVoxel
    draws every voxel as a cube and stores no size). The command calls it before the GPU
    work, the writer again."""
    suffix = Path(path).suffix.lower()
    if suffix == ".binvox":
        _check_cubic(path, shape)
    if suffix in (".binvox", ".vox"):
        check_cubic_voxels(path, suffix, voxel_size)


def _check_cubic(path: str | os.PathLike, shape: tuple[int, int, int]) -> None:
    if len(set(shape)) != 1:
        raise OutputError(
            f"{path}: .binvox holds cubic grids only, not {shape_text(shape)} "
            "(use .svo, .npz or .vox)",
            path=path,
        )


def check_cubic_voxels(path: str | os.PathLike, suffix: str, voxel_size: VoxelSize) -> None:
    """OutputError for voxels that are not cubes, in a format of one voxel size (`suffix`)."""
    if isinstance(voxel_size, tuple):
        raise OutputError(
            f"{path}: {suffix} holds cubic voxels only (one size), not "
            f"{voxel_size_text(voxel_size)} (use .npz, .vti or .svo, which store the three)",
            path=path,
        )


def write_binvox(result: Placed, path: str | os.PathLike, overwrite: bool = False) -> None:
    """binvox 1: voxel (i, j, k) is the binvox voxel (x, y, z) = (i, j, k).

    binvox puts voxel centres at translate + scale * (index + 1/2) / dim, so translate is the
    grid origin and scale is N * h. Data: y fastest, then z, then x, as (value, count) byte
    pairs with runs of at most 255. Cubic grids only: binvox has one scale for the whole grid,
    which readers divide by each side (trimesh 4 cannot even load other shapes).
    """
    from .binvox_file import binvox_runs  # the format's module, as save imports the others

    _check_cubic(path, result.shape)
    check_cubic_voxels(path, ".binvox", result.voxel_size)
    n = result.shape[0]
    columns = result.columns if isinstance(result, DenseGrid) else None
    if columns is None:  # the runs are read from column words (binvox_runs)
        columns = ColumnBits.of_voxels(result.to_numpy())
    origin = np.asarray(result.placement.origin, np.float64)
    header = (
        f"#binvox 1\ndim {n} {n} {n}\n"
        f"translate {float(origin[0])!r} {float(origin[1])!r} {float(origin[2])!r}\n"
        f"scale {float(n * result.placement.spacing[0])!r}\ndata\n"
    )
    runs = binvox_runs(columns)
    with open_output(path, overwrite) as fh:
        fh.write(header.encode("ascii"))
        fh.write(runs.tobytes())


# suffix -> (module of voxelizer.io, its writer): a format's module is imported when a file of
# it is written, so that `import voxelizer` (and a batch, which writes one format) pays for
# no format it does not use.
WRITERS: dict[str, tuple[str, str]] = {
    ".svo": (".svo_file", "write_svo"),
    ".binvox": (".writers", "write_binvox"),
    ".vox": (".vox_writer", "write_vox"),
    ".npz": (".npz_file", "write_npz"),
    ".vti": (".vti_file", "write_vti"),
    ".ply": (".mesh_writer", "write_ply"),
    ".obj": (".mesh_writer", "write_obj"),
    ".glb": (".mesh_writer", "write_glb"),
    ".stl": (".stl_writer", "write_stl"),
}
# The formats that hold each attribute of a result (the others write the voxels alone).
ATTRIBUTE_FORMATS = {
    "face": (".svo", ".npz"),
    "label": (".svo", ".npz", ".vti"),
    "color": (".svo", ".npz", ".vti", ".vox", ".ply", ".obj", ".glb"),
}
OUTPUT_FORMATS = tuple(WRITERS)
