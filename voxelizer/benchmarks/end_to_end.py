"""End to end: what a user pays from a mesh file to an SVO in host memory.

    python voxelizer/benchmarks/end_to_end.py --models-dir DIR --work DIR [--json FILE]

It runs as a file, not with -m, and uses only the public API, so the `voxelizer` it times is
whichever the Python path finds first: the same script times two trees side by side
(`PYTHONPATH=old python ...` then `PYTHONPATH=new python ...`, in one session).

Measured (docs/benchmarks.md, "End to end", explains each line):
- loop: one Voxelizer over a dataset of different meshes read from PLY/STL/OBJ files, each
  call `load_mesh(path)` then `voxelize(mesh, grid)`; meshes/s and the GPU-busy fraction
  (the summed GPU time of the passes over the wall time). With `voxelize_many` (when the
  tree has it) the same files pipelined.
- large: a 6.4M-triangle binary PLY (the dragon after three midpoint subdivisions, written
  to --work) read and voxelized at 1024³ as a new mesh by a warm Voxelizer, file reading
  included; the second line is the same again (buffers already grown).
- process: `python -m voxelizer MODEL --grid N -o x.svo` as a process (caches warm: two runs
  first), beside the same call in process on the same file, and beside `python -c pass`;
  the first process after empty caches against the second.
- new mesh: the first call on a new 1.6M-triangle mesh (from arrays) at 64³ against a
  repeated call on the same Mesh.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import voxelizer
from voxelizer import Voxelizer
from voxelizer.io import load_mesh


def _this_trees_meshes() -> ModuleType:
    """meshes.py beside this file, loaded by path: the dataset is this tree's even when the
    `voxelizer` timed is an older one that has no such helpers."""
    spec = importlib.util.spec_from_file_location(
        "end_to_end_meshes", Path(__file__).with_name("meshes.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_meshes = _this_trees_meshes()
make_dataset, model_arrays, write_binary_ply = (
    _meshes.make_dataset,
    _meshes.model_arrays,
    _meshes.write_binary_ply,
)


def gpu_ms(result: object) -> float:
    stats = getattr(result, "stats", None)
    total = getattr(stats, "gpu_total_ms", None)
    if total is not None:
        return float(total)
    return float(sum(getattr(stats, "gpu_ms", {}).values()))


def loop(v: Voxelizer, files: list[Path], grid: int) -> dict:
    for path in files[:3]:  # warm-up: kernels built, buffers grown
        v.voxelize(load_mesh(path), grid)
    busy = 0.0
    started = time.perf_counter()
    for path in files:
        busy += gpu_ms(v.voxelize(load_mesh(path), grid))
    wall = time.perf_counter() - started
    return {
        "grid": grid,
        "meshes": len(files),
        "meshes_per_s": round(len(files) / wall, 1),
        "ms_per_mesh": round(wall * 1e3 / len(files), 2),
        "gpu_busy": round(busy / (wall * 1e3), 3),
    }


def pipelined(files: list[Path], grid: int, device: str | None) -> dict | None:
    """voxelize_many over the files, if this tree has it (one warm-up pass first)."""
    many: Callable | None = getattr(voxelizer, "voxelize_many", None)
    if many is None:
        return None
    for _ in many(files, grid=grid):  # warm-up: kernels, buffers and reading processes started
        pass
    started = time.perf_counter()
    done = sum(1 for _ in many(files, grid=grid))
    wall = time.perf_counter() - started
    return {"grid": grid, "meshes": done, "meshes_per_s": round(done / wall, 1)}


def large(v: Voxelizer, models_dir: Path, work: Path, grid: int) -> dict:
    path = work / "dragon-x64.ply"
    if not path.is_file():
        write_binary_ply(path, *model_arrays(models_dir, "dragon", 3))
    v.voxelize(load_mesh(models_dir / "dragon.ply"), grid)  # kernels built at this grid
    times = []
    for _ in range(2):
        started = time.perf_counter()
        mesh = load_mesh(path)
        read = time.perf_counter() - started
        svo = v.voxelize(mesh, grid)
        times.append(
            {
                "read_ms": round(read * 1e3, 1),
                "total_ms": round((time.perf_counter() - started) * 1e3, 1),
                "gpu_ms": round(gpu_ms(svo), 2),
            }
        )
    return {
        "triangles": int(mesh.triangle_count),
        "grid": grid,
        "first": times[0],
        "again": times[1],
    }


def process_seconds(args: list[str], env: dict[str, str], runs: int, cwd: Path) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        # cwd: a folder without a `voxelizer`, so `-m` imports the tree the path names
        subprocess.run(args, env=env, cwd=cwd, check=True, capture_output=True, timeout=600)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def process(v: Voxelizer, model: Path, grid: int, work: Path) -> dict:
    env = dict(os.environ)
    out = work / "process.svo"
    command = [sys.executable, "-m", "voxelizer", str(model), "--grid", str(grid)]
    command += ["-o", str(out), "--force", "--quiet"]
    process_seconds(command, env, 2, work)  # caches warm
    cli = process_seconds(command, env, 5, work)
    empty = process_seconds([sys.executable, "-c", "pass"], env, 5, work)
    imported = process_seconds([sys.executable, "-c", "import voxelizer"], env, 5, work)
    v.voxelize(load_mesh(model), grid)
    calls = []
    for _ in range(5):
        started = time.perf_counter()
        v.voxelize(load_mesh(model), grid)
        calls.append(time.perf_counter() - started)
    in_process = statistics.median(calls)
    with tempfile.TemporaryDirectory(dir=work) as cache:
        cold_env = dict(env, XDG_CACHE_HOME=cache)
        first = process_seconds(command, cold_env, 1, work)
        second = process_seconds(command, cold_env, 1, work)
    return {
        "model": model.name,
        "grid": grid,
        "process_s": round(cli, 3),
        "python_pass_s": round(empty, 3),
        "import_voxelizer_s": round(imported, 3),
        "in_process_s": round(in_process, 4),
        "process_over_in_process": round(cli / in_process, 2),
        "first_process_empty_caches_s": round(first, 3),
        "second_process_s": round(second, 3),
        "first_over_second": round(first / second, 2),
    }


def new_mesh(v: Voxelizer, models_dir: Path, grid: int) -> dict:
    vertices, faces = model_arrays(models_dir, "dragon", 2)  # 1.6M triangles
    v.voxelize((vertices, faces), grid)  # kernels and buffers ready
    firsts, repeats = [], []
    for _ in range(3):
        fresh = (vertices.copy(), faces.copy())
        started = time.perf_counter()
        v.voxelize(fresh, grid)
        firsts.append(time.perf_counter() - started)
        mesh = load_mesh(fresh)  # what a caller keeps to pay the mesh's checks once
        v.voxelize(mesh, grid)
        started = time.perf_counter()
        v.voxelize(mesh, grid)
        repeats.append(time.perf_counter() - started)
    first, repeat = statistics.median(firsts), statistics.median(repeats)
    return {
        "triangles": len(faces),
        "grid": grid,
        "first_call_ms": round(first * 1e3, 1),
        "repeated_call_ms": round(repeat * 1e3, 1),
        "first_over_repeated": round(first / repeat, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="end_to_end.py", description=__doc__.split("\n")[0])
    parser.add_argument("--models-dir", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True, help="for the generated meshes")
    parser.add_argument("--grids", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--large-grid", type=int, default=1024)
    parser.add_argument("--process-grid", type=int, default=1024)
    parser.add_argument("--parts", default="loop,many,large,process,new")
    parser.add_argument("--device", default=None)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    args.models_dir, args.work = args.models_dir.resolve(), args.work.resolve()
    parts = set(args.parts.split(","))
    args.work.mkdir(parents=True, exist_ok=True)
    warnings.simplefilter("ignore")  # the open scan warns on every call
    v = Voxelizer(args.device)
    result: dict = {"voxelizer": str(Path(voxelizer.__file__).parent), "device": v.device_name}

    def report(key: str, value: object) -> None:
        result[key] = value
        print(key, json.dumps(value), flush=True)
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))

    files = make_dataset(args.models_dir, args.work / "dataset")
    if "loop" in parts:
        report("loop", [loop(v, files, grid) for grid in args.grids])
    if "many" in parts:
        report("many", [pipelined(files, grid, args.device) for grid in args.grids])
    if "large" in parts:
        report("large", large(v, args.models_dir, args.work, args.large_grid))
    if "process" in parts:
        dragon = args.models_dir / "dragon.ply"
        report("process", process(v, dragon, args.process_grid, args.work))
    if "new" in parts:
        report("new_mesh", new_mesh(v, args.models_dir, 64))
    v.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
