"""Datasets: many meshes, the ways a user can voxelize them, side by side in one run.

    python -m voxelizer.benchmarks.datasets --models-dir DIR --work DIR [--grids 64 128]
        [--rounds 2] [--jobs N] [--device SEL] [--json FILE]

The dataset is make_dataset's (voxelizer/benchmarks/meshes.py: 8 bases x PLY/STL/OBJ, 24
files of 5k-100k triangles, turned, stretched and moved at random), written once to --work.
For each grid, each way runs once per round, the ways interleaved so that a busy machine
slows them alike; the best and the median round of each are reported (meshes/s over the
whole dataset), and the ratios of both (`--ways` picks some ways only):

- `loop`: one warm Voxelizer in this process, `voxelize(load_mesh(path), grid)` per file,
  results kept in memory (an SVO each): the Python loop a user writes today.
- `many`: `voxelize_many(files, grid=grid)` in this process, results in memory: the same
  device with the next meshes read while one is voxelized.
- `loop_npz`, `many_npz`: the same two writing one .npz file per mesh.
- `cli_batch`: one `voxelize DIR --out-dir OUT --format npz` process for the whole dataset,
  process start included (with `--jobs N`, also `cli_batch_jobs`: N worker processes).
- `cli_per_file`: one `voxelize FILE -o OUT.npz` process per file, as a shell loop runs it.
- `cli_batch_zarr` (and `cli_batch_jobs_zarr`): `cli_batch` writing one voxel shard store
  (`--format zarr`) instead of the .npz files; the ratio `cli_batch_zarr_over_cli_batch`.
  `--devices LIST` runs the batch commands with `--devices LIST` (e.g. 0,1: a worker per GPU).

Every run starts from warm caches (one call per grid before the rounds). docs/benchmarks.md,
"Datasets", gives the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import voxelizer
from voxelizer import Voxelizer, voxelize_many
from voxelizer.benchmarks.meshes import make_dataset
from voxelizer.io import load_mesh


def _environment() -> dict[str, str]:
    """Child processes import the voxelizer this process imported."""
    tree = str(Path(voxelizer.__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=tree if not path else f"{tree}{os.pathsep}{path}")


def _command(device: str | None) -> list[str]:
    command = [sys.executable, "-m", "voxelizer", "--quiet", "--force"]
    return command + (["--device", device] if device is not None else [])


def _fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def ways(
    files: list[Path],
    dataset: Path,
    work: Path,
    grid: int,
    jobs: int,
    device: str | None,
    devices: str | None = None,
) -> dict[str, Callable[[], int]]:
    """Each way of voxelizing the dataset at `grid`: a callable that returns meshes done."""
    v = Voxelizer(device)
    env = _environment()

    def loop() -> int:
        for path in files:
            v.voxelize(load_mesh(path), grid)
        return len(files)

    def loop_npz() -> int:
        out = _fresh(work / "loop_npz")
        for number, path in enumerate(files):
            voxelizer.save(v.voxelize_dense(load_mesh(path), grid), out / f"{number}.npz")
        return len(files)

    def many() -> int:
        return sum(r.ok for r in voxelize_many(files, grid=grid, devices=device))

    def many_npz() -> int:
        out = _fresh(work / "many_npz")
        run = voxelize_many(files, grid=grid, devices=device, out_dir=out, format="npz")
        return sum(r.ok for r in run)

    def cli_batch(worker_jobs: int = 1, format: str = "npz") -> int:
        out = work / f"cli_batch.{format}"
        shutil.rmtree(out, ignore_errors=True)
        command = _command(None if devices else device)
        command += [str(dataset), "--out-dir", str(out), "--grid", str(grid)]
        command += ["--format", format] + (["--jobs", str(worker_jobs)] if worker_jobs > 1 else [])
        command += ["--devices", devices] if devices else []
        subprocess.run(command, env=env, check=True, capture_output=True, timeout=3600)
        if format == "zarr":
            return len(list((out / "voxels").glob("c.*")))
        return len(list(out.rglob("*.npz")))

    def cli_per_file() -> int:
        out = _fresh(work / "cli_per_file")
        for number, path in enumerate(files):
            command = _command(device) + [str(path), "--grid", str(grid)]
            command += ["-o", str(out / f"{number}.npz")]
            subprocess.run(command, env=env, check=True, capture_output=True, timeout=600)
        return len(list(out.glob("*.npz")))

    found: dict[str, Callable[[], int]] = {
        "loop": loop,
        "many": many,
        "loop_npz": loop_npz,
        "many_npz": many_npz,
        "cli_batch": cli_batch,
        "cli_per_file": cli_per_file,
    }
    found["cli_batch_zarr"] = lambda: cli_batch(format="zarr")
    if jobs > 1:
        found["cli_batch_jobs"] = lambda: cli_batch(jobs)
        found["cli_batch_jobs_zarr"] = lambda: cli_batch(jobs, "zarr")
    # Warm: kernels loaded and buffers grown in both in-process Voxelizers, the CLI's caches.
    v.voxelize(load_mesh(files[0]), grid)
    sum(r.ok for r in voxelize_many(files[:1], grid=grid, devices=device))
    subprocess.run(
        _command(device) + [str(files[0]), "--grid", str(grid), "-o", str(work / "warm.npz")],
        env=env,
        check=True,
        capture_output=True,
        timeout=600,
    )
    return found


# The ratios reported: (numerator way, denominator way), each of the best and the median rounds.
RATIOS = (
    ("cli_batch", "cli_per_file"),
    ("many", "loop"),
    ("many_npz", "loop_npz"),
    ("cli_batch", "many_npz"),
    ("cli_batch_zarr", "cli_batch"),
    ("cli_batch_jobs_zarr", "cli_batch_jobs"),
)


def measure(
    files: list[Path],
    dataset: Path,
    work: Path,
    grid: int,
    rounds: int,
    jobs: int,
    device: str | None,
    only: set[str] | None = None,
    devices: str | None = None,
) -> dict[str, Any]:
    """The best meshes/s of each way over `rounds` interleaved rounds, and the ratios."""
    chosen = ways(files, dataset, work, grid, jobs, device, devices)
    if only is not None:
        chosen = {name: way for name, way in chosen.items() if name in only}
    rates: dict[str, list[float]] = {name: [] for name in chosen}
    for _ in range(rounds):
        for name, way in chosen.items():
            started = time.perf_counter()
            done = way()
            seconds = time.perf_counter() - started
            if done != len(files):
                raise RuntimeError(f"{name}: {done} of {len(files)} meshes done")
            rates[name].append(len(files) / seconds)
    best = {name: max(values) for name, values in rates.items()}
    median = {name: statistics.median(values) for name, values in rates.items()}
    ratios = {}
    for faster, slower in RATIOS:
        if faster in best and slower in best:
            ratios[f"{faster}_over_{slower}"] = {
                "best": round(best[faster] / best[slower], 2),
                "median": round(median[faster] / median[slower], 2),
            }
    return {
        "grid": grid,
        "meshes": len(files),
        "meshes_per_s": {name: round(rate, 2) for name, rate in best.items()},
        "median_meshes_per_s": {name: round(rate, 2) for name, rate in median.items()},
        "rounds": {name: [round(r, 2) for r in values] for name, values in rates.items()},
        "ratios": ratios,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m voxelizer.benchmarks.datasets", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--models-dir", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True, help="dataset and outputs go here")
    parser.add_argument("--grids", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=1, help="also time the CLI with --jobs N")
    parser.add_argument("--copies", type=int, default=1, help="24 files per copy (default 24)")
    parser.add_argument("--limit", type=int, default=None, help="the first N files only")
    parser.add_argument("--device", default=None)
    parser.add_argument("--devices", default=None, help="the batch commands' --devices")
    parser.add_argument("--ways", default=None, help="comma-separated: time only these ways")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")  # open meshes of the dataset warn on every call
    dataset = args.work / "dataset"
    files = make_dataset(args.models_dir, dataset, copies=args.copies)[: args.limit]
    if args.limit is not None:  # the CLI's batch reads the folder: only these files in it
        dataset = _fresh(args.work / "subset")
        for path in files:
            (dataset / path.parent.name).mkdir(exist_ok=True)
        files = [Path(shutil.copy(p, dataset / p.parent.name / p.name)) for p in files]
    with Voxelizer(args.device) as v:
        device_name = v.device_name
    result: dict[str, Any] = {
        "voxelizer": str(Path(voxelizer.__file__).parent),
        "device": device_name,
        "files": [path.name for path in files],
        "grids": [],
    }
    for grid in args.grids:
        result["grids"].append(
            measure(
                files,
                dataset,
                args.work,
                grid,
                args.rounds,
                args.jobs,
                args.device,
                None if args.ways is None else set(args.ways.split(",")),
                args.devices,
            )
        )
        print(json.dumps(result["grids"][-1]), flush=True)
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
