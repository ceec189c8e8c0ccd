"""What the thin-result check costs: `python -m voxelizer.benchmarks.thin --models-dir DIR
[--grids 8 32 128] [--runs 5]`.

For each model and grid, alternately (so that a busy machine slows both alike), a freshly
loaded mesh (no cached areas) voxelized by `voxelize_dense(mesh, grid)` as a user calls it
(its voxels counted, then the thin check: voxelizer.thin) and by the same call with
`count_voxels=False` followed by `result.count()` (counted, not checked). Reported: the median
wall time of each, their difference, and whether the check ran the surface pass (only where
the solid may be thin).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from pathlib import Path
from typing import Any

from voxelizer import Voxelizer
from voxelizer.io import load_mesh

MODELS = ("bunny", "bunny_scan", "dragon", "armadillo", "suzanne", "torus", "featuretype")


def measure(models_dir: Path, grids: list[int], runs: int) -> list[dict[str, Any]]:
    rows = []
    with Voxelizer() as vox, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in MODELS:
            path = next(p for p in sorted(models_dir.glob(f"{name}.*")))
            for grid in grids:
                vox.voxelize_dense(load_mesh(path), grid)  # warm: kernels, buffers
                vox.voxelize_dense(load_mesh(path), grid, mode="surface")
                checked, counted, surface_pass = [], [], False
                for _ in range(runs):
                    mesh = load_mesh(path)
                    started = time.perf_counter()
                    result = vox.voxelize_dense(mesh, grid)
                    checked.append(time.perf_counter() - started)
                    surface_pass = "surface_voxels" in result.stats.counts
                    mesh = load_mesh(path)
                    started = time.perf_counter()
                    vox.voxelize_dense(mesh, grid, count_voxels=False).count()
                    counted.append(time.perf_counter() - started)
                with_check, without = statistics.median(checked), statistics.median(counted)
                rows.append(
                    {
                        "model": name,
                        "grid": grid,
                        "checked_ms": with_check * 1e3,
                        "unchecked_ms": without * 1e3,
                        "check_ms": (with_check - without) * 1e3,
                        "surface_pass": surface_pass,
                    }
                )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models-dir", type=Path, required=True)
    parser.add_argument("--grids", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = measure(args.models_dir, args.grids, args.runs)
    print("| model | grid | call, checked (ms) | counted only (ms) | difference | surface pass |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for row in rows:
        print(
            f"| {row['model']} | {row['grid']} | {row['checked_ms']:.1f} | "
            f"{row['unchecked_ms']:.1f} | {row['check_ms']:+.1f} | "
            f"{'yes' if row['surface_pass'] else 'no'} |"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
