"""The voxels as other libraries' objects (Open3D, PyVista/VTK, PyTorch, DLPack consumers) and
as what notebooks show (PNG, HTML). DenseGrid and SVO share these through `Placed`.

Each function takes the bool (nx, ny, nz) array and the placement numbers (origin, voxel
size h or the three sizes (hx, hy, hz)), so that it needs nothing else of the package and no
file. Voxel (i, j, k) keeps its centre at origin + ((i, j, k) + 1/2) * h in every library. The libraries are optional: each is
imported when its converter runs, and a missing one is a ModuleNotFoundError that says which
pip package to install.
"""

from __future__ import annotations

import base64
import html
import importlib
from functools import cache
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing

from .errors import GridError
from .render import encode_png, render_views

# Grids with more voxels than this (512^3) get no inline image: a notebook shows every result
# it prints, and a larger grid would be densified and rendered each time.
PREVIEW_MAX_VOXELS = 512**3


def optional_module(name: str, purpose: str) -> ModuleType:
    """Import an optional library, or ModuleNotFoundError naming the pip package to install."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        raise ModuleNotFoundError(
            f"{purpose} needs the optional package {name}: pip install {name}", name=name
        ) from None
    except ImportError as exc:  # installed, but a library it links to is missing
        raise ImportError(
            f"{purpose} needs {name}, which is installed but fails to import: {exc}"
        ) from exc


Sizes = float | numpy.typing.ArrayLike  # h, or (hx, hy, hz)


def sizes_of(voxel_size: Sizes) -> np.ndarray:
    """(hx, hy, hz) as float64 (3,), from h or three sizes."""
    return np.broadcast_to(np.asarray(voxel_size, np.float64), (3,)).copy()


def voxel_centres(
    voxels: np.ndarray, origin: numpy.typing.ArrayLike, voxel_size: Sizes
) -> tuple[np.ndarray, np.ndarray]:
    """(indices, centres): (M, 3) int64 indices of the solid voxels and their world centres."""
    indices = np.argwhere(voxels)
    return indices, np.asarray(origin, np.float64) + (indices + 0.5) * sizes_of(voxel_size)


def to_open3d(voxels: np.ndarray, origin: numpy.typing.ArrayLike, voxel_size: Sizes) -> Any:
    """open3d.geometry.VoxelGrid with origin and voxel_size ours: its voxel (i, j, k) is ours,
    and get_voxel_center_coordinate gives our centre. Cubic voxels only (Open3D's have one
    size): GridError for others.

    Built from the voxel centres with create_from_point_cloud_within_bounds: each centre lies
    half a voxel inside its cell, so Open3D's floor((p - origin) / h) gives back (i, j, k)."""
    sizes = sizes_of(voxel_size)
    if not sizes[0] == sizes[1] == sizes[2]:
        raise GridError(
            f"open3d's VoxelGrid holds cubic voxels only, not {'x'.join(f'{h:g}' for h in sizes)}"
            " (use to_pyvista or to_trimesh)"
        )
    o3d = optional_module("open3d", "to_open3d()")
    low = np.asarray(origin, np.float64)
    high = low + np.array(voxels.shape, np.float64) * sizes
    _, centres = voxel_centres(voxels, low, sizes)
    cloud = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(centres))
    return o3d.geometry.VoxelGrid.create_from_point_cloud_within_bounds(
        cloud, float(sizes[0]), low, high
    )


def to_pyvista(voxels: np.ndarray, origin: numpy.typing.ArrayLike, voxel_size: Sizes) -> Any:
    """pyvista.ImageData of (nx+1, ny+1, nz+1) points at the voxel corners, so that cell
    (i, j, k) is voxel (i, j, k), with cell data "solid" (uint8 0/1; VTK has no bool)."""
    pv = optional_module("pyvista", "to_pyvista()")
    grid = pv.ImageData(
        dimensions=tuple(int(n) + 1 for n in voxels.shape),
        spacing=tuple(float(h) for h in sizes_of(voxel_size)),
        origin=tuple(float(v) for v in np.asarray(origin, np.float64)),
    )
    grid.cell_data["solid"] = vtk_cell_order(voxels)
    return grid


def vtk_cell_order(voxels: np.ndarray) -> np.ndarray:
    """uint8 0/1 of every voxel in VTK's cell order (i fastest, then j, then k)."""
    return reversed_axes(voxels).reshape(-1).view(np.uint8)


def reversed_axes(array: np.ndarray, tile: int = 64) -> np.ndarray:
    """C-contiguous copy of array.transpose(2, 1, 0), copied in tiles of `tile` along the
    two swapped axes: faster than numpy's one strided copy on large grids
    (docs/benchmarks.md, "Figures behind the code")."""
    nx, ny, nz = array.shape
    out = np.empty((nz, ny, nx), array.dtype)
    for i in range(0, nx, tile):
        for k in range(0, nz, tile):
            out[k : k + tile, :, i : i + tile] = array[i : i + tile, :, k : k + tile].transpose(
                2, 1, 0
            )
    return out


def to_torch(voxels: np.ndarray, device: Any = None) -> Any:
    """torch bool tensor of shape (nx, ny, nz); on the CPU it shares the array's memory (as
    np.asarray does), on another `device` it is a copy there."""
    torch = optional_module("torch", "to_torch()")
    tensor = torch.from_numpy(voxels)
    return tensor if device is None else tensor.to(device)


@cache
def dlpack_has_bool() -> bool:
    """Whether this numpy exports bool arrays through DLPack (numpy >= 1.25 does)."""
    try:
        np.zeros(1, bool).__dlpack__()
    except (BufferError, TypeError):
        return False
    return True


def dlpack_array(voxels: np.ndarray) -> np.ndarray:
    """The array __dlpack__ exports: the bool voxels, or, where numpy's DLPack has no bool,
    their uint8 view (0 and 1, the same memory)."""
    return voxels if dlpack_has_bool() else voxels.view(np.uint8)


def preview_png(voxels: np.ndarray) -> bytes:
    """PNG bytes of the three-view preview (callers skip grids over PREVIEW_MAX_VOXELS)."""
    return encode_png(render_views(voxels))


def summary_html(
    kind: str,
    shape: tuple[int, ...],
    origin: numpy.typing.ArrayLike,
    voxel_size: Sizes,
    count: int,
    png: bytes | None,
) -> str:
    """A short HTML block for notebooks: what the result is, and its preview inline."""
    corner = ", ".join(f"{float(v):g}" for v in np.asarray(origin, np.float64))
    sizes = sizes_of(voxel_size)
    size = (
        f"{sizes[0]:g}" if sizes[0] == sizes[1] == sizes[2] else "x".join(f"{h:g}" for h in sizes)
    )
    text = (
        f"<b>{html.escape(kind)}</b> {'x'.join(str(int(n)) for n in shape)}, "
        f"voxel size {size}, origin ({corner}), {int(count):,} solid voxels"
    )
    if png is None:
        image = "<br><i>no preview above 512³ voxels: use voxelizer.write_preview</i>"
    else:
        data = base64.b64encode(png).decode("ascii")
        image = f'<br><img src="data:image/png;base64,{data}" alt="three views of the voxels">'
    return f"<div>{text}{image}</div>"
