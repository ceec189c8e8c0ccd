"""Writing a batch's output files: writer threads against writing processes, side by side.

    python -m voxelizer.benchmarks.writing --models-dir DIR --out DIR [--work DIR]
        [--copies 32] [--grid 128] [--format npz] [--rounds 3] [--writers N] [--files 512]
        [--load-processes N] [--before TREE]

`batch`: voxelize_many over make_dataset's files (24 x --copies; voxelizer/benchmarks/
meshes.py) writing one --format file per mesh, each run in a fresh process set up as the
command sets itself up (the writing and reading processes forked before the device opens,
then one warm-up batch over the first 24 files), with `write_processes=0` (the writer
threads write) and `write_processes=N` (N writing processes: --writers, default the
host's default_write_processes, at least 1; the reading processes as the batch's default,
or --load-processes), the two taking turns round by round. Each run
gives meshes/s over the whole dataset (reading, voxelizing, writing: the batch's own
pace), the batch process's CPU per mesh (getrusage: every thread of it, not its helpers),
its device thread's (the caller's: one worker runs in it), its other Python threads'
(`threads_cpu_ms_per_mesh`: the writer threads, the threads serving the writing and reading
processes, from /proc/self/task/TID/schedstat; on lavapipe the batch process's figure also
holds the driver's threads, which voxelize, and this one does not), and its failures (0).

`--before TREE` runs the batch rounds for a second source tree too (a folder holding a
`voxelizer` package, as `git archive COMMIT voxelizer | tar -x -C TREE` makes), this tree's
and TREE's taking turns way by way within each round, each run this script's child with the
tree first on the path; `after_over_before` gives this tree's figures over TREE's.

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
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import voxelizer
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


def _environment(tree: Path | None = None) -> dict[str, str]:
    """Child processes import the voxelizer of `tree` (default: the one this process
    imported)."""
    first = str(tree.resolve()) if tree is not None else _this_tree()
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=first if not path else f"{first}{os.pathsep}{path}")


def _this_tree() -> str:
    return str(Path(voxelizer.__file__).resolve().parents[1])


def _threads_cpu_seconds(but: int) -> dict[int, float]:
    """The CPU seconds of each Python thread of this process but the one of native id
    `but` (schedstat: nanoseconds on a CPU)."""
    found = {}
    for thread in threading.enumerate():
        tid = thread.native_id
        if tid is None or tid == but:
            continue
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as stat:
                found[tid] = int(stat.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):  # ended, or no such file here
            continue
    return found


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
    meshes, failed, others = len(files), 0, {}
    device = threading.get_native_id()
    before = _threads_cpu_seconds(but=device)
    cpu, thread_cpu, started = _cpu_seconds(), time.thread_time(), time.perf_counter()
    for number, result in enumerate(voxelize_many_here(files, out, keywords), 1):
        failed += not result.ok
        if number == meshes:  # the batch's threads as they end it (before they are ended)
            others = _threads_cpu_seconds(but=device)
    seconds = time.perf_counter() - started
    threads_cpu = sum(cpu - before.get(tid, 0.0) for tid, cpu in others.items())
    return {
        "tree": _this_tree(),
        "way": "processes" if writers else "threads",
        "write_processes": writers,
        "load_processes": readers,
        "meshes": meshes,
        "failed": failed,
        "meshes_per_s": meshes / seconds,
        "batch_cpu_ms_per_mesh": (_cpu_seconds() - cpu) * 1e3 / meshes,
        "device_thread_cpu_ms_per_mesh": (time.thread_time() - thread_cpu) * 1e3 / meshes,
        "threads_cpu_ms_per_mesh": threads_cpu * 1e3 / meshes,
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
    from voxelizer.batch.helper_processes import fork_allowed

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


def _child(
    args: argparse.Namespace, role: str, extra: list[str], tree: Path | None = None
) -> dict[str, Any]:
    """This script's `role` in a fresh process, `tree`'s voxelizer first on its path (and on
    its helpers': _environment), by default this process's."""
    argv = [__file__, "--child", role, "--work", str(args.work), "--grid", str(args.grid),
            "--format", args.format, "--files", str(args.files), *extra]  # fmt: skip
    if args.load_processes is not None:
        argv += ["--load-processes", str(args.load_processes)]
    first = str(tree.resolve()) if tree is not None else _this_tree()
    code = (
        f"import runpy, sys; sys.path.insert(0, {first!r}); sys.argv = {argv!r}; "
        f"runpy.run_path({__file__!r}, run_name='__main__')"
    )
    done = subprocess.run([sys.executable, "-c", code], env=_environment(tree), cwd=args.work,
                          capture_output=True, text=True, timeout=args.timeout, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{role} {extra}: exit {done.returncode}: {done.stderr[-2000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if Path(figures.get("tree", first)).resolve() != Path(first).resolve():
        raise RuntimeError(f"{role}: the child imported {figures['tree']}, not {first}")
    figures["tree"] = "before" if tree is not None else "after"
    print(json.dumps(figures), flush=True)
    return figures


def run(args: argparse.Namespace) -> dict[str, Any]:
    args.work.mkdir(parents=True, exist_ok=True)
    files = make_dataset(args.models_dir, args.work / "dataset", copies=args.copies)
    listing = args.work / "files.json"
    listing.write_text(json.dumps([str(p) for p in files]))
    writers = args.writers or max(1, default_write_processes(1))
    batches: list[dict[str, Any]] = []
    trees = [None] if args.before is None else [None, args.before]
    for _ in range(args.rounds):
        for count in (0, writers):
            extra = ["--files-json", str(listing), "--write-processes", str(count)]
            for tree in trees:
                batches.append(_child(args, "batch", extra, tree))
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
        "before": None if args.before is None else str(args.before),
        "batch": batches,
        "batch_median": _medians([b for b in batches if b["tree"] == "after"]),
        "before_median": (
            None if args.before is None else _medians([b for b in batches if b["tree"] == "before"])
        ),
        "writers_alone": alone,
    }


KEYS = ("meshes_per_s", "batch_cpu_ms_per_mesh", "device_thread_cpu_ms_per_mesh",
        "threads_cpu_ms_per_mesh")  # fmt: skip


def _medians(batches: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    keys = KEYS
    medians = {}
    for way in ("threads", "processes"):
        runs = [b for b in batches if b["way"] == way]
        medians[way] = {key: statistics.median(r[key] for r in runs) for key in keys}
    medians["processes_over_threads"] = {
        key: medians["processes"][key] / medians["threads"][key] for key in keys
    }
    return medians


def markdown(found: dict[str, Any]) -> str:
    lines = [
        f"Batch of {found['meshes']} meshes at {found['grid']}^3, --format {found['format']}, "
        f"{found['host_cores']} host cores, {found['writers']} writing processes "
        "(median of the rounds; threads: the batch's Python threads but the device's):",
        "",
        "| tree | way | meshes/s | batch process CPU ms/mesh | device thread CPU ms/mesh "
        "| threads CPU ms/mesh |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    tables = [("this", found["batch_median"])]
    if found.get("before_median") is not None:
        tables.append(("before", found["before_median"]))
    for tree, median in tables:
        for way in ("threads", "processes", "processes_over_threads"):
            lines.append(_row(tree, way, median[way]))
    if len(tables) == 2:
        for way in ("threads", "processes"):
            after, before = tables[0][1][way], tables[1][1][way]
            ratios = {key: after[key] / before[key] if before[key] else float("nan")
                      for key in KEYS}  # fmt: skip
            lines.append(_row("this/before", way, ratios))
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


def _row(tree: str, way: str, row: dict[str, float]) -> str:
    return (
        f"| {tree} | {way} | {row['meshes_per_s']:.3f} | {row['batch_cpu_ms_per_mesh']:.3f} | "
        f"{row['device_thread_cpu_ms_per_mesh']:.3f} | {row['threads_cpu_ms_per_mesh']:.3f} |"
    )


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
    parser.add_argument(
        "--before", type=Path, help="a second source tree (holding voxelizer/) to compare"
    )
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
