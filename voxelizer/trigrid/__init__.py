"""Triangle grids: a uniform (or two-level) grid of triangle references, built on the GPU by
the voxelizer's own passes, exact, with ray and box queries (docs/guide/triangle-grid.md).

`build_triangle_grid` places and builds one on an engine's device; voxelizer.triangle_grid
is the public face (voxelizer/api.py)."""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence

import numpy as np

from ..errors import GridError
from ..mesh import Mesh
from .build import CHUNK_COLUMNS, SMALL_COLUMNS, TOP_DENSITY, DeviceGrid, GridEngine
from .grid import TriangleGrid
from .placement import DEFAULT_DENSITY, CellPlacement

LEVELS = (1, 2)

__all__ = [
    "DEFAULT_DENSITY",
    "LEVELS",
    "CellPlacement",
    "DeviceGrid",
    "GridEngine",
    "TriangleGrid",
    "build_triangle_grid",
]


def build_triangle_grid(
    engine: GridEngine,
    mesh: Mesh,
    resolution: int | Sequence[int] | None = None,
    *,
    cell_size: float | Sequence[float] | None = None,
    density: float | None = None,
    levels: int = 1,
    bounds: object = None,
    branchless: int = 1,
    small_columns: int = SMALL_COLUMNS,
    chunk_columns: int = CHUNK_COLUMNS,
) -> TriangleGrid:
    """The grid of `mesh` built on the engine's device (voxelizer.triangle_grid documents
    the arguments). branchless (the exact tests' variant), small_columns and chunk_columns
    (the load balance, shaders/cells.comp) change how it is built, never the result."""
    if isinstance(levels, bool) or levels not in LEVELS:
        raise GridError(f"levels must be 1 or 2, not {levels!r}")
    started = time.perf_counter()
    asked = _hashable((resolution, cell_size, density, bounds, levels))
    place = lambda: _place(mesh, resolution, cell_size, density, bounds, levels)  # noqa: E731
    # (a rebuild of the same mesh, asked alike, places nothing again)
    placement, leaf_density, vertices = place() if asked is None else mesh.placed(asked, place)
    faces = mesh.indices  # (read-only: a rebuild of this mesh and placement uploads nothing)
    place_ms = (time.perf_counter() - started) * 1e3
    device, stats = engine.build(
        vertices, faces, placement, levels=levels, leaf_density=leaf_density,
        branchless=branchless, small_columns=small_columns, chunk_columns=chunk_columns,
    )  # fmt: skip
    stats.add_host(placement=place_ms)
    return TriangleGrid(placement, levels, device=device, stats=stats)


def _place(
    mesh: Mesh,
    resolution: int | Sequence[int] | None,
    cell_size: float | Sequence[float] | None,
    density: float | None,
    bounds: object,
    levels: int,
) -> tuple[CellPlacement, float, np.ndarray]:
    """The placement of the grid (of its top level, for two), the leaves' density, and the
    mesh's vertices in grid space (read-only)."""
    low, high = mesh.bounds
    if levels == 1:
        placement = CellPlacement.fit(low, high, mesh.triangle_count, resolution, cell_size,
                                      density, bounds)  # fmt: skip
        leaf_density = DEFAULT_DENSITY
    else:
        if resolution is not None or cell_size is not None:
            # the top level's cells: as asked; the leaves: the default density
            placement = CellPlacement.fit(low, high, mesh.triangle_count, resolution, cell_size,
                                          None, bounds)  # fmt: skip
        else:
            placement = CellPlacement.fit(low, high, mesh.triangle_count, density=TOP_DENSITY,
                                          bounds=bounds)  # fmt: skip
        leaf_density = DEFAULT_DENSITY if density is None else float(density)
    key = ("trigrid", placement.shape, placement.origin.tobytes(), placement.cell_size.tobytes())
    vertices = mesh.placed(key, lambda: _frozen(placement.grid_vertices(mesh.vertices)))
    return placement, leaf_density, vertices


def _hashable(value: object) -> Hashable | None:
    """A key of what the caller asked for, or None where some part of it is not plain
    (an array, say: its placement is not kept)."""
    if value is None or type(value) in (int, float, bool):
        return ("trigrid", type(value).__name__, value)  # (1, 1.0 and True are equal keys)
    if isinstance(value, (tuple, list)):
        parts = tuple(_hashable(part) for part in value)
        return None if any(part is None for part in parts) else ("trigrid", parts)
    return None


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array
