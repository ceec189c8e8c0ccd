"""Soak run: `python -m voxelizer.benchmarks.soak --models-dir DIR [--calls 500] [--grids N ...]
[--json FILE]`.

One Voxelizer makes many calls that alternate meshes, grids, outputs (SVO, dense) and fill
modes, as a long-lived service or a dataset loop would. Every `--every` calls it records the
process's resident memory (now, not the peak), the device and staging buffers held, and the
validation layer's messages (the run turns the layer on). A healthy run is flat after the
first round: buffers stop growing, memory returns to the same level, no messages.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("VOXELIZER_VALIDATION", "1")  # before the first Vulkan object exists

from ..api import Voxelizer
from ..errors import OpenMeshWarning
from ..mesh import Mesh
from ..placement import shape_text
from .meshes import resolve_model

MODELS = ("bunny", "torus", "suzanne", "featuretype", "dragon")
GRIDS: tuple[int | tuple[int, int, int], ...] = (32, 64, (48, 24, 40), 96, 128)
OUTPUTS_AND_FILLS = (("svo", "parity"), ("dense", "parity"), ("svo", "union"), ("dense", "vote"))


def grid_argument(text: str) -> int | tuple[int, int, int]:
    """N or NXxNYxNZ, as --grid takes it."""
    try:
        sides = [int(side) for side in text.lower().split("x")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a grid: {text!r}") from None
    if len(sides) == 1:
        return sides[0]
    if len(sides) != 3:
        raise argparse.ArgumentTypeError(f"not a grid: {text!r}")
    return sides[0], sides[1], sides[2]


def resident_bytes() -> int:
    """Resident memory of this process now (Linux /proc; the peak elsewhere)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def soak(
    meshes: list[tuple[str, Mesh]],
    calls: int,
    every: int,
    grids: tuple[int | tuple[int, int, int], ...] = GRIDS,
) -> tuple[str, list[dict]]:
    """(the device's name, one row per checkpoint)."""
    rows: list[dict] = []
    voxelizer = Voxelizer()
    started = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OpenMeshWarning)
            for call in range(1, calls + 1):
                # the mesh changes every call; every (mesh, grid, mode) comes up in turn
                mesh = meshes[call % len(meshes)][1]
                grid = grids[call // len(meshes) % len(grids)]
                output, fill_mode = OUTPUTS_AND_FILLS[call % len(OUTPUTS_AND_FILLS)]
                if output == "svo":
                    stats = voxelizer.voxelize(mesh, grid, fill_mode=fill_mode).stats
                else:
                    stats = voxelizer.voxelize_dense(mesh, grid, fill_mode=fill_mode).stats
                if call % every == 0 or call == 1:
                    rows.append(
                        {
                            "call": call,
                            "seconds": round(time.perf_counter() - started, 2),
                            "resident_mib": round(resident_bytes() / 2**20, 1),
                            "device_buffers_mib": round(
                                sum(stats.memory.device_buffers.values()) / 2**20, 2
                            ),
                            "staging_buffers_mib": round(
                                sum(stats.memory.staging_buffers.values()) / 2**20, 2
                            ),
                            "validation_messages": len(voxelizer.device.validation_messages),
                        }
                    )
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    finally:
        voxelizer.close()
    return voxelizer.device_name, rows


def markdown(rows: list[dict], device: str) -> str:
    lines = [
        f"Soak on {device}: " + ", ".join(f"{m}" for m in MODELS),
        "",
        "| call | s | resident MiB | device buffers MiB | staging MiB | validation messages |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['call']} | {r['seconds']} | {r['resident_mib']} | "
            f"{r['device_buffers_mib']} | {r['staging_buffers_mib']} | {r['validation_messages']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m voxelizer.benchmarks.soak")
    parser.add_argument("--models-dir", type=Path, required=True)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--every", type=int, default=50, help="record every N calls")
    parser.add_argument("--json", type=Path, help="write the rows as JSON")
    parser.add_argument(
        "--grids",
        nargs="+",
        type=grid_argument,
        default=list(GRIDS),
        metavar="N|NXxNYxNZ",
        help="the grids the calls go through in turn (default: "
        + " ".join(shape_text((g,) * 3 if isinstance(g, int) else g) for g in GRIDS)
        + ")",
    )
    args = parser.parse_args(argv)
    meshes = [resolve_model(name, args.models_dir) for name in MODELS]
    device, rows = soak(meshes, args.calls, args.every, tuple(args.grids))
    print(markdown(rows, device))
    if args.json:
        args.json.write_text(json.dumps({"device": device, "rows": rows}, indent=1))
    return 1 if rows and rows[-1]["validation_messages"] else 0


if __name__ == "__main__":
    sys.exit(main())
