"""Mesh reading in two source trees side by side: what reading parts and colours costs.

    python voxelizer/benchmarks/reader_trees.py --trees OLD NEW --models DIR [--runs N]
        [--rounds R] [--work DIR] [--json FILE] [--reading-process] [--files FILE ...]

For each PLY and STL of DIR, and for text copies of them written into --work (ASCII PLY,
ASCII STL, OBJ; and the same with parts: an OBJ of two groups with materials, a PLY with a
`part` face property and vertex colours, an ASCII STL of two solids), the best of N calls
of `voxelizer.load_mesh(path)` in a Python process of each tree (PYTHONPATH=TREE), the two
trees taking turns for R rounds, so that the machine's load falls on both alike (each
process imports the tree's voxelizer, also where an editable install is on the path; with
--reading-process, set up as a batch's reading processes are), wall time and CPU time (all threads: on a shared machine the steadier of the two). Prints one
line per file: the least wall and CPU times in each tree and their ratios (NEW / OLD), and
writes them as JSON with --json.
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

TIMER = """
import sys, time
# the tree's own voxelizer, not an editable install's (whose finder would come first)
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in type(f).__module__]
sys.path.insert(0, sys.argv[3])
from voxelizer.io import load_mesh
assert load_mesh.__code__.co_filename.startswith(sys.argv[3])
if sys.argv[4] == "reading-process":  # set up as a batch's reading processes are
    from voxelizer import parallel
    parallel.use_threads(1)
    getattr(parallel, "keep_freed_memory", lambda: None)()  # (not in older trees)
path, runs = sys.argv[1], int(sys.argv[2])
load_mesh(path)
walls, cpus = [], []
for _ in range(runs):
    wall, cpu = time.perf_counter(), time.process_time()
    load_mesh(path)
    walls.append(time.perf_counter() - wall)
    cpus.append(time.process_time() - cpu)
print(min(walls), min(cpus))
"""


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
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run(
        [sys.executable, "-c", TIMER, str(path), str(runs), str(tree.resolve()), setup],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    wall, cpu = out.stdout.split()
    return float(wall), float(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", nargs=2, type=Path, required=True, metavar=("OLD", "NEW"))
    parser.add_argument("--models", type=Path, required=True)
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
