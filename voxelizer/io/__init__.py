"""Files: mesh loading, result writers and readers, the preview image.

The data model (grid, svo, mesh, placement) never touches a file; everything that does is
here. `save(result, path)` and `load(path)` pick the format by extension.
"""

from .meshes import MeshLike, load_mesh
from .preview import write_preview
from .readers import INPUT_FORMATS, load
from .slices import write_slices
from .writers import OUTPUT_FORMATS, save

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
