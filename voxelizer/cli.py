"""The `voxelize` command: one mesh in, one solid voxelization out, one summary line."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import warnings
from pathlib import Path
from typing import TextIO

from . import __version__
from .budget import parse_size
from .errors import GridError, MemoryBudgetError, OpenMeshWarning, OutputError, VoxelizerError
from .io.preview import write_preview
from .io.writers import OUTPUT_FORMATS, save
from .log import stderr_logging
from .pipeline.passes import DEFAULT_SORT, DEFAULT_VARIANT, SORTS, VARIANTS
from .pipeline.runner import FILL_MODES
from .placement import DEFAULT_GRID, check_bounds, check_shape, check_voxel_size, shape_text
from .progress import TerminalProgress
from .stats import Stats
from .svo import SVO


def _voxelize_to_svo(args: argparse.Namespace, progress: TerminalProgress) -> SVO:
    """Mesh file -> SVO: the one place the command voxelizes."""
    from .api import voxelize

    return voxelize(
        args.model,
        args.grid,
        device=args.device,
        variant=args.variant,
        fill_mode=args.fill_mode,
        sort=args.sort,
        voxel_size=args.voxel_size,
        bounds=args.bounds,
        max_memory=args.max_memory,
        progress=progress,
    )


def _grid_value(text: str) -> int | tuple[int, int, int]:
    """--grid N or NXxNYxNZ, checked (a usage error otherwise)."""
    match = re.fullmatch(r"(-?\d+)(?:x(-?\d+)x(-?\d+))?", text.strip().lower(), re.ASCII)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"invalid grid {text!r}: write N or NXxNYxNZ (e.g. 512 or 512x256x128)"
        )
    sides = [int(side) for side in match.groups() if side is not None]
    # the pattern matches one side or three
    grid: int | tuple[int, int, int] = (
        sides[0] if len(sides) == 1 else (sides[0], sides[1], sides[2])
    )
    try:
        check_shape(grid)
    except GridError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return grid


def _voxel_size_value(text: str) -> float:
    try:
        return check_voxel_size(float(text))
    except (ValueError, GridError):
        raise argparse.ArgumentTypeError(
            f"voxel size must be a positive finite number, not {text!r}"
        ) from None


def _memory_value(text: str) -> int:
    try:
        return parse_size(text)
    except MemoryBudgetError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# The exit statuses of `voxelize`, as --help and README.md state them.
EXIT_STATUS_HELP = """exit status:
  0    success
  1    bad input or environment (a missing or broken mesh, no such device, an
       output that exists, a grid the device cannot hold)
  2    usage error (an unknown option or option value)
  130  interrupted (Ctrl-C)"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voxelize",
        description="Exact solid voxelization of a triangle mesh on a Vulkan device:\n"
        "a voxel is set iff its centre is inside the mesh.",
        epilog=EXIT_STATUS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,  # keeps the epilog's lines
    )
    parser.add_argument("model", nargs="?", help="mesh file (PLY, OBJ, STL, OFF, GLB, ...)")
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--grid",
        type=_grid_value,
        metavar="N|NXxNYxNZ",
        help="voxels per side (a cube), or along x, y and z (e.g. 512x256x128); "
        f"each a multiple of 4 from 8 up (default {DEFAULT_GRID})",
    )
    size.add_argument(
        "--voxel-size",
        type=_voxel_size_value,
        metavar="H",
        help="voxel side in world units instead of --grid: each side of the grid "
        "becomes the fewest voxels (a multiple of 4) that cover the box",
    )
    parser.add_argument(
        "--bounds",
        type=float,
        nargs=6,
        metavar=("XMIN", "YMIN", "ZMIN", "XMAX", "YMAX", "ZMAX"),
        help="place the grid on this box instead of the mesh's bounding box "
        "(it must contain the mesh)",
    )
    parser.add_argument(
        "--max-memory",
        type=_memory_value,
        metavar="SIZE",
        help="device memory budget, e.g. 512MiB, 2GiB, 1.5GB or plain bytes",
    )
    parser.add_argument(
        "--variant",
        default=DEFAULT_VARIANT,
        metavar="NAME",
        help=f"shader variant: {', '.join(VARIANTS)} (default {DEFAULT_VARIANT})",
    )
    parser.add_argument(
        "--fill-mode",
        default="parity",
        choices=FILL_MODES,
        help="parity (default: exact for closed meshes) or vote (parity along "
        "six ray directions, four must agree: repairs small holes)",
    )
    parser.add_argument(
        "--sort",
        default=DEFAULT_SORT,
        choices=SORTS,
        help=f"how pass 4 groups pairs by tile (default {DEFAULT_SORT})",
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write the voxels, format by extension: .svo (sparse voxel octree), "
        ".binvox, .vox (MagicaVoxel), .npz (packed bits, origin, voxel "
        "size), .ply/.obj/.glb (the voxels' outer faces as a mesh)",
    )
    parser.add_argument(
        "--preview", metavar="PNG", help="write a PNG with three shaded views of the voxels"
    )
    parser.add_argument("--force", action="store_true", help="overwrite existing output files")
    parser.add_argument(
        "--device",
        metavar="INDEX|NAME",
        help="Vulkan device by index or name substring (default: "
        "$VOXELIZER_DEVICE, else the first discrete GPU, else any)",
    )
    parser.add_argument("--list-devices", action="store_true", help="list Vulkan devices and exit")
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
        help="log the device chosen, the memory plan and the shader cache to stderr "
        "(instead of the progress line); -vv also the GPU time per pass",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="version", version=f"voxelize {__version__}")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", OpenMeshWarning)
            warnings.showwarning = _one_line_warning
            with stderr_logging(args.verbose, prefix="voxelize: "):
                return _run(parser, args)
    except VoxelizerError as exc:
        if args.debug:
            raise
        print(f"voxelize: error: {command_line_message(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("voxelize: interrupted", file=sys.stderr)
        return 130


def command_line_message(error: VoxelizerError) -> str:
    """The error in the command line's words: the library's overwrite=True is --force here."""
    if isinstance(error, OutputError) and error.exists:
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
    print(f"voxelize: warning: {message}", file=sys.stderr)


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .gpu.device import list_devices

    if args.list_devices:
        for info in list_devices():
            print(info)
        return 0
    if not args.model:
        parser.error("a model file is required (or --list-devices)")
    if args.variant not in VARIANTS:
        parser.error(f"unknown variant {args.variant!r} (choose from {', '.join(VARIANTS)})")
    if args.bounds is not None:
        try:
            args.bounds = check_bounds([args.bounds[:3], args.bounds[3:]])
        except GridError as exc:
            parser.error(str(exc))
    output = Path(args.output) if args.output else None
    if output is not None and output.suffix.lower() not in OUTPUT_FORMATS:
        parser.error(
            f"cannot write {output.suffix or 'files without an extension'}: "
            f"use {', '.join(OUTPUT_FORMATS)}"
        )
    preview = Path(args.preview) if args.preview else None
    for path in (output, preview, Path(args.stats_json) if args.stats_json else None):
        if path is not None and path.exists() and not args.force:
            raise OutputError.file_exists(path)

    started = time.perf_counter()
    # A redrawn line and the log's lines would garble each other: --verbose draws no progress.
    progress = TerminalProgress(quiet=args.quiet or args.verbose > 0)
    try:
        svo = _voxelize_to_svo(args, progress)
        if output is not None:
            save(svo, output, overwrite=args.force)
        if preview is not None:
            write_preview(svo, preview, overwrite=args.force)
    finally:
        progress.close()
    seconds = time.perf_counter() - started

    counts = svo.stats.counts
    written = [str(path) for path in (output, preview) if path is not None]
    if not args.quiet:
        print(
            f"{Path(args.model).name}: {counts['triangles']:,} triangles, grid "
            f"{shape_text(svo.shape)}, {svo.count():,} solid voxels, {seconds:.2f} s "
            f"({svo.stats.device}, {args.variant})"
            + (f" -> {', '.join(written)}" if written else "")
        )
    if args.stats:
        print(format_stats(svo.stats))
    if args.stats_json:
        _write_json(Path(args.stats_json), svo.stats.to_dict())
    return 0


def _write_json(path: Path, stats: dict) -> None:
    try:
        path.write_text(json.dumps(stats, indent=2) + "\n")
    except OSError as exc:
        raise OutputError(f"{path}: cannot write ({exc.strerror or exc})") from exc


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


if __name__ == "__main__":
    sys.exit(main())
