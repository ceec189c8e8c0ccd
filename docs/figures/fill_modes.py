"""Draw docs/figures/fill-modes.png: fill_mode "parity", "vote" and "union" (left to right)
on two meshes, cut open halfway up and seen from +z: two overlapping closed boxes (top row)
and a box with half of its bottom face missing (bottom row).

The cut shows what each mode does where parity's assumption (one closed surface) fails:
the overlap is inside both boxes, so its crossings cancel (parity and vote leave it empty,
union fills it); under the hole the columns cross the top face only (parity leaves them
empty, vote repairs them from the other five directions, union fills open parts by parity).
Run from the project root: `.venv/bin/python docs/figures/fill_modes.py`.
"""

from __future__ import annotations

import warnings
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


def holed_box() -> tuple[np.ndarray, np.ndarray]:
    """A closed box with one of the two triangles of its bottom face (normal -z) removed."""
    box = trimesh.creation.box(bounds=[[0, 0, 0], [3, 3, 3]])
    bottom = np.flatnonzero(box.face_normals[:, 2] < -0.5)
    return np.asarray(box.vertices), np.delete(box.faces, bottom[:1], axis=0)


def cut_view(voxels: np.ndarray) -> np.ndarray:
    """The +z view (the first panel of render_views) of the voxels below the middle height."""
    cut = voxels.copy()
    cut[:, :, voxels.shape[2] // 2 :] = False
    image = render_views(cut)
    width = image.shape[0] - 2 * GAP  # the panel of a cube's +z view is square
    return image[:, : 2 * GAP + width]


def main() -> None:
    rows = []
    with warnings.catch_warnings(), voxelizer.Voxelizer() as vox:
        warnings.simplefilter("ignore", voxelizer.OpenMeshWarning)  # the holed box, meant
        warnings.simplefilter("ignore", voxelizer.OverlapWarning)  # the boxes, meant
        for mesh in (overlapping_boxes(), holed_box()):
            panels = [
                cut_view(vox.voxelize_dense(mesh, GRID, fill_mode=mode).to_numpy())
                for mode in ("parity", "vote", "union")
            ]
            rows.append(np.concatenate(panels, axis=1))
    OUT.write_bytes(encode_png(np.concatenate(rows, axis=0)))
    print(f"wrote {OUT.name}: {OUT.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
