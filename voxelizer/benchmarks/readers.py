"""Mesh file reading: voxelizer's native readers against trimesh, file by file, in one run.

    PYTHONPATH=TREE python voxelizer/benchmarks/readers.py FILE_OR_DIR [...] [--runs N] [--json FILE]

For each PLY, STL or OBJ file (directories are searched for them), the best of N runs of
`voxelizer.load_mesh(path)` (read, checked, an STL's corners merged) and of
`trimesh.load(path, process=False, force="mesh")` (what load_mesh used before), and their
ratio. Both read the same file, warm in the page cache (one untimed read of each first).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import voxelizer
from voxelizer.io import load_mesh

FORMATS = (".ply", ".stl", ".obj")


def best_seconds(read: Callable[[], object], runs: int) -> float:
    read()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        read()
        times.append(time.perf_counter() - started)
    return min(times)


def mesh_files(sources: list[Path]) -> list[Path]:
    files: list[Path] = []
    for source in sources:
        if source.is_dir():
            files += sorted(p for p in source.iterdir() if p.suffix.lower() in FORMATS)
        else:
            files.append(source)
    return files


def main(argv: list[str] | None = None) -> int:
    import trimesh

    parser = argparse.ArgumentParser(prog="readers.py", description=__doc__.split("\n")[0])
    parser.add_argument("sources", type=Path, nargs="+")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    print(json.dumps({"voxelizer": str(Path(voxelizer.__file__).parent)}), flush=True)
    rows = []
    total_native = total_trimesh = 0.0
    for path in mesh_files(args.sources):
        mesh = load_mesh(path)
        native = best_seconds(partial(load_mesh, path), args.runs)
        other = best_seconds(partial(trimesh.load, path, process=False, force="mesh"), args.runs)
        total_native += native
        total_trimesh += other
        row = {
            "file": path.name,
            "bytes": path.stat().st_size,
            "triangles": mesh.triangle_count,
            "vertices": len(mesh.vertices),
            "native_ms": round(native * 1e3, 2),
            "trimesh_ms": round(other * 1e3, 2),
            "trimesh_over_native": round(other / native, 2),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    summary = {
        "files": len(rows),
        "native_ms": round(total_native * 1e3, 1),
        "trimesh_ms": round(total_trimesh * 1e3, 1),
        "trimesh_over_native": round(total_trimesh / total_native, 2) if rows else None,
    }
    print(json.dumps({"all": summary}), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"files": rows, "all": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
