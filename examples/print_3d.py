"""A 3D print: a part voxelized at the printer's resolution, exported as a closed mesh.

The voxel size is the printer's (here 0.05 model units: think millimetres). `mode="both"`
keeps features thinner than a voxel, which a plain solid loses. The voxels' outer faces are a
closed, watertight 2-manifold whose volume is exactly count·h³, written as `.ply` (or `.obj`,
`.glb`) for a slicer. A preview PNG shows the result at a glance.

    python examples/print_3d.py [OUT_DIR]
"""

from __future__ import annotations

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
    voxelizer.save(part, out_dir / "gear-voxels.ply", overwrite=True)
    voxelizer.write_preview(part, out_dir / "gear-voxels.png", overwrite=True)

    printed = trimesh.load(out_dir / "gear-voxels.ply")  # what a slicer reads
    assert printed.is_watertight
    print(
        f"mesh: {len(printed.faces):,} triangles, watertight, volume {printed.volume:.4f} "
        f"(count·h³ = {part.count() * part.voxel_size**3:.4f})"
    )
    print(f"written: {out_dir / 'gear-voxels.ply'}, {out_dir / 'gear-voxels.png'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="print-")))
