"""Datasets: many meshes, the ways a user can voxelize them, side by side in one run.

    python -m voxelizer.benchmarks.datasets --models-dir DIR --work DIR [--grids 64 128]
        [--rounds 2] [--jobs N] [--device SEL] [--json FILE]

The dataset is make_dataset's (voxelizer/benchmarks/meshes.py: 8 bases x PLY/STL/OBJ, 24
files of 5k-100k triangles, turned, stretched and moved at random), written once to --work.
For each grid, each way runs once per round, the ways interleaved so that a busy machine
slows them alike; the best and the median round of each are reported (meshes/s over the
whole dataset), and the ratios of both (`--ways` picks some ways only):

- `loop`: one warm Voxelizer in this process, `voxelize(load_mesh(path), grid)` per file,
  results kept in memory (an SVO each): the Python loop a user writes today.
- `many`: `voxelize_many(files, grid=grid)` in this process, results in memory: the same
  device with the next meshes read while one is voxelized.
- `loop_npz`, `many_npz`: the same two writing one .npz file per mesh.
- `cli_batch`: one `voxelize DIR --out-dir OUT --format npz` process for the whole dataset,
  process start included (with `--jobs N`, also `cli_batch_jobs`: N worker processes).
- `cli_per_file`: one `voxelize FILE -o OUT.npz` process per file, as a shell loop runs it.
- `cli_batch_zarr` (and `cli_batch_jobs_zarr`): `cli_batch` writing one voxel shard store
  (`--format zarr`) instead of the .npz files; the ratio `cli_batch_zarr_over_cli_batch`.
- `cli_batch_devices` and `many_devices` (with `--devices LIST`, e.g. 0,1: a worker per
  GPU): `cli_batch` with `--devices LIST` and `many` with `devices=LIST`; the ratios over
  `cli_batch` and `many` (one device) say how the devices scale.

Every run starts from warm caches (one call per grid before the rounds). docs/benchmarks.md,
"Datasets", gives the figures.

Each grid's figures stand beside their limits (`ceilings`, printed and in the JSON):

- `parse_files_per_s`: the tree's own reader (`load_mesh`) over the same files in a pool of
  one process per core (`--parse-processes`), each set up as the batch's reading processes
  are, no device: the host's parse ceiling;
- `gpu_ms_per_mesh` and `gpu_meshes_per_s`: the GPU time of `many`'s meshes summed from
  their results' Vulkan timestamps (`Stats.gpu_ms`, setup to the end of the SVO build), per
  mesh, and the rate a device doing nothing else would reach (null where the device has no
  timestamps);
- `device_thread_cpu_ms_per_mesh`: the CPU time of the thread that drives the device in
  `many` (one device: the caller's thread runs the worker), per mesh (`time.thread_time`),
  and the rate that thread alone allows; `device_thread_other_wait_ms_per_mesh`: the rest of
  its wall-clock time beyond the GPU's (waiting for the GIL, for a mesh still loading, for a
  core); `device_thread_mesh_wait_ms_per_mesh`: the part of it spent waiting for meshes
  (for one still loading, or for the reading processes to start).

`--before TREE` compares two source trees in one run: TREE is a folder holding a
`voxelizer` package (`git archive COMMIT voxelizer | tar -x -C TREE`). Each tree's round
runs in a process of its own with the tree first on the path (its batch commands too), the
trees taking turns round by round; `after_over_before` gives this tree's rate over TREE's
for every way and ceiling. `--out DIR` writes DIR/datasets.json and DIR/datasets.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import voxelizer
from voxelizer import Voxelizer, voxelize_many
from voxelizer.benchmarks.meshes import make_dataset
from voxelizer.io import load_mesh


def _environment() -> dict[str, str]:
    """Child processes import the voxelizer this process imported."""
    tree = str(Path(voxelizer.__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=tree if not path else f"{tree}{os.pathsep}{path}")


def _command(device: str | None) -> list[str]:
    command = [sys.executable, "-m", "voxelizer", "--quiet", "--force"]
    return command + (["--device", device] if device is not None else [])


def _fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def ways(
    files: list[Path],
    dataset: Path,
    work: Path,
    grid: int,
    jobs: int,
    device: str | None,
    devices: str | None = None,
    figures: dict[str, list[float]] | None = None,
) -> dict[str, Callable[[], int]]:
    """Each way of voxelizing the dataset at `grid`: a callable that returns meshes done.
    `many` adds its summed GPU ms and its device thread's CPU ms per mesh to `figures`."""
    figures = (
        {"gpu_ms": [], "device_cpu_ms": [], "device_wait_ms": [], "mesh_wait_ms": []}
        if figures is None
        else figures
    )
    v = Voxelizer(device)
    env = _environment()

    def loop() -> int:
        for path in files:
            v.voxelize(load_mesh(path), grid)
        return len(files)

    def loop_npz() -> int:
        out = _fresh(work / "loop_npz")
        for number, path in enumerate(files):
            voxelizer.save(v.voxelize_dense(load_mesh(path), grid), out / f"{number}.npz")
        return len(files)

    def many() -> int:
        return _many(files, grid, device, figures)

    def many_npz() -> int:
        out = _fresh(work / "many_npz")
        run = voxelize_many(files, grid=grid, devices=device, out_dir=out, format="npz")
        return sum(r.ok for r in run)

    def cli_batch(worker_jobs: int = 1, format: str = "npz", on_devices: bool = False) -> int:
        out = work / f"cli_batch.{format}"
        shutil.rmtree(out, ignore_errors=True)
        command = _command(None if on_devices else device)
        command += [str(dataset), "--out-dir", str(out), "--grid", str(grid)]
        command += ["--format", format] + (["--jobs", str(worker_jobs)] if worker_jobs > 1 else [])
        command += ["--devices", str(devices)] if on_devices else []
        subprocess.run(command, env=env, check=True, capture_output=True, timeout=3600)
        if format == "zarr":
            return len(list((out / "voxels").glob("c.*")))
        return len(list(out.rglob("*.npz")))

    def cli_per_file() -> int:
        out = _fresh(work / "cli_per_file")
        for number, path in enumerate(files):
            command = _command(device) + [str(path), "--grid", str(grid)]
            command += ["-o", str(out / f"{number}.npz")]
            subprocess.run(command, env=env, check=True, capture_output=True, timeout=600)
        return len(list(out.glob("*.npz")))

    found: dict[str, Callable[[], int]] = {
        "loop": loop,
        "many": many,
        "loop_npz": loop_npz,
        "many_npz": many_npz,
        "cli_batch": cli_batch,
        "cli_per_file": cli_per_file,
    }
    found["cli_batch_zarr"] = lambda: cli_batch(format="zarr")
    if devices:
        found["cli_batch_devices"] = lambda: cli_batch(on_devices=True)
        found["many_devices"] = lambda: sum(
            r.ok for r in voxelize_many(files, grid=grid, devices=devices)
        )
    if jobs > 1:
        found["cli_batch_jobs"] = lambda: cli_batch(jobs)
        found["cli_batch_jobs_zarr"] = lambda: cli_batch(jobs, "zarr")
    _warm(v, files[0], work, grid, device, devices)
    return found


def _many(files: list[Path], grid: int, device: str | None, figures: dict[str, list[float]]) -> int:
    """The way `many`, adding its summed GPU ms and its device thread's (this thread's: one
    device's worker runs in the caller's thread) CPU ms per mesh to `figures`."""
    cpu_started, wall_started = time.thread_time(), time.perf_counter()
    done, gpu_ms, timed = 0, 0.0, True
    with _mesh_waits() as waited:
        for result in voxelize_many(files, grid=grid, devices=device):
            done += result.ok
            times = getattr(getattr(result.result, "stats", None), "gpu_ms", None)
            gpu_ms += sum(times.values()) if times else 0.0
            timed = timed and bool(times)
    cpu_ms = (time.thread_time() - cpu_started) * 1e3 / len(files)
    wall_ms = (time.perf_counter() - wall_started) * 1e3 / len(files)
    figures["device_cpu_ms"].append(cpu_ms)
    if waited:  # (a tree without the batch's reading processes: not measured)
        figures.setdefault("mesh_wait_ms", []).append(waited[0] * 1e3 / len(files))
    if timed:
        figures["gpu_ms"].append(gpu_ms / len(files))
        figures["device_wait_ms"].append(wall_ms - cpu_ms - gpu_ms / len(files))
    return done


@contextmanager
def _mesh_waits() -> Iterator[list[float]]:
    """[seconds] this thread (one device's worker runs in the caller's) spends, while the
    block runs, in the worker's waits for meshes: `loaded_from` (a mesh still loading) and
    the reading processes' `wait_started`); an empty list for a tree before those names."""
    try:
        from voxelizer.batch import readers, worker
    except ImportError:  # (b5a6e0a: batch.py, one module)
        yield []
        return

    waited = [0.0]
    device_thread = threading.get_ident()

    def timed(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def waiting(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != device_thread:
                return function(*args, **kwargs)
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                waited[0] += time.perf_counter() - started

        return waiting

    patched = [(worker, "loaded_from"), (readers.LoadProcesses, "wait_started")]
    originals = [(owner, name, getattr(owner, name)) for owner, name in patched]
    for owner, name, original in originals:
        setattr(owner, name, timed(original))
    try:
        yield waited
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


def _warm(
    v: Voxelizer, path: Path, work: Path, grid: int, device: str | None, devices: str | None
) -> None:
    """Kernels loaded and buffers grown in the in-process Voxelizers (the loop's, the shared
    ones of voxelize_many), the command's caches."""
    v.voxelize(load_mesh(path), grid)
    sum(r.ok for r in voxelize_many([path], grid=grid, devices=device))
    if devices:  # (this process's shared Voxelizer of the first of them)
        sum(r.ok for r in voxelize_many([path], grid=grid, devices=devices))
    subprocess.run(
        _command(device) + [str(path), "--grid", str(grid), "-o", str(work / "warm.npz")],
        env=_environment(),
        check=True,
        capture_output=True,
        timeout=600,
    )


# The ratios reported: (numerator way, denominator way), each of the best and the median rounds.
RATIOS = (
    ("cli_batch", "cli_per_file"),
    ("many", "loop"),
    ("many_npz", "loop_npz"),
    ("cli_batch", "many_npz"),
    ("cli_batch_zarr", "cli_batch"),
    ("cli_batch_jobs_zarr", "cli_batch_jobs"),
    ("many_devices", "many"),
    ("cli_batch_devices", "cli_batch"),
)


def parsed_triangles(path: str) -> int:
    """One file read by this tree's reader, in a parse pool's process: its triangle count
    (the mesh itself stays there: only the reading is timed)."""
    return len(load_mesh(path).faces)


def _started(index: int) -> int:
    return index


def _reading_process() -> None:
    """A parse pool's process set up as the batch's reading processes are (one core each,
    freed memory kept: voxelizer.batch.readers), where the tree has those settings."""
    from voxelizer import parallel

    parallel.use_threads(1)
    keep = getattr(parallel, "keep_freed_memory", None)  # (not in older trees)
    if keep is not None:
        keep()


class ParsePool:
    """One process per core reading files with load_mesh, no device: the host's parse
    ceiling. Made before this process opens a device (the processes fork where the platform
    can, so that a tree's functions reach them without an import path of their own)."""

    def __init__(self, processes: int):
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods else None)
        self.processes = processes
        self._pool = ProcessPoolExecutor(
            processes, mp_context=context, initializer=_reading_process
        )
        list(self._pool.map(_started, range(processes)))  # every process up before timing

    def rate(self, files: list[Path]) -> float:
        """Files read per second over all of `files`."""
        started = time.perf_counter()
        list(self._pool.map(parsed_triangles, [str(path) for path in files]))
        return len(files) / (time.perf_counter() - started)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def measure_rounds(
    files: list[Path],
    dataset: Path,
    work: Path,
    grid: int,
    rounds: int,
    jobs: int,
    device: str | None,
    only: set[str] | None = None,
    devices: str | None = None,
    parse: ParsePool | None = None,
) -> dict[str, Any]:
    """Every round's meshes/s of each way (interleaved), the parse pool's files/s and
    `many`'s device figures per round: the raw figures that `summary` reduces."""
    figures: dict[str, list[float]] = {
        "gpu_ms": [], "device_cpu_ms": [], "device_wait_ms": [], "mesh_wait_ms": [], "parse": []
    }  # fmt: skip
    chosen = ways(files, dataset, work, grid, jobs, device, devices, figures)
    if only is not None:
        chosen = {name: way for name, way in chosen.items() if name in only}
    rates: dict[str, list[float]] = {name: [] for name in chosen}
    for _ in range(rounds):
        for name, way in chosen.items():
            started = time.perf_counter()
            done = way()
            seconds = time.perf_counter() - started
            if done != len(files):
                raise RuntimeError(f"{name}: {done} of {len(files)} meshes done")
            rates[name].append(len(files) / seconds)
        if parse is not None:
            figures["parse"].append(parse.rate(files))
    return {"grid": grid, "meshes": len(files), "rates": rates, "figures": figures}


def summary(raw: dict[str, Any]) -> dict[str, Any]:
    """The best and median round of each way, the ratios between ways, and the ceilings."""
    rates, figures = raw["rates"], raw["figures"]
    best = {name: max(values) for name, values in rates.items() if values}
    median = {name: statistics.median(values) for name, values in rates.items() if values}
    ratios = {}
    for faster, slower in RATIOS:
        if faster in best and slower in best:
            ratios[f"{faster}_over_{slower}"] = {
                "best": round(best[faster] / best[slower], 2),
                "median": round(median[faster] / median[slower], 2),
            }
    return {
        "grid": raw["grid"],
        "meshes": raw["meshes"],
        "meshes_per_s": {name: round(rate, 2) for name, rate in best.items()},
        "median_meshes_per_s": {name: round(rate, 2) for name, rate in median.items()},
        "rounds": {name: [round(r, 2) for r in values] for name, values in rates.items()},
        "ratios": ratios,
        "ceilings": ceilings(figures),
    }


def ceilings(figures: dict[str, list[float]]) -> dict[str, float | None]:
    """The limits beside the rates (module docstring): the best parse round, the median
    rounds of the device figures; None where not measured."""

    def rounded(value: float | None, digits: int) -> float | None:
        return None if value is None else round(value, digits)

    def median(name: str) -> float | None:
        values = figures.get(name)
        return statistics.median(values) if values else None

    parse = max(figures["parse"]) if figures["parse"] else None
    gpu, cpu, wait = median("gpu_ms"), median("device_cpu_ms"), median("device_wait_ms")
    mesh_wait = median("mesh_wait_ms")
    return {
        "parse_files_per_s": rounded(parse, 1),
        "gpu_ms_per_mesh": rounded(gpu, 4),
        "gpu_meshes_per_s": rounded(1e3 / gpu if gpu else None, 1),
        "device_thread_cpu_ms_per_mesh": rounded(cpu, 3),
        "device_thread_meshes_per_s": rounded(1e3 / cpu if cpu else None, 1),
        # Neither running nor waiting for the GPU: for the GIL, for a mesh still loading,
        # for a core (wall - CPU - GPU time of `many`, per mesh).
        "device_thread_other_wait_ms_per_mesh": rounded(wait, 3),
        # Of its wall-clock time, waiting for a mesh still loading or for the reading
        # processes to start (`many`'s worker, per mesh).
        "device_thread_mesh_wait_ms_per_mesh": rounded(mesh_wait, 3),
    }


def ceiling_lines(found: dict[str, Any]) -> str:
    """The ceilings of one grid as a line of text."""
    limits = found["ceilings"]
    gpu = limits["gpu_ms_per_mesh"]
    gpu_text = (
        "no GPU timestamps on this device"
        if gpu is None
        else f"GPU {gpu:.3f} ms/mesh summed from timestamps ({limits['gpu_meshes_per_s']} meshes/s)"
    )
    cpu = limits["device_thread_cpu_ms_per_mesh"]
    cpu_text = "device thread not measured (way `many` not run)"
    if cpu is not None:
        cpu_text = (
            f"device thread {cpu:.3f} CPU ms/mesh ({limits['device_thread_meshes_per_s']} meshes/s)"
        )
    wait = limits.get("device_thread_other_wait_ms_per_mesh")
    if wait is not None:
        cpu_text += f", waiting {wait:.3f} ms/mesh on other than the GPU"
    mesh_wait = limits.get("device_thread_mesh_wait_ms_per_mesh")
    if mesh_wait is not None:
        cpu_text += f", {mesh_wait:.3f} ms/mesh waiting for meshes"
    parse = limits["parse_files_per_s"]
    parse_text = "parse not measured" if parse is None else f"parse {parse} files/s, all cores"
    return f"{found['grid']}³ ceilings: {parse_text}; {gpu_text}; {cpu_text}"


def _parse_processes(asked: int | None) -> int:
    return asked if asked is not None else max(1, os.cpu_count() or 1)


def run_tree(tree: Path, argv: list[str], timeout: float) -> dict[str, Any]:
    """One round of every grid in a process of its own, `tree`'s voxelizer first on the
    path (its batch commands import it too: _environment)."""
    code = (
        f"import sys; sys.path.insert(0, {str(tree.resolve())!r}); sys.argv = {argv!r}; "
        f"exec(compile(open({__file__!r}).read(), {__file__!r}, 'exec'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tree, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise SystemExit(f"{tree}: exit {done.returncode}\n{done.stderr[-4000:]}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if Path(found["package"]).resolve().parent != tree.resolve():
        raise SystemExit(f"{tree}: the process imported {found['package']}, not this tree's")
    return found


def merged(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One tree's rounds (each a child's raw figures of every grid) as one raw record per
    grid, every round's figures in it."""
    grids: dict[int, dict[str, Any]] = {}
    for found in rounds:
        for raw in found["grids"]:
            entry = grids.setdefault(
                raw["grid"],
                {"grid": raw["grid"], "meshes": raw["meshes"], "rates": {}, "figures": {}},
            )
            for key in ("rates", "figures"):
                for name, values in raw[key].items():
                    entry[key].setdefault(name, []).extend(values)
    return list(grids.values())


def after_over_before(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """This tree's figure over the tree before's, per way (best and median rounds) and per
    ceiling (a time per mesh as the rate it allows)."""
    ratios: dict[str, Any] = {}
    for name, rate in after["meshes_per_s"].items():
        if before["meshes_per_s"].get(name):
            ratios[name] = {
                "best": round(rate / before["meshes_per_s"][name], 2),
                "median": round(
                    after["median_meshes_per_s"][name] / before["median_meshes_per_s"][name], 2
                ),
            }
    for name in ("parse_files_per_s", "gpu_meshes_per_s", "device_thread_meshes_per_s"):
        was, now = before["ceilings"][name], after["ceilings"][name]
        ratios[name] = round(now / was, 2) if was and now else None
    return ratios


def markdown(result: dict[str, Any]) -> str:
    """The figures as a table per grid: each tree's best and median round, and the ratio."""
    trees = list(result["trees"])
    lines = [f"Datasets, {result['device']}, {result['meshes']} files, best (median) of "]
    lines[0] += f"{result['rounds']} rounds; meshes/s"
    for grid in result["grids"]:
        lines += ["", f"### {grid['grid']}³", ""]
        lines.append(
            "| way | " + " | ".join(trees) + (" | after/before |" if len(trees) > 1 else " |")
        )
        lines.append("| --- |" + " ---: |" * (len(trees) + (len(trees) > 1)))
        first = grid[trees[0]]
        names = list(first["meshes_per_s"])
        limits = list(first["ceilings"])
        for name in names + limits:
            cells = []
            for tree in trees:
                found = grid[tree]
                if name in found["meshes_per_s"]:
                    cells.append(
                        f"{found['meshes_per_s'][name]} ({found['median_meshes_per_s'][name]})"
                    )
                else:
                    value = found["ceilings"].get(name)
                    cells.append("n/a" if value is None else str(value))
            if len(trees) > 1:
                ratio = grid["after_over_before"].get(name)
                cells.append(
                    "n/a" if ratio is None
                    else f"{ratio['best']} ({ratio['median']})" if isinstance(ratio, dict)
                    else str(ratio)
                )  # fmt: skip
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        for tree in trees:
            lines += ["", f"{tree}: {ceiling_lines(grid[tree])}"]
    return "\n".join(lines) + "\n"


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m voxelizer.benchmarks.datasets", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--models-dir", type=Path)
    parser.add_argument("--work", type=Path, required=True, help="dataset and outputs go here")
    parser.add_argument("--grids", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=1, help="also time the CLI with --jobs N")
    parser.add_argument("--copies", type=int, default=1, help="24 files per copy (default 24)")
    parser.add_argument("--limit", type=int, default=None, help="the first N files only")
    parser.add_argument("--device", default=None)
    parser.add_argument(
        "--devices", default=None, help="also time cli_batch_devices and many_devices on these"
    )
    parser.add_argument("--ways", default=None, help="comma-separated: time only these ways")
    parser.add_argument(
        "--parse-processes", type=int, default=None,
        help="processes of the parse ceiling (default: one per core; 0: not measured)",
    )  # fmt: skip
    parser.add_argument(
        "--before", type=Path, default=None,
        help="a folder holding the voxelizer package to compare this tree with",
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per tree round")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--out", type=Path, help="folder for datasets.json and datasets.md")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--files-json", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--dataset", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.child and args.models_dir is None:
        parser.error("--models-dir is required")
    return args


def _dataset(args: argparse.Namespace) -> tuple[list[Path], Path]:
    """make_dataset's files in --work (the first --limit of them in a folder of their own:
    the batch command reads a whole folder), and that folder."""
    dataset = args.work / "dataset"
    files = make_dataset(args.models_dir, dataset, copies=args.copies)[: args.limit]
    if args.limit is not None:
        dataset = _fresh(args.work / "subset")
        for path in files:
            (dataset / path.parent.name).mkdir(exist_ok=True)
        files = [Path(shutil.copy(p, dataset / p.parent.name / p.name)) for p in files]
    return files, dataset


def _measure_here(
    args: argparse.Namespace, files: list[Path], dataset: Path, work: Path
) -> tuple[str, list[dict[str, Any]]]:
    """This process's tree: the device's name and each grid's raw figures (measure_rounds)."""
    processes = _parse_processes(args.parse_processes)
    parse = ParsePool(processes) if processes else None  # forked before a device opens here
    try:
        with Voxelizer(args.device) as v:
            device_name = v.device_name
        raws = []
        for grid in args.grids:
            raw = measure_rounds(
                files, dataset, work, grid, args.rounds, args.jobs, args.device,
                None if args.ways is None else set(args.ways.split(",")), args.devices, parse,
            )  # fmt: skip
            raws.append(raw)
            if not args.child:
                print(json.dumps(summary(raw)), flush=True)
                print(ceiling_lines(summary(raw)), flush=True)
    finally:
        if parse is not None:
            parse.close()
    return device_name, raws


def _compare(
    args: argparse.Namespace, files: list[Path], dataset: Path
) -> tuple[str, dict[str, str], list[dict[str, Any]]]:
    """--before: the rounds of both trees, taking turns; each tree's summary per grid and
    this tree's figures over the other's."""
    trees = {"before": args.before, "after": Path(voxelizer.__file__).resolve().parents[1]}
    listing = args.work / "files.json"
    listing.write_text(json.dumps([str(path) for path in files]))
    rounds: dict[str, list[dict[str, Any]]] = {label: [] for label in trees}
    for index in range(args.rounds):
        for label, tree in trees.items():
            argv = ["datasets", "--child", "--files-json", str(listing.resolve())]
            argv += [
                "--dataset",
                str(dataset.resolve()),
                "--work",
                str((args.work / label).resolve()),
            ]
            argv += ["--grids", *map(str, args.grids), "--rounds", "1", "--jobs", str(args.jobs)]
            argv += ["--parse-processes", str(_parse_processes(args.parse_processes))]
            for option in ("device", "devices", "ways"):
                if getattr(args, option) is not None:
                    argv += [f"--{option}", str(getattr(args, option))]
            started = time.perf_counter()
            rounds[label].append(run_tree(tree, argv, args.timeout))
            seconds = time.perf_counter() - started
            print(f"round {index + 1}, {label} ({tree}): {seconds:.0f} s", file=sys.stderr)
    summaries = {label: [summary(raw) for raw in merged(rounds[label])] for label in trees}
    grids = []
    for before, after in zip(summaries["before"], summaries["after"]):
        ratios = after_over_before(before, after)
        grids.append({"grid": after["grid"], "before": before, "after": after,
                      "after_over_before": ratios})  # fmt: skip
    device = rounds["after"][0]["device"]
    return device, {label: str(tree) for label, tree in trees.items()}, grids


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    warnings.simplefilter("ignore")  # open meshes of the dataset warn on every call
    if args.child:  # one tree's rounds for _compare: raw figures as one line of JSON
        files = [Path(path) for path in json.loads(args.files_json.read_text())]
        args.work.mkdir(parents=True, exist_ok=True)
        device, raws = _measure_here(args, files, args.dataset, args.work)
        package = str(Path(voxelizer.__file__).parent)
        print(json.dumps({"package": package, "device": device, "grids": raws}))
        return 0
    files, dataset = _dataset(args)
    result: dict[str, Any] = {
        "voxelizer": str(Path(voxelizer.__file__).parent),
        "files": [path.name for path in files],
        "meshes": len(files),
        "rounds": args.rounds,
    }
    if args.before is None:
        device, raws = _measure_here(args, files, dataset, args.work)
        result.update(device=device, trees={"this": result["voxelizer"]})
        result["grids"] = [dict(found, this=found) for found in map(summary, raws)]
    else:
        device, trees, grids = _compare(args, files, dataset)
        result.update(device=device, trees=trees, grids=grids)
    text = markdown(result)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "datasets.json").write_text(json.dumps(result, indent=1) + "\n")
        (args.out / "datasets.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
