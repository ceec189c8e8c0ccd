"""A coloured MagicaVoxel model: the bundled painted gear (a textured gear and a grey axle,
models/painted_gear.obj) voxelized with its colours and written as .vox, the palette exact
up to 255 colours and a median cut beyond.

    python examples/magicavoxel.py [OUT_DIR]

Writes painted_gear.vox into OUT_DIR (default: a temporary folder) and says how many
colours the voxels have and how many the palette keeps.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

import voxelizer
from voxelizer.attributes.palette import palette_of

MODEL = Path(__file__).resolve().parents[1] / "models" / "painted_gear.obj"


def main(out_dir: Path) -> Path:
    grid = voxelizer.voxelize_dense(MODEL, 64, colors=True)
    colours = grid.to_numpy("color")[grid.to_numpy()]
    path = out_dir / "painted_gear.vox"
    voxelizer.save(grid, path, overwrite=True)
    palette, _, exact = palette_of(colours)  # the palette the .vox file holds
    print(
        f"{path}: {grid.count():,} voxels of {len(np.unique(colours, axis=0)):,} colours, "
        f"a palette of {len(palette)} ({'exact' if exact else 'median cut'})"
    )
    return path


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as folder:
            main(Path(folder))
