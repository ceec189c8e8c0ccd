"""Queries of a built triangle grid on the GPU, and its transfers between host and device.

* rays: shaders/traverse.comp, one thread per ray (first hit, or any hit), over one level
  or two; the rays go up in grid space and each comes back as a Hit (t, triangle, u, v);
* boxes: shaders/box.comp, the cells a box touches tested triangle by triangle exactly,
  the triangles found as bits, counted, scanned and listed in increasing order;
* transfers: a grid's arrays down to the host (`download`), or up from the host to a new
  DeviceGrid (`upload`, for a grid read from a file).

Each runs under the engine's lock, on its sequence and pool (build.py says who owns what).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..gpu.buffers import Binding, Buffer
from ..gpu.commands import workgroups
from ..gpu.kernels import WG_SIZE
from ..placement import FIXED_BITS
from . import kernels
from .build import RECORD_BYTES, DeviceGrid, GridEngine
from .placement import CellPlacement

# What traverse.comp writes per ray: the hit's t (+inf: none), its triangle (-1: none, -2:
# left to the host by llvmpipe's loop budget) and its barycentrics.
HIT_DTYPE = np.dtype([("t", "<f4"), ("triangle", "<i4"), ("u", "<f4"), ("v", "<f4")])
UNFINISHED = -2
ONE = 1 << FIXED_BITS


def _check(engine: GridEngine, grid: DeviceGrid) -> None:
    engine.check_open()
    if not grid.alive:
        raise ValueError("this triangle grid is closed")


LEAF_BUFFERS = ("resolutions", "leaf_base", "leaf_ends", "leaf_ids")


def grid_bindings(engine: GridEngine, grid: DeviceGrid) -> dict[str, Binding | Buffer]:
    """The grid's buffers traverse.comp binds (for one level, stand-ins for the leaves')."""
    bindings: dict[str, Binding | Buffer] = {
        name: grid.buffers[name] for name in ("records", "cell_ends", "triangle_ids")
    }
    stand_in = engine.pool.binding("trigrid_stand_in", 16)
    for name in LEAF_BUFFERS:
        bindings[name] = grid.buffers[name] if grid.levels == 2 else stand_in
    return bindings


# -- rays ------------------------------------------------------------------------------------


def upload_rays(engine: GridEngine, origins: np.ndarray, directions: np.ndarray) -> None:
    """Record the rays' upload (float32 (R, 3) each, grid space) into the engine's ray
    buffers; the caller begins and submits the sequence."""
    count = len(origins)
    for name, array in (("origins", origins), ("directions", directions)):
        target = engine.pool.get(f"trigrid_{name}", count * 12)
        engine.sequence.upload(target, np.ascontiguousarray(array, np.float32))
    engine.sequence.barrier()
    engine.sequence.mark("upload")


def record_trace(
    engine: GridEngine,
    grid: DeviceGrid,
    count: int,
    t_min: float,
    t_max: float,
    any_hit: bool,
    branchless: int = 1,
) -> Buffer:
    """Record the trace of the `count` rays in the engine's ray buffers; returns the hits'
    device buffer (HIT_DTYPE per ray)."""
    pool, sequence = engine.pool, engine.sequence
    hits = pool.get("trigrid_hits", count * HIT_DTYPE.itemsize)
    shape = grid.placement.shape
    budget = kernels.CPU_TRIP_BUDGET if engine.device.is_cpu else kernels.NO_TRIP_BUDGET
    sequence.dispatch(
        engine.pipeline(kernels.TRAVERSE, branchless),
        {
            **grid_bindings(engine, grid),
            "origins": Binding(pool.get("trigrid_origins", count * 12), count * 12),
            "directions": Binding(pool.get("trigrid_directions", count * 12), count * 12),
            "hits": Binding(hits, count * HIT_DTYPE.itemsize),
        },
        {
            "ray_count": count,
            "nx": shape[0],
            "ny": shape[1],
            "nz": shape[2],
            "t_min": float(t_min),
            "t_max": float(t_max),
            "query": int(any_hit),
            "levels": grid.levels,
            "trip_budget": budget,
        },
        workgroups(count, WG_SIZE),
    )
    sequence.barrier()
    sequence.mark("trace")
    return hits


def trace(
    engine: GridEngine,
    grid: DeviceGrid,
    origins: np.ndarray,
    directions: np.ndarray,
    *,
    t_min: float = 0.0,
    t_max: float = float("inf"),
    any_hit: bool = False,
) -> np.ndarray:
    """The hits (HIT_DTYPE (R,)) of grid-space rays, in one submission."""
    count = len(origins)
    if count == 0:
        return np.zeros(0, HIT_DTYPE)
    with engine.lock:
        _check(engine, grid)
        sequence = engine.sequence
        sequence.begin()
        sequence.mark("start")
        upload_rays(engine, origins, directions)
        hits = record_trace(engine, grid, count, t_min, t_max, any_hit)
        staging = sequence.download(hits, count * HIT_DTYPE.itemsize)
        sequence.submit()
        return staging.read(HIT_DTYPE, count)


def stage_rays(engine: GridEngine, origins: np.ndarray, directions: np.ndarray) -> None:
    """Upload grid-space rays into the engine's ray buffers, for trace_staged (a benchmark
    times the traversal alone, the rays on the device as a GPU ray tracer's are)."""
    with engine.lock:
        engine.check_open()
        engine.sequence.begin()
        upload_rays(engine, origins, directions)
        engine.sequence.submit()


def trace_staged(
    engine: GridEngine,
    grid: DeviceGrid,
    count: int,
    *,
    any_hit: bool = False,
    download: bool = False,
) -> tuple[np.ndarray | None, Mapping[str, float]]:
    """Trace the `count` rays stage_rays left on the device, in one submission: the hits
    (with `download`) and the GPU milliseconds per label."""
    with engine.lock:
        _check(engine, grid)
        sequence = engine.sequence
        sequence.begin()
        sequence.mark("start")
        hits = record_trace(engine, grid, count, 0.0, float("inf"), any_hit)
        staging = sequence.download(hits, count * HIT_DTYPE.itemsize) if download else None
        gpu_ms = sequence.submit()
        return (None if staging is None else staging.read(HIT_DTYPE, count)), gpu_ms


# -- boxes -----------------------------------------------------------------------------------


def box_cells(
    lo: np.ndarray, hi: np.ndarray, shape: tuple[int, int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """The first cell and the count of cells along each axis whose closed boxes touch the
    closed fixed-point box [lo, hi] (counts of 0 where none do)."""
    first = np.maximum(-(-lo // ONE) - 1, 0)
    last = np.minimum(hi // ONE, np.array(shape) - 1)
    return first, np.maximum(last - first + 1, 0)


def triangles_in_box(
    engine: GridEngine, grid: DeviceGrid, lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:
    """int32 indices, increasing, of the triangles that touch the fixed-point box [lo, hi]
    (int64 (3,) each, lo <= hi, within the grid's box)."""
    shape = grid.placement.shape
    first, count = box_cells(lo, hi, shape)
    cells = int(np.prod(count))
    if cells == 0 or grid.triangles == 0:
        return np.zeros(0, np.int32)
    with engine.lock:
        _check(engine, grid)
        pool, sequence = engine.pool, engine.sequence
        words = -(-grid.triangles // 32)
        flags = pool.binding("trigrid_box_flags", words * 4)
        counts = pool.binding("trigrid_box_counts", words * 4)
        found = pool.binding("trigrid_box_found", grid.triangles * 4)
        push: dict[str, object] = {
            f"{what}_{axis}": int(values[index])
            for what, values in (("lo", lo), ("hi", hi), ("first", first), ("count", count))
            for index, axis in enumerate("xyz")
        }
        push.update(nx=shape[0], ny=shape[1], nz=shape[2], word_count=words)
        bindings: dict[str, Binding | Buffer] = {
            **{name: grid.buffers[name] for name in ("records", "cell_ends", "triangle_ids")},
            "flags": flags,
            "word_counts": counts,
            "found": found,
        }
        box = engine.pipeline(kernels.BOX)
        sequence.begin()
        sequence.mark("start")
        sequence.fill(flags.buffer, 0, words * 4)
        sequence.barrier()
        sequence.dispatch(box, bindings, {**push, "stage": 0}, cells)
        sequence.barrier()
        sequence.dispatch(box, bindings, {**push, "stage": 1}, workgroups(words, WG_SIZE))
        sequence.barrier()
        total = engine.scan.record(sequence, pool, counts.buffer, words, "trigrid_box")
        sequence.dispatch(box, bindings, {**push, "stage": 2}, workgroups(words, WG_SIZE))
        sequence.barrier()
        total_staging = sequence.download(total, 4)
        sequence.submit()
        hits = int(total_staging.read(np.uint32, 1)[0])
        if hits == 0:
            return np.zeros(0, np.int32)
        sequence.begin()
        staging = sequence.download(found.buffer, hits * 4)
        sequence.submit()
        return staging.read(np.int32, hits)


# -- transfers -------------------------------------------------------------------------------


def download(engine: GridEngine, grid: DeviceGrid) -> dict[str, np.ndarray]:
    """The grid's arrays on the host: "corners" int32 (T, 3, 3) (fixed point), "offsets"
    int64 (cells + 1) and "triangle_ids" int32; for two levels also "resolutions" int32
    (cells, 3), "leaf_start" int64 (cells,), "leaf_offsets" int64 (leaves + 1) and
    "leaf_triangle_ids" int32."""
    sizes = {
        "records": grid.triangles * RECORD_BYTES,
        "cell_ends": grid.placement.cells * 4,
        "triangle_ids": grid.references * 4,
    }
    if grid.levels == 2:
        sizes.update(
            resolutions=grid.placement.cells * 16,
            leaf_base=grid.placement.cells * 4,
            leaf_ends=grid.leaves * 4,
            leaf_ids=grid.leaf_references * 4,
        )
    with engine.lock:
        _check(engine, grid)
        sequence = engine.sequence
        sequence.begin()
        staging = {
            name: sequence.download(grid.buffers[name], size)
            for name, size in sizes.items()
            if size
        }
        sequence.submit()
        raw = {
            name: buffer.read(np.uint8, sizes[name]).view(np.uint32)
            for name, buffer in staging.items()
        }
    records = raw.get("records", np.zeros(0, np.uint32)).view(np.int32).reshape(-1, 3, 4)
    arrays = {
        "corners": np.ascontiguousarray(records[:, :, :3]),
        "offsets": _offsets(raw.get("cell_ends")),
        "triangle_ids": raw.get("triangle_ids", np.zeros(0, np.uint32)).view(np.int32),
    }
    if grid.levels == 2:
        arrays["resolutions"] = raw["resolutions"].reshape(-1, 4)[:, :3].astype(np.int32)
        arrays["leaf_start"] = raw["leaf_base"].astype(np.int64)
        arrays["leaf_offsets"] = _offsets(raw.get("leaf_ends"))
        arrays["leaf_triangle_ids"] = raw.get("leaf_ids", np.zeros(0, np.uint32)).view(np.int32)
    return arrays


def _offsets(ends: np.ndarray | None) -> np.ndarray:
    offsets = np.zeros(1 + (0 if ends is None else len(ends)), np.int64)
    if ends is not None:
        offsets[1:] = ends
    return offsets


def upload(
    engine: GridEngine, placement: CellPlacement, levels: int, arrays: dict[str, np.ndarray]
) -> DeviceGrid:
    """A DeviceGrid holding `arrays` (as `download` gives them) on the engine's device."""
    corners = np.asarray(arrays["corners"], np.int32).reshape(-1, 3, 3)
    records = np.zeros((len(corners), 3, 4), np.int32)
    records[:, :, :3] = corners
    data = {
        "records": records,
        "cell_ends": np.asarray(arrays["offsets"][1:], np.uint32),
        "triangle_ids": np.asarray(arrays["triangle_ids"], np.uint32),
    }
    grid = DeviceGrid(engine, placement, levels, len(corners), len(data["triangle_ids"]))
    if levels == 2:
        resolutions = np.zeros((placement.cells, 4), np.uint32)
        resolutions[:, :3] = np.asarray(arrays["resolutions"]).reshape(-1, 3)
        data.update(
            resolutions=resolutions,
            leaf_base=np.asarray(arrays["leaf_start"], np.uint32),
            leaf_ends=np.asarray(arrays["leaf_offsets"][1:], np.uint32),
            leaf_ids=np.asarray(arrays["leaf_triangle_ids"], np.uint32),
        )
        grid.leaves = len(data["leaf_ends"])
        grid.leaf_references = len(data["leaf_ids"])
    with engine.lock:
        engine.check_open()
        try:
            sequence = engine.sequence
            sequence.begin()
            for name, array in data.items():
                target = engine.own(grid, name, array.nbytes)
                if array.nbytes:
                    sequence.upload(target, array)
            sequence.submit()
        except BaseException:
            grid.destroy()
            raise
        engine.adopt(grid)
    return grid
