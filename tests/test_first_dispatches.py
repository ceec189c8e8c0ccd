"""On a CPU device the kernels of a call are dispatched once with no workgroups as soon as
their pipelines are built (gpu.commands.FirstDispatches): the driver compiles each then, on
its queue's thread, while the host reads the mesh. Every kernel the call uses is among them,
the results are the reference's, the thread is gone once the Voxelizer closes, and a GPU
gets no such dispatches."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from voxelizer import SVO, MeshError, Voxelizer
from voxelizer.gpu.commands import FirstDispatches
from voxelizer.gpu.device import Device
from voxelizer.gpu.pipelines import ComputePipeline

from .helpers import assert_same_svo, assert_same_voxels, load_model, reference_grid


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
    made, dispatched = recorded
    voxelizer = Voxelizer()
    broken = (np.zeros((3, 3)), np.array([[0, 1, 5]]))  # a face past the vertices
    with pytest.raises(MeshError):
        voxelizer.voxelize(broken, 64)  # the kernels are started before the mesh is read
    assert made, "the call started no kernels"
    voxelizer.close()
    assert no_builder_left()
