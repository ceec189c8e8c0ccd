"""The batch command's start-up and exit, beside their floors, for one tree or two.

    python -m voxelizer.benchmarks.startup DATASET_DIR --out DIR [--grid 128] [--rounds N]
        [--before TREE] [--device SEL | --devices LIST] [--jobs N] [--timeout SECONDS]
        [--timeline]

Each round runs, as processes of their own (the trees taking turns round by round, each
tree's voxelizer first on the path, as the datasets benchmark runs a tree):

- the batch command, `python -m voxelizer DATASET_DIR --out-dir OUT --format npz --grid N
  --log LOG` (with `--devices LIST` and `--jobs N` where given: several workers) into a fresh
  folder, whole process. While it runs, the log is watched (it
  gets one line per mesh, written once the mesh's file is in place): `first_output_s` is
  when its first line appeared, `last_output_s` when its last did, `exit_s` the rest, from
  the last line to the end of the process (helpers stopped, the device closed, the exit);
- its floors: `python -c pass` (`python_s`), `python -c "import numpy"` (`numpy_s`),
  `python -c "import voxelizer.cli"` (`import_cli_s`: what the command imports before it
  looks at a path) and the device's opening alone (`device_open_s`: `Voxelizer()` timed
  inside a process, its imports excluded).

With --timeline, each round also runs the batch command once more with `-vv` (not timed
above: -vv logs a line per mesh) and keeps its start-up timeline, the `voxelize: 0.412 s:
device open` lines (seconds since the process started; a tree that logs none has none).

Before the rounds, every measurement runs once unrecorded (each tree's modules compiled,
the driver's caches warm). The medians of the rounds go to DIR/startup.md (a table, the
trees side by side with this tree's figures over TREE's, `after_over_before`) and
DIR/startup.json (every round's figures too); the commands' outputs, under DIR/work while
the rounds run, are removed at the end (kept where a command failed). A tree is a folder
holding a `voxelizer` package (`git archive COMMIT voxelizer | tar -x -C TREE`).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import voxelizer
from voxelizer.benchmarks.datasets import batch_command, tree_environment

POLL_SECONDS = 0.002  # how often the log is looked at while the command runs
DEVICE_OPEN = """
import json, time
from voxelizer import Voxelizer
started = time.perf_counter()
opened = Voxelizer({device!r})
seconds = time.perf_counter() - started
print(json.dumps({{"seconds": seconds, "device": opened.device_name}}))
"""
IMPORT_CLI = "import voxelizer.cli; print(voxelizer.cli.__file__)"
FLOORS = ("python_s", "numpy_s", "import_cli_s", "device_open_s")
COMMAND = ("whole_s", "first_output_s", "last_output_s", "exit_s", "meshes_per_s")
TIMELINE_LINE = re.compile(r"^voxelize: (\d+\.\d+) s: ([^,\n]+)", re.MULTILINE)


def _timed(command: list[str], env: dict[str, str], cwd: Path, timeout: float) -> tuple[float, str]:
    """Seconds from the start of `command` to its end, and its stdout; SystemExit if it fails."""
    started = time.perf_counter()
    done = subprocess.run(
        command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return seconds, done.stdout


def floors(tree: Path, work: Path, device: str | None, timeout: float) -> dict[str, Any]:
    """The command's floors for `tree`: a bare Python, numpy's import, the command's imports,
    and the device's opening alone (each process in `work`, where no other voxelizer is
    found before the tree's)."""
    env = tree_environment(tree)
    work.mkdir(parents=True, exist_ok=True)
    python = [sys.executable, "-c"]
    found: dict[str, Any] = {
        "python_s": _timed([*python, "pass"], env, work, timeout)[0],
        "numpy_s": _timed([*python, "import numpy"], env, work, timeout)[0],
    }
    found["import_cli_s"], printed = _timed([*python, IMPORT_CLI], env, work, timeout)
    imported = Path(printed.strip()).resolve()
    if not imported.is_relative_to(tree.resolve()):
        raise SystemExit(f"{tree}: the process imported {imported}, not this tree's")
    _, printed = _timed([*python, DEVICE_OPEN.format(device=device)], env, work, timeout)
    opened = json.loads(printed.strip().splitlines()[-1])
    found["device_open_s"], found["device"] = opened["seconds"], opened["device"]
    return found


def batch(
    tree: Path,
    dataset: Path,
    work: Path,
    *,
    grid: int,
    device: str | None,
    timeout: float,
    timeline: bool = False,
    workers: list[str] | None = None,
) -> dict[str, Any]:
    """One run of the batch command with `tree`'s voxelizer: whole process, and when the
    log's first and last lines appeared; with `timeline`, run with -vv, its timeline too
    (`timeline`: seconds since the process started, by milestone). `workers`: the options
    that ask for several workers (`--devices`, `--jobs`), added to the command."""
    out = work / "out"
    shutil.rmtree(out, ignore_errors=True)
    log = work / "batch.log"
    log.unlink(missing_ok=True)
    command = batch_command(device) + [str(dataset), "--out-dir", str(out), "--format", "npz"]
    command += ["--grid", str(grid), "--log", str(log), *(["-vv"] if timeline else [])]
    command += workers or []
    errors = work / "batch.stderr"  # a file, not a pipe: a full pipe would stop the command
    with errors.open("w") as stderr:
        started = time.perf_counter()
        process = subprocess.Popen(
            command,
            env=tree_environment(tree),
            cwd=work,  # (not a folder holding another voxelizer)
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        first, last, whole = _watched(log, process, started, timeout)
    lines = log.read_text().splitlines() if log.exists() else []
    statuses = [json.loads(line)["status"] for line in lines]
    if process.returncode not in (0, 1) or first is None or last is None:
        tail = errors.read_text()[-2000:]
        raise SystemExit(f"{' '.join(command)}: exit {process.returncode}\n{tail}")
    done = statuses.count("done")
    found = TIMELINE_LINE.findall(errors.read_text()) if timeline else []
    return {
        "timeline": {milestone: float(seconds) for seconds, milestone in found},
        "whole_s": whole,
        "first_output_s": first,
        "last_output_s": last,
        "exit_s": whole - last,
        "meshes_per_s": done / whole,
        "meshes": len(statuses),
        "done": done,
    }


def _watched(
    log: Path, process: subprocess.Popen[bytes], started: float, timeout: float
) -> tuple[float | None, float | None, float]:
    """Seconds from `started` to the first and to the last growth of `log` seen while
    `process` runs (None if none was; one after the last look counts at the end), and to
    the end of `process`; the process killed past `timeout` (SystemExit)."""
    size, first, last = 0, None, None
    while process.poll() is None:
        if time.perf_counter() - started > timeout:
            process.kill()
            process.wait()
            raise SystemExit(f"{process.args!r}: still running after {timeout:.0f} s")
        grown = log.stat().st_size if log.exists() else 0
        if grown != size:
            size, last = grown, time.perf_counter() - started
            first = last if first is None else first
        time.sleep(POLL_SECONDS)
    whole = time.perf_counter() - started
    if log.exists() and log.stat().st_size != size:  # lines after the last look
        last = whole
        first = whole if first is None else first
    return first, last, whole


def _medians(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [key for key in (*COMMAND, *FLOORS) if key in rounds[0]]
    found: dict[str, Any] = {key: statistics.median(one[key] for one in rounds) for key in keys}
    found.update(device=rounds[0]["device"], meshes=rounds[0]["meshes"], done=rounds[0]["done"])
    milestones = {name: None for one in rounds for name in one["timeline"]}  # (in order)
    found["timeline"] = {
        name: statistics.median(one["timeline"][name] for one in rounds if name in one["timeline"])
        for name in milestones
    }
    return found


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every tree's rounds, taking turns, after one unrecorded run of each; their medians."""
    trees = {"after": Path(voxelizer.__file__).resolve().parents[1]}
    if args.before is not None:
        trees = {"before": args.before.resolve(), **trees}
    rounds: dict[str, list[dict[str, Any]]] = {label: [] for label in trees}
    workers = [*(["--devices", args.devices] if args.devices else [])]
    workers += ["--jobs", str(args.jobs)] if args.jobs is not None else []
    options = {"grid": args.grid, "device": args.device, "timeout": args.timeout}
    options |= {"workers": workers}
    floor_device = args.devices.split(",")[0].strip() if args.devices else args.device
    for index in range(args.rounds + 1):  # the first one warms up
        for label, tree in trees.items():
            work = args.out / "work" / label
            figures = floors(tree, work, floor_device, args.timeout)
            figures |= batch(tree, args.dataset, work, **options)
            if args.timeline:
                marked = batch(tree, args.dataset, work, **options, timeline=True)
                figures["timeline"] = marked["timeline"]
            if index > 0:
                rounds[label].append(figures)
            print(
                f"round {index or 'warm-up'}, {label}: {figures['whole_s']:.2f} s", file=sys.stderr
            )
    medians = {label: _medians(found) for label, found in rounds.items()}
    result: dict[str, Any] = {
        "dataset": str(args.dataset),
        "grid": args.grid,
        "workers": " ".join(workers),
        "rounds": args.rounds,
        "trees": {label: str(tree) for label, tree in trees.items()},
        "median": medians,
        "raw": rounds,
    }
    if "before" in medians:
        before, after = medians["before"], medians["after"]
        result["after_over_before"] = {
            key: after[key] / before[key] for key in (*COMMAND, *FLOORS) if before.get(key)
        }
    return result


ROWS = (
    ("whole_s", "batch command, whole process (s)"),
    ("first_output_s", "its first output written (s)"),
    ("last_output_s", "its last output written (s)"),
    ("exit_s", "from the last output to the end of the process (s)"),
    ("meshes_per_s", "meshes/s, whole process"),
    ("python_s", "floor: `python -c pass` (s)"),
    ("numpy_s", "floor: `python -c 'import numpy'` (s)"),
    ("import_cli_s", "floor: `python -c 'import voxelizer.cli'` (s)"),
    ("device_open_s", "floor: the device's opening alone, `Voxelizer()` (s)"),
)


def markdown(result: dict[str, Any]) -> str:
    """The medians as a table: one column per tree (and this tree's over TREE's)."""
    labels = list(result["median"])
    ratio = "after_over_before" in result
    first = result["median"][labels[-1]]
    workers = f" {result['workers']}" if result.get("workers") else ""
    lines = [
        f"The batch command over {first['meshes']} files of {result['dataset']} "
        f"(`--format npz --grid {result['grid']}{workers}`, {first['done']} done) on "
        f"{first['device']}, median of {result['rounds']} round(s).",
        "",
        "| measured | " + " | ".join(labels) + (" | after / before |" if ratio else " |"),
        "| --- |" + " ---: |" * (len(labels) + ratio),
    ]
    for key, title in ROWS:
        cells = [f"{result['median'][label][key]:.3f}" for label in labels]
        if ratio:
            cells.append(f"{result['after_over_before'].get(key, float('nan')):.2f}")
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    milestones = {name: None for label in labels for name in result["median"][label]["timeline"]}
    if milestones:
        lines += [
            "",
            "The command's -vv timeline (a run of its own each round; medians, seconds since "
            "the process started):",
            "",
            "| milestone | " + " | ".join(labels) + " |",
            "| --- |" + " ---: |" * len(labels),
        ]
        for name in milestones:
            cells = [_seconds(result["median"][label]["timeline"].get(name)) for label in labels]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m voxelizer.benchmarks.startup", description=__doc__.split("\n")[0]
    )
    parser.add_argument("dataset", type=Path, help="a folder of mesh files")
    parser.add_argument("--out", type=Path, required=True, help="startup.md and .json go here")
    parser.add_argument("--grid", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", type=Path, default=None, help="another tree to compare")
    parser.add_argument("--device", default=None, help="the device (default: the first)")
    parser.add_argument(
        "--devices", default=None, metavar="LIST",
        help="the command's --devices (several workers, e.g. 0,1); the floors open the first",
    )  # fmt: skip
    parser.add_argument(
        "--jobs", type=int, default=None, metavar="N",
        help="the command's --jobs (workers; with one device, N workers on it)",
    )  # fmt: skip
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds one process may take at most"
    )
    parser.add_argument(
        "--timeline",
        action="store_true",
        help="also run the command with -vv each round and keep its start-up timeline",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.device is not None and args.devices is not None:
        parser.error("--device and --devices exclude each other")
    if args.jobs is not None and args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.before is not None and not (args.before / "voxelizer").is_dir():
        parser.error(f"--before {args.before}: no voxelizer package there")
    args.dataset, args.out = args.dataset.resolve(), args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    result = measure(args)
    shutil.rmtree(args.out / "work")  # the commands' outputs (kept where a run failed)
    text = markdown(result)
    print(text)
    (args.out / "startup.md").write_text(text)
    (args.out / "startup.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
