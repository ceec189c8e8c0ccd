"""Large grids: the wall time and the peak host memory of one mesh at grids 1024 ... 32768.

    python -m voxelizer.benchmarks.sparse --models-dir DIR --out DIR
        [--model dragon-x64] [--grids 1024 2048 4096 8192 16384 32768] [--timeout 300]
        [--max-memory SIZE] [--stream]

Each grid runs in a process of its own (under `timeout`), so that its peak resident memory
(ru_maxrss) is its own: the process reads the model (NAME-xK: midpoint-subdivided,
benchmarks/meshes.py, written once to --out as a binary PLY), voxelizes the base model at
the same grid first (the kernels built, the buffers grown), then times `load_mesh(file)` and
`voxelize(mesh, grid)` (with --stream: `voxelize(..., out=FILE.svo)`, the octree written to
--out as it is made, then removed). Grids up to 8192 take the dense passes, larger ones the
sparse path (docs/guide/large-grids.md).

Writes --out/sparse.json (a row per grid: wall seconds of the read and of the voxelization,
the peak resident memory, the octree's nodes and solid voxels, the surface cubes, the GPU's
and the host's milliseconds by stage; or the timeout or error) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_GRIDS = (1024, 2048, 4096, 8192, 16384, 32768)


def model_file(models_dir: Path, name: str, out: Path) -> Path:
    """The model as a file: a shared model by name, or NAME-xK written once to `out`."""
    from .meshes import SUBDIVIDED, model_arrays, write_binary_ply

    match = SUBDIVIDED.match(name)
    if match is None:
        return next(p for p in sorted(models_dir.glob(f"{name}.*")) if p.suffix in (".ply", ".stl"))
    path = out / f"{name}.ply"
    if not path.is_file():
        steps = {4: 1, 16: 2, 64: 3, 256: 4}[int(match["factor"])]
        write_binary_ply(path, *model_arrays(models_dir, match["base"], steps))
    return path


def child(args: argparse.Namespace) -> dict:
    """One grid, in this process: the row of sparse.json."""
    import voxelizer
    from voxelizer.io import load_mesh

    from .meshes import SUBDIVIDED

    grid, base = args.grid, args.model
    match = SUBDIVIDED.match(base)
    warm_name = match["base"] if match else base
    warm = next(p for p in sorted(args.models_dir.glob(f"{warm_name}.*")) if p.suffix == ".ply")
    v = voxelizer.Voxelizer()
    options = {} if args.max_memory is None else {"max_memory": args.max_memory}
    v.voxelize(load_mesh(warm), grid, **options)  # kernels built, buffers grown
    started = time.perf_counter()
    mesh = load_mesh(args.file)
    read = time.perf_counter() - started
    target = args.out / f"sparse-{grid}.svo" if args.stream else None
    started = time.perf_counter()
    svo = v.voxelize(mesh, grid, out=target, overwrite=True, count_voxels=False, **options)
    wall = time.perf_counter() - started
    row = {
        "grid": grid,
        "model": base,
        "triangles": mesh.triangle_count,
        "device": svo.stats.device,
        "streamed": bool(args.stream),
        "read_s": round(read, 3),
        "voxelize_s": round(wall, 3),
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "nodes": svo.node_count,
        "bricks": svo.brick_count,
        "solid_voxels": svo.count(),
        "surface_cubes": svo.stats.counts.get("surface_cubes", 0),
        "gpu_ms": {k: round(t, 1) for k, t in svo.stats.gpu_ms.items()},
        "host_ms": {k: round(t, 1) for k, t in svo.stats.host_ms.items()},
    }
    if target is not None:
        row["file_bytes"] = target.stat().st_size
        del svo
        target.unlink()
    v.close()
    return row


def parent(args: argparse.Namespace) -> list[dict]:
    args.out.mkdir(parents=True, exist_ok=True)
    path = model_file(args.models_dir, args.model, args.out)
    rows = []
    for grid in args.grids:
        command = [
            "timeout", str(args.timeout), sys.executable, "-m", "voxelizer.benchmarks.sparse",
            "--child", "--grid", str(grid), "--file", str(path), "--model", args.model,
            "--models-dir", str(args.models_dir), "--out", str(args.out),
        ]  # fmt: skip
        if args.max_memory is not None:
            command += ["--max-memory", args.max_memory]
        if args.stream:
            command.append("--stream")
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy())
        seconds = round(time.perf_counter() - started, 1)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode == 0 and lines:
            row = json.loads(lines[-1])
        else:
            reason = "timeout" if done.returncode == 124 else f"exit {done.returncode}"
            row = {"grid": grid, "error": reason, "stderr": done.stderr[-2000:]}
        row["process_s"] = seconds
        rows.append(row)
        print(_line(row), flush=True)
        (args.out / "sparse.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return rows


def _line(row: dict) -> str:
    if "error" in row:
        return f"{row['grid']:>6}  {row['error']} after {row['process_s']} s"
    return (
        f"{row['grid']:>6}  voxelize {row['voxelize_s']:7.3f} s  read {row['read_s']:6.3f} s  "
        f"peak RSS {row['peak_rss_gib']:6.2f} GiB  {row['nodes']:>12,} nodes  "
        f"{row['surface_cubes']:>10,} surface cubes  process {row['process_s']} s"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", default="dragon-x64")
    parser.add_argument("--grids", type=int, nargs="+", default=list(DEFAULT_GRIDS))
    parser.add_argument("--timeout", type=int, default=300, help="seconds per grid's process")
    parser.add_argument("--max-memory", help="the device budget (e.g. 2GiB)")
    parser.add_argument("--stream", action="store_true", help="voxelize(..., out=FILE.svo)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--grid", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)), flush=True)
    else:
        parent(args)


if __name__ == "__main__":
    main()
