"""fill_mode="auto" against parity and winding: `python -m voxelizer.benchmarks.auto_fill
--models-dir DIR [--grid 128] [--runs 3] [--json FILE]`.

For each case, voxels off against the truth (extra + missing) and the time of each fill mode,
side by side in one run on one warm Voxelizer (dense grid from a mesh in memory, minimum of
--runs after a warm-up):

- bunny_scan (open: holes in its base): the truth is the closed bunny mapped onto its box,
  voxelized by parity (as voxelizer.benchmarks.winding);
- two bunnies overlapping (the closed bunny and a copy moved by a quarter of its width, one
  mesh): the truth is the union of each one's parity grid;
- suzanne (open, with separate eye shells): no truth; its row gives each mode's voxels off
  against winding's;
- the closed models (bunny, dragon, armadillo, torus, featuretype): the truth is parity,
  exact for a closed mesh.

`auto` is parity where the parity fill's column counts find no open or overlapping column,
else winding (a second run): the `auto ran` column says which.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from voxelizer import Voxelizer
from voxelizer.benchmarks.meshes import model_path
from voxelizer.benchmarks.winding import closed_counterpart
from voxelizer.io import load_mesh
from voxelizer.mesh import Mesh

TIMED_FILLS = ("parity", "winding", "auto")
CLOSED = ("bunny", "dragon", "armadillo", "torus", "featuretype")


def overlapping_pair(mesh: Mesh) -> Mesh:
    """The mesh and a copy moved along x by a quarter of its width, as one mesh."""
    shift = np.array([(mesh.bounds[1][0] - mesh.bounds[0][0]) / 4, 0.0, 0.0])
    vertices = np.concatenate([mesh.vertices, mesh.vertices + shift])
    faces = np.concatenate([mesh.faces, mesh.faces + len(mesh.vertices)])
    return Mesh(vertices, faces)


def cases(models_dir: Path, vox: Voxelizer, grid: int) -> list[tuple[str, Mesh, Any, Any]]:
    """(name, mesh, bounds, truth grid or None)."""
    found: list[tuple[str, Mesh, Any, Any]] = []
    scan = load_mesh(model_path("bunny_scan", models_dir))
    bounds = [scan.vertices.min(axis=0), scan.vertices.max(axis=0)]
    truth_mesh = closed_counterpart(scan, load_mesh(model_path("bunny", models_dir)))
    truth = vox.voxelize_dense(truth_mesh, grid, bounds=bounds, warn=False).to_numpy()
    found.append(("bunny_scan (open)", scan, bounds, truth))
    bunny = load_mesh(model_path("bunny", models_dir))
    pair = overlapping_pair(bunny)
    box = [pair.vertices.min(axis=0), pair.vertices.max(axis=0)]
    half = len(bunny.vertices)
    parts = [
        Mesh(pair.vertices[:half], bunny.faces),
        Mesh(pair.vertices[half:], bunny.faces),
    ]
    union = np.logical_or(
        *[vox.voxelize_dense(part, grid, bounds=box, warn=False).to_numpy() for part in parts]
    )
    found.append(("two bunnies overlapping", pair, box, union))
    found.append(
        ("suzanne (open, shells)", load_mesh(model_path("suzanne", models_dir)), None, None)
    )
    for name in CLOSED:
        mesh = load_mesh(model_path(name, models_dir))
        truth = vox.voxelize_dense(mesh, grid, warn=False).to_numpy()
        found.append((f"{name} (closed)", mesh, None, truth))
    return found


def measure(models_dir: Path, grid: int, runs: int) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    with Voxelizer() as vox:
        for name, mesh, bounds, truth in cases(models_dir, vox, grid):
            grids: dict[str, np.ndarray] = {}
            row: dict[str, Any] = {"case": name}
            for mode in TIMED_FILLS:
                vox.voxelize_dense(mesh, grid, fill_mode=mode, bounds=bounds, warn=False)
                times = []
                for _ in range(runs):
                    started = time.perf_counter()
                    result = vox.voxelize_dense(
                        mesh, grid, fill_mode=mode, bounds=bounds, warn=False
                    )
                    times.append(time.perf_counter() - started)
                grids[mode] = result.to_numpy()
                row[f"{mode}_ms"] = min(times) * 1e3
                if mode == "auto":
                    row["auto_ran"] = "winding" if result.stats.counts["auto_winding"] else "parity"
            reference = truth if truth is not None else grids["winding"]
            row["against"] = "truth" if truth is not None else "winding"
            for mode in TIMED_FILLS:
                row[f"{mode}_off"] = int(np.count_nonzero(grids[mode] != reference))
            rows.append(row)
    return {"grid": grid, "runs": runs, "rows": rows}


def table(document: dict[str, Any]) -> str:
    lines = [
        "| case | voxels off: parity | winding | auto | against | ms: parity | winding | auto "
        "| auto ran |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for row in document["rows"]:
        lines.append(
            f"| {row['case']} | {row['parity_off']:,} | {row['winding_off']:,} | "
            f"{row['auto_off']:,} | {row['against']} | {row['parity_ms']:.1f} | "
            f"{row['winding_ms']:.1f} | {row['auto_ms']:.1f} | {row['auto_ran']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models-dir", type=Path, required=True)
    parser.add_argument("--grid", type=int, default=128)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    document = measure(args.models_dir, args.grid, args.runs)
    print(f"{args.grid}³, minimum of {args.runs} runs after a warm-up, dense grids in memory")
    print(table(document))
    if args.json is not None:
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
