"""Submissions (gpu/commands.py): the submit and the wait through the Vulkan functions
themselves, a fence polled before the blocking wait on a GPU and never on a CPU device, GPU
times read from the device only when looked at and still right after many replays, and a
fault injected into the `vulkan` module's submit or wait reported as a DeviceError, after
which the same objects give exact results again."""

from __future__ import annotations

import pickle
import threading
from collections.abc import Mapping

import numpy as np
import pytest

from voxelizer import DeviceError, Voxelizer
from voxelizer.gpu.buffers import STAGING, BufferPool
from voxelizer.gpu.commands import WAIT_SPIN_S, GpuTimes, Sequence
from voxelizer.gpu.loader import load_vulkan
from voxelizer.gpu.scan import SCAN_BLOCK, Scan

from ..helpers import (
    assert_same_voxels,
    fail_once,
    gpu_time_reads,
    load_model,
    reference_grid,
)

COUNT = SCAN_BLOCK + 5  # a scan of two levels
LABELS = {"upload", "scan", "download"}


@pytest.fixture
def scan_sequence(gpu):
    """(sequence, write, check): a reusable recording of an upload, a scan and a download,
    submitted once; write(data) puts new data where a replay reads it, check(data) asserts
    that the download holds data's exclusive prefix sums."""
    device = gpu.device
    pool = BufferPool(device)
    sequence = Sequence(device, pool)
    scan = Scan(device)
    values = pool.get("values", 4 * COUNT)
    staging = pool.get(f"upload:{values.name}", 4 * COUNT, STAGING, host_visible=True)
    sequence.begin(reusable=True)
    sequence.mark("start")
    sequence.upload(values, np.zeros(COUNT, np.uint32))
    sequence.barrier()
    sequence.mark("upload")
    scan.record(sequence, pool, values, COUNT, "scan")
    sequence.mark("scan")
    downloaded = sequence.download(values, 4 * COUNT)
    sequence.barrier()
    sequence.mark("download")
    sequence.submit()

    def check(data: np.ndarray) -> None:
        sums = np.cumsum(data, dtype=np.uint64)
        expected = np.concatenate([[0], sums[:-1]]).astype(np.uint32)
        assert np.array_equal(downloaded.read(np.uint32, COUNT), expected)

    try:
        yield sequence, staging.write, check
    finally:
        sequence.destroy()
        scan.destroy()
        pool.destroy()


def test_many_replays_give_right_results_and_right_gpu_times(scan_sequence, monkeypatch):
    """300 replays, the data changed every 30, the GPU times of each held: each result
    right; the times of each replay, looked at after later ones, are its own (read before
    the next submission overwrote them), every label there and none negative."""
    sequence, write, check = scan_sequence
    reads = gpu_time_reads(sequence, monkeypatch)
    generator = np.random.default_rng(7)
    held: list[tuple[int, Mapping[str, float]]] = []
    for replay in range(300):
        if replay % 30 == 0:
            data = generator.integers(0, 1000, COUNT, dtype=np.uint32)
            write(data)
        held.append((sequence.submissions + 1, sequence.replay()))
        if replay % 30 == 0:
            check(data)
    submitted = [submission for submission, _ in held]
    assert reads == submitted[:-1]  # each before the next submission; the last not yet
    for _, times in held:
        assert set(times) == LABELS and all(ms >= 0 for ms in times.values())
    assert reads == submitted


def test_times_nobody_looks_at_are_never_read(scan_sequence, monkeypatch):
    sequence = scan_sequence[0]
    reads = gpu_time_reads(sequence, monkeypatch)
    for _ in range(50):
        sequence.replay()  # (dropped unread)
    assert reads == []
    times = sequence.replay()
    assert isinstance(times, GpuTimes) and reads == []
    assert set(dict(times)) == LABELS and reads == [sequence.submissions]
    assert times == dict(times) and reads == [sequence.submissions]  # read once


def test_gpu_times_pickle_and_survive_the_sequence(gpu):
    """Held times outlive their sequence (read at its destroy), and pickle as a dict."""
    pool = BufferPool(gpu.device)
    sequence = Sequence(gpu.device, pool)
    sequence.begin()
    sequence.mark("start")
    sequence.fill(pool.get("filled", 1 << 16), 7)
    sequence.mark("fill")
    times = sequence.submit()
    sequence.destroy()
    pool.destroy()
    assert set(times) == {"fill"} and times["fill"] >= 0
    assert pickle.loads(pickle.dumps(times)) == dict(times)


# -- the wait --------------------------------------------------------------------------------


class CountingStatus:
    """Stands in for vkGetFenceStatus's cffi function, counting its calls."""

    def __init__(self, raw):  # type: ignore[no-untyped-def]
        self.raw, self.calls = raw, 0

    def __call__(self, *args):  # type: ignore[no-untyped-def]
        self.calls += 1
        return self.raw(*args)


def test_a_cpu_device_never_polls_the_fence(scan_sequence):
    """On lavapipe the host's cores run the work: a wait blocks at once."""
    sequence, write, check = scan_sequence
    assert sequence.device.is_cpu and sequence.wait_spin_s == 0 and WAIT_SPIN_S > 0
    status = sequence._calls.fence_status.raw = CountingStatus(sequence._calls.fence_status.raw)
    data = np.arange(COUNT, dtype=np.uint32) % 5
    write(data)
    for _ in range(20):
        sequence.replay()
    check(data)
    assert status.calls == 0


def test_a_polled_wait_gives_the_same_results(scan_sequence):
    """The poll of a GPU's wait (forced here on the CPU device), long and short: every
    result right, the fence polled, and the blocking wait still behind it."""
    sequence, write, check = scan_sequence
    status = sequence._calls.fence_status.raw = CountingStatus(sequence._calls.fence_status.raw)
    sequence.spin_only_alone = False  # (the test's process may run other threads)
    for spin in (1.0, 1e-9):
        sequence.wait_spin_s = spin
        for seed in range(5):
            data = np.random.default_rng(seed).integers(0, 99, COUNT, dtype=np.uint32)
            write(data)
            assert set(sequence.replay()) == LABELS
            check(data)
    assert status.calls >= 10


def test_beside_other_threads_the_wait_blocks_at_once(scan_sequence):
    """Where the process runs another thread (a batch's readers and writers), a GPU's wait
    does not poll (each poll would hand it the GIL): it blocks at once, the results right."""
    sequence, write, check = scan_sequence
    status = sequence._calls.fence_status.raw = CountingStatus(sequence._calls.fence_status.raw)
    sequence.wait_spin_s = 1.0  # (as on a GPU)
    assert sequence.spin_only_alone
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        for seed in range(5):
            data = np.random.default_rng(seed).integers(0, 99, COUNT, dtype=np.uint32)
            write(data)
            sequence.replay()
            check(data)
    finally:
        stop.set()
        other.join()
    assert status.calls == 0


# -- faults ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, error, message",
    [
        ("vkQueueSubmit", "VkErrorDeviceLost", "device was lost"),
        ("vkQueueSubmit", "VkErrorOutOfDeviceMemory", "out of memory"),
        ("vkWaitForFences", "VkErrorDeviceLost", "device was lost"),
    ],
)
def test_a_fault_in_the_submit_or_the_wait_is_a_device_error(monkeypatch, name, error, message):
    """The first submit (or wait) of a call fails: one DeviceError of one line; the next
    call on the same Voxelizer gives the exact voxels, the layer silent throughout."""
    mesh = load_model("torus.stl")
    expected = reference_grid("torus.stl", 40).to_numpy()
    with Voxelizer() as voxelizer:
        voxelizer.voxelize_dense(mesh, 40)  # (kernels built: the fault falls in the call)
        calls = fail_once(monkeypatch, name, getattr(load_vulkan(), error))
        with pytest.raises(DeviceError, match=message) as caught:
            voxelizer.voxelize_dense(mesh, 40)
        assert calls and "\n" not in str(caught.value)
        assert_same_voxels(voxelizer.voxelize_dense(mesh, 40).to_numpy(), expected)
