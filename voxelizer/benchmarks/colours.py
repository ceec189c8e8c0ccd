"""What colours, labels and the printing outputs cost, and how large their files are:
`python -m voxelizer.benchmarks.colours OUT_DIR --textured CesiumMilkTruck.glb --part
featuretype.stl [--grid 128] [--part-voxels 1000] [--runs 5]`.

The textured model (trimesh's CesiumMilkTruck.glb: 3,624 triangles, five primitives, one
texture): the file read into a Mesh (glTF, textures decoded), then `voxelize(mesh, grid)`
plain, with `colors=True`, with `labels=True` and with both, alternately `runs` times after
one warm-up call each (so that a busy machine slows all alike), median wall times and their
ratio to the plain call; then the coloured, labelled result written as .vox, .ply, .glb,
.svo, .npz and .vti (wall time, bytes).

The part (featuretype.stl, a CAD part whose box is 1000 x 500 x 275): voxelized with the
voxel size that gives its longest side `part_voxels` voxels (1000 x 500 x 276 at 1000), then
written as a binary .stl, a .ply (float32 where exact, else float64: said in the table) and
a PNG slice stack (wall time, bytes); and, for the float32 .ply, as a .ply on the power of
two voxel size at or below that one, on a box of whole voxels (every vertex a float32). The
results go to OUT_DIR/colours.json, the files under OUT_DIR, the tables to stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

import voxelizer
from voxelizer import SVO, Voxelizer

CALLS = {  # (colors, labels)
    "plain": (False, False),
    "colors": (True, False),
    "labels": (False, True),
    "colors+labels": (True, True),
}
TEXTURED_FORMATS = ("vox", "ply", "glb", "svo", "npz", "vti")
PRINT_FORMATS = ("stl", "ply")


def _saved(result: SVO, path: Path) -> dict[str, Any]:
    """Write `result` to `path` (a folder: its slice stack); the time and the bytes."""
    started = time.perf_counter()
    if path.suffix:
        voxelizer.save(result, path, overwrite=True)
    else:
        voxelizer.write_slices(result, path, overwrite=True)
    seconds = time.perf_counter() - started
    size = sum(p.stat().st_size for p in path.iterdir()) if path.is_dir() else path.stat().st_size
    return {"file": path.name, "seconds": seconds, "bytes": size}


def textured(vox: Voxelizer, path: Path, grid: int, runs: int, out: Path) -> dict[str, Any]:
    """The calls side by side on the textured model, then its files."""
    started = time.perf_counter()
    mesh = voxelizer.load_mesh(path)
    read_s = time.perf_counter() - started
    times: dict[str, list[float]] = {name: [] for name in CALLS}
    results: dict[str, SVO] = {}
    for colors, labels in CALLS.values():  # warm-up: kernels, buffers, the texture's first use
        vox.voxelize(mesh, grid, colors=colors, labels=labels)
    for _ in range(runs):
        for name, (colors, labels) in CALLS.items():
            started = time.perf_counter()
            results[name] = vox.voxelize(mesh, grid, colors=colors, labels=labels)
            times[name].append(time.perf_counter() - started)
    median = {name: statistics.median(values) for name, values in times.items()}
    both = results["colors+labels"]
    files = [_saved(both, out / f"{path.stem}-{grid}.{suffix}") for suffix in TEXTURED_FORMATS]
    colours = both.to_numpy("color")[both.to_numpy()]
    return {
        "model": path.name,
        "triangles": mesh.triangle_count,
        "grid": list(both.shape),
        "read_seconds": read_s,
        "voxels": {name: result.count() for name, result in results.items()},
        "parts": list(both.label_names),
        "distinct_colours": len(np.unique(colours.view(np.uint32))),
        "median_seconds": median,
        "ratio_to_plain": {name: median[name] / median["plain"] for name in CALLS},
        "files": files,
    }


def printed(vox: Voxelizer, path: Path, part_voxels: int, out: Path) -> dict[str, Any]:
    """The part at the printer's resolution, and its files for printing."""
    mesh = voxelizer.load_mesh(path)
    extents = mesh.vertices.max(axis=0) - mesh.vertices.min(axis=0)
    size = float(extents.max()) / part_voxels
    vox.voxelize(mesh, voxel_size=size)  # warm-up
    started = time.perf_counter()
    part = vox.voxelize(mesh, voxel_size=size)
    seconds = time.perf_counter() - started
    targets = [out / f"{path.stem}.{suffix}" for suffix in PRINT_FORMATS]
    files = [_saved(part, target) for target in [*targets, out / f"{path.stem}-layers"]]
    return {
        "model": path.name,
        "triangles": mesh.triangle_count,
        "grid": list(part.shape),
        "voxel_size": size,
        "voxels": part.count(),
        "voxelize_seconds": seconds,
        "ply_float32": _float32(out / f"{path.stem}.ply"),
        "files": files,
        "dyadic": _dyadic_ply(vox, mesh, size, out / f"{path.stem}-dyadic.ply"),
    }


def _float32(ply: Path) -> bool:
    return b"property float x" in ply.read_bytes()[:400]


def _dyadic_ply(vox: Voxelizer, mesh: voxelizer.Mesh, size: float, target: Path) -> dict[str, Any]:
    """The part on the power of two voxel size at or below `size`, on a box of whole voxels
    from a multiple of it: every vertex is a float32, so the .ply is float32."""
    dyadic = 2.0 ** np.floor(np.log2(size))
    low = np.floor(mesh.vertices.min(axis=0) / dyadic) * dyadic
    high = np.ceil(mesh.vertices.max(axis=0) / dyadic) * dyadic
    part = vox.voxelize(mesh, voxel_size=dyadic, bounds=(low, high))
    row = _saved(part, target)
    row.update(grid=list(part.shape), voxel_size=dyadic, voxels=part.count())
    return {**row, "ply_float32": _float32(target)}


def _print_tables(textured_row: dict[str, Any], part_row: dict[str, Any]) -> None:
    grid = "x".join(map(str, textured_row["grid"]))
    print(
        f"{textured_row['model']}: {textured_row['triangles']:,} triangles, grid {grid}, "
        f"read in {textured_row['read_seconds']:.2f} s, {textured_row['distinct_colours']:,} "
        f"colours, parts {', '.join(textured_row['parts'])}"
    )
    print("| call | voxels | median (s) | ÷ plain |")
    print("| --- | ---: | ---: | ---: |")
    for name in CALLS:
        print(
            f"| {name} | {textured_row['voxels'][name]:,} | "
            f"{textured_row['median_seconds'][name]:.3f} | {textured_row['ratio_to_plain'][name]:.2f} |"
        )
    grid = "x".join(map(str, part_row["grid"]))
    print(
        f"\n{part_row['model']}: grid {grid} (voxel {part_row['voxel_size']:g}), "
        f"{part_row['voxels']:,} voxels, voxelized in {part_row['voxelize_seconds']:.2f} s, "
        f".ply {'float32' if part_row['ply_float32'] else 'float64'}"
    )
    dyadic = part_row["dyadic"]
    print(
        f"{dyadic['file']}: grid {'x'.join(map(str, dyadic['grid']))} (voxel "
        f"{dyadic['voxel_size']:g}), {dyadic['voxels']:,} voxels, "
        f".ply {'float32' if dyadic['ply_float32'] else 'float64'}"
    )
    print("| file | bytes | written (s) |")
    print("| --- | ---: | ---: |")
    for row in [*textured_row["files"], *part_row["files"], dyadic]:
        print(f"| {row['file']} | {row['bytes']:,} | {row['seconds']:.2f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--textured", type=Path, required=True, help="CesiumMilkTruck.glb")
    parser.add_argument("--part", type=Path, required=True, help="featuretype.stl")
    parser.add_argument("--grid", type=int, default=128)
    parser.add_argument("--part-voxels", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--device", default=None)
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with Voxelizer(args.device) as vox, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the truck's UVs outside [0, 1]: measured, not shown
        textured_row = textured(vox, args.textured, args.grid, args.runs, args.out_dir)
        part_row = printed(vox, args.part, args.part_voxels, args.out_dir)
        device = vox.device_name
    result = {"device": device, "textured": textured_row, "part": part_row}
    (args.out_dir / "colours.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"device: {device}")
    _print_tables(textured_row, part_row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
