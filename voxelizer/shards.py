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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from .errors import OutputError
from .grid_spec import voxel_size_text
from .io.writers import OutputFormat
from .placement import NO_PADDING, Padding, Placed, Shape, VoxelSize, padded_shape, shape_text

if TYPE_CHECKING:  # (the store's module: imported by a batch into one, not by every batch)
    from .io.zarr_store import Row, ShardWriter

SHARD_FORMAT = "zarr"


class Recorded(Protocol):
    """What a store's row is made of: voxelizer.batch.BatchResult's fields (a protocol, so
    that this module, which the batch engine imports, imports nothing of it)."""

    @property
    def index(self) -> int: ...
    @property
    def input(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def error(self) -> str | None: ...
    @property
    def warnings(self) -> tuple[Warning, ...]: ...
    @property
    def triangles(self) -> int | None: ...
    @property
    def solid_voxels(self) -> int | None: ...
    @property
    def open_columns(self) -> int | None: ...
    @property
    def origin(self) -> tuple[float, float, float] | None: ...
    @property
    def voxel_size(self) -> VoxelSize | None: ...


R = TypeVar("R", bound=Recorded)


@dataclass(frozen=True)
class ShardFormat(OutputFormat):
    """format "zarr" as a batch's tasks hold it: a task's output is its chunk in the store,
    written from the dense grid (write_chunk; always replaced: its row says whether it is
    stored)."""

    suffix: str = ".zarr"

    def write(
        self,
        result: Placed,
        path: str | os.PathLike,
        *,
        overwrite: bool = False,
        up_axis: str | None = None,
    ) -> None:
        if up_axis is not None:
            raise OutputError(f"{path}: up_axis is for .vox files only", path=path)
        from .io.zarr_store import write_chunk

        write_chunk(result, path)


def is_shard_format(format: object) -> bool:
    name = getattr(format, "suffix", format)
    return isinstance(name, str) and name.lower().lstrip(".") == SHARD_FORMAT


def check_shard_shape(
    shape: Shape | None,
    voxel_size: VoxelSize | None,
    bounds: np.ndarray | None = None,
    pad: Padding = NO_PADDING,
) -> Shape:
    """The one grid shape of a store's meshes (padding included); OutputError where the
    shapes would vary, or where bounds make voxels of three sizes (the store keeps one)."""
    if shape is None and voxel_size is not None:
        raise OutputError(
            "format 'zarr' stores every mesh on one grid shape: give grid=N (or (nx, ny, nz)) "
            "instead of voxel_size, or write one file per mesh (format 'npz')"
        )
    shape = shape if shape is not None else (512, 512, 512)
    if bounds is not None:
        sizes = (bounds[1] - bounds[0]) / np.array(shape, np.float64)  # placement's rule
        if not sizes[0] == sizes[1] == sizes[2]:
            raise OutputError(
                f"format 'zarr' stores one voxel size per mesh; these bounds on a "
                f"{shape_text(shape)} grid make voxels of {voxel_size_text(tuple(sizes))}: give "
                "bounds in the grid's proportions, or write one file per mesh (format 'npz')"
            )
    return padded_shape(shape, pad)


def open_store(
    store: str | os.PathLike,
    labels: list[str],
    shape: Shape,
    *,
    options: dict[str, Any],
    overwrite: bool,
    skip_existing: bool,
) -> ShardWriter:
    from .io.zarr_store import ShardWriter

    return ShardWriter.create(
        store, labels, shape, options=_plain_options(options), overwrite=overwrite,
        resume=skip_existing,
    )  # fmt: skip


def _plain_options(options: dict[str, Any]) -> dict[str, Any]:
    """The options as the store's attributes keep them (JSON: arrays as lists; no callback)."""
    plain: dict[str, Any] = {}
    for name, value in options.items():
        if callable(value) or name in ("progress", "attributes"):
            continue
        plain[name] = value.tolist() if isinstance(value, np.ndarray) else value
    return plain


def shard_outputs(writer: ShardWriter, count: int) -> tuple[list[int], list[int], list[Path]]:
    """(meshes stored already, meshes to voxelize, every mesh's chunk file): a task's
    output is its chunk, which may be replaced (a chunk left by a stopped batch has no row)."""
    from .io.zarr_store import chunk_path

    stored = [index for index in range(count) if writer.stored(index)]
    held = set(stored)
    todo = [index for index in range(count) if index not in held]
    return stored, todo, [chunk_path(writer.path, index) for index in range(count)]


def row_of(result: Recorded) -> Row:
    from .io.zarr_store import Row

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
        voxel_size=np.nan if not isinstance(result.voxel_size, float) else result.voxel_size,
    )


def recorded(results: Iterator[R], writer: ShardWriter) -> Iterator[R]:
    """The results, each recorded in the store's table as it passes (a skipped mesh keeps
    the row it has); the table written whole when they end, or stop."""
    try:
        for result in results:
            if result.status != "skipped":
                writer.record(result.index, row_of(result))
            yield result
    finally:
        writer.close()
