"""The datasets benchmark's figures as tables: each way's best and median round, the
ratios between ways and between trees, and the limits beside them (the ceilings).

Only the process that runs the benchmark imports this module: a `--before` tree's rounds
run voxelizer/benchmarks/datasets.py against that tree's package, which may not have it.
"""

from __future__ import annotations

import statistics
from typing import Any

from voxelizer.benchmarks.file_sets import holds_text

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
    ("cli_batch_ray", "cli_batch_devices"),
)


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
        # Meshes done and files failed (one error each) of each way, its worst round.
        "done": {name: min(values) for name, values in raw.get("done", {}).items()},
        "failed": {name: max(values) for name, values in raw.get("failed", {}).items()},
        "broken": raw.get("broken", 0),
    }


def ceilings(figures: dict[str, list[float]]) -> dict[str, float | None]:
    """The limits beside the rates, taken by voxelizer.benchmarks.datasets: the best parse
    round, the median rounds of the device figures; None where not measured.

    - `parse_files_per_s`: the tree's own reader (`load_mesh`) over the same files in a pool of
      one process per core (`--parse-processes`), each set up as the batch's reading processes
      are, no device: the host's parse ceiling;
    - `prepare_files_per_s`: the same pool reading each file and preparing it for the grid as
      the batch's reading processes do (`voxelizer.batch.readers.prepared_mesh`: the reader,
      then the thin check's projected areas, the placement and the placed vertices): the
      ceiling of the reading processes' whole work;
    - `gpu_ms_per_mesh` and `gpu_meshes_per_s`: the GPU time of `many`'s meshes summed from
      their results' Vulkan timestamps (`Stats.gpu_ms`, setup to the end of the SVO build), per
      file of the set (a broken file takes none), and the rate a device doing nothing else would
      reach (null where the device has no timestamps);
    - `device_thread_cpu_ms_per_mesh`: the CPU time of the thread that drives the device in
      `many` (one device: the caller's thread runs the worker), per mesh (`time.thread_time`),
      and the rate that thread alone allows; `device_thread_other_wait_ms_per_mesh`: the rest of
      its wall-clock time beyond the GPU's (waiting for the GIL, for a mesh still loading, for a
      core); `device_thread_mesh_wait_ms_per_mesh`: the part of it spent waiting for meshes
      (for one still loading, or for the reading processes to start).
    """

    def rounded(value: float | None, digits: int) -> float | None:
        return None if value is None else round(value, digits)

    def median(name: str) -> float | None:
        values = figures.get(name)
        return statistics.median(values) if values else None

    parse = max(figures["parse"]) if figures["parse"] else None
    prepare = max(figures["prepare"]) if figures.get("prepare") else None  # (older JSON: none)
    gpu, cpu, wait = median("gpu_ms"), median("device_cpu_ms"), median("device_wait_ms")
    mesh_wait = median("mesh_wait_ms")
    return {
        "parse_files_per_s": rounded(parse, 1),
        "prepare_files_per_s": rounded(prepare, 1),
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
    prepare = limits.get("prepare_files_per_s")
    if prepare is not None:
        parse_text += f" ({prepare} files/s read and prepared for the grid)"
    return f"{found['grid']}³ ceilings: {parse_text}; {gpu_text}; {cpu_text}"


def merged(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One tree's rounds (each a child's raw figures of every grid) as one raw record per
    grid, every round's figures in it."""
    grids: dict[int, dict[str, Any]] = {}
    for found in rounds:
        for raw in found["grids"]:
            entry = grids.setdefault(
                raw["grid"],
                {"grid": raw["grid"], "meshes": raw["meshes"], "broken": raw.get("broken", 0),
                 "rates": {}, "figures": {}, "done": {}, "failed": {}},
            )  # fmt: skip
            for key in ("rates", "figures", "done", "failed"):
                for name, values in raw.get(key, {}).items():
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
    for name in (
        "parse_files_per_s", "prepare_files_per_s", "gpu_meshes_per_s", "device_thread_meshes_per_s"
    ):  # fmt: skip
        was, now = before["ceilings"].get(name), after["ceilings"].get(name)
        ratios[name] = round(now / was, 2) if was and now else None
    return ratios


def markdown(result: dict[str, Any]) -> str:
    """The figures of every set (what it holds first) as a table per grid: each tree's best
    and median round, and the ratio."""
    sets = result.get("sets") or {result.get("set", "made"): result}
    parts = [_set_markdown(result, name, found, len(sets) > 1) for name, found in sets.items()]
    return "\n".join(parts)


def _set_markdown(result: dict[str, Any], name: str, found: dict[str, Any], named: bool) -> str:
    trees = list(result["trees"])
    lines = [f"Datasets, {result['device']}, {found['meshes']} files, best (median) of "]
    broken = bool(found.get("holds") and found["holds"]["broken"])
    lines[0] += f"{result['rounds']} rounds; " + (
        "files/s (a broken file's result is its error line)" if broken else "meshes/s"
    )
    if found.get("holds"):
        lines += ["", holds_text(name, found["holds"])]
    for grid in found["grids"]:
        lines += ["", f"### {f'set {name}, ' if named else ''}{grid['grid']}³", ""]
        lines.append(
            "| way | " + " | ".join(trees) + (" | after/before |" if len(trees) > 1 else " |")
        )
        lines.append("| --- |" + " ---: |" * (len(trees) + (len(trees) > 1)))
        first = grid[trees[0]]
        names = list(dict.fromkeys(way for tree in trees for way in grid[tree]["meshes_per_s"]))
        limits = list(first["ceilings"])
        for row in names + limits:
            cells = []
            for tree in trees:
                figures = grid[tree]
                if row in figures["meshes_per_s"]:
                    cells.append(
                        f"{figures['meshes_per_s'][row]} ({figures['median_meshes_per_s'][row]})"
                    )
                else:
                    value = figures["ceilings"].get(row)
                    cells.append("n/a" if value is None else str(value))
            if len(trees) > 1:
                ratio = grid["after_over_before"].get(row)
                cells.append(
                    "n/a" if ratio is None
                    else f"{ratio['best']} ({ratio['median']})" if isinstance(ratio, dict)
                    else str(ratio)
                )  # fmt: skip
            lines.append(f"| {row} | " + " | ".join(cells) + " |")
        for tree in trees:
            lines += ["", f"{tree}: {ceiling_lines(grid[tree])}"]
            if grid[tree].get("failed") and any(grid[tree]["failed"].values()):
                counts = ", ".join(
                    f"{way} {done} ({grid[tree]['failed'][way]})"
                    for way, done in grid[tree]["done"].items()
                )
                lines += ["", f"{tree}: meshes done (files failed), of {grid[tree]['broken']} "
                              f"broken: {counts}"]  # fmt: skip
    return "\n".join(lines) + "\n"
