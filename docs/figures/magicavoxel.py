"""Draw docs/figures/magicavoxel.png: the bundled painted gear (models/painted_gear.obj: a
gear textured with a colour wheel, a grey axle) voxelized at 64³ with colors=True, seen
from above and from the side, each pixel the colour of the first voxel along its column
(shaded by the slope of the surface there), next to the same voxels' colours after the
.vox palette (at most 255 colours: median cut).

Run from the project root: `.venv/bin/python docs/figures/magicavoxel.py`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import voxelizer
from voxelizer.attributes.palette import palette_of
from voxelizer.render import encode_png

MODEL = Path(__file__).resolve().parents[2] / "models" / "painted_gear.obj"
OUT = Path(__file__).with_name("magicavoxel.png")
GRID = 64
SCALE = 4  # pixels per voxel
GAP = 8
LIGHT = np.array([-0.4, 0.5, 0.77])


def view(voxels: np.ndarray, colors: np.ndarray, axis: int) -> np.ndarray:
    """RGB (rows, columns, 3) of the voxels seen from +axis (z: from above, y up; y: from the
    side, z up), the first voxel's colour along each column, white where none."""
    if axis == 2:  # look down -z: image rows y (top = high y), columns x
        solid, paint = voxels[:, ::-1, ::-1], colors[:, ::-1, ::-1]
        solid, paint = solid.transpose(1, 0, 2), paint.transpose(1, 0, 2, 3)
    else:  # look along +y from -y: rows z (top = high z), columns x
        solid, paint = voxels[:, :, ::-1], colors[:, :, ::-1]
        solid, paint = solid.transpose(2, 0, 1), paint.transpose(2, 0, 1, 3)
    hit = solid.any(axis=2)
    depth = np.argmax(solid, axis=2).astype(np.float64)
    first = np.take_along_axis(paint, np.argmax(solid, axis=2)[:, :, None, None], axis=2)[:, :, 0]
    rows, columns = np.gradient(np.where(hit, depth, depth[hit].max() if hit.any() else 0))
    normal = np.stack([columns, -rows, -np.ones_like(rows) * 1.5], axis=2)
    normal /= np.linalg.norm(normal, axis=2, keepdims=True)
    shade = 0.55 + 0.45 * np.clip(-(normal @ (LIGHT / np.linalg.norm(LIGHT))), 0.0, 1.0)
    image = np.where(hit[:, :, None], first[:, :, :3] * shade[:, :, None], 255.0)
    image = np.round(image).astype(np.uint8)
    return image.repeat(SCALE, axis=0).repeat(SCALE, axis=1)


def main() -> None:
    grid = voxelizer.voxelize_dense(MODEL, GRID, colors=True)
    voxels, colors = grid.to_numpy(), grid.to_numpy("color")
    palette, index, _ = palette_of(colors[voxels], 255)
    quantised = np.zeros_like(colors)
    quantised[voxels] = palette[index]
    panels = [view(voxels, paint, axis) for paint in (colors, quantised) for axis in (2, 1)]
    height = max(panel.shape[0] for panel in panels)
    row = [np.full((height, GAP, 3), 255, np.uint8)]
    for panel in panels:
        pad = height - panel.shape[0]
        row += [
            np.pad(panel, ((pad // 2, pad - pad // 2), (0, 0), (0, 0)), constant_values=255),
            np.full((height, GAP, 3), 255, np.uint8),
        ]
    image = np.concatenate(row, axis=1)
    border = np.full((GAP, image.shape[1], 3), 255, np.uint8)
    OUT.write_bytes(encode_png(np.concatenate([border, image, border])))
    colours = len(np.unique(colors[voxels], axis=0))
    print(f"{OUT}: {grid.count():,} voxels, {colours} colours, {len(palette)} in the palette")


if __name__ == "__main__":
    main()
