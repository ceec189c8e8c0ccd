"""Mesh reading in two source trees side by side: what reading parts and colours costs, and
how near each format reads to a plain copy of its bytes.

    python voxelizer/benchmarks/reader_trees.py --trees OLD NEW --models DIR [--runs N]
        [--rounds R] [--work DIR] [--json FILE] [--reading-process] [--files FILE ...]
    python voxelizer/benchmarks/reader_trees.py --trees OLD NEW --dataset DIR [--models DIR]
        [--runs N] [--rounds R] [--json FILE] [--reading-process]

For each PLY and STL of DIR, and for text copies of them written into --work (ASCII PLY,
ASCII STL, OBJ; and the same with parts: an OBJ of two groups with materials, a PLY with a
`part` face property and vertex colours, an ASCII STL of two solids), the best of N calls
of `voxelizer.load_mesh(path)` in a Python process of each tree (PYTHONPATH=TREE), the two
trees taking turns for R rounds, so that the machine's load falls on both alike (each
process imports the tree's voxelizer, also where an editable install is on the path; with
--reading-process, set up as a batch's reading processes are), wall time and CPU time (all threads: on a shared machine the steadier of the two). Prints one
line per file: the least wall and CPU times in each tree and their ratios (NEW / OLD), and
writes them as JSON with --json.

With --dataset, the PLY, STL and OBJ files under DIR (make_dataset's files, written there
from --models first when DIR has none) are timed the same way, each tree's process reading
every file in turn, and summed by format: CPU ms a file in each tree, their ratio, MB/s,
and the floor beside them: reading the file's bytes and copying them once into a numpy
array (`open().read()`, `np.frombuffer(...).copy()`), the least of N in the same processes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

TIMER_MANY = """
import json, sys, time
import numpy
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in type(f).__module__]
sys.path.insert(0, sys.argv[2])
from voxelizer.io import load_mesh
assert load_mesh.__code__.co_filename.startswith(sys.argv[2])
if sys.argv[3] == "reading-process":
    from voxelizer import parallel
    parallel.use_threads(1)
    getattr(parallel, "keep_freed_memory", lambda: None)()
runs, times = int(sys.argv[1]), {}
for path in sys.argv[4:]:
    load_mesh(path)
    walls, cpus = [], []
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        load_mesh(path)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    floors = []  # the file's bytes read and copied once into a numpy array
    for _ in range(runs):
        wall = time.perf_counter()
        with open(path, "rb") as file:
            numpy.frombuffer(file.read(), numpy.uint8).copy()
        floors.append(time.perf_counter() - wall)
    times[path] = (min(walls), min(cpus), min(floors))
print(json.dumps(times))
"""
FORMATS = ("ply", "stl", "obj")


def text_copies(models: Path, work: Path) -> list[Path]:
    """ASCII PLY, ASCII STL and OBJ copies of the models, and copies with parts."""
    import trimesh

    made = []
    for source in sorted(models.glob("*.ply")) + sorted(models.glob("*.stl")):
        mesh = trimesh.load(source, process=False, force="mesh")
        stem = source.stem
        for name, data in (
            (f"{stem}-ascii.ply", trimesh.exchange.ply.export_ply(mesh, encoding="ascii")),
            (f"{stem}-ascii.stl", trimesh.exchange.stl.export_stl_ascii(mesh).encode()),
            (f"{stem}.obj", trimesh.exchange.obj.export_obj(mesh, include_normals=False).encode()),
        ):
            (work / name).write_bytes(data)
            made.append(work / name)
        made += with_parts(mesh, stem, work)
    return made


def with_parts(mesh: Any, stem: str, work: Path) -> list[Path]:
    """The mesh cut in two parts by face index: an OBJ of two groups and materials, a PLY
    with a part property and vertex colours, an ASCII STL of two solids."""
    import trimesh

    half = len(mesh.faces) // 2
    halves = [mesh.faces[:half], mesh.faces[half:]]
    lines = ["mtllib parts.mtl"] + [f"v {x!r} {y!r} {z!r}" for x, y, z in mesh.vertices.tolist()]
    for number, faces in enumerate(halves):
        lines += [f"g part{number}", f"usemtl m{number}"]
        lines += [f"f {a} {b} {c}" for a, b, c in (faces + 1).tolist()]
    obj = work / f"{stem}-parts.obj"
    obj.write_text("\n".join(lines) + "\n")
    (work / "parts.mtl").write_text("newmtl m0\nKd 1 0 0\nnewmtl m1\nKd 0 0 1\n")
    grey = np.full((len(mesh.vertices), 4), 200, np.uint8)
    coloured = trimesh.Trimesh(mesh.vertices, mesh.faces, vertex_colors=grey, process=False)
    ply = work / f"{stem}-parts.ply"
    data = trimesh.exchange.ply.export_ply(coloured, encoding="binary")
    header, body = data.split(b"end_header\n", 1)
    face_bytes = 13 * len(mesh.faces)
    faces = np.frombuffer(body[-face_bytes:], [("n", "u1"), ("v", "<i4", (3,))])
    rows = np.empty(len(faces), [("n", "u1"), ("v", "<i4", (3,)), ("part", "<i4")])
    rows["n"], rows["v"] = faces["n"], faces["v"]
    rows["part"] = np.arange(len(faces)) >= half
    header = header.replace(
        b"property list uchar int vertex_indices\n",
        b"property list uchar int vertex_indices\nproperty int part\n",
    )
    ply.write_bytes(header + b"end_header\n" + body[:-face_bytes] + rows.tobytes())
    stl = work / f"{stem}-parts.stl"
    solids = [
        trimesh.exchange.stl.export_stl_ascii(
            trimesh.Trimesh(mesh.vertices, f, process=False)
        ).replace("solid ", f"solid part{n}", 1)
        for n, f in enumerate(halves)
    ]
    stl.write_text("".join(solids))
    return [obj, ply, stl]


def best_time(tree: Path, path: Path, runs: int, setup: str = "plain") -> tuple[float, float]:
    """(least wall, least CPU) of `runs` load_mesh calls of `path` in a process of `tree`."""
    wall, cpu, _ = best_times(tree, [path], runs, setup)[str(path)]
    return wall, cpu


def best_times(tree: Path, paths: list[Path], runs: int, setup: str) -> dict[str, list[float]]:
    """{path: [least wall, least CPU, least floor]} of `runs` load_mesh calls of each file,
    and of reading its bytes and copying them once into a numpy array, one process of
    `tree` reading the files in turn (set up as `setup` says)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run(
        [sys.executable, "-c", TIMER_MANY, str(runs), str(tree.resolve()), setup]
        + [str(path) for path in paths],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    times: dict[str, list[float]] = json.loads(out.stdout)
    return times


def dataset_files(folder: Path, models: Path | None) -> list[Path]:
    """The PLY, STL and OBJ files under `folder`, make_dataset's written there first from
    `models` when it has none."""
    files = sorted(path for path in folder.rglob("*") if path.suffix[1:].lower() in FORMATS)
    if not files and models is not None:
        from voxelizer.benchmarks.meshes import make_dataset

        files = sorted(make_dataset(models, folder, copies=1))
    if not files:
        raise SystemExit(f"no PLY, STL or OBJ files under {folder}")
    return files


def by_format(args: argparse.Namespace, setup: str) -> None:
    """The --dataset mode: per-format CPU ms a file and MB/s in both trees, and the floor."""
    files = dataset_files(args.dataset, args.models)
    best: list[dict[str, list[float]]] = [{}, {}]
    for _ in range(args.rounds):
        for side, tree in enumerate(args.trees):
            for path, times in best_times(tree, files, args.runs, setup).items():
                kept = best[side].setdefault(path, times)
                best[side][path] = [min(a, b) for a, b in zip(kept, times)]
    floors = {str(path): min(side[str(path)][2] for side in best) for path in files}
    print(
        f"{'format':<7} {'files':>5} {'MB':>7}   {'CPU ms a file: old':>18} {'new':>7} "
        f"{'new/old':>7}   {'MB/s: old':>9} {'new':>7}   {'floor ms':>8} {'MB/s':>7}"
    )
    results = []
    for fmt in FORMATS:
        paths = [str(path) for path in files if path.suffix[1:].lower() == fmt]
        if not paths:
            continue
        size = sum(Path(path).stat().st_size for path in paths) / 1e6
        old, new = (sum(side[path][1] for path in paths) for side in best)
        old_wall, new_wall = (sum(side[path][0] for path in paths) for side in best)
        floor = sum(floors[path] for path in paths)
        count = len(paths)
        row = {
            "format": fmt, "files": count, "mb": round(size, 3),
            "old_cpu_ms_per_file": round(old / count * 1e3, 3),
            "new_cpu_ms_per_file": round(new / count * 1e3, 3),
            "old_wall_ms_per_file": round(old_wall / count * 1e3, 3),
            "new_wall_ms_per_file": round(new_wall / count * 1e3, 3),
            "old_mb_per_s": round(size / old, 1), "new_mb_per_s": round(size / new, 1),
            "floor_ms_per_file": round(floor / count * 1e3, 3),
            "floor_mb_per_s": round(size / floor, 1),
        }  # fmt: skip
        results.append(row)
        print(
            f"{fmt:<7} {count:5d} {size:7.2f}   {old / count * 1e3:18.2f} {new / count * 1e3:7.2f} "
            f"{new / old:7.2f}   {size / old:9.1f} {size / new:7.1f}   "
            f"{floor / count * 1e3:8.2f} {size / floor:7.1f}"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", nargs=2, type=Path, required=True, metavar=("OLD", "NEW"))
    parser.add_argument("--models", type=Path)
    parser.add_argument(
        "--dataset", type=Path,
        help="per format: the files under this folder (make_dataset's from --models if empty)",
    )  # fmt: skip
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--reading-process", action="store_true",
        help="time in processes set up as a batch's reading processes (one core, memory kept)",
    )  # fmt: skip
    parser.add_argument(
        "--files", type=Path, nargs="+", default=[],
        help="also these mesh files as they are (an OBJ of make_dataset's, ...)",
    )  # fmt: skip
    args = parser.parse_args()
    setup = "reading-process" if args.reading_process else "plain"
    if args.dataset is not None:
        by_format(args, setup)
        return
    if args.models is None:
        parser.error("give --models, --dataset or both")
    with tempfile.TemporaryDirectory() as temporary:
        work = args.work or Path(temporary)
        work.mkdir(parents=True, exist_ok=True)
        files = sorted(args.models.glob("*.ply")) + sorted(args.models.glob("*.stl"))
        files += text_copies(args.models, work) + list(args.files)
        results = []
        print(
            f"{'file':<28} {'wall, ms: old':>14} {'new':>9} {'ratio':>6}   {'CPU, ms: old':>13} {'new':>9} {'ratio':>6}"
        )
        for path in files:
            times: list[list[tuple[float, float]]] = [[], []]
            for _ in range(args.rounds):
                for side, tree in enumerate(args.trees):
                    times[side].append(best_time(tree, path, args.runs, setup))
            (old, old_cpu), (new, new_cpu) = (
                (min(t[0] for t in side), min(t[1] for t in side)) for side in times
            )
            results.append(
                {"file": path.name, "old_ms": old * 1e3, "new_ms": new * 1e3,
                 "old_cpu_ms": old_cpu * 1e3, "new_cpu_ms": new_cpu * 1e3}
            )  # fmt: skip
            print(
                f"{path.name:<28} {old * 1e3:14.2f} {new * 1e3:9.2f} {new / old:6.2f}   "
                f"{old_cpu * 1e3:13.2f} {new_cpu * 1e3:9.2f} {new_cpu / old_cpu:6.2f}"
            )
            sys.stdout.flush()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
