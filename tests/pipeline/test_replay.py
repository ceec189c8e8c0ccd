"""The one-submission part recorded once and replayed for the next mesh (pipeline/replay.py):
every replayed result is the same bits as a fresh recording's and the CPU reference's, for
meshes above and below the recorded capacity, other placements, meshes that make no pair,
meshes that overflow the recorded pair capacity, and around an empty mesh's error."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import trimesh

from voxelizer import VARIANTS, Voxelizer
from voxelizer.choices import SORTS
from voxelizer.errors import MeshError
from voxelizer.gpu import commands
from voxelizer.gpu.commands import Sequence
from voxelizer.mesh import Mesh, checked_mesh
from voxelizer.pipeline import binning, replay
from voxelizer.pipeline.replay import (
    MIN_TRIANGLE_CAPACITY,
    PADDING_LIMIT_CPU,
    PADDING_LIMIT_GPU,
    PartReplays,
)
from voxelizer.reference import voxelize_reference

from ..helpers import assert_same_svo, assert_same_voxels

N = 32


def _sphere(subdivisions: int, radius: float, centre=(0.0, 0.0, 0.0), drop: int = 0) -> Mesh:
    """An icosphere (its first `drop` faces left out: an open mesh of fewer triangles)."""
    sphere = trimesh.creation.icosphere(subdivisions=subdivisions, radius=radius)
    faces = np.asarray(sphere.faces)[drop:]
    return checked_mesh(np.asarray(sphere.vertices) + centre, faces, "sphere")


def _stream() -> list[tuple[str, Mesh, dict]]:
    """(name, mesh, placement keywords): a capacity's meshes in several sizes and places,
    others that record afresh (a grid of another shape, another capacity), one that makes no
    pair (all of it outside the grid: no passes run), and back."""
    box = {"bounds": [[-1.2, -1.2, -1.2], [1.2, 1.2, 1.2]]}
    cube = trimesh.creation.box()
    return [
        ("sphere", _sphere(3, 1.0), {}),
        ("smaller", _sphere(3, 0.7, (0.1, 0.2, 0.0)), {}),  # the same grid, another place
        ("open", _sphere(3, 0.9, drop=100), {}),  # fewer triangles, the same capacity
        ("placed", _sphere(3, 1.0, (0.3, -0.2, 0.1)), box),  # another grid (a crop's)
        ("placed again", _sphere(3, 0.9, (-0.2, 0.1, 0.1)), box),  # (its crop's grid, too)
        ("outside", _sphere(3, 0.1, (5.0, 5.0, 5.0)), box),
        ("cube", checked_mesh(cube.vertices, cube.faces, "cube"), {}),  # another capacity
        ("sphere again", _sphere(3, 0.8), {}),
        ("smaller again", _sphere(3, 0.6), {}),
    ]


# What replays: a crop's grid is as large as the part of the mesh outside it asks for; the
# sphere's recording is still kept after the cube's ("sphere again"); a crop's SVO is built
# from its dense result, so the dense round replays the SVO round's crops.
REPLAYED = {"smaller", "open", "sphere again", "smaller again"}
REPLAYED_DENSE = REPLAYED | {"placed", "placed again"}


def _quiet(call, *args, **kw):
    """call(*args, **kw) without the open meshes' warnings."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # open meshes: the column counts warn
        return call(*args, **kw)


def _fresh(monkeypatch: pytest.MonkeyPatch, call, *args, **kw):
    """call(*args, **kw) with every one-submission part recorded afresh (no recording
    found)."""
    with monkeypatch.context() as patched:
        patched.setattr(PartReplays, "find", lambda self, *args: None)
        return _quiet(call, *args, **kw)


def _run_stream(monkeypatch, voxelizer: Voxelizer, variant: str, sort: str) -> set[str]:
    """The stream through `voxelizer`, as SVOs and then as dense grids, each result checked
    against a fresh recording's and the reference; returns the (dense or SVO, name) that
    replayed."""
    replayed = set()
    references = [voxelize_reference(mesh, N, **place).to_numpy() for _, mesh, place in _stream()]
    for dense in (False, True):
        voxelize = voxelizer.voxelize_dense if dense else voxelizer.voxelize
        for (name, mesh, place), reference in zip(_stream(), references):
            kw = {"variant": variant, "sort": sort, **place}
            got = _quiet(voxelize, mesh, N, **kw)
            fresh = _fresh(monkeypatch, voxelize, mesh, N, **kw)
            assert_same_voxels(got.to_numpy(), reference)
            if dense:
                assert np.array_equal(got.to_numpy(), fresh.to_numpy()), name
            else:
                assert_same_svo(got, fresh)
            assert got.stats.counts.get("pairs", 0) == fresh.stats.counts.get("pairs", 0), name
            assert "replayed" not in fresh.stats.counts
            if got.stats.counts.get("replayed"):
                replayed.add(("dense" if dense else "svo", name))
    return replayed


def test_a_stream_of_meshes_replays_exactly(monkeypatch):
    """One Voxelizer, one variant: the meshes after the first of a capacity replay its
    recording (counted), every result the fresh recording's and the reference's."""
    with Voxelizer() as voxelizer:
        replayed = _run_stream(monkeypatch, voxelizer, "branchless", "counting")
    assert replayed == {("svo", name) for name in REPLAYED} | {
        ("dense", name) for name in REPLAYED_DENSE
    }


@pytest.mark.parametrize("sort", SORTS)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_variant_and_sort_replays_exactly(gpu, monkeypatch, variant, sort):
    """The same for every variant and sort on the shared Voxelizer (its pool and recording
    left by other tests): the bitonic sort never takes the one-submission path."""
    replayed = _run_stream(monkeypatch, gpu, variant, sort)
    if sort == "counting":
        assert {("svo", name) for name in REPLAYED} <= replayed
    else:
        assert not replayed


def test_a_replay_that_overflows_the_pair_capacity_runs_the_general_path(monkeypatch):
    """A recording with room for few pairs, replayed for a mesh with more: its count does
    not fit, so it runs as the general path does (the fill's own submission), exactly; the
    pair buffers grow, so the next mesh records afresh, and the one after replays that."""
    monkeypatch.setattr(binning, "SPECULATIVE_PAIRS", 64)
    monkeypatch.setattr(binning, "GUESSED_PAIRS_PER_TRIANGLE", 0)
    small = _sphere(3, 0.15)  # a few dozen pairs
    large = _sphere(3, 1.0)  # hundreds
    outcomes = []
    with Voxelizer() as voxelizer:
        for mesh in (small, large, large, large):
            got = _quiet(voxelizer.voxelize_dense, mesh, N, bounds=[[-1, -1, -1], [1, 1, 1]])
            expected = voxelize_reference(mesh, N, bounds=[[-1, -1, -1], [1, 1, 1]])
            assert_same_voxels(got.to_numpy(), expected.to_numpy())
            counts, host = got.stats.counts, got.stats.host_ms
            outcomes.append((counts.get("replayed", 0), "fill_submission" in host))
    assert outcomes == [(0, False), (1, True), (0, False), (1, False)]


def test_an_empty_mesh_between_replays(monkeypatch):
    """A mesh with no triangles is refused as ever, and leaves the recording valid."""
    with Voxelizer() as voxelizer:
        first = _quiet(voxelizer.voxelize, _sphere(3, 1.0), N)
        with pytest.raises(MeshError):
            voxelizer.voxelize((np.zeros((0, 3)), np.zeros((0, 3), int)), N)
        again = _quiet(voxelizer.voxelize, _sphere(3, 1.0), N)
    assert again.stats.counts.get("replayed") == 1
    assert_same_svo(again, first)


def test_a_replay_records_nothing_and_submits_once(monkeypatch):
    """A replayed call submits no new recording: the Python-level recording calls (begin,
    dispatch) do not run, one replay does."""
    calls = {"begin": 0, "dispatch": 0, "replay": 0}
    for name in calls:
        original = getattr(Sequence, name)

        def spy(self, *args, _original=original, _name=name, **kw):
            calls[_name] += 1
            return _original(self, *args, **kw)

        monkeypatch.setattr(Sequence, name, spy)
    with Voxelizer() as voxelizer:
        _quiet(voxelizer.voxelize, _sphere(3, 1.0), N)
        recorded = dict(calls)
        calls.update(begin=0, dispatch=0, replay=0)
        again = _quiet(voxelizer.voxelize, _sphere(3, 0.9, drop=100), N)
    assert recorded["begin"] >= 1 and recorded["dispatch"] > 10
    assert calls == {"begin": 0, "dispatch": 0, "replay": 1}
    assert again.stats.counts.get("replayed") == 1


@pytest.mark.parametrize("cpu", [True, False])
def test_capacities_hold_the_mesh_within_the_padding_limit(cpu):
    """A capacity is a power of two on a GPU, the count rounded up to 4 significant bits on
    a CPU device; a mesh takes the last recording's capacities only within the limit."""

    class Device:
        is_cpu = cpu

    replays = PartReplays(Device())  # type: ignore[arg-type]
    limit = PADDING_LIMIT_CPU if cpu else PADDING_LIMIT_GPU
    for count in (1, 10, 255, 256, 257, 300, 1000, 1025, 99_976, 100_000):
        triangles, vertices = replays.capacities({}, count, count // 2)
        assert count <= triangles <= limit * max(count, MIN_TRIANGLE_CAPACITY)
        assert count // 2 + 1 <= vertices <= limit * (count // 2 + 1)
        if not cpu:
            assert triangles & (triangles - 1) == 0 and vertices & (vertices - 1) == 0
    assert replays.capacities({}, 300, 0) == ((320, 1) if cpu else (512, 1))


def test_the_replay_benchmark_counts_vulkan_calls_and_replays(tmp_path, monkeypatch):
    """python -m voxelizer.benchmarks.replay's measurement in this process, on three spheres
    of one size: per call figures, fewer Vulkan calls than a recorded call makes, replays
    counted; and its table, with this tree over the one before."""
    from voxelizer.benchmarks import replay as bench

    files = []
    for index, centre in enumerate([(0, 0, 0), (0.2, 0.1, 0), (0.1, -0.3, 0.2)]):
        sphere = trimesh.creation.icosphere(subdivisions=2, radius=1.0 - 0.1 * index)
        sphere.apply_translation(centre)
        files.append(str(tmp_path / f"sphere{index}.ply"))
        sphere.export(files[-1])
    found = bench.measure(files, [16], "size")
    figures = found["grids"]["16"]
    # The same beside busy threads, the submissions waiting at once: the same voxels.
    monkeypatch.setattr(commands, "WAIT_SPIN_S", commands.WAIT_SPIN_S)  # (set_wait's, undone)
    busy = bench.measure(files, [16], "size", busy_threads=2, wait="block")
    assert commands.WAIT_SPIN_S == 0
    assert busy["grids"]["16"]["digests"] == figures["digests"]
    assert len(figures["thread"]) == len(figures["digests"]) == 3
    assert figures["replayed"] == 1.0  # the warm-up recorded: every counted call replays
    assert 0 < figures["vulkan_calls"] < 60
    # The batch's call on prepared meshes: the same voxels, fewer calls (no options checked,
    # no thin check), every counted call replayed.
    batch = bench.measure(files, [16], "size", call="batch")["grids"]["16"]
    assert batch["digests"] == figures["digests"]
    assert batch["replayed"] == 1.0
    assert 0 < batch["vulkan_calls"] <= figures["vulkan_calls"]
    assert 0 < batch["python_calls"] < figures["python_calls"]
    summary = bench.summary([found], "16")
    text = bench.table({"before": {"16": summary}, "after": {"16": summary}}, ["16"])
    assert "| 16 | after/before | 1.00 |" in text


def test_padding_that_would_not_keep_to_the_plan_records_as_ever(monkeypatch):
    """Where the padded buffers would not fit the plan's budget, the part is recorded as it
    was before replays (one-time, for the mesh's own count): the same voxels, no replay."""
    from voxelizer.pipeline.passes import PassRunner

    monkeypatch.setattr(PassRunner, "_padding_fits", lambda self, *args: False)
    begun = []
    begin = Sequence.begin

    def spy(self, reusable=False):
        begun.append(reusable)
        return begin(self, reusable)

    monkeypatch.setattr(Sequence, "begin", spy)
    with Voxelizer() as voxelizer:
        for mesh in (_sphere(3, 1.0), _sphere(3, 0.9, drop=100)):
            got = _quiet(voxelizer.voxelize_dense, mesh, N)
            assert "replayed" not in got.stats.counts
            assert_same_voxels(got.to_numpy(), voxelize_reference(mesh, N).to_numpy())
    assert begun and not any(begun)


def _alternating() -> list[Mesh]:
    """Meshes of three capacities (on a CPU device and on a GPU) taking turns."""
    cube = trimesh.creation.box(extents=(1.6, 1.2, 1.4))
    return [
        _sphere(4, 1.0),  # 5,120 triangles
        _sphere(3, 0.8, (0.1, 0.0, 0.1)),  # 1,280
        checked_mesh(cube.vertices, cube.faces, "cube"),  # 12: the least capacity
    ]


@pytest.mark.parametrize("dense", [False, True])
def test_alternating_meshes_replay_their_own_recordings(monkeypatch, dense):
    """Meshes of different capacities taking turns each replay the recording kept for
    theirs once the buffers have grown (the first round; the second's first mesh records
    again, as the later ones grew a buffer), exactly as a fresh recording and the
    reference. On a grid of their own: the same crop for all."""
    bounds = {"bounds": [[-1.1, -1.1, -1.1], [1.1, 1.1, 1.1]]}
    meshes = _alternating()
    references = [voxelize_reference(mesh, N, **bounds).to_numpy() for mesh in meshes]
    replayed = []
    with Voxelizer() as voxelizer:
        voxelize = voxelizer.voxelize_dense if dense else voxelizer.voxelize
        for _ in range(3):
            for mesh, reference in zip(meshes, references):
                got = _quiet(voxelize, mesh, N, **bounds)
                assert_same_voxels(got.to_numpy(), reference)
                replayed.append(got.stats.counts.get("replayed", 0))
        fresh = [_fresh(monkeypatch, voxelize, mesh, N, **bounds) for mesh in meshes]
        again = [_quiet(voxelize, mesh, N, **bounds) for mesh in meshes]
    for got, expected in zip(again, fresh):
        if dense:
            assert np.array_equal(got.to_numpy(), expected.to_numpy())
        else:
            assert_same_svo(got, expected)
        assert got.stats.counts["pairs"] == expected.stats.counts["pairs"]
    assert replayed == [0, 0, 0] + [0, 1, 1] + [1, 1, 1]
    assert [got.stats.counts.get("replayed", 0) for got in again] == [1, 1, 1]


def test_the_least_recently_used_recording_goes(monkeypatch):
    """With room for two recordings, three capacities taking turns evict each other (none
    replays); two taking turns replay theirs."""
    monkeypatch.setattr(replay, "KEPT_RECORDINGS", 2)
    big, middle, small = _alternating()
    with Voxelizer() as voxelizer:
        three = [
            _quiet(voxelizer.voxelize, mesh, N).stats.counts.get("replayed", 0)
            for mesh in [big, middle, small] * 2
        ]
        two = [
            _quiet(voxelizer.voxelize, mesh, N).stats.counts.get("replayed", 0)
            for mesh in [big, small] * 2
        ]
    assert three == [0] * 6
    assert two == [0, 1, 1, 1]  # (the big mesh's recording went with the middle one's turn)
