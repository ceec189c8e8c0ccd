"""The loop of a several-worker batch (WorkerPool.results) runs in the batch's main thread,
beside the device's thread of the worker there: it waits on one selector, each pipe
registered once, and reads the workers' messages with no poll of its own per message."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import selectors
import shutil
import threading
import time
from collections import Counter
from pathlib import Path

from voxelizer import voxelize_many
from voxelizer.batch import pool
from voxelizer.batch.worker import MeshWorker

from ..helpers import PROJECT_MODELS, assert_same_svo

GRID = 16
MESHES = 8


def test_the_loop_registers_each_pipe_once_and_polls_none_per_message(gpu, tmp_path, monkeypatch):
    """Every mesh goes to the worker process (the worker here takes none): its pipe and the
    local worker's wake-up pipe are registered in the pool's selector once each, whatever
    the number of messages, and up to the last result the main thread never calls
    multiprocessing.connection.wait (which Connection.poll calls too: a fresh selector, each
    descriptor registered, per call). The results are the single calls'."""
    model = Path(shutil.copyfile(PROJECT_MODELS / "gear.ply", tmp_path / "gear.ply"))
    registered: Counter[int] = Counter()

    class CountedSelector(selectors.DefaultSelector):
        def register(self, fileobj, events, data=None):
            registered[fileobj if isinstance(fileobj, int) else fileobj.fileno()] += 1
            return super().register(fileobj, events, data)

    main = threading.main_thread()
    waits = Counter[str]()
    wait = multiprocessing.connection.wait

    def counted_wait(*args, **kwargs):
        if threading.current_thread() is main:
            waits["main"] += 1
        return wait(*args, **kwargs)

    monkeypatch.setattr(selectors, "DefaultSelector", CountedSelector)
    monkeypatch.setattr(multiprocessing.connection, "wait", counted_wait)
    monkeypatch.setattr(pool._LocalWorker, "next", lambda self, wait: None)
    expected = gpu.voxelize(model, GRID)
    results = []
    for result in voxelize_many([model] * MESHES, grid=GRID, jobs=2, threads=1,
                                load_processes=0, write_processes=0):  # fmt: skip
        results.append(result)
        if len(results) == MESHES:  # before the pool stops its worker (a join waits)
            waits_in_loop = waits["main"]
            registrations = sorted(registered.values())
    assert sorted(result.index for result in results) == list(range(MESHES))
    for result in results:
        assert result.status == "done", result.error
        assert_same_svo(result.result, expected)
    assert waits_in_loop == 0
    assert registrations == [1, 1]  # the worker's pipe, the local worker's wake-up


def test_a_worker_process_with_nothing_left_to_do_ends_before_the_batch(gpu, tmp_path, monkeypatch):
    """The worker here takes the first mesh and holds it until the worker process has given
    every other result: the process, holding no mesh with none left to hand out, is ended
    then (its device closes while the batch's last mesh is voxelized), not after the batch's
    last result. The results are the single calls'."""
    model = Path(shutil.copyfile(PROJECT_MODELS / "gear.ply", tmp_path / "gear.ply"))
    taken: list[bool] = []
    others_done = threading.Event()

    def take_one(self, wait):
        if taken:
            return None
        taken.append(True)
        return self._todo.popleft()

    def workers_alive() -> list[multiprocessing.Process]:
        return [
            p for p in multiprocessing.active_children() if p.name.startswith("voxelizer-worker")
        ]

    voxelize = MeshWorker._voxelize

    def voxelize_last(self, *args):
        others_done.wait(120)
        deadline = time.monotonic() + 20
        while workers_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        return voxelize(self, *args)

    monkeypatch.setattr(pool._LocalWorker, "next", take_one)
    monkeypatch.setattr(MeshWorker, "_voxelize", voxelize_last)  # (this process's only)
    expected = gpu.voxelize(model, GRID)
    results = []
    alive_at_the_last_result = None
    for result in voxelize_many([model] * MESHES, grid=GRID, jobs=2, threads=1,
                                load_processes=0, write_processes=0):  # fmt: skip
        results.append(result)
        if len(results) == MESHES - 1:
            others_done.set()
        if len(results) == MESHES:
            alive_at_the_last_result = workers_alive()
    assert alive_at_the_last_result == []
    assert sorted(result.index for result in results) == list(range(MESHES))
    for result in results:
        assert result.status == "done", result.error
        assert_same_svo(result.result, expected)
