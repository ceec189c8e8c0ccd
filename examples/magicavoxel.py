"""MagicaVoxel: a model as a `.vox` scene, standing upright, and a coloured one.

MagicaVoxel's z is up; many models (glTF, most game assets) are y-up. `up_axis="y"` turns
the model so that its +y becomes MagicaVoxel's +z (a rotation, not a mirror). A grid of at
most 256 voxels a side is one plain model, which MagicaVoxel, py-vox-io and midvoxio read
exactly; a larger grid is written as tiles placed in the scene. Here a y-up copy of the gear
(its axis along y) comes out lying flat, as it should.

With `colors=True` the file's palette holds the model's colours: the bundled painted gear
(models/painted_gear.obj, a gear textured with a colour wheel and a grey axle) has more
than 255 colours at 64³, so the palette is their median cut (exact up to 255).

    python examples/magicavoxel.py [OUT_DIR]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

import voxelizer
from voxelizer.attributes.palette import palette_of

MODELS = Path(__file__).resolve().parents[1] / "models"


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    gear = voxelizer.load_mesh(MODELS / "gear.ply")
    y_up = gear.vertices[:, [0, 2, 1]] * [1, 1, -1]  # its axis along y: a y-up asset
    voxels = voxelizer.voxelize_dense((y_up, gear.faces), voxel_size=0.05)
    print(f"y-up gear: {voxels.shape} (x, y, z), {voxels.count():,} voxels")

    path = out_dir / "gear.vox"
    voxelizer.save(voxels, path, up_axis="y", overwrite=True)
    scene = voxelizer.load(path)  # in MagicaVoxel's axes: (x, y, z) = (i, nz - 1 - k, j)
    print(f"{path}: {scene.shape} in MagicaVoxel's axes, {scene.count():,} voxels")
    assert scene.count() == voxels.count() and scene.shape[2] == voxels.shape[1]
    assert np.array_equal(scene.to_numpy(), np.flip(voxels.to_numpy(), axis=2).transpose(0, 2, 1))

    painted = voxelizer.voxelize_dense(MODELS / "painted_gear.obj", 64, colors=True)
    colours = painted.to_numpy("color")[painted.to_numpy()]
    path = out_dir / "painted_gear.vox"
    voxelizer.save(painted, path, overwrite=True)
    palette, _, exact = palette_of(colours)  # the palette the .vox file holds
    print(
        f"{path}: {painted.count():,} voxels of {len(np.unique(colours, axis=0)):,} colours, "
        f"a palette of {len(palette)} ({'exact' if exact else 'median cut'})"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="vox-")))
