"""What a replayed call's host work starts from: the staging copies run together
(Geometry.stage_padded), the placement kept on the Mesh
(placement_kept.py, made by a batch's reading process), and the timestamps turned into
milliseconds only when looked at (gpu/gpu_times.py). The results stay the CPU reference's,
bit for bit, for meshes prepared as a batch's reading process prepares them and sends them
through shared memory."""

from __future__ import annotations

import os
import pickle
import threading
import warnings

import numpy as np
import pytest

from voxelizer import Voxelizer, parallel
from voxelizer.api import voxelize_checked
from voxelizer.batch.readers import prepared_mesh
from voxelizer.batch.shared_meshes import SHARED, ReceivingRegion, WritingRegion
from voxelizer.gpu.gpu_times import GpuTimes, milliseconds
from voxelizer.io import load_mesh
from voxelizer.options import Options
from voxelizer.placement import GridPlacement
from voxelizer.placement_kept import kept_holds_part_of, kept_placement
from voxelizer.reference import voxelize_reference

from ..helpers import assert_same_voxels, shared_model

N = 40
MODELS = ("bunny.ply", "torus.stl", "bunny.ply")  # the bunny twice: two Meshes, one capacity


@pytest.fixture(params=[1, 4])
def threads(request):
    """numpy's row-parallel work on this many threads (parallel.use_threads)."""
    parallel.use_threads(request.param)
    yield request.param
    parallel.use_threads(None)


def _crossed(mesh):
    """The mesh as the batch's process receives it from a reading process: through a region
    of shared memory, its arrays read-only views there (the region lives while they do)."""
    fd = os.memfd_create("voxelizer-test")
    os.ftruncate(fd, 64 << 20)
    try:
        sent = WritingRegion(fd).encode(mesh)
        assert sent[0] == SHARED
        return ReceivingRegion(fd).decode(pickle.loads(pickle.dumps(sent, protocol=5)))
    finally:
        os.close(fd)


@pytest.mark.parametrize("variant", ["indexed", "branchless"])
def test_prepared_meshes_replay_to_the_reference(gpu, threads, variant):
    """Meshes prepared and sent as a batch's are (placement, placed vertices, faces and the
    soup made before the call), replayed one after another (on 1 or 4 row threads), give
    the CPU reference's voxels,
    as do the same files loaded plainly; the placement is the one the reading process made."""
    options = Options.create(N, variant=variant, fill_mode="parity")
    prepared = [_crossed(prepared_mesh(shared_model(name), options, make_soup=True))
                for name in MODELS]  # fmt: skip
    plain = [load_mesh(shared_model(name)) for name in MODELS]
    replayed = 0
    with Voxelizer() as voxelizer, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for mesh, again in zip(prepared, plain):
            kept = mesh._memo.kept["placement"][1]
            got = voxelize_checked(voxelizer, mesh, options, dense=True, count_voxels=False)
            assert got.placement is kept
            expected = voxelize_reference(again, N, "parity")
            assert_same_voxels(got.to_numpy(), expected.to_numpy())
            plainly = voxelize_checked(voxelizer, again, options, dense=True, count_voxels=False)
            assert_same_voxels(plainly.to_numpy(), expected.to_numpy())
            replayed += got.stats.counts.get("replayed", 0)
    assert replayed >= 1  # the second bunny replays the first's recording


def test_a_placement_is_kept_per_mesh_and_arguments(monkeypatch):
    mesh = load_mesh(shared_model("torus.stl"))
    made = []
    around = GridPlacement.around.__func__  # type: ignore[attr-defined]

    def counted(cls, *args, **kwargs):  # type: ignore[no-untyped-def]
        made.append(args[1:])
        return around(cls, *args, **kwargs)

    monkeypatch.setattr(GridPlacement, "around", classmethod(counted))
    first = kept_placement(mesh, (N, N, N), None, None)
    assert kept_placement(mesh, (N, N, N), None, None) is first and len(made) == 1
    fresh = GridPlacement.around(mesh, (N, N, N), None, None)
    assert fresh.shape == first.shape and np.array_equal(fresh.origin, first.origin)
    assert fresh.voxel_size == first.voxel_size
    assert not first.origin.flags.writeable  # shared by the calls: nobody changes it
    bounds = np.array([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]])
    boxed = kept_placement(mesh, (N, N, N), None, bounds)
    assert boxed is not first and not boxed.clip and len(made) == 3
    assert kept_placement(mesh, (N, N, N), None, bounds.copy()) is boxed and len(made) == 3
    assert kept_placement(mesh, (N, N, N), None, None) is not first  # only the last is kept
    assert kept_holds_part_of(mesh, first) == first.holds_part_of(mesh)
    far = GridPlacement((N, N, N), mesh.bounds[1] + 10.0, 0.1, clip=False)
    assert kept_holds_part_of(mesh, far) is False and kept_holds_part_of(mesh, first) is True


def test_gpu_times_are_fetched_once_and_converted_when_looked_at():
    """The raw timestamps are taken once (before the next submission), in any thread first;
    milliseconds wrap with a counter narrower than 64 bits."""
    fetched = []
    ticks = np.array([(1 << 36) - 10, 5, 25, 25], np.uint64).tobytes()

    def fetch() -> bytes:
        fetched.append(threading.get_ident())
        return ticks

    times = GpuTimes(fetch, threading.Lock(), ("start", "a", "b", "a"), bits=36, period_ns=2.0)
    times.fetch()
    times.fetch()
    assert len(fetched) == 1
    assert dict(times) == pytest.approx({"a": 15 * 2e-6, "b": 20 * 2e-6}, rel=1e-12)
    assert milliseconds(ticks, ("start", "a", "b", "a"), 36, 2.0) == dict(times)
    assert pickle.loads(pickle.dumps(times)) == dict(times) and len(fetched) == 1
