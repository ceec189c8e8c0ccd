"""The CPU references: exact voxelizations on the CPU, written apart from the GPU's code, that
the passes are checked against bit for bit: the solid (solid.py: parity, vote, union), the
surfaces (surface.py: conservative, thin, face ids) and the winding rule (winding.py).

They import the data model (mesh, placement, grid, components) and the vocabulary, never the
pipeline nor the GPU layer (tests/faces/test_layout.py says so).
"""

from .solid import (
    column_counts,
    solid_columns,
    union_columns,
    vote_columns,
    voxelize_reference,
)
from .surface import surface_columns, surface_face_ids, voxelize_surface_reference
from .winding import voxelize_winding_reference, winding_columns

__all__ = [
    "column_counts",
    "solid_columns",
    "surface_columns",
    "surface_face_ids",
    "union_columns",
    "vote_columns",
    "voxelize_reference",
    "voxelize_surface_reference",
    "voxelize_winding_reference",
    "winding_columns",
]
