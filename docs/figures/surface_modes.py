"""Draw docs/figures/surface-modes.png: a table whose legs are thinner than a voxel, voxelized
in mode "solid" (left), "surface" (middle) and "both" (right) on a 48^3 grid, cut open
halfway through its depth and seen from +z (y up).

The solid keeps only the top, the one part thick enough to hold voxel centres; the surface
keeps the legs but is hollow; both keeps the legs and fills the top.
Run from the project root: `.venv/bin/python docs/figures/surface_modes.py`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import trimesh

import voxelizer
from voxelizer.render import GAP, encode_png, render_views

GRID = 48
OUT = Path(__file__).with_name("surface-modes.png")


def table() -> tuple[np.ndarray, np.ndarray]:
    """A top 4 units thick on four legs 0.5 units square, 24 units tall (y up); the grid's
    voxels are 1 unit, so no leg holds a voxel centre."""
    parts = [trimesh.creation.box(bounds=[[0, 24, 0], [48, 28, 48]])]
    for x in (4.6, 43.6):
        for z in (4.6, 43.6):
            parts.append(trimesh.creation.box(bounds=[[x, 0, z], [x + 0.5, 24, z + 0.5]]))
    vertices = np.concatenate([part.vertices for part in parts])
    offsets = np.cumsum([0] + [len(part.vertices) for part in parts[:-1]])
    faces = np.concatenate([part.faces + offset for part, offset in zip(parts, offsets)])
    return vertices, faces


def cut_view(voxels: np.ndarray) -> np.ndarray:
    """The +z view (the first panel of render_views) of the voxels in front of the middle."""
    cut = voxels.copy()
    cut[:, :, voxels.shape[2] // 2 :] = False
    image = render_views(cut)
    width = image.shape[0] - 2 * GAP  # the panel of a cube's +z view is square
    return image[:, : 2 * GAP + width]


def main() -> None:
    mesh = table()
    bounds = [[0, 0, 0], [48, 48, 48]]
    with voxelizer.Voxelizer() as vox:
        panels = [
            cut_view(vox.voxelize_dense(mesh, GRID, bounds=bounds, mode=mode).to_numpy())
            for mode in ("solid", "surface", "both")
        ]
    OUT.write_bytes(encode_png(np.concatenate(panels, axis=1)))
    print(f"wrote {OUT.name}: {OUT.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
