"""The Ray actors' batch engine without a cluster: one MeshWorker running on across calls
that overlap (voxelizer.batch.ray_stream), each call getting its own rows' results, equal
to the single calls bit for bit; a failed mesh is its call's row and the next calls go on."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

import voxelizer
from voxelizer.api import shared_voxelizer
from voxelizer.batch.ray_stream import StreamingWorker, chunks_of
from voxelizer.batch.tasks import BatchSettings, MeshTask
from voxelizer.batch.worker import MeshWorker
from voxelizer.options import Options

from ..helpers import PROJECT_MODELS

GRID = 12
MODELS = [PROJECT_MODELS / "gear.ply", PROJECT_MODELS / "torus_knot.ply"]


def settings() -> BatchSettings:
    return BatchSettings(
        options=Options.create(GRID), dense=True, threads=2, prefetch=4, load_processes=0
    )


def tasks_of(paths: list[Path]) -> list[MeshTask]:
    return [MeshTask(index=row, source=path, label=str(path)) for row, path in enumerate(paths)]


def test_overlapping_calls_share_one_running_worker(tmp_path):
    """Three calls at once, each its rows numbered from 0: every call gets its own results,
    in its rows' order and numbering, equal to the single call; the worker's thread and its
    Voxelizer are the same for all of them, and stay for the next call."""
    opened = []

    def open_voxelizer() -> voxelizer.Voxelizer:
        opened.append(1)
        return shared_voxelizer()

    def stream_threads() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "voxelizer-stream"}

    others = stream_threads()  # (other tests' actors, if any, in this process)
    stream = StreamingWorker(MeshWorker(open_voxelizer, settings(), keep_threads=True))
    calls = [MODELS, MODELS[::-1], MODELS + MODELS]
    got: dict[int, list] = {}

    def call(number: int) -> None:
        got[number] = [future.result() for future in stream.submit(tasks_of(calls[number]))]

    threads = [threading.Thread(target=call, args=(number,)) for number in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    expected = {path: voxelizer.voxelize_dense(path, grid=GRID) for path in MODELS}
    for number, paths in enumerate(calls):
        assert [result.index for result in got[number]] == list(range(len(paths)))
        for path, result in zip(paths, got[number]):
            assert result.status == "done" and result.input == str(path), result.error
            assert np.array_equal(result.result.to_numpy(), expected[path].to_numpy())
            assert np.array_equal(result.result.origin, expected[path].origin)
    (serving,) = stream_threads() - others
    (again,) = [future.result() for future in stream.submit(tasks_of(MODELS[:1]))]
    assert again.status == "done" and again.index == 0
    assert opened == [1]  # one device for every call
    assert stream_threads() - others == {serving}
    stream.close()


def test_a_failed_mesh_is_its_row_and_the_next_call_goes_on(tmp_path):
    """A file that is no mesh: a failed result (one line naming it) in its call's row; the
    rows around it, and the call after it, are done."""
    bad = tmp_path / "bad.ply"
    bad.write_bytes(b"ply\nformat ascii 1.0\nelement vertex 3\nend_header\n")
    stream = StreamingWorker(MeshWorker(shared_voxelizer, settings(), keep_threads=True))
    first = [future.result() for future in stream.submit(tasks_of([MODELS[0], bad, MODELS[1]]))]
    assert [result.status for result in first] == ["done", "failed", "done"]
    assert first[1].error is not None and first[1].error.startswith(f"{bad}: ")
    assert "\n" not in first[1].error
    second = [future.result() for future in stream.submit(tasks_of(MODELS))]
    assert [result.status for result in second] == ["done", "done"]
    stream.close()


def test_a_worker_that_breaks_fails_its_calls_and_the_next_call_restarts_it():
    """An error out of the worker itself (not a mesh's): every waiting call gets it, and
    the next call runs on a new start of the worker."""
    broken = [True]

    def open_voxelizer() -> voxelizer.Voxelizer:
        if broken:
            broken.pop()
            raise RuntimeError("no device today")
        return shared_voxelizer()

    stream = StreamingWorker(MeshWorker(open_voxelizer, settings(), keep_threads=True))
    futures = stream.submit(tasks_of(MODELS))
    with pytest.raises(RuntimeError, match="no device today"):
        futures[0].result(timeout=120)
    with pytest.raises(RuntimeError, match="no device today"):
        futures[1].result(timeout=120)
    results = [future.result(timeout=120) for future in stream.submit(tasks_of(MODELS))]
    assert [result.status for result in results] == ["done", "done"]
    stream.close()


def test_rows_go_to_actors_as_column_chunks():
    rows = [{"index": i, "path": f"m{i}.ply"} for i in range(5)]
    chunks = list(chunks_of(rows, 2))
    assert chunks == [
        {"index": [0, 1], "path": ["m0.ply", "m1.ply"]},
        {"index": [2, 3], "path": ["m2.ply", "m3.ply"]},
        {"index": [4], "path": ["m4.ply"]},
    ]


def test_the_last_chunks_shrink_so_that_the_actors_finish_together():
    """With 6 chunks in flight, no chunk holds more than a sixth of the rows left: full
    chunks while many are left, then smaller ones down to single rows; every row once."""
    rows = [{"index": i} for i in range(100)]
    sizes = [len(chunk["index"]) for chunk in chunks_of(rows, 16, parts=6)]
    assert sizes[:2] == [16, 14] and sizes[-3:] == [1, 1, 1]
    assert sizes == sorted(sizes, reverse=True)
    left = 100
    for size in sizes:
        assert size <= max(1, left // 6)
        left -= size
    joined = [i for chunk in chunks_of(rows, 16, parts=6) for i in chunk["index"]]
    assert joined == list(range(100))


def test_map_batches_actors_take_several_batches_at_once_where_ray_data_can():
    """voxelize_dataset's pool: each actor CHUNKS_IN_FLIGHT batches in flight, run side by
    side; a Ray Data without concurrent calls gets the batches queued instead, no error."""
    import ray.data

    from voxelizer.batch.ray import _actor_pool
    from voxelizer.batch.ray_stream import CHUNKS_IN_FLIGHT

    pool = _actor_pool(ray.data.ActorPoolStrategy, 2)
    assert pool.min_size == pool.max_size == 2
    assert pool.max_tasks_in_flight_per_actor == CHUNKS_IN_FLIGHT
    assert pool.max_concurrent_calls_per_actor == CHUNKS_IN_FLIGHT
    assert pool.enable_true_multi_threading is True

    class OlderStrategy:
        def __init__(self, *, size: int, max_tasks_in_flight_per_actor: int):
            self.arguments = (size, max_tasks_in_flight_per_actor)

    assert _actor_pool(OlderStrategy, 3).arguments == (3, CHUNKS_IN_FLIGHT)


@pytest.mark.parametrize("actors", [0, -1, 1.5, True])
def test_a_pool_of_no_actors_is_refused(actors, tmp_path):
    """No actor would voxelize anything: a DeviceError, not a batch that gives no results."""
    from voxelizer.batch.ray import voxelize_files_on_ray
    from voxelizer.errors import DeviceError

    with pytest.raises(DeviceError, match="actors must be"):
        list(voxelize_files_on_ray(MODELS, address="127.0.0.1:1", out_dir=tmp_path, actors=actors))
