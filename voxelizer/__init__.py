"""voxelizer: exact solid voxelization of triangle meshes with Vulkan compute shaders."""

from .api import FILL_MODES, Voxelizer, voxelize, voxelize_dense
from .errors import (
    DeviceError,
    FillModeError,
    GridError,
    MemoryBudgetError,
    MeshError,
    OpenMeshWarning,
    OutputError,
    ShaderError,
    SVOFormatError,
    VariantError,
    VoxelizerError,
)
from .gpu.device import list_devices
from .grid import DenseGrid
from .io.preview import write_preview
from .mesh import Mesh, load_mesh
from .pipeline.passes import DEFAULT_VARIANT, VARIANTS
from .svo import SVO

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_VARIANT",
    "FILL_MODES",
    "SVO",
    "VARIANTS",
    "DenseGrid",
    "DeviceError",
    "FillModeError",
    "GridError",
    "MemoryBudgetError",
    "Mesh",
    "MeshError",
    "OpenMeshWarning",
    "OutputError",
    "SVOFormatError",
    "ShaderError",
    "VariantError",
    "Voxelizer",
    "VoxelizerError",
    "list_devices",
    "load_mesh",
    "voxelize",
    "voxelize_dense",
    "write_preview",
]
