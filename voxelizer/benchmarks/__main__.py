"""Benchmark: `python -m voxelizer.benchmarks [--models ...] [--grids ...] [--variants ...]
[--peers]`.

For each model × grid × variant × sort, a fresh Voxelizer makes warm-up calls for at least
WARMUP_SECONDS (pipelines built, buffers grown, GPU clocks up), then `--repeat` timed calls on a mesh already in memory:
Voxelizer.voxelize (SVO in host memory; `--output svo`, the default) or voxelize_dense
(`--output dense`). Once per model and grid, one more call from the bare (vertices, faces)
arrays pays the host checks that a Mesh caches. Reported: median and spread of the wall
time of the call, the from-arrays time, the median GPU time of every pass, workload counts,
peak device memory, the bandwidth fraction of every pass (`--bandwidth`), the wall time of
one `voxelize` process per grid, and the CPU peers of voxelizer/benchmarks/peers.py timed
side by side (`--peers`). docs/benchmarks.md explains every column.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..api import Voxelizer
from ..choices import AUTO_VARIANT, DEFAULT_SORT, SORTS, VARIANTS, is_indexed
from ..errors import VoxelizerError
from ..grid import DenseGrid
from ..mesh import Mesh
from ..stats import Stats
from ..svo import SVO
from . import peers as peer_tools
from .bandwidth import TRANSFERS, bandwidth_fractions, device_bandwidth, pass_bytes
from .meshes import check_model, model_path, resolve_model
from .report import markdown, write_json

PROJECT = Path(__file__).resolve().parents[2]
MODELS_ENV = "VOXELIZER_MODELS"  # the default --models-dir


def default_models_dir() -> Path:
    """$VOXELIZER_MODELS, else ./models: a directory the user chooses, not one the library
    guesses from where it is installed."""
    return Path(os.environ.get(MODELS_ENV) or "models")


# Warm-up calls repeat for at least this long: a GPU left idle while the host prepared the
# previous mesh runs its first calls at a lower clock (seen as 2-4x slower passes).
WARMUP_SECONDS = 0.5


def measure(
    mesh: Mesh,
    grid: int,
    variant: str,
    sort: str,
    output: str = "svo",
    repeat: int = 5,
    device: str | int | None = None,
    from_arrays: bool = True,
) -> tuple[dict[str, Any], SVO | DenseGrid | None]:
    """(row, last result) for one configuration; row["status"] is "skipped" with the reason
    when the device cannot run it (a grid it cannot hold, memory it does not have).

    The timed calls reuse the Mesh, as a program voxelizing one mesh at several settings
    would: what the Mesh caches (bounds, topology check) is paid once, in the warm-up. With
    `from_arrays`, one more call from the bare (vertices, faces) arrays pays it again, as a
    first call does.
    A Voxelizer of its own per configuration, so that its buffers hold this configuration's
    peak and nothing left over from a larger one."""
    walls: list[float] = []
    runs: list[Stats] = []
    result: SVO | DenseGrid | None = None
    arrays_ms: float | None = None
    try:
        with Voxelizer(device) as voxelizer:
            call = voxelizer.voxelize if output == "svo" else voxelizer.voxelize_dense
            warm_until = time.perf_counter() + WARMUP_SECONDS
            call(mesh, grid, variant=variant, sort=sort)  # warm-up: pipelines, buffers, caches
            while time.perf_counter() < warm_until:
                call(mesh, grid, variant=variant, sort=sort)  # and the device's clocks
            for _ in range(repeat):
                started = time.perf_counter()
                result = call(mesh, grid, variant=variant, sort=sort)
                walls.append((time.perf_counter() - started) * 1e3)
                runs.append(result.stats)
            if from_arrays:
                started = time.perf_counter()
                call((mesh.vertices, mesh.faces), grid, variant=variant, sort=sort)
                arrays_ms = (time.perf_counter() - started) * 1e3
    except (VoxelizerError, MemoryError) as exc:
        return {"status": "skipped", "reason": f"{type(exc).__name__}: {exc}"}, None
    last = runs[-1]
    row: dict[str, Any] = {
        "status": "ok",
        "wall_ms": {
            "median": statistics.median(walls),
            "min": min(walls),
            "max": max(walls),
            "runs": walls,
        },
        "from_arrays_ms": arrays_ms,
        "gpu_ms": _medians([s.gpu_ms for s in runs]),
        "gpu_ms_total": statistics.median(s.gpu_total_ms for s in runs),
        "gpu_ms_compute": statistics.median(
            sum(ms for name, ms in s.gpu_ms.items() if name not in TRANSFERS) for s in runs
        ),
        "host_ms": _medians([s.host_ms for s in runs]),
        "counts": dict(last.counts),
        "memory": {
            "device_peak_bytes": max(s.memory.device_peak_bytes for s in runs),
            "staging_peak_bytes": max(s.memory.staging_peak_bytes for s in runs),
        },
    }
    if output == "svo":
        assert isinstance(result, SVO)  # Voxelizer.voxelize's result
        row["svo"] = {
            "nodes": result.node_count,
            "bricks": result.brick_count,
            "bytes": result.nbytes,
        }
    return row, result


def _medians(dicts: list[dict[str, float]]) -> dict[str, float]:
    """Median of each key over the runs, in the order the keys first appear."""
    keys = list(dict.fromkeys(key for d in dicts for key in d))
    return {key: statistics.median(d.get(key, 0.0) for d in dicts) for key in keys}


def measure_cli(
    model: Path, grid: int, device: str | int | None = None, timeout_s: float = 600.0
) -> dict:
    """Wall time of one `python -m voxelizer.cli MODEL --grid N` process: interpreter start,
    imports, device, pipelines, load, voxelization. Also the seconds the command reports."""
    command = [sys.executable, "-m", "voxelizer.cli", str(model), "--grid", str(grid)]
    if device is not None:
        command += ["--device", str(device)]
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            [str(PROJECT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]
        ),
    )
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "reason": f"longer than {timeout_s:g} s"}
    wall = time.perf_counter() - started
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return {"status": "failed", "reason": f"exit {done.returncode}: {last}", "wall_s": wall}
    reported = re.search(r", ([0-9.]+) s \(", done.stdout)
    return {"status": "ok", "wall_s": wall, "reported_s": float(reported[1]) if reported else None}


def describe_device(voxelizer: Voxelizer) -> dict:
    """Name, kind and driver (name and version as the driver reports them) of the device."""
    device = voxelizer.device
    described = {"name": device.name, "kind": device.info.kind, "api": device.info.api_version}
    try:
        import vulkan as vk

        driver = vk.VkPhysicalDeviceDriverProperties()
        properties = vk.VkPhysicalDeviceProperties2(pNext=driver)
        vk.vkGetPhysicalDeviceProperties2(device.physical, properties)
        described["driver"] = " ".join(
            vk.ffi.string(text).decode() for text in (driver.driverName, driver.driverInfo)
        )
    except Exception:  # an old loader or binding: the packed version number still says much
        described["driver"] = f"driverVersion {device.info.driver_version:#x}"
    return described


def describe_host() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        names = re.findall(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores; {platform.system()}; "
        f"{platform.python_implementation()} {platform.python_version()}"
    )


def git_commit() -> tuple[str | None, bool]:
    """(short commit hash, whether tracked files differ from it), or (None, False)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=PROJECT,
            capture_output=True,
            text=True,
            timeout=10,
        )
        changes = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=PROJECT,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None, False
    if head.returncode != 0:
        return None, False
    return head.stdout.strip(), bool(changes.stdout.strip())


def reference_row(rows: list[dict], model: str, grid: int, variant: str) -> dict | None:
    """Our row the peers are compared with: the default configuration (`variant`, what "auto"
    runs on the device with the default budget, and the default sort) if measured, else the
    fastest configuration of that model and grid."""
    ok = [r for r in rows if r["model"] == model and r["grid"] == grid and r["status"] == "ok"]
    default = [r for r in ok if r["variant"] == variant and r["sort"] == DEFAULT_SORT]
    candidates = default or sorted(ok, key=lambda r: r["wall_ms"]["median"])
    return candidates[0] if candidates else None


def run(args: argparse.Namespace) -> dict:
    """The whole benchmark: the matrix, the peers, the CLI; returns the results document."""
    with Voxelizer(args.device) as probe:
        device = describe_device(probe)
        default_variant = probe.likely_variant(AUTO_VARIANT)
    args.variants = args.variants or [default_variant]
    gbps = args.bandwidth if args.bandwidth is not None else device_bandwidth(device["name"])
    commit, dirty = git_commit()
    doc: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": device,
        "host": describe_host(),
        "commit": f"{commit} (uncommitted changes)" if dirty else commit,
        "command": ["python", "-m", "voxelizer.benchmarks", *args.argv],
        "settings": {
            "output": args.output,
            "repeat": args.repeat,
            "grids": args.grids,
            "variants": args.variants,
            "sorts": args.sorts,
            "models": args.models,
            "bandwidth_gbps": gbps,
            "peers": args.peers,
            "peer_runs": args.peer_runs,
            "peer_timeout_s": args.peer_timeout,
        },
        "rows": [],
        "peers": [],
        "cli": [],
    }
    for spec in args.models:
        started = time.perf_counter()
        name, mesh = resolve_model(spec, args.models_dir)
        _progress(
            f"{name}: {mesh.triangle_count:,} triangles "
            f"({time.perf_counter() - started:.1f} s to load or generate)"
        )
        for grid in args.grids:
            ours = _run_grid(args, doc, name, mesh, grid, gbps)
            if ours is not None:
                our_row = reference_row(doc["rows"], name, grid, default_variant)
                assert our_row is not None  # `ours` came from an "ok" row of this model and grid
                doc["peers"] += run_peers(args, name, mesh, grid, ours, our_row)
    if not args.no_cli:
        doc["cli"] = run_cli(args)
    return doc


def _run_grid(
    args: argparse.Namespace, doc: dict, name: str, mesh: Mesh, grid: int, gbps: float | None
) -> np.ndarray | None:
    """Every variant and sort on one model and grid, their rows added to `doc`; returns the
    voxels of the first that ran where the peers are compared with them."""
    ours: np.ndarray | None = None
    for variant in args.variants:
        for sort in args.sorts:
            first = variant == args.variants[0] and sort == args.sorts[0]
            row, result = measure(
                mesh, grid, variant, sort, output=args.output, repeat=args.repeat,
                device=args.device, from_arrays=first,
            )  # fmt: skip
            row = {
                "model": name,
                "triangles": mesh.triangle_count,
                "vertices": len(mesh.vertices),
                "grid": grid,
                "variant": variant,
                "sort": sort,
                "output": args.output,
                **row,
            }
            if row["status"] == "ok":
                _add_bandwidth(row, gbps)
                if ours is None and args.peers:
                    assert result is not None  # a result for every "ok" row
                    ours = result.to_numpy()
                _progress(
                    f"  {grid}³ {variant}/{sort}: {row['wall_ms']['median']:.1f} ms "
                    f"API, {row['gpu_ms_total']:.2f} ms GPU"
                )
            else:
                _progress(f"  {grid}³ {variant}/{sort}: skipped ({row['reason']})")
            doc["rows"].append(row)
    return ours


def _add_bandwidth(row: dict, gbps: float | None) -> None:
    counts, svo = row["counts"], row.get("svo", {})
    row["bytes"] = pass_bytes(
        row["grid"],
        row["triangles"],
        row["vertices"],
        counts.get("pairs", 0),
        counts.get("tiles", 0),
        is_indexed(row["variant"]),
        row["sort"],
        svo.get("nodes"),
        svo.get("bricks"),
    )
    if gbps:
        row["bandwidth_fraction"] = bandwidth_fractions(row["bytes"], row["gpu_ms"], gbps)


def run_peers(
    args: argparse.Namespace,
    name: str,
    mesh: Mesh,
    grid: int,
    ours: np.ndarray,
    our_row: dict[str, Any],
) -> list[dict]:
    """Every asked-for peer on one model and grid, with its ratio to our time."""
    results = []
    for peer in args.peers:
        outcome: dict[str, Any]
        if peer == "trimesh" and grid > args.trimesh_max_grid:
            outcome = {
                "status": "skipped",
                "reason": f"grid above --trimesh-max-grid {args.trimesh_max_grid}",
            }
        else:
            outcome = peer_tools.measure_peer(
                peer, mesh, grid, ours, args.peer_runs, args.peer_timeout
            )
        ours_ms = our_row["wall_ms"]["median"]
        seconds = outcome.get("seconds")
        results.append(
            {
                "model": name,
                "grid": grid,
                "peer": peer,
                **outcome,
                "ours": f"{our_row['variant']}/{our_row['sort']}",
                "ours_ms": ours_ms,
                "ratio": ours_ms / (1e3 * seconds) if seconds else None,
            }
        )
        shown = f"{1e3 * seconds:.1f} ms" if seconds else outcome.get("reason", "")
        _progress(f"  {grid}³ peer {peer}: {outcome['status']}, {shown}")
    return results


def run_cli(args: argparse.Namespace) -> list[dict]:
    """The `voxelize` process once per grid, on --cli-model or the first model with a file."""
    spec = args.cli_model or next((m for m in args.models if _has_file(m, args.models_dir)), None)
    if spec is None:
        return []
    path = model_path(spec, args.models_dir)
    results = []
    for grid in args.grids:
        outcome = measure_cli(path, grid, args.device)
        results.append({"model": path.stem, "grid": grid, **outcome})
        _progress(
            f"CLI {path.name} {grid}³: {outcome['status']}, {outcome.get('wall_s', 0.0):.2f} s wall"
        )
    return results


def _has_file(spec: str, models_dir: Path) -> bool:
    try:
        model_path(spec, models_dir)
        return True
    except ValueError:
        return False


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m voxelizer.benchmarks",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
    )
    _matrix_arguments(p)
    _peer_arguments(p)
    _output_arguments(p)
    return p


def _matrix_arguments(p: argparse.ArgumentParser) -> None:
    """What is measured: the models, grids, variants, sorts, output, repeats, device."""
    p.add_argument(
        "--models",
        nargs="+",
        default=["bunny"],
        metavar="MODEL",
        help="model names in --models-dir, NAME-x4/-x16/-x64 (midpoint-subdivided), "
        "or mesh files (default: bunny)",
    )
    p.add_argument(
        "--models-dir",
        type=Path,
        default=default_models_dir(),
        metavar="DIR",
        help=f"directory where --models names are looked up (default: ${MODELS_ENV} if set, "
        "else ./models; in a development checkout the Stanford models are in ../shared/models)",
    )
    p.add_argument("--grids", nargs="+", type=int, default=[128, 256, 512], metavar="N")
    p.add_argument(
        "--variants",
        nargs="+",
        choices=list(VARIANTS),
        help="default: the one the default variant, auto, runs on the device",
    )
    p.add_argument("--sorts", nargs="+", default=[DEFAULT_SORT], choices=list(SORTS))
    p.add_argument(
        "--output",
        default="svo",
        choices=["svo", "dense"],
        help="time voxelize (SVO, default) or voxelize_dense",
    )
    p.add_argument("--repeat", type=int, default=5, help="timed calls per configuration")
    p.add_argument("--device", default=None, help="Vulkan device index or name substring")


def _peer_arguments(p: argparse.ArgumentParser) -> None:
    """The CPU peers timed side by side, and the bandwidth the passes are held against."""
    p.add_argument(
        "--peers",
        nargs="*",
        choices=list(peer_tools.PEERS),
        default=None,
        help="time CPU peers side by side (no names: all of them)",
    )
    p.add_argument("--peer-runs", type=int, default=3, help="timed runs per peer (min reported)")
    p.add_argument(
        "--peer-timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="stop a peer whose run takes longer (default 120 s)",
    )
    p.add_argument(
        "--trimesh-max-grid",
        type=int,
        default=256,
        metavar="N",
        help="run the trimesh peer only up to this grid (default 256: it takes minutes above)",
    )
    p.add_argument(
        "--bandwidth",
        type=float,
        default=None,
        metavar="GBPS",
        help="device memory bandwidth for the bandwidth fractions (default: known "
        "for H100 and H200, else no fractions)",
    )


def _output_arguments(p: argparse.ArgumentParser) -> None:
    """The CLI's timing, and where the results go."""
    p.add_argument(
        "--cli-model",
        default=None,
        metavar="MODEL",
        help="model for the CLI wall time (default: the first model with a file)",
    )
    p.add_argument("--no-cli", action="store_true", help="do not time the voxelize command")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.add_argument("--markdown", metavar="FILE", help="write the markdown tables to a file too")
    p.add_argument("--plots", metavar="DIR", help="write PNG figures (needs matplotlib)")
    p.add_argument(
        "--from-json",
        metavar="FILE",
        help="measure nothing: tables and plots from the JSON of an earlier run "
        "(for example one made on a machine without matplotlib)",
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    options = parser()
    args = options.parse_args(argv)
    args.argv = argv
    if not args.from_json:
        for spec in args.models:
            try:
                check_model(spec, args.models_dir)
            except ValueError as exc:
                options.error(f"{exc}; --models-dir DIR or ${MODELS_ENV} sets the directory")
    if args.peers is None:
        args.peers = []
    elif not args.peers:
        args.peers = list(peer_tools.PEERS)
    doc = json.loads(Path(args.from_json).read_text()) if args.from_json else run(args)
    text = markdown(doc)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.json:
        write_json(doc, args.json)
    if args.plots:
        from .plots import write_plots

        try:
            for path in write_plots(doc, args.plots):
                _progress(f"plot: {path}")
        except ImportError:
            _progress("plots: matplotlib is not installed (pip install 'voxelizer[bench]')")
    return 0


if __name__ == "__main__":
    sys.exit(main())
