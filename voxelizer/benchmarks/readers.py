"""Mesh file reading: voxelizer's native readers against trimesh, file by file, in one run.

    PYTHONPATH=TREE python voxelizer/benchmarks/readers.py FILE_OR_DIR [...] [--runs N] [--json FILE]

For each PLY, STL or OBJ file (directories are searched for them), the best of N runs of
`voxelizer.load_mesh(path)` (read, checked, an STL's corners merged) and of
`trimesh.load(path, process=False, force="mesh")` (what load_mesh used before), wall and
CPU time, and their ratios. Both read the same file, warm in the page cache (one untimed
read of each first). `python_share`: the speed of a pure-Python thread while load_mesh
reads the file over and over in another, as a fraction of its speed alone (1.0: reading
never held the GIL against it; in a batch, that thread is the one driving the device).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import voxelizer
from voxelizer.io import load_mesh

FORMATS = (".ply", ".stl", ".obj")


def best_seconds(read: Callable[[], object], runs: int) -> tuple[float, float]:
    """The least wall time and the least CPU time (all threads) of `runs` calls: on a shared
    machine the CPU time is the steadier of the two."""
    read()
    walls, cpus = [], []
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        read()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus)


def python_share(read: Callable[[], object], runs: int) -> float:
    """How fast a thread running Python goes while `read` runs `runs` times, relative to
    its speed alone (measured just before, for as long)."""

    def count(stop: threading.Event, counts: list[tuple[int, float]]) -> None:
        done, started = 0, time.perf_counter()
        while not stop.is_set():
            for _ in range(1000):
                done += 1
        counts.append((done, time.perf_counter() - started))

    def rate(work: Callable[[], None]) -> float:
        stop = threading.Event()
        counts: list[tuple[int, float]] = []
        counter = threading.Thread(target=count, args=(stop, counts))
        counter.start()
        work()
        stop.set()
        counter.join()
        done, seconds = counts[0]
        return done / seconds

    def reads() -> None:
        for _ in range(runs):
            read()

    started = time.perf_counter()
    reads()
    seconds = time.perf_counter() - started
    alone = rate(lambda: time.sleep(seconds))
    return rate(reads) / alone


def mesh_files(sources: list[Path]) -> list[Path]:
    files: list[Path] = []
    for source in sources:
        if source.is_dir():
            files += sorted(p for p in source.rglob("*") if p.suffix.lower() in FORMATS)
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
    totals = {"native": [0.0, 0.0], "trimesh": [0.0, 0.0]}
    for path in mesh_files(args.sources):
        mesh = load_mesh(path)
        times = {
            "native": best_seconds(partial(load_mesh, path), args.runs),
            "trimesh": best_seconds(
                partial(trimesh.load, path, process=False, force="mesh"), args.runs
            ),
        }
        row: dict = {
            "file": path.name,
            "bytes": path.stat().st_size,
            "triangles": mesh.triangle_count,
            "vertices": len(mesh.vertices),
        }
        for name, (wall, cpu) in times.items():
            row[f"{name}_ms"], row[f"{name}_cpu_ms"] = round(wall * 1e3, 2), round(cpu * 1e3, 2)
            totals[name][0] += wall
            totals[name][1] += cpu
        row["python_share"] = round(python_share(partial(load_mesh, path), args.runs), 2)
        row["trimesh_over_native"] = round(times["trimesh"][0] / times["native"][0], 2)
        row["cpu_trimesh_over_native"] = round(
            times["trimesh"][1] / max(times["native"][1], 1e-9), 2
        )
        rows.append(row)
        print(json.dumps(row), flush=True)
    summary: dict[str, float] = {"files": len(rows)}
    for name, (wall, cpu) in totals.items():
        summary[f"{name}_ms"], summary[f"{name}_cpu_ms"] = round(wall * 1e3, 1), round(cpu * 1e3, 1)
    if rows:
        summary["trimesh_over_native"] = round(totals["trimesh"][0] / totals["native"][0], 2)
        summary["cpu_trimesh_over_native"] = round(totals["trimesh"][1] / totals["native"][1], 2)
    print(json.dumps({"all": summary}), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"files": rows, "all": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
