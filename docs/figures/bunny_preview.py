"""Draw docs/figures/bunny-preview.png, the README's picture: the Stanford bunny voxelized on
a 64³ grid, in the three views of `voxelize --preview` (from +z, +x and +y, y up).

Run from the project root: `.venv/bin/python docs/figures/bunny_preview.py ../shared/models`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import voxelizer

OUT = Path(__file__).with_name("bunny-preview.png")

if __name__ == "__main__":
    models = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("../shared/models")
    voxelizer.write_preview(voxelizer.voxelize(models / "bunny.ply", grid=64), OUT, overwrite=True)
    print(OUT)
