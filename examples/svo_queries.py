"""The sparse voxel octree: a compact result to keep, query and coarsen.

`voxelizer.voxelize` returns an `SVO` built on the GPU: empty space has no nodes and a solid
cube is one bit, so it holds a 256³ voxelization in a fraction of the dense grid's bytes. It
answers point queries in world coordinates (inside or not), gives coarser levels of detail,
and saves to `.svo` files that load back bit for bit.

    python examples/svo_queries.py [OUT_DIR]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

import voxelizer

MODELS = Path(__file__).resolve().parents[1] / "models"


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    svo = voxelizer.voxelize(MODELS / "hollow_sphere.ply", grid=256)
    dense_bytes = int(np.prod(svo.shape)) // 8
    print(f"{svo.count():,} voxels in {svo.nbytes:,} bytes (the bit grid: {dense_bytes:,})")

    points = np.array([[0.0, 0.0, 0.0], [0.8, 0.0, 0.0], [0.0, 0.0, 1.2]])  # cavity, shell, out
    inside = svo.contains(points).tolist()
    print(f"the centre (in the cavity), a point in the shell, one outside: {inside}")
    assert inside == [False, True, False]

    for level in (1, 2):
        coarse = svo.lod(level)  # a coarse voxel is set where any of its fine ones is
        print(f"lod {level}: {coarse.shape}, {coarse.count():,} voxels")

    path = out_dir / "hollow_sphere.svo"
    voxelizer.save(svo, path, overwrite=True)
    assert np.array_equal(np.asarray(voxelizer.load(path)), np.asarray(svo))
    print(f"{path}: {path.stat().st_size:,} bytes, read back bit for bit")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="svo-")))
