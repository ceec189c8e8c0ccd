""".npz files of a triangle grid: the arrays of TriangleGrid.to_numpy() (grid.py, GRID_KEYS
and, for two levels, LEAF_KEYS), so that numpy alone reads them back, and
voxelizer.load_triangle_grid makes a grid of them again (its queries run on a device)."""

from __future__ import annotations

import os
import zipfile

import numpy as np

from ..errors import FormatError
from ..io.output import open_output
from .grid import GRID_KEYS, TriangleGrid
from .placement import CellPlacement


def save_triangle_grid(
    grid: TriangleGrid, path: str | os.PathLike, *, overwrite: bool = False
) -> None:
    """Write the grid's arrays to an .npz file (refused if it exists, unless `overwrite`;
    written whole or not at all)."""
    from ..io.npz_file import NPZ_COMPRESS_LEVEL, write_npy  # (on use, as every format)

    arrays = grid.to_numpy()
    with (
        open_output(path, overwrite) as fh,
        zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED, compresslevel=NPZ_COMPRESS_LEVEL) as archive,
    ):
        for name, array in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                write_npy(member, np.asanyarray(array))


def read_triangle_grid(path: str | os.PathLike) -> tuple[CellPlacement, int, dict[str, np.ndarray]]:
    """(placement, levels, arrays as queries.download gives them) of a file that
    save_triangle_grid wrote; FormatError where it is not one."""
    from ..io.npz_file import read_npz_arrays  # (on use, as every format)

    # A regular file only, each array's size checked before it is inflated (a FIFO would
    # block; a few KB of zeros can claim gigabytes).
    stored = read_npz_arrays(path, "a triangle grid")
    missing = [key for key in GRID_KEYS if key not in stored]
    if missing:
        raise FormatError(f"{path}: not a triangle grid (no {', '.join(missing)})")
    try:
        levels = int(stored["levels"])
        nx, ny, nz = (int(n) for n in stored["shape"])
        placement = CellPlacement((nx, ny, nz), stored["origin"], stored["cell_size"])
        arrays: dict[str, np.ndarray] = {
            "corners": np.asarray(stored["corners"], np.int32).reshape(-1, 3, 3),
            "offsets": np.asarray(stored["offsets"], np.int64),
            "triangle_ids": np.asarray(stored["triangle_ids"], np.int32),
        }
        if levels == 2:
            arrays.update(
                resolutions=np.asarray(stored["leaf_resolution"], np.int32).reshape(-1, 3),
                leaf_start=np.asarray(stored["leaf_start"], np.int64).reshape(-1),
                leaf_offsets=np.asarray(stored["leaf_offsets"], np.int64),
                leaf_triangle_ids=np.asarray(stored["leaf_triangle_ids"], np.int32),
            )
    except (KeyError, TypeError, ValueError) as exc:
        raise FormatError(f"{path}: not a triangle grid ({exc})") from None
    _check(path, placement, levels, arrays)
    return placement, levels, arrays


def _check(
    path: str | os.PathLike, placement: CellPlacement, levels: int, arrays: dict[str, np.ndarray]
) -> None:
    """FormatError unless the arrays make a grid that the queries can walk safely."""
    problem = None
    offsets, ids = arrays["offsets"], arrays["triangle_ids"]
    triangles = len(arrays["corners"])
    limit = max(placement.shape) << 16
    if levels not in (1, 2):
        problem = f"levels {levels}"
    elif not _csr(offsets, placement.cells, ids, triangles):
        problem = "its cell offsets or triangle ids are out of range"
    elif ((arrays["corners"] < 0) | (arrays["corners"] > limit)).any():
        problem = "its corners lie outside the grid"
    elif levels == 2:
        resolutions, start = arrays["resolutions"], arrays["leaf_start"]
        counts = resolutions.prod(axis=1, dtype=np.int64) if len(resolutions) else resolutions
        leaves = len(arrays["leaf_offsets"]) - 1
        if (
            resolutions.shape != (placement.cells, 3)
            or start.shape != (placement.cells,)
            or (resolutions < 0).any()
            or not np.array_equal(start, np.concatenate([[0], np.cumsum(counts)[:-1]]))
            or start[-1] + counts[-1] != leaves
            or not _csr(arrays["leaf_offsets"], leaves, arrays["leaf_triangle_ids"], triangles)
        ):
            problem = "its leaves do not add up"
    if problem is not None:
        raise FormatError(f"{path}: not a valid triangle grid ({problem})")


def _csr(offsets: np.ndarray, count: int, ids: np.ndarray, triangles: int) -> bool:
    return (
        offsets.shape == (count + 1,)
        and offsets[0] == 0
        and offsets[-1] == len(ids)
        and bool((np.diff(offsets) >= 0).all())
        and bool(((ids >= 0) & (ids < triangles)).all())
    )
