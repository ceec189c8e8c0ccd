"""Every test runs with the Vulkan validation layer, and any message it reports fails the test.

Only fixtures live here; what test modules import is in tests/helpers.py."""

from __future__ import annotations

import os
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


@pytest.fixture(params=["gpu shape", "cpu shape"])
def shaped(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """A Voxelizer on lavapipe whose kernels take the GPU shape or the CPU shape
    (shaders/common.glsl, CPU_DEVICE), by taking the device for a GPU or a CPU."""
    on_cpu = request.param == "cpu shape"
    monkeypatch.setattr(Device, "is_cpu", property(lambda device: on_cpu))
    with Voxelizer() as voxelizer:
        assert cpu_defines(voxelizer.device) == {"CPU_DEVICE": int(on_cpu)}
        defines = pass_defines("branchless", subgroup_defines(voxelizer.device))
        fill = ComputePipeline(voxelizer.device, kernels.FILL_FLIPS, defines)  # never built
        assert fill.defines["CPU_DEVICE"] == int(on_cpu)
        yield voxelizer
