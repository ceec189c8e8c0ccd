"""GPU time of every pass for source trees side by side: does a change of the host code leave
the GPU's work as it was?

    python -m voxelizer.benchmarks.trees --trees BEFORE AFTER --models-dir DIR --out DIR \\
        [--models bunny dragon armadillo bunny_scan] [--grids 1024] [--rounds 3]

A tree is a folder holding a `voxelizer` package (a checkout, or `git archive COMMIT
voxelizer | tar -x -C FOLDER`). Each runs in a process of its own with its folder first on
the path, the trees taking turns round by round (before, after, before, after, ...), so that
the device's clocks and the host's load fall alike on both. In a tree's process, for every
model, grid and case: a fresh Voxelizer, warm-up calls for at least --warmup seconds
(pipelines built, buffers grown, clocks up), then --repeat timed calls of
`Voxelizer.voxelize` on the mesh in memory, and per pass label (`Stats.gpu_ms`, Vulkan
timestamps) the median of the calls. Only the public API is used, so any two trees compare.

The table takes, for each tree, the lowest of its rounds' medians, and gives the last tree
over the first per pass. The SVO arrays of every case are compared across the trees by
digest: a case whose voxels differ says so and its times are not compared.

Writes OUT/passes.md (the table and, per pass, the largest ratio over every case) and
OUT/passes.json (every round's figures); prints the table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

# (label, options of Voxelizer.voxelize): every fill mode, the surface modes, both sorts, a
# soup variant and an indexed one
CASES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("parity, combined, counting", {"variant": "combined", "sort": "counting"}),
    ("parity, branchless, counting", {"variant": "branchless", "sort": "counting"}),
    ("parity, combined, bitonic", {"variant": "combined", "sort": "bitonic"}),
    ("vote, combined", {"variant": "combined", "fill_mode": "vote"}),
    ("union, combined", {"variant": "combined", "fill_mode": "union"}),
    ("winding, combined", {"variant": "combined", "fill_mode": "winding"}),
    ("surface, combined", {"variant": "combined", "mode": "surface"}),
    ("thin surface, combined", {"variant": "combined", "mode": "surface", "surface": "thin"}),
    ("both, combined", {"variant": "combined", "mode": "both"}),
)


def measure(
    models: list[str], grids: list[int], cases: list[str], warmup: float, repeat: int
) -> dict[str, Any]:
    """In the tree under test: per model, grid and case, the median GPU ms of every pass
    and the digest of the SVO arrays."""
    import numpy as np

    import voxelizer

    warnings.simplefilter("ignore")  # open meshes warn on every call
    chosen = [(label, options) for label, options in CASES if label in cases]
    result: dict[str, Any] = {"package": str(Path(voxelizer.__file__).parent), "cases": []}
    for model in models:
        mesh = voxelizer.load_mesh(model)
        for grid in grids:
            for label, options in chosen:
                with voxelizer.Voxelizer() as vox:
                    warm_until = time.perf_counter() + warmup
                    svo = vox.voxelize(mesh, grid, **options)
                    while time.perf_counter() < warm_until:
                        svo = vox.voxelize(mesh, grid, **options)
                    runs = []
                    for _ in range(repeat):
                        svo = vox.voxelize(mesh, grid, **options)
                        runs.append(svo.stats.gpu_ms)
                digest = hashlib.sha256()
                for array in (svo.nodes, svo.bricks, svo.level_offsets):
                    digest.update(np.ascontiguousarray(array).tobytes())
                labels = list(dict.fromkeys(name for run in runs for name in run))
                medians = {
                    name: statistics.median(run.get(name, 0.0) for run in runs) for name in labels
                }
                medians["sum"] = statistics.median(sum(run.values()) for run in runs)
                result["cases"].append(
                    {
                        "model": Path(model).stem,
                        "grid": grid,
                        "case": label,
                        "device": svo.stats.device,
                        "gpu_ms": medians,
                        "digest": digest.hexdigest()[:16],
                    }
                )
    return result


def run_tree(tree: Path, args: argparse.Namespace, models: list[str]) -> dict[str, Any]:
    """One round of one tree, in a process of its own with the tree first on the path."""
    argv = ["trees", "--child", "--models", *models, "--grids", *map(str, args.grids)]
    argv += ["--cases", *args.cases, "--warmup", str(args.warmup), "--repeat", str(args.repeat)]
    code = (
        f"import sys; sys.path.insert(0, {str(tree.resolve())!r}); sys.argv = {argv!r}; "
        f"exec(compile(open({__file__!r}).read(), {__file__!r}, 'exec'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=args.timeout,
    )
    if done.returncode != 0:
        raise SystemExit(f"{tree}: exit {done.returncode}\n{done.stderr[-4000:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    if Path(found["package"]).resolve().parent != tree.resolve():
        raise SystemExit(f"{tree}: the process imported {found['package']}, not this tree's")
    return found


def best_of_rounds(rounds: list[dict[str, Any]]) -> dict[tuple[str, int, str], dict[str, Any]]:
    """Per (model, grid, case): the lowest median of each pass over the rounds, and the
    digests seen."""
    best: dict[tuple[str, int, str], dict[str, Any]] = {}
    for found in rounds:
        for case in found["cases"]:
            key = (case["model"], case["grid"], case["case"])
            entry = best.setdefault(key, {"gpu_ms": {}, "digests": set(), "device": case["device"]})
            entry["digests"].add(case["digest"])
            for name, ms in case["gpu_ms"].items():
                entry["gpu_ms"][name] = min(ms, entry["gpu_ms"].get(name, ms))
    return best


def table(trees: list[str], best: list[dict[tuple[str, int, str], dict[str, Any]]]) -> str:
    """Markdown: per case and pass, each tree's ms and the last tree over the first; then
    the largest ratio of each pass over the cases."""
    names = [Path(tree).resolve().name for tree in trees]
    lines = [
        "| model | grid | case | pass | " + " | ".join(f"{n} ms" for n in names) + " | ratio |",
        "| --- | ---: | --- | --- | " + " | ".join("---:" for _ in names) + " | ---: |",
    ]
    largest: dict[str, tuple[float, str]] = {}
    for key, first in best[0].items():
        model, grid, case = key
        entries = [tree_best.get(key) for tree_best in best]
        digests = set().union(*(entry["digests"] for entry in entries if entry is not None))
        if None in entries or len(digests) != 1:
            cells = [model, str(grid), case, "(the voxels differ)", *[""] * (len(names) + 1)]
            lines.append("| " + " | ".join(cells) + " |")
            continue
        for name, ms in first["gpu_ms"].items():
            values = [entry["gpu_ms"].get(name) for entry in entries if entry is not None]
            if any(value is None for value in values):
                continue
            ratio = values[-1] / ms if ms else float("nan")
            figures = " | ".join(f"{value:.3f}" for value in values)
            lines.append(f"| {model} | {grid} | {case} | {name} | {figures} | {ratio:.3f} |")
            if ms >= 0.005 and ratio > largest.get(name, (0.0, ""))[0]:
                largest[name] = (ratio, f"{model} {grid}³ {case}")
    lines += ["", "Largest ratio of each pass (passes of at least 5 µs in the first tree):", ""]
    lines += ["| pass | ratio | where |", "| --- | ---: | --- |"]
    lines += [f"| {name} | {ratio:.3f} | {where} |" for name, (ratio, where) in largest.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=Path, nargs="+", default=[Path(".")])
    parser.add_argument("--models-dir", type=Path, default=Path("../shared/models"))
    parser.add_argument(
        "--models", nargs="+", default=["bunny", "dragon", "armadillo", "bunny_scan"]
    )
    parser.add_argument("--grids", type=int, nargs="+", default=[1024])
    parser.add_argument("--cases", nargs="+", default=[label for label, _ in CASES])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=0.5, help="seconds of warm-up calls")
    parser.add_argument("--repeat", type=int, default=10, help="timed calls per case")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per tree and round")
    parser.add_argument("--out", type=Path, default=None, help="folder for passes.md, passes.json")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.models, args.grids, args.cases, args.warmup, args.repeat)))
        return 0
    unknown = set(args.cases) - {label for label, _ in CASES}
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)}; choose from {[c for c, _ in CASES]}")
    models = [
        str(path if path.suffix else (args.models_dir / model).with_suffix(".ply"))
        for model in args.models
        for path in [Path(model)]
    ]
    models = [str(Path(model).resolve()) for model in models]
    rounds: dict[str, list[dict[str, Any]]] = {str(tree): [] for tree in args.trees}
    for index in range(args.rounds):
        for tree in args.trees:
            started = time.perf_counter()
            rounds[str(tree)].append(run_tree(tree, args, models))
            print(
                f"round {index + 1}, {tree}: {time.perf_counter() - started:.0f} s", file=sys.stderr
            )
    best = [best_of_rounds(rounds[str(tree)]) for tree in args.trees]
    device = next(iter(best[0].values()))["device"] if best[0] else ""
    text = f"GPU ms per pass, {device}; the lowest of {args.rounds} rounds' medians of {args.repeat} calls\n\n"
    text += table([str(tree) for tree in args.trees], best)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "passes.md").write_text(text + "\n")
        (args.out / "passes.json").write_text(json.dumps(rounds, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
