"""The fixed cost of a triangle grid's build, this checkout beside another, side by side:
`python -m voxelizer.benchmarks.trigrid_rebuild --baseline DIR --models-dir DIR --out DIR`.

DIR of --baseline is a checkout of the package to compare with (say, `git worktree add`
of an older commit). Each side runs in a process of its own (PYTHONPATH its checkout), on
the same device, and the two take turns: a round builds each mesh --builds times on one side,
then on the other, --rounds times, so both see the same load. Timed per build, as the
triangle grid benchmark's `build` (benchmarks/triangle_grid.py), wall time with the device
synchronised: `build_triangle_grid` of a mesh whose geometry the device holds, then the
grid's `close()` (its buffers go to the next build), after a warm-up of three builds; and
`host ms`, the build's time outside the waits for the device (the profile of --profile
builds with cProfile, less the time in vkWaitForFences and vkQueueWaitIdle), where its
fixed cost lies; and the GPU time of its passes (Vulkan timestamps, the median). Meshes: model specs of benchmarks/meshes.py, or `sphere-N` (an icosphere
of N subdivisions), whose passes are short enough on a CPU device to show the fixed cost.

It writes results.json and results.md to --out and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

CHECKOUT = Path(__file__).resolve().parents[2]  # this side: the checkout holding this file
# What each side's process runs: only interfaces both checkouts have.
WORKER = r"""
import cProfile, json, pstats, sys, time
from pathlib import Path
import numpy as np
import voxelizer
from voxelizer import Voxelizer
from voxelizer.trigrid import GridEngine, build_triangle_grid

def load(spec, models_dir):
    if spec.startswith("sphere-"):
        import trimesh
        from voxelizer.mesh import Mesh
        ball = trimesh.creation.icosphere(subdivisions=int(spec[7:]))
        return Mesh(np.asarray(ball.vertices, np.float64), np.asarray(ball.faces, np.int64))
    from voxelizer.benchmarks.meshes import resolve_model
    return resolve_model(spec, Path(models_dir))[1]

models_dir, density, specs = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
WAITS = ("vkWaitForFences", "vkQueueWaitIdle")
with Voxelizer() as vox:
    engine = GridEngine(vox.device)
    meshes = {spec: load(spec, models_dir) for spec in specs}

    def build(mesh):
        grid = build_triangle_grid(engine, mesh, density=density)
        grid.close()
        return grid

    for mesh in meshes.values():
        for _ in range(3):
            build(mesh)
    package = str(Path(voxelizer.__file__).parent)
    print(json.dumps({"device": vox.device_name, "package": package}), flush=True)
    for line in sys.stdin:
        what, spec, count = line.split()
        mesh, count = meshes[spec], int(count)
        if what == "build":
            times, gpu = [], []
            for _ in range(count):
                started = time.perf_counter()
                grid = build(mesh)
                times.append((time.perf_counter() - started) * 1e3)
                gpu.append(sum(grid.stats.gpu_ms.values()))
            answer = {"wall_ms": times, "gpu_ms": gpu, "counts": grid.stats.counts}
            print(json.dumps(answer), flush=True)
        else:
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(count):
                build(mesh)
            profile.disable()
            stats = pstats.Stats(profile).stats
            total = sum(entry[2] for entry in stats.values())
            waits = sum(entry[3] for key, entry in stats.items() if key[2] in WAITS)
            print(json.dumps({"host_ms": (total - waits) * 1e3 / count}), flush=True)
    engine.close()
"""


class Side:
    """One checkout's worker process."""

    def __init__(self, name: str, root: Path, models_dir: Path, density: float, specs: list[str]):
        self.name = name
        paths = [str(root.resolve()), os.environ.get("PYTHONPATH", "")]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in paths if path)}
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(models_dir.resolve()), str(density), *specs],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=root,
        )  # fmt: skip
        started = self._read()
        self.device, self.package = started["device"], started["package"]
        if Path(self.package).parent != root.resolve():
            raise RuntimeError(f"the {name} side imported the package from {self.package}")

    def ask(self, what: str, spec: str, count: int) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{what} {spec} {count}\n")
        self.process.stdin.flush()
        return self._read()

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.name} side's process ended (see its errors above)")
        result: dict[str, Any] = json.loads(line)
        return result

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    sides = [Side(name, root, args.models_dir, args.density, args.models)
             for name, root in (("baseline", args.baseline), ("this", CHECKOUT))]  # fmt: skip
    try:
        rows = []
        for spec in args.models:
            walls: dict[str, list[float]] = {side.name: [] for side in sides}
            gpus: dict[str, list[float]] = {side.name: [] for side in sides}
            counts: dict[str, dict[str, int]] = {}
            for _ in range(args.rounds):
                for side in sides:
                    answer = side.ask("build", spec, args.builds)
                    walls[side.name] += answer["wall_ms"]
                    gpus[side.name] += answer["gpu_ms"]
                    counts[side.name] = answer["counts"]
            host = {side.name: side.ask("profile", spec, args.profile)["host_ms"] for side in sides}
            row: dict[str, Any] = {"model": spec, "triangles": counts["this"]["triangles"]}
            for name in walls:
                row[name] = {
                    "min_ms": min(walls[name]),
                    "median_ms": float(np.median(walls[name])),
                    "host_ms": host[name],
                    "gpu_median_ms": float(np.median(gpus[name])),
                    "submissions": counts[name].get("submissions"),
                }
            for key in ("min_ms", "median_ms", "host_ms"):
                row[f"{key}_ratio"] = row["baseline"][key] / row["this"][key]
            rows.append(row)
            print(table([row]), flush=True)
        return {"device": sides[1].device, "density": args.density, "rounds": args.rounds,
                "builds": args.builds, "rows": rows}  # fmt: skip
    finally:
        for side in sides:
            side.close()


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| mesh (triangles) | baseline: min ms (median) | this: min ms (median) | baseline ÷ "
        "this, min (median) | host ms: baseline, this | GPU ms (median): baseline, this "
        "| submissions: baseline, this |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        old, new = row["baseline"], row["this"]
        lines.append(
            f"| {row['model']} ({row['triangles']:,}) "
            f"| {old['min_ms']:.3f} ({old['median_ms']:.3f}) "
            f"| {new['min_ms']:.3f} ({new['median_ms']:.3f}) "
            f"| {row['min_ms_ratio']:.2f} ({row['median_ms_ratio']:.2f}) "
            f"| {old['host_ms']:.3f}, {new['host_ms']:.3f} "
            f"| {old['gpu_median_ms']:.3f}, {new['gpu_median_ms']:.3f} "
            f"| {old['submissions'] or '?'}, {new['submissions']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m voxelizer.benchmarks.trigrid_rebuild")
    parser.add_argument("--baseline", type=Path, required=True, help="a checkout to compare")
    parser.add_argument("--models-dir", type=Path, required=True, help="holds bunny, dragon")
    parser.add_argument("--out", type=Path, required=True, help="results.json, results.md")
    parser.add_argument("--models", nargs="+", default=["sphere-2", "sphere-4", "bunny"])
    parser.add_argument("--density", type=float, default=4.0, help="cells per triangle, λ")
    parser.add_argument("--rounds", type=int, default=5, help="turns each side takes")
    parser.add_argument("--builds", type=int, default=10, help="builds a turn")
    parser.add_argument("--profile", type=int, default=20, help="builds profiled a side")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    document = measure(args)
    markdown = (
        f"Device: {document['device']}; λ = {document['density']}; {document['rounds']} "
        f"rounds of {document['builds']} builds a side\n\n" + table(document["rows"]) + "\n"
    )
    (args.out / "results.md").write_text(markdown, encoding="utf-8")
    (args.out / "results.json").write_text(json.dumps(document, indent=2) + "\n")
    print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
