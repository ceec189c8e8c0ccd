"""Triangle grids, built and traced: `python -m voxelizer.benchmarks.triangle_grid
--models-dir DIR --out DIR`.

For each mesh, side by side in this one process, each timed as wall time with the device
synchronised, the minimum of --runs after a warm-up:

* ours, uniform (density λ) and two-level: the build from a mesh whose vertices and faces
  the device holds already (`build`: the passes, in one submission for a uniform grid, two
  for two levels, their waits and the read-back of the reference count; a rebuild of the
  same mesh uploads nothing, and replays the commands recorded for the one before it; the
  grid is dropped, so its GPU times, which nobody looks at, are not read), also
  with the upload (`build+upload`: what a new mesh of the same size pays, its geometry
  written to staging memory and copied to the device), and the GPU time of its passes
  (Vulkan timestamps); the submissions of a build, references, cells, the build's peak
  device memory and the structure's;
  then --rays first-hit queries from rays on the device (the traversal's dispatch and its
  wait), in Mrays/s;
* NVIDIA Warp (where `import warp` works and it has a CUDA device): `wp.Mesh` (its BVH
  build) from points and indices on the device, and `wp.mesh_query_ray` over the same rays;
* Open3D (where it imports, with --open3d): `RaycastingScene` (Embree on the CPU), its build
  (add_triangles and the first cast, which commits the BVH) and cast_rays.

The rays: from around the mesh's box (its centre plus a normal deviate times its diagonal)
towards uniform random points inside it. Agreement: the share of rays whose first hit is
the same triangle as ours (or, for a tie, at the same distance).

Meshes: shared models by name (bunny, dragon), midpoint subdivisions (dragon-x16,
dragon-x64: benchmarks/meshes.py), and the non-homogeneous `bunny-x16+walls`: bunny-x16
(1.1M triangles) inside a box six times its size whose six walls and two diagonal planes
are 16 triangles spanning the whole box, beside `bunny-x16` alone, for the build's time per
reference of each.

It writes results.json and results.md to --out and prints the table.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from voxelizer import Voxelizer
from voxelizer.benchmarks.meshes import resolve_model
from voxelizer.mesh import Mesh
from voxelizer.trigrid import GridEngine, TriangleGrid, build_triangle_grid, queries

DEFAULT_MODELS = ("bunny", "dragon", "dragon-x16", "dragon-x64", "bunny-x16", "bunny-x16+walls")
WALLS = "+walls"
SEEDS = (  # the seeds' figures, for scale (older GPUs)
    "Kalojanov & Slusallek 2009, GTX 280: Thai Statue (10M triangles, 14.8M references) "
    "280 ms; Conference (284k triangles, 1.1M references) 27 ms",
    "Costa et al. 2024, GTX TITAN: San Miguel (10.5M triangles) over 25 Hz",
    "Warp 1.0.2 on an H200 (the issue's figures): wp.Mesh bunny 0.22 ms, dragon 0.24 ms, "
    "dragon-x16 1.29 ms, dragon-x64 5.65 ms; mesh_query_ray 528 Mrays/s on bunny, 338 on "
    "dragon, 91 on dragon-x64",
)


def load(spec: str, models_dir: Path) -> tuple[str, Mesh]:
    """A benchmark mesh: a model spec of benchmarks/meshes.py, or SPEC+walls."""
    if not spec.endswith(WALLS):
        return resolve_model(spec, models_dir)
    _, mesh = resolve_model(spec[: -len(WALLS)], models_dir)
    return spec, with_walls(mesh)


def with_walls(mesh: Mesh) -> Mesh:
    """`mesh` at the centre of a box six times its size, whose walls and two diagonal
    planes are 16 triangles that span the whole box: a teapot in a stadium."""
    low, high = mesh.vertices.min(axis=0), mesh.vertices.max(axis=0)
    centre, half = (low + high) / 2, (high - low).max() * 3
    corners = centre + half * np.array(
        [[(x, y, z) for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)]], np.float64
    ).reshape(8, 3)
    quads = [[0, 1, 3, 2], [4, 6, 7, 5], [0, 4, 5, 1], [2, 3, 7, 6], [0, 2, 6, 4], [1, 5, 7, 3]]
    quads += [[0, 3, 7, 4], [1, 2, 6, 5]]  # the two diagonal planes
    faces = [[q[0], q[1], q[2]] for q in quads] + [[q[0], q[2], q[3]] for q in quads]
    count = len(mesh.vertices)
    return Mesh(
        np.concatenate([mesh.vertices, corners]),
        np.concatenate([mesh.faces, np.array(faces, np.int64) + count]),
    )


def random_rays(mesh: Mesh, count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    low, high = mesh.vertices.min(axis=0), mesh.vertices.max(axis=0)
    centre, size = (low + high) / 2, float(np.linalg.norm(high - low))
    origins = centre + rng.normal(size=(count, 3)) * size
    targets = low + rng.random((count, 3)) * (high - low)
    return origins, targets - origins


def timed(run: Callable[[], Any], runs: int) -> tuple[float, Any]:
    """(minimum wall seconds of `runs` calls after a warm-up, the last result)."""
    result = run()  # warm-up: kernels built and compiled, buffers grown
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - started)
    return best, result


# -- ours ------------------------------------------------------------------------------------


def ours(
    engine: GridEngine,
    mesh: Mesh,
    origins: np.ndarray,
    directions: np.ndarray,
    runs: int,
    density: float,
    levels: int,
    columns: tuple[int, int],
) -> tuple[dict[str, Any], np.ndarray]:
    small, chunk = columns
    row: dict[str, Any] = {
        "method": "ours" if levels == 1 else "ours, two levels",
        "columns": f"{small},{chunk}",
    }

    def build() -> TriangleGrid:
        grid = build_triangle_grid(engine, mesh, density=density, levels=levels,
                                   small_columns=small, chunk_columns=chunk)  # fmt: skip
        grid.close()  # (its buffers go to the next build: a rebuild allocates nothing)
        return grid

    def build_dropped() -> None:
        build()

    def build_and_upload() -> None:
        engine.forget_geometry()
        build()

    # Timed with the grid dropped, its GPU times not looked at (nor read from the device);
    # the GPU time of the passes from builds after the timed ones (no upload).
    row["build_s"], _ = timed(build_dropped, runs)
    row["build_upload_s"], _ = timed(build_and_upload, runs)
    gpu_ms = []
    for _ in range(runs + 1):
        grid = build()
        if "upload" not in grid.stats.gpu_ms:
            gpu_ms.append(sum(grid.stats.gpu_ms.values()))
    stats = grid.stats
    row["build_gpu_ms"] = min(gpu_ms)
    row.update(
        submissions=stats.counts["submissions"],
        shape="x".join(map(str, grid.shape)),
        references=stats.counts["references"],
        leaf_references=stats.counts["leaf_references"],
        peak_bytes=stats.memory.device_peak_bytes,
        structure_bytes=stats.counts["structure_bytes"],
    )
    listed = row["references"] + row["leaf_references"]
    row["ns_per_reference"] = row["build_s"] * 1e9 / max(listed, 1)
    grid = build_triangle_grid(engine, mesh, density=density, levels=levels)
    device = grid.device_grid
    queries.stage_rays(
        engine, grid.placement.grid_points(origins), grid.placement.grid_directions(directions)
    )
    count = len(origins)
    row["query_s"], _ = timed(lambda: queries.trace_staged(engine, device, count), runs)
    row["mrays_per_s"] = count / row["query_s"] / 1e6
    hits, _ = queries.trace_staged(engine, device, count, download=True)
    assert hits is not None
    grid.close()
    return row, hits


# -- peers -----------------------------------------------------------------------------------


def warp_row(mesh: Mesh, origins: np.ndarray, directions: np.ndarray, runs: int) -> dict[str, Any]:
    from voxelizer.benchmarks import warp_peer

    device = warp_peer.cuda_device()
    if device is None:
        return {"method": "Warp wp.Mesh", "status": "skipped", "reason": "no CUDA device"}
    points, indices = warp_peer.upload(mesh.vertices, mesh.faces, device)
    build_s, built = timed(lambda: warp_peer.build(points, indices, device), runs)
    rays = warp_peer.rays(origins, directions, device)
    query_s, _ = timed(lambda: warp_peer.trace(built, rays, device), runs)
    t, face = warp_peer.trace(built, rays, device)
    return {
        "method": f"Warp {warp_peer.version()} wp.Mesh",
        "build_s": build_s,
        "query_s": query_s,
        "mrays_per_s": len(origins) / query_s / 1e6,
        "hits_t": t,
        "hits_face": face,
    }


def open3d_row(
    mesh: Mesh, origins: np.ndarray, directions: np.ndarray, runs: int
) -> dict[str, Any]:
    o3d: Any = importlib.import_module("open3d")  # (the test extra has it)
    vertices = o3d.core.Tensor(mesh.vertices.astype(np.float32))
    faces = o3d.core.Tensor(mesh.faces.astype(np.uint32))
    one = o3d.core.Tensor(np.array([[*origins[0], *directions[0]]], np.float32))

    def build() -> Any:
        scene = o3d.t.geometry.RaycastingScene()
        scene.add_triangles(vertices, faces)
        scene.cast_rays(one)  # commits the BVH
        return scene

    build_s, scene = timed(build, runs)
    rays = o3d.core.Tensor(np.concatenate([origins, directions], axis=1).astype(np.float32))
    query_s, result = timed(lambda: scene.cast_rays(rays), runs)
    t = result["t_hit"].numpy()
    face = result["primitive_ids"].numpy().astype(np.int64)
    face[~np.isfinite(t)] = -1
    return {
        "method": f"Open3D {o3d.__version__} RaycastingScene",
        "build_s": build_s,
        "query_s": query_s,
        "mrays_per_s": len(origins) / query_s / 1e6,
        "hits_t": t,
        "hits_face": face,
    }


def agreement(hits: np.ndarray, t: np.ndarray, face: np.ndarray) -> float:
    """Share of rays whose first hit is ours: the same triangle, or both none, or the same
    distance within 1e-4 (a tie between triangles that share the hit point)."""
    ours_face = hits["triangle"].astype(np.int64)
    same = ours_face == face
    both = (ours_face >= 0) & (face >= 0)
    close = both & np.isclose(hits["t"], t, rtol=1e-4, atol=0)
    return float((same | close).mean())


# -- the run ---------------------------------------------------------------------------------


def measure(args: argparse.Namespace) -> dict[str, Any]:
    document: dict[str, Any] = {"rays": args.rays, "runs": args.runs, "density": args.density}
    rows: list[dict[str, Any]] = []
    with Voxelizer(args.device) as vox:
        document["device"] = vox.device_name
        engine = GridEngine(vox.device)
        for spec in args.models:
            name, mesh = load(spec, args.models_dir)
            origins, directions = random_rays(mesh, args.rays)
            mine: np.ndarray | None = None
            for levels in (1, 2):
                for columns in args.columns if levels == 1 else args.columns[:1]:
                    row, hits = ours(engine, mesh, origins, directions, args.runs,
                                     args.density, levels, columns)  # fmt: skip
                    if mine is None:
                        mine = hits
                    rows.append({"model": name, "triangles": mesh.triangle_count, **row})
            assert mine is not None
            peers: list[Callable[..., dict[str, Any]]] = []
            if importlib.util.find_spec("warp") is not None and not args.no_warp:
                peers.append(warp_row)
            if args.open3d:
                peers.append(open3d_row)
            for peer in peers:
                row = peer(mesh, origins, directions, args.runs)
                if "hits_face" in row:
                    row["agreement"] = agreement(mine, row.pop("hits_t"), row.pop("hits_face"))
                rows.append({"model": name, "triangles": mesh.triangle_count, **row})
            print(table({**document, "rows": [r for r in rows if r["model"] == name]}), flush=True)
        engine.close()
    document["rows"] = rows
    document["seeds"] = list(SEEDS)
    _ratios(document)
    return document


def _ratios(document: dict[str, Any]) -> None:
    """Per model: each peer's build and query time over ours (uniform, first columns);
    and the non-homogeneous scenes' build time per reference over their base's."""
    rows = document["rows"]
    for row in rows:
        base = next(r for r in rows if r["model"] == row["model"] and r["method"] == "ours")
        if row is not base and "build_s" in row and not row["method"].startswith("ours"):
            row["build_vs_ours"] = row["build_s"] / base["build_s"]
            row["query_vs_ours"] = row["query_s"] / base["query_s"]
    for row in rows:
        if row["model"].endswith(WALLS) and row["method"].startswith("ours"):
            plain = row["model"][: -len(WALLS)]
            match = [r for r in rows if r["model"] == plain and r["method"] == row["method"]
                     and r["columns"] == row["columns"]]  # fmt: skip
            if match:
                row["per_reference_vs_homogeneous"] = (
                    row["ns_per_reference"] / match[0]["ns_per_reference"]
                )


def table(document: dict[str, Any]) -> str:
    header = (
        "| model | triangles | method | build ms | +upload ms | GPU ms | references | ns/ref "
        "| peak MB | structure MB | Mrays/s | agreement | vs ours (build, query) |"
    )
    lines = [header, "|" + " --- |" * 13]
    for row in document["rows"]:

        def number(key: str, scale: float = 1.0, digits: int = 2) -> str:
            return _number(row, key, scale, digits)  # noqa: B023 (called in this iteration)

        ratios = ""
        if "build_vs_ours" in row:
            ratios = f"{row['build_vs_ours']:.2f}, {row['query_vs_ours']:.2f}"
        if "per_reference_vs_homogeneous" in row:
            ratios = f"{row['per_reference_vs_homogeneous']:.2f} per ref. of the homogeneous"
        method = row["method"] + (f" ({row['columns']})" if "columns" in row else "")
        if "status" in row:
            method += f" ({row['status']}: {row['reason']})"
        references = row.get("references", 0) + row.get("leaf_references", 0)
        lines.append(
            f"| {row['model']} | {row['triangles']:,} | {method} | {number('build_s', 1e3, 3)} "
            f"| {number('build_upload_s', 1e3, 3)} | {number('build_gpu_ms', 1, 3)} "
            f"| {references:,} | {number('ns_per_reference', 1, 3)} "
            f"| {number('peak_bytes', 1e-6, 1)} | {number('structure_bytes', 1e-6, 1)} "
            f"| {number('mrays_per_s', 1, 1)} | {number('agreement', 1, 4)} | {ratios} |"
        )
    return "\n".join(lines)


def _number(row: dict[str, Any], key: str, scale: float, digits: int) -> str:
    value = row.get(key)
    return "" if value is None else f"{value * scale:,.{digits}f}"


def _columns(text: str) -> tuple[int, int]:
    small, _, chunk = text.partition(",")
    return int(small), int(chunk or small)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m voxelizer.benchmarks.triangle_grid")
    parser.add_argument("--models-dir", type=Path, required=True, help="holds bunny, dragon")
    parser.add_argument("--out", type=Path, required=True, help="results.json, results.md")
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    parser.add_argument("--rays", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=5, help="timed runs (minimum reported)")
    parser.add_argument("--density", type=float, default=4.0, help="cells per triangle, λ")
    parser.add_argument(
        "--columns",
        type=_columns,
        nargs="+",
        default=[(8, 8)],
        help="SMALL,CHUNK load-balance settings to build with (the first also for the rest)",
    )
    parser.add_argument("--device", help="Vulkan device index or name")
    parser.add_argument("--open3d", action="store_true", help="also Open3D's RaycastingScene")
    parser.add_argument("--no-warp", action="store_true", help="leave Warp out")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    document = measure(args)
    markdown = (
        f"Device: {document['device']}; {document['rays']:,} rays; minimum of "
        f"{document['runs']} runs; λ = {document['density']}\n\n" + table(document) + "\n"
    )
    (args.out / "results.md").write_text(markdown, encoding="utf-8")
    (args.out / "results.json").write_text(json.dumps(document, indent=2) + "\n")
    print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
