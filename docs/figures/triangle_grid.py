"""Draw docs/figures/triangle-grid.png: the Stanford bunny ray cast through its triangle grid
(left: each pixel's first hit shaded by its triangle's normal, the background black) and the
grid itself (right: the triangles each cell of the middle layer lists, one square per cell,
from none (black) through few (blue) to the most (yellow)).

Run from the project root: `.venv/bin/python docs/figures/triangle_grid.py` (reads
../shared/models/bunny.ply).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import voxelizer
from voxelizer.render import GAP, encode_png

MODEL = Path("../shared/models/bunny.ply")
OUT = Path(__file__).with_name("triangle-grid.png")
SIZE = 384


def shaded(grid: voxelizer.TriangleGrid, mesh: voxelizer.Mesh) -> np.ndarray:
    low, high = mesh.bounds
    centre, radius = (low + high) / 2, np.linalg.norm(high - low) / 2
    eye = centre + np.array([0.0, 0.0, 2.6 * radius])
    half = np.tan(np.radians(20))
    v, u = np.meshgrid(np.linspace(half, -half, SIZE), np.linspace(-half, half, SIZE), indexing="ij")
    directions = np.stack([u, v, -np.ones_like(u)], axis=-1).reshape(-1, 3)
    _, triangle, _ = grid.intersect(np.broadcast_to(eye, directions.shape), directions)
    corners = mesh.vertices[mesh.faces]
    normals = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    normals /= np.linalg.norm(normals, axis=1, keepdims=True) + 1e-30
    light = np.array([0.4, 0.6, 0.7]) / np.linalg.norm([0.4, 0.6, 0.7])
    hit = triangle >= 0
    level = np.zeros(len(triangle))
    level[hit] = 0.15 + 0.85 * np.abs(normals[triangle[hit]] @ light)
    image = np.zeros((len(triangle), 3))
    image[hit] = level[hit, None] * np.array([235, 225, 205])
    return image.reshape(SIZE, SIZE, 3).astype(np.uint8)


def heat(values: np.ndarray) -> np.ndarray:
    """A black-blue-yellow ramp of values in [0, 1] (0 exactly: black)."""
    stops = np.array([[20, 20, 40], [40, 70, 200], [60, 180, 170], [250, 230, 60]], float)
    position = np.clip(values, 0, 1) * (len(stops) - 1)
    low = np.minimum(position.astype(int), len(stops) - 2)
    fraction = (position - low)[..., None]
    colour = stops[low] * (1 - fraction) + stops[low + 1] * fraction
    colour[values <= 0] = 0
    return colour.astype(np.uint8)


def layer(grid: voxelizer.TriangleGrid) -> np.ndarray:
    """The triangles per cell of the middle layer along z, y up, scaled to SIZE pixels."""
    counts = grid.cell_count[:, :, grid.shape[2] // 2].T[::-1]  # rows: y from the top
    scaled = np.log1p(counts) / np.log1p(max(int(counts.max()), 1))
    cell = SIZE // max(counts.shape)
    image = np.repeat(np.repeat(heat(scaled), cell, axis=0), cell, axis=1)
    framed = np.zeros((SIZE, SIZE, 3), np.uint8)
    top, left = (SIZE - image.shape[0]) // 2, (SIZE - image.shape[1]) // 2
    framed[top : top + image.shape[0], left : left + image.shape[1]] = image
    return framed


def main() -> None:
    mesh = voxelizer.load_mesh(MODEL)
    grid = voxelizer.triangle_grid(mesh)
    gap = np.full((SIZE, GAP, 3), 255, np.uint8)
    OUT.write_bytes(encode_png(np.concatenate([shaded(grid, mesh), gap, layer(grid)], axis=1)))
    print(f"wrote {OUT}: {grid}")


if __name__ == "__main__":
    main()
