"""The fixed cost of a triangle grid's build and of one submission, this checkout beside
another, side by side: `python -m voxelizer.benchmarks.trigrid_rebuild --baseline DIR
--models-dir DIR --out DIR`.

DIR of --baseline is a checkout of the package to compare with (say, `git worktree add`
of an older commit, or `git archive COMMIT voxelizer | tar -x -C DIR`). Each side runs in a
process of its own (PYTHONPATH its checkout), on the same device, and the two take turns: a
round builds each mesh --builds times on one side, then on the other, --rounds times, so
both see the same load. Timed per build, as the triangle grid benchmark's `build`
(benchmarks/triangle_grid.py), wall time with the device synchronised:
`build_triangle_grid` of a mesh whose geometry the device holds, then the grid's `close()`
(its buffers go to the next build), after a warm-up of three builds:

* `build`: the grid's GPU times (Vulkan timestamps) looked at after the clock stops;
* `build, GPU times read`: looked at before it stops (what a caller who reads
  `grid.stats.gpu_ms` pays);
* `build, blocking wait`: as `build`, with the sequence's fence poll off
  (`Sequence.wait_spin_s = 0`), on a side that has the poll;
* `host CPU time`: the CPU time of the thread that builds (`time.thread_time`: the host's
  own work, without the time it sleeps in a blocking wait, with the time it polls a fence),
  the GPU times not read, and read;
* `host ms`: the build's time outside the waits for the device (the profile of --profile
  builds with cProfile, less the time in vkWaitForFences, vkQueueWaitIdle and the
  sequence's own fence wait), where its fixed cost lies; and the GPU time of its passes
  (the median).

And per side the round trip of one submission with no work in it: a reusable recording of
two timestamps, replayed --builds times a round (`Sequence.replay()`, its submit and its
wait), also with its times read, and with the blocking wait; and its host CPU time. Meshes: model specs of
benchmarks/meshes.py, or `sphere-N` (an icosphere of N subdivisions), whose passes are
short enough on a CPU device to show the fixed cost.

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
from voxelizer.gpu.buffers import BufferPool
from voxelizer.gpu.commands import Sequence
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
WAITS = ("vkWaitForFences", "vkQueueWaitIdle", "_wait_for_fence")

def blocking(sequence, block):
    # The fence poll off (block) or back as it was; False on a side without the poll.
    if not hasattr(sequence, "wait_spin_s"):
        return False
    if block:
        sequence.spin_before, sequence.wait_spin_s = sequence.wait_spin_s, 0.0
    else:
        sequence.wait_spin_s = sequence.spin_before
    return True

with Voxelizer() as vox:
    engine = GridEngine(vox.device)
    meshes = {spec: load(spec, models_dir) for spec in specs}
    trip = Sequence(vox.device, BufferPool(vox.device))
    trip.begin(reusable=True)
    trip.mark("start")
    trip.mark("end")
    dict(trip.submit())

    def build(mesh):
        grid = build_triangle_grid(engine, mesh, density=density)
        grid.close()
        return grid

    def builds(mesh, count, read):
        times, gpu, cpu = [], [], []
        for _ in range(count):
            started, cpu_started = time.perf_counter(), time.thread_time()
            grid = build(mesh)
            if read:
                gpu.append(sum(grid.stats.gpu_ms.values()))
            times.append((time.perf_counter() - started) * 1e3)
            cpu.append((time.thread_time() - cpu_started) * 1e3)
            if not read:
                gpu.append(sum(grid.stats.gpu_ms.values()))
        return times, gpu, grid, cpu

    def trips(count, read, cpu=None):
        times = []
        for _ in range(count):
            started, cpu_started = time.perf_counter(), time.thread_time()
            times_of = trip.replay()
            if read:
                dict(times_of)
            times.append((time.perf_counter() - started) * 1e6)
            if cpu is not None:
                cpu.append((time.thread_time() - cpu_started) * 1e6)
        return times

    for mesh in meshes.values():
        for _ in range(3):
            build(mesh)
    package = str(Path(voxelizer.__file__).parent)
    print(json.dumps({"device": vox.device_name, "package": package}), flush=True)
    for line in sys.stdin:
        what, spec, count = line.split()
        count = int(count)
        if what == "trip":
            cpu, cpu_read = [], []
            answer = {"trip_us": trips(count, False, cpu), "read_us": trips(count, True, cpu_read),
                      "cpu_us": cpu, "cpu_read_us": cpu_read}
            if blocking(trip, True):
                answer["block_us"] = trips(count, False)
                blocking(trip, False)
            print(json.dumps(answer), flush=True)
        elif what == "build":
            mesh = meshes[spec]
            times, gpu, grid, cpu = builds(mesh, count, False)
            read = builds(mesh, count, True)
            answer = {"wall_ms": times, "read_ms": read[0], "cpu_ms": cpu, "cpu_read_ms": read[3],
                      "gpu_ms": gpu, "counts": grid.stats.counts}
            if blocking(engine.build_sequence, True):
                answer["block_ms"] = builds(mesh, count, False)[0]
                blocking(engine.build_sequence, False)
            print(json.dumps(answer), flush=True)
        else:
            mesh = meshes[spec]
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(count):
                build(mesh)
            profile.disable()
            stats = pstats.Stats(profile).stats
            total = sum(entry[2] for entry in stats.values())
            waits = sum(entry[3] for key, entry in stats.items() if key[2] in WAITS)
            print(json.dumps({"host_ms": (total - waits) * 1e3 / count}), flush=True)
    trip.destroy()
    trip.pool.destroy()
    engine.close()
"""
# The timed figures of a side, (name in the table, key in a side's answer, its unit)
BUILD_FIGURES = (
    ("build", "wall_ms"),
    ("build, GPU times read", "read_ms"),
    ("build, blocking wait", "block_ms"),
    ("host CPU time of a build", "cpu_ms"),
    ("host CPU time, GPU times read", "cpu_read_ms"),
)
TRIP_FIGURES = (
    ("submit + wait, no work (µs)", "trip_us"),
    ("the same, GPU times read (µs)", "read_us"),
    ("the same, blocking wait (µs)", "block_us"),
    ("host CPU time of one (µs)", "cpu_us"),
    ("host CPU time, GPU times read (µs)", "cpu_read_us"),
)
SIDES = ("baseline", "this")


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
             for name, root in zip(SIDES, (args.baseline, CHECKOUT))]  # fmt: skip
    try:
        rows = [_turns(sides, "trip", "submission", args)]
        print(table(rows), flush=True)
        for spec in args.models:
            row = _turns(sides, "build", spec, args)
            row["triangles"] = row["this"].pop("triangles")
            for side in sides:
                row[side.name]["host_ms"] = side.ask("profile", spec, args.profile)["host_ms"]
            rows.append(row)
            print(table([row]), flush=True)
        return {"device": sides[1].device, "density": args.density, "rounds": args.rounds,
                "builds": args.builds, "rows": rows}  # fmt: skip
    finally:
        for side in sides:
            side.close()


def _turns(sides: list[Side], what: str, spec: str, args: argparse.Namespace) -> dict[str, Any]:
    """--rounds turns of each side at `what` (builds of `spec`, or round trips): per side,
    the minimum and median of every timed figure it has, and its ratio baseline ÷ this."""
    figures = BUILD_FIGURES if what == "build" else TRIP_FIGURES
    samples: dict[str, dict[str, list[float]]] = {side.name: {} for side in sides}
    row: dict[str, Any] = {"model": spec, "what": what}
    for _ in range(args.rounds):
        for side in sides:
            answer = side.ask(what, spec, args.builds)
            for _, key in figures + (("gpu", "gpu_ms"),):
                if key in answer:
                    samples[side.name].setdefault(key, []).extend(answer[key])
            if what == "build":
                counts = answer["counts"]
                row[side.name] = {"submissions": counts.get("submissions"),
                                  "triangles": counts["triangles"]}  # fmt: skip
    for name, taken in samples.items():
        side_row = row.setdefault(name, {})
        for key, values in taken.items():
            side_row[key] = {"min": min(values), "median": float(np.median(values))}
    for _, key in figures:
        if key in row["baseline"] and key in row["this"]:
            row[f"{key}_ratio"] = {
                stat: row["baseline"][key][stat] / row["this"][key][stat]
                for stat in ("min", "median")
            }
    return row


def table(rows: list[dict[str, Any]]) -> str:
    """A line per figure: each side's minimum (median), and baseline ÷ this."""
    lines = [
        "| mesh (triangles) | figure | baseline: min (median) | this: min (median) "
        "| baseline ÷ this, min (median) |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for row in rows:
        old, new = row["baseline"], row["this"]
        figures = BUILD_FIGURES if row["what"] == "build" else TRIP_FIGURES
        mesh = row["model"] + (f" ({row['triangles']:,})" if "triangles" in row else "")
        for label, key in figures:
            ratio = row.get(f"{key}_ratio")
            ratios = "" if ratio is None else f"{ratio['min']:.2f} ({ratio['median']:.2f})"
            name = label + (" ms" if row["what"] == "build" else "")
            lines.append(f"| {mesh} | {name} | {_spread(old.get(key))} "
                         f"| {_spread(new.get(key))} | {ratios} |")  # fmt: skip
        if row["what"] == "build":
            lines.append(f"| {mesh} | host ms (profiled, less the waits) "
                         f"| {old['host_ms']:.3f} | {new['host_ms']:.3f} "
                         f"| {old['host_ms'] / new['host_ms']:.2f} |")  # fmt: skip
            lines.append(f"| {mesh} | GPU ms; submissions "
                         f"| {_spread(old.get('gpu_ms'))}; {old['submissions'] or '?'} "
                         f"| {_spread(new.get('gpu_ms'))}; {new['submissions']} | |")  # fmt: skip
    return "\n".join(lines)


def _spread(figure: dict[str, float] | None) -> str:
    return "—" if figure is None else f"{figure['min']:.3f} ({figure['median']:.3f})"


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
        f"rounds of {document['builds']} builds (or round trips) a side\n\n"
        + table(document["rows"])
        + "\n"
    )
    (args.out / "results.md").write_text(markdown, encoding="utf-8")
    (args.out / "results.json").write_text(json.dumps(document, indent=2) + "\n")
    print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
