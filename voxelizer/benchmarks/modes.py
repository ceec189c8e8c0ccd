"""GPU time of each voxelization mode side by side: `python -m voxelizer.benchmarks.modes`.

For each model and grid, one Voxelizer runs every mode (solid with each fill mode, surface
conservative and thin, both) on a mesh already in memory: two warm-up calls, then `--repeat`
timed calls. Reported per mode: the median GPU time of the voxelization passes (setup to
fill or surface: what a peer's kernel that writes a dense grid does, without the upload and
without the SVO build), of the SVO build, and the median wall time of the whole call (SVO in
host memory). A mode this tree does not have (an older checkout) is reported as such.

Each (model, grid, mode) gets a Voxelizer of its own, closed after it: a GPU that idles for a
second or two with a device open may drop its clock (an H100 went from 1980 to 345 MHz and
stayed there while these calls kept it only ~20% busy), so one long-lived Voxelizer let every
row after the first pause run 3-4x slower. A fresh device starts at the boost clock.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from voxelizer import Voxelizer, load_mesh
from voxelizer.errors import VoxelizerError

# (label, options of the call)
TIMED_MODES: tuple[tuple[str, dict[str, str]], ...] = (
    ("solid parity", {}),
    ("solid winding", {"fill_mode": "winding"}),
    ("surface conservative", {"mode": "surface", "surface": "conservative"}),
    ("surface thin", {"mode": "surface", "surface": "thin"}),
    ("both", {"mode": "both"}),
    ("solid union", {"fill_mode": "union"}),
    ("solid vote", {"fill_mode": "vote"}),  # six fills and a host vote: slow at large grids
)
NOT_PASSES = ("upload",)  # GPU labels that are not voxelization passes (and svo_*)


def split_gpu_ms(gpu_ms: dict[str, float]) -> tuple[float, float]:
    """(voxelization passes, SVO build) milliseconds of one call."""
    svo = sum(ms for label, ms in gpu_ms.items() if label.startswith("svo"))
    passes = sum(
        ms
        for label, ms in gpu_ms.items()
        if not label.startswith("svo") and label not in NOT_PASSES
    )
    return passes, svo


def measure(v: Voxelizer, path: Path, grid: int, options: dict[str, str], repeat: int) -> dict:
    mesh = load_mesh(path)
    try:
        for _ in range(2):
            v.voxelize(mesh, grid, **options)  # type: ignore[arg-type]
    except (VoxelizerError, TypeError, ValueError) as error:
        return {"status": f"not run: {error}".splitlines()[0]}
    passes, svo, wall = [], [], []
    for _ in range(repeat):
        started = time.perf_counter()
        result = v.voxelize(mesh, grid, **options)  # type: ignore[arg-type]
        wall.append((time.perf_counter() - started) * 1e3)
        p, s = split_gpu_ms(result.stats.gpu_ms)
        passes.append(p)
        svo.append(s)
    return {
        "status": "ok",
        "voxels": int(result.count()),
        "passes_ms": round(statistics.median(passes), 3),
        "svo_ms": round(statistics.median(svo), 3),
        "wall_ms": round(statistics.median(wall), 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m voxelizer.benchmarks.modes")
    parser.add_argument("--models", type=Path, nargs="+", required=True, help="mesh files")
    parser.add_argument("--grids", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--modes", nargs="+", default=[label for label, _ in TIMED_MODES])
    parser.add_argument("--variant", default="combined")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--device", default=None)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    chosen = [(label, options) for label, options in TIMED_MODES if label in args.modes]
    rows = []
    print("| model | grid | mode | passes GPU ms | SVO GPU ms | call ms | voxels |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
    device = ""
    for path in args.models:
        for grid in args.grids:
            for label, options in chosen:
                options = {**options, "variant": args.variant}
                row = {"model": path.stem, "grid": grid, "mode": label}
                with Voxelizer(device=args.device) as v:
                    device = v.device_name
                    row |= measure(v, path, grid, options, args.repeat)
                rows.append(row)
                if row["status"] == "ok":
                    print(
                        f"| {path.stem} | {grid} | {label} | {row['passes_ms']} | "
                        f"{row['svo_ms']} | {row['wall_ms']} | {row['voxels']:,} |",
                        flush=True,
                    )
                else:
                    print(f"| {path.stem} | {grid} | {label} | {row['status']} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"device": device, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
