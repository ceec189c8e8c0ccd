"""voxelizer: exact solid voxelization of triangle meshes with Vulkan compute shaders."""

from .api import FILL_MODES, Voxelizer, voxelize, voxelize_dense
from .errors import (DeviceError, FillModeError, GridError, MemoryBudgetError, MeshError,
                     OpenMeshWarning, OutputError, ShaderError, SVOFormatError, VariantError,
                     VoxelizerError)
from .gpu.device import list_devices
from .grid import DenseGrid
from .mesh import Mesh, load_mesh
from .passes import DEFAULT_VARIANT, VARIANTS
from .preview import write_preview
from .svo import SVO

__version__ = "0.1.0"

__all__ = [
    "Voxelizer", "voxelize", "voxelize_dense", "DenseGrid", "Mesh", "load_mesh", "list_devices",
    "VARIANTS", "DEFAULT_VARIANT", "FILL_MODES", "VoxelizerError", "MeshError", "GridError",
    "VariantError", "FillModeError", "DeviceError", "ShaderError", "OutputError",
    "OpenMeshWarning", "SVO", "SVOFormatError", "write_preview", "MemoryBudgetError",
]
