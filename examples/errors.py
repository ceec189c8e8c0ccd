"""Typed errors: what the API raises for misuse and hostile files, caught by type.

    python examples/errors.py [WORK_DIR]

Everything it writes goes under WORK_DIR (default: a new temporary folder)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import trimesh

import voxelizer

MODEL = Path(__file__).resolve().parents[1] / "models" / "gear.ply"


def main(work: Path) -> None:
    svo = voxelizer.voxelize(MODEL, 16)
    try:
        svo.lod(-1)
    except voxelizer.ArgumentError as error:  # also a ValueError
        print("argument:", error)
    try:
        voxelizer.voxelize((np.eye(3) * (1 + 1j), np.array([[0, 1, 2]])), 16)
    except voxelizer.MeshError as error:
        print("mesh:", error)
    os.mkfifo(work / "pipe.svo")
    try:
        voxelizer.load(work / "pipe.svo")  # refused at once, not a wait for a writer
    except voxelizer.FormatError as error:
        print("file:", error)
    boxes = [trimesh.creation.box(extents=[1, 1, 1]) for _ in range(2)]
    boxes[1].apply_translation([0.5, 0.5, 0.5])
    overlapping = trimesh.util.concatenate(boxes)  # fill_mode="union" reports each part
    with voxelizer.Voxelizer() as own:

        def progress(stage: str, done: int, total: int) -> None:
            own.close()  # the Voxelizer running this call: refused, no deadlock

        try:
            own.voxelize(overlapping, 16, fill_mode="union", progress=progress)
        except voxelizer.ReentrantCallError as error:
            print("callback:", error)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()))
