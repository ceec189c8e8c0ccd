"""Benchmark: `python -m voxelizer.bench [--models ...] [--grids ...] [--variants ...]`.

For each (model, grid, variant, sort): one warm-up call (pipelines compiled, buffers grown),
then `--repeat` timed calls on a mesh already in memory: Voxelizer.voxelize (SVO in host
memory; `--output svo`, the default) or Voxelizer.voxelize_dense (`--output dense`). Reports
the median and spread of the wall time of the call and the median GPU time of every pass
(Vulkan timestamps), as a markdown table and optionally JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

from .api import Voxelizer
from .mesh import load_mesh
from .passes import DEFAULT_SORT, SORTS, VARIANTS

PASSES = ("upload", "setup", "scan", "emit", "sort", "mark", "compact", "fill", "download",
          "svo_classify", "svo_scan", "svo_write", "svo_download")
DEFAULT_MODELS = Path(__file__).resolve().parents[1].parent / "shared" / "models"


def measure(voxelizer: Voxelizer, mesh, grid: int, variant: str, sort: str, output: str,
            repeat: int) -> dict:
    call = voxelizer.voxelize if output == "svo" else voxelizer.voxelize_dense
    call(mesh, grid, variant, sort=sort)  # warm-up
    walls, passes = [], {name: [] for name in PASSES}
    for _ in range(repeat):
        started = time.perf_counter()
        result = call(mesh, grid, variant, sort=sort)
        walls.append((time.perf_counter() - started) * 1e3)
        for name in PASSES:
            passes[name].append(result.stats["gpu_ms"].get(name, 0.0))
    return {
        "wall_ms_median": statistics.median(walls),
        "wall_ms_min": min(walls),
        "wall_ms_max": max(walls),
        "gpu_ms_median": {name: statistics.median(times) for name, times in passes.items()},
        "gpu_ms_total_median": statistics.median(
            sum(passes[name][i] for name in PASSES) for i in range(repeat)),
        "counts": result.stats["counts"],
        "solid_voxels": result.count(),
        "host_ms": result.stats["host_ms"],
        "memory": result.stats["memory"],
        **({"svo_nodes": result.node_count, "svo_bricks": result.brick_count,
            "svo_bytes": result.nbytes} if output == "svo" else {}),
    }


def markdown(rows: list[dict]) -> str:
    shown = [p for p in PASSES if any(r["result"]["gpu_ms_median"][p] for r in rows)]
    head = ["model", "grid", "variant", "sort", "wall ms (median, min-max)", "GPU ms", *shown]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        m = r["result"]
        cells = [r["model"], str(r["grid"]), r["variant"], r["sort"],
                 f"{m['wall_ms_median']:.1f} ({m['wall_ms_min']:.1f}-{m['wall_ms_max']:.1f})",
                 f"{m['gpu_ms_total_median']:.2f}"]
        cells += [f"{m['gpu_ms_median'][p]:.2f}" for p in shown]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m voxelizer.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=[str(DEFAULT_MODELS / "bunny.ply")])
    parser.add_argument("--grids", nargs="+", type=int, default=[128, 256])
    parser.add_argument("--variants", nargs="+", default=["branchless"], choices=list(VARIANTS))
    parser.add_argument("--sorts", nargs="+", default=[DEFAULT_SORT], choices=list(SORTS))
    parser.add_argument("--output", default="svo", choices=["svo", "dense"],
                        help="time voxelize (SVO, default) or voxelize_dense")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--device", default=None)
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args(argv)

    rows = []
    with Voxelizer(args.device) as voxelizer:
        for model in args.models:
            mesh = load_mesh(model)
            for grid in args.grids:
                for variant in args.variants:
                    for sort in args.sorts:
                        result = measure(voxelizer, mesh, grid, variant, sort, args.output,
                                         args.repeat)
                        rows.append({"model": Path(model).name, "grid": grid, "variant": variant,
                                     "sort": sort, "output": args.output, "result": result})
                        print(f"{Path(model).name} {grid}^3 {variant} {sort}: "
                              f"{result['wall_ms_median']:.1f} ms wall, "
                              f"{result['gpu_ms_total_median']:.2f} ms GPU", file=sys.stderr)
        device = voxelizer.device_name
    print(f"device: {device}; host: {platform.machine()} {platform.python_implementation()} "
          f"{platform.python_version()}; output: {args.output}; repeat {args.repeat}\n")
    print(markdown(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"device": device, "rows": rows}, indent=2,
                                              default=int))
    return 0


if __name__ == "__main__":
    sys.exit(main())
