"""Host time of one `Voxelizer.voxelize` call, for source trees side by side.

What is timed: one call on a mesh already in memory (a `Mesh` whose indices, bounds and
checks are computed, as a loaded mesh has them), from the call to the SVO in host memory,
less the GPU time the call's stats report (`stats.gpu_total_ms`): the host's share. Each
mesh of the dataset (`make_dataset`) is voxelized twice in a row: the first call is "new"
(the placement, the uploads and every per-mesh cache are made), the second "repeated" (the
same `Mesh` again). Every tree runs the same meshes in a process of its own, the trees
taking turns round by round, and the SVO arrays of every call are compared across the trees
(a digest of the arrays): the figures are only printed for identical results.

    python -m voxelizer.benchmarks.call_cost --models-dir ../shared/models \\
        --dataset /tmp/dataset --grids 64 256 --trees /path/to/before /path/to/after
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from voxelizer.api import VoxelizeOptions


def measure(dataset: list[str], grids: list[int], variant: str | None) -> dict:
    """In the tree under test: host ms of new and repeated calls per grid, and the digests."""
    import numpy as np

    import voxelizer
    from voxelizer.io import load_mesh
    from voxelizer.mesh import Mesh

    warnings.simplefilter("ignore")  # open meshes warn on every call
    options: VoxelizeOptions = {} if variant is None else {"variant": variant}
    loaded = [load_mesh(path) for path in dataset]
    result: dict = {}
    with voxelizer.Voxelizer() as vox:
        for grid in grids:
            vox.voxelize(loaded[0], grid, **options)  # kernels built, buffers grown
            new: list[float] = []
            repeated: list[float] = []
            digests: list[str] = []
            for mesh in loaded:
                fresh = Mesh(mesh.vertices.copy(), mesh.faces.copy())
                assert not fresh.problem  # bounds and checks computed before the calls
                fresh.indices  # noqa: B018 (a cached property: computed here)
                for times in (new, repeated):
                    started = time.perf_counter()
                    svo = vox.voxelize(fresh, grid, **options)
                    wall = (time.perf_counter() - started) * 1e3
                    times.append(wall - svo.stats.gpu_total_ms)
                digest = hashlib.sha256()
                for array in (svo.nodes, svo.bricks, svo.level_offsets):
                    digest.update(np.ascontiguousarray(array).tobytes())
                digests.append(digest.hexdigest()[:16])
            result[str(grid)] = {"new": new, "repeated": repeated, "digests": digests}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models-dir", type=Path, default=Path("../shared/models"))
    parser.add_argument("--dataset", type=Path, default=Path("call_cost_dataset"))
    parser.add_argument("--grids", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--trees", type=Path, nargs="+", default=[Path(".")])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variant", default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--files", nargs="*", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.files, args.grids, args.variant)))
        return 0

    from voxelizer.benchmarks.meshes import make_dataset

    files = [str(path) for path in make_dataset(args.models_dir, args.dataset)]
    runs: dict[str, list[dict]] = {str(tree): [] for tree in args.trees}
    for _ in range(args.rounds):
        for tree in args.trees:
            # The tree's own package first on the path: the script itself is this file.
            code = (
                f"import sys; sys.path.insert(0, {str(tree.resolve())!r}); "
                f"sys.argv = {['call_cost', '--child', '--files', *files]!r} + "
                f"{['--grids', *map(str, args.grids)]!r}"
                + (f" + ['--variant', {args.variant!r}]" if args.variant else "")
                + f"; exec(open({__file__!r}).read())"
            )
            done = subprocess.run(
                [sys.executable, "-c", code], cwd=tree, capture_output=True, text=True, check=True
            )
            runs[str(tree)].append(json.loads(done.stdout.strip().splitlines()[-1]))
    reference = runs[str(args.trees[0])][0]
    print(f"{len(files)} meshes, {args.rounds} rounds; host ms per call (wall - GPU ms)")
    print("| tree | grid | new median | new mean | repeated median | repeated mean |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for tree, results in runs.items():
        for grid in map(str, args.grids):
            for result in results:
                if result[grid]["digests"] != reference[grid]["digests"]:
                    raise SystemExit(f"{tree}: results at {grid}^3 differ from {args.trees[0]}")
            new = [t for result in results for t in result[grid]["new"]]
            repeated = [t for result in results for t in result[grid]["repeated"]]
            print(
                f"| {tree} | {grid} | {statistics.median(new):.2f} | {statistics.mean(new):.2f} "
                f"| {statistics.median(repeated):.2f} | {statistics.mean(repeated):.2f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
