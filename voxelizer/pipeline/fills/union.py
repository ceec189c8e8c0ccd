"""fill_mode="union": the mesh's closed components summed by their winding (components.py
says what it means): solid where the sum is positive."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from ...components import Run, mesh_components, union_runs
from ...grid import ColumnBits
from ...mesh import Mesh
from ..slabs import svo_of_voxels
from ..svo_build import OctreeArrays
from .base import Fill, FillCall
from .parity import parity


class Union(Fill):
    """One run of sign +1 (one closed part, closed parts apart, only open parts) is parity,
    bit for bit, and keeps the grid on the device; otherwise the runs' parities are summed
    on the host (and, for an SVO, the summed grid goes back up, slab by slab, to be
    converted there)."""

    def dense(self, call: FillCall) -> ColumnBits | np.ndarray:
        runs = union_runs_of(call)
        if len(runs) == 1 and runs[0].sign == 1:
            return parity(call, dense=True)
        return summed_winding(call, runs) > 0

    def svo(self, call: FillCall) -> OctreeArrays:
        runs = union_runs_of(call)
        if len(runs) == 1 and runs[0].sign == 1:
            return parity(call, dense=False)
        job = call.job
        voxels = summed_winding(call, runs) > 0
        return svo_of_voxels(
            call.resources, voxels, job.shape, call.stats, max_memory=job.max_memory
        )


def union_runs_of(call: FillCall) -> list[Run]:
    """The job's mesh as runs of closed components with their signs, timed and counted."""
    job, stats = call.job, call.stats
    started = time.perf_counter()
    runs = union_runs(mesh_components(job.mesh), job.vertices, job.mesh.faces)
    stats.add_host(union_components=(time.perf_counter() - started) * 1e3)
    stats.count(union_runs=len(runs))
    return runs


def summed_winding(call: FillCall, runs: list[Run]) -> np.ndarray:
    """Sum over the runs of sign * parity, each run through the dense parity path (slabs
    as the plan says). One run adds at most one per voxel (its components' interiors are
    disjoint), so |winding| <= runs: a byte per voxel on the host up to 127 runs. Counts
    and times of the runs are summed (`triangles`: each triangle once; `open_columns`
    too, as closed parts balance every column), but `overlap_columns` is the mesh's own:
    the columns where the summed winding leaves {0, 1} (where parity would differ from
    the union), counted here exactly."""
    job = call.job
    dtype = np.int8 if len(runs) < 1 << 7 else np.int16 if len(runs) < 1 << 15 else np.int32
    winding = np.zeros(job.shape, dtype)
    for index, run in enumerate(runs):
        used, corners = np.unique(job.mesh.faces[run.faces], return_inverse=True)
        part = replace(
            job,
            mesh=Mesh(job.mesh.vertices[used], corners.reshape(-1, 3)),
            vertices=job.vertices[used],
            fine=job.fine_vertices()[used],
            fixed_gap=None,  # (the part's own, computed by its passes)
            soup=None,  # (the part's own, gathered by its passes)
            progress=None,
        )
        solid = parity(call.with_job(part), dense=True).to_numpy()
        add = np.add if run.sign > 0 else np.subtract
        add(winding, solid, out=winding, casting="unsafe")
        if job.progress is not None:
            job.progress("runs", index + 1, len(runs))
    call.stats.counts["overlap_columns"] = count_overlap_columns(winding)
    return winding


def count_overlap_columns(winding: np.ndarray) -> int:
    """Columns (i, j) where the winding leaves {0, 1} at some voxel, an i-plane at a time."""
    columns = 0
    for plane in winding:
        columns += int(np.count_nonzero(((plane < 0) | (plane > 1)).any(axis=1)))
    return columns
