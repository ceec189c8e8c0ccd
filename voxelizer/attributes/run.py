"""Labels and colours of one voxelization: which runs of the pipeline they take, and how
their voxels combine.

- Labels of a mesh of several parts (modes "solid" and "both"): each part is voxelized
  alone (mode "solid", the asked fill mode) on the shared grid; the set voxels are then the
  union of the parts' solids (an overlap of two parts is filled, not emptied as parity fills
  one mesh's overlapping parts), united in mode "both" with the conservative surface of the
  whole mesh. A mesh of one part (or none) is voxelized once, as without labels, and every
  set voxel has label 1.
- Surface voxels, and their faces, come from the run of mode "surface" or "both" itself
  (with face ids); for colours in mode "solid", from one more run, of the conservative
  surface with face ids.

The API hands in `Runs`: the pipeline calls on the call's device, grid and options, so that
this module needs no device and no placement of its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..mesh import Mesh
from ..placement import GridPlacement
from ..stats import Stats
from .colours import Color, filled_colors, surface_colors
from .labels import Voxels, bools, label_grid, part_meshes, surface_labels


@dataclass(frozen=True)
class AttributeRequest:
    """Labels and colours asked for: the overlap rule of the labels, and the colour of the
    inside (None: the nearest surface voxel's along the column)."""

    labels: bool = False
    colors: bool = False
    overlap: str = "last"
    fill_color: Color | None = None


class Runs(Protocol):
    """Pipeline runs on the call's grid: `voxels(mesh, mode)` the set voxels of a mesh in a
    mode (the call's fill mode and surface kind; "surface" with mode="conservative" for the
    conservative surface), `marked(mesh, mode)` the same with the face ids: (voxels, marked
    voxels (M, 3) int64 [i, j, k], their face ids (M,))."""

    def voxels(self, mesh: Mesh, mode: str) -> Voxels: ...

    def marked(self, mesh: Mesh, mode: str) -> tuple[Voxels, np.ndarray, np.ndarray]: ...


@dataclass(frozen=True, eq=False)
class Attributed:
    """The voxels of a call with labels or colours, and those: bool (nx, ny, nz), uint16
    labels or None, uint8 (nx, ny, nz, 4) colours or None, the labels' names."""

    voxels: np.ndarray
    labels: np.ndarray | None
    colors: np.ndarray | None
    label_names: tuple[str, ...]
    marked: tuple[np.ndarray, np.ndarray] | None  # the surface's voxels and face ids, if run
    problems: tuple[str, ...] = ()  # what kept faces from their colours (ColorWarning)


def attributed_voxels(
    mesh: Mesh,
    placement: GridPlacement,
    mode: str,
    request: AttributeRequest,
    runs: Runs,
    name: str,
    stats: Stats,
) -> Attributed:
    """The voxels of `mesh` in `mode` with the labels and colours asked for; `name` names
    the one part of a mesh without parts."""
    started = time.perf_counter()
    parts = mesh.parts
    names = parts.names if parts is not None else (name,)
    several = request.labels and parts is not None and parts.count > 1 and mode != "surface"
    marked: tuple[np.ndarray, np.ndarray] | None = None
    labels = None
    if several:
        assert parts is not None
        solids = [
            None if part is None else runs.voxels(part, "solid")
            for part in part_meshes(mesh, parts)
        ]
        labels, voxels = label_grid(solids, request.overlap, placement.shape)
        stats.count(part_runs=len(solids))
        if mode == "both":
            surface, at, faces = runs.marked(mesh, "surface")
            marked = (at, faces)
            voxels |= bools(surface)
    elif mode == "solid":
        voxels = bools(runs.voxels(mesh, mode))
    else:
        run, at, faces = runs.marked(mesh, mode)
        voxels, marked = bools(run), (at, faces)
    if request.labels:
        if labels is None:
            labels = voxels.astype(np.uint16)
        if marked is not None and mode != "solid":
            surface_labels(labels, marked[0], marked[1], parts)
    colors = None
    problems: list[str] = []
    if request.colors:
        if marked is None:
            _, at, faces = runs.marked(mesh, "surface")
            marked = (at, faces)
        marked_colors, problems = surface_colors(mesh, placement, marked[0], marked[1])
        colors = filled_colors(voxels, marked[0], marked_colors, request.fill_color)
    stats.add_host(attributes=(time.perf_counter() - started) * 1e3)
    kept = marked if mode != "solid" else None  # (a solid's colours' surface is no result)
    names = names if request.labels else ()
    return Attributed(voxels, labels, colors, names, kept, tuple(problems))
