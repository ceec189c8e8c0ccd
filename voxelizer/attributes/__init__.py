"""Per-voxel attributes beyond the voxels: part labels and colours.

The mesh's parts and appearance (`appearance`: what the readers find in a file), the label
grid of several parts (`labels`), the colour of a surface voxel from its face and of the
inside from its column (`colours`, `closest`), colours as a palette (`palette`), and one
value per solid voxel in the order of an SVO (`voxel_values`). Data model only: no files
and no device; `run` drives the pipeline through a function the API hands it.
"""

from .appearance import DEFAULT_COLOR, Appearance, Material, Parts, Texture

__all__ = ["DEFAULT_COLOR", "Appearance", "Material", "Parts", "Texture"]
