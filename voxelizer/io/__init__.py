"""Files: mesh loading, result writers and readers, the preview image.

The data model (grid, svo, mesh, placement) never touches a file; everything that does is
here. `save(result, path)` and `load(path)` pick the format by extension.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .meshes import MeshLike, load_mesh
from .readers import INPUT_FORMATS, load
from .writers import OUTPUT_FORMATS, save

if TYPE_CHECKING:
    from .preview import write_preview
    from .slices import write_slices

_ON_USE = {"write_preview": "preview", "write_slices": "slices"}  # imported on first use


def __getattr__(name: str) -> Any:
    """The preview image's and the slice stack's writers, imported on first use (the
    renderer and the PNG encoder: a batch of other files never needs them)."""
    if name in _ON_USE:
        globals()[name] = found = getattr(import_module(f".{_ON_USE[name]}", __name__), name)
        return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "INPUT_FORMATS",
    "OUTPUT_FORMATS",
    "MeshLike",
    "load",
    "load_mesh",
    "save",
    "write_preview",
    "write_slices",
]
