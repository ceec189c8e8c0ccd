"""The fill modes' registry (pipeline/fills/): one strategy per fill mode of the vocabulary,
and a new fill mode is one class and one registry line, which the real pipeline then runs in
every output (dense, SVO) and with the surface modes, face ids included."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from voxelizer.choices import FILL_MODES
from voxelizer.grid import ColumnBits
from voxelizer.pipeline.fills import FILLS, Fill, FillCall
from voxelizer.pipeline.fills.parity import parity
from voxelizer.pipeline.job import Job
from voxelizer.pipeline.runner import Pipeline
from voxelizer.placement import GridPlacement
from voxelizer.svo import SVO

from ..helpers import load_model, reference_grid


class Everything(Fill):
    """Every voxel of the grid set: the least a fill mode can be."""

    def dense(self, call: FillCall) -> np.ndarray:
        return np.ones(call.job.shape, bool)


class Outside(Fill):
    """The voxels parity leaves empty: a new mode made of an existing one's stages."""

    def dense(self, call: FillCall) -> ColumnBits | np.ndarray:
        return ~parity(call, dense=True).to_numpy()


@pytest.fixture
def pipeline(gpu) -> Iterator[Pipeline]:
    """A Pipeline of its own on the session's device, with two more fill modes registered."""
    added = {"everything": Everything(), "outside": Outside()}
    FILLS.update(added)
    made = Pipeline(gpu.device)
    try:
        yield made
    finally:
        made.close()
        for name in added:
            del FILLS[name]


def _job(model: str, n: int, **options: str) -> tuple[Job, GridPlacement]:
    mesh = load_model(model)
    placement = GridPlacement.around(mesh, (n, n, n), None, None)
    vertices, fine = placement.placed_vertices(mesh)
    job = Job(
        mesh=mesh,
        vertices=vertices,
        fine=fine,
        shape=placement.shape,
        variant="branchless",
        sort="counting",
        **options,
    )
    return job, placement


def _bools(voxels: ColumnBits | np.ndarray) -> np.ndarray:
    return voxels.to_numpy() if isinstance(voxels, ColumnBits) else voxels


def test_every_fill_mode_of_the_vocabulary_has_its_strategy():
    assert tuple(FILLS) == FILL_MODES
    assert all(isinstance(fill, Fill) for fill in FILLS.values())


def test_a_registered_fill_mode_runs_through_the_pipeline(pipeline):
    n = 24
    job, placement = _job("torus.stl", n, fill_mode="everything")
    voxels, stats = pipeline.dense(job)
    assert _bools(voxels).all() and _bools(voxels).shape == (n, n, n)
    assert stats.fill_mode == "everything"
    octree, stats = pipeline.svo(job)
    svo = SVO(*octree, placement, stats)  # checked against the format
    assert svo.count() == n**3 and svo.to_numpy().all()

    job, placement = _job("torus.stl", n, fill_mode="outside")
    expected = ~reference_grid("torus.stl", n).to_numpy()
    voxels, _ = pipeline.dense(job)
    assert np.array_equal(_bools(voxels), expected)
    octree, stats = pipeline.svo(job)
    assert np.array_equal(SVO(*octree, placement, stats).to_numpy(), expected)


def test_a_registered_fill_mode_takes_the_surface_of_mode_both(pipeline):
    """Mode "both" unites the new fill's solid with the conservative surface, whose face ids
    are those of mode "surface" (the solid's own voxels carry none)."""
    n = 24
    surface_job, _ = _job("torus.stl", n, mode="surface")
    surface, surface_faces, _ = pipeline.dense_faces(surface_job)
    job, placement = _job("torus.stl", n, fill_mode="outside", mode="both")
    voxels, faces, _ = pipeline.dense_faces(job)
    outside = ~reference_grid("torus.stl", n).to_numpy()
    assert np.array_equal(_bools(voxels), _bools(surface) | outside)
    assert np.array_equal(faces, surface_faces)
    octree, marked, stats = pipeline.svo_faces(job)
    svo = SVO(*octree, placement, stats).with_face_ids(marked.voxels, marked.ids)
    assert np.array_equal(svo.to_numpy(), _bools(voxels))
    assert np.array_equal(svo.to_numpy(attribute="face"), faces)
