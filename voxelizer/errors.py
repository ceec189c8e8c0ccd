"""Typed errors: every failure a user can cause or meet is one of these."""


class VoxelizerError(Exception):
    """Base class of every error the voxelizer raises on purpose."""


class MeshError(VoxelizerError):
    """The input mesh is missing, unreadable, or unusable (no triangles, NaN, zero extent)."""


class GridError(VoxelizerError):
    """The requested grid is not allowed (not a multiple of 4, too small, too large)."""


class VariantError(VoxelizerError):
    """An unknown shader variant was asked for."""


class FillModeError(VoxelizerError):
    """An unknown fill mode was asked for."""


class DeviceError(VoxelizerError):
    """No usable Vulkan device, an unknown device was named, or the device failed."""


class ShaderError(VoxelizerError):
    """A GLSL shader could not be compiled (no compiler found, or a compile error)."""


class OutputError(VoxelizerError):
    """An output file exists (and overwriting was not asked for) or cannot be written."""


class OpenMeshWarning(UserWarning):
    """The mesh has boundary or non-manifold edges: parity is still deterministic, but voxels
    near the gaps may be wrong in any sense that matters (fill_mode="vote" repairs small holes)."""


class SVOFormatError(VoxelizerError):
    """An .svo file cannot be read or breaks docs/svo-format.md (not an SVO file, truncated,
    corrupted, an unknown version, an inconsistent tree), or SVO arrays do."""


class MemoryBudgetError(VoxelizerError):
    """A memory budget that cannot be parsed, or that is too small for the grid asked for."""
