"""The `voxelize` command: one mesh in, one solid voxelization out, one summary line; several
meshes go to the batch mode of voxelizer.batch.cli."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import NoReturn, TextIO

from .batch.cli import (
    add_batch_arguments,
    batch_requested,
    open_device_meanwhile,
    refuse_batch_options,
    run_batch,
)
from .budget import check_dense_fits
from .choices import (
    DEFAULT_SORT,
    DEFAULT_VARIANT,
    FILL_CHOICES,
    INDEXED_CHOICE,
    MODES,
    SORTS,
    SOUP_CHOICE,
    SURFACES,
    VARIANT_CHOICES,
)
from .cli_attributes import add_attribute_arguments, attribute_options, check_attribute_arguments
from .command_words import in_command_words
from .console import SIGPIPE_STATUS, error_line, guard_streams, interrupted_status, one_line
from .errors import (
    ColorWarning,
    GridError,
    ModeError,
    OpenMeshWarning,
    OutputError,
    OverlapWarning,
    ThinResultWarning,
    VoxelizerError,
)
from .grid_arguments import add_grid_arguments, check_grid_arguments, option_values
from .interrupts import terminate_as_interrupt
from .io.files import os_error_text
from .io.files import resolved as resolved_path
from .io.mesh_files import find_meshes
from .io.meshes import MeshLike, load_mesh
from .io.output import all_or_nothing, check_output_path, open_output
from .io.writers import ATTRIBUTE_FORMATS, OUTPUT_FORMATS, check_output_shape, save
from .log import stderr_logging
from .mesh import Mesh
from .options import Options, batch_options_of
from .placement import (
    DEFAULT_GRID,
    GridPlacement,
    VoxelSize,
    check_pad,
    check_shape,
    padded_shape,
    shape_text,
)
from .progress import TerminalProgress
from .stats import VOXEL_NOUNS, Stats
from .svo import SVO


def _voxelize_to_svo(
    args: argparse.Namespace, progress: TerminalProgress, mesh: MeshLike, out: Path | None = None
) -> SVO:
    """Mesh file (or the mesh already read from it) -> SVO: the one place the command
    voxelizes. `out`: the .svo file the octree streams into as it is made."""
    from .api import voxelize

    return voxelize(
        mesh,
        args.grid,
        device=args.device,
        out=out,
        overwrite=args.force,
        progress=progress,
        attributes=["face"] if args.face_ids else [],
        **attribute_options(args),
        **batch_options_of(args),  # the options of the same names
    )


EXIT_STATUS_HELP = """exit status:
  0    success
  1    bad input or environment (a missing or broken mesh, no such device, an
       output that exists, a grid the device cannot hold)
  2    usage error (an unknown option or option value, a grid that cannot be
       placed: a size, box or padding out of range)
  130  interrupted (Ctrl-C)
  141  the reader of stdout went away (voxelize ... | head): nothing printed
  143  terminated (SIGTERM: timeout, kill, a job scheduler), as cleanly as Ctrl-C"""


class _OneLineParser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors (which may quote a path) stay one line."""

    def error(self, message: str) -> NoReturn:
        super().error(one_line(message))


def _parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="voxelize",
        description="Exact solid and surface voxelization of triangle meshes on a Vulkan device\n"
        "(a GPU, or lavapipe on the CPU). By default (--mode solid) a voxel is set iff its\n"
        "centre is inside the mesh; --mode surface sets the voxels its triangles touch.",
        epilog=EXIT_STATUS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,  # keeps the epilog's lines
    )
    parser.add_argument(
        "model",
        nargs="*",
        metavar="MODEL",
        help="mesh file (PLY, OBJ, STL, OFF, GLB, ...); several, a directory, a glob or "
        "@list.txt make a batch (see --out-dir)",
    )
    add_grid_arguments(parser)
    _add_method_arguments(parser)
    _add_output_arguments(parser)
    _add_run_arguments(parser)
    add_batch_arguments(parser)
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument(
        "--version", action=_VersionAction, help="print the version (voxelizer.__version__)"
    )
    return parser


class _VersionAction(argparse.Action):
    """--version: the package's metadata is read only when it is asked for."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> NoReturn:
        from .version import package_version

        print(f"voxelize {package_version()}")  # on stdout, as argparse's own version action
        parser.exit()


def _add_method_arguments(parser: argparse.ArgumentParser) -> None:
    """How to voxelize: the shader variant, the fill, the mode and its surface, the sort."""
    parser.add_argument(
        "--variant",
        default=DEFAULT_VARIANT,
        metavar="NAME",
        help=f"shader variant: {', '.join(VARIANT_CHOICES)} (default {DEFAULT_VARIANT}: "
        f"{INDEXED_CHOICE} on a GPU unless the memory budget cannot hold its vertex buffer, "
        f"else {SOUP_CHOICE})",
    )
    parser.add_argument(
        "--fill-mode",
        default="parity",
        choices=FILL_CHOICES,
        help="parity (default: exact for closed meshes), winding (inside where the surface "
        "winds around the voxel centre more than half: open meshes, overlapping parts), "
        "auto (parity, or winding where the parity fill finds the mesh open or overlapping: "
        "data in the wild), vote (parity along six ray directions, four must agree) or "
        "union (closed parts counted by their winding: overlapping parts give their union)",
    )
    parser.add_argument(
        "--mode",
        default="solid",
        choices=MODES,
        help="solid (default: voxels whose centres are inside), surface (voxels the "
        "triangles touch, see --surface) or both (the solid and the conservative surface: "
        "parts thinner than a voxel survive)",
    )
    parser.add_argument(
        "--surface",
        choices=SURFACES,
        help="with --mode surface: conservative (default: every voxel whose closed cube a "
        "triangle touches) or thin (one voxel per column along each triangle's dominant axis)",
    )
    parser.add_argument(
        "--face-ids",
        action="store_true",
        help="with --mode surface or both, and -o FILE.svo or FILE.npz: also store each "
        "surface voxel's face id (the smallest index of the triangles that mark it)",
    )
    parser.add_argument(
        "--sort",
        default=DEFAULT_SORT,
        choices=SORTS,
        help=f"how pass 4 groups pairs by tile (default {DEFAULT_SORT})",
    )


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """What a single voxelization writes."""
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write the voxels, format by extension: .svo (sparse voxel octree, written "
        "as it is made), "
        ".binvox, .vox (MagicaVoxel), .npz (packed bits, origin, voxel "
        "size), .vti (VTK image data: ParaView, PyVista), "
        ".ply/.obj/.glb (the voxels' outer faces as a mesh), .stl (the same, binary STL "
        "for 3D printing)",
    )
    add_attribute_arguments(parser)
    parser.add_argument(
        "--up-axis",
        choices=("y", "z"),
        help="for -o FILE.vox: the model's up axis, which becomes MagicaVoxel's up (+z); "
        "z (default) keeps the axes, y turns +y to +z and +z to -y",
    )
    parser.add_argument(
        "--preview", metavar="PNG", help="write a PNG with three shaded views of the voxels"
    )
    parser.add_argument("--force", action="store_true", help="overwrite existing output files")


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The device, what to report, and the runs that do not voxelize."""
    parser.add_argument(
        "--device",
        metavar="INDEX|NAME",
        help="Vulkan device by index or name substring (default: "
        "$VOXELIZER_DEVICE, else the first discrete GPU, else any)",
    )
    parser.add_argument("--list-devices", action="store_true", help="list Vulkan devices and exit")
    parser.add_argument(
        "--check",
        action="store_true",
        help="print the mesh's edge-level report (boundary and non-manifold edges, degenerate "
        "and duplicate triangles) and exit without voxelizing",
    )
    parser.add_argument(
        "--stats",
        action="store_true",
        help="print per-pass GPU times, host times, memory and counts",
    )
    parser.add_argument(
        "--stats-json",
        metavar="FILE",
        help="write the same statistics as JSON (refuses to overwrite without --force)",
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no progress line and no summary line (errors and warnings still go to stderr)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log the device chosen, the memory plan and the shader modules to stderr "
        "(instead of the progress line); -vv also the GPU time per pass and a batch's "
        "start-up timeline",
    )


def main(argv: list[str] | None = None) -> int:
    try:
        parser = _parser()
        args = parser.parse_args(option_values(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt as exc:  # Ctrl-C (or SIGTERM) before the run: no traceback
        return interrupted_status(exc)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", OpenMeshWarning)
            warnings.simplefilter("always", OverlapWarning)
            warnings.simplefilter("always", ColorWarning)
            warnings.simplefilter("always", ThinResultWarning)
            warnings.showwarning = _one_line_warning
            with stderr_logging(args.verbose, prefix="voxelize: "):
                return _run(parser, args)
    except VoxelizerError as exc:
        if args.debug:
            raise
        error_line(command_line_message(exc))
        return 2 if isinstance(exc, GridError) else 1
    except MemoryError as exc:  # what no check foresaw: still one line, not a traceback
        if args.debug:
            raise
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else "MemoryError"
        error_line(f"out of host memory ({detail})")
        return 1
    except BrokenPipeError:
        if getattr(sys.stdout, "broken", False):  # the reader of stdout went away: quietly
            return SIGPIPE_STATUS
        if args.debug:
            raise
        error_line("a pipe to a helper process broke")
        return 1
    except OSError as exc:  # a path no check foresaw (a loop, a name too long): one line
        if args.debug:
            raise
        error_line(f"{exc.filename + ': ' if exc.filename else ''}{os_error_text(exc)}")
        return 1
    except KeyboardInterrupt as exc:
        return interrupted_status(exc)


def command_line_message(error: VoxelizerError) -> str:
    """The error in the command line's words: the library's overwrite=True is --force here."""
    if isinstance(error, OutputError) and error.exists:
        if "holds a slice stack" in str(error):
            return f"{error.path}: holds a slice stack (use --force to overwrite)"
        return f"{error.path}: file exists (use --force to overwrite)"
    return str(error)


def _one_line_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    print(f"voxelize: warning: {one_line(in_command_words(str(message)))}", file=sys.stderr)


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .gpu.device import list_devices

    if args.list_devices:
        for info in list_devices():
            print(info)
        return 0
    if not args.model:
        parser.error("a model file is required (or --list-devices)")
    if args.check:
        return _check(parser, args)
    if args.variant not in VARIANT_CHOICES:
        parser.error(f"unknown variant {args.variant!r} (choose from {', '.join(VARIANT_CHOICES)})")
    _check_mode(parser, args)
    check_grid_arguments(parser, args)
    if batch_requested(args):
        check_attribute_arguments(parser, args, None, batch=True)
        return run_batch(parser, args)
    refuse_batch_options(parser, args)
    args.model = args.model[0]
    # Before the mesh is read: a bad output path must not cost the whole run.
    output, preview, stats_json = _checked_outputs(parser, args)
    if args.up_axis is not None and (output is None or output.suffix.lower() != ".vox"):
        parser.error("--up-axis is for a .vox output (-o FILE.vox) only")
    if args.face_ids and (output is None or output.suffix.lower() not in FACE_ID_FORMATS):
        parser.error(
            "--face-ids stores the ids in an .svo or .npz output (-o FILE.svo or FILE.npz)"
        )
    check_attribute_arguments(parser, args, output, batch=False)

    started = time.perf_counter()
    open_device_meanwhile(args.device)
    mesh, load_ms = _check_dense_output(args, output, preview)
    if (args.stats or stats_json is not None) and not isinstance(mesh, Mesh):
        mesh, load_ms = _loaded(args.model)  # the statistics report the mesh's edges too
    # A redrawn line and the log's lines would garble each other: --verbose draws no progress.
    progress = TerminalProgress(quiet=args.quiet or args.verbose > 0)
    # An .svo alone streams into its file as the octree is made (never whole in memory).
    stream = output is not None and output.suffix == ".svo" and not (preview or stats_json)
    try:
        svo = _voxelize_to_svo(args, progress, mesh, out=output if stream else None)
        svo.stats.add_host(load=load_ms)  # a mesh read for the check counts as loading
        if isinstance(mesh, Mesh) and (args.stats or stats_json is not None):
            _add_topology(svo.stats, mesh)
        with all_or_nothing():  # a run writes all its files or none of them
            if output is not None and not stream:
                save(svo, output, overwrite=args.force, up_axis=args.up_axis)
            if preview is not None:
                from .io.preview import write_preview  # (the renderer: imported for it only)

                write_preview(svo, preview, overwrite=args.force)
            if args.slices is not None:
                from .io.slices import write_slices

                write_slices(svo, args.slices, overwrite=args.force)
            if stats_json is not None:
                _write_json(stats_json, svo.stats.to_dict(), overwrite=args.force)
    finally:
        progress.close()
    seconds = time.perf_counter() - started

    counts = svo.stats.counts
    written = [str(path) for path in (output, preview, args.slices) if path is not None]
    if not args.quiet:
        print(
            f"{one_line(Path(args.model).name)}: {counts['triangles']:,} triangles, grid "
            f"{shape_text(svo.shape)}, {svo.count():,} {VOXEL_NOUNS[args.mode]}, {seconds:.2f} s "
            f"({svo.stats.device}, {svo.stats.variant})"
            + (f" -> {one_line(', '.join(written))}" if written else "")
        )
    if args.stats:
        print(format_stats(svo.stats))
    return 0


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """--check: each mesh's edge-level report on stdout; no device, no voxels, no files.
    A mesh that cannot be read is one line on stderr, and the status is then 1."""
    asked = [
        option
        for option, value in (
            ("-o", args.output),
            ("--preview", args.preview),
            ("--stats", args.stats),
            ("--stats-json", args.stats_json),
        )
        if value
    ]
    if asked:
        parser.error(f"--check only reports on the mesh: leave out {', '.join(asked)}")
    failed = 0
    for path in find_meshes(args.model).paths:  # files, folders, globs, @list.txt
        try:
            mesh, _ = _loaded(str(path))
        except VoxelizerError as exc:
            error_line(str(exc))
            failed += 1
            continue
        topology = mesh.topology
        verdict = "closed" if topology.closed else "not closed"
        print(f"{one_line(path.name)}: {mesh.triangle_count:,} triangles, {verdict}")
        for name, value in asdict(topology).items():
            print(f"  {name:<24} {value:>12,}")
    return int(failed > 0)


def _loaded(model: str) -> tuple[Mesh, float]:
    """The mesh of a file and the milliseconds reading it took."""
    started = time.perf_counter()
    mesh = load_mesh(model)
    return mesh, (time.perf_counter() - started) * 1e3


def _add_topology(stats: Stats, mesh: Mesh) -> None:
    """The edge-level report in the statistics (--stats, --stats-json), with its host time."""
    started = time.perf_counter()
    topology = mesh.topology
    stats.add_host(check_topology=(time.perf_counter() - started) * 1e3)
    stats.count(**asdict(topology))


FACE_ID_FORMATS = ATTRIBUTE_FORMATS["face"]  # the outputs that store face ids


def _check_mode(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--mode, --surface and --fill-mode that do not go together are usage errors."""
    try:
        Options.create(
            mode=args.mode,
            surface=args.surface,
            fill_mode=args.fill_mode,
            attributes=["face"] if args.face_ids else [],
            fill_color=args.fill_color,
        )
    except ModeError as exc:
        parser.error(in_command_words(str(exc)).replace("fill_color: ", "--fill-color: "))


def _check_dense_output(
    args: argparse.Namespace, output: Path | None, preview: Path | None
) -> tuple[MeshLike, float]:
    """Before the GPU work: MemoryBudgetError if an output needs the dense (nx, ny, nz) array
    (every format but .svo, and --preview) and host memory cannot hold it, OutputError if the
    output's format cannot hold that shape (.binvox: cubes only). With --voxel-size the shape
    follows the mesh's box, so the mesh is read here: (what to voxelize, ms spent reading it)."""
    dense = [path for path in (output, preview) if path and path.suffix.lower() != ".svo"]
    if args.slices is not None or args.labels or args.colors:
        dense.append(Path(args.slices or "labels and colours"))
    if not dense:
        return args.model, 0.0
    mesh: MeshLike = args.model
    load_ms = 0.0
    voxel_size: VoxelSize = 1.0  # (cubes: a grid without bounds always has them)
    if args.voxel_size is None and args.bounds is None:
        shape = check_shape(args.grid or DEFAULT_GRID)
        if args.fit is None:  # with --fit the border is inside the grid
            shape = padded_shape(shape, check_pad(args.pad))
    else:
        mesh, load_ms = _loaded(args.model)
        placement = GridPlacement.around(
            mesh,
            None if args.grid is None else check_shape(args.grid),
            args.voxel_size,
            args.bounds,
            box_fit=args.box_fit,
            pad=check_pad(args.pad),
        )
        shape, voxel_size = placement.shape, placement.voxel_size
    if output is not None:
        check_output_shape(output, shape, voxel_size)
    check_dense_fits(shape, str(dense[0]))
    return mesh, load_ms


def _checked_outputs(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[Path | None, Path | None, Path | None]:
    """-o, --preview and --stats-json as paths, each checked (a known extension, a folder
    that takes files, no existing file without --force, no path named twice): usage errors
    exit 2, an unwritable or existing file is an OutputError."""
    output = Path(args.output) if args.output else None
    preview = Path(args.preview) if args.preview else None
    stats_json = Path(args.stats_json) if args.stats_json else None
    named = {
        "MODEL": Path(args.model),
        "-o": output,
        "--preview": preview,
        "--stats-json": stats_json,
    }
    seen: dict[Path, str] = {}
    for option, path in named.items():
        if path is None:
            continue
        resolved = resolved_path(path)
        if resolved in seen:
            parser.error(f"{seen[resolved]} and {option} name the same file {path}")
        seen[resolved] = option
    if output is not None and output.suffix.lower() not in OUTPUT_FORMATS:
        parser.error(
            f"cannot write {output.suffix or 'files without an extension'}: "
            f"use {', '.join(OUTPUT_FORMATS)}"
        )
    if preview is not None:
        from .io.preview import PREVIEW_SUFFIX  # (the renderer: imported for a preview only)

        if preview.suffix.lower() != PREVIEW_SUFFIX:
            parser.error(
                f"--preview writes PNG images only: name it {PREVIEW_SUFFIX}, not {preview}"
            )
    for path in (output, preview, stats_json):
        if path is not None:
            check_output_path(path, overwrite=args.force)
    if args.slices is not None:
        from .io.slices import check_slices_folder

        check_slices_folder(Path(args.slices), overwrite=args.force)
    return output, preview, stats_json


def _write_json(path: Path, stats: dict, overwrite: bool) -> None:
    with open_output(path, overwrite) as fh:
        fh.write((json.dumps(stats, indent=2) + "\n").encode())


def format_stats(stats: Stats) -> str:
    """The statistics of one voxelization as an aligned plain-text table."""
    memory = stats.memory
    lines = [f"grid {shape_text(stats.shape)}"]
    lines.append(f"GPU time per pass, ms ({stats.device}, timestamps):")
    lines += [f"  {name:<24} {ms:12.3f}" for name, ms in stats.gpu_ms.items()]
    lines.append(f"  {'total':<24} {stats.gpu_total_ms:12.3f}")
    lines.append("host time, ms:")
    lines += [f"  {name:<24} {ms:12.3f}" for name, ms in stats.host_ms.items()]
    lines.append("device memory, bytes (all held at once):")
    lines += [f"  {name:<24} {size:>12,}" for name, size in memory.device_buffers.items()]
    lines.append(f"  {'peak':<24} {memory.device_peak_bytes:>12,}")
    lines.append(f"  {'staging peak':<24} {memory.staging_peak_bytes:>12,}")
    lines.append("workload:")
    lines += [f"  {name:<24} {value:>12,}" for name, value in stats.counts.items()]
    return "\n".join(lines)


def run() -> NoReturn:
    """The `voxelize` command (and `python -m voxelizer`): main(), then out at once.

    When main returns, every output is written, synced and in place; the streams are
    flushed here. What the usual exit would still do (close the device and the driver, let
    the reading helpers go, take Python's modules apart) is a measurable part of a short
    batch command (docs/benchmarks-history.md, "The batch command's last second"), and the system
    does it at once: the device's memory goes with the process, and the helpers see their
    input end and leave. A process that made multiprocessing's resources (the worker
    processes of --jobs) exits the usual way: their finalizers must run, or
    multiprocessing's resource tracker reports them as leaked. Code that calls main()
    itself keeps the usual exit."""
    stdout = guard_streams()  # closed or broken streams: console's rules
    terminate_as_interrupt()  # SIGTERM (timeout, kill, Slurm, systemd) ends it as Ctrl-C does
    try:
        try:
            code = main()
        except SystemExit as exc:  # argparse's --help, --version and usage errors
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        stdout.flush()
    except BrokenPipeError:  # the reader went away (while --help printed, or at the end)
        code = SIGPIPE_STATUS
    except OutputError as exc:  # stdout unwritable (a full disk) at the last flush
        error_line(str(exc))
        code = 1
    if stdout.broken and code == 0:
        code = SIGPIPE_STATUS
    sys.stderr.flush()
    if "multiprocessing.resource_tracker" in sys.modules:
        sys.exit(code)
    os._exit(code)


if __name__ == "__main__":
    run()
