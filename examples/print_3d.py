"""A 3D print: a part voxelized at the printer's resolution, exported as a closed mesh and as
a slice stack.

The voxel size is the printer's (here 0.05 model units: think millimetres). `mode="both"`
keeps features thinner than a voxel, which a plain solid loses. The voxels' outer faces are a
closed, watertight 2-manifold whose volume is exactly count·h³, written as a binary `.stl`
(or `.ply`, `.obj`, `.glb`) for a slicer. A resin printer takes the PNG slice stack instead:
one 1-bit mask per layer and slices.json with the layer height. A preview PNG shows the result
at a glance.

    python examples/print_3d.py [OUT_DIR]
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import trimesh

import voxelizer

MODELS = Path(__file__).resolve().parents[1] / "models"
LAYER = 0.05  # the printer's voxel, in model units


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    part = voxelizer.voxelize(MODELS / "gear.ply", voxel_size=LAYER, mode="both")
    print(f"gear: {part.shape} voxels of {LAYER}, {part.count():,} set")
    voxelizer.save(part, out_dir / "gear-voxels.stl", overwrite=True)
    voxelizer.write_preview(part, out_dir / "gear-voxels.png", overwrite=True)

    printed = trimesh.load(out_dir / "gear-voxels.stl")  # what a slicer reads, merged
    assert printed.is_watertight
    print(
        f"mesh: {len(printed.faces):,} triangles, watertight, volume {printed.volume:.4f} "
        f"(count·h³ = {part.count() * part.voxel_size**3:.4f})"
    )
    sidecar = voxelizer.write_slices(part, out_dir / "gear-layers", overwrite=True)
    stack = json.loads(sidecar.read_text())
    print(
        f"slices: {stack['layers']} layers of {stack['width']}x{stack['height']} pixels, "
        f"{stack['layer_height']:g} apart"
    )
    print(f"written: {out_dir / 'gear-voxels.stl'}, {out_dir / 'gear-layers'}, preview")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="print-")))
