"""A batch of the bundled models into each output format: `python examples/batch_outputs.py
[OUT_DIR]` (default: a temporary folder). Every file equals the single call's voxels."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

import voxelizer

MODELS = Path(__file__).resolve().parents[1] / "models"


def main(out_dir: Path) -> None:
    meshes = sorted(MODELS.glob("*.ply"))
    for name in ("svo", "npz", "vti"):  # svo: the default of every batch
        folder = out_dir / name
        for result in voxelizer.voxelize_many(meshes, grid=32, out_dir=folder, format=name):
            assert result.ok, result.error
            single = voxelizer.voxelize_dense(meshes[result.index], grid=32)
            assert np.array_equal(voxelizer.load(result.output).to_numpy(), single.to_numpy())
            print(f"{result.output.relative_to(out_dir)}: {result.solid_voxels:,} voxels")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as scratch:
            main(Path(scratch))
