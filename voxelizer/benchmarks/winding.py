"""Fill modes on an open scan: `python -m voxelizer.benchmarks.winding --models-dir DIR`.

The open Stanford scan (bunny_scan, holes in its base) on a grid of N³ placed on its own
bounding box, against the closed bunny mapped onto that box (bunny, scaled and moved so its
bounding box is the scan's) voxelized by parity on the same grid: extra and missing voxels
of our fill modes (parity, vote, winding) and of the CPU peers (pyvista's binary mask, and
libigl's fast_winding_number at every voxel centre where libigl is installed), each timed
side by side in this one run: ours in process (a warm Voxelizer, mesh in memory to a dense
grid, minimum of --runs after a warm-up), the peers in child processes
(voxelizer/benchmarks/peers.py, minimum of --runs).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from voxelizer import Voxelizer
from voxelizer.benchmarks import peers
from voxelizer.benchmarks.meshes import model_path
from voxelizer.io import load_mesh
from voxelizer.mesh import Mesh

TIMED_FILLS = ("parity", "vote", "winding")


def closed_counterpart(scan: Mesh, closed: Mesh) -> Mesh:
    """`closed` scaled and moved so that its bounding box is the scan's."""
    lo, hi = scan.vertices.min(axis=0), scan.vertices.max(axis=0)
    c_lo, c_hi = closed.vertices.min(axis=0), closed.vertices.max(axis=0)
    return Mesh(lo + (closed.vertices - c_lo) * (hi - lo) / (c_hi - c_lo), closed.faces)


def measure(models_dir: Path, grid: int, runs: int, peer_names: list[str]) -> dict[str, Any]:
    scan = load_mesh(model_path("bunny_scan", models_dir))
    truth_mesh = closed_counterpart(scan, load_mesh(model_path("bunny", models_dir)))
    bounds = [scan.vertices.min(axis=0), scan.vertices.max(axis=0)]
    rows: list[dict[str, Any]] = []
    with Voxelizer() as vox:
        truth = vox.voxelize_dense(truth_mesh, grid, bounds=bounds).to_numpy()
        for mode in TIMED_FILLS:
            vox.voxelize_dense(scan, grid, fill_mode=mode, bounds=bounds)  # warm-up
            times = []
            for _ in range(runs):
                started = time.perf_counter()
                result = vox.voxelize_dense(scan, grid, fill_mode=mode, bounds=bounds)
                times.append(time.perf_counter() - started)
            extra, missing = peers.wrong_voxels(result.to_numpy(), truth)
            rows.append(
                {
                    "method": f"fill_mode={mode!r}",
                    "extra_voxels": extra,
                    "missing_voxels": missing,
                    "seconds": min(times),
                    "gpu_ms": sum(result.stats.gpu_ms.values()),
                    "counts": {k: v for k, v in result.stats.counts.items() if "winding" in k},
                }
            )
    for name in peer_names:
        outcome = peers.measure_peer(name, scan, grid, truth, runs, timeout_s=600.0)
        rows.append({"method": name, **outcome})
    winding = next(row["seconds"] for row in rows if row["method"] == "fill_mode='winding'")
    for row in rows:
        if row.get("seconds"):
            row["ratio_to_winding"] = row["seconds"] / winding
    return {"model": "bunny_scan", "truth": "bunny mapped onto its box", "grid": grid, "rows": rows}


def table(document: dict[str, Any]) -> str:
    lines = [
        f"bunny_scan at {document['grid']}³ against {document['truth']}:",
        f"{'method':<24}{'extra':>9}{'missing':>9}{'off':>9}{'seconds':>10}{'x winding':>11}",
    ]
    for row in document["rows"]:
        if "extra_voxels" not in row:
            lines.append(f"{row['method']:<24}{row.get('status')}: {row.get('reason')}")
            continue
        off = row["extra_voxels"] + row["missing_voxels"]
        seconds = row.get("seconds")
        ratio = row.get("ratio_to_winding")
        lines.append(
            f"{row['method']:<24}{row['extra_voxels']:>9,}{row['missing_voxels']:>9,}{off:>9,}"
            + (f"{seconds:>10.3f}" if seconds else f"{'-':>10}")
            + (f"{ratio:>11.2f}" if ratio else f"{'-':>11}")
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m voxelizer.benchmarks.winding")
    parser.add_argument("--models-dir", type=Path, required=True, help="holds bunny_scan, bunny")
    parser.add_argument("--grid", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3, help="timed runs (minimum reported)")
    parser.add_argument(
        "--peers",
        nargs="*",
        default=["pyvista", "libigl"],
        choices=["pyvista", "libigl", "trimesh"],
        help="CPU peers timed side by side (default: pyvista libigl; skipped if missing)",
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    document = measure(args.models_dir, args.grid, args.runs, args.peers)
    print(table(document))
    if args.json:
        args.json.write_text(json.dumps(document, indent=2, default=float) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
