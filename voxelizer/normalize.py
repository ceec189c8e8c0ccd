"""Mesh normalisation presets: the conventions learning datasets store their meshes and
grids in.

"unit-cube" (ShapeNet's): the mesh's box centred on the origin and scaled uniformly so that
its longest side spans [-0.5, 0.5]:

    v' = (v - (lo + hi) / 2) / max(hi - lo)

A grid of N voxels a side with a border of `pad` empty voxels around that cube has

    h = 1 / (N - 2 pad),    bounds = [-0.5 - pad h, 0.5 + pad h] on every axis,

so the mesh's longest side covers N - 2 pad voxels (32³ with one voxel of border: 30 voxels
of 1/30). `unit_cube_bounds` gives those bounds for voxelize's `bounds`.
"""

from __future__ import annotations

import numpy as np

from .errors import GridError, ModeError
from .io.meshes import MeshLike, load_mesh
from .mesh import Mesh, checked_mesh
from .placement import check_resolution

FITS = ("unit-cube",)


def fit_mesh(mesh: MeshLike, fit: str = "unit-cube") -> Mesh:
    """The mesh normalised by the preset `fit` (see the module docstring): a new Mesh, the
    faces as they were. Rounding never puts a vertex outside [-0.5, 0.5]."""
    if fit not in FITS:
        raise ModeError(f"unknown fit {fit!r} (choose from {', '.join(FITS)})")
    loaded = load_mesh(mesh)
    lo, hi = loaded.bounds
    centre = (lo + hi) / 2.0
    longest = float((hi - lo).max())
    vertices = np.clip((loaded.vertices - centre) / longest, -0.5, 0.5)
    return checked_mesh(vertices, loaded.faces, "the fitted mesh")


def unit_cube_bounds(grid: int, pad: int = 0) -> np.ndarray:
    """float64 (2, 3): the bounds that place an N³ grid (`grid` = N) on the unit cube with
    `pad` voxels of border: [-0.5 - pad h, 0.5 + pad h], h = 1 / (N - 2 pad)."""
    n = check_resolution(grid)
    if not isinstance(pad, (int, np.integer)) or pad < 0 or n - 2 * int(pad) < 1:
        raise GridError(f"pad must be a whole number of voxels from 0 to {(n - 1) // 2}")
    h = 1.0 / (n - 2 * int(pad))
    half = 0.5 + int(pad) * h
    return np.array([[-half] * 3, [half] * 3])


def unit_cube_border(grid: int, bounds: np.ndarray) -> int:
    """The `pad` of unit_cube_bounds(grid, pad) == bounds: its inverse (the box is
    N / (N - 2 pad) wide)."""
    width = float(bounds[1][0] - bounds[0][0])
    return round((grid - grid / width) / 2)
