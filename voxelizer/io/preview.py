"""The preview PNG file: the three shaded views of voxelizer.render, written to a file so that
a voxelization can be judged at a glance.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import ArgumentError, OutputError
from ..placement import Placed
from ..render import encode_png, render_views
from .files import as_path
from .output import open_output

__all__ = ["PREVIEW_SUFFIX", "encode_png", "render_views", "write_preview"]

PREVIEW_SUFFIX = ".png"  # the one image format written: a .jpg name would hide a PNG


def write_preview(
    voxels: Placed | np.ndarray, path: str | os.PathLike, overwrite: bool = False
) -> None:
    """Write the three-view PNG of an SVO, a DenseGrid or a bool (nx, ny, nz) array to a
    .png path (OutputError for any other extension), atomically (see open_output)."""
    if as_path(path, "write_preview").suffix.lower() != PREVIEW_SUFFIX:
        raise OutputError(
            f"{path}: the preview is a PNG image: name it {PREVIEW_SUFFIX}", path=path
        )
    image = render_views(_dense(voxels))
    png = encode_png(image)
    with open_output(path, overwrite) as fh:
        fh.write(png)


def _dense(voxels: Placed | np.ndarray) -> np.ndarray:
    if isinstance(voxels, Placed):
        return voxels.to_numpy()
    voxels = np.asarray(voxels)
    if voxels.dtype != bool or voxels.ndim != 3:
        raise ArgumentError(
            f"expected an SVO, a DenseGrid or a bool 3-D array, not {voxels.dtype} {voxels.shape}"
        )
    return voxels
