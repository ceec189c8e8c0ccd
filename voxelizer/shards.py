"""A batch into one voxel shard store (format "zarr"): voxelize_many, the command line and
voxelizer.ray plan their meshes' chunks and record their rows through here.

Each mesh's output is its chunk file in the store (voxelizer.io.zarr_store.chunk_path),
written by the worker that voxelized it as it writes any output file; this process records
every result's row (status, error, counts, warnings, placement) as it arrives. A resumed
batch (skip_existing) skips the meshes the store holds already and replaces the chunks of the
others (a chunk whose row was never recorded belongs to a batch that was stopped).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import OutputError
from .io.zarr_store import Row, ShardWriter, chunk_path
from .placement import Shape

if TYPE_CHECKING:
    from .batch import BatchResult, MeshTask

SHARD_FORMAT = "zarr"


def is_shard_format(format: str) -> bool:
    return format.lower().lstrip(".") == SHARD_FORMAT


def check_shard_shape(shape: Shape | None, voxel_size: float | None) -> Shape:
    """The one grid shape of a store's meshes; OutputError where the shapes would vary."""
    if shape is None and voxel_size is not None:
        raise OutputError(
            "format 'zarr' stores every mesh on one grid shape: give grid=N (or (nx, ny, nz)) "
            "instead of voxel_size, or write one file per mesh (format 'npz')"
        )
    return shape if shape is not None else (512, 512, 512)


def open_store(
    store: str | os.PathLike,
    labels: list[str],
    shape: Shape,
    *,
    options: dict[str, Any],
    overwrite: bool,
    skip_existing: bool,
) -> ShardWriter:
    return ShardWriter.create(
        store, labels, shape, options=options, overwrite=overwrite, resume=skip_existing
    )


def shard_tasks(
    writer: ShardWriter, sources: list[Any], labels: list[str]
) -> tuple[list[MeshTask], list[MeshTask]]:
    """(stored already, to voxelize): one task per mesh, its output its chunk file, which
    may be replaced (a chunk left by a stopped batch has no row)."""
    from .batch import MeshTask

    tasks = [
        MeshTask(i, source, labels[i], chunk_path(writer.path, i), replace=True)
        for i, source in enumerate(sources)
    ]
    stored = [task for task in tasks if writer.stored(task.index)]
    return stored, [task for task in tasks if not writer.stored(task.index)]


def row_of(result: BatchResult) -> Row:
    def count(value: int | None) -> int:
        return -1 if value is None else int(value)

    origin = (np.nan,) * 3 if result.origin is None else tuple(float(v) for v in result.origin)
    return Row(
        input=result.input,
        status=result.status,
        error=result.error or "",
        warnings="\n".join(str(warning) for warning in result.warnings),
        triangles=count(result.triangles),
        solid_voxels=count(result.solid_voxels),
        open_columns=count(result.open_columns),
        origin=(origin[0], origin[1], origin[2]),
        voxel_size=np.nan if result.voxel_size is None else float(result.voxel_size),
    )


def recorded(results: Iterator[BatchResult], writer: ShardWriter) -> Iterator[BatchResult]:
    """The results, each recorded in the store's table as it passes (a skipped mesh keeps
    the row it has); the table written whole when they end, or stop."""
    try:
        for result in results:
            if result.status != "skipped":
                writer.record(result.index, row_of(result))
            yield result
    finally:
        writer.close()
