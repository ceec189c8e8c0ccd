"""A depth image by ray casting through a triangle grid built on the GPU.

    python examples/depth_image.py                       # the bundled torus knot
    python examples/depth_image.py --model ../shared/models/bunny.ply --out depth

Builds the grid (voxelizer.triangle_grid), casts one ray per pixel of a pinhole camera in
front of the mesh (TriangleGrid.intersect: the first hit's distance and triangle), and writes
the depth as a grey PNG (near is bright) with the raw distances as .npy, into --out (default:
a temporary directory).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

import voxelizer
from voxelizer.render import encode_png


def camera_rays(low: np.ndarray, high: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """One ray per pixel of a size x size pinhole camera on +z of the box, looking at its
    centre, with a 40° field of view (rows from the top, y up)."""
    centre, radius = (low + high) / 2, np.linalg.norm(high - low) / 2
    eye = centre + np.array([0.0, 0.0, 2.6 * radius])
    half = np.tan(np.radians(20))
    v, u = np.meshgrid(
        np.linspace(half, -half, size), np.linspace(-half, half, size), indexing="ij"
    )
    directions = np.stack([u, v, -np.ones_like(u)], axis=-1).reshape(-1, 3)
    return np.broadcast_to(eye, directions.shape), directions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/torus_knot.ply", help="a mesh file")
    parser.add_argument("--size", type=int, default=256, help="pixels per side")
    parser.add_argument("--out", type=Path, help="folder for depth.png and depth.npy")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="depth-"))
    out.mkdir(parents=True, exist_ok=True)

    mesh = voxelizer.load_mesh(args.model)
    started = time.perf_counter()
    grid = voxelizer.triangle_grid(mesh)  # density 4: about 4 cells per triangle
    built = time.perf_counter() - started
    origins, directions = camera_rays(*mesh.bounds, args.size)
    started = time.perf_counter()
    t, triangle, _ = grid.intersect(origins, directions)
    traced = time.perf_counter() - started

    depth = t.reshape(args.size, args.size)
    hit = np.isfinite(depth)
    near, far = depth[hit].min(), depth[hit].max()
    grey = np.zeros(depth.shape, np.uint8)
    grey[hit] = (255 - 200 * (depth[hit] - near) / max(far - near, 1e-12)).astype(np.uint8)
    (out / "depth.png").write_bytes(encode_png(np.repeat(grey[:, :, None], 3, axis=2)))
    np.save(out / "depth.npy", depth)
    print(
        f"{args.model}: {grid} in {built:.3f} s; {len(t):,} rays in {traced:.3f} s, "
        f"{int(hit.sum()):,} hits ({len(np.unique(triangle[triangle >= 0])):,} triangles seen); "
        f"wrote {out / 'depth.png'}"
    )


if __name__ == "__main__":
    main()
