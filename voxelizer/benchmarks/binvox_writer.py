"""The .binvox writer: its run-length code from the column words against the bool-grid code
it replaced, side by side in one run.

    python voxelizer/benchmarks/binvox_writer.py --out DIR [--sizes 256 512 1024] [--runs 3]
        [--models-dir DIR]

For each size N, a grid held as the GPU leaves it (column words): an analytic ball of radius
N/3 (built on the host, no device needed) and, with --models-dir, dragon.ply voxelized on
the default device. Timed, best of --runs: `voxelizer.save(grid, "x.binvox")` (what a user
pays: the run-length code, the header, the write and its fsync) with the current writer and
with the previous one (the bool grid in binvox order, its run starts by comparing it with
itself shifted by one; kept here as the baseline); the two files must be equal. Beside them,
the physical floor of any writer: one copy of the column words (reading them once), and the
bytes written. Rows go to stdout and DIR/binvox_writer.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import voxelizer
from voxelizer.grid import ColumnBits, DenseGrid, column_words
from voxelizer.io.output import open_output
from voxelizer.placement import GridPlacement


def ball_columns(n: int) -> ColumnBits:
    """The column words of the ball of radius n/3 centred in the n³ grid, built column by
    column (the z-range each column (i, j) holds), never as bools."""
    centre, radius = (n - 1) / 2, n / 3
    j, i = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")  # [j, i]: the GPU's order
    reach = radius**2 - (i - centre) ** 2 - (j - centre) ** 2
    half = np.sqrt(np.maximum(reach, 0))
    low = np.where(reach > 0, np.ceil(centre - half), 0).astype(np.int64)
    high = np.where(reach > 0, np.floor(centre + half) + 1, 0).astype(np.int64)
    first_bit = np.arange(column_words(n)) * 32
    one = np.uint64(1)
    below = np.clip(low[..., None] - first_bit, 0, 32).astype(np.uint64)
    upto = np.clip(high[..., None] - first_bit, 0, 32).astype(np.uint64)
    words = ((one << upto) - one) & ~((one << below) - one)
    return ColumnBits(words.astype(np.uint32).reshape(-1), (n, n, n))


def previous_writer(grid: DenseGrid, path: Path) -> None:
    """The .binvox writer before the code from the words: the bool grid in binvox order,
    the run starts found by comparing it with itself shifted by one voxel."""
    n = grid.shape[0]
    assert grid.columns is not None
    flat = grid.columns.to_numpy_xzy().ravel()
    starts = np.concatenate([[0], np.flatnonzero(flat[1:] != flat[:-1]) + 1])
    lengths = np.diff(np.concatenate([starts, [len(flat)]]))
    pieces = (lengths + 254) // 255
    values = np.repeat(flat[starts], pieces)
    counts = np.full(int(pieces.sum()), 255, np.int64)
    counts[np.cumsum(pieces) - 1] = lengths - 255 * (pieces - 1)
    runs = np.stack([values.astype(np.uint8), counts.astype(np.uint8)], axis=1).ravel()
    origin = grid.placement.origin
    header = (
        f"#binvox 1\ndim {n} {n} {n}\n"
        f"translate {float(origin[0])!r} {float(origin[1])!r} {float(origin[2])!r}\n"
        f"scale {float(n * grid.placement.spacing[0])!r}\ndata\n"
    )
    with open_output(path, overwrite=True) as fh:
        fh.write(header.encode("ascii"))
        fh.write(runs.tobytes())


def best_seconds(work: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


def measure(name: str, grid: DenseGrid, out: Path, runs: int) -> dict:
    """One grid: both writers timed, their files compared, the floor beside them."""
    assert grid.columns is not None
    current, previous = out / f"{name}.binvox", out / f"{name}-previous.binvox"
    words = grid.columns.words
    scratch = np.empty_like(words)
    current_s = best_seconds(lambda: voxelizer.save(grid, current, overwrite=True), runs)
    previous_s = best_seconds(lambda: previous_writer(grid, previous), runs)
    row = {
        "grid": name,
        "n": grid.shape[0],
        "current_s": current_s,
        "previous_s": previous_s,
        "ratio": previous_s / current_s,
        "words_copy_s": best_seconds(lambda: np.copyto(scratch, words), runs),
        "words_bytes": int(words.nbytes),
        "file_bytes": current.stat().st_size,
        "same_file": current.read_bytes() == previous.read_bytes(),
    }
    current.unlink()
    previous.unlink()
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="binvox_writer.py", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for files and JSON")
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--models-dir", type=Path, help="also dragon.ply from here")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    host = {"host": platform.node(), "cpus": os.cpu_count(), "python": sys.version.split()[0]}
    print(json.dumps(host), flush=True)
    for n in args.sizes:
        grids = [
            (f"ball{n}", DenseGrid.of_columns(ball_columns(n), GridPlacement(n, np.zeros(3), 1.0)))
        ]
        if args.models_dir is not None:
            dense = voxelizer.voxelize_dense(args.models_dir / "dragon.ply", n)
            grids.append((f"dragon{n}", dense))
        for name, grid in grids:
            rows.append(measure(name, grid, args.out, args.runs))
            print(json.dumps(rows[-1]), flush=True)
            del grid
    (args.out / "binvox_writer.json").write_text(json.dumps({**host, "rows": rows}, indent=2))
    return 0 if all(row["same_file"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
