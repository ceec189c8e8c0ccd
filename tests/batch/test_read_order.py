"""The order a batch reads its files in: slow files (large, OBJ text) spread among the quick
ones, every task once, results the same whatever the order."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import trimesh

import voxelizer
from voxelizer import voxelize_many
from voxelizer.batch.tasks import MeshTask, read_order

from ..helpers import assert_same_svo, in_order
from ..shapes import box


def _files(folder: Path, sizes: dict[str, int]) -> list[Path]:
    paths = []
    for name, size in sizes.items():
        path = folder / name
        path.write_bytes(b"x" * size)
        paths.append(path)
    return paths


def _tasks(sources: list) -> list[MeshTask]:
    return [MeshTask(index=i, source=source, label=str(source)) for i, source in enumerate(sources)]


def test_the_costliest_file_comes_first_and_the_quick_ones_follow(tmp_path):
    sizes = {f"m{i}.ply": 10_000 for i in range(6)}
    sizes |= {f"big{i}.obj": 90_000 for i in range(3)}  # 9x the bytes' cost: 81x a PLY
    tasks = _tasks(_files(tmp_path, sizes))
    order = read_order(tasks)
    names = [Path(task.source).name for task in order]
    assert sorted(task.index for task in order) == list(range(len(tasks)))
    assert names[0] == "big0.obj"  # (input order among equal costs)
    # each OBJ is followed by quick files before the next: 3 OBJ cost 243 PLY, so spread
    # evenly over 9 tasks the next OBJ is due once the share of what was read catches up
    obj_places = [i for i, name in enumerate(names) if name.endswith(".obj")]
    assert obj_places[0] == 0 and all(b - a >= 2 for a, b in zip(obj_places, obj_places[1:]))


def test_the_cost_read_so_far_stays_near_its_even_share(tmp_path):
    rng = np.random.default_rng(3)
    suffixes = [".ply", ".stl", ".obj", ".glb"]
    sizes = {f"f{i}{suffixes[i % 4]}": int(rng.integers(1, 50_000)) for i in range(60)}
    paths = _files(tmp_path, sizes)
    weight = {".ply": 1, ".stl": 3, ".obj": 9, ".glb": 3}
    cost = {path: path.stat().st_size * weight[path.suffix] for path in paths}
    order = read_order(_tasks(paths))
    share = sum(cost.values()) / len(paths)
    spent = 0.0
    for k, task in enumerate(order, start=1):
        spent += cost[task.source]
        assert spent <= k * share + max(cost.values())  # never a run of the costly ones


def test_meshes_in_memory_and_missing_files_keep_their_order(tmp_path):
    meshes = [box((0, 0, 0), (1, 1, 1)) for _ in range(4)]
    assert read_order(_tasks(meshes)) == _tasks(meshes)
    missing = [tmp_path / f"gone{i}.ply" for i in range(3)]
    assert read_order(_tasks(missing)) == _tasks(missing)


def test_a_batch_in_read_order_gives_every_result_as_single_calls(tmp_path, models_dir):
    """Mixed formats and sizes: the reads go in read_order (one loader thread, one mesh
    ahead: the results come in the order read), each result under its own index."""
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(models_dir / "bunny.ply", folder / "a_bunny.ply")
    shutil.copy(models_dir / "torus.stl", folder / "b_torus.stl")
    trimesh.load(models_dir / "dragon.ply").export(folder / "c_dragon.obj")
    shutil.copy(models_dir / "suzanne.ply", folder / "d_suzanne.ply")
    inputs = sorted(folder.iterdir())
    expected = [task.index for task in read_order(_tasks(inputs))]
    assert expected != list(range(len(inputs)))  # the OBJ (costliest) goes first
    results = list(voxelize_many(inputs, grid=24, threads=1, prefetch=1, load_processes=0))
    assert [result.index for result in results] == expected
    for result in in_order(results):
        assert_same_svo(result.result, voxelizer.voxelize(inputs[result.index], grid=24))
