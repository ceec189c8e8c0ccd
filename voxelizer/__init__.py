"""voxelizer: exact solid and surface voxelization of triangle meshes with Vulkan compute shaders."""

from .api import Voxelizer, check_mesh, voxelize, voxelize_dense
from .batch import BatchResult, find_meshes, voxelize_many
from .errors import (
    DeviceError,
    FillModeError,
    FormatError,
    GridError,
    MemoryBudgetError,
    MeshError,
    ModeError,
    OpenMeshWarning,
    OutputError,
    OverlapWarning,
    ShaderError,
    SVOFormatError,
    VariantError,
    VoxelizerError,
)
from .gpu.device import list_devices
from .grid import DenseGrid
from .io import load, load_mesh, save, write_preview
from .mesh import Mesh, Topology
from .options import Options
from .pipeline.passes import DEFAULT_VARIANT, SURFACES, VARIANTS
from .pipeline.runner import FILL_MODES, MODES
from .stats import Stats
from .svo import SVO, FaceIds

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_VARIANT",
    "FILL_MODES",
    "MODES",
    "SURFACES",
    "SVO",
    "VARIANTS",
    "BatchResult",
    "DenseGrid",
    "DeviceError",
    "FaceIds",
    "FillModeError",
    "FormatError",
    "GridError",
    "MemoryBudgetError",
    "Mesh",
    "MeshError",
    "ModeError",
    "OpenMeshWarning",
    "Options",
    "OutputError",
    "OverlapWarning",
    "SVOFormatError",
    "ShaderError",
    "Stats",
    "Topology",
    "VariantError",
    "Voxelizer",
    "VoxelizerError",
    "check_mesh",
    "find_meshes",
    "list_devices",
    "load",
    "load_mesh",
    "save",
    "voxelize",
    "voxelize_dense",
    "voxelize_many",
    "write_preview",
]
