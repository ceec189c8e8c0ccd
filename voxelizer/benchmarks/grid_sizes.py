"""What a grid of any size costs against the power-of-two grid it sits in, side by side:
`python -m voxelizer.benchmarks.grid_sizes --models-dir ../shared/models --models dragon.ply
--out DIR`.

The GPU works on grids whose sides along x and y are multiples of 4 (its tiles are 4 x 4
columns; a column is whole 32-bit words of voxels): a grid of another size runs on the next
such grid and its result is cut to the size asked for. This measures that cost where it
matters, at 1000^3 (a multiple of 4 itself), 999^3 and 1001^3 (padded to 1000 x 1000 x 999 and
1004 x 1004 x 1001) against 1024^3, whose SVO the others share (P = 1024): per grid and output
(a dense grid, or the SVO built on the device), the median GPU time of each pass (Vulkan
timestamps) and of the whole call's wall time (the mesh already in memory, its kernels built),
and the voxels the grid holds, so that the time per voxel can be set against the cells.

Each (model, grid, output) gets a Voxelizer of its own, two warm-up calls, then `--repeat`
timed calls (a fresh device starts at the boost clock: docs/benchmarks-history.md, "Modes on
the H100 again").
Writes grid_sizes.json and grid_sizes.md into --out; prints the table as it goes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from voxelizer import Voxelizer, load_mesh
from voxelizer.errors import VoxelizerError

GRIDS = (1024, 1000, 999, 1001)
OUTPUTS = ("dense", "svo")


def measure(v: Voxelizer, path: Path, grid: int, output: str, repeat: int, variant: str) -> dict:
    """Median GPU ms per pass label, median wall ms, and the voxels of `repeat` calls."""
    mesh = load_mesh(path)
    call = v.voxelize_dense if output == "dense" else v.voxelize
    try:
        for _ in range(2):
            call(mesh, grid, variant=variant)
    except VoxelizerError as error:
        return {"status": f"not run: {error}".splitlines()[0]}
    passes: dict[str, list[float]] = {}
    wall = []
    result: Any = None
    for _ in range(repeat):
        started = time.perf_counter()
        result = call(mesh, grid, variant=variant)
        wall.append((time.perf_counter() - started) * 1e3)
        for label, ms in result.stats.gpu_ms.items():
            passes.setdefault(label, []).append(ms)
    gpu = {label: round(statistics.median(times), 3) for label, times in passes.items()}
    return {
        "status": "ok",
        "shape": list(result.shape),
        "cells": int(result.shape[0]) * int(result.shape[1]) * int(result.shape[2]),
        "voxels": int(result.count()),
        "gpu_ms": gpu,
        "gpu_total_ms": round(sum(gpu.values()), 3),
        "wall_ms": round(statistics.median(wall), 2),
    }


def table(rows: list[dict], device: str) -> str:
    """Markdown: one column per grid, the passes as rows, and the ratio to the first grid."""
    lines = [f"Device: {device}", ""]
    for model in dict.fromkeys(row["model"] for row in rows):
        for output in OUTPUTS:
            chosen = [r for r in rows if r["model"] == model and r["output"] == output]
            done = [r for r in chosen if r["status"] == "ok"]
            if not done:
                continue
            base = done[0]
            labels = list(dict.fromkeys(label for r in done for label in r["gpu_ms"]))
            lines.append(f"**{model}, {output}** (medians; ratio to {base['grid']}³)")
            lines.append("")
            lines.append("| | " + " | ".join(f"{r['grid']}³" for r in done) + " |")
            lines.append("| --- |" + " ---: |" * len(done))
            for label in labels:
                cells = [f"{r['gpu_ms'].get(label, 0.0):.3f}" for r in done]
                lines.append(f"| GPU ms {label} | " + " | ".join(cells) + " |")
            for key, name in (("gpu_total_ms", "GPU ms, all passes"), ("wall_ms", "wall ms")):
                cells = [f"{r[key]:.2f} ({r[key] / base[key]:.3f})" for r in done]
                lines.append(f"| {name} | " + " | ".join(cells) + " |")
            cells = [f"{r['cells'] / base['cells']:.3f}" for r in done]
            lines.append("| cells, ratio | " + " | ".join(cells) + " |")
            lines.append("| voxels set | " + " | ".join(f"{r['voxels']:,}" for r in done) + " |")
            lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m voxelizer.benchmarks.grid_sizes")
    parser.add_argument(
        "--models", type=Path, nargs="+", required=True,
        help="mesh files, or names in --models-dir (e.g. dragon.ply)",
    )  # fmt: skip
    parser.add_argument("--models-dir", type=Path, default=None, help="where --models are")
    parser.add_argument(
        "--grids", type=int, nargs="+", default=list(GRIDS),
        help="cube sides, the first the base of the ratios (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument("--outputs", nargs="+", choices=OUTPUTS, default=list(OUTPUTS))
    parser.add_argument("--variant", default="combined", help="shader variant (%(default)s)")
    parser.add_argument("--repeat", type=int, default=5, help="timed calls per row (median)")
    parser.add_argument("--device", default=None, help="device index or name")
    parser.add_argument("--out", type=Path, required=True, help="folder for the results")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    device = ""
    models = [args.models_dir / p if args.models_dir else p for p in args.models]
    for path in models:
        for output in args.outputs:
            for grid in args.grids:
                row: dict[str, Any] = {"model": path.stem, "output": output, "grid": grid}
                with Voxelizer(device=args.device) as v:
                    device = v.device_name
                    row |= measure(v, path, grid, output, args.repeat, args.variant)
                rows.append(row)
                summary = (
                    f"GPU {row['gpu_total_ms']} ms, wall {row['wall_ms']} ms, shape {row['shape']}"
                    if row["status"] == "ok"
                    else row["status"]
                )
                print(f"{path.stem} {output} {grid}: {summary}", flush=True)
    (args.out / "grid_sizes.json").write_text(
        json.dumps({"device": device, "rows": rows}, indent=1)
    )
    report = table(rows, device)
    (args.out / "grid_sizes.md").write_text(report + "\n")
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
