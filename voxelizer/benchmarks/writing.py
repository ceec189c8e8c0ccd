"""Writing a batch's output files: writer threads against writing processes, side by side.

    python -m voxelizer.benchmarks.writing --models-dir DIR --out DIR [--work DIR]
        [--copies 32] [--grid 128] [--format npz] [--rounds 3] [--writers N] [--files 512]
        [--load-processes N]

`batch`: voxelize_many over make_dataset's files (24 x --copies; voxelizer/benchmarks/
meshes.py) writing one --format file per mesh, each run in a fresh process set up as the
command sets itself up (the writing and reading processes forked before the device opens,
then one warm-up batch over the first 24 files), with `write_processes=0` (the writer
threads write) and `write_processes=N` (N writing processes: --writers, default the
host's default_write_processes, at least 1; the reading processes as the batch's default,
or --load-processes), the two taking turns round by round. Each run
gives meshes/s over the whole dataset (reading, voxelizing, writing: the batch's own
pace), the batch process's CPU per mesh (getrusage: every thread of it, not its helpers)
and its device thread's (the caller's: one worker runs in it), and its failures (0).

`writers`: one of the batch's files read back (a real grid), written --files times by N
writers, each way in a fresh process: `threads` (N threads calling write_output, as the
batch's writer threads do), `processes` (voxelizer.batch.write_processes, forked),
`pool_fork` and `pool_forkserver` (concurrent.futures.ProcessPoolExecutor with N
processes, fork or forkserver started). Each gives its start (until the first file is
written), files/s, the parent's CPU per file, and whether reading processes could still be
forked once its writers were (fork_allowed: a batch forks its readers after its writers;
a ProcessPoolExecutor forks its processes at its first task, with its threads).

Prints one JSON line per figure set and a table; --out DIR gets writing.json and
writing.md. docs/benchmarks.md, "Writing processes", gives the figures.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import voxelizer
from voxelizer.batch.helper_processes import fork_allowed
from voxelizer.batch.readers import shared_load_processes
from voxelizer.batch.write_processes import (
    WriteJob,
    WriteProcesses,
    default_write_processes,
    shared_write_processes,
    write_job,
    write_output,
)
from voxelizer.benchmarks.meshes import make_dataset
from voxelizer.io.writers import OutputFormat

WAYS = ("threads", "processes", "pool_fork", "pool_forkserver")


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _environment() -> dict[str, str]:
    """Child processes import the voxelizer this process imported."""
    tree = str(Path(voxelizer.__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=tree if not path else f"{tree}{os.pathsep}{path}")


def _fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


# --- children ---------------------------------------------------------------------------------


def batch_child(args: argparse.Namespace) -> dict[str, Any]:
    """One timed batch in this (fresh) process, set up as the command sets itself up."""
    from voxelizer.batch.engine import default_load_processes

    files = [Path(p) for p in json.loads(args.files_json.read_text())]
    writers = args.write_processes
    readers = default_load_processes(1) if args.load_processes is None else args.load_processes
    if writers:
        shared_write_processes(writers)  # forked first, as the command does
    if readers:
        shared_load_processes(readers)
    keywords = dict(grid=args.grid, format=args.format, write_processes=writers,
                    load_processes=readers, overwrite=True)  # fmt: skip
    for _ in voxelize_many_here(files[:24], args.work / "warm", keywords):
        pass
    out = _fresh(args.work / "out")
    cpu, thread_cpu, started = _cpu_seconds(), time.thread_time(), time.perf_counter()
    failed = sum(not r.ok for r in voxelize_many_here(files, out, keywords))
    seconds = time.perf_counter() - started
    meshes = len(files)
    return {
        "way": "processes" if writers else "threads",
        "write_processes": writers,
        "load_processes": readers,
        "meshes": meshes,
        "failed": failed,
        "meshes_per_s": meshes / seconds,
        "batch_cpu_ms_per_mesh": (_cpu_seconds() - cpu) * 1e3 / meshes,
        "device_thread_cpu_ms_per_mesh": (time.thread_time() - thread_cpu) * 1e3 / meshes,
    }


def voxelize_many_here(files: list[Path], out: Path, keywords: dict[str, Any]) -> Any:
    return voxelizer.voxelize_many(files, out_dir=out, **keywords)


def writers_child(args: argparse.Namespace) -> dict[str, Any]:
    """One way of writing --files copies of a real grid, in this (fresh) process."""
    fmt = OutputFormat.named(args.format)
    result = voxelizer.load(args.sample)
    out = _fresh(args.work / "writers")
    jobs = [
        WriteJob.of(result, out / f"f{i:05d}{fmt.suffix}", fmt, replace=True, up_axis=None)
        for i in range(args.files)
    ]
    count, way = args.write_processes, args.way
    started = time.perf_counter()
    submit, close = _writers(way, count, result, fmt)
    forkable = fork_allowed()  # (a process pool forks at its first file, below)
    submit(jobs[0]).result()
    start_s = time.perf_counter() - started
    if way.startswith("pool_"):
        forkable = fork_allowed()
    cpu, started = _cpu_seconds(), time.perf_counter()
    for future in [submit(job) for job in jobs[1:]]:
        future.result()
    seconds = time.perf_counter() - started
    close()
    return {
        "way": way,
        "writers": count,
        "start_s": start_s,
        "files_per_s": (len(jobs) - 1) / seconds,
        "parent_cpu_ms_per_file": (_cpu_seconds() - cpu) * 1e3 / (len(jobs) - 1),
        "readers_forkable_after_start": forkable,
    }


def _writers(way: str, count: int, result: Any, fmt: OutputFormat) -> tuple[Any, Any]:
    """(submit(job) -> Future, close()) of one way of writing."""
    if way == "threads":
        threads = ThreadPoolExecutor(count)

        def on_thread(job: WriteJob) -> Future[None]:
            return threads.submit(
                write_output, result, Path(job.output), fmt, replace=True, up_axis=None
            )

        return on_thread, threads.shutdown
    if way == "processes":
        processes = WriteProcesses(count)
        return processes.submit, processes.close
    method = way.removeprefix("pool_")
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        context.set_forkserver_preload(["voxelizer.batch.write_processes"])
    pool = ProcessPoolExecutor(count, mp_context=context)
    return (lambda job: pool.submit(write_job, job)), pool.shutdown


# --- the parent -------------------------------------------------------------------------------


def _child(args: argparse.Namespace, role: str, extra: list[str]) -> dict[str, Any]:
    command = [sys.executable, "-m", "voxelizer.benchmarks.writing", "--child", role,
               "--work", str(args.work), "--grid", str(args.grid), "--format", args.format,
               "--files", str(args.files), *extra]  # fmt: skip
    if args.load_processes is not None:
        command += ["--load-processes", str(args.load_processes)]
    done = subprocess.run(command, env=_environment(), capture_output=True, text=True,
                          timeout=args.timeout, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{role} {extra}: exit {done.returncode}: {done.stderr[-2000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(figures), flush=True)
    return figures


def run(args: argparse.Namespace) -> dict[str, Any]:
    args.work.mkdir(parents=True, exist_ok=True)
    files = make_dataset(args.models_dir, args.work / "dataset", copies=args.copies)
    listing = args.work / "files.json"
    listing.write_text(json.dumps([str(p) for p in files]))
    writers = args.writers or max(1, default_write_processes(1))
    batches: list[dict[str, Any]] = []
    for _ in range(args.rounds):
        for count in (0, writers):
            extra = ["--files-json", str(listing), "--write-processes", str(count)]
            batches.append(_child(args, "batch", extra))
    sample = next((args.work / "out").rglob(f"*.{OutputFormat.named(args.format).name}"))
    kept = args.work / f"sample{sample.suffix}"
    shutil.copyfile(sample, kept)
    alone = [
        _child(
            args,
            "writers",
            ["--way", way, "--write-processes", str(writers), "--sample", str(kept)],
        )
        for way in WAYS
    ]
    return {
        "host_cores": os.cpu_count(),
        "grid": args.grid,
        "format": args.format,
        "meshes": len(files),
        "writers": writers,
        "batch": batches,
        "batch_median": _medians(batches),
        "writers_alone": alone,
    }


def _medians(batches: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    keys = ("meshes_per_s", "batch_cpu_ms_per_mesh", "device_thread_cpu_ms_per_mesh")
    medians = {}
    for way in ("threads", "processes"):
        runs = [b for b in batches if b["way"] == way]
        medians[way] = {key: statistics.median(r[key] for r in runs) for key in keys}
    medians["processes_over_threads"] = {
        key: medians["processes"][key] / medians["threads"][key] for key in keys
    }
    return medians


def markdown(found: dict[str, Any]) -> str:
    median = found["batch_median"]
    lines = [
        f"Batch of {found['meshes']} meshes at {found['grid']}^3, --format {found['format']}, "
        f"{found['host_cores']} host cores, {found['writers']} writing processes "
        "(median of the rounds):",
        "",
        "| way | meshes/s | batch process CPU ms/mesh | device thread CPU ms/mesh |",
        "| --- | ---: | ---: | ---: |",
    ]
    for way in ("threads", "processes", "processes_over_threads"):
        row = median[way]
        lines.append(
            f"| {way} | {row['meshes_per_s']:.1f} | {row['batch_cpu_ms_per_mesh']:.3f} | "
            f"{row['device_thread_cpu_ms_per_mesh']:.3f} |"
        )
    lines += [
        "",
        f"Writers alone: one {found['grid']}^3 file written {found['writers']} at a time:",
        "",
        "| way | start s | files/s | parent CPU ms/file | readers forkable after |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for row in found["writers_alone"]:
        lines.append(
            f"| {row['way']} | {row['start_s']:.3f} | {row['files_per_s']:.1f} | "
            f"{row['parent_cpu_ms_per_file']:.3f} | {row['readers_forkable_after_start']} |"
        )
    return "\n".join(lines) + "\n"


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m voxelizer.benchmarks.writing")
    parser.add_argument("--models-dir", type=Path)
    parser.add_argument("--out", type=Path, help="folder for writing.json and writing.md")
    parser.add_argument("--work", type=Path, help="dataset and outputs (default: OUT/work)")
    parser.add_argument("--copies", type=int, default=32, help="24 files per copy")
    parser.add_argument("--grid", type=int, default=128)
    parser.add_argument("--format", default="npz")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--writers", type=int, default=0, help="0: the host's default")
    parser.add_argument("--files", type=int, default=512, help="files written per way alone")
    parser.add_argument(
        "--load-processes", type=int, default=None, help="reading processes (default: the batch's)"
    )
    parser.add_argument("--timeout", type=float, default=300, help="seconds per child")
    parser.add_argument("--child", choices=("batch", "writers"), help=argparse.SUPPRESS)
    parser.add_argument("--files-json", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--write-processes", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--way", choices=WAYS, help=argparse.SUPPRESS)
    parser.add_argument("--sample", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is None and (args.models_dir is None or args.out is None):
        parser.error("--models-dir and --out are required")
    if args.work is None and args.out is not None:
        args.work = args.out / "work"
    return args


def main(argv: list[str] | None = None) -> None:
    args = _arguments(argv)
    if args.child == "batch":
        print(json.dumps(batch_child(args)))
        return
    if args.child == "writers":
        print(json.dumps(writers_child(args)))
        return
    found = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "writing.json").write_text(json.dumps(found, indent=2))
    table = markdown(found)
    (args.out / "writing.md").write_text(table)
    print(table)
    shutil.rmtree(args.work / "out", ignore_errors=True)
    shutil.rmtree(args.work / "writers", ignore_errors=True)


if __name__ == "__main__":
    main()
