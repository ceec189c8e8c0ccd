"""A part for 3D printing: the bundled gear voxelized at 0.02 units a voxel (the layer
height and the pixel size), written as a binary STL of its voxel faces and as a PNG slice
stack with its slices.json.

    python examples/print_part.py [OUT_DIR]

Writes gear.stl and gear-layers/ into OUT_DIR (default: a temporary folder) and prints
their sizes.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import voxelizer

MODEL = Path(__file__).resolve().parents[1] / "models" / "gear.ply"


def main(out_dir: Path) -> None:
    part = voxelizer.voxelize(MODEL, voxel_size=0.02)
    stl = out_dir / "gear.stl"
    voxelizer.save(part, stl, overwrite=True)
    sidecar = voxelizer.write_slices(part, out_dir / "gear-layers", overwrite=True)
    stack = json.loads(sidecar.read_text())
    print(
        f"{stl}: {stl.stat().st_size:,} bytes; {stack['layers']} layers of "
        f"{stack['width']}x{stack['height']} pixels, {stack['layer_height']:g} apart"
    )


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as folder:
            main(Path(folder))
