"""The pipeline runs a call with labels or colours makes (voxelizer.attributes.run asks for
them through its Runs protocol), and the pieces of such a call's result: the face grid, the
name of a mesh without parts; the stats of an empty grid, the label of the voxel count, a
call's stats merged, whether out= is written after the work.
Apart from api.py, which hands in its pipeline and job builder."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from .attributes.run import Attributed, AttributeRequest, attributed_voxels
from .attributes.voxel_values import SolidValues
from .choices import AUTO_FILL
from .errors import EmptyGridWarning, FormatError
from .grid import ColumnBits
from .io.meshes import MeshLike
from .mesh import Mesh
from .options import Options
from .pipeline.face_ids import MarkedVoxels
from .pipeline.job import Job
from .pipeline.runner import Pipeline
from .placement import GridPlacement
from .stats import Stats
from .svo import SVO

JobBuilder = Callable[[Mesh, GridPlacement, Options], Job]


class PipelineRuns:
    """The pipeline runs on one call's grid and options (attributes.run.Runs); their times and
    column counts go into the call's stats. `job` builds a run's job, as the API does."""

    def __init__(
        self,
        pipeline: Pipeline,
        job: JobBuilder,
        *,
        placement: GridPlacement,
        options: Options,
        stats: Stats,
    ) -> None:
        self._pipeline, self._build = pipeline, job
        self._placement, self._options, self._stats = placement, options, stats
        self._first = True

    def _job(self, mesh: Mesh, mode: str) -> Job:
        fill_mode = "parity" if mode == "surface" else self._options.fill_mode  # (none filled)
        surface = self._options.surface or "conservative"
        options = replace(self._options, mode=mode, surface=surface, fill_mode=fill_mode)
        return self._build(mesh, self._placement, options)

    def voxels(self, mesh: Mesh, mode: str) -> ColumnBits | np.ndarray:
        voxels, run = self._pipeline.dense(self._job(mesh, mode))
        self._add(run)
        return voxels

    def marked(
        self, mesh: Mesh, mode: str
    ) -> tuple[ColumnBits | np.ndarray, np.ndarray, np.ndarray]:
        voxels, faces, run = self._pipeline.dense_faces(self._job(mesh, mode))
        self._add(run)
        marked = MarkedVoxels.of_grid(faces)
        return voxels, marked.voxels, marked.ids

    def attributed(self, mesh: Mesh, name: str) -> Attributed:
        """The voxels with labels and colours (voxelizer.attributes.run) from these runs;
        `name` names the one part of a mesh without parts."""
        options = self._options
        request = AttributeRequest(
            options.labels, options.colors, options.overlap, options.fill_color
        )
        found = attributed_voxels(
            mesh, self._placement, options.mode, request, self, name, self._stats
        )
        self._stats.counts["triangles"] = mesh.triangle_count
        return found

    def _add(self, run: Stats) -> None:
        """The first run's stats are the call's (behind its host steps); later runs add their
        times and column counts."""
        if self._first:
            self._first = False
            run.host_ms = {**self._stats.host_ms, **run.host_ms}
            self._stats.__dict__.update(run.__dict__)
            return
        self._stats.add_times_of(run)
        columns = ("open_columns", "overlap_columns")  # the fill's mesh check, summed
        self._stats.count(**{name: run.counts.get(name, 0) for name in columns})


def part_name(source: MeshLike | list[MeshLike]) -> str:
    """The name of the one part of a mesh without parts: its file's name without the
    extension, else "mesh"."""
    return Path(source).stem if isinstance(source, (str, os.PathLike)) else "mesh"


def attributed_svo(
    found: Attributed, placement: GridPlacement, stats: Stats, options: Options
) -> SVO:
    """An SVO of the voxels found, with their labels and colours (built on the CPU from the
    dense voxels), and their face ids where the options ask for them."""
    svo = SVO.from_dense(found.voxels, placement, stats)
    if "face" in options.attributes and found.marked is not None:
        svo = svo.with_face_ids(*found.marked)
    values = SolidValues.of_dense(svo, found.labels, found.colors, found.label_names)
    return svo.with_values(values)


def face_grid(found: Attributed, placement: GridPlacement, options: Options) -> np.ndarray | None:
    """The dense face ids of an attributed call that asked for them."""
    if "face" not in options.attributes or found.marked is None:
        return None
    faces = np.full(placement.shape, -1, np.int32)
    MarkedVoxels(*found.marked).scatter(faces)
    return faces


def empty_stats(
    mesh: Mesh, placement: GridPlacement, options: Options, before: Stats, warn: bool
) -> Stats:
    """The stats of a grid beside the mesh (no GPU work), warned about unless warn=False
    (the counts hold it as empty_grid = 1 either way)."""
    stats = Stats(
        fill_mode=options.fill_mode,
        shape=placement.shape,
        mode=options.mode,
        surface=options.surface if options.mode == "surface" and options.surface else "",
        host_ms=dict(before.host_ms),
    )
    stats.count(triangles=mesh.triangle_count, empty_grid=1)
    stats.counts[voxel_count_label(options.mode)] = 0
    if warn:
        low, high = mesh.bounds
        warnings.warn(
            EmptyGridWarning(
                f"the grid ({placement.describe()}) holds no part of the mesh, whose box is "
                f"({', '.join(f'{v:g}' for v in low)}) to ({', '.join(f'{v:g}' for v in high)}):"
                " every voxel is empty"
            ),
            stacklevel=5,  # (the caller of the module function: empty_stats, _svo, ...)
        )
    return stats


def voxel_count_label(mode: str) -> str:
    """The workload count of set voxels: solid_voxels, surface_voxels, or voxels (both)."""
    return {"solid": "solid_voxels", "surface": "surface_voxels"}.get(mode, "voxels")


def writes_after_work(checked: Options, out: str | os.PathLike) -> bool:
    """Whether out= is written after the work (fill_mode "auto" may run twice; attributes);
    FormatError for a file that is no .svo."""
    if Path(out).suffix.lower() != ".svo":
        raise FormatError(f"out={str(out)!r}: voxelize writes .svo files (save writes others)")
    return checked.fill_mode == AUTO_FILL or bool(
        checked.attributes or checked.labels or checked.colors
    )


def merged_stats(before: Stats, run: Stats) -> Stats:
    """The pipeline's stats with the host steps and counts of the API in front."""
    run.host_ms = {**before.host_ms, **run.host_ms}
    run.counts.update(before.counts)
    return run
