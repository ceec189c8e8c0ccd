"""Voxelizing a Ray Dataset of meshes (`pip install 'voxelizer[ray]'`).

`VoxelizeBatch` is a callable class for `Dataset.map_batches`: each actor opens one
Voxelizer and starts its reading processes as it starts, and runs the batch's worker
(voxelizer.batch.worker) for its whole life over the rows of every call, several calls at a
time (voxelizer.batch.ray_stream), so its reading, device and writing never drain between
batches. `voxelize_files_on_ray` (the command's --ray) runs the same class as plain actors,
started at once and fed chunks of rows by the driver, without Ray Data. Rows name a mesh by a `path` column, or carry its file's
`bytes` with a `name` (the file name, for the format and the output's name). Results go to
files under `out_dir` (as `format`: .svo unless told, as voxelize_many writes), or come back
as columns: `bits` (np.packbits of the [i, j, k] array,
as in .npz files), `shape`, `origin`, `voxel_size` (NaN for voxels that are not cubes),
`spacing` (hx, hy, hz); `to_dense(row)` makes a DenseGrid of them.
Every row also gets the record of voxelize --log: `input`, `output`, `status`, `error`,
`triangles`, `solid_voxels`, `open_columns`, `seconds`, `device`, `warnings`. A mesh that fails is
a row with its error; the others go on.

Actors ask for one GPU each on clusters with GPUs (`actor_options`), and for half a CPU
each otherwise: on a small CPU node, whole-CPU actors would leave no CPU for the tasks that
read the dataset, and the pipeline would wait forever. A worker that dies is restarted by
Ray and its batches retried; outputs are written atomically, and a retry replaces the output
of its own earlier attempt only where the driver planned it (`voxelize_files_on_ray`, the
column `replace`), so nothing is lost or written twice.
"""

from __future__ import annotations

import inspect
import os
import tempfile
import weakref
from collections.abc import Generator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import ray

from .. import errors
from ..api import Voxelizer
from ..errors import DeviceError, OpenMeshWarning, OutputError
from ..grid import DenseGrid
from ..io.mesh_files import absolute, refuse_outputs_of_inputs
from ..io.output import remove_stale_temporaries, sync_folders
from ..io.writers import OutputFormat
from ..options import BATCH_OPTION_NAMES, BatchOptions, Options, option_keywords
from ..placement import GridLike, GridPlacement, VoxelSize, check_shape, voxel_sizes
from ..shards import (
    ShardFormat,
    check_shard_shape,
    is_shard_format,
    open_store,
    recorded,
    shard_outputs,
)
from .engine import BatchRun, default_load_processes, default_threads
from .ray_start import ActorStart, forwarded_runtime_env
from .ray_stream import CHUNKS_IN_FLIGHT, StreamingWorker, chunks_of, feed_actors
from .readers import read_ahead, shared_load_processes
from .tasks import (
    DEFAULT_FORMAT,
    BatchResult,
    BatchSettings,
    MeshTask,
    Status,
    error_text,
    inside,
    make_out_dir,
    plan_tasks,
)
from .worker import MeshWorker

if TYPE_CHECKING:
    import ray.data
    from typing_extensions import Unpack

# Rows per actor call. An actor's worker runs on from one call to the next, with several
# calls at a time (CHUNKS_IN_FLIGHT), so a call's size only sets how often rows travel.
DEFAULT_BATCH_SIZE = 16
_NO_COUNT = -1  # a count the record does not have (Arrow columns hold one type)


def actor_options(num_gpus: float | None = None) -> dict[str, Any]:
    """The resources of one voxelizing actor: one GPU (and half a CPU) when the cluster has
    GPUs, else half a CPU. `num_gpus` overrides the GPU count per actor (0: CPU actors)."""
    if num_gpus is None:
        num_gpus = 1.0 if ray.cluster_resources().get("GPU", 0) >= 1 else 0.0
    options: dict[str, Any] = {"num_cpus": 0.5}
    if num_gpus:
        options["num_gpus"] = num_gpus
    return options


class VoxelizeBatch:
    """`Dataset.map_batches(VoxelizeBatch, fn_constructor_kwargs={...}, ...)`: one Voxelizer
    per actor; a batch of rows in, the same rows' results out (see the module docstring).

    Rows: `path` (a mesh file every node can read) or `bytes` and `name`; optionally
    `output` (the file to write, in the format its extension names; else `out_dir` / the
    path below `root`, or / `name`, in `format`) and `replace` (that output may be
    replaced). Keywords: grid and the voxelize options, out_dir, format (default svo), root,
    overwrite, skip_existing, up_axis, device (default: on a GPU actor the GPU Ray assigned,
    else voxelizer's default choice), threads, prefetch, load_processes (reading processes
    per actor; default: as voxelize_many, the node's cores shared by one actor per GPU)."""

    @option_keywords(BatchOptions)
    def __init__(
        self,
        *,
        grid: GridLike | None = None,
        out_dir: str | os.PathLike | None = None,
        format: str | OutputFormat = DEFAULT_FORMAT,
        root: str | os.PathLike | None = None,
        overwrite: bool = False,
        skip_existing: bool = False,
        up_axis: str | None = None,
        device: str | int | None = None,
        threads: int | None = None,
        prefetch: int | None = None,
        load_processes: int | None = None,
        **options: Unpack[BatchOptions],
    ):
        checked = Options.create(grid, **options)
        threads = default_threads() if threads is None else threads
        if load_processes is None:  # as voxelize_many: the node's cores shared by its actors
            load_processes = default_load_processes(_actors_on_this_node())
        prefetch = 2 * threads if prefetch is None else prefetch
        self.settings = BatchSettings(
            options=checked,
            dense=True,  # results kept for the columns: packed bits of the dense grid
            up_axis=up_axis,
            threads=threads,
            prefetch=read_ahead(prefetch, load_processes),
            load_processes=load_processes,
        )
        self.out_dir = None if out_dir is None else Path(out_dir)
        self.format = ShardFormat() if is_shard_format(format) else OutputFormat.named(format)
        self.root = None if root is None else Path(root)
        self.overwrite = overwrite
        self.skip_existing = skip_existing
        if load_processes:  # started first: they start Python while the device opens
            shared_load_processes(load_processes)
        self.voxelizer = Voxelizer(_actor_device(device))
        # One worker for the actor's life, running on: its threads, reading processes and
        # device stay busy from one call's rows to the next (calls may overlap).
        self.worker = MeshWorker(self.voxelizer, self.settings, keep_threads=True)
        self.stream = StreamingWorker(self.worker)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = len(next(iter(batch.values()))) if batch else 0
        results: dict[int, BatchResult] = {}
        with tempfile.TemporaryDirectory(prefix="voxelizer-") as scratch:
            tasks = []
            claimed: dict[Path, str] = {}  # output -> the row that writes it
            for row in range(rows):
                try:
                    task = self._task(batch, row, Path(scratch))
                    if task.output is not None:
                        _claim(task, claimed)
                    tasks.append(task)
                except OutputError as exc:  # an output in no format, outside out_dir, twice
                    task = MeshTask(index=row, source=None, label=self._label(batch, row))
                    device = self.voxelizer.device_name
                    results[row] = task.failed(error_text(task.label, exc), device=device)
            if "output" in batch:
                # Outputs the driver planned, one row each: a temporary beside one is what
                # an earlier attempt of this row left when its actor was killed.
                remove_stale_temporaries(task.output for task in tasks if task.output)
            skipped = [
                task
                for task in tasks
                if self.skip_existing and task.output is not None and task.output.exists()
            ]
            results.update((task.index, task.skipped()) for task in skipped)
            todo = [task for task in tasks if task.index not in results]
            for future in self.stream.submit(todo):
                result = future.result()
                results[result.index] = result
            # The writers leave the folders unsynced (write_output): this call's, once each.
            sync_folders(task.output.parent for task in todo if task.output is not None)
        columns = _columns([results[row] for row in range(rows)], self.out_dir is None)
        if "index" in batch:  # the driver's numbering, passed through
            columns["index"] = np.asarray(batch["index"], np.int64)
        return columns

    def _task(self, batch: dict[str, np.ndarray], row: int, scratch: Path) -> MeshTask:
        """The row as a task: its mesh (bytes go to a file, which gets every check and
        message of a mesh file), its label and its output."""
        label = self._label(batch, row)
        if "path" in batch:
            source = Path(label)
            # Below root if it is inside, else the file name; the path as given (as
            # find_meshes takes it: a file behind a symlink is named by the link).
            name = Path(source.name)
            if self.root is not None and absolute(source).is_relative_to(absolute(self.root)):
                name = absolute(source).relative_to(absolute(self.root))
        else:
            name = Path(label)
            source = scratch / f"{row}{name.suffix}"
            source.write_bytes(bytes(batch["bytes"][row]))
        output, output_format = None, None
        if "output" in batch and batch["output"][row]:
            output = Path(str(batch["output"][row]))
            if is_shard_format(self.format):  # a chunk of the store the driver planned
                output_format = self.format
            else:
                output_format = OutputFormat.of_path(output)  # a file named: its extension's
        elif self.out_dir is not None:
            output = inside(self.out_dir, name.with_suffix(self.format.suffix), label)
            output_format = self.format
        if output is not None and "path" in batch:
            refuse_outputs_of_inputs([source], [output])
        replace = self.overwrite or bool("replace" in batch and batch["replace"][row])
        return MeshTask(
            index=row,
            source=source,
            label=label,
            output=output,
            replace=replace,
            format=output_format,
        )

    @staticmethod
    def _label(batch: dict[str, np.ndarray], row: int) -> str:
        """How the results name a row's mesh: its path, or its file's name."""
        return str(batch["path" if "path" in batch else "name"][row])


def _claim(task: MeshTask, claimed: dict[Path, str]) -> None:
    """OutputError if an earlier row of the call writes the task's output too (two rows of
    one name): only the last result would survive, the others reported done."""
    assert task.output is not None
    key = absolute(task.output)
    if key in claimed:
        raise OutputError(
            f"{task.label}: {claimed[key]} writes {task.output} too (rows need names of their own)",
            path=task.output,
        )
    claimed[key] = task.label


def _actor_device(requested: str | int | None) -> str | int | None:
    """The device of an actor: as asked; else the GPU that Ray gave it, counted among the
    node's discrete GPUs in Vulkan's order (Ray counts them as CUDA does, which on a node of
    equal GPUs is the same order); else voxelizer's default choice."""
    if requested is not None or os.environ.get("VOXELIZER_DEVICE"):
        return requested
    gpu_ids = ray.get_gpu_ids()
    if not gpu_ids:
        return None
    from ..gpu.device import list_devices

    gpus = [info.index for info in list_devices() if info.kind == "discrete GPU"]
    position = int(gpu_ids[0])
    if position >= len(gpus):
        raise DeviceError(f"Ray assigned GPU {position}, but Vulkan sees {len(gpus)} GPUs here")
    return gpus[position]


def _actors_on_this_node() -> int:
    """How many voxelizing actors share this node's cores, as far as one actor can tell: a
    GPU actor's node runs one per discrete GPU (voxelize_dataset's default); else one."""
    if not ray.get_gpu_ids():
        return 1
    from ..gpu.device import list_devices

    return max(1, sum(info.kind == "discrete GPU" for info in list_devices()))


def _columns(results: list[BatchResult], with_voxels: bool) -> dict[str, np.ndarray]:
    """The results as the columns of one output batch."""
    columns: dict[str, np.ndarray] = {
        "input": np.array([r.input for r in results], dtype=object),
        "output": np.array(["" if r.output is None else str(r.output) for r in results], object),
        "status": np.array([r.status for r in results], dtype=object),
        "error": np.array([r.error or "" for r in results], dtype=object),
        "triangles": _counts(r.triangles for r in results),
        "solid_voxels": _counts(r.solid_voxels for r in results),
        "open_columns": _counts(r.open_columns for r in results),
        "seconds": np.array([r.seconds for r in results], np.float64),
        "device": np.array([r.device for r in results], dtype=object),
        "warnings": np.array(["\n".join(str(w) for w in r.warnings) for r in results], object),
        "warning_kinds": np.array(
            ["\n".join(type(w).__name__ for w in r.warnings) for r in results], object
        ),
        "origin": np.array([(np.nan,) * 3 if r.origin is None else r.origin for r in results]),
        # one size for cubes (NaN for voxels of three sizes), and the three sizes always
        "voxel_size": np.array(
            [np.nan if not isinstance(r.voxel_size, float) else r.voxel_size for r in results]
        ),
        "spacing": np.array(
            [(np.nan,) * 3 if r.voxel_size is None else voxel_sizes(r.voxel_size) for r in results]
        ),
    }
    if with_voxels:
        grids = [r.result for r in results]
        bits = np.empty(len(grids), dtype=object)  # one array per row, of its own length
        for row, grid in enumerate(grids):
            bits[row] = np.zeros(0, np.uint8) if grid is None else np.packbits(grid.to_numpy())
        columns["bits"] = bits
        columns["shape"] = np.array([(0, 0, 0) if g is None else g.shape for g in grids], np.int64)
    return columns


def _counts(values: Iterable[int | None]) -> np.ndarray:
    return np.array([_NO_COUNT if v is None else v for v in values], np.int64)


def to_dense(row: dict[str, Any]) -> DenseGrid:
    """The DenseGrid of a result row returned as columns (status "done")."""
    if row["status"] != "done":
        raise ValueError(f"{row['input']}: no voxels in a {row['status']} row ({row['error']})")
    shape = check_shape([int(n) for n in row["shape"]])
    count = shape[0] * shape[1] * shape[2]
    voxels = np.unpackbits(np.asarray(row["bits"], np.uint8), count=count).astype(bool)
    sizes = row["spacing"] if "spacing" in row else [row["voxel_size"]] * 3
    hx, hy, hz = (float(h) for h in sizes)
    placement = GridPlacement(shape, np.asarray(row["origin"], np.float64), (hx, hy, hz))
    return DenseGrid(voxels.reshape(shape), placement)


def result_of(row: dict[str, Any]) -> BatchResult:
    """A result row (without its voxels) as the BatchResult voxelize_many would give; its
    index is the row's `index` column, if the dataset had one, else -1."""

    def count(name: str) -> int | None:
        value = int(row[name])
        return None if value == _NO_COUNT else value

    status: Status = str(row["status"])  # type: ignore[assignment]
    origin = [float(v) for v in np.asarray(row["origin"], np.float64).reshape(3)]
    voxel_size = float(row["voxel_size"])
    sizes = np.asarray(row.get("spacing", [voxel_size] * 3), np.float64).reshape(3)
    size: VoxelSize | None = None  # (a row without a placement: NaN)
    if not np.isnan(sizes).any():
        size = float(sizes[0]) if not np.isnan(voxel_size) else (sizes[0], sizes[1], sizes[2])
    return BatchResult(
        index=int(row.get("index", -1)),
        input=str(row["input"]),
        output=Path(str(row["output"])) if row["output"] else None,
        status=status,
        triangles=count("triangles"),
        solid_voxels=count("solid_voxels"),
        open_columns=count("open_columns"),
        seconds=float(row["seconds"]),
        error=str(row["error"]) or None,
        device=str(row["device"]),
        warnings=_warnings_of(row),
        origin=None if np.isnan(origin).any() else (origin[0], origin[1], origin[2]),
        voxel_size=size,
    )


def _warnings_of(row: dict[str, Any]) -> tuple[Warning, ...]:
    """A row's warnings as the types they were raised as (OpenMeshWarning for a row of a
    dataset written without their kinds)."""
    texts = [text for text in str(row["warnings"]).split("\n") if text]
    kinds = str(row.get("warning_kinds", "")).split("\n")
    found: list[Warning] = []
    for at, text in enumerate(texts):
        kind = getattr(errors, kinds[at], None) if at < len(kinds) else None
        if isinstance(kind, type) and issubclass(kind, Warning):
            found.append(kind(text))
        else:
            found.append(OpenMeshWarning(text))
    return tuple(found)


def voxelize_dataset(
    dataset: ray.data.Dataset,
    *,
    grid: GridLike | None = None,
    out_dir: str | os.PathLike | None = None,
    format: str | OutputFormat = DEFAULT_FORMAT,
    actors: int | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    num_gpus: float | None = None,
    **constructor: Any,
) -> ray.data.Dataset:
    """`dataset` (rows with `path`, or `bytes` and `name`) mapped to result rows by a pool
    of `actors` VoxelizeBatch actors (default: one per GPU, else 2); lazy, as Ray Data is.
    Other keywords go to VoxelizeBatch (root, overwrite, skip_existing, the options).

    Each actor takes CHUNKS_IN_FLIGHT batches at a time: its worker reads the next batch's
    meshes while it voxelizes this one's, and never starts from empty between them."""
    import ray.data

    constructor_kwargs = _constructor_kwargs(grid, out_dir, format, constructor)
    resources = actor_options(num_gpus)
    return dataset.map_batches(
        VoxelizeBatch,
        fn_constructor_kwargs=constructor_kwargs,
        batch_size=batch_size,
        batch_format="numpy",
        compute=_actor_pool(ray.data.ActorPoolStrategy, _actor_count(actors, resources)),
        runtime_env=forwarded_runtime_env() or None,
        **resources,
    )


def _actor_pool(strategy: Any, size: int) -> Any:
    """ActorPoolStrategy of `size` actors taking CHUNKS_IN_FLIGHT batches each at a time,
    run side by side (a Ray Data without concurrent calls: one at a time, the next ones
    queued at the actor)."""
    concurrent = {
        "max_concurrent_calls_per_actor": CHUNKS_IN_FLIGHT,
        "enable_true_multi_threading": True,
    }
    accepted = inspect.signature(strategy).parameters
    if not all(name in accepted for name in concurrent):
        concurrent = {}
    return strategy(size=size, max_tasks_in_flight_per_actor=CHUNKS_IN_FLIGHT, **concurrent)


def _checked_actors(actors: int) -> int:
    """DeviceError for a pool of no actor (no mesh would be voxelized) or a count that is no
    whole number."""
    if isinstance(actors, bool) or not isinstance(actors, int) or actors < 1:
        raise DeviceError(f"actors must be a whole number, at least 1, not {actors!r}")
    return actors


def _constructor_kwargs(
    grid: GridLike | None,
    out_dir: str | os.PathLike | None,
    format: str | OutputFormat,
    constructor: dict[str, Any],
) -> dict[str, Any]:
    """VoxelizeBatch's keywords, checked here (before any actor starts), the format decoded
    once for every actor, out_dir made."""
    Options.create(grid, **{k: v for k, v in constructor.items() if k in BATCH_OPTION_NAMES})
    output_format = OutputFormat.named(format)
    if out_dir is not None:
        make_out_dir(Path(out_dir))
    return {"grid": grid, "out_dir": out_dir, "format": output_format, **constructor}


def _actor_count(actors: int | None, resources: dict[str, Any]) -> int:
    """As asked, else one per GPU of the cluster for GPU actors, else 2."""
    if actors is not None:
        return _checked_actors(actors)
    gpus = int(ray.cluster_resources().get("GPU", 0))
    return max(1, gpus) if resources.get("num_gpus") else 2


@option_keywords(BatchOptions)
def voxelize_files_on_ray(
    paths: Sequence[str | os.PathLike],
    *,
    address: str | None = None,
    out_dir: str | os.PathLike,
    format: str | OutputFormat = DEFAULT_FORMAT,
    root: str | os.PathLike | None = None,
    overwrite: bool = False,
    skip_existing: bool = False,
    up_axis: str | None = None,
    actors: int | None = None,
    grid: GridLike | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    started: ActorStart | None = None,
    **options: Unpack[BatchOptions],
) -> BatchRun:
    """voxelize_many's batch (files in, files out) on a Ray cluster: `address` "auto" (the
    running cluster), an address, or None (the cluster this process is connected to, else a
    new local one). The driver plans every output (and which ones a retry may replace:
    those that did not exist before), so a retried batch writes each file once. The actors
    start while it plans (`started`: the ones start_actors started earlier still, with the
    same keywords)."""
    checked = Options.create(grid, **options)
    if actors is not None:
        _checked_actors(actors)
    if is_shard_format(format):
        return _shards_on_ray(paths, address, out_dir, checked, skip_existing, overwrite,
                              actors, batch_size, dict(options))  # fmt: skip
    output_format = OutputFormat.named(format)
    if up_axis is not None and not output_format.takes_up_axis:
        raise OutputError("up_axis is for .vox outputs (format='vox') only")
    if started is None:
        started = start_actors(address=address, actors=actors, grid=grid, format=output_format,
                               up_axis=up_axis, most=len(paths), **options)  # fmt: skip
    try:
        tasks = plan_tasks(
            list(paths), out_dir=out_dir, format=output_format, root=root, overwrite=overwrite
        )
        make_out_dir(Path(out_dir))
        exists = {t.index: t.output is not None and os.path.lexists(t.output) for t in tasks}
    except BaseException:
        started.close()
        raise
    skipped = [t for t in tasks if skip_existing and exists[t.index]]
    rows = [
        {
            "index": task.index,
            "path": str(task.source),
            "output": str(task.output),
            "replace": bool(task.replace or not exists[task.index]),
        }
        for task in tasks
        if not (skip_existing and exists[task.index])  # a lookup, not a scan: linear in paths
    ]
    return BatchRun(_RayResults(rows, skipped, started, batch_size), len(tasks))


@option_keywords(BatchOptions)
def start_actors(
    *,
    address: str | None = None,
    actors: int | None = None,
    grid: GridLike | None = None,
    format: str | OutputFormat = DEFAULT_FORMAT,
    up_axis: str | None = None,
    most: int | None = None,
    **options: Unpack[BatchOptions],
) -> ActorStart:
    """voxelize_files_on_ray's actors (one per GPU of the cluster, or `actors`; no more than
    `most`), asked for on a thread: back once they are asked for (their processes start
    while the caller goes on), or after ASK_SECONDS where the cluster is slow to answer.
    Pass it as voxelize_files_on_ray's `started`."""
    constructor = _constructor_kwargs(grid, None, format, {"up_axis": up_axis, **options})

    def start() -> list[Any]:
        resources = actor_options(None)
        actor_class = ray.remote(_FileActor).options(
            **resources,
            max_concurrency=CHUNKS_IN_FLIGHT,
            max_restarts=-1,  # as Ray Data's actor pools: a killed actor restarts, and its
            max_task_retries=-1,  # chunks are retried there
            runtime_env=forwarded_runtime_env() or None,
        )
        count = _actor_count(actors, resources)
        count = max(1, min(count, most)) if most is not None else count
        return [actor_class.remote(**constructor) for _ in range(count)]

    started = ActorStart(address, start)
    started.wait_asked()  # (the caller's planning would hold the GIL that asking needs)
    return started


def _shards_on_ray(
    paths: Sequence[str | os.PathLike],
    address: str | None,
    store: str | os.PathLike,
    checked: Options,
    skip_existing: bool,
    overwrite: bool,
    actors: int | None,
    batch_size: int,
    options: dict[str, Any],
) -> BatchRun:
    """voxelize_files_on_ray into one voxel shard store (voxelizer.shards): the actors write
    their meshes' chunks, this driver the table."""
    shape = check_shard_shape(checked.shape, checked.voxel_size, checked.bounds, checked.pad)
    labels = [os.fspath(path) for path in paths]
    chunk_format = ShardFormat()
    started = start_actors(address=address, actors=actors, grid=shape, format=chunk_format,
                           most=len(labels), **options)  # fmt: skip
    try:
        writer = open_store(store, labels, shape, options=dict(checked.keywords()),
                            overwrite=overwrite, skip_existing=skip_existing)  # fmt: skip
        stored, missing, chunks = shard_outputs(writer, len(labels))
    except BaseException:
        started.close()
        raise
    skipped = [
        MeshTask(i, labels[i], labels[i], chunks[i], replace=True, format=chunk_format)
        for i in stored
    ]
    rows = [
        {"index": i, "path": labels[i], "output": str(chunks[i]), "replace": True} for i in missing
    ]
    results = _RayResults(rows, skipped, started, batch_size)
    return BatchRun(recorded(results, writer), len(labels))


class _RayResults(Iterator[BatchResult]):
    """The results of the rows from the actors started, as they come (the skipped tasks
    first); closing it, or its end, kills the actors and disconnects what their start
    connected, also when it was never iterated."""

    def __init__(self, rows: list[dict[str, Any]], skipped: list[MeshTask],
                 started: ActorStart, batch_size: int):  # fmt: skip
        self._started = started
        self._results = self._run(rows, skipped, batch_size)
        weakref.finalize(self, started.close)  # (a run dropped unread: its actors go too)

    def __next__(self) -> BatchResult:
        return next(self._results)

    def close(self) -> None:
        try:
            self._results.close()
        finally:
            self._started.close()

    def _run(
        self, rows: list[dict[str, Any]], skipped: list[MeshTask], batch_size: int
    ) -> Generator[BatchResult, None, None]:
        try:
            for task in skipped:
                yield task.skipped()
            if not rows:
                return
            actors = self._started.actors(len(rows))
            chunks = chunks_of(rows, batch_size, parts=len(actors) * CHUNKS_IN_FLIGHT)
            for columns in feed_actors(actors, chunks):
                for row in _rows_of(columns):
                    yield result_of(row)
        finally:
            self._started.close()


class _FileActor:
    """A VoxelizeBatch as a plain Ray actor (voxelize_files_on_ray): chunks of rows in, their
    result columns out, several chunks at a time."""

    def __init__(self, **constructor: Any):
        self.batch = VoxelizeBatch(**constructor)

    def run(self, chunk: dict[str, list[Any]]) -> dict[str, np.ndarray]:
        return self.batch({name: np.asarray(values) for name, values in chunk.items()})


def _rows_of(columns: dict[str, np.ndarray]) -> Iterator[dict[str, Any]]:
    names = list(columns)
    for row in range(len(columns[names[0]]) if names else 0):
        yield {name: columns[name][row] for name in names}
