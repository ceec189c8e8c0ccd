"""The `voxelize` command: one mesh in, one solid voxelization out, one summary line."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import __version__
from .errors import OutputError, VoxelizerError
from .passes import DEFAULT_VARIANT, VARIANTS

OUTPUT_FORMATS = (".npz",)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voxelize",
        description="Exact solid voxelization of a triangle mesh on a Vulkan device: "
                    "a voxel is set iff its centre is inside the mesh.")
    parser.add_argument("model", nargs="?", help="mesh file (PLY, OBJ, STL, OFF, GLB, ...)")
    parser.add_argument("--grid", type=int, default=512, metavar="N",
                        help="voxels per side, a multiple of 4 from 8 up (default 512)")
    parser.add_argument("--variant", default=DEFAULT_VARIANT, metavar="NAME",
                        help=f"shader variant: {', '.join(VARIANTS)} (default {DEFAULT_VARIANT})")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="write the voxels: .npz (packed bits, origin, voxel size)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing output file")
    parser.add_argument("--device", metavar="INDEX|NAME",
                        help="Vulkan device by index or name substring (default: "
                             "$VOXELIZER_DEVICE, else the first discrete GPU, else any)")
    parser.add_argument("--list-devices", action="store_true", help="list Vulkan devices and exit")
    parser.add_argument("--stats", action="store_true", help="print per-pass GPU times and counts")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="version", version=f"voxelize {__version__}")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return _run(parser, args)
    except VoxelizerError as exc:
        if args.debug:
            raise
        print(f"voxelize: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("voxelize: interrupted", file=sys.stderr)
        return 130


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .api import voxelize_dense
    from .gpu.device import list_devices

    if args.list_devices:
        for info in list_devices():
            print(info)
        return 0
    if not args.model:
        parser.error("a model file is required (or --list-devices)")
    if args.variant not in VARIANTS:
        parser.error(f"unknown variant {args.variant!r} (choose from {', '.join(VARIANTS)})")
    output = Path(args.output) if args.output else None
    if output is not None:
        if output.suffix.lower() not in OUTPUT_FORMATS:
            parser.error(f"cannot write {output.suffix or 'files without an extension'}: "
                         f"use {', '.join(OUTPUT_FORMATS)}")
        if output.exists() and not args.force:
            raise OutputError(f"{output}: file exists (use --force to overwrite)")

    started = time.perf_counter()
    grid = voxelize_dense(args.model, args.grid, args.variant, args.device)
    if output is not None:
        grid.save_npz(output, overwrite=args.force)
    seconds = time.perf_counter() - started

    counts = grid.stats["counts"]
    n = grid.resolution
    print(f"{Path(args.model).name}: {counts['triangles']:,} triangles, grid {n}x{n}x{n}, "
          f"{grid.count():,} solid voxels, {seconds:.2f} s "
          f"({grid.stats['device']}, {args.variant})"
          + (f" -> {output}" if output is not None else ""))
    if args.stats:
        print(format_stats(grid.stats))
    return 0


def format_stats(stats: dict) -> str:
    lines = ["GPU time per pass (ms):"]
    lines += [f"  {name:<10} {ms:10.3f}" for name, ms in stats["gpu_ms"].items()]
    lines.append(f"  {'total':<10} {sum(stats['gpu_ms'].values()):10.3f}")
    lines.append("host time (ms):")
    lines += [f"  {name:<12} {ms:10.3f}" for name, ms in stats["host_ms"].items()]
    lines.append("counts:")
    lines += [f"  {name:<10} {value:>12,}" for name, value in stats["counts"].items()]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
