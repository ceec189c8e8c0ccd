"""Host cost per call on a stream of different meshes: what replaying the recorded
submission (pipeline/replay.py) saves, for this tree and the tree before side by side.

    python -m voxelizer.benchmarks.replay --models-dir ../shared/models --dataset DIR \\
        --grids 32 128 --before TREE [--copies 1] [--order files|size] [--rounds 3] [--out DIR]
        [--busy-threads 2] [--waits tree block poll] [--call voxelize|batch]

What is timed: `Voxelizer.voxelize` (the SVO, the default options) on every mesh of
make_dataset's files, loaded into memory first, one after another in one thread: the
calling thread's CPU time per call (`time.thread_time`, the thread that drives the device),
the process's (`time.process_time`: the host's helper threads too; on a CPU device, the
device's threads as well), the wall time and the GPU time the call's stats report (the wall
time less the GPU's: the host's share, where the thread's CPU time also counts a wait that
spins). Every grid starts with one untimed pass over the meshes
(kernels built, buffers grown). Then, on a Voxelizer of its own, one more pass counts the
Vulkan functions called per call (the `vulkan` module's wrappers, its cffi library where the
package calls that directly, and the push-descriptor command), the Python functions called
per call (`sys.setprofile`'s "call" events: the host's Python work, whatever the device) and
the calls that replayed (`Stats.counts["replayed"]`). `--order size` sorts the meshes by
triangle count (a stream of similar meshes, as a dataset of one kind is); `files`, as
listed. `--call batch` times instead the call a batch's device thread makes
(`api.voxelize_checked`, its options checked once, without counting the voxels) on the
meshes prepared as its reading processes prepare them (`batch.readers.prepared_mesh`: the
placement, the placed vertices and a soup variant's soup made before the call).

`--busy-threads N` runs N other Python threads through the timed calls (each a loop of
Python and numpy work with short sleeps, as a batch's reading and writing threads are), so
that the calling thread shares the GIL as a batch's device thread does. `--waits` runs this
tree once per way its submissions wait on a GPU (gpu/commands.py): `tree`, as the tree
does by default; `block`, at once (WAIT_SPIN_S = 0); `poll`, polled for up to WAIT_SPIN_S
whatever other threads run (SPIN_ONLY_ALONE = False); the tree before runs as it is. (A CPU
device never polls: the ways differ on a GPU only.)

A tree is a folder holding a `voxelizer` package (`git archive COMMIT voxelizer | tar -x -C
TREE`); each runs in a process of its own with it first on the path, the trees taking turns
round by round, and the SVO arrays of every call are compared across the trees by digest:
figures are printed only for identical results. The table gives each tree's medians over
its rounds and this tree's over the tree before's.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

WAITS = ("tree", "block", "poll")
CALLS = ("voxelize", "batch")


def set_wait(wait: str) -> None:
    """How this process's submissions wait on a GPU (see --waits), before any is made."""
    from voxelizer.gpu import commands

    if wait == "block":
        commands.WAIT_SPIN_S = 0.0
    elif wait == "poll":
        commands.SPIN_ONLY_ALONE = False  # (a tree without it polls so anyway)


class BusyThreads:
    """`count` threads of Python and numpy work (short sleeps between), while in the block."""

    def __init__(self, count: int):
        import threading

        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._work, daemon=True) for _ in range(count)]

    def _work(self) -> None:
        import numpy as np

        values = np.arange(10_000, dtype=np.float64)
        while not self._stop.is_set():
            total = 0
            for index in range(2_000):  # Python under the GIL, then numpy, then a pause
                total += index * index
            float(np.sqrt(values).sum())
            self._stop.wait(0.0002)

    def __enter__(self) -> BusyThreads:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()


def calls_of(
    call: str, vox: Any, meshes: list[Any], grid: int
) -> tuple[list[Any], Callable[[Any], Any]]:
    """The meshes as `call` takes them, and the call on one of them (see --call)."""
    if call == "voxelize":
        return meshes, lambda mesh: vox.voxelize(mesh, grid)
    from voxelizer.api import voxelize_checked
    from voxelizer.batch.readers import prepared_mesh
    from voxelizer.options import Options

    options = Options.create(grid)
    options = dataclasses.replace(options, variant=vox.likely_variant(options.variant))
    prepared = [prepared_mesh(mesh, options, make_soup=True) for mesh in meshes]

    def run(mesh: Any) -> Any:
        return voxelize_checked(vox, mesh, options, dense=False, count_voxels=False)

    return prepared, run


def measure(
    files: list[str],
    grids: list[int],
    order: str,
    busy_threads: int = 0,
    wait: str = "tree",
    call: str = "voxelize",
) -> dict[str, Any]:
    """In the tree under test: per grid, the per-call figures and the digests."""
    import numpy as np

    set_wait(wait)
    import voxelizer
    from voxelizer.io import load_mesh

    warnings.simplefilter("ignore")  # open meshes warn on every call
    meshes = [load_mesh(path) for path in files]
    if order == "size":
        meshes.sort(key=lambda mesh: mesh.triangle_count)
    result: dict[str, Any] = {"package": voxelizer.__file__, "grids": {}}
    with voxelizer.Voxelizer() as vox:
        for grid in grids:
            called, run = calls_of(call, vox, meshes, grid)
            for mesh in called:  # untimed: kernels built, buffers grown
                run(mesh)
            figures: dict[str, list[float]] = {"thread": [], "process": [], "wall": [], "gpu": []}
            digests = []
            with BusyThreads(busy_threads):
                timed = _timed_calls(run, called)
            for svo, thread, process, wall in timed:
                figures["wall"].append(wall)
                figures["thread"].append(thread)
                figures["process"].append(process)
                figures["gpu"].append(svo.stats.gpu_total_ms)
                digest = hashlib.sha256()
                for array in (svo.nodes, svo.bricks, svo.level_offsets):
                    digest.update(np.ascontiguousarray(array).tobytes())
                digests.append(digest.hexdigest()[:16])
            calls, python_calls, replayed = _count_calls(meshes, grid, call)
            result["grids"][str(grid)] = {
                **figures, "digests": digests, "vulkan_calls": calls,
                "python_calls": python_calls, "replayed": replayed,
            }  # fmt: skip
    return result


def _timed_calls(
    run: Callable[[Any], Any], meshes: list[Any]
) -> list[tuple[Any, float, float, float]]:
    """(SVO, thread CPU ms, process CPU ms, wall ms) of one call on each mesh in turn."""
    timed = []
    for mesh in meshes:
        thread, process = time.thread_time(), time.process_time()
        started = time.perf_counter()
        svo = run(mesh)
        wall = (time.perf_counter() - started) * 1e3
        thread = (time.thread_time() - thread) * 1e3
        timed.append((svo, thread, (time.process_time() - process) * 1e3, wall))
    return timed


def _count_calls(meshes: list[Any], grid: int, call: str) -> tuple[float, float, float]:
    """(Vulkan functions called per call, Python functions called per call, the share of
    calls that replayed), on a Voxelizer of its own whose every Vulkan function is counted:
    the `vulkan` module's wrappers, its cffi library where the package calls that directly,
    the push-descriptor command; the Python functions by a profile function (the counting's
    own left out)."""
    import vulkan
    import vulkan._vulkan as wrapped

    import voxelizer

    real = wrapped.lib
    counted = [0]

    def counting(function: Any) -> Any:
        def call(*args: Any) -> Any:
            counted[0] += 1
            return function(*args)

        return call

    class CountingLib:
        def __getattr__(self, name: str) -> Any:
            value = getattr(real, name)
            return counting(value) if name.startswith("vk") and callable(value) else value

    # The counting's own Python functions, left out of the Python calls counted.
    counting_code = {counting(len).__code__, CountingLib.__getattr__.__code__}
    call_api = wrapped._callApi
    # The wrapper functions (vkQueueSubmit, ...) through their one entry, the rest of the
    # library where the package calls it directly.
    vulkan.lib, wrapped._callApi = CountingLib(), counting(call_api)
    try:
        with voxelizer.Voxelizer() as vox:
            device = vox.device
            push = device.push_descriptor_function
            if push is not None:
                device.push_descriptor_function = counting(push)
            try:
                called, run = calls_of(call, vox, meshes, grid)
                for mesh in called:  # untimed, uncounted: as the timed passes start
                    run(mesh)
                counted[0] = 0
                python = [0]

                def profile(frame: Any, event: str, arg: Any) -> None:
                    if event == "call" and frame.f_code not in counting_code:
                        python[0] += 1

                sys.setprofile(profile)
                try:
                    results = [run(mesh) for mesh in called]
                finally:
                    sys.setprofile(None)
                vulkan_calls = counted[0]  # (not the Voxelizer's close after them)
                replayed = sum(svo.stats.counts.get("replayed", 0) for svo in results)
            finally:
                device.push_descriptor_function = push
    finally:
        vulkan.lib, wrapped._callApi = real, call_api
    return vulkan_calls / len(meshes), python[0] / len(meshes), replayed / len(meshes)


def run_tree(
    tree: Path, files: list[str], args: argparse.Namespace, wait: str = "tree"
) -> dict[str, Any]:
    """One round in a process of its own, `tree`'s voxelizer first on the path, its
    submissions waiting as `wait` says."""
    argv = ["replay", "--child", "--order", args.order, "--grids", *map(str, args.grids)]
    argv += ["--busy-threads", str(args.busy_threads), "--waits", wait, "--call", args.call]
    argv += ["--files", *files]
    code = (
        f"import sys; sys.path.insert(0, {str(tree.resolve())!r}); sys.argv = {argv!r}; "
        f"exec(compile(open({__file__!r}).read(), {__file__!r}, 'exec'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tree, capture_output=True, text=True,
        timeout=args.timeout,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{tree}: exit {done.returncode}\n{done.stderr[-4000:]}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if Path(found["package"]).resolve().parents[1] != tree.resolve():
        raise SystemExit(f"{tree}: the process imported {found['package']}, not this tree's")
    return found


def summary(rounds: list[dict[str, Any]], grid: str) -> dict[str, float]:
    """A tree's figures at one grid: medians per call over every round's calls."""
    calls = [found["grids"][grid] for found in rounds]

    def median(name: str) -> float:
        return statistics.median(value for found in calls for value in found[name])

    walls = [value for found in calls for value in found["wall"]]
    return {
        "thread_cpu_ms": median("thread"),
        "process_cpu_ms": median("process"),
        "wall_ms": median("wall"),
        "gpu_ms": median("gpu"),
        "host_ms": statistics.median(
            wall - gpu for found in calls for wall, gpu in zip(found["wall"], found["gpu"])
        ),
        "meshes_per_s": 1e3 * len(walls) / sum(walls),
        "vulkan_calls": statistics.median(found["vulkan_calls"] for found in calls),
        "python_calls": statistics.median(found.get("python_calls", 0) for found in calls),
        "replayed": statistics.median(found["replayed"] for found in calls),
    }


COLUMNS = (
    ("thread_cpu_ms", "thread CPU ms", 3),
    ("process_cpu_ms", "process CPU ms", 3),
    ("wall_ms", "wall ms", 3),
    ("gpu_ms", "GPU ms", 3),
    ("host_ms", "wall - GPU ms", 3),
    ("meshes_per_s", "meshes/s", 1),
    ("vulkan_calls", "Vulkan calls", 1),
    ("python_calls", "Python calls", 0),
    ("replayed", "replayed", 2),
)


def table(summaries: dict[str, dict[str, dict[str, float]]], grids: list[str]) -> str:
    """Markdown: per grid, a row per tree and this tree's figures over the tree before's."""
    lines = ["| grid | tree | " + " | ".join(title for _, title, _ in COLUMNS) + " |"]
    lines.append("| ---: | --- |" + " ---: |" * len(COLUMNS))
    for grid in grids:
        rows = {label: summaries[label][grid] for label in summaries}
        for label, row in rows.items():
            cells = " | ".join(f"{row[key]:.{digits}f}" for key, _, digits in COLUMNS)
            lines.append(f"| {grid} | {label} | {cells} |")
        if "before" in rows and "after" in rows:
            before, after = rows["before"], rows["after"]
            ratios = " | ".join(
                f"{after[key] / before[key]:.2f}" if before[key] else "-" for key, _, _ in COLUMNS
            )
            lines.append(f"| {grid} | after/before | {ratios} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models-dir", type=Path, default=Path("../shared/models"))
    parser.add_argument("--dataset", type=Path, default=Path("replay_dataset"))
    parser.add_argument("--copies", type=int, default=1)
    parser.add_argument("--grids", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--before", type=Path, default=None)
    parser.add_argument("--order", choices=("files", "size"), default="files")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--busy-threads", type=int, default=0)
    parser.add_argument("--waits", nargs="+", choices=WAITS, default=["tree"])
    parser.add_argument("--call", choices=CALLS, default="voxelize")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--files", nargs="*", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        measured = measure(
            args.files, args.grids, args.order, args.busy_threads, args.waits[0], args.call
        )
        print(json.dumps(measured))
        return 0

    from voxelizer.benchmarks.meshes import make_dataset

    made = make_dataset(args.models_dir, args.dataset, copies=args.copies)
    files = [str(path.resolve()) for path in made]  # (the trees run in their own folders)
    here = Path(__file__).resolve().parents[2]
    # label: (tree, how its submissions wait); "after" is this tree as it is by default
    trees = {("after" if wait == "tree" else f"after, {wait}"): (here, wait) for wait in args.waits}
    if args.before is not None:
        trees = {"before": (args.before, "tree"), **trees}
    rounds: dict[str, list[dict[str, Any]]] = {label: [] for label in trees}
    for _ in range(args.rounds):
        for label, (tree, wait) in trees.items():
            rounds[label].append(run_tree(tree, files, args, wait))
    grids = [str(grid) for grid in args.grids]
    first = next(iter(rounds.values()))[0]["grids"]
    for label, found in rounds.items():
        for one in found:
            for grid in grids:
                if one["grids"][grid]["digests"] != first[grid]["digests"]:
                    raise SystemExit(f"{label}: results at {grid}^3 differ from this tree's")
    summaries = {label: {grid: summary(rounds[label], grid) for grid in grids} for label in trees}
    text = table(summaries, grids)
    busy = f", {args.busy_threads} busy threads" if args.busy_threads else ""
    print(
        f"{len(files)} meshes ({args.order} order), {args.rounds} rounds{busy}, the "
        f"{args.call} call; per call, medians"
    )
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "replay.md").write_text(text + "\n")
        record = {"trees": {label: f"{tree} ({wait})" for label, (tree, wait) in trees.items()},
                  "summaries": summaries, "rounds": rounds}  # fmt: skip
        (args.out / "replay.json").write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
