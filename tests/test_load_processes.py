"""Meshes read in helper processes (voxelizer/load_processes.py), as voxelize_many does on
hosts with cores to spare: the same meshes, the same errors and results as reading them
here, a helper that dies costs one mesh, and a user's script needs no main guard."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import voxelizer
from voxelizer import voxelize_many
from voxelizer.errors import MeshError
from voxelizer.io import load_mesh
from voxelizer.load_processes import LoadProcesses, prepared_mesh
from voxelizer.placement import GridPlacement

from .helpers import PROJECT_MODELS, shared_model

PROJECT_ROOT = Path(__file__).resolve().parents[1]
OPTIONS = {"variant": "branchless", "fill_mode": "parity", "mode": "solid"}


@pytest.fixture(scope="module")
def helpers():
    readers = LoadProcesses(2)
    assert readers.started.wait(120)
    yield readers
    readers.close()


def test_a_helper_sends_the_mesh_prepared_as_here(helpers):
    path = shared_model("bunny.ply")
    mesh, seconds = helpers.submit(path, 48, OPTIONS).result(timeout=120)
    here = load_mesh(path)
    assert seconds > 0
    assert np.array_equal(mesh.vertices, here.vertices)
    assert np.array_equal(mesh.faces, here.faces) and mesh.faces.dtype == np.int64
    assert np.array_equal(mesh.bounds, here.bounds)
    # Its placed vertices came along, read-only: the call finds them and computes nothing.
    placement = GridPlacement.around(here, (48, 48, 48), None, None)
    expected_grid, expected_fine = placement.placed_vertices(here)
    grid_vertices, fine_vertices = placement.placed_vertices(mesh)
    assert grid_vertices is mesh.__dict__["_placed"][1][0]
    assert np.array_equal(grid_vertices, expected_grid)
    assert np.array_equal(fine_vertices, expected_fine)
    for array in (mesh.indices, mesh.used, grid_vertices, fine_vertices):
        assert not array.flags.writeable
    assert np.array_equal(
        voxelizer.voxelize_dense(mesh, 48).to_numpy(), voxelizer.voxelize_dense(here, 48).to_numpy()
    )


def test_a_helper_reports_what_reading_here_reports(helpers, tmp_path):
    missing = tmp_path / "missing.ply"
    garbage = tmp_path / "garbage.ply"
    garbage.write_bytes(
        b"ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nend_header\n1\n"
    )
    for path in (missing, garbage):
        with pytest.raises(MeshError) as here:
            load_mesh(path)
        with pytest.raises(MeshError) as there:
            helpers.submit(path, 16, OPTIONS).result(timeout=120)
        assert str(there.value) == str(here.value)


def test_a_placement_that_fails_is_left_to_the_call():
    """Bounds that do not contain the mesh: the reading succeeds, the call says why."""
    options = {**OPTIONS, "bounds": [[0, 0, 0], [1e-3, 1e-3, 1e-3]]}
    mesh = prepared_mesh(shared_model("bunny.ply"), 16, options)
    assert "_placed" not in mesh.__dict__
    with pytest.raises(voxelizer.GridError):
        voxelizer.voxelize(mesh, 16, bounds=options["bounds"])


def test_a_helper_that_dies_fails_one_mesh_and_is_replaced():
    readers = LoadProcesses(1)
    try:
        assert readers.started.wait(120)
        path = shared_model("bunny.ply")
        readers.submit(path, 16, OPTIONS).result(timeout=120)
        (pid,) = readers.helper_pids()
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(MeshError, match="the reading process died"):
            readers.submit(path, 16, OPTIONS).result(timeout=120)
        mesh, _ = readers.submit(path, 16, OPTIONS).result(timeout=120)
        assert mesh.triangle_count == load_mesh(path).triangle_count
        assert readers.helper_pids() != [pid]
    finally:
        readers.close()
    assert readers.helper_pids() == []


def test_voxelize_many_with_helpers_equals_reading_here(tmp_path):
    bad = tmp_path / "bad.obj"
    bad.write_text("v 0 0 0\nf 1 2 3\n")
    files = [
        shared_model("bunny.ply"),
        PROJECT_MODELS / "gear.ply",
        bad,
        shared_model("torus.stl"),
        PROJECT_MODELS / "torus_knot.ply",
    ]
    here = list(voxelize_many(files, grid=24, load_processes=0))
    there = list(voxelize_many(files, grid=24, load_processes=2))
    assert [r.index for r in there] == list(range(len(files)))
    for a, b in zip(here, there):
        assert (a.status, a.error, a.triangles, a.solid_voxels) == (
            b.status,
            b.error,
            b.triangles,
            b.solid_voxels,
        )
        if a.result is not None:
            assert b.result is not None
            assert np.array_equal(a.result.to_numpy(), b.result.to_numpy())
    assert there[2].status == "failed" and str(bad) in there[2].error


SCRIPT = """
import sys
import voxelizer
files = sys.argv[1:]
# No `if __name__ == "__main__"` guard: the helpers must not run this script again.
results = list(voxelizer.voxelize_many(files, grid=16, load_processes=2))
print("done", sum(r.ok for r in results))
"""


def test_a_script_without_a_main_guard(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    files = [str(shared_model("bunny.ply"))] * 6
    run = subprocess.run(
        [sys.executable, str(script), *files],
        cwd=tmp_path,
        env=_with_project_path(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines() == ["done 6"]


INTERRUPTED = """
import os, sys, time
import voxelizer
from voxelizer.load_processes import shared_load_processes
readers = shared_load_processes(2)
deadline = time.monotonic() + 120
while len(readers.helper_pids()) < 2 and time.monotonic() < deadline:
    time.sleep(0.01)
print(*readers.helper_pids(), flush=True)
files = sys.argv[1:]
for _ in range(1000):
    for result in voxelizer.voxelize_many(files, grid=16, load_processes=2):
        pass
"""


def test_ctrl_c_ends_the_batch_and_its_helpers(tmp_path):
    """SIGINT to the whole process group, as a terminal sends it: the helpers ignore it
    (no traceback from them), the batch stops and its helpers end with it."""
    script = tmp_path / "interrupted.py"
    script.write_text(textwrap.dedent(INTERRUPTED))
    process = subprocess.Popen(
        [sys.executable, str(script), *[str(shared_model("bunny.ply"))] * 4],
        cwd=tmp_path,
        env=_with_project_path(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    pids = [int(pid) for pid in process.stdout.readline().split()]
    assert len(pids) == 2
    time.sleep(1.0)  # well into the batches
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode != 0
    assert stderr.count("KeyboardInterrupt") == 1, stderr  # the script's own, not the helpers'
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids)


def _with_project_path() -> dict[str, str]:
    """This environment, with this tree first on the path of the script's process."""
    path = os.environ.get("PYTHONPATH")
    tree = str(PROJECT_ROOT)
    return {**os.environ, "PYTHONPATH": tree if not path else f"{tree}{os.pathsep}{path}"}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return not (status.exists() and status.read_text().split()[2] == "Z")


def test_a_mesh_keeps_its_caches_read_only_through_pickling():
    mesh = prepared_mesh(shared_model("bunny.ply"), 16, OPTIONS)
    copy = pickle.loads(pickle.dumps(mesh, protocol=5))
    assert set(copy.__dict__) == set(mesh.__dict__)
    assert not copy.indices.flags.writeable and not copy.used.flags.writeable
    assert copy.vertices.flags.writeable == mesh.vertices.flags.writeable
