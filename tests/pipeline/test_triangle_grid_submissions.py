"""Triangle grids, the build's submissions: a build is one submission with no read-back
between its passes (the ids sized before the count), a rebuild replays the recording, and
references that outgrow the ids take a second submission that emits them all; every grid
equal to the CPU reference (voxelizer/trigrid/build.py says how the build runs)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import voxelizer.trigrid.build as grid_build
from voxelizer import DeviceError
from voxelizer.gpu.loader import load_vulkan
from voxelizer.io import load_mesh
from voxelizer.trigrid import GridEngine, build_triangle_grid

from ..helpers import fail_once, gpu_time_reads, load_model
from ..shapes import sphere
from .test_triangle_grid import assert_matches_reference


@pytest.fixture(scope="module")
def engine(gpu):
    grids = GridEngine(gpu.device)
    yield grids
    grids.close()


def built(engine, mesh, **options):
    """The grid, and the submissions its build took (the engine's count)."""
    before = engine.submissions
    grid = build_triangle_grid(engine, mesh, **options)
    taken = engine.submissions - before
    assert grid.stats.counts["submissions"] == taken
    return grid, taken


def test_a_build_is_one_submission_and_a_rebuild_replays_it(engine):
    """A new mesh: one submission; the same mesh again, its grid closed in between (its
    buffers go to the next build): one submission, replayed as recorded; then another mesh
    of the same size: recorded afresh. Each grid is the reference's."""
    mesh = load_mesh(sphere((0, 0, 0), 1.0, subdivisions=3))
    other = load_mesh(sphere((0.1, 0.2, 0.3), 1.0, subdivisions=3))
    expected = None
    for round, (which, replayed) in enumerate([(mesh, 0), (mesh, 0), (mesh, 1), (mesh, 1),
                                               (other, 0), (other, 0), (other, 1)]):  # fmt: skip
        grid, taken = built(engine, which, density=4.0)
        assert taken == 1, f"build {round} took {taken} submissions"
        assert grid.stats.counts.get("replayed", 0) == replayed, round
        assert_matches_reference(grid)
        if which is mesh:
            arrays = grid.to_numpy()
            expected = arrays if expected is None else expected
            assert np.array_equal(arrays["offsets"], expected["offsets"])
        grid.close()


def test_new_meshes_of_one_size_replay_the_recording_with_their_upload(engine):
    """Meshes of the same size placed alike, each new to the device (an animation's frames):
    the first is recorded, every later one replays that recording, its geometry written into
    the staging buffers the recording copies from, and each grid is its own mesh's."""
    for frame in range(4):
        mesh = load_mesh(sphere((0.01 * frame, 0, 0), 1.0, subdivisions=2))
        grid, taken = built(engine, mesh, density=4.0)
        assert taken == 1
        assert grid.stats.counts.get("replayed", 0) == (frame > 0), frame
        assert "upload" in grid.stats.gpu_ms
        assert_matches_reference(grid)
        grid.close()


def test_a_model_builds_in_one_submission_at_every_density(engine):
    mesh = load_model("torus_knot.ply")
    for density in (1 / 16, 4.0, 32.0):
        grid, taken = built(engine, mesh, density=density)
        assert taken == 1, f"density {density}: {taken} submissions"
        assert_matches_reference(grid)
        grid.close()


def test_a_two_level_build_is_two_submissions(engine):
    """The top level with each top cell's resolution, then the leaves."""
    grid, taken = built(engine, load_mesh(sphere((0, 0, 0), 1.0, subdivisions=2)), levels=2)
    assert taken == 2
    assert_matches_reference(grid)
    grid.close()


@pytest.mark.parametrize("levels", [1, 2])
def test_references_beyond_the_ids_take_one_more_submission(gpu, monkeypatch, levels):
    """With the ids sized for one reference before the count (on an engine with no buffers
    given back to reuse), every level's emission waits for a second submission, and the
    grid is still the reference's; the rebuild sizes them for the count it learned and goes
    back to one submission a level."""
    monkeypatch.setattr(grid_build, "reference_estimate", lambda items, cells: 1)
    engine = GridEngine(gpu.device)
    try:
        mesh = load_mesh(sphere((0, 0, 0), 1.0, subdivisions=2))
        grid, taken = built(engine, mesh, levels=levels)
        assert taken == 2 * levels
        assert grid.stats.counts["emissions_again"] == levels
        assert_matches_reference(grid)
        grid.close()
        grid, taken = built(engine, mesh, levels=levels)
        assert taken == levels and "emissions_again" not in grid.stats.counts
        assert_matches_reference(grid)
        grid.close()
    finally:
        engine.close()


def test_replayed_builds_keep_their_gpu_times(engine, monkeypatch):
    """Builds replayed many times, each grid held: the GPU times of each, looked at after
    later builds, are its own passes' (read before the next build's submission, as it was
    held); none is read while nobody holds it; the last grid is exact."""
    mesh = load_model("torus.stl")
    engine.forget_geometry()
    first = build_triangle_grid(engine, mesh, density=4.0)
    labels = set(first.stats.gpu_ms)
    assert {"upload", "cells_count", "cells_emit"} <= labels
    first.close()
    reads = gpu_time_reads(engine.build_sequence, monkeypatch)
    grids = []
    for _ in range(40):
        grid = build_triangle_grid(engine, mesh, density=4.0)
        grid.close()
        grids.append(grid)
    assert all(grid.stats.counts["replayed"] == 1 for grid in grids[1:])
    assert len(reads) == len(grids) - 1  # (the last one's not yet)
    for grid in grids:
        assert set(grid.stats.gpu_ms) == labels - {"upload"}
        assert all(ms >= 0 for ms in grid.stats.gpu_ms.values())
        assert pickle.loads(pickle.dumps(grid.stats)).gpu_ms == grid.stats.gpu_ms
    assert len(reads) == len(grids)
    del grids, grid
    for _ in range(10):  # dropped unread: never read
        build_triangle_grid(engine, mesh, density=4.0).close()
    assert len(reads) == 40
    last = build_triangle_grid(engine, mesh, density=4.0)
    assert_matches_reference(last)
    last.close()


@pytest.mark.parametrize("name", ["vkQueueSubmit", "vkWaitForFences"])
def test_a_fault_in_a_replayed_build_is_a_device_error(engine, monkeypatch, name):
    """A replayed build whose submit (or wait, with the fence poll of a GPU on: the fault
    still reaches it) fails: a DeviceError; the next build replays and is exact."""
    monkeypatch.setattr(engine.build_sequence, "wait_spin_s", 1.0)
    mesh = load_model("torus.stl")
    for _ in range(2):
        build_triangle_grid(engine, mesh, density=4.0).close()
    calls = fail_once(monkeypatch, name, load_vulkan().VkErrorDeviceLost)
    with pytest.raises(DeviceError, match="device was lost"):
        build_triangle_grid(engine, mesh, density=4.0)
    assert calls
    grid = build_triangle_grid(engine, mesh, density=4.0)
    assert grid.stats.counts["replayed"] == 1
    assert_matches_reference(grid)
    grid.close()
