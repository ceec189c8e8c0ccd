"""Where the time of `voxelize DIR --out-dir OUT --ray ADDRESS` goes, from the process's start.

    python -m voxelizer.benchmarks.ray_timeline DIR [--grid 128] [--format npz]
        [--ray-gpus N | --ray-address ADDRESS] [--runs 2] [--before TREE]
        [--local-devices 0,1] [--json FILE]

A process like the command's (a new Python) runs voxelize_files_on_ray over the files of
DIR and notes when each phase ends: Python and Ray imported, voxelizer's Ray module
imported, the actors asked for (a tree that asks for them before the plan), the files
planned (the call returned: the actors are starting), the first
result, the last one, the run closed (its actors killed and Ray shut down) and the process
ended (timed by this one). A probe actor of the same kind is timed apart: its process, the
module's import, the device open. Then the command itself, `voxelize DIR --out-dir OUT
--format F --grid G --ray ADDRESS`, whole process, and with `--local-devices` the local
command (`--devices` instead of `--ray`) beside it: the ratio that --ray is judged by.

Each run starts from the same cluster (a local head with --ray-gpus N, started and stopped
here; the first run after its start is not reported: it pays the head's own first
connection). `--before TREE` (a folder holding a `voxelizer` package: `git archive COMMIT
voxelizer | tar -x -C TREE`) times that tree too, run for run in turns with this one, each
tree on a head of its own whose actors import it. Seconds since the process was started.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any

PHASES = ("python", "import ray", "import voxelizer.ray", "actors asked", "planned",
          "first result", "last result", "closed", "exited")  # fmt: skip


def child(address: str, folder: Path, grid: int, format: str, started: float) -> None:
    """The timed process: one line of JSON, {phase: seconds since `started`}. The call
    connects (and disconnects) itself, as the command's does."""
    marks = {"python": time.time() - started}
    with suppress(ImportError):  # as the command sets Ray up (a tree before: no such step)
        from voxelizer.batch.ray_start import command_driver

        command_driver()
    import ray  # noqa: F401  (timed apart from voxelizer's module, which imports it)

    marks["import ray"] = time.time() - started
    from voxelizer.batch import ray as batch_ray

    marks["import voxelizer.ray"] = time.time() - started
    from voxelizer.io.mesh_files import find_meshes

    start = getattr(batch_ray, "start_actors", None)  # as the command: before the files
    early = {} if start is None else {"started": start(address=address, grid=grid, format=format)}
    found = find_meshes([folder])  # as the command finds them: below DIR, mirrored in OUT
    with tempfile.TemporaryDirectory() as out:
        run = batch_ray.voxelize_files_on_ray(
            found.paths, address=address, out_dir=out, format=format, grid=grid,
            root=found.root, **early,
        )  # fmt: skip
        marks["planned"] = time.time() - started
        if early and early["started"].asked_at is not None:
            marks["actors asked"] = early["started"].asked_at - started
        done = failed = 0
        with run:
            for result in run:
                if done + failed == 0:
                    marks["first result"] = time.time() - started
                marks["last result"] = time.time() - started
                done += result.ok
                failed += not result.ok
        marks["closed"] = time.time() - started
    marks.update(probe_actor(address, started))
    print(json.dumps({"marks": marks, "done": done, "failed": failed}), flush=True)


def probe_actor(address: str, started: float) -> dict[str, float]:
    """An actor of the command's kind (one GPU where the cluster has them), timed inside:
    when its process was created, when its constructor began, voxelizer's Ray module
    imported, its device open (seconds since `started`)."""
    import ray

    from voxelizer.batch.ray import actor_options

    ray.init(address=address, log_to_driver=False, include_dashboard=False)
    try:

        @ray.remote
        class Probe:
            def __init__(self) -> None:
                self.marks = {"probe constructor": time.time()}
                from voxelizer.batch import ray as batch_ray

                self.marks["probe imported"] = time.time()
                batch_ray.Voxelizer(batch_ray._actor_device(None)).close()
                self.marks["probe device open"] = time.time()

            def times(self) -> dict[str, float]:
                return self.marks

        asked = time.time()
        probe = Probe.options(**actor_options(None)).remote()  # type: ignore[attr-defined]
        marks = ray.get(probe.times.remote(), timeout=300)
        marks["probe asked"] = asked
        return {name: at - started for name, at in marks.items()}
    finally:
        ray.shutdown()


def tree_environment(tree: Path | None) -> dict[str, str]:
    """This process's environment, with `tree` first on the path (None: as it is)."""
    if tree is None:
        return dict(os.environ)
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=str(tree) if not path else f"{tree}{os.pathsep}{path}")


def timed_run(
    address: str, folder: Path, grid: int, format: str, tree: Path | None
) -> dict[str, Any]:
    """The timeline of one process (see `child`), its end timed here."""
    started = time.time()
    # This file's child, whichever tree the process imports (the one before has its own).
    code = (
        f"import runpy; child = runpy.run_path({__file__!r})['child']; "
        f"child({address!r}, __import__('pathlib').Path({str(folder)!r}), {grid}, "
        f"{format!r}, {started!r})"
    )
    # From a folder of no package: the driver (and Ray's workers, which take its folder on
    # their path) import the tree asked for.
    with tempfile.TemporaryDirectory() as where:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd=where,
            env=tree_environment(tree), timeout=600,
        )  # fmt: skip
    exited = time.time() - started
    if done.returncode != 0:
        raise SystemExit(f"exit {done.returncode}\n{done.stderr[-4000:]}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    found["marks"]["exited"] = exited
    return found


def timed_command(
    folder: Path, grid: int, format: str, tree: Path | None, where: list[str]
) -> float:
    """Seconds of the whole `voxelize FOLDER --out-dir OUT ...` process, `where` its
    --ray ADDRESS or --devices LIST."""
    with tempfile.TemporaryDirectory() as work:
        command = [sys.executable, "-m", "voxelizer", str(folder), "--out-dir", f"{work}/out",
                   "--quiet", "--grid", str(grid), "--format", format, *where]  # fmt: skip
        started = time.perf_counter()
        done = subprocess.run(
            command, capture_output=True, text=True, cwd=work, env=tree_environment(tree),
            timeout=600,
        )  # fmt: skip
        seconds = time.perf_counter() - started
        shutil.rmtree(f"{work}/out", ignore_errors=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)}: exit {done.returncode}\n{done.stderr[-4000:]}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m voxelizer.benchmarks.ray_timeline", description=__doc__.split("\n")[0]
    )
    parser.add_argument("folder", type=Path)
    parser.add_argument("--grid", type=int, default=128)
    parser.add_argument("--format", default="npz")
    parser.add_argument("--ray-gpus", type=int, default=0)
    parser.add_argument("--ray-address", default=None)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--before", type=Path, help="a second tree, timed in turns with this")
    parser.add_argument("--local-devices", help="time the local command with --devices too")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    from voxelizer.benchmarks.ray_head import local_head

    trees: dict[str, Path | None] = {"this": None}
    if args.before is not None:
        if args.ray_address:
            parser.error("--before starts a head per tree: leave out --ray-address")
        trees["before"] = args.before.resolve()
    folder = args.folder.resolve()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    with ExitStack() as stack:
        addresses = {}
        for name, tree in trees.items():
            if args.ray_address:
                addresses[name] = args.ray_address
                continue
            addresses[name] = stack.enter_context(
                local_head(args.ray_gpus, env=tree_environment(tree))
            )
            timed_run(addresses[name], folder, args.grid, args.format, tree)  # the head's first
        for _ in range(args.runs):
            for name, tree in trees.items():
                run = timed_run(addresses[name], folder, args.grid, args.format, tree)
                where = ["--ray", addresses[name]]
                run["command"] = timed_command(folder, args.grid, args.format, tree, where)
                if args.local_devices:
                    where = ["--devices", args.local_devices]
                    run["local"] = timed_command(folder, args.grid, args.format, tree, where)
                runs[name].append(run)
    report(runs)
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1) + "\n")
    return 0


def report(runs: dict[str, list[dict[str, Any]]]) -> None:
    """Each tree's runs, phase by phase, then the command's seconds (and the ratios)."""
    for name, tree_runs in runs.items():
        for number, run in enumerate(tree_runs, 1):
            marks = run["marks"]
            print(f"{name} run {number}: {run['done']} done, {run['failed']} failed")
            for phase, at in sorted(marks.items(), key=lambda item: item[1]):
                print(f"  {at:7.3f} s  {phase}")
            line = f"  command with --ray: {run['command']:.3f} s"
            if "local" in run:
                line += (
                    f"; local: {run['local']:.3f} s (--ray at {run['local'] / run['command']:.2f}x)"
                )
            print(line)
    if "before" in runs:
        for number, (this, before) in enumerate(zip(runs["this"], runs["before"]), 1):
            print(f"run {number}: command with --ray {this['command']:.3f} s against "
                  f"{before['command']:.3f} s before ({before['command'] / this['command']:.2f}x); "
                  f"timeline: closed {this['marks']['closed']:.3f} against "
                  f"{before['marks']['closed']:.3f} s before")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
