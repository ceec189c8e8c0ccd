"""A simulation mask on a given box: the solid of a part on the grid a solver asks for.

A fluid or FEM solver fixes its domain and cell size; the mask must sit on exactly those
cells. With `bounds` (the domain) and `voxel_size` (the cell), and domain sides that are
multiples of 4 cells, the grid starts at the domain's min corner and cell (i, j, k) is centred
at min + (i + ½)·h. `mode="both"` also keeps the parts thinner than a cell (the solid united
with every cell a triangle touches). The mask is saved as `.npz` (numpy) and `.vti`
(ParaView, PyVista).

    python examples/simulation_mask.py [OUT_DIR]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

import voxelizer

MODELS = Path(__file__).resolve().parents[1] / "models"
DOMAIN = np.array([[-2.0, -2.0, -2.0], [2.0, 2.0, 2.0]])  # the solver's box, world units
CELL = 1 / 16  # its cell size: 64 cells a side


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    mask = voxelizer.voxelize_dense(
        MODELS / "torus_knot.ply", voxel_size=CELL, bounds=DOMAIN, mode="both"
    )
    assert np.array_equal(mask.origin, DOMAIN[0]), mask.origin  # the grid is the domain's
    assert mask.shape == (64, 64, 64) and mask.voxel_size == CELL
    solid = mask.to_numpy()
    print(f"mask {mask.shape} from {mask.origin} with h = {mask.voxel_size}: {solid.sum():,} cells")

    centres = DOMAIN[0] + (np.argwhere(solid) + 0.5) * CELL  # the solid cells' centres
    print(f"solid cells span {centres.min(axis=0)} .. {centres.max(axis=0)}")
    voxelizer.save(mask, out_dir / "mask.npz", overwrite=True)
    voxelizer.save(mask, out_dir / "mask.vti", overwrite=True)
    print(f"written: {out_dir / 'mask.npz'}, {out_dir / 'mask.vti'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="mask-")))
