"""voxelizer: exact solid and surface voxelization of triangle meshes with Vulkan compute shaders."""

import importlib
from typing import TYPE_CHECKING, Any

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

# (Imported here, not on first use: the module of its name, imported by others, would
# otherwise be what `voxelizer.mesh_warnings` finds.)
from .mesh_warnings import mesh_warnings

if TYPE_CHECKING:
    from .api import (
        Voxelizer,
        check_mesh,
        load_triangle_grid,
        triangle_grid,
        voxelize,
        voxelize_dense,
    )
    from .batch.engine import BatchResult, voxelize_many
    from .gpu.device import list_devices
    from .grid import DenseGrid
    from .io import load, load_mesh, save
    from .io.mesh_files import find_meshes
    from .io.preview import write_preview
    from .io.slices import write_slices
    from .mesh import Mesh, Topology
    from .options import Options
    from .stats import Stats
    from .svo import SVO, FaceIds
    from .trigrid import TriangleGrid
    from .trigrid.files import save_triangle_grid

_BATCH_NAMES = ("BatchResult", "voxelize_many")
# Every other name of the API, imported on first use (module, name): `import voxelizer` costs
# the errors and the vocabulary only, and the command line imports what its run uses
# (docs/benchmarks.md, "The batch command's start-up and exit").
_ON_USE = {
    **{
        name: ("api", name)
        for name in (
            "Voxelizer",
            "check_mesh",
            "load_triangle_grid",
            "triangle_grid",
            "voxelize",
            "voxelize_dense",
        )
    },
    "list_devices": ("gpu.device", "list_devices"),
    "DenseGrid": ("grid", "DenseGrid"),
    "load": ("io", "load"),
    "load_mesh": ("io", "load_mesh"),
    "save": ("io", "save"),
    "find_meshes": ("io.mesh_files", "find_meshes"),
    "Mesh": ("mesh", "Mesh"),
    "Topology": ("mesh", "Topology"),
    "Options": ("options", "Options"),
    "Stats": ("stats", "Stats"),
    "SVO": ("svo", "SVO"),
    "FaceIds": ("svo", "FaceIds"),
    "TriangleGrid": ("trigrid", "TriangleGrid"),
    "save_triangle_grid": ("trigrid.files", "save_triangle_grid"),
    "write_preview": ("io.preview", "write_preview"),
    "write_slices": ("io.slices", "write_slices"),
}


# What `import voxelizer` made available before its names were imported on first use.
_SUBPACKAGES = ("api", "gpu", "io", "pipeline", "attributes")


def __getattr__(name: str) -> Any:
    """The API's names (the device, the pipeline, the formats), the batch machinery, the
    triangle grids, the preview and slice writers and the version (read from the package's
    metadata) on first use only: `import voxelizer` and the command line start without the
    pipeline, a single voxelization imports no batch machinery, and a batch only its own. A
    subpackage (`voxelizer.io`) is there too, as it was when the package imported it."""
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
    if name in _SUBPACKAGES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'voxelizer' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


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
