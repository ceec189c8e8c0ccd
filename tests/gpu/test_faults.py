"""Fault injection: the device runs out of memory in the middle of a job.

A real VK_ERROR_OUT_OF_DEVICE_MEMORY is hard to provoke on purpose (lavapipe allocates host
memory), so these tests make vkAllocateMemory refuse like a small device would: above a size,
or at the N-th allocation of a call. Each refusal must end the call with a one-line
DeviceError (status 1 from the command, no file left behind), and the same Voxelizer must
then give the exact voxels again, with the validation layer silent throughout."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from voxelizer import DeviceError, Voxelizer
from voxelizer.gpu.loader import load_vulkan

from ..helpers import (
    assert_one_line_error,
    assert_same_voxels,
    load_model,
    model_path,
    reference_grid,
    run_cli,
)


@contextmanager
def device_memory_refused(
    larger_than: int | None = None, at_call: int | None = None
) -> Iterator[list[int]]:
    """vkAllocateMemory raises VkErrorOutOfDeviceMemory for allocations over `larger_than`
    bytes, or for the `at_call`-th allocation (1-based) made inside the block by this thread
    (a call's; the background thread that compiles its kernels ahead on a CPU device only
    loses its head start when refused: test_a_refused_head_start_changes_nothing). Yields the
    sizes of the allocations attempted, so a test can see that the fault was reached."""
    vulkan = load_vulkan()
    allocate = vulkan.vkAllocateMemory
    attempted: list[int] = []
    caller = threading.current_thread()

    def refusing(device, info, allocator):  # type: ignore[no-untyped-def]
        if threading.current_thread() is not caller:
            return allocate(device, info, allocator)
        attempted.append(int(info.allocationSize))
        too_large = larger_than is not None and info.allocationSize > larger_than
        if too_large or len(attempted) == at_call:
            raise vulkan.VkErrorOutOfDeviceMemory()
        return allocate(device, info, allocator)

    vulkan.vkAllocateMemory = refusing
    try:
        yield attempted
    finally:
        vulkan.vkAllocateMemory = allocate


def test_out_of_device_memory_is_a_device_error_and_the_voxelizer_recovers():
    mesh = load_model("bunny.ply")
    voxelizer = Voxelizer()  # its own buffers: nothing grown yet, so every buffer is new
    try:
        refused = device_memory_refused(larger_than=64 << 10)
        with refused as attempted, pytest.raises(DeviceError, match="out of memory") as caught:
            voxelizer.voxelize_dense(mesh, 96)
        assert max(attempted) > 64 << 10  # the refusal happened, not some other error
        assert "\n" not in str(caught.value)
        again = voxelizer.voxelize_dense(mesh, 96).to_numpy()
        assert_same_voxels(again, reference_grid("bunny.ply", 96).to_numpy())
    finally:
        voxelizer.close()


def test_a_refused_head_start_changes_nothing():
    """Every allocation of the background thread that builds the kernels and gives them their
    first dispatches refused (its buffer, a second device's): the call compiles them itself,
    with no error and the exact voxels."""
    vulkan = load_vulkan()
    allocate = vulkan.vkAllocateMemory
    refused: list[int] = []

    def refusing_in_background(device, info, allocator):  # type: ignore[no-untyped-def]
        if threading.current_thread() is not threading.main_thread():
            refused.append(int(info.allocationSize))
            raise vulkan.VkErrorOutOfDeviceMemory()
        return allocate(device, info, allocator)

    voxelizer = Voxelizer()
    vulkan.vkAllocateMemory = refusing_in_background
    try:
        svo = voxelizer.voxelize(load_model("torus.stl"), 40)
    finally:
        vulkan.vkAllocateMemory = allocate
        voxelizer.close()
    assert refused  # a CPU device: the thread tried
    assert_same_voxels(svo.to_numpy(), reference_grid("torus.stl", 40).to_numpy())


@pytest.mark.parametrize("output", ["dense", pytest.param("svo", marks=pytest.mark.slow)])
def test_every_allocation_of_a_call_may_fail(output):
    """The k-th allocation of a call on a new Voxelizer fails, for every k the call makes: each
    time one DeviceError, and the next call on the same Voxelizer is exact."""
    mesh = load_model("torus.stl")
    expected = reference_grid("torus.stl", 48).to_numpy()
    probe = Voxelizer()
    with device_memory_refused() as counted:
        probe.voxelize_dense(mesh, 48) if output == "dense" else probe.voxelize(mesh, 48)
    probe.close()
    allocations = len(counted)
    assert allocations >= 5
    for k in range(1, allocations + 1):
        voxelizer = Voxelizer()
        try:
            with (
                device_memory_refused(at_call=k),
                pytest.raises(DeviceError, match="out of memory"),
            ):
                if output == "dense":
                    voxelizer.voxelize_dense(mesh, 48)
                else:
                    voxelizer.voxelize(mesh, 48)
            again = (
                voxelizer.voxelize_dense(mesh, 48)
                if output == "dense"
                else voxelizer.voxelize(mesh, 48)
            )
            assert_same_voxels(again.to_numpy(), expected)
        finally:
            voxelizer.close()


def test_the_command_reports_out_of_memory_on_one_line_and_writes_nothing(capsys, tmp_path: Path):
    out = tmp_path / "bunny.svo"
    with device_memory_refused(larger_than=64 << 10):
        code, stdout, stderr = run_cli(capsys, model_path("bunny.ply"), "--grid", 128, "-o", out)
    assert_one_line_error(code, stdout, stderr, "out of memory")
    assert list(tmp_path.iterdir()) == []
    code, _, stderr = run_cli(capsys, model_path("bunny.ply"), "--grid", 128, "-o", out, "--quiet")
    assert code == 0 and out.is_file(), stderr
