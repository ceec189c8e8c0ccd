"""voxelizer: exact solid and surface voxelization of triangle meshes with Vulkan compute shaders."""

import importlib
from typing import TYPE_CHECKING, Any

from .api import (
    Voxelizer,
    check_mesh,
    load_triangle_grid,
    mesh_warnings,
    triangle_grid,
    voxelize,
    voxelize_dense,
)
from .choices import DEFAULT_VARIANT, FILL_MODES, MODES, SURFACES, VARIANT_CHOICES, VARIANTS
from .errors import (
    ArgumentError,
    ColorWarning,
    DeviceError,
    EmptyGridWarning,
    FillModeError,
    FormatError,
    GridError,
    GridIndexError,
    MemoryBudgetError,
    MeshError,
    ModeError,
    OpenMeshWarning,
    OutputError,
    OverlapWarning,
    ReentrantCallError,
    ShaderError,
    SVOFormatError,
    ThinResultWarning,
    VariantError,
    VoxelizerError,
)
from .gpu.device import list_devices
from .grid import DenseGrid
from .io import load, load_mesh, save
from .io.mesh_files import find_meshes
from .mesh import Mesh, Topology
from .options import Options
from .stats import Stats
from .svo import SVO, FaceIds

if TYPE_CHECKING:
    from .batch.engine import BatchResult, voxelize_many
    from .io.preview import write_preview
    from .io.slices import write_slices
    from .trigrid import TriangleGrid
    from .trigrid.files import save_triangle_grid

_BATCH_NAMES = ("BatchResult", "voxelize_many")
# Names imported on first use (module, name): what a batch of .npz files never touches.
_ON_USE = {
    "TriangleGrid": ("trigrid", "TriangleGrid"),
    "save_triangle_grid": ("trigrid.files", "save_triangle_grid"),
    "write_preview": ("io.preview", "write_preview"),
    "write_slices": ("io.slices", "write_slices"),
}


def __getattr__(name: str) -> Any:
    """The batch machinery (worker processes, threads, queues), the triangle grids, the
    preview and slice writers and the version (read from the package's metadata) on first
    use only: a single voxelization, the command line included, starts without importing
    them, and a batch imports only its own."""
    if name in _BATCH_NAMES:
        from .batch import engine

        return getattr(engine, name)
    if name in _ON_USE:
        module, attribute = _ON_USE[name]
        globals()[name] = found = getattr(
            importlib.import_module(f".{module}", __name__), attribute
        )
        return found
    if name == "__version__":
        from .version import package_version

        globals()["__version__"] = version = package_version()
        return version
    raise AttributeError(f"module 'voxelizer' has no attribute {name!r}")


__all__ = [
    "DEFAULT_VARIANT",
    "FILL_MODES",
    "MODES",
    "SURFACES",
    "SVO",
    "VARIANTS",
    "VARIANT_CHOICES",
    "ArgumentError",
    "BatchResult",
    "ColorWarning",
    "DenseGrid",
    "DeviceError",
    "EmptyGridWarning",
    "FaceIds",
    "FillModeError",
    "FormatError",
    "GridError",
    "GridIndexError",
    "MemoryBudgetError",
    "Mesh",
    "MeshError",
    "ModeError",
    "OpenMeshWarning",
    "Options",
    "OutputError",
    "OverlapWarning",
    "ReentrantCallError",
    "SVOFormatError",
    "ShaderError",
    "Stats",
    "ThinResultWarning",
    "Topology",
    "TriangleGrid",
    "VariantError",
    "Voxelizer",
    "VoxelizerError",
    "check_mesh",
    "find_meshes",
    "list_devices",
    "load",
    "load_mesh",
    "load_triangle_grid",
    "mesh_warnings",
    "save",
    "save_triangle_grid",
    "triangle_grid",
    "voxelize",
    "voxelize_dense",
    "voxelize_many",
    "write_preview",
    "write_slices",
]
