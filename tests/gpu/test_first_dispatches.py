"""On a CPU device the kernels of a call are dispatched once with no workgroups as soon as
their pipelines are built (gpu.first_dispatches.FirstDispatches): the driver compiles each
then, on its queue's thread, while the host reads the mesh. Every kernel the call uses is
among them, the results are the reference's, the thread is gone once the Voxelizer closes,
and a GPU gets no such dispatches. While the driver's shader cache is cold a second device
compiles some of them (gpu.first_dispatches.SecondCompiler)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from voxelizer import SVO, MeshError, Voxelizer
from voxelizer.gpu.device import Device
from voxelizer.gpu.first_dispatches import FirstDispatches
from voxelizer.gpu.pipelines import ComputePipeline

from ..helpers import (
    SHARED_MODELS,
    assert_same_svo,
    assert_same_voxels,
    load_model,
    reference_grid,
)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> tuple[list[ComputePipeline], list[int]]:
    """Every pipeline made from now on, and the ids of those given a first dispatch."""
    made: list[ComputePipeline] = []
    dispatched: list[int] = []
    make, dispatch = ComputePipeline.__init__, FirstDispatches.dispatch

    def record_made(pipeline: ComputePipeline, *args: object) -> None:
        make(pipeline, *args)  # type: ignore[arg-type]
        made.append(pipeline)

    def record_dispatch(first: FirstDispatches, pipeline: ComputePipeline) -> None:
        dispatched.append(id(pipeline))
        dispatch(first, pipeline)

    monkeypatch.setattr(ComputePipeline, "__init__", record_made)
    monkeypatch.setattr(FirstDispatches, "dispatch", record_dispatch)
    return made, dispatched


def no_builder_left() -> bool:
    return not any(thread.name == "voxelizer-pipelines" for thread in threading.enumerate())


@pytest.mark.parametrize("push", ["1", "0"])
@pytest.mark.parametrize("sort", ["counting", "bitonic"])
def test_every_kernel_of_a_call_is_dispatched_ahead_on_a_cpu_device(
    monkeypatch: pytest.MonkeyPatch, recorded: tuple[list, list], sort: str, push: str
) -> None:
    """With push descriptors and with descriptor sets, for both sorts: the octree and the
    dense grid of the reference, every pipeline they built dispatched ahead once."""
    monkeypatch.setenv("VOXELIZER_PUSH_DESCRIPTORS", push)
    made, dispatched = recorded
    mesh = load_model("dragon.ply")
    with Voxelizer() as voxelizer:
        assert voxelizer.device.is_cpu
        svo = voxelizer.voxelize(mesh, 64, sort=sort)
        expected = reference_grid("dragon.ply", 64).to_numpy()
        assert_same_svo(svo, SVO.from_dense(expected, svo.placement))
        grid = voxelizer.voxelize_dense(mesh, 64, sort=sort)
        assert_same_voxels(grid.to_numpy(), expected)
        built = [id(pipeline) for pipeline in made if pipeline.built]
        assert len(built) >= 13
        assert set(built) <= set(dispatched)  # none left to compile at its first real use
        assert len(dispatched) == len(set(dispatched))
        count = len(dispatched)
        voxelizer.voxelize(mesh, 64, sort=sort)  # built and compiled: nothing more
        assert len(dispatched) == count
    assert no_builder_left()


def test_a_gpu_gets_no_first_dispatches(
    monkeypatch: pytest.MonkeyPatch, recorded: tuple[list, list]
) -> None:
    monkeypatch.setattr(Device, "is_cpu", property(lambda device: False))
    made, dispatched = recorded
    with Voxelizer() as voxelizer:
        svo = voxelizer.voxelize(load_model("bunny.ply"), 64)
        expected = reference_grid("bunny.ply", 64).to_numpy()
        assert_same_svo(svo, SVO.from_dense(expected, svo.placement))
        assert any(pipeline.built for pipeline in made)
    assert dispatched == []
    assert no_builder_left()


def test_closing_right_after_the_call_starts_waits_for_the_builds(
    recorded: tuple[list, list],
) -> None:
    """A Voxelizer closed while its kernels are still being built and compiled: close waits
    for the background thread, then frees everything (the validation layer, checked after
    every test, would report a pipeline or a buffer destroyed in use, or left behind)."""
    made, _ = recorded
    voxelizer = Voxelizer()
    broken = (np.zeros((3, 3)), np.array([[0, 1, 5]]))  # a face past the vertices
    with pytest.raises(MeshError):
        voxelizer.voxelize(broken, 64)  # the kernels are started before the mesh is read
    assert made, "the call started no kernels"
    voxelizer.close()
    assert no_builder_left()


# A process on an empty driver cache (XDG_CACHE_HOME): which second devices were opened, the
# octree against the reference, every pipeline of the call dispatched ahead on the call's
# device, and the validation layer's messages.
COLD_SCRIPT = """
import json, sys
import voxelizer
from voxelizer import SVO
from voxelizer.gpu import first_dispatches
from voxelizer.gpu.device import Instance
from voxelizer.gpu.pipelines import ComputePipeline
from voxelizer.reference import voxelize_reference

opened, dispatched, made = [], {}, []
open_second = first_dispatches.SecondCompiler.open.__func__
def record_open(cls, like, count):
    second = open_second(cls, like, count)
    opened.append(second is not None)
    return second
first_dispatches.SecondCompiler.open = classmethod(record_open)
dispatch = first_dispatches.FirstDispatches.dispatch
def record_dispatch(first, pipeline):
    dispatched.setdefault(id(first.device), []).append(id(pipeline))
    dispatch(first, pipeline)
first_dispatches.FirstDispatches.dispatch = record_dispatch
make = ComputePipeline.__init__
def record_made(pipeline, *args):
    make(pipeline, *args)
    made.append(pipeline)
ComputePipeline.__init__ = record_made

mesh = voxelizer.load_mesh(sys.argv[1])
expected = voxelize_reference(mesh, 64).to_numpy()
with voxelizer.Voxelizer() as vox:
    svo = vox.voxelize(mesh, 64)
    same = svo == SVO.from_dense(expected, svo.placement)
    ours = [id(p) for p in made if p.device is vox.device and p.built]
    on_ours = dispatched.get(id(vox.device), [])
    ahead = set(ours) <= set(on_ours) and len(on_ours) == len(set(on_ours))
    twins = sum(len(ids) for device, ids in dispatched.items() if device != id(vox.device))
Instance.shared().close()
print(json.dumps({"opened": opened, "same": bool(same), "ahead": ahead, "twins": twins,
                  "messages": Instance.shared().messages}))
"""


def run_on_cache(cache: Path, **env: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", COLD_SCRIPT, str(SHARED_MODELS / "dragon.ply")],
        env={**os.environ, "XDG_CACHE_HOME": str(cache), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["messages"] == [], report["messages"][:2]
    assert report["same"] and report["ahead"], report
    return report


@pytest.mark.slow
def test_a_cold_driver_cache_shares_the_compiles_with_a_second_device(tmp_path: Path) -> None:
    """The first process on an empty cache opens a second device that compiles some of the
    kernels; the next finds them cached and opens none; with Mesa's cache turned off none
    either (the second device's work could not be handed over)."""
    cold = run_on_cache(tmp_path / "cache")
    assert cold["opened"] == [True] and cold["twins"] > 0
    warm = run_on_cache(tmp_path / "cache")
    assert warm["opened"] == [] and warm["twins"] == 0
    off = run_on_cache(tmp_path / "other", MESA_SHADER_CACHE_DISABLE="true")
    assert off["opened"] == [] and off["twins"] == 0
