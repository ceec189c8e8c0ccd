"""Draw docs/figures/winding-slices.png: one slice of the open Stanford scan (bunny_scan, holes
in its base) at 256³ under fill_mode="parity", "vote" and "winding" (left to right), against
the closed bunny mapped onto the scan's box: grey where both are solid, red where the fill
adds voxels the closed bunny does not have, blue where it misses some. The slice is the
horizontal plane (constant y: the scan's up axis) with the most wrong voxels under parity,
in the base with its holes, seen from above: x to the right, z (the axis of the columns)
up the picture, so parity's errors are streaks up the picture.

Run from the project root:
`.venv/bin/python docs/figures/winding_slices.py --models-dir ../shared/models`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import voxelizer
from voxelizer.benchmarks.meshes import model_path
from voxelizer.benchmarks.winding import closed_counterpart
from voxelizer.io import load_mesh
from voxelizer.render import GAP, encode_png

GRID = 256
OUT = Path(__file__).with_name("winding-slices.png")
COLOURS = {
    "empty": (255, 255, 255),
    "both": (150, 150, 150),
    "extra": (220, 40, 40),
    "missing": (40, 80, 220),
}


def slice_image(got: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """uint8 (nz, nx, 3) of an [i, k] slice: z up, x to the right."""
    image = np.empty(got.shape + (3,), np.uint8)
    image[:] = COLOURS["empty"]
    image[got & truth] = COLOURS["both"]
    image[got & ~truth] = COLOURS["extra"]
    image[~got & truth] = COLOURS["missing"]
    return image.transpose(1, 0, 2)[::-1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models-dir", type=Path, required=True)
    args = parser.parse_args()
    scan = load_mesh(model_path("bunny_scan", args.models_dir))
    truth_mesh = closed_counterpart(scan, load_mesh(model_path("bunny", args.models_dir)))
    bounds = [scan.vertices.min(axis=0), scan.vertices.max(axis=0)]
    with voxelizer.Voxelizer() as vox:
        truth = vox.voxelize_dense(truth_mesh, GRID, bounds=bounds).to_numpy()
        fills = [
            vox.voxelize_dense(scan, GRID, bounds=bounds, fill_mode=mode).to_numpy()
            for mode in ("parity", "vote", "winding")
        ]
    j = int(np.argmax((fills[0] != truth).sum(axis=(0, 2))))
    panels = [slice_image(fill[:, j], truth[:, j]) for fill in fills]
    height = panels[0].shape[0]
    gap = np.full((height, GAP, 3), 255, np.uint8)
    row = [gap]
    for panel in panels:
        row += [panel, gap]
    OUT.write_bytes(encode_png(np.concatenate(row, axis=1)))
    print(f"wrote {OUT.name} (slice j = {j}): {OUT.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
