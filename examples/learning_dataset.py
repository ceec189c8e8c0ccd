"""A dataset for learning: every mesh of a folder as a 32³ occupancy grid, in one batch.

`voxelize_many` keeps one device warm, reads the next meshes while one is voxelized, writes
each result as an `.npz` file (packed bits, readable with numpy alone) and reports a failing
mesh without stopping. The arrays then stack into the (N, 32, 32, 32) tensor a network trains
on. The command line does the same: `voxelize models/ --out-dir voxels/ --grid 32 --format npz`.

    python examples/learning_dataset.py [OUT_DIR]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

import voxelizer

MODELS = Path(__file__).resolve().parents[1] / "models"
GRID = 32


def read_npz(path: Path) -> np.ndarray:
    """An .npz voxel file as a bool array, with numpy only."""
    with np.load(path) as data:
        shape = data["shape"]
        return np.unpackbits(data["bits"], count=shape.prod()).reshape(shape).astype(bool)


def main(out_dir: Path) -> None:
    meshes = sorted(MODELS.glob("*.ply"))
    files = []
    for result in voxelizer.voxelize_many(
        meshes, grid=GRID, out_dir=out_dir, format="npz", overwrite=True
    ):
        if not result.ok:
            print(f"skipped {result.input}: {result.error}")
            continue
        print(f"{Path(result.input).name}: {result.solid_voxels:,} voxels -> {result.output}")
        files.append(Path(result.output))
    batch = np.stack([read_npz(path) for path in sorted(files)])
    print(f"training batch: {batch.shape} {batch.dtype}, occupancy {batch.mean():.3f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="voxels-")))
