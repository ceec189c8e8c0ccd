"""Reading voxel grids for training: one shard store against one .npz file per mesh.

    python -m voxelizer.benchmarks.shards OUT_DIR [--meshes 10000] [--grid 64] [--workers 2]
        [--batch-size 32] [--rounds 2] [--models DIR]

Voxelizes the bundled models (and those of --models, e.g. ../shared/models) at grid³ once,
then writes `--meshes` grids, cycling through them, both ways under OUT_DIR: a shard store
(voxelizer.io.zarr_store: the chunk writer a batch's workers use, the table as the batch
writes it) and a folder of .npz files (voxelizer.save, as `--format npz` writes them). Then
reads each back whole with `voxelizer.torch.VoxelDataset` through
`torch.utils.data.DataLoader(num_workers=--workers, batch_size=--batch-size)`, the two in
turn for `--rounds` rounds (the files warm in the page cache, as a second epoch finds them),
and prints the rate of each (grids per second, the best round) and their ratio, with the
writing times and the sizes on disk. --json FILE writes the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import warnings
from pathlib import Path

import torch
from torch.utils.data import DataLoader

import voxelizer
from voxelizer.io.zarr_store import Row, ShardWriter, chunk_path, write_chunk
from voxelizer.torch import VoxelDataset

BUNDLED = Path(voxelizer.__file__).resolve().parents[1] / "models"


def source_grids(grid: int, models: Path | None) -> list[voxelizer.DenseGrid]:
    paths = sorted(BUNDLED.glob("*.ply"))
    if models is not None:
        paths += sorted(p for p in models.iterdir() if p.suffix in (".ply", ".stl", ".obj"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [voxelizer.voxelize_dense(path, grid) for path in paths]


def write_both(grids: list[voxelizer.DenseGrid], count: int, out: Path) -> dict[str, float | int]:
    """The store and the .npz folder of `count` grids; their writing seconds and sizes."""
    store, folder = out / "grids.zarr", out / "npz"
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    started = time.perf_counter()
    writer = ShardWriter.create(store, [f"mesh{i:06d}" for i in range(count)], grids[0].shape)
    for index in range(count):
        grid = grids[index % len(grids)]
        write_chunk(grid, chunk_path(store, index))
        writer.record(
            index,
            Row(
                f"mesh{index:06d}",
                "done",
                origin=tuple(grid.origin),
                voxel_size=float(grid.spacing[0]),  # (cubes: the benchmark's grids)
            ),
        )
    writer.close()
    store_seconds = time.perf_counter() - started
    started = time.perf_counter()
    for index in range(count):
        voxelizer.save(grids[index % len(grids)], folder / f"mesh{index:06d}.npz")
    npz_seconds = time.perf_counter() - started
    return {
        "write_store_s": store_seconds,
        "write_npz_s": npz_seconds,
        "store_bytes": _size(store),
        "npz_bytes": _size(folder),
    }


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def read_rate(source: Path, workers: int, batch_size: int, packed: bool) -> float:
    """Grids per second reading every grid of `source` once, as bool tensors or packed."""
    dataset = VoxelDataset(source, packed=packed)
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=workers)
    started = time.perf_counter()
    grids = 0
    for batch in loader:
        grids += len(batch["index"])
    assert grids == len(dataset)
    return grids / (time.perf_counter() - started)


def same_grids(store: Path, folder: Path, sample: int = 200) -> bool:
    """Whether both hold the same grids and placements (every len // sample-th one)."""
    first, second = VoxelDataset(store), VoxelDataset(folder)
    if len(first) != len(second):
        return False
    for item in range(0, len(first), max(1, len(first) // sample)):
        a, b = first[item], second[item]
        if not all(torch.equal(a[key], b[key]) for key in ("voxels", "origin", "voxel_size")):
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder for the store and the .npz files")
    parser.add_argument("--meshes", type=int, default=10_000)
    parser.add_argument("--grid", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--models", type=Path, help="more models to voxelize (a folder)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    grids = source_grids(args.grid, args.models)
    written = write_both(grids, args.meshes, args.out)
    figures: dict[str, object] = {
        "meshes": args.meshes,
        "grid": args.grid,
        "workers": args.workers,
        "batch_size": args.batch_size,
        "cpus": os.cpu_count(),
        **written,
    }
    store_path, npz_path = args.out / "grids.zarr", args.out / "npz"
    if not same_grids(store_path, npz_path):
        print("the store and the .npz files hold different grids", file=sys.stderr)
        return 1
    rates: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for packed in (False, True):
            for name, source in (("store", store_path), ("npz", npz_path)):
                key = f"{name}{' packed' if packed else ''}"
                rates.setdefault(key, []).append(
                    read_rate(source, args.workers, args.batch_size, packed)
                )
    best = {key: max(values) for key, values in rates.items()}
    figures.update(rates=rates, best=best)
    print(
        f"{args.meshes:,} grids of {args.grid}³, DataLoader(num_workers={args.workers}, "
        f"batch_size={args.batch_size}), best of {args.rounds} rounds, grids/s:\n"
        f"  items           shard store   .npz files   ratio\n"
        f"  bool voxels     {best['store']:11,.0f} {best['npz']:12,.0f} "
        f"{best['store'] / best['npz']:7.2f}x\n"
        f"  packed bits     {best['store packed']:11,.0f} {best['npz packed']:12,.0f} "
        f"{best['store packed'] / best['npz packed']:7.2f}x\n"
        f"  on disk (MiB)   {written['store_bytes'] / 2**20:11,.1f} "
        f"{written['npz_bytes'] / 2**20:12,.1f}\n"
        f"  written in (s)  {written['write_store_s']:11.1f} {written['write_npz_s']:12.1f}"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
