"""The CPU time of the batch command's threads per result with several workers: what the
main thread's loop over the workers' results (voxelizer.batch.pool, WorkerPool.results) and
the command's handling of each result take of the GIL beside the device's thread of the
worker in the command's own process.

    python -m voxelizer.benchmarks.pool_loop --models-dir models --out /tmp/loop --src OLD

What is timed: `voxelize DIR --out-dir OUT --format npz --grid G --jobs 2` (or `--devices
0,1` with --devices) over `--meshes` files (the mesh files of `--models-dir` over and over),
in a new Python each (the command's main(), as the `voxelize` script calls it). With `--jobs
2` on one device the pool's loop runs as with two devices: one worker in the command's
process, one in a process of its own. For each thread of the command's process, its CPU time
(the kernel's clock of the thread) from the pool's first result to its last, summed by kind
of thread (its name without its number: MainThread runs the pool's loop and the command's
handling of each result; voxelizer-local-worker is the device's thread of the worker in the
command's process), divided by the results between; and the results per second over the
same span. With `--src`, the same measurement runs with each source tree given (a folder
holding the package `voxelizer`, say an older checkout) too, side by side, in rounds that
alternate their order. The table keeps the median over the rounds; every round is in the
JSON file written to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

# (absolute: a measurement runs this file as a script, with the timed tree's package)
from voxelizer.benchmarks import batch_threads
from voxelizer.benchmarks.batch_threads import mesh_files, thread_kind

CHILD_OPTIONS = ("models_dir", "meshes", "grid", "format", "jobs", "devices")


def command_line(args: argparse.Namespace, inputs: Path, out: Path) -> list[str]:
    """The command's arguments: the batch of `inputs` written to `out`."""
    workers = ["--devices", args.devices] if args.devices else ["--jobs", str(args.jobs)]
    return [str(inputs), "--out-dir", str(out), "--format", args.format,
            "--grid", str(args.grid), "--quiet", *workers]  # fmt: skip


def thread_seconds() -> dict[threading.Thread, float]:
    """Each running thread of this process and its CPU seconds so far."""
    seconds = {}
    for thread in threading.enumerate():
        if thread.ident is None:
            continue
        try:
            seconds[thread] = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except (OSError, ProcessLookupError):  # ended meanwhile (its end is kept: measure)
            continue
    return seconds


def measure(args: argparse.Namespace) -> dict:
    """One measurement, in this process: the command run here, its threads' CPU seconds
    sampled (on the main thread, in the pool's loop) at the pool's first and last result; a
    thread that ends between (the worker here, once the meshes run out) counts until its
    end."""
    import voxelizer
    from voxelizer.batch import pool
    from voxelizer.cli import main

    files = mesh_files(args.models_dir)
    samples: list[tuple[dict[threading.Thread, float], float]] = []
    ended: dict[threading.Thread, float] = {}
    results, run = pool.WorkerPool.results, threading.Thread.run

    def sampled(self: pool.WorkerPool) -> Iterator:
        """The pool's results, this process's threads sampled at the first and the last."""
        for given, result in enumerate(results(self), start=1):
            if given in (1, args.meshes):
                samples.append(({**ended, **thread_seconds()}, time.perf_counter()))
            yield result

    def timed_run(self: threading.Thread) -> None:
        try:
            run(self)
        finally:
            ended[self] = time.thread_time()

    pool.WorkerPool.results = sampled  # type: ignore[method-assign]
    threading.Thread.run = timed_run  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as folder:
        inputs = Path(folder) / "in"
        inputs.mkdir()
        for index in range(args.meshes):  # each input its own name: the outputs do not collide
            path = files[index % len(files)]
            (inputs / f"{index:06d}{path.suffix.lower()}").symlink_to(path.resolve())
        code = main(command_line(args, inputs, Path(folder) / "out"))
        written = sum(1 for _ in (Path(folder) / "out").iterdir())
    if code != 0 or len(samples) != 2:
        raise SystemExit(f"the command exited with {code} after {len(samples)} samples")
    (start, started), (end, finished) = samples
    per_kind: dict[str, float] = defaultdict(float)
    for thread, seconds in end.items():
        per_kind[thread_kind(thread.name)] += seconds - start.get(thread, 0.0)
    spanned = args.meshes - 1
    return {
        "voxelizer_file": voxelizer.__file__,  # the source tree timed
        "meshes": args.meshes,
        "ok": written,
        "meshes_per_second": spanned / (finished - started),
        "cpu_us_per_mesh": {k: 1e6 * v / spanned for k, v in sorted(per_kind.items())},
    }


def run_child(source: str, args: argparse.Namespace) -> dict:
    """One measurement in a new Python, with the package of `source` (THIS: this one)."""
    return batch_threads.run_child(source, args, script=__file__, options=CHILD_OPTIONS)


def main(argv: list[str] | None = None) -> int:
    parser = batch_threads.rounds_parser(
        __doc__.split("\n\n")[0], json_name="pool_loop.json", meshes=400, grid=24
    )
    parser.add_argument("--jobs", type=int, default=2, help="workers (without --devices)")
    parser.add_argument("--devices", default="", help="the command's --devices, say 0,1")
    args = parser.parse_args(argv)
    if args.meshes < 2:
        parser.error("--meshes: at least 2 (the span is from the first result to the last)")
    if args.child:
        print(json.dumps(measure(args)))
        return 0
    if args.out is None:
        parser.error("--out is required")
    sources, rounds = batch_threads.interleaved_rounds(args, run_child)
    workers = f"--devices {args.devices}" if args.devices else f"--jobs {args.jobs}"
    print(
        f"voxelize DIR --format {args.format} --grid {args.grid} {workers}: "
        f"{len(mesh_files(args.models_dir))} files from {args.models_dir}, {os.cpu_count()} "
        f"cores, {args.meshes} meshes a round, {args.rounds} rounds; CPU from the pool's "
        "first result to its last, per result"
    )
    batch_threads.write_rounds(rounds, sources, args.out / "pool_loop.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
