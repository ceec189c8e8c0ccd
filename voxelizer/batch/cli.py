"""The `voxelize` command's batch mode: several inputs (files, directories, globs, @list.txt)
into a folder that mirrors their tree, with a progress bar over meshes, one line per failure,
a JSON-lines log and a summary line. voxelizer.cli parses the options (with the ones added
here) and hands a batch over; the work is voxelize_many's (or voxelizer.batch.ray's), imported
for a batch only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ..command_words import in_command_words
from ..errors import DeviceError, OutputError, ThinResultWarning, VoxelizerError
from ..grid_spec import DEFAULT_GRID
from ..io.mesh_files import (
    GLOB_CHARACTERS,
    MeshFiles,
    find_meshes,
    refuse_outputs_of_inputs,
    replaced_input,
)
from ..io.output import check_output_path
from ..io.writers import OUTPUT_FORMATS, OutputFormat
from ..options import Options, batch_options_of
from ..parallel import keep_freed_memory
from ..progress import TerminalProgress
from ..shards import ShardFormat, is_shard_format
from .tasks import DEFAULT_FORMAT, BatchPlan, plan_tasks
from .timeline import timeline

if TYPE_CHECKING:
    from .engine import BatchRun
    from .ray_start import ActorStart

# Options that only mean something for a batch, as argparse names them (dest, flag).
BATCH_ONLY = (
    ("format", "--format"),
    ("skip_existing", "--skip-existing"),
    ("jobs", "--jobs"),
    ("devices", "--devices"),
    ("log", "--log"),
    ("ray", "--ray"),
)
# Options of one output, with what a batch uses instead.
SINGLE_ONLY = (
    ("output", "-o", "--out-dir DIR and --format"),
    ("preview", "--preview", "a single input"),
    ("stats_json", "--stats-json", "--log FILE"),
    ("stats", "--stats", "--log FILE"),
)


def add_batch_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of batch mode, in a group of their own in --help."""
    group = parser.add_argument_group(
        "many meshes",
        "Several inputs, a directory (searched recursively for mesh files), a glob "
        "('meshes/**/*.obj', quoted) or @list.txt (one input per line) voxelize each mesh "
        "into --out-dir, which mirrors the input tree.",
    )
    group.add_argument(
        "--out-dir",
        metavar="DIR",
        help="write one file per mesh here, at the mesh's path below the inputs' common "
        "folder (required for a batch; created if missing)",
    )
    group.add_argument(
        "--format",
        type=_format_value,
        metavar="FMT",
        help=f"the files' format: {', '.join(s[1:] for s in OUTPUT_FORMATS)} "
        f"(default {DEFAULT_FORMAT}); or zarr: --out-dir becomes one Zarr store of every "
        "mesh's grid (one --grid for all), with their placements and a table of inputs, "
        "status, errors, counts and warnings (see docs/guide/datasets-for-learning.md)",
    )
    group.add_argument(
        "--skip-existing",
        action="store_true",
        help="leave meshes whose output exists (resume an interrupted batch)",
    )
    group.add_argument(
        "--jobs",
        type=_positive_int,
        metavar="N",
        help="workers, one Voxelizer each, spread over --devices (default: one per "
        "device; the first runs in this process, the others in processes of their own; at "
        "most one per mesh and two per CPU core); with --ray, the number of actors",
    )
    group.add_argument(
        "--devices",
        metavar="LIST",
        help="devices for the workers, by index or name, separated by commas (e.g. 0,1)",
    )
    group.add_argument(
        "--log",
        metavar="FILE",
        help="append one JSON line per mesh: input, output, status, triangles, solid_voxels, "
        "open_columns, seconds, error, device, warnings, thin (a ThinResultWarning)",
    )
    group.add_argument(
        "--ray",
        metavar="auto|ADDRESS",
        help="run the batch on a Ray cluster (pip install 'voxelizer[ray]'); inputs and "
        "--out-dir must be paths every node can reach; an address where no cluster "
        "answers within 60 s is an error",
    )


def _format_value(text: str) -> OutputFormat:
    """--format, decoded once: the value the batch's tasks and writers take (zarr: one
    voxel shard store, --out-dir itself)."""
    if is_shard_format(text):
        return ShardFormat()
    try:
        return OutputFormat.named(text)
    except OutputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 up, not {text!r}")
    return value


def batch_requested(args: argparse.Namespace) -> bool:
    """Several inputs, --out-dir, or one input that names a set (a directory, a glob that is
    no file's name, @list.txt)."""
    models: list[str] = args.model
    if len(models) > 1 or args.out_dir is not None:
        return True
    if not models:
        return False
    spec = models[0]
    if os.path.isdir(spec):  # (os.path's tests: a name too long is no folder, not an error)
        return True
    if os.path.lexists(spec):
        return False
    return spec.startswith("@") or bool(GLOB_CHARACTERS & set(spec))


def refuse_batch_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A usage error for a batch option given with a single input."""
    for dest, flag in BATCH_ONLY:
        if getattr(args, dest) not in (None, False):
            parser.error(
                f"{flag} is for batches: give several inputs, a directory, a glob, "
                "@list.txt, or --out-dir"
            )


def run_batch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Check every option and path, then voxelize every mesh; 1 if any failed. With -vv,
    the start-up's timeline too (voxelizer.batch.timeline)."""
    ray_starts: list[ActorStart] = []  # (closed here too: where the batch ended before it)
    if args.verbose >= 2:
        timeline.start()
    try:
        return _run_batch(parser, args, ray_starts)
    finally:
        for start in ray_starts:
            start.close()
        ahead = sys.modules.get("voxelizer.batch.worker_processes")  # (if workers started)
        if ahead is not None:
            ahead.stop_workers_ahead()  # those the batch did not take (it ended before)
        timeline.mark("end")
        timeline.stop()


def _run_batch(
    parser: argparse.ArgumentParser, args: argparse.Namespace, ray_starts: list[ActorStart]
) -> int:
    for dest, flag, instead in SINGLE_ONLY:
        if getattr(args, dest) not in (None, False):
            parser.error(f"{flag} names one output; for a batch use {instead}")
    if args.out_dir is None:
        parser.error(
            "--out-dir DIR is required with several inputs, a directory, a glob or "
            "@list.txt (the outputs mirror the input tree there)"
        )
    if args.force and args.skip_existing:
        parser.error("--force and --skip-existing exclude each other")
    output_format: OutputFormat = args.format or OutputFormat.named(DEFAULT_FORMAT)
    if args.up_axis is not None and not output_format.takes_up_axis:
        parser.error("--up-axis is for --format vox only")
    if args.device is not None and args.devices is not None:
        parser.error("--device and --devices exclude each other (use --devices)")
    if args.ray is not None and (args.devices is not None or args.device is not None):
        parser.error("--devices is for one machine; on Ray every actor takes a device of its node")

    # Every path before any work: the inputs here, the outputs and the log once the helpers
    # are forked and the device is opening (their checks overlap its start-up; an error
    # there still ends the command before any work, as the helpers' input ends with it).
    out_dir = Path(args.out_dir)
    if args.ray is not None:  # its actors start while the files are found and planned
        ray_starts.append(_start_ray(args, output_format))
    files = find_meshes(args.model, exclude=out_dir)
    timeline.mark("meshes found", f"{len(files.paths)}")
    if is_shard_format(output_format) and args.grid is None and args.voxel_size is not None:
        parser.error("--format zarr stores every mesh on one grid: give --grid, not --voxel-size")
    devices = args.devices if args.devices is not None else args.device
    selectors = None
    if args.ray is None:
        # This process voxelizes mesh after mesh: each one's arrays (read, staged, results)
        # reuse the memory of the last one's instead of fresh pages (the device's thread
        # among them: docs/benchmarks.md, "Reading at memory speed").
        keep_freed_memory()
        _start_reading(meshes=len(files.paths), devices=devices, jobs=args.jobs, args=args)
        timeline.mark("helpers forked")
        if devices is not None:
            selectors = _device_selectors(devices)
        _open_local_device(devices, args, output_format)
    plan = _checked_outputs_and_devices(parser, args, files, output_format, selectors=selectors)
    timeline.mark("outputs checked")
    log_path = Path(args.log) if args.log else None

    progress = TerminalProgress(quiet=args.quiet or args.verbose > 0)
    started = time.perf_counter()
    tally: Counter[str] = Counter()
    log = open(log_path, "a", encoding="utf-8") if log_path is not None else None  # noqa: SIM115
    try:
        with (
            _warnings_above(progress),
            _results(args, files, plan, output_format, ray_starts) as run,
        ):
            progress("meshes", 0, run.total)
            for result in run:
                timeline.mark("first result", "its output in place")
                tally[result.status] += 1
                tally["thin"] += any(isinstance(w, ThinResultWarning) for w in result.warnings)
                if result.error is not None:
                    progress.write_above(f"voxelize: error: {result.error}")
                if log is not None:
                    log.write(json.dumps(result.to_record()) + "\n")
                    log.flush()
                progress("meshes", sum(tally.values()), run.total)
                if tally["done"] + tally["skipped"] + tally["failed"] == run.total:
                    timeline.mark("last result", f"{run.total} meshes")
    except KeyboardInterrupt:
        progress.close()  # what was done so far, then main's "interrupted"
        print(_summary(tally, time.perf_counter() - started, out_dir, interrupted=True))
        raise
    finally:
        progress.close()
        if log is not None:
            log.close()
    if not args.quiet:
        print(_summary(tally, time.perf_counter() - started, out_dir, interrupted=False))
    return 1 if tally["failed"] else 0


def _checked_outputs_and_devices(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    files: MeshFiles,
    output_format: OutputFormat,
    *,
    selectors: list[str | int | None] | None,
) -> BatchPlan | None:
    """_checked_outputs, then the devices of --devices (`selectors`) checked (a wrong one
    said first, before an output's error): then the device here opened meanwhile, on its
    thread, made the process's Vulkan instance that the check reads."""
    try:
        plan = _checked_outputs(parser, args, files, output_format)
    except (VoxelizerError, SystemExit):
        _check_devices(selectors)
        raise
    _check_devices(selectors)
    if selectors is not None:
        timeline.mark("devices checked")
    return plan


def _checked_outputs(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    files: MeshFiles,
    output_format: OutputFormat,
) -> BatchPlan | None:
    """The batch's outputs, planned once and checked: none replaces an input or an
    @list.txt, none exists (without --force or --skip-existing), and --log names none of
    them. The plan goes to the engine as it is (None for --format zarr: one store)."""
    out_dir = Path(args.out_dir)
    plan = None
    if is_shard_format(output_format):
        outputs = [out_dir] if os.path.lexists(out_dir) else []
        refuse_outputs_of_inputs([*files.paths, *files.lists], outputs)
    else:
        tasks = plan_tasks(
            files.paths, out_dir=out_dir, format=output_format, root=files.root,
            overwrite=args.force, other_inputs=files.lists,
        )  # fmt: skip
        plan = BatchPlan(tuple(tasks), out_dir, output_format)
        outputs = plan.outputs
    if not args.force and not args.skip_existing:
        existing = [output for output in outputs if os.path.lexists(output)]
        if existing:
            more = f" (and {len(existing) - 1} more)" if len(existing) > 1 else ""
            raise OutputError(
                f"{existing[0]}: file exists{more} (use --force to overwrite, or "
                "--skip-existing to resume)"
            )
    if args.log:
        _check_log(parser, Path(args.log), files, outputs)
    return plan


def _open_local_device(
    devices: str | None, args: argparse.Namespace, output_format: OutputFormat
) -> None:
    """Start opening the device of the worker that runs in this process (the first of
    --devices) on a thread, once the helpers are forked: its opening (first the Vulkan
    instance, which the check of --devices then reads) overlaps the checks of the paths and
    the batch's planning, and the worker's shared Voxelizer is then the one opened here.
    The kernels of the batch's calls are built there next, while the first meshes are read
    (options that do not check out build none: the batch reports them)."""
    from .engine import device_list

    try:
        local = device_list(devices)[0]
    except DeviceError:
        _release_workers_ahead()
        return  # the worker says what is wrong
    try:
        options = Options.create(args.grid, **batch_options_of(args))
    except Exception:  # (whatever it is, the batch reports it as it would have)
        open_device_meanwhile(local)
    else:
        open_device_meanwhile(local, kernels=(options, output_format.dense))


def open_device_meanwhile(
    device: str | int | None, kernels: tuple[Options, bool] | None = None
) -> None:
    """Open the shared Voxelizer of `device` (api.shared_voxelizer) on a thread while this
    one gets on (reads the mesh, checks the paths): the driver's start-up (docs/benchmarks.md,
    "End to end on the H100") overlaps that work, and the voxelization's own call of
    shared_voxelizer finds it open or waits for it. `kernels` (the options, and whether the
    calls are dense): then the thread starts building their kernels as soon as the device is
    open (Voxelizer.prepare). A failure is left to that call, which opens again and reports
    it as it would have. Not a daemon: a run that ends early (an error, Ctrl-C) waits for it
    at exit, as the driver's code must not run on while the process tears the loader down (a
    segfault). Started once no more processes are forked from this one."""
    from ..api import shared_voxelizer

    def open_device() -> None:
        with suppress(Exception):
            try:
                opened = shared_voxelizer(device)
                timeline.mark("device open", opened.device_name)
            finally:
                _release_workers_ahead()  # (the worker here, then theirs)
            if kernels is not None:
                options, dense = kernels
                building = opened.prepare(options, dense=dense)
                if timeline.on:  # (joined only to say when: the calls wait for their kernels)
                    if building is not None:
                        building.join()
                    timeline.mark("kernels built")

    threading.Thread(target=open_device, name="voxelize-open-device").start()


def _release_workers_ahead() -> None:
    """Let the worker processes started ahead of the batch (if any) open their devices, now
    that the device here is open: worker_processes.release_workers_ahead."""
    ahead = sys.modules.get("voxelizer.batch.worker_processes")  # (imported if started)
    if ahead is not None:
        ahead.release_workers_ahead()


def _check_log(
    parser: argparse.ArgumentParser, log: Path, files: MeshFiles, outputs: list[Path]
) -> None:
    """--log must name a file of its own, appended to: not an input mesh, an @list.txt or
    an output of the batch (JSON lines appended to any of those would corrupt it)."""
    for named, what in (([*files.paths, *files.lists], "an input"), (outputs, "an output")):
        found = replaced_input(named, [log])
        if found is not None:
            parser.error(f"--log {log} names {what} of the batch ({found[1]})")
    check_output_path(log, overwrite=True)  # a folder that takes files; appended to


def _start_reading(
    *, meshes: int, devices: str | None, jobs: int | None, args: argparse.Namespace
) -> None:
    """The other workers' processes, then the writing and reading helpers of the worker in
    this process, started before anything here opens Vulkan (opening the device does): then
    they are forked, ready at once (a worker starts its own helpers and opens its device
    while this process plans; a helper reads while the device here opens), not started by
    spawn or exec (which cost a Python start and the imports).
    voxelize_many takes them as they are. The engine imports the API and the pipeline here,
    before the fork: deferred to the thread that opens the device, their import would come
    between the fork and the device's opening, beside the planning, and the worker could
    then open the device first (docs/benchmarks.md, "The batch command's start-up")."""
    from .engine import default_load_processes, device_list, start_process_workers
    from .helper_processes import fork_allowed
    from .readers import shared_load_processes
    from .write_processes import default_write_processes, shared_write_processes

    try:
        workers = jobs if jobs is not None else len(device_list(devices))
    except DeviceError:
        return  # _device_selectors says what is wrong
    # as voxelize_many decides, for each worker
    writers = default_write_processes(workers, _grid_side(args))
    writers = writers if meshes >= 4 * writers and fork_allowed() else 0
    helpers = default_load_processes(workers)
    helpers = helpers if meshes >= 2 * helpers else 0
    # The other workers' processes first (forked, for voxelize_many to take): each forks
    # helpers of its own, and the reading processes' threads here forbid a fork.
    start_process_workers(
        devices, jobs=jobs, meshes=meshes, write_processes=writers, load_processes=helpers
    )
    if writers:
        shared_write_processes(writers)  # forked first: the readers' threads start at once
    if helpers:
        shared_load_processes(helpers)


def _grid_side(args: argparse.Namespace) -> int | None:
    """The grid's longest side as --grid asks (the default grid without --grid or
    --voxel-size), None where the meshes' sizes decide it (--voxel-size)."""
    if args.grid is None:
        return DEFAULT_GRID if args.voxel_size is None else None
    return args.grid if isinstance(args.grid, int) else max(args.grid)


def _device_selectors(devices: str) -> list[str | int | None]:
    """The selectors of --devices; DeviceError where it is no list of them."""
    from .engine import device_list

    try:
        return device_list(devices)
    except DeviceError as exc:
        raise DeviceError(f"--devices: {exc}") from None


def _check_devices(selectors: list[str | int | None] | None) -> None:
    """DeviceError unless every selector of --devices names a device (before any worker
    starts). Asked once the outputs are checked: the process's one Vulkan instance is then
    made, or being made, by the thread that opens the device here (_open_local_device), and
    not first on this thread, beside the checks."""
    from ..gpu.device import list_devices

    if selectors is None:
        return
    found = list_devices()
    for selector in selectors:
        text = str(selector)
        if text.isdigit():
            if int(text) >= len(found):
                raise DeviceError(
                    f"no Vulkan device with index {text} (there are {len(found)}; see "
                    "voxelize --list-devices)"
                )
        elif not any(text.lower() in info.name.lower() for info in found):
            names = ", ".join(info.name for info in found)
            raise DeviceError(f"no Vulkan device matches {text!r} (available: {names})")


def _start_ray(args: argparse.Namespace, output_format: OutputFormat) -> ActorStart:
    """--ray's actors, asked for on a thread before the files are found and planned."""
    from .ray_start import command_driver

    command_driver()
    try:
        from .ray import start_actors
    except ModuleNotFoundError as exc:
        raise VoxelizerError(
            f"--ray needs Ray ({exc.name} is missing): pip install 'voxelizer[ray]'"
        ) from None
    return start_actors(address=args.ray, actors=args.jobs, grid=args.grid, format=output_format,
                        up_axis=args.up_axis, **batch_options_of(args))  # fmt: skip


def _results(
    args: argparse.Namespace,
    files: MeshFiles,
    plan: BatchPlan | None,
    output_format: OutputFormat,
    ray_starts: list[ActorStart],
) -> BatchRun:
    """The batch's results, from this machine's workers (over `plan`, the outputs as
    checked) or from Ray."""
    from .engine import voxelize_many, voxelize_planned  # the batch machinery: for batches only

    options = batch_options_of(args)
    if args.ray is not None:
        from .ray import voxelize_files_on_ray  # (imported by _start_ray)

        return voxelize_files_on_ray(
            files.paths,
            address=args.ray,
            out_dir=args.out_dir,
            format=output_format,
            root=files.root,
            overwrite=args.force,
            skip_existing=args.skip_existing,
            up_axis=args.up_axis,
            actors=args.jobs,
            grid=args.grid,
            started=ray_starts[0],
            **options,
        )
    devices = args.devices if args.devices is not None else args.device
    if plan is not None:
        return voxelize_planned(
            plan,
            grid=args.grid,
            devices=devices,
            jobs=args.jobs,
            skip_existing=args.skip_existing,
            up_axis=args.up_axis,
            **options,
        )
    return voxelize_many(  # one voxel shard store
        files.paths,
        grid=args.grid,
        devices=devices,
        jobs=args.jobs,
        out_dir=args.out_dir,
        format=output_format,
        root=files.root,
        overwrite=args.force,
        skip_existing=args.skip_existing,
        **options,
    )


@contextmanager
def _warnings_above(progress: TerminalProgress) -> Iterator[None]:
    """While open, warnings print as one `voxelize: warning:` line above the progress bar."""

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        progress.write_above(f"voxelize: warning: {in_command_words(str(message))}")

    saved = warnings.showwarning
    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = saved


def _summary(tally: Counter[str], seconds: float, out_dir: Path, interrupted: bool) -> str:
    done, skipped, failed = tally["done"], tally["skipped"], tally["failed"]
    rate = done / seconds if seconds > 0 else 0.0
    thin = f" ({tally['thin']:,} thin)" if tally["thin"] else ""
    return (
        f"{done + skipped + failed:,} meshes{' before the interrupt' if interrupted else ''}: "
        f"{done:,} done{thin}, {skipped:,} skipped, {failed:,} failed in {seconds:.2f} s "
        f"({rate:.1f} meshes/s) -> {out_dir}"
    )
