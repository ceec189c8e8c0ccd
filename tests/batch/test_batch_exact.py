"""A batch's results are the single calls' bit for bit, for every shader variant, sort and
fill mode: whatever the batch's threads do ahead of the device (reading, placing, the thin
check's areas, the soup variants' triangle soup), the device gets the same work."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import numpy as np
import pytest

from voxelizer import voxelize_many
from voxelizer.choices import VARIANTS

from ..helpers import PROJECT_MODELS, assert_same_svo, quick_diagonal, shared_model

GRID = 24
MODELS = (
    PROJECT_MODELS / "torus_knot.ply",
    PROJECT_MODELS / "gear.ply",
    shared_model("torus.stl"),
)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("meshes")
    return [Path(shutil.copyfile(model, folder / model.name)) for model in MODELS]


@pytest.mark.parametrize(
    "sort, variant", quick_diagonal([("counting",), ("bitonic",)], sorted(VARIANTS))
)
def test_every_variant_and_sort_equals_single_calls(gpu, files, variant, sort):
    options = {"variant": variant, "sort": sort}
    expected = [gpu.voxelize(path, GRID, **options) for path in files]
    results = list(voxelize_many(files, grid=GRID, threads=2, **options))
    assert sorted(result.index for result in results) == list(range(len(files)))
    for result in results:
        assert result.status == "done", result.error
        assert_same_svo(result.result, expected[result.index])
        assert result.result.stats.counts["solid_voxels"] == expected[result.index].count()


@pytest.mark.parametrize(
    "variant, fill_mode",
    quick_diagonal(
        [("branchless",), ("combined",)], ["parity", "winding", "vote", "union", "auto"]
    ),
)
def test_every_fill_mode_equals_single_calls_dense(gpu, files, fill_mode, variant):
    options = {"variant": variant, "fill_mode": fill_mode}
    expected = [gpu.voxelize_dense(path, GRID, **options) for path in files]
    results = list(voxelize_many(files, grid=GRID, dense=True, threads=2, **options))
    for result in results:
        assert result.status == "done", result.error
        got, want = result.result, expected[result.index]
        assert np.array_equal(got.to_numpy(), want.to_numpy())
        assert np.array_equal(got.origin, want.origin) and got.voxel_size == want.voxel_size


def test_the_device_thread_finds_the_host_work_done(files, monkeypatch):
    """The thin check's projected areas and a soup variant's triangle soup are made by the
    loader threads, so that the thread driving the device only copies and records."""
    import threading

    from voxelizer.mesh import Mesh
    from voxelizer.placement import GridPlacement

    threads: dict[str, list[str]] = {"areas": [], "soup": []}
    areas, soup = Mesh.axis_areas.func, GridPlacement.make_soup

    def recorded_areas(mesh: Mesh) -> np.ndarray:
        threads["areas"].append(threading.current_thread().name)
        return areas(mesh)

    def recorded_soup(placement: GridPlacement, mesh: Mesh) -> np.ndarray:
        threads["soup"].append(threading.current_thread().name)
        return soup(placement, mesh)

    cached = functools.cached_property(recorded_areas)
    cached.__set_name__(Mesh, "axis_areas")
    monkeypatch.setattr(Mesh, "axis_areas", cached)
    monkeypatch.setattr(GridPlacement, "make_soup", recorded_soup)
    results = list(
        voxelize_many(files, grid=GRID, variant="branchless", threads=2, load_processes=0)
    )
    assert all(result.status == "done" for result in results)
    here = threading.current_thread().name
    assert threads["areas"] and here not in threads["areas"]
    assert threads["soup"] and here not in threads["soup"]


def test_a_starting_worker_process_reads_its_first_meshes_while_its_device_opens(
    gpu, files, monkeypatch
):
    """The spawned worker of a two-worker batch holds meshes before its device is open (it
    reads them meanwhile), a few only; its results equal the single calls'. (The worker in
    this process takes none here, so that the batch waits for the spawned one.)"""
    from voxelizer.batch import pool

    monkeypatch.setattr(pool._LocalWorker, "next", lambda self, wait: None)

    held_at_ready: list[int] = []
    receive = pool.WorkerPool._receive

    def recorded(self: pool.WorkerPool, slot: int):
        handle = self._handles[slot]
        was_ready, held = handle.ready, len(handle.assigned)
        yield from receive(self, slot)
        if handle.ready and not was_ready:
            held_at_ready.append(held)

    monkeypatch.setattr(pool.WorkerPool, "_receive", recorded)
    inputs = files * 4
    expected = [gpu.voxelize(path, GRID) for path in files]
    results = list(voxelize_many(inputs, grid=GRID, jobs=2, threads=2, load_processes=0))
    assert sorted(result.index for result in results) == list(range(len(inputs)))
    for result in results:
        assert result.status == "done", result.error
        assert_same_svo(result.result, expected[result.index % len(files)])
    assert held_at_ready and 1 <= held_at_ready[0] <= pool.STARTING_SHARE
