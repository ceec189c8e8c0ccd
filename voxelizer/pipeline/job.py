"""A job: what one voxelization asks of the pipeline, checked and placed already."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..choices import DEFAULT_FILL_MODE, DEFAULT_MODE, DEFAULT_SURFACE
from ..mesh import Mesh
from ..placement import Shape, WorkGrid, lattice_shift
from ..progress import Progress
from .geometry import fine_vertices_of


@dataclass(frozen=True, eq=False, kw_only=True)
class Job:
    """What the GPU work needs: a checked mesh, its vertices in grid space, the grid shape and
    the checked options that shape the work."""

    mesh: Mesh
    vertices: np.ndarray  # float32 (V, 3), grid space: [0, shape] per axis (of `lattice`)
    shape: Shape
    variant: str
    sort: str
    fill_mode: str = DEFAULT_FILL_MODE
    max_memory: int | None = None
    progress: Progress | None = None
    mode: str = DEFAULT_MODE
    surface: str = DEFAULT_SURFACE  # with mode "surface" ("both" always adds the conservative)
    # int64 (V, 3) fine grid-space vertices (placement.fine_vertices), which the solid
    # decisions are exact for; None: those of the float32 vertices as given.
    fine: np.ndarray | None = None
    # placement.fixed_gap of `vertices` and `fine` over the mesh's used vertices, where the
    # placement found it (placed_fixed_gap); None: the passes compute it.
    fixed_gap: int | None = None
    # The triangle soup of `vertices` and the mesh's faces, (T, 3, 3) float32, where it was
    # made before the call (placement.make_soup, in a reading process); None: gathered.
    soup: np.ndarray | None = None
    # The lattice the vertices are placed on (placement.work): None for the grid of `shape`
    # itself; for a grid that crops the mesh, one that holds the mesh too, whose window is
    # the result (gpu_grid.GpuGrid runs it and cuts the result).
    lattice: WorkGrid | None = None
    # The grid's own columns along x and y where `shape` is padded beyond them (the surface
    # pass's far faces, gpu_grid); None: shape's.
    columns: tuple[int, int] | None = None

    @property
    def sparse_grid(self) -> bool:
        """Whether the job runs the sparse path (sparse_slabs.py): a grid over FINE_LATTICE_MAX
        a side, which the dense passes cannot hold (its kernels exist on that lattice alone)."""
        return lattice_shift(self.shape) > 0

    def fine_vertices(self) -> np.ndarray:
        if self.fine is not None:
            return self.fine
        return fine_vertices_of(self.vertices, lattice_shift(self.shape))
