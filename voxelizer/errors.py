"""Typed errors: every failure a user can cause or meet is one of these."""

from __future__ import annotations

import os
from pathlib import Path


class VoxelizerError(Exception):
    """Base class of every error the voxelizer raises on purpose."""


class MeshError(VoxelizerError):
    """The input mesh is missing, unreadable, or unusable (no triangles, NaN, zero extent)."""


class GridError(VoxelizerError):
    """The requested grid is not allowed: a side below 1 or over the maximum, a voxel size
    that is not positive and finite, bounds that are not a box, options that do not go
    together (docs/guide/grids.md)."""


class VariantError(VoxelizerError):
    """An unknown shader variant was asked for."""


class FillModeError(VoxelizerError):
    """An unknown fill mode was asked for."""


class ModeError(VoxelizerError):
    """An unknown voxelization mode, surface kind or attribute, or options that do not go
    together (a surface kind or face ids without a surface, a fill mode without a solid)."""


class DeviceError(VoxelizerError):
    """No usable Vulkan device, an unknown device was named, or the device failed."""


class ShaderError(VoxelizerError):
    """A GLSL shader could not be compiled (no compiler found, or a compile error)."""


class OutputError(VoxelizerError):
    """An output file exists (and overwriting was not asked for) or cannot be written.

    `path` is the file concerned (None when no file is named) and `exists` is true when the
    file was refused because it exists, so that a front end (the command line) can say how
    its own users ask for overwriting."""

    def __init__(
        self, message: str, *, path: str | os.PathLike | None = None, exists: bool = False
    ) -> None:
        super().__init__(message)
        self.path = None if path is None else Path(path)
        self.exists = exists

    @classmethod
    def file_exists(cls, path: str | os.PathLike) -> OutputError:
        """The refusal to replace `path`, worded for callers of the Python API."""
        return cls(
            f"{path}: file exists (pass overwrite=True to replace it)", path=path, exists=True
        )


class OpenMeshWarning(UserWarning):
    """Columns of the grid cross the mesh's surface unbalanced (an odd number of times, or
    more often inwards than outwards): the surface is open there. Parity is still
    deterministic, but voxels near the gaps may be wrong in any sense that matters
    (fill_mode="winding" fills what the surface nearly encloses; fill_mode="auto" picks it
    for such meshes only)."""


class OverlapWarning(UserWarning):
    """In parity (and vote) mode: columns of the grid pass through overlapping or nested parts of the
    mesh, or parts facing inwards (the surface winds around a voxel centre other than 0 or 1
    times). Parity fills them by their exclusive or; fill_mode="union" fills their union."""


class ColorWarning(UserWarning):
    """Colours that cannot be taken from the mesh as it says: a texture that cannot be
    read, or texture coordinates outside [0, 1]. The faces concerned take their material's
    colour instead."""


class EmptyGridWarning(UserWarning):
    """The grid holds no part of the mesh (bounds beside it): every voxel is empty, and no
    GPU work was done."""


class FormatError(VoxelizerError):
    """A file cannot be read as a voxelization: its extension names no format that
    voxelizer.load reads, it cannot be opened, or its contents break its format."""


class SVOFormatError(FormatError):
    """An .svo file cannot be read or breaks docs/svo-format.md (not an SVO file, truncated,
    corrupted, an unknown version, an inconsistent tree), or SVO arrays do."""


class ArgumentError(VoxelizerError, ValueError, TypeError):
    """An argument that a function or method does not take: a value out of its range, an
    array of the wrong shape or type, an object that is not what it works on, a callback
    that cannot be called. Also a ValueError and a TypeError, what Python and numpy raise
    for such calls, so that code catching those still catches it."""


class GridIndexError(ArgumentError, IndexError):
    """A voxel index outside the grid (also an IndexError, as indexing protocols expect)."""


class ReentrantCallError(VoxelizerError):
    """A Voxelizer called from inside one of its own calls (a progress callback that
    voxelizes, or closes the Voxelizer, on the thread that runs the call): it would wait for
    itself for ever."""


class MemoryBudgetError(VoxelizerError):
    """A memory budget that cannot be parsed, or that is too small for the grid asked for."""


class ThinResultWarning(UserWarning):
    """In mode "solid": the result is empty, or has fewer voxels than THIN_RATIO (see
    voxelizer.thin) times the voxels its surface touches: most of the mesh is thinner than a
    voxel (sheets, thin rods, one-sided parts) and vanished between the voxel centres.
    mode='both' keeps them as surface voxels; fill_mode='winding' fills what an open surface
    nearly encloses."""
