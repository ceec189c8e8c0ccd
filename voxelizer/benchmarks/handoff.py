"""What receiving prepared meshes from reading processes costs the batch's process: pickled
through the pipes against shared memory, side by side in one run.

    python -m voxelizer.benchmarks.handoff --models-dir ../shared/models --out /tmp/handoff

What is timed: `LoadProcesses` (voxelizer/batch/readers.py) reading `--meshes` files, the
mesh files of `--models-dir` over and over, prepared for a batch on `--grid` as
`voxelize DIR --grid G` prepares them (placed vertices, soup, thin check), with as many
requests ahead as a batch keeps (readers.read_ahead); each mesh is dropped
once received, as a batch drops it once written. No device is opened. For each count of
reading processes (--processes) and each way, in rounds that alternate the ways' order:
the CPU time of the threads receiving the meshes in this
process (LoadProcesses.receiving_cpu_seconds: reading the pipe, unpickling, rebuilding the
Mesh), all of this process's CPU time (the receiving threads and the main thread waiting),
both per mesh, the meshes per second over the wall clock (bounded by the reading
processes' parsing: the host's cores), and how many meshes came through shared memory.
The table keeps the least CPU time per mesh over the rounds and the most files/s; every
round is in the JSON file written to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import deque
from concurrent.futures import Future
from pathlib import Path

FORMATS = (".ply", ".stl", ".obj")
WAYS = ("pipe", "shared")


def mesh_files(models_dir: Path) -> list[Path]:
    files = sorted(p for p in models_dir.rglob("*") if p.suffix.lower() in FORMATS)
    if not files:
        raise SystemExit(f"no .ply, .stl or .obj file under {models_dir}")
    return files


def measure(way: str, files: list[Path], meshes: int, processes: int, grid: int) -> dict:
    """One way's figures: `meshes` meshes received from `processes` reading processes."""
    from voxelizer.batch.readers import LoadProcesses, read_ahead
    from voxelizer.options import Options

    options = Options.create(grid)
    readers = LoadProcesses(processes, shared_memory=way == "shared")
    try:
        if not readers.wait_started(120):
            raise SystemExit("the reading processes did not start")
        window = read_ahead(0, processes)

        def run(count: int) -> None:
            pending: deque[Future] = deque()
            for index in range(count):
                pending.append(readers.submit(files[index % len(files)], options))
                if len(pending) >= window:
                    pending.popleft().result(timeout=120)  # received, then dropped
            while pending:
                pending.popleft().result(timeout=120)

        run(2 * processes)  # the files in the page cache, each process's first mesh
        cpu, shared = readers.receiving_cpu_seconds(), readers.shared_replies()
        wall, process_cpu = time.perf_counter(), time.process_time()
        run(meshes)
        wall, process_cpu = time.perf_counter() - wall, time.process_time() - process_cpu
        cpu, shared = readers.receiving_cpu_seconds() - cpu, readers.shared_replies() - shared
    finally:
        readers.close()
    return {
        "way": way,
        "meshes": meshes,
        "processes": processes,
        "receiving_cpu_ms_per_mesh": 1e3 * cpu / meshes,
        "process_cpu_ms_per_mesh": 1e3 * process_cpu / meshes,
        "files_per_s": meshes / wall,
        "through_shared_memory": shared,
    }


def table(rounds: list[dict]) -> str:
    """Per count of processes and way: the round of least receiving CPU per mesh, and the
    most files/s of any round."""
    rows = [
        "| processes | way | meshes (through shared memory) | receiving CPU ms/mesh "
        "| process CPU ms/mesh | files/s |",
        "| ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for processes in sorted({r["processes"] for r in rounds}):
        for way in WAYS:
            mine = [r for r in rounds if r["processes"] == processes and r["way"] == way]
            row = min(mine, key=lambda r: r["receiving_cpu_ms_per_mesh"])
            rows.append(
                f"| {processes} | {way} | {row['meshes']} ({row['through_shared_memory']}) | "
                f"{row['receiving_cpu_ms_per_mesh']:.3f} | {row['process_cpu_ms_per_mesh']:.3f} "
                f"| {max(r['files_per_s'] for r in mine):.0f} |"
            )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models-dir", type=Path, required=True, help="mesh files to read")
    parser.add_argument("--out", type=Path, required=True, help="folder for handoff.json")
    parser.add_argument("--meshes", type=int, default=300, help="meshes timed per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--grid", type=int, default=128)
    parser.add_argument(
        "--processes",
        type=int,
        nargs="+",
        default=None,
        help="counts of reading processes to time (default: as a batch of one worker on this "
        "host, at least 2, and 8, the default's cap while meshes crossed the pipes)",
    )
    args = parser.parse_args(argv)
    from voxelizer.batch.engine import default_load_processes
    from voxelizer.batch.shared_meshes import shared_memory_available

    if not shared_memory_available():
        raise SystemExit("this system has no memfd_create: meshes cross the pipes only")
    default = max(2, default_load_processes(1))
    counts = args.processes or sorted({default, 8} if default > 8 else {default})
    files = mesh_files(args.models_dir)
    rounds = []
    for index in range(args.rounds):
        for processes in counts:
            for way in WAYS if index % 2 == 0 else WAYS[::-1]:
                rounds.append(measure(way, files, args.meshes, processes, args.grid))
                print(json.dumps(rounds[-1]), file=sys.stderr)
    print(
        f"{len(files)} files from {args.models_dir}, grid {args.grid}, {os.cpu_count()} cores, "
        f"{args.meshes} meshes a round, {args.rounds} rounds"
    )
    print(table(rounds))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "handoff.json").write_text(
        json.dumps({"files": [str(f) for f in files], "rounds": rounds}, indent=2)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
