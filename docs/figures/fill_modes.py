"""Draw docs/figures/fill-modes.png: two overlapping closed boxes under fill_mode="parity"
(left) and fill_mode="union" (right), cut open halfway up the overlap and seen from +z.

From outside both look the same; the cut shows what parity does to the overlap (it is
inside both boxes, so its crossings cancel: a hole) and what union does (it fills it).
Run from the project root: `.venv/bin/python docs/figures/fill_modes.py`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import trimesh

import voxelizer
from voxelizer.render import GAP, encode_png, render_views

GRID = 64
OUT = Path(__file__).with_name("fill-modes.png")


def overlapping_boxes() -> tuple[np.ndarray, np.ndarray]:
    """Two closed, outward-facing boxes (vertices, faces) overlapping in a third of a side."""
    first = trimesh.creation.box(bounds=[[0, 0, 0], [3, 3, 3]])
    second = trimesh.creation.box(bounds=[[2, 1.5, 1], [5, 4.5, 4]])
    vertices = np.concatenate([first.vertices, second.vertices])
    faces = np.concatenate([first.faces, second.faces + len(first.vertices)])
    return vertices, faces


def cut_view(voxels: np.ndarray) -> np.ndarray:
    """The +z view (the first panel of render_views) of the voxels below the middle height."""
    cut = voxels.copy()
    cut[:, :, voxels.shape[2] // 2 :] = False
    image = render_views(cut)
    width = image.shape[0] - 2 * GAP  # the panel of a cube's +z view is square
    return image[:, : 2 * GAP + width]


def main() -> None:
    mesh = overlapping_boxes()
    with voxelizer.Voxelizer() as vox:
        panels = [
            cut_view(vox.voxelize_dense(mesh, GRID, fill_mode=mode).to_numpy())
            for mode in ("parity", "union")
        ]
    OUT.write_bytes(encode_png(np.concatenate(panels, axis=1)))
    print(f"wrote {OUT.name}: {OUT.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
