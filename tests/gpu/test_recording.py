"""Recording commands (gpu/commands.py): with push descriptors and with descriptor sets, many
dispatches in one command buffer, each reading and writing its own buffers, and the same
sequence begun again; whole voxelizations on the descriptor-set path; and the SVO conversion
recorded into the passes' submission, or not where that submission has to be run again."""

from __future__ import annotations

import numpy as np
import pytest

from voxelizer import Voxelizer
from voxelizer.gpu.buffers import STAGING, BufferPool
from voxelizer.gpu.commands import Sequence
from voxelizer.gpu.device import PUSH_DESCRIPTOR_EXTENSION, Device
from voxelizer.gpu.loader import vk
from voxelizer.gpu.scan import SCAN_BLOCK, Scan
from voxelizer.pipeline import binning

from ..helpers import assert_same_svo, assert_same_voxels, load_model, reference_grid

DISPATCHES = 150  # more than one descriptor pool holds (64 sets): the pools must grow


def has_push_descriptor_extension(device: Device) -> bool:
    names = {
        extension.extensionName
        for extension in vk.vkEnumerateDeviceExtensionProperties(device.physical, None)
    }
    return PUSH_DESCRIPTOR_EXTENSION in names


@pytest.mark.parametrize("push", ["1", "0"])
def test_many_dispatches_in_one_recording(monkeypatch, push):
    """Scans of DISPATCHES different buffers recorded in one command buffer (one dispatch
    each, a few needing two levels), twice on the same sequence: every buffer holds its own
    exclusive prefix sums, whichever way the buffers are bound."""
    monkeypatch.setenv("VOXELIZER_PUSH_DESCRIPTORS", push)
    device = Device()
    pool = BufferPool(device)
    sequence = Sequence(device, pool)
    scan = Scan(device)
    try:
        expected_push = push == "1" and has_push_descriptor_extension(device)
        assert device.push_descriptors is expected_push
        rng = np.random.default_rng(int(push))
        for round in range(2):
            counts = [int(c) for c in rng.integers(1, 600, DISPATCHES)]
            counts[::37] = [SCAN_BLOCK + 1 + round] * len(counts[::37])  # two levels
            values = [rng.integers(0, 1000, count, dtype=np.uint32) for count in counts]
            buffers = [pool.get(f"values{i}", 4 * count) for i, count in enumerate(counts)]
            sequence.begin()
            for buffer, data in zip(buffers, values):
                sequence.upload(buffer, data)
            sequence.barrier()
            totals = [
                scan.record(sequence, pool, buffer, count, f"scan{i}")
                for i, (buffer, count) in enumerate(zip(buffers, counts))
            ]
            staged = [sequence.download(b, 4 * c) for b, c in zip(buffers, counts)]
            staged_totals = [sequence.download(total, 4) for total in totals]
            sequence.barrier()
            sequence.submit()
            for data, scanned, total in zip(values, staged, staged_totals):
                sums = np.cumsum(data, dtype=np.uint64)
                expected = np.concatenate([[0], sums[:-1]]).astype(np.uint32)
                assert np.array_equal(scanned.read(np.uint32, len(data)), expected)
                assert int(total.read(np.uint32, 1)[0]) == int(sums[-1])
    finally:
        sequence.destroy()
        scan.destroy()
        pool.destroy()
        device.close()


def test_voxelizations_with_descriptor_sets(monkeypatch):
    """A Voxelizer on the descriptor-set path (as on a device without push descriptors)
    gives the reference voxels, dense and as an SVO, in a loop over different meshes."""
    monkeypatch.setenv("VOXELIZER_PUSH_DESCRIPTORS", "0")
    with Voxelizer() as voxelizer:
        assert not voxelizer.device.push_descriptors
        for name, n, variant in [
            ("bunny.ply", 64, "branchless"),
            ("torus.stl", 40, "indexed"),
            ("dragon.ply", 64, "combined"),
            ("bunny.ply", 48, "naive"),
        ]:
            mesh = load_model(name)
            expected = reference_grid(name, n)
            assert_same_voxels(
                voxelizer.voxelize_dense(mesh, n, variant=variant).to_numpy(),
                expected.to_numpy(),
            )
            assert_same_voxels(
                voxelizer.voxelize(mesh, n, variant=variant).to_numpy(), expected.to_numpy()
            )


def test_svo_recorded_into_the_passes_submission(monkeypatch):
    """A slab done in one submission takes its SVO conversion along: one submission per
    call. Where that submission must be followed by others (pairs beyond the room recorded
    for them: a tiny room, on a fresh Voxelizer), the conversion recorded with it read an
    unfinished grid and is dropped; the SVO is converted from the final grid instead."""
    monkeypatch.setattr(binning, "SPECULATIVE_PAIRS", 64)
    monkeypatch.setattr(binning, "GUESSED_PAIRS_PER_TRIANGLE", 0)  # no guess: the tiny room
    submits: list[int] = []
    submit = Sequence.submit

    def counted(sequence: Sequence) -> dict[str, float]:
        submits.append(1)
        return submit(sequence)

    monkeypatch.setattr(Sequence, "submit", counted)
    mesh = load_model("bunny.ply")
    expected = reference_grid("bunny.ply", 64).to_numpy()
    with Voxelizer() as voxelizer:
        first = voxelizer.voxelize(mesh, 64)
        assert "fill_submission" in first.stats.host_ms  # the pairs did not fit: filled again
        assert len(submits) >= 3
        assert_same_voxels(first.to_numpy(), expected)
        submits.clear()
        again = voxelizer.voxelize(mesh, 64)  # the pair buffers have grown
        assert len(submits) == 1
        assert "fill_submission" not in again.stats.host_ms
        assert_same_voxels(again.to_numpy(), expected)
        assert_same_svo(again, first)


@pytest.mark.parametrize("push", ["1", "0"])
def test_a_reusable_recording_replays(monkeypatch, push):
    """A recording begun reusable is submitted again by replay(), reading what its buffers
    hold then (new data in its staging buffer: its scan), each time counted as a submission;
    one begun otherwise, or begun again since, cannot be replayed."""
    monkeypatch.setenv("VOXELIZER_PUSH_DESCRIPTORS", push)
    device = Device()
    pool = BufferPool(device)
    sequence = Sequence(device, pool)
    scan = Scan(device)
    try:
        count = SCAN_BLOCK + 5  # two levels
        values = pool.get("values", 4 * count)
        first = np.arange(count, dtype=np.uint32) % 7
        sequence.begin(reusable=True)
        sequence.upload(values, first)
        sequence.barrier()
        total = scan.record(sequence, pool, values, count, "scan")
        staged, staged_total = sequence.download(values, 4 * count), sequence.download(total, 4)
        sequence.submit()
        assert sequence.replayable and sequence.submissions == 1
        for data in (first, np.full(count, 3, np.uint32), first[::-1].copy()):
            pool.get(f"upload:{values.name}", 4 * count, STAGING, host_visible=True).write(data)
            sequence.replay()
            sums = np.cumsum(data, dtype=np.uint64)
            expected = np.concatenate([[0], sums[:-1]]).astype(np.uint32)
            assert np.array_equal(staged.read(np.uint32, count), expected)
            assert int(staged_total.read(np.uint32, 1)[0]) == int(sums[-1])
        assert sequence.submissions == 4
        sequence.begin()
        assert not sequence.replayable
        sequence.submit()
        with pytest.raises(RuntimeError, match="no reusable recording"):
            sequence.replay()
        assert sequence.submissions == 5
    finally:
        sequence.destroy()
        scan.destroy()
        pool.destroy()
        device.close()


def _record_scan(sequence: Sequence, pool: BufferPool, scan: Scan, name: str, count: int):
    """A reusable recording that uploads into buffer `name`, scans it and downloads it,
    submitted and kept: (recording, staging to write, downloaded)."""
    values = pool.get(name, 4 * count)
    sequence.begin(reusable=True)
    sequence.mark("start")
    staging = sequence.stage(values, np.zeros(count, np.uint32))
    sequence.copy(staging, values, 4 * count)
    sequence.barrier()
    scan.record(sequence, pool, values, count, name)
    sequence.mark("scan")
    downloaded = sequence.download(values, 4 * count)
    sequence.barrier()
    sequence.submit()
    return sequence.keep(), staging, downloaded


@pytest.mark.parametrize("push", ["1", "0"])
def test_kept_recordings_replay_in_turn(monkeypatch, push):
    """Recordings kept off the sequence (Sequence.keep) replay in any order, each its own
    commands, with other recordings begun and submitted on the sequence between them; a
    released one is refused, and its command buffer and descriptor pools serve the next
    recordings. Both ways of binding buffers; the validation layer watches."""
    monkeypatch.setenv("VOXELIZER_PUSH_DESCRIPTORS", push)
    device = Device()
    pool = BufferPool(device)
    sequence = Sequence(device, pool)
    scan = Scan(device)
    rng = np.random.default_rng(7)
    counts = {"a": 300, "b": SCAN_BLOCK + 3, "c": 40}
    try:
        kept = {name: _record_scan(sequence, pool, scan, name, n) for name, n in counts.items()}
        for name in ["b", "a", "c", "a", "b", "c", "c"]:
            recording, staging, downloaded = kept[name]
            data = rng.integers(0, 1000, counts[name], dtype=np.uint32)
            staging.view(np.uint32, (counts[name],))[:] = data
            times = sequence.replay(recording)
            expected = np.concatenate([[0], np.cumsum(data)[:-1]]).astype(np.uint32)
            assert np.array_equal(downloaded.read(np.uint32, counts[name]), expected)
            assert set(times) <= {"scan"}
            _record_scan(sequence, pool, scan, "other", 20)  # (kept, never replayed)
        sequence.release(kept["a"][0])
        with pytest.raises(RuntimeError):
            sequence.replay(kept["a"][0])
        again, staging, downloaded = _record_scan(sequence, pool, scan, "a", counts["a"])
        staging.view(np.uint32, (counts["a"],))[:] = 1
        sequence.replay(again)
        assert np.array_equal(downloaded.read(np.uint32, counts["a"]), np.arange(counts["a"]))
        # The sequence's own reusable recording keeps its labels across a kept one's replay.
        sequence.begin(reusable=True)
        sequence.mark("start")
        sequence.fill(pool.get("own", 64), 7)
        sequence.barrier()
        sequence.mark("own")
        sequence.submit()
        assert set(sequence.replay(again)) <= {"scan"}
        assert set(sequence.replay()) <= {"own"}
    finally:
        sequence.destroy()
        scan.destroy()
        pool.destroy()
        device.close()
