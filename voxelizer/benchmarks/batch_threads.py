"""The CPU time of a batch's threads per mesh, by kind of thread: what each kind may take
of the GIL that the device's thread needs between its Vulkan calls.

    python -m voxelizer.benchmarks.batch_threads --models-dir ../shared/models --out /tmp/threads

What is timed: `voxelize_many` (one worker, on the default device) over `--meshes` files,
the mesh files of `--models-dir` over and over, on `--grid`, each result written as
`--format` by `--write-processes` writing processes, the meshes read by `--load-processes`
reading processes (by default as many as `voxelize DIR --out-dir OUT --format npz --grid G`
starts on this host, and at least one of each). Each measurement runs in a new Python (its
own helpers and threads). For each thread of the batch's process, its CPU time (the
kernel's clock of the thread) from the first result to the last, summed by kind (the
thread's name without its number: MainThread is the device's thread; voxelizer-reader and
voxelizer-writer receive meshes from and hand results to the helpers; voxelizer-write and
voxelizer-load are the writer and loader threads), divided by the meshes between; and the
meshes per second over the same span. A thread's CPU time bounds what it held of the GIL
from above (it includes copies and system calls made without it). With `--src`, the same
measurement runs with each source tree given (a folder holding the package `voxelizer`, say
an older checkout) too, side by side, in rounds that alternate their order. The table keeps
the median over the rounds; every round is in the JSON file written to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

FORMATS = (".ply", ".stl", ".obj")
THIS = "this"  # the source tree of this module


def mesh_files(models_dir: Path) -> list[Path]:
    files = sorted(p for p in models_dir.rglob("*") if p.suffix.lower() in FORMATS)
    if not files:
        raise SystemExit(f"no .ply, .stl or .obj file under {models_dir}")
    return files


def thread_kind(name: str) -> str:
    """A thread's name without its number: voxelizer-writer-3 and voxelizer-write_0 are
    voxelizer-writer and voxelizer-write."""
    return name.rstrip("0123456789").rstrip("-_") or name


def thread_cpu() -> dict[int, tuple[str, float]]:
    """Each running thread of this process: its name and CPU seconds so far."""
    seconds = {}
    for thread in threading.enumerate():
        if thread.ident is None:
            continue
        try:
            clock = time.pthread_getcpuclockid(thread.ident)
            seconds[thread.ident] = (thread.name, time.clock_gettime(clock))
        except (OSError, ProcessLookupError):  # ended meanwhile
            continue
    return seconds


def measure(args: argparse.Namespace) -> dict:
    """One measurement, in this process: CPU seconds per mesh by kind of thread."""
    import voxelizer
    from voxelizer import voxelize_many

    files = mesh_files(args.models_dir)
    inputs = [files[index % len(files)] for index in range(args.meshes)]
    with tempfile.TemporaryDirectory() as out:
        # Each input its own name: the outputs do not collide.
        folder = Path(out) / "in"
        folder.mkdir()
        named = []
        for index, path in enumerate(inputs):
            link = folder / f"{index:06d}{path.suffix.lower()}"
            link.symlink_to(path.resolve())
            named.append(link)
        results = voxelize_many(named, grid=args.grid, out_dir=Path(out) / "out",
                                format=args.format, write_processes=args.write_processes,
                                load_processes=args.load_processes)  # fmt: skip
        first = next(results)
        start, started = thread_cpu(), time.perf_counter()
        done, ok = 1, int(first.ok)
        for result in results:
            done += 1
            ok += int(result.ok)
            if done == args.meshes:  # the threads still run: measured before they end
                end, ended = thread_cpu(), time.perf_counter()
    per_kind: dict[str, float] = defaultdict(float)
    for ident, (name, seconds) in end.items():
        per_kind[thread_kind(name)] += seconds - start.get(ident, (name, 0.0))[1]
    spanned = args.meshes - 1
    return {
        "voxelizer_file": voxelizer.__file__,  # the source tree timed
        "meshes": args.meshes,
        "ok": ok,
        "meshes_per_second": spanned / (ended - started),
        "cpu_us_per_mesh": {k: 1e6 * v / spanned for k, v in sorted(per_kind.items())},
    }


CHILD_OPTIONS = ("models_dir", "meshes", "grid", "format", "write_processes", "load_processes")


def run_child(
    source: str,
    args: argparse.Namespace,
    *,
    script: str = __file__,
    options: tuple[str, ...] = CHILD_OPTIONS,
) -> dict:
    """One measurement in a new Python, with the package of `source` (THIS: this one):
    `script` (this file, or another benchmark's made the same way) run with `--child` and
    the `options` of `args`."""
    # The script run as it is (not as a module of `source`'s package, which may not have
    # it), with neither its folder nor the current one on the module path (a package there
    # would hide `source`'s).
    program = (
        "import runpy, sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
        "sys.argv[0] = {!r}; runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    command = [sys.executable, "-c", program.format(str(Path(script).resolve())), "--child"]
    for name in options:
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    env = dict(os.environ)
    root = Path(__file__).resolve().parents[2] if source == THIS else Path(source).resolve()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.timeout)
    if done.returncode != 0:
        raise SystemExit(f"{source}: the measurement failed:\n{done.stderr[-2000:]}")
    figures: dict = json.loads(done.stdout.strip().splitlines()[-1])
    figures["source"] = source
    return figures


def table(rounds: list[dict], sources: list[str]) -> str:
    """Medians over the rounds: one column per source, one row per kind of thread."""
    kinds = sorted({kind for r in rounds for kind in r["cpu_us_per_mesh"]})
    rows = ["| CPU µs per mesh | " + " | ".join(sources) + " |",
            "| --- |" + " ---: |" * len(sources)]  # fmt: skip
    for kind in [*kinds, "meshes/s"]:
        cells = []
        for source in sources:
            mine = [r for r in rounds if r["source"] == source]
            if kind == "meshes/s":
                values = [r["meshes_per_second"] for r in mine]
            else:
                values = [r["cpu_us_per_mesh"].get(kind, 0.0) for r in mine]
            cells.append(f"{statistics.median(values):.0f}")
        rows.append(f"| {kind} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def rounds_parser(
    description: str, *, json_name: str, meshes: int, grid: int
) -> argparse.ArgumentParser:
    """The options every per-thread benchmark shares (this one's and pool_loop's): the meshes,
    the grid and format, the rounds and the trees; a benchmark adds its own."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--models-dir", type=Path, required=True, help="mesh files to read")
    parser.add_argument("--out", type=Path, help=f"folder for {json_name}")
    parser.add_argument("--meshes", type=int, default=meshes, help="meshes timed per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--grid", type=int, default=grid)
    parser.add_argument("--format", default="npz")
    parser.add_argument("--src", nargs="*", default=[], help="other source trees to time too")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a round may take")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return parser


def interleaved_rounds(
    args: argparse.Namespace, run: Callable[[str, argparse.Namespace], dict]
) -> tuple[list[str], list[dict]]:
    """(the trees, every round's measurement): this tree and those of --src in turn, each
    round's order the reverse of the last's, each measurement printed to stderr as it ends."""
    sources = [THIS, *args.src]
    rounds = []
    for index in range(args.rounds):
        for source in sources if index % 2 == 0 else sources[::-1]:
            rounds.append(run(source, args))
            print(json.dumps(rounds[-1]), file=sys.stderr)
    return sources, rounds


def write_rounds(rounds: list[dict], sources: list[str], path: Path) -> None:
    """The table printed, every round written to `path` (JSON)."""
    print(table(rounds, sources))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rounds": rounds}, indent=2))


def main(argv: list[str] | None = None) -> int:
    parser = rounds_parser(
        __doc__.split("\n\n")[0], json_name="batch_threads.json", meshes=300, grid=128
    )
    parser.add_argument(
        "--write-processes",
        type=int,
        default=None,
        help="default: as the command on this host, at least 1",
    )
    parser.add_argument(
        "--load-processes",
        type=int,
        default=None,
        help="default: as the command on this host, at least 1",
    )
    args = parser.parse_args(argv)
    if args.meshes < 2:
        parser.error("--meshes: at least 2 (the span is from the first result to the last)")
    if args.write_processes is None:
        from voxelizer.batch.write_processes import default_write_processes

        args.write_processes = max(1, default_write_processes(1, args.grid))
    if args.load_processes is None:
        from voxelizer.batch.engine import default_load_processes

        args.load_processes = max(1, default_load_processes(1))
    if args.child:
        print(json.dumps(measure(args)))
        return 0
    if args.out is None:
        parser.error("--out is required")
    sources, rounds = interleaved_rounds(args, run_child)
    print(
        f"{len(mesh_files(args.models_dir))} files from {args.models_dir}, grid {args.grid}, "
        f"--format {args.format}, {args.write_processes} writing and {args.load_processes} "
        f"reading processes, {os.cpu_count()} cores, {args.meshes} meshes a round, "
        f"{args.rounds} rounds"
    )
    write_rounds(rounds, sources, args.out / "batch_threads.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
