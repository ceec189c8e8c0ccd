"""The command's grid options (--grid, --voxel-size, --bounds, --box-fit, --pad,
--max-memory): their values as argparse reads them, the numbers after them, and their checks
together (docs/guide/grids.md states what they place)."""

from __future__ import annotations

import argparse
import re

from .budget import parse_size
from .errors import GridError, MemoryBudgetError
from .normalize import FITS
from .placement import (
    BOX_FITS,
    DEFAULT_GRID,
    Padding,
    PadLike,
    VoxelSize,
    check_bounds,
    check_grid_request,
    check_pad,
    check_shape,
    check_voxel_size,
)


def grid_value(text: str) -> int | tuple[int, int, int]:
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


# Options that take several numbers: (the full name, the shortest prefix argparse takes for
# it, the most numbers). --bounds keeps its six words; the others' numbers are joined into
# one word (--pad 1 2 3 -> --pad=1,2,3), so that one number or several are both one value and
# never swallow the MODEL after them.
NUMBER_OPTIONS = (("--bounds", "--b", 6), ("--voxel-size", "--vox", 3), ("--pad", "--pa", 6))


def option_values(argv: list[str]) -> list[str]:
    """argv with the numbers after --bounds marked as values and --bounds=A,B,... split, and
    the numbers after --voxel-size and --pad joined into one value.

    argparse takes a word that starts with '-' for an option unless it is a plain negative
    integer or decimal, so `--bounds -1e3 ...` failed; a leading space makes such a number
    a value (float() ignores the space)."""
    words: list[str] = []
    index = 0
    while index < len(argv):
        word = argv[index]
        if word == "--":  # the rest are positional
            return words + argv[index:]
        name, equals, joined = word.partition("=")
        option = next(
            (o for o in NUMBER_OPTIONS if name.startswith(o[1]) and o[0].startswith(name)), None
        )
        index += 1
        if option is None:
            words.append(word)
            continue
        full, _, most = option
        values = joined.split(",") if equals else []
        while not equals and len(values) < most and index < len(argv) and is_number(argv[index]):
            values.append(argv[index])
            index += 1
        if full == "--bounds":
            words.append(name)
            words.extend(as_value(value) for value in values)
            while len(values) < most and index < len(argv) and is_number(argv[index]):
                values.append(argv[index])
                words.append(as_value(argv[index]))
                index += 1
        elif values:
            words.append(f"{name}={','.join(values)}")
        else:
            words.append(word)
    return words


def is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def as_value(word: str) -> str:
    """A number argparse must not read as an option, as a word it reads as a value."""
    return f" {word}" if word.startswith("-") and is_number(word) else word


def voxel_size_value(text: str) -> VoxelSize:
    """--voxel-size H or HX HY HZ (joined as H,H,H by option_values), checked."""
    words = text.split(",")
    try:
        sizes = [float(word) for word in words]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"voxel size must be one positive number or three (HX HY HZ), not {text!r}"
        ) from None
    try:
        return check_voxel_size(sizes[0] if len(sizes) == 1 else sizes)
    except GridError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def pad_value(text: str) -> Padding:
    """--pad K, KX KY KZ or XLO XHI YLO YHI ZLO ZHI (joined by option_values), checked,
    in the form the API takes (numpy.pad's per side)."""
    try:
        sides = [int(word) for word in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"pad must be whole numbers of voxels (K, KX KY KZ or XLO XHI YLO YHI ZLO ZHI), "
            f"not {text!r}"
        ) from None
    if len(sides) not in (1, 3, 6):
        raise argparse.ArgumentTypeError(
            f"pad takes 1, 3 or 6 numbers (K, KX KY KZ or XLO XHI YLO YHI ZLO ZHI), "
            f"not {len(sides)}: {text!r}"
        )
    pad: PadLike = sides[0] if len(sides) == 1 else sides
    if len(sides) == 6:
        pad = [sides[0:2], sides[2:4], sides[4:6]]
    try:
        return check_pad(pad)
    except GridError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def memory_value(text: str) -> int:
    try:
        return parse_size(text)
    except MemoryBudgetError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# The exit statuses of `voxelize`, as --help and README.md state them.
def add_grid_arguments(parser: argparse.ArgumentParser) -> None:
    """The grid: its size, its box, the device memory it may take."""
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--grid",
        type=grid_value,
        metavar="N|NXxNYxNZ",
        help="voxels per side (a cube), or along x, y and z (e.g. 512x256x128); each from 1 "
        f"to 65536 (default {DEFAULT_GRID}); with --bounds the box is cut into exactly "
        "these voxels; over 8192 a side the solid is built sparsely, as an octree "
        "(-o FILE.svo streams it into the file)",
    )
    size.add_argument(
        "--voxel-size",
        type=voxel_size_value,
        metavar="H [HY HZ]",
        help="voxel size in world units instead of --grid: H (cubes) or HX HY HZ; with "
        "--bounds the grid starts at the box's min corner and covers it (see --box-fit), "
        "without it the grid is centred on the mesh, each side a multiple of 4",
    )
    parser.add_argument(
        "--bounds",
        type=float,
        nargs=6,
        metavar=("XMIN", "YMIN", "ZMIN", "XMAX", "YMAX", "ZMAX"),
        help="the grid is this box exactly: voxel (0, 0, 0)'s corner at its min corner; a box "
        "that cuts the mesh crops it (the part inside is voxelized as without the box)",
    )
    parser.add_argument(
        "--box-fit",
        choices=BOX_FITS,
        default="cover",
        help="with --bounds and --voxel-size, where the box is not a whole number of voxels: "
        "cover (default: the last voxel reaches past the box) or inside (the grid stays in it)",
    )
    parser.add_argument(
        "--pad",
        type=pad_value,
        default=0,
        metavar="K [KY KZ | ...]",
        help="add K empty voxels around the grid on every side; KX KY KZ per axis, or "
        "XLO XHI YLO YHI ZLO ZHI per side",
    )
    parser.add_argument(
        "--fit",
        choices=FITS,
        help="normalise the mesh first: unit-cube centres its box on the origin and scales "
        "its longest side to [-0.5, 0.5] (v' = (v - centre) / longest side); the N^3 grid "
        "then spans [-0.5 - K h, 0.5 + K h], h = 1 / (N - 2K), K the --pad border inside "
        "the grid (docs/guide/datasets-for-learning.md)",
    )
    parser.add_argument(
        "--max-memory",
        type=memory_value,
        metavar="SIZE",
        help="device memory budget, e.g. 512MiB, 2GiB, 1.5GB or plain bytes",
    )


def check_grid_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--bounds as a checked box, and the grid options that do not go together: usage
    errors (status 2)."""
    if args.fit is not None:
        given = [name for name, value in (("--bounds", args.bounds), ("--voxel-size",
                 args.voxel_size)) if value is not None]  # fmt: skip
        if given:
            parser.error(f"--fit places the grid itself: leave out {' and '.join(given)}")
        if len({side for axis in check_pad(args.pad) for side in axis}) != 1:
            parser.error("--fit takes --pad K, one border on every side")
        if args.grid is not None and len(set(check_shape(args.grid))) != 1:
            parser.error("--fit places the mesh on a cube: give --grid N")
    if args.bounds is not None:
        try:
            args.bounds = check_bounds([args.bounds[:3], args.bounds[3:]])
        except GridError as exc:
            parser.error(str(exc))
    try:
        shape = None if args.grid is None else check_shape(args.grid)
        check_grid_request(shape, args.voxel_size, args.bounds, args.box_fit)
    except GridError as exc:
        parser.error(str(exc))
