"""Datasets: many meshes, the ways a user can voxelize them, side by side in one run.

    python -m voxelizer.benchmarks.datasets --models-dir DIR --work DIR [--grids 64 128]
        [--rounds 2] [--jobs N] [--device SEL] [--sets made,real] [--json FILE]
        [--devices 0,1] [--ray-gpus N | --ray-address ADDRESS]

Each set of files (`--sets`, voxelizer/benchmarks/file_sets.py) is written once to --work
and has tables of its own. `made` (the default): make_dataset's (8 bases x PLY/STL/OBJ, 24
files a copy of 8.7k-100k triangles, turned, stretched and moved at random; `--copies`).
`real`: the mesh files in `--real-from` folders as they come (default: --models-dir), their
ASCII and OBJ forms, and six broken files a copy (cut off, empty, text or random bytes under
a mesh suffix, points without faces), repeated to about as many files as `made`
(`--real-copies`). Every file counts in the rates: a broken one's result is its error (one
line from the command), and each way's meshes done and files failed are reported; a failure
anywhere else (a crash, a file without a result) stops the run.
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
- `cli_batch_ray` (with `--ray-gpus N`: a local Ray head with N GPUs that the benchmark
  starts before the rounds and stops after them, one per tree with `--before`, its actors
  importing that tree; or `--ray-address ADDRESS`: a running cluster): `cli_batch` with
  `--ray ADDRESS`, whole process (connecting, the actors' start,
  the batch); its ratio over `cli_batch_devices` says how Ray on one node compares with the
  local path. Skipped for a tree without `voxelizer.ray` (or a Python without Ray).

Every run starts from warm caches (one call per grid before the rounds). docs/benchmarks.md,
"Datasets", gives the figures.

Each grid's figures stand beside their limits (`ceilings`, printed and in the JSON): the
parse rate, the reading processes' whole rate, the summed GPU time and the device thread's
CPU and waits per mesh (voxelizer.benchmarks.dataset_report.ceilings says how each is taken).

`--before TREE` compares two source trees in one run: TREE is a folder holding a
`voxelizer` package (`git archive COMMIT voxelizer | tar -x -C TREE`). Each tree's round
runs in a process of its own with the tree first on the path (its batch commands too), the
trees taking turns round by round (and set by set within a round); `after_over_before` gives this tree's rate over TREE's
for every way and ceiling. `--out DIR` writes DIR/datasets.json and DIR/datasets.md: the
first set's figures at the top of the JSON (as with one set), every set's under "sets", each
with what it holds ("holds": files by format, triangle range, broken files).
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import voxelizer
from voxelizer import Voxelizer, VoxelizerError, voxelize_many
from voxelizer.batch.readers import prepared_mesh
from voxelizer.io import load_mesh
from voxelizer.options import Options

Counted = tuple[int, int]  # a way's (meshes done, files failed with one error each)


def tree_environment(of_tree: Path | None = None) -> dict[str, str]:
    """Child processes import the voxelizer this process imported (or `of_tree`'s)."""
    tree = str(of_tree or Path(voxelizer.__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=tree if not path else f"{tree}{os.pathsep}{path}")


def batch_command(device: str | None) -> list[str]:
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
    ray_address: str | None = None,
) -> dict[str, Callable[[], Counted]]:
    """Each way of voxelizing the dataset at `grid`: a callable that returns the meshes done
    and the files that failed, each with one error (a broken file is a result, not a crash).
    `many` adds its summed GPU ms and its device thread's CPU ms per mesh to `figures`."""
    figures = (
        {"gpu_ms": [], "device_cpu_ms": [], "device_wait_ms": [], "mesh_wait_ms": []}
        if figures is None
        else figures
    )
    v = Voxelizer(device)
    env = tree_environment()

    def many() -> Counted:
        return _many(files, grid, device, figures)

    def many_npz() -> Counted:
        out = _fresh(work / "many_npz")
        return _counted(voxelize_many(files, grid=grid, devices=device, out_dir=out, format="npz"))

    def cli_batch(
        worker_jobs: int = 1, format: str = "npz", on_devices: bool = False, on_ray: bool = False
    ) -> Counted:
        out = work / f"cli_batch.{format}"
        shutil.rmtree(out, ignore_errors=True)
        command = batch_command(None if on_devices or on_ray else device)
        command += [str(dataset), "--out-dir", str(out), "--grid", str(grid)]
        command += ["--format", format] + (["--jobs", str(worker_jobs)] if worker_jobs > 1 else [])
        command += ["--devices", str(devices)] if on_devices else []
        command += ["--ray", str(ray_address)] if on_ray else []
        ran = subprocess.run(command, env=env, capture_output=True, text=True, timeout=3600)
        failed = _error_lines(ran, some_failed=True)
        if format == "zarr":
            return len(list((out / "voxels").glob("c.*"))), failed
        return len(list(out.rglob("*.npz"))), failed

    found: dict[str, Callable[[], Counted]] = {
        "loop": lambda: _loop(v, files, grid),
        "many": many,
        "loop_npz": lambda: _loop(v, files, grid, _fresh(work / "loop_npz")),
        "many_npz": many_npz,
        "cli_batch": cli_batch,
        "cli_per_file": lambda: _cli_per_file(files, _fresh(work / "cli_per_file"), grid, device),
    }
    found["cli_batch_zarr"] = lambda: cli_batch(format="zarr")
    if devices:
        found["cli_batch_devices"] = lambda: cli_batch(on_devices=True)
        found["many_devices"] = lambda: _counted(voxelize_many(files, grid=grid, devices=devices))
    if jobs > 1:
        found["cli_batch_jobs"] = lambda: cli_batch(jobs)
        found["cli_batch_jobs_zarr"] = lambda: cli_batch(jobs, "zarr")
    if ray_address is not None and _has_ray():
        found["cli_batch_ray"] = lambda: cli_batch(on_ray=True)
    _warm(v, files[0], work, grid, device, devices)
    if "cli_batch_ray" in found:  # the head's workers started, as on a cluster in use
        _warm_ray(files[0], work, grid, str(ray_address))
    return found


def _has_ray() -> bool:
    """Whether this tree's command has --ray (voxelizer.ray) and this Python has Ray."""
    from importlib.util import find_spec

    return find_spec("ray") is not None and find_spec("voxelizer.ray") is not None


def _warm_ray(path: Path, work: Path, grid: int, address: str) -> None:
    warm = _fresh(work / "warm_ray")
    shutil.copyfile(path, warm / path.name)
    command = batch_command(None) + [str(warm), "--out-dir", str(work / "warm_ray.out")]
    command += ["--grid", str(grid), "--format", "npz", "--ray", address]
    subprocess.run(command, env=tree_environment(), check=True, capture_output=True, timeout=600)


def _loop(v: Voxelizer, files: list[Path], grid: int, out: Path | None = None) -> Counted:
    """The way `loop` (with `out`: `loop_npz`, writing there)."""
    done = 0
    for number, path in enumerate(files):
        try:
            if out is None:
                v.voxelize(load_mesh(path), grid)
            else:
                voxelizer.save(v.voxelize_dense(load_mesh(path), grid), out / f"{number}.npz")
        except VoxelizerError:  # (anything else is a crash, and stops the run)
            continue
        done += 1
    return done, len(files) - done


def _cli_per_file(files: list[Path], out: Path, grid: int, device: str | None) -> Counted:
    """The way `cli_per_file`: a `voxelize` process per file, writing into `out`."""
    failed = 0
    for number, path in enumerate(files):
        command = batch_command(device) + [str(path), "--grid", str(grid)]
        command += ["-o", str(out / f"{number}.npz")]
        ran = subprocess.run(
            command, env=tree_environment(), capture_output=True, text=True, timeout=600
        )
        failed += _error_lines(ran, some_failed=False)
    return len(list(out.glob("*.npz"))), failed


def _counted(results: Iterable[Any]) -> Counted:
    """(done, failed) of voxelize_many's results."""
    done = failed = 0
    for result in results:
        done += result.ok
        failed += not result.ok
    return done, failed


def _error_lines(ran: subprocess.CompletedProcess[str], some_failed: bool) -> int:
    """The inputs a `voxelize` process reports failed, each in one error line: 0 or 1 for
    a process per file, any number for a batch (which exits 1 when some failed); a crash or
    an exit without such lines stops the run."""
    lines = sum(line.startswith("voxelize: error:") for line in ran.stderr.splitlines())
    crashed = "Traceback" in ran.stderr
    if not crashed and ran.returncode == 0:
        return lines
    if not crashed and ran.returncode == 1 and lines and (some_failed or lines == 1):
        return lines
    raise RuntimeError(f"{ran.args[-1]}: exit {ran.returncode}\n{ran.stderr[-4000:]}")


def _many(
    files: list[Path], grid: int, device: str | None, figures: dict[str, list[float]]
) -> Counted:
    """The way `many`, adding its summed GPU ms and its device thread's (this thread's: one
    device's worker runs in the caller's thread) CPU ms per mesh to `figures`."""
    cpu_started, wall_started = time.thread_time(), time.perf_counter()
    done, failed, gpu_ms, timed = 0, 0, 0.0, True
    with _mesh_waits() as waited:
        for result in voxelize_many(files, grid=grid, devices=device):
            done += result.ok
            failed += not result.ok
            if result.ok:  # (a file that failed took no GPU time)
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
    return done, failed


@contextmanager
def _mesh_waits() -> Iterator[list[float]]:
    """[seconds] this thread (one device's worker runs in the caller's) spends, while the
    block runs, in the worker's waits for meshes: `first_ready` and `loaded_from` (a mesh
    still loading; a tree before `first_ready` waits in `loaded_from`) and the reading
    processes' `wait_started`); an empty list for a tree before those names."""
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

    patched = [
        (worker, "first_ready"),
        (worker, "loaded_from"),
        (readers.LoadProcesses, "wait_started"),
    ]
    originals = [
        (owner, name, getattr(owner, name)) for owner, name in patched if hasattr(owner, name)
    ]
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
        batch_command(device) + [str(path), "--grid", str(grid), "-o", str(work / "warm.npz")],
        env=tree_environment(),
        check=True,
        capture_output=True,
        timeout=600,
    )


def parsed_triangles(path: str, grid: int | None = None) -> int:
    """One file read by this tree's reader in a parse pool's process (with `grid`, then
    prepared for it as the batch's reading processes do: prepared_mesh), its triangle count
    (the mesh itself stays there: only the work is timed); -1 for a file it refuses."""
    try:
        if grid is None:
            return len(load_mesh(path).faces)
        return len(prepared_mesh(path, Options.create(grid), make_soup=True).faces)
    except VoxelizerError:
        return -1


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

    def rate(self, files: list[Path], grid: int | None = None) -> float:
        """Files read per second over all of `files`; with `grid`, read and prepared for it."""
        started = time.perf_counter()
        list(self._pool.map(functools.partial(parsed_triangles, grid=grid), map(str, files)))
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
    broken: int = 0,
    ray_address: str | None = None,
) -> dict[str, Any]:
    """Every round's meshes/s of each way (interleaved; every file counts, a broken one's
    error too), its meshes done and files failed, the parse pool's files/s and `many`'s
    device figures per round: the raw figures that `summary` reduces. `broken` files of the
    set are made to fail: with none, any failure stops the run."""
    figures: dict[str, list[float]] = {
        "gpu_ms": [], "device_cpu_ms": [], "device_wait_ms": [], "mesh_wait_ms": [], "parse": [],
        "prepare": [],
    }  # fmt: skip
    chosen = ways(files, dataset, work, grid, jobs, device, devices, figures, ray_address)
    if only is not None:
        chosen = {name: way for name, way in chosen.items() if name in only}
    rates: dict[str, list[float]] = {name: [] for name in chosen}
    counts: dict[str, dict[str, list[int]]] = {"done": {}, "failed": {}}
    for _ in range(rounds):
        for name, way in chosen.items():
            started = time.perf_counter()
            done, failed = way()
            seconds = time.perf_counter() - started
            if done + failed != len(files) or (failed and not broken):
                raise RuntimeError(
                    f"{name}: {done} of {len(files)} meshes done, {failed} failed ({broken} broken)"
                )
            rates[name].append(len(files) / seconds)
            counts["done"].setdefault(name, []).append(done)
            counts["failed"].setdefault(name, []).append(failed)
        if parse is not None:
            figures["parse"].append(parse.rate(files))
            figures["prepare"].append(parse.rate(files, grid=grid))
    return {"grid": grid, "meshes": len(files), "broken": broken, "rates": rates,
            "figures": figures, **counts}  # fmt: skip


def _parse_processes(asked: int | None) -> int:
    return asked if asked is not None else max(1, os.cpu_count() or 1)


def run_tree(tree: Path, argv: list[str], timeout: float) -> dict[str, Any]:
    """One round of every grid in a process of its own, `tree`'s voxelizer first on the
    path (its batch commands import it too: tree_environment)."""
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
    parser.add_argument(
        "--limit", type=int, default=None, help="the first N files of each set only"
    )
    parser.add_argument("--device", default=None)
    parser.add_argument(
        "--devices", default=None, help="also time cli_batch_devices and many_devices on these"
    )
    parser.add_argument("--ways", default=None, help="comma-separated: time only these ways")
    parser.add_argument(
        "--ray-gpus", type=int, default=None,
        help="also time cli_batch_ray on a local Ray head with this many GPUs, started here",
    )  # fmt: skip
    parser.add_argument(
        "--ray-address", default=None, help="also time cli_batch_ray on this running cluster"
    )
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
    parser.add_argument(
        "--sets", default="made",
        help="comma-separated sets of files, each with its own tables: made (make_dataset's),"
        " real (files as they come, and broken ones; voxelizer/benchmarks/file_sets.py)",
    )  # fmt: skip
    parser.add_argument(
        "--real-from", type=Path, nargs="+", default=None,
        help="folders whose mesh files (and an OBJ's MTL and textures) the real set holds"
        " (default: --models-dir)",
    )  # fmt: skip
    parser.add_argument(
        "--real-copies", type=int, default=None,
        help="copies of the real set (default: as many as make it about 24 x --copies files)",
    )  # fmt: skip
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--broken", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--files-json", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--dataset", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.child and args.models_dir is None:
        parser.error("--models-dir is required")
    return args


def _file_sets(args: argparse.Namespace) -> list[Any]:
    """The sets of --sets, written in --work (with --limit, the first files of each in a
    folder of their own: the batch command reads a whole folder)."""
    from voxelizer.benchmarks import file_sets  # (this tree's only: not in a --before one)

    found = []
    for name in args.sets.split(","):
        if name == "made":
            found.append(file_sets.made_set(args.models_dir, args.work / "dataset", args.copies))
        elif name == "real":
            sources = args.real_from or [args.models_dir]
            folder, size = args.work / "real", 24 * args.copies
            try:
                found.append(file_sets.real_set(sources, folder, args.real_copies, size))
            except ValueError as exc:
                raise SystemExit(f"--real-from: {exc}") from None
        else:
            raise SystemExit(f"--sets: no set {name!r} (made, real)")
    return [file_sets.limited(found_set, args.limit, args.work) for found_set in found]


def _measure_here(
    args: argparse.Namespace, files: list[Path], dataset: Path, work: Path, broken: int = 0
) -> tuple[str, list[dict[str, Any]]]:
    """This process's tree: the device's name and each grid's raw figures (measure_rounds)."""
    work.mkdir(parents=True, exist_ok=True)
    processes = _parse_processes(args.parse_processes)
    parse = ParsePool(processes) if processes else None  # forked before a device opens here
    try:
        with Voxelizer(args.device) as v:
            device_name = v.device_name
        raws = []
        with _ray_head(args) as ray_address:
            for grid in args.grids:
                raw = measure_rounds(
                    files, dataset, work, grid, args.rounds, args.jobs, args.device,
                    None if args.ways is None else set(args.ways.split(",")), args.devices,
                    parse, broken, ray_address,
                )  # fmt: skip
                raws.append(raw)
                if not args.child:
                    from voxelizer.benchmarks.dataset_report import ceiling_lines, summary

                    print(json.dumps(summary(raw)), flush=True)
                    print(ceiling_lines(summary(raw)), flush=True)
    finally:
        if parse is not None:
            parse.close()
    return device_name, raws


def _child_argv(args: argparse.Namespace, listing: Path, found: Any, work: Path) -> list[str]:
    """The command line of one tree's round of one set (main's --child)."""
    argv = ["datasets", "--child", "--files-json", str(listing.resolve())]
    argv += ["--dataset", str(found.folder.resolve()), "--work", str(work.resolve())]
    argv += ["--broken", str(len(found.broken))]
    argv += ["--grids", *map(str, args.grids), "--rounds", "1", "--jobs", str(args.jobs)]
    argv += ["--parse-processes", str(_parse_processes(args.parse_processes))]
    for option in ("device", "devices", "ways"):
        if getattr(args, option) is not None:
            argv += [f"--{option}", str(getattr(args, option))]
    return argv


def _tree_cluster(args: argparse.Namespace, tree: Path, heads: ExitStack) -> str | None:
    """The cluster of a tree's `cli_batch_ray`: --ray-address, else with --ray-gpus a local
    head whose workers import that tree (a head's actors import the voxelizer on its path),
    kept for every round; None where the tree has no voxelizer.ray."""
    if args.ray_address is not None or args.ray_gpus is None:
        return args.ray_address
    if not (tree / "voxelizer" / "ray.py").is_file() or not _has_ray():
        return None
    from voxelizer.benchmarks.ray_head import local_head

    return heads.enter_context(local_head(args.ray_gpus, env=tree_environment(tree.resolve())))


def _tree_round(
    args: argparse.Namespace,
    at: tuple[int, Any, str, Path],
    listing: Path,
    clusters: dict[str, str | None],
    rounds: dict[tuple[str, str], list[dict[str, Any]]],
) -> None:
    """One tree's round of one set (run_tree), added to `rounds`."""
    index, found, label, tree = at
    argv = _child_argv(args, listing, found, args.work / label / found.name)
    cluster = clusters[label]
    argv += ["--ray-address", cluster] if cluster is not None else []
    started = time.perf_counter()
    done = run_tree(tree, argv, args.timeout)
    rounds.setdefault((found.name, label), []).append(done)
    seconds = time.perf_counter() - started
    print(
        f"round {index + 1}, set {found.name}, {label} ({tree}): {seconds:.0f} s", file=sys.stderr
    )


def _compare(
    args: argparse.Namespace, sets: list[Any]
) -> tuple[str, dict[str, str], dict[str, list[dict[str, Any]]]]:
    """--before: the rounds of both trees over every set, taking turns (round, set, tree);
    each tree's summary per set and grid, and this tree's figures over the other's."""
    from voxelizer.benchmarks.dataset_report import after_over_before, merged, summary

    trees = {"before": args.before, "after": Path(voxelizer.__file__).resolve().parents[1]}
    rounds: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with ExitStack() as heads:
        clusters = {label: _tree_cluster(args, tree, heads) for label, tree in trees.items()}
        for index in range(args.rounds):
            for found in sets:
                listing = args.work / f"files.{found.name}.json"
                listing.write_text(json.dumps([str(path.resolve()) for path in found.files]))
                for label, tree in trees.items():
                    _tree_round(args, (index, found, label, tree), listing, clusters, rounds)
    grids: dict[str, list[dict[str, Any]]] = {}
    for found in sets:
        summaries = {label: [summary(raw) for raw in merged(rounds[found.name, label])]
                     for label in trees}  # fmt: skip
        grids[found.name] = [
            {"grid": after["grid"], "before": before, "after": after,
             "after_over_before": after_over_before(before, after)}
            for before, after in zip(summaries["before"], summaries["after"])
        ]  # fmt: skip
    device = rounds[sets[0].name, "after"][0]["device"]
    return device, {label: str(tree) for label, tree in trees.items()}, grids


def _results(args: argparse.Namespace, sets: list[Any]) -> dict[str, Any]:
    """Every set's figures (under "sets"), the first set's also at the top (its keys as
    they were with one set)."""
    from voxelizer.benchmarks.dataset_report import summary

    here = str(Path(voxelizer.__file__).parent)
    result: dict[str, Any] = {"voxelizer": here, "rounds": args.rounds, "sets": {}}
    if args.before is None:
        trees: dict[str, str] = {"this": here}
        grids = {}
        for found in sets:
            device, raws = _measure_here(args, found.files, found.folder,
                                         args.work / found.name, len(found.broken))  # fmt: skip
            grids[found.name] = [dict(one, this=one) for one in map(summary, raws)]
    else:
        device, trees, grids = _compare(args, sets)
    for found in sets:
        result["sets"][found.name] = {
            "holds": found.holds, "files": [path.name for path in found.files],
            "meshes": len(found.files), "grids": grids[found.name],
        }  # fmt: skip
    first = result["sets"][sets[0].name]
    result.update(set=sets[0].name, device=device, trees=trees, **first)
    return result


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    warnings.simplefilter("ignore")  # open meshes of the dataset warn on every call
    if args.child:  # one tree's rounds for _compare: raw figures as one line of JSON
        files = [Path(path) for path in json.loads(args.files_json.read_text())]
        device, raws = _measure_here(args, files, args.dataset, args.work, args.broken)
        package = str(Path(voxelizer.__file__).parent)
        print(json.dumps({"package": package, "device": device, "grids": raws}))
        return 0
    from voxelizer.benchmarks.dataset_report import markdown

    result = _results(args, _file_sets(args))
    text = markdown(result)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "datasets.json").write_text(json.dumps(result, indent=1) + "\n")
        (args.out / "datasets.md").write_text(text)
    return 0


@contextmanager
def _ray_head(args: argparse.Namespace) -> Iterator[str | None]:
    """The cluster of `cli_batch_ray`: --ray-address (a --before run's child gets its tree's,
    _tree_cluster); else with --ray-gpus, a local head for this process's rounds, its
    workers importing this tree; else None."""
    if args.child or args.ray_address is not None or args.ray_gpus is None or not _has_ray():
        yield args.ray_address
        return
    from voxelizer.benchmarks.ray_head import local_head

    with local_head(args.ray_gpus, env=tree_environment()) as address:
        yield address


if __name__ == "__main__":
    sys.exit(main())
