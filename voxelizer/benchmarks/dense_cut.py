"""The host's work on a dense result after its download, for source trees side by side.

What is timed: the steps a dense `voxelize_dense` call runs on the host once the GPU's words
are read back, on synthetic words of the grid the passes run on (the tiles' padding empty,
the bits past nz clear, half the voxels set), so that the GPU takes no part: `read`, a copy
of the padded grid's words (what reading the staging buffer costs); `cut`, the result cut
from them (`GpuGrid.cut`; nothing for grids that need no cut); `count`, the result's voxel
count (`ColumnBits.count`, which every call makes). Medians of `--repeat` runs per grid;
every tree runs in a process of its own, the trees taking turns round by round, and the
results' words are compared across the trees (a digest): the figures are only printed for
identical results.

    python -m voxelizer.benchmarks.dense_cut --grids 1024 1000 999 1001 \\
        --trees /path/to/before /path/to/after
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

STEPS = ("read", "cut", "count")


def measure(grids: list[int], repeat: int) -> dict:
    """In the tree under test: per grid, the ms of each step per run, and the digest."""
    import numpy as np

    from voxelizer.grid import ColumnBits, column_words
    from voxelizer.pipeline.gpu_grid import GpuGrid

    # The passes' words, as the pipeline hands them on (a tree without the flag: as before).
    names = {field.name for field in dataclasses.fields(ColumnBits)}
    as_passes = {"clean_padding": True} if "clean_padding" in names else {}
    results = {}
    for n in grids:
        grid = GpuGrid.of((n, n, n), None, "parity")
        px, py, pz = grid.shape
        words = column_words(pz)
        padded = np.zeros((py, px, words), np.uint32)
        rng = np.random.default_rng(n)
        padded[:n, :n] = rng.integers(0, 2**32, (n, n, words), dtype=np.uint32)
        if pz % 32:
            padded[:, :, -1] &= np.uint32((1 << pz % 32) - 1)
        times: dict[str, list[float]] = {step: [] for step in STEPS}
        digest = ""
        for _ in range(repeat):
            started = time.perf_counter()
            read = padded.reshape(-1).copy()
            cut_at = time.perf_counter()
            result = grid.cut(ColumnBits(read, grid.shape, **as_passes))
            count_at = time.perf_counter()
            assert isinstance(result, ColumnBits)  # (words in, words out)
            count = result.count()
            ended = time.perf_counter()
            for step, ms in zip(STEPS, (cut_at - started, count_at - cut_at, ended - count_at)):
                times[step].append(ms * 1e3)
            digest = hashlib.sha256(np.ascontiguousarray(result.words).tobytes()).hexdigest()
            digest += f":{count}"
            del read, result
        results[str(n)] = {"ms": times, "digest": digest}
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m voxelizer.benchmarks.dense_cut")
    parser.add_argument("--grids", type=int, nargs="+", default=[1024, 1000, 999, 1001])
    parser.add_argument("--trees", type=Path, nargs="+", default=[Path(".")])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3, help="runs per grid and round")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.grids, args.repeat)))
        return 0
    runs: dict[str, list[dict]] = {str(tree): [] for tree in args.trees}
    for _ in range(args.rounds):
        for tree in args.trees:
            # The tree's own package first on the path: the script itself is this file.
            child = ["dense_cut", "--child", "--repeat", str(args.repeat), "--grids"]
            code = (
                f"import sys; sys.path.insert(0, {str(tree.resolve())!r}); "
                f"sys.argv = {[*child, *map(str, args.grids)]!r}; "
                f"exec(open({__file__!r}).read())"
            )
            done = subprocess.run(
                [sys.executable, "-c", code], cwd=tree, capture_output=True, text=True, check=True
            )
            runs[str(tree)].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(table(runs, args.grids, args.trees[0]))
    return 0


def table(runs: dict[str, list[dict]], grids: list[int], first: Path) -> str:
    """Markdown: per tree and grid the median ms of each step, the total and its ratio to
    the first grid's total in the same tree."""
    reference = runs[str(first)][0]
    lines = [
        "host ms after the download, medians (ratio: total to the first grid's)",
        "| tree | grid | " + " | ".join(STEPS) + " | total | ratio |",
        "| --- | ---: |" + " ---: |" * (len(STEPS) + 2),
    ]
    for tree, results in runs.items():
        base = 0.0
        for grid in map(str, grids):
            if any(result[grid]["digest"] != reference[grid]["digest"] for result in results):
                raise SystemExit(f"{tree}: results at {grid}^3 differ from {first}")
            medians = [
                statistics.median(t for result in results for t in result[grid]["ms"][step])
                for step in STEPS
            ]
            total = sum(medians)
            base = base or total
            cells = " | ".join(f"{ms:.1f}" for ms in medians)
            lines.append(f"| {tree} | {grid} | {cells} | {total:.1f} | {total / base:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
