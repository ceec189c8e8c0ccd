"""Triangle grids, the build's submissions: a build is one submission with no read-back
between its passes (the ids sized before the count), a rebuild replays the recording, and
references that outgrow the ids take a second submission that emits them all; every grid
equal to the CPU reference (voxelizer/trigrid/build.py says how the build runs)."""

from __future__ import annotations

import numpy as np
import pytest

import voxelizer.trigrid.build as grid_build
from voxelizer.io import load_mesh
from voxelizer.trigrid import GridEngine, build_triangle_grid

from ..helpers import load_model
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
