"""The command's options for what a voxel carries and for 3D printing: --labels, --overlap,
--colors, --fill-color and --slices, and the checks that go with them (usage errors before
any work). The `voxelize` command (cli.py) adds them and passes them on to the API."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .attributes.labels import DEFAULT_OVERLAP, OVERLAP_RULES
from .io.writers import ATTRIBUTE_FORMATS


def add_attribute_arguments(parser: argparse.ArgumentParser) -> None:
    """--labels, --overlap, --colors, --fill-color and --slices."""
    parser.add_argument(
        "--labels",
        action="store_true",
        help="also find each voxel's part (OBJ objects and groups, PLY part properties, "
        "STL solids, glTF primitives): a label grid in -o FILE.svo, .npz or .vti",
    )
    parser.add_argument(
        "--overlap",
        choices=OVERLAP_RULES,
        help="with --labels: the part a voxel inside two parts belongs to: last (default, "
        "the later part in the file) or smallest (the part of fewer voxels)",
    )
    parser.add_argument(
        "--colors",
        action="store_true",
        help="also colour each voxel (materials, vertex colours, textures): a palette in "
        ".vox, vertex colours in .ply/.obj/.glb, colour arrays in .svo, .npz and .vti",
    )
    parser.add_argument(
        "--fill-color",
        metavar="RRGGBB",
        help="with --colors: the colour of voxels the surface does not touch (hexadecimal "
        "RRGGBB or RRGGBBAA); default: the nearest surface voxel's along the column",
    )
    parser.add_argument(
        "--slices",
        metavar="DIR",
        help="write a PNG slice stack for 3D printing into DIR: one 1-bit image per z "
        "layer (white = solid), and slices.json with the layer height",
    )


def attribute_options(args: argparse.Namespace) -> dict[str, Any]:
    """The API's keywords for the parsed options."""
    return {
        "labels": args.labels,
        "colors": args.colors,
        "overlap": args.overlap or DEFAULT_OVERLAP,
        "fill_color": args.fill_color,
    }


def check_attribute_arguments(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    output: Path | None,
    batch: bool,
) -> None:
    """Usage errors: these options in a batch, --overlap and --fill-color without what they
    qualify, --labels and --colors with an output that cannot hold them."""
    if batch:
        for flag, value in (("--labels", args.labels), ("--colors", args.colors),
                            ("--slices", args.slices)):  # fmt: skip
            if value:
                parser.error(f"{flag} is for one model (voxelizer.voxelize([...]) puts several "
                             "meshes in one label grid)")  # fmt: skip
        return
    if args.overlap is not None and not args.labels:
        parser.error("--overlap is for --labels")
    if args.fill_color is not None and not args.colors:
        parser.error("--fill-color is for --colors")
    for flag, asked, attribute in (("--labels", args.labels, "label"),
                                   ("--colors", args.colors, "color")):  # fmt: skip
        formats = ATTRIBUTE_FORMATS[attribute]
        if asked and output is not None and output.suffix.lower() not in formats:
            parser.error(
                f"{flag}: {output.suffix} holds no {attribute}s (use {', '.join(formats)})"
            )
