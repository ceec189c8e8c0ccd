"""Every test runs with the Vulkan validation layer, and any message it reports fails the test.

Only fixtures live here; what test modules import is in tests/helpers.py."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

os.environ["VOXELIZER_VALIDATION"] = "1"  # before any Vulkan object exists

import pytest

from voxelizer.api import Voxelizer, close_shared
from voxelizer.gpu.device import Device, Instance
from voxelizer.gpu.kernels import cpu_defines, subgroup_defines
from voxelizer.gpu.pipelines import ComputePipeline
from voxelizer.pipeline import kernels
from voxelizer.pipeline.kernels import pass_defines

from .helpers import SHARED_MODELS

# pytest keeps its assert-rewritten test modules only where bytecode may be written: with
# PYTHONDONTWRITEBYTECODE set, each test process would rewrite them all again (about 17 s
# of its collection on 2 cores). The test processes this one starts keep the environment's.
sys.dont_write_bytecode = False


def _messages() -> list[str]:
    instance = Instance._shared  # tests that never touch Vulkan do not create one
    return instance.messages if instance is not None else []


@pytest.fixture(scope="session")
def gpu():
    """One Voxelizer for the whole run; closing it must leave the layer nothing to report."""
    voxelizer = Voxelizer()
    yield voxelizer
    voxelizer.close()
    close_shared()
    leaks = _messages()
    assert not leaks, f"validation layer at device destruction: {leaks[0]}"


@pytest.fixture(autouse=True)
def validation_clean():
    before = len(_messages())
    yield
    new = _messages()[before:]
    if new:
        pytest.fail(f"validation layer reported {len(new)} message(s); first: {new[0]}")


@pytest.fixture(scope="session")
def models_dir() -> Path:
    """The shared models, handed to code that takes a models directory (the benchmark)."""
    if not SHARED_MODELS.is_dir():
        raise FileNotFoundError(f"{SHARED_MODELS} is missing: the tests need ../shared/models")
    return SHARED_MODELS


@pytest.fixture(scope="session")
def shaped_voxelizers() -> Iterator[dict[str, Voxelizer]]:
    """A Voxelizer on lavapipe for each shape of the kernels (shaders/common.glsl,
    CPU_DEVICE), by taking its device for a GPU or a CPU; every other device keeps its own
    kind. Opened once for the run: a fresh device compiles every kernel again."""
    real_is_cpu = Device.is_cpu.fget
    taken_for_cpu: dict[int, bool] = {}  # id(device) -> is_cpu
    opened: dict[str, Voxelizer] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            Device,
            "is_cpu",
            property(lambda device: taken_for_cpu.get(id(device), real_is_cpu(device))),
        )
        try:
            for shape, on_cpu in (("gpu shape", False), ("cpu shape", True)):
                voxelizer = opened[shape] = Voxelizer()
                taken_for_cpu[id(voxelizer.device)] = on_cpu
                assert cpu_defines(voxelizer.device) == {"CPU_DEVICE": int(on_cpu)}
                defines = pass_defines("branchless", subgroup_defines(voxelizer.device))
                fill = ComputePipeline(voxelizer.device, kernels.FILL_FLIPS, defines)  # not built
                assert fill.defines["CPU_DEVICE"] == int(on_cpu)
            yield opened
        finally:
            before = len(_messages())
            for voxelizer in opened.values():
                voxelizer.close()
    leaks = _messages()[before:]
    assert not leaks, f"validation layer at device destruction: {leaks[0]}"


@pytest.fixture(params=["gpu shape", "cpu shape"])
def shaped(request: pytest.FixtureRequest, shaped_voxelizers: dict[str, Voxelizer]) -> Voxelizer:
    """The Voxelizer of one shape of the kernels (shaped_voxelizers), for each in turn."""
    return shaped_voxelizers[request.param]
