"""What a batch is made of: its meshes as tasks (each with its output planned), what every
worker needs to know (BatchSettings), and what becomes of each mesh (BatchResult).

Plain records, picklable for worker processes and Ray actors; nothing here starts a thread or
a process, so the command line imports it without the batch machinery.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from ..console import one_line
from ..errors import OutputError, ThinResultWarning
from ..grid import DenseGrid
from ..io.files import os_error_text, resolved
from ..io.mesh_files import output_paths, refuse_outputs_of_inputs
from ..io.meshes import MeshLike
from ..io.output import check_output_path
from ..io.writers import OutputFormat
from ..options import Options
from ..placement import VoxelSize
from ..svo import SVO

Status = Literal["done", "skipped", "failed"]
# What a batch writes unless told otherwise (voxelize_many, the Ray functions, `voxelize
# --out-dir`): the package's own octree, the smallest file, read back by voxelizer.load.
DEFAULT_FORMAT = "svo"


@dataclass(frozen=True)
class BatchResult:
    """What became of one mesh of a batch.

    `status` is "done", "skipped" (its output existed and skip_existing was asked for) or
    "failed" (`error` says why, naming the input). `result` is the SVO (or DenseGrid with
    dense=True) when it is kept in memory; None when it went to `output`, or failed. The
    counts are None where the mesh was not voxelized: `solid_voxels` counts the voxels set
    (solid, surface or both, as `mode` asks), `open_columns` the grid columns whose
    surface crossings do not pair up (0 for a closed mesh; None where the fill mode does
    not count them). `seconds` is the time spent on this mesh: reading, voxelizing, writing."""

    index: int  # position in the inputs
    input: str  # the path as given, or a label for an in-memory mesh
    output: Path | None
    status: Status
    result: SVO | DenseGrid | None = None
    triangles: int | None = None
    solid_voxels: int | None = None
    open_columns: int | None = None
    seconds: float = 0.0
    error: str | None = None
    device: str = ""
    warnings: tuple[Warning, ...] = field(default=(), repr=False)
    origin: tuple[float, float, float] | None = None  # the grid's placement, where done
    voxel_size: VoxelSize | None = None  # h, or (hx, hy, hz)

    @property
    def ok(self) -> bool:
        return self.status != "failed"

    def to_record(self) -> dict[str, Any]:
        """The JSON-lines record of `voxelize --log`: plain JSON types."""
        return {
            "input": self.input,
            "output": None if self.output is None else str(self.output),
            "status": self.status,
            "triangles": self.triangles,
            "solid_voxels": self.solid_voxels,
            "open_columns": self.open_columns,
            "seconds": round(self.seconds, 6),
            "error": self.error,
            "device": self.device,
            "warnings": [str(warning) for warning in self.warnings],
            "thin": any(isinstance(warning, ThinResultWarning) for warning in self.warnings),
        }


@dataclass(frozen=True)
class MeshTask:
    """One mesh to voxelize: its place in the batch, the mesh (a path, usually), how the
    results name it, its output (None: keep the result) in its format (decoded once, as the
    batch was planned) and whether that output may be replaced (asked for, or left by an
    earlier attempt of this batch)."""

    index: int
    source: Any  # MeshLike; Any so that dataclass pickling and typing stay simple
    label: str
    output: Path | None = None
    replace: bool = False
    format: OutputFormat | None = None  # the output's; None without one

    def __post_init__(self) -> None:
        if (self.output is None) != (self.format is None):
            raise ValueError("a task has an output and its format, or neither")

    def skipped(self) -> BatchResult:
        """Its result where its output exists and the batch skips those."""
        return BatchResult(index=self.index, input=self.label, output=self.output, status="skipped")

    def failed(self, error: str, device: str = "", seconds: float = 0.0) -> BatchResult:
        """Its result where it failed: `error` is one line naming the input (error_text)."""
        return BatchResult(
            index=self.index,
            input=self.label,
            output=self.output,
            status="failed",
            seconds=seconds,
            error=error,
            device=device,
        )


@dataclass(frozen=True)
class BatchSettings:
    """What every worker needs, checked once, picklable for worker processes: the options
    (their `shape` is the grid), whether results kept in memory are dense grids, the .vox
    outputs' up axis, and the worker's loader and writer threads, read-ahead, reading
    processes and writing processes."""

    options: Options
    dense: bool = False
    up_axis: str | None = None
    threads: int = 2
    prefetch: int = 4
    load_processes: int = 0  # helper processes reading mesh files (0: the loader threads)
    write_processes: int = 0  # helper processes writing output files (0: the writer threads)


@dataclass(frozen=True)
class BatchPlan:
    """A batch whose outputs were planned and checked once (plan_tasks: no two inputs write
    one file, no output replaces an input), handed to the engine as it is
    (engine.voxelize_planned): the command checks its paths before any work, and the engine
    does not plan them again."""

    tasks: tuple[MeshTask, ...]
    out_dir: Path
    format: OutputFormat

    @property
    def outputs(self) -> list[Path]:
        return [task.output for task in self.tasks if task.output is not None]


class TaskSource(Protocol):
    def next(self, wait: bool) -> MeshTask | None:
        """The next task, or None when there are no more; with wait=False, queue.Empty when
        none is ready yet."""


class ListSource:
    """Tasks from an iterable: always ready."""

    def __init__(self, tasks: Iterable[MeshTask]):
        self._tasks = iter(tasks)

    def next(self, wait: bool) -> MeshTask | None:
        return next(self._tasks, None)


def plan_tasks(
    inputs: Sequence[MeshLike],
    *,
    out_dir: str | os.PathLike | None,
    format: OutputFormat,
    root: str | os.PathLike | None,
    overwrite: bool,
    other_inputs: Sequence[Path] = (),
) -> list[MeshTask]:
    """One task per input: its label and, with out_dir, its output path in `format`.
    OutputError before any work if two inputs would write one file (an in-memory mesh is
    named by its index: mesh0, ...) or an output would replace an input file, or one of
    `other_inputs` (files the batch read its inputs from: the command's @list.txt)."""
    labels = [
        os.fspath(item) if isinstance(item, (str, os.PathLike)) else f"<{type(item).__name__} #{i}>"
        for i, item in enumerate(inputs)
    ]
    if out_dir is None:
        return [MeshTask(index=i, source=item, label=labels[i]) for i, item in enumerate(inputs)]
    files = [
        (i, item if isinstance(item, Path) else Path(item))  # (a Path is not parsed again)
        for i, item in enumerate(inputs)
        if isinstance(item, (str, os.PathLike))
    ]
    named = output_paths(
        [path for _, path in files],
        out_dir,
        format.suffix,
        root=None if root is None else Path(root),
    ) if files else []  # fmt: skip
    outputs = {i: output for (i, _), output in zip(files, named)}
    width = len(str(max(len(inputs) - 1, 0)))
    claimed = {output: labels[i] for i, output in outputs.items()}
    for i in range(len(inputs)):
        if i not in outputs:  # an in-memory mesh, named by its index
            output = Path(out_dir) / f"mesh{i:0{width}d}{format.suffix}"
            if output in claimed:
                raise OutputError(
                    f"{claimed[output]} and {labels[i]} would both write {output} (rename "
                    "the file, or voxelize them in separate batches)",
                    path=output,
                )
            claimed[output] = labels[i]
            outputs[i] = output
    refuse_outputs_of_inputs(
        [*(path for _, path in files), *other_inputs], [outputs[i] for i, _ in files]
    )
    return [
        MeshTask(
            index=i,
            source=item,
            label=labels[i],
            output=outputs[i],
            replace=overwrite,
            format=format,
        )
        for i, item in enumerate(inputs)
    ]


def inside(out_dir: Path, name: Path, label: str) -> Path:
    """out_dir / name, where `name` comes from outside (a dataset row's): OutputError unless
    it stays inside out_dir, as written (relative, no `..`) and on disk (no symlinked folder
    of out_dir leading out of it)."""
    if name.is_absolute() or name.drive or ".." in name.parts or "\0" in str(name):
        raise OutputError(
            f"{label}: the name {str(name)!r} would write outside the output folder "
            f"{out_dir} (names are relative paths without '..')"
        )
    output = out_dir / name
    existing = output.parent
    while not os.path.lexists(existing) and existing != out_dir:
        existing = existing.parent
    if not resolved(existing).is_relative_to(resolved(out_dir)):
        raise OutputError(
            f"{label}: {output} lies outside the output folder {out_dir} (a symlinked "
            "folder leads out of it)"
        )
    return output


def make_out_dir(out_dir: Path) -> None:
    """Create the output folder (and its parents); OutputError if it cannot be."""
    if os.path.lexists(out_dir) and not os.path.isdir(out_dir):
        try:
            os.stat(out_dir)
        except OSError as exc:  # a broken link, a symlink loop
            raise OutputError(f"{out_dir}: no output folder ({os_error_text(exc)})") from None
        raise OutputError(f"{out_dir}: the output folder is a file", path=out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{out_dir}: cannot create ({os_error_text(exc)})") from exc
    check_output_path(out_dir / ".voxelizer-write-check", overwrite=True)


def error_text(label: str, error: BaseException) -> str:
    """One line naming the input: the error's own words, with the input in front unless they
    name it already; an existing output in neutral words (the API and the CLI ask for
    replacing it differently)."""
    if isinstance(error, OutputError) and error.exists:
        text = f"{error.path}: file exists"
    elif isinstance(error, MemoryError):
        text = f"out of host memory ({str(error).strip() or 'MemoryError'})"
    else:
        text = str(error).strip() or type(error).__name__
    # A newline in the input's name is shown escaped, not taken for the end of the line.
    shown = one_line(label)
    text = text.replace(label, shown).splitlines()[0]
    return text if shown in text else f"{shown}: {text}"
