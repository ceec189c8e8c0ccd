"""The CPU alternatives a Python user has for solid voxelization, run on our grid.

Every peer voxelizes the same mesh with the same voxel centres as ours, origin + (i + 1/2) h
(voxelizer.placement), so its voxels compare one for one with our exact result:

* `reference`: voxelizer.reference.voxelize_reference, the vectorized numpy parity
  voxelizer that is the oracle of the tests (exact: it must get 0 voxels wrong).
* `pyvista`: `PolyData.voxelize_binary_mask` (VTK's vtkPolyDataToImageStencil) labels the
  *points* of an ImageData. Its reference volume gets our voxel centres as points:
  dimensions (N, N, N), spacing h, origin = our origin + h/2. The mask is in VTK order (x
  fastest), so reshaping it with order="F" gives [i, j, k].
* `libigl` (optional: pip install libigl): `igl.fast_winding_number(V, F, Q)` (Barill et
  al. 2018's hierarchical generalized winding number) at every voxel centre Q, solid where
  w > 1/2: the rule of our fill_mode="winding", approximated.
* `trimesh`: `Trimesh.voxelized(pitch).fill()` subdivides the surface until edges are
  shorter than pitch/2, marks the voxel each vertex rounds to (voxel m has its centre at
  m * pitch in world units), then fills enclosed cavities (scipy's binary_fill_holes). The
  mesh is moved by -(origin + h/2) first, so trimesh's voxel m is our voxel i = m; the
  VoxelGrid's matrix starts at index translation / pitch. Surface voxels whose centre lies
  just outside the mesh, or outside our grid, count as extra.

Each peer runs in a child process of its own (spawned, so it shares nothing with our Vulkan
device and can be stopped when it runs past the timeout): one warm-up run, then `runs` timed
runs, of which the minimum is reported.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from voxelizer.mesh import Mesh
from voxelizer.placement import GridPlacement

PEERS = ("reference", "pyvista", "trimesh", "libigl")
# A warm-up run slower than this also counts as the first timed run: what a warm-up saves
# (imports, caches) is milliseconds, and trimesh takes tens of seconds a run.
WARM_UP_COUNTS_AFTER_S = 5.0
STARTUP_ALLOWANCE_S = 60.0  # a fresh interpreter importing numpy, VTK or trimesh


def unavailable(peer: str) -> str | None:
    """Why `peer` cannot run here, or None if it can."""
    needs = {
        "reference": [],
        "pyvista": ["pyvista"],
        "trimesh": ["trimesh", "scipy"],
        "libigl": ["igl"],
    }[peer]
    missing = [name for name in needs if importlib.util.find_spec(name) is None]
    if missing:
        extra = "pip install libigl" if peer == "libigl" else "pip install 'voxelizer[bench]'"
        return f"not installed ({', '.join(missing)}; {extra})"
    return None


def prepare(peer: str, mesh: Mesh, n: int) -> tuple[Callable[[], Any], Callable[[Any], np.ndarray]]:
    """(run, to_ours): run() is the timed peer call; to_ours(result) is its voxels as
    bool[i, j, k] on our grid."""
    placement = GridPlacement.fit(mesh, n)
    h = float(placement.spacing[0])  # cubes: a grid placed around the mesh
    centre0 = placement.origin + h / 2  # world position of the centre of voxel (0, 0, 0)
    if peer == "reference":
        from voxelizer.reference import voxelize_reference

        return lambda: voxelize_reference(mesh, n), lambda grid: grid.to_numpy()
    if peer == "pyvista":
        import pyvista

        poly = pyvista.PolyData.from_regular_faces(mesh.vertices, mesh.faces)
        volume = pyvista.ImageData(dimensions=(n, n, n), spacing=(h, h, h), origin=tuple(centre0))

        def mask_to_ours(image: pyvista.ImageData) -> np.ndarray:
            return np.asarray(image.point_data["mask"]).reshape((n, n, n), order="F") != 0

        return lambda: poly.voxelize_binary_mask(reference_volume=volume), mask_to_ours
    if peer == "libigl":
        import igl

        axes = [centre0[axis] + h * np.arange(n) for axis in range(3)]
        centres = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3)
        vertices = np.asarray(mesh.vertices, np.float64)
        faces = np.asarray(mesh.faces, np.int64)
        return (
            lambda: igl.fast_winding_number(vertices, faces, centres),
            lambda w: np.asarray(w).reshape(n, n, n) > 0.5,
        )
    if peer == "trimesh":
        import trimesh

        moved = trimesh.Trimesh(mesh.vertices - centre0, mesh.faces, process=False)

        def grid_to_ours(voxels: trimesh.voxel.VoxelGrid) -> np.ndarray:
            start = np.rint(voxels.transform[:3, 3] / h).astype(np.int64)
            return place(np.argwhere(voxels.matrix) + start, n)

        return lambda: moved.voxelized(h).fill(), grid_to_ours
    raise ValueError(f"unknown peer {peer!r} (choose from {', '.join(PEERS)})")


def place(indices: np.ndarray, n: int) -> np.ndarray:
    """bool[i, j, k] from (M, 3) voxel indices; those outside [0, n) get a layer of their
    own beyond the grid, so that they still count as extra voxels."""
    voxels = np.zeros((n + 2,) * 3, bool)
    clipped = np.clip(indices, -1, n) + 1
    voxels[tuple(clipped.T)] = True
    return voxels


def wrong_voxels(peer_voxels: np.ndarray, ours: np.ndarray) -> tuple[int, int]:
    """(extra, missing): voxels the peer sets that ours does not, and the other way round.
    A peer array larger than ours (from place) is ours framed by one layer of voxels."""
    if peer_voxels.shape != ours.shape:
        inner = peer_voxels[1:-1, 1:-1, 1:-1]
        outside = int(np.count_nonzero(peer_voxels)) - int(np.count_nonzero(inner))
        peer_voxels = inner
    else:
        outside = 0
    extra = int(np.count_nonzero(peer_voxels & ~ours)) + outside
    missing = int(np.count_nonzero(ours & ~peer_voxels))
    return extra, missing


def _child(
    connection: Connection, peer: str, vertices: np.ndarray, faces: np.ndarray, n: int, runs: int
) -> None:
    """In the child: warm up, time `runs` runs (reporting each), then send the voxels."""
    try:
        run, to_ours = prepare(peer, Mesh(vertices, faces), n)
        started = time.perf_counter()
        result = run()
        warm_up = time.perf_counter() - started
        times = [warm_up] if warm_up > WARM_UP_COUNTS_AFTER_S else []
        connection.send(("run" if times else "warm-up", warm_up))
        while len(times) < runs:
            started = time.perf_counter()
            result = run()
            times.append(time.perf_counter() - started)
            connection.send(("run", times[-1]))
        voxels = to_ours(result)
        connection.send(("voxels", voxels.shape, np.packbits(voxels)))
    except Exception as exc:  # report any failure of a peer; the benchmark goes on
        connection.send(("failed", f"{type(exc).__name__}: {exc}"))
    finally:
        connection.close()


def measure_peer(
    peer: str, mesh: Mesh, n: int, ours: np.ndarray, runs: int = 3, timeout_s: float = 120.0
) -> dict[str, Any]:
    """Time `peer` on `mesh` at grid n in a child process and count its wrong voxels.

    Returns status "ok", "skipped" (not installed), "failed" or "timeout" (one run took
    longer than timeout_s; the child is stopped and the runs it finished are kept)."""
    reason = unavailable(peer)
    if reason:
        return {"status": "skipped", "reason": reason}
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(
        target=_child, args=(sender, peer, mesh.vertices, mesh.faces, n, runs), daemon=True
    )
    child.start()
    sender.close()
    times: list[float] = []
    outcome: dict[str, Any] = {
        "status": "failed",
        "reason": "the peer's process ended without an answer",
    }
    start_up = STARTUP_ALLOWANCE_S  # the first wait also covers the imports in the child
    try:
        while True:
            waited = receiver.poll(timeout_s + start_up)
            start_up = 0.0
            if not waited:
                outcome = {"status": "timeout", "reason": f"a run took longer than {timeout_s:g} s"}
                break
            message = receiver.recv()
            if message[0] == "run":
                times.append(message[1])
            elif message[0] == "voxels":
                shape, bits = message[1], message[2]
                voxels = np.unpackbits(bits, count=int(np.prod(shape))).reshape(shape).astype(bool)
                extra, missing = wrong_voxels(voxels, ours)
                outcome = {"status": "ok", "extra_voxels": extra, "missing_voxels": missing}
                break
            elif message[0] == "failed":
                outcome = {"status": "failed", "reason": message[1]}
                break
    except EOFError:
        pass
    finally:
        if child.is_alive():
            child.terminate()
        child.join()
        receiver.close()
    outcome["runs_s"] = times
    outcome["seconds"] = min(times) if times else None
    return outcome
