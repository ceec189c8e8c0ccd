"""voxelizer: exact solid voxelization of triangle meshes with Vulkan compute shaders."""

from .api import Voxelizer, voxelize_dense
from .errors import (DeviceError, GridError, MeshError, OutputError, ShaderError, VariantError,
                     VoxelizerError)
from .gpu.device import list_devices
from .grid import DenseGrid
from .mesh import Mesh, load_mesh
from .passes import DEFAULT_VARIANT, VARIANTS

__version__ = "0.1.0"

__all__ = [
    "Voxelizer", "voxelize_dense", "DenseGrid", "Mesh", "load_mesh", "list_devices",
    "VARIANTS", "DEFAULT_VARIANT", "VoxelizerError", "MeshError", "GridError", "VariantError",
    "DeviceError", "ShaderError", "OutputError",
]
