"""Placed: what DenseGrid and SVO share, so that writers and callers take either: where the
voxels sit (a GridPlacement), their cell centres, how many are set, the voxels as one bool
array, and their conversions to other libraries' objects."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing

from .grid_spec import Shape, VoxelSize

if TYPE_CHECKING:
    import trimesh  # imported by to_trimesh: `import voxelizer` stays light

    from .placement import GridPlacement


class Placed(ABC):
    """The protocol DenseGrid and SVO share, so that writers and callers take either: where
    the voxels sit, how many are solid, and the voxels as one bool (nx, ny, nz) array
    (`to_numpy()`, also what `np.asarray(result)` gives), or an attribute they carry as one
    array of the same shape (`to_numpy(attribute="face")`)."""

    placement: GridPlacement

    @abstractmethod
    def to_numpy(self, attribute: str | None = None) -> np.ndarray:
        """bool array of shape (nx, ny, nz), indexed [i, j, k] = [x, y, z]; with
        attribute="face", the int32 face ids (-1 where none)."""

    @property
    def attributes(self) -> tuple[str, ...]:
        """The per-voxel attributes carried: ("face",) with face ids, else ()."""
        return ()

    @abstractmethod
    def count(self) -> int:
        """Solid voxels."""

    def __array__(
        self, dtype: np.typing.DTypeLike | None = None, copy: bool | None = None
    ) -> np.ndarray:
        """np.asarray(result): the voxels, as to_numpy() gives them (numpy's copy rules)."""
        voxels = self.to_numpy()
        if dtype is not None and np.dtype(dtype) != voxels.dtype:
            if copy is False:
                raise ValueError(f"the voxels are bool: {np.dtype(dtype)} needs a copy")
            return voxels.astype(dtype)
        return voxels.copy() if copy else voxels

    @property
    def shape(self) -> Shape:
        """(nx, ny, nz): voxels along x, y and z."""
        return self.placement.shape

    @property
    def resolution(self) -> int:
        """The longest side, max(shape) (N for a cube N^3)."""
        return self.placement.resolution

    @property
    def origin(self) -> np.ndarray:
        """World position of the corner of voxel (0, 0, 0)."""
        return self.placement.origin.copy()

    @property
    def voxel_size(self) -> VoxelSize:
        """h, the side of a cubic voxel; (hx, hy, hz) for voxels that are not cubes."""
        return self.placement.voxel_size

    @property
    def spacing(self) -> np.ndarray:
        """(hx, hy, hz), float64 (3,): the voxel's size along each axis (cubes too)."""
        return self.placement.spacing.copy()

    # --- cell centres ------------------------------------------------------------------------

    @property
    def xs(self) -> np.ndarray:
        """float64 (nx,): the x of the voxel centres, origin[0] + (i + 1/2) * hx."""
        return self.placement.axis_centres(0)

    @property
    def ys(self) -> np.ndarray:
        """float64 (ny,): the y of the voxel centres."""
        return self.placement.axis_centres(1)

    @property
    def zs(self) -> np.ndarray:
        """float64 (nz,): the z of the voxel centres."""
        return self.placement.axis_centres(2)

    def centres(self, indices: numpy.typing.ArrayLike | None = None) -> Any:
        """(X, Y, Z): the voxel centres' world coordinates, each a read-only (nx, ny, nz)
        view that stores one axis's values only (no memory per voxel), so that a field
        f(X, Y, Z) is evaluated at every centre; with (M, 3) integer `indices`, their
        centres as float64 (M, 3)."""
        return self.placement.centres(indices)

    def world_to_index(self, points: numpy.typing.ArrayLike) -> np.ndarray:
        """int64 (..., 3): the index of the voxel holding each world point (..., 3); points
        outside the grid get indices outside [0, shape) (see `inside`)."""
        return self.placement.world_to_index(points)

    def inside(self, indices: numpy.typing.ArrayLike) -> np.ndarray:
        """bool (...): which voxel indices (..., 3) lie in the grid."""
        return self.placement.inside(indices)

    # --- other libraries and notebooks (voxelizer.convert; files are voxelizer.io's) --------
    # voxelizer.convert and voxelizer.surface are imported where they are used: a
    # voxelization (the command's above all) needs neither.

    def to_mesh(self) -> trimesh.Trimesh:
        """The voxels' outer faces, closed and outward (see voxelizer.surface)."""
        from .surface import voxel_surface

        return voxel_surface(self.to_numpy(), self.placement.origin, self.placement.spacing)

    def to_trimesh(self) -> trimesh.voxel.VoxelGrid:
        """The same voxels as a trimesh VoxelGrid; its transform maps index -> voxel centre."""
        import trimesh

        spacing = self.placement.spacing
        transform = np.eye(4)
        transform[:3, :3] *= spacing
        transform[:3, 3] = np.asarray(self.placement.origin, np.float64) + spacing / 2
        return trimesh.voxel.VoxelGrid(self.to_numpy(), transform=transform)

    def to_open3d(self) -> Any:
        """open3d.geometry.VoxelGrid of the solid voxels, with our origin and voxel size: its
        voxel (i, j, k) is ours and get_voxel_center_coordinate gives our centre (cubic
        voxels only: GridError for others)."""
        from . import convert

        return convert.to_open3d(self.to_numpy(), self.placement.origin, self.placement.spacing)

    def to_pyvista(self) -> Any:
        """pyvista.ImageData whose cell (i, j, k) is voxel (i, j, k): origin the grid corner,
        spacing (hx, hy, hz), dimensions shape + 1, cell data "solid" (uint8 0/1)."""
        from . import convert

        return convert.to_pyvista(self.to_numpy(), self.placement.origin, self.placement.spacing)

    def to_torch(self, device: Any = None) -> Any:
        """torch bool tensor (nx, ny, nz) of the voxels, on `device` (default the CPU, sharing
        memory with to_numpy() as np.asarray does); needs torch (pip install torch)."""
        from . import convert

        return convert.to_torch(self.to_numpy(), device)

    def __dlpack__(self, **kwargs: Any) -> Any:
        """DLPack export of to_numpy() (torch.from_dlpack, jax, cupy...): bool, or uint8 0/1
        on numpy releases whose DLPack has no bool (before 1.25)."""
        from . import convert

        return convert.dlpack_array(self.to_numpy()).__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        """The CPU, where the voxels are (DLPack's (kDLCPU, 0))."""
        device_type, device_id = self.to_numpy().__dlpack_device__()
        return int(device_type), int(device_id)

    def _repr_png_(self) -> bytes | None:
        """The three-view preview as PNG bytes (voxelizer.write_preview's image), for
        notebooks; None above 512^3 voxels, which would be densified on every display."""
        from . import convert

        if math.prod(self.shape) > convert.PREVIEW_MAX_VOXELS:
            return None
        return convert.preview_png(self.to_numpy())

    def _repr_html_(self) -> str:
        """Shape, voxel size, origin and solid voxels, with the preview inline."""
        from . import convert

        return convert.summary_html(
            type(self).__name__,
            self.shape,
            self.placement.origin,
            self.placement.spacing,
            self.count(),
            self._repr_png_(),
        )
