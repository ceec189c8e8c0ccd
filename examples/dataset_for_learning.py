"""A dataset for learning: meshes into one voxel shard store, read back by a DataLoader.

    python examples/dataset_for_learning.py [MESH_DIR] [--grid 32] [--pad 1]

The meshes (default: the bundled models) are fitted to the unit cube, voxelized with
fill_mode="auto" on an N³ grid with a border of `pad` voxels, written to one Zarr store in a
temporary folder, and read back as float tensors through a torch DataLoader with two workers.
"""

from __future__ import annotations

import argparse
import tempfile
import warnings
from pathlib import Path

import torch
from torch.utils.data import DataLoader

import voxelizer
from voxelizer.normalize import fit_mesh, unit_cube_bounds
from voxelizer.torch import VoxelDataset

MODELS = Path(__file__).resolve().parents[1] / "models"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("meshes", nargs="?", type=Path, default=MODELS)
    parser.add_argument("--grid", type=int, default=32)
    parser.add_argument("--pad", type=int, default=1)
    args = parser.parse_args()
    paths = voxelizer.find_meshes([str(args.meshes)]).paths
    meshes = [fit_mesh(path) for path in paths]  # longest side [-0.5, 0.5]
    with tempfile.TemporaryDirectory() as folder:
        store = Path(folder) / "train.zarr"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results = list(
                voxelizer.voxelize_many(
                    meshes,
                    grid=args.grid,
                    bounds=unit_cube_bounds(args.grid, args.pad),
                    fill_mode="auto",
                    out_dir=store,
                    format="zarr",
                )
            )
        for result, path in zip(sorted(results, key=lambda r: r.index), paths):
            print(f"{path.name:20s} {result.status:6s} {result.solid_voxels or 0:7,d} voxels")
        for warning in caught:
            print(f"warning: {warning.message}")
        dataset = VoxelDataset(store, dtype=torch.float32)
        loader = DataLoader(dataset, batch_size=4, num_workers=2, shuffle=True)
        for batch in loader:
            voxels = batch["voxels"]
            print(
                f"batch {tuple(voxels.shape)}, occupancy {voxels.mean():.3f}, "
                f"voxel size {batch['voxel_size'][0]:.4f}"
            )


if __name__ == "__main__":
    main()
