"""A simulation mask on the grid a solver asks for: the bundled torus knot as a solid on the
box [-2, 2] x [-2, 2] x [-1, 1] with cells of 0.05 x 0.05 x 0.025 (80 x 80 x 80), the cell
centres, a field sampled there, and the mask written as .npz and .vti (ParaView) files.

    python examples/simulation_mask.py [OUT_DIR]

Writes into OUT_DIR, or a temporary folder that is removed at the end.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

import voxelizer

MODEL = Path(__file__).resolve().parents[1] / "models" / "torus_knot.ply"
BOX = [[-2.0, -2.0, -1.0], [2.0, 2.0, 1.0]]  # the solver's domain
CELL = (0.05, 0.05, 0.025)  # its cell sizes along x, y, z


def main(out_dir: Path) -> None:
    # The grid is the box exactly: cell (0, 0, 0)'s corner at the box's min corner.
    mask = voxelizer.voxelize_dense(MODEL, voxel_size=CELL, bounds=BOX)
    assert mask.shape == (80, 80, 80) and np.array_equal(mask.origin, BOX[0])
    assert mask.voxel_size == CELL
    solid = mask.to_numpy()
    print(f"{mask.shape} cells of {CELL}, {solid.sum():,} solid ({solid.mean():.1%})")

    # Cell centres: one axis at a time, or as three broadcast views (no memory per cell).
    print(f"first x centres: {mask.xs[:3]}, last z centre: {mask.zs[-1]}")
    x, y, z = mask.centres()
    # A field at every cell centre, e.g. an initial temperature, held fixed in the solid.
    temperature = np.where(solid, 350.0, 290.0 + 10.0 * np.exp(-(x**2 + y**2) - 4.0 * z**2))
    print(f"temperature: {temperature.min():.1f} to {temperature.max():.1f} K")

    # Probes at world positions: which cell holds each, and is it solid?
    solid_cells = np.argwhere(solid)
    middle = len(solid_cells) // 2
    in_knot = mask.centres(solid_cells[middle : middle + 1])[0]  # a solid cell's centre
    probes = np.array([in_knot, [0.0, 0.0, 0.0], [3.0, 0.0, 0.0]])
    cells = mask.world_to_index(probes)
    inside = mask.inside(cells)
    for probe, cell, ok in zip(probes, cells, inside):
        where = f"cell {cell.tolist()}, solid: {bool(solid[tuple(cell)])}" if ok else "outside"
        print(f"probe {np.round(probe, 4).tolist()}: {where}")
    assert solid[tuple(cells[0])] and not inside[2]

    voxelizer.save(mask, out_dir / "mask.npz", overwrite=True)  # shape, origin, the three sizes
    voxelizer.save(mask, out_dir / "mask.vti", overwrite=True)  # ParaView: Spacing = CELL
    np.save(out_dir / "temperature.npy", temperature)
    again = voxelizer.load(out_dir / "mask.npz")
    assert again.voxel_size == CELL and np.array_equal(again.to_numpy(), solid)
    print(f"wrote {', '.join(sorted(p.name for p in out_dir.iterdir()))} to {out_dir}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        target = Path(sys.argv[1])
        target.mkdir(parents=True, exist_ok=True)
        main(target)
    else:
        with tempfile.TemporaryDirectory() as folder:
            main(Path(folder))
