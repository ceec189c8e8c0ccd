"""A process's first voxels sooner: `python examples/start_up.py [OUT_DIR]` (default: a
temporary folder).

Two things it shows. In Python, `Voxelizer.prepare(options)` builds the kernels of the calls
to come on a thread while the mesh is read; the voxels are those of a call without it. On
the command line, `voxelize DIR --out-dir OUT -vv` prints where the batch's start goes, one
line per milestone in seconds since the process started."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import voxelizer

MODELS = Path(__file__).resolve().parents[1] / "models"


def main(out_dir: Path) -> None:
    with voxelizer.Voxelizer() as vox:
        vox.prepare(voxelizer.Options.create(32), dense=True)  # the kernels build meanwhile
        mesh = voxelizer.load_mesh(MODELS / "gear.ply")
        prepared = vox.voxelize_dense(mesh, grid=32)
    assert np.array_equal(prepared.to_numpy(), voxelizer.voxelize_dense(mesh, 32).to_numpy())
    print(f"gear.ply: {prepared.count():,} voxels, the kernels built while it was read")

    command = [sys.executable, "-m", "voxelizer", str(MODELS), "--out-dir", str(out_dir),
               "--format", "npz", "--grid", "32", "-vv"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=300)
    timeline = re.findall(r"^voxelize: ([0-9.]+) s: (.*)$", done.stderr, re.MULTILINE)
    names = [name.split(",")[0] for _, name in timeline]
    assert names[0] == "meshes found" and names[-1] == "end", names
    seconds = [float(at) for at, _ in timeline]
    assert seconds == sorted(seconds), timeline
    for at, name in timeline:
        print(f"{float(at):6.3f} s  {name}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as scratch:
            main(Path(scratch))
