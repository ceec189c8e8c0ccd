"""Where the time of `voxelize DIR --out-dir OUT --ray ADDRESS` goes, from the process's start.

    python -m voxelizer.benchmarks.ray_timeline DIR [--grid 128] [--format npz]
        [--ray-gpus N | --ray-address ADDRESS] [--runs 2] [--json FILE]

A process like the command's (a new Python) runs voxelize_files_on_ray over the files of
DIR and notes when each phase ends: Python and Ray imported, voxelizer's Ray module
imported, connected to the cluster, the actors started (a probe actor of the same kind
timed apart: its process, the module's import, the device open), the first result, the last
one, Ray shut down. Each run starts from the same cluster (a local head with --ray-gpus N,
started and stopped here; the first run after its start is not reported: it pays the
head's own first connection). Seconds since the process was started.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PHASES = ("python", "import ray", "import voxelizer.ray", "connected", "planned",
          "first result", "last result", "shut down")  # fmt: skip


def child(address: str, folder: Path, grid: int, format: str, started: float) -> None:
    """The timed process: one line of JSON, {phase: seconds since `started`}."""
    marks = {"python": time.time() - started}
    import ray

    marks["import ray"] = time.time() - started
    from voxelizer.batch import ray as batch_ray

    marks["import voxelizer.ray"] = time.time() - started
    batch_ray.connect(address)
    marks["connected"] = time.time() - started
    from voxelizer.io.mesh_files import find_meshes

    found = find_meshes([folder])  # as the command finds them: below DIR, mirrored in OUT
    with tempfile.TemporaryDirectory() as out:
        run = batch_ray.voxelize_files_on_ray(
            found.paths, out_dir=out, format=format, grid=grid, root=found.root
        )
        marks["planned"] = time.time() - started
        done = failed = 0
        for result in run:
            if done + failed == 0:
                marks["first result"] = time.time() - started
            done += result.ok
            failed += not result.ok
        marks["last result"] = time.time() - started
    ray.shutdown()
    marks["shut down"] = time.time() - started
    marks.update(probe_actor(address, started))
    print(json.dumps({"marks": marks, "done": done, "failed": failed}))


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


def timed_run(address: str, folder: Path, grid: int, format: str) -> dict[str, Any]:
    started = time.time()
    code = (
        "import sys; from voxelizer.benchmarks.ray_timeline import child; "
        f"child({address!r}, __import__('pathlib').Path({str(folder)!r}), {grid}, "
        f"{format!r}, {started!r})"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"exit {done.returncode}\n{done.stderr[-4000:]}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


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
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    from contextlib import nullcontext

    from voxelizer.benchmarks.ray_head import local_head

    head = nullcontext(args.ray_address) if args.ray_address else local_head(args.ray_gpus)
    runs = []
    with head as address:
        if not args.ray_address:
            timed_run(address, args.folder, args.grid, args.format)  # the head's first
        for _ in range(args.runs):
            runs.append(timed_run(address, args.folder, args.grid, args.format))
    for number, run in enumerate(runs, 1):
        marks = run["marks"]
        print(f"run {number}: {run['done']} done, {run['failed']} failed")
        for name, at in sorted(marks.items(), key=lambda item: item[1]):
            print(f"  {at:7.3f} s  {name}")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
