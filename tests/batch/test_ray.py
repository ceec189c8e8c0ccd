"""voxelizer.ray on a real local Ray cluster (started once for this module, 2 CPUs, lavapipe).

Every result is compared with the single-process call on the same file, bit for bit with its
placement. The actors inherit VOXELIZER_VALIDATION=1 (conftest): a validation message there
turns that mesh into a failed row, which these tests would see. One test kills every actor
while the batch runs: Ray restarts them and retries their batches, and the outputs are each
written once and whole.

Ray (and voxelizer.ray, which imports it) is imported by the tests and fixtures that use it,
not as the module is collected: a second of start-up that every test process would pay.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import voxelizer
from voxelizer.batch.tasks import DEFAULT_FORMAT
from voxelizer.grid import DenseGrid
from voxelizer.options import BATCH_OPTION_NAMES

from ..helpers import PROJECT_MODELS, run_cli, shared_model

pytestmark = [
    # A real local Ray cluster, started for the module (4-5 s on lavapipe's 2 cores), and
    # tests of several seconds each on it.
    pytest.mark.slow,
    # Ray Data's own deprecation notices, about its settings, not ours.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*"),
]
PROJECT_ROOT = Path(__file__).resolve().parents[2]
GRID = 16
SOURCES = {
    "gear.ply": PROJECT_MODELS / "gear.ply",
    "knot.ply": PROJECT_MODELS / "torus_knot.ply",
    "sub/sphere.ply": PROJECT_MODELS / "hollow_sphere.ply",
    "sub/torus.stl": shared_model("torus.stl"),
}
BAD_PLY = b"ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nend_header\n1\n"


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster for this module; its workers import this checkout's voxelizer.
    ray.init sets variables in this process's environment (RAY_AUTH_MODE=token among them)
    that outlive the cluster: they are put back as they were after it, so that the
    processes that later tests start do not inherit them."""
    import ray
    import ray.data

    environment = dict(os.environ)
    ray.init(
        address="local",  # a cluster of its own, never one that another process started
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(PROJECT_ROOT)}},
    )
    ray.data.DataContext.get_current().enable_progress_bars = False

    @ray.remote(num_cpus=0.5)
    def imported_from() -> tuple[str, str | None]:
        import voxelizer as worker_voxelizer

        return worker_voxelizer.__file__, os.environ.get("VOXELIZER_VALIDATION")

    try:
        where, validation = ray.get(imported_from.remote(), timeout=120)
        assert Path(where).resolve() == (PROJECT_ROOT / "voxelizer" / "__init__.py").resolve()
        assert validation == "1"
        yield
    finally:
        ray.shutdown()
        for name in set(os.environ) - set(environment):
            del os.environ[name]
        os.environ.update(environment)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "in"
    for relative, source in SOURCES.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, root / relative)
    return root


def single(path: Path, grid: int = GRID) -> DenseGrid:
    return voxelizer.voxelize_dense(path, grid=grid)


def assert_same_grid(got: DenseGrid | voxelizer.SVO, expected: DenseGrid) -> None:
    assert got.shape == expected.shape
    assert np.array_equal(got.to_numpy(), expected.to_numpy())
    assert np.array_equal(got.origin, expected.origin) and got.voxel_size == expected.voxel_size


def files_under(folder: Path) -> list[str]:
    """Every file below `folder` (temporaries included), as sorted relative paths."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def test_dataset_of_paths_to_columns_with_a_bad_mesh(cluster, tree):
    """Rows of paths (one of them no mesh) -> rows of packed bits equal to the single call;
    the bad one is a failed row with a one-line error naming it, the others go on."""
    import ray.data

    from voxelizer.ray import result_of, to_dense, voxelize_dataset

    (tree / "bad.ply").write_bytes(BAD_PLY)
    paths = [tree / name for name in SOURCES] + [tree / "bad.ply"]
    dataset = ray.data.from_items([{"path": str(p), "index": i} for i, p in enumerate(paths)])
    rows = sorted(voxelize_dataset(dataset, grid=GRID).take_all(), key=lambda r: r["index"])
    assert [int(r["index"]) for r in rows] == list(range(len(paths)))
    for path, row in zip(paths[:-1], rows[:-1]):
        assert row["status"] == "done", row["error"]
        expected = single(path)
        assert_same_grid(to_dense(row), expected)
        assert result_of(row).solid_voxels == expected.count()
        assert row["device"].startswith("llvmpipe")
    bad = result_of(rows[-1])
    assert bad.status == "failed" and bad.solid_voxels is None
    assert bad.error is not None and bad.error.startswith(f"{tree / 'bad.ply'}: ")
    assert "\n" not in bad.error
    with pytest.raises(ValueError, match="no voxels in a failed row"):
        to_dense(rows[-1])


def test_dataset_of_bytes_to_files(cluster, tmp_path):
    """Rows carrying the file's bytes and name (no shared file system needed to read) ->
    files under out_dir named after `name`, equal to the single call's."""
    import ray.data

    from voxelizer.ray import voxelize_dataset

    names = ["gear.ply", "torus.stl"]
    sources = [SOURCES["gear.ply"], SOURCES["sub/torus.stl"]]
    dataset = ray.data.from_items(
        [{"name": n, "bytes": s.read_bytes()} for n, s in zip(names, sources)]
    )
    out = tmp_path / "out"
    rows = voxelize_dataset(dataset, grid=GRID, out_dir=out, format="npz", actors=1).take_all()
    assert sorted(r["status"] for r in rows) == ["done", "done"], [r["error"] for r in rows]
    assert "bits" not in rows[0]  # the voxels went to files
    assert files_under(out) == ["gear.npz", "torus.npz"]
    for name, source in zip(names, sources):
        assert_same_grid(voxelizer.load(out / Path(name).with_suffix(".npz")), single(source))


def test_files_are_svo_by_default_and_a_row_output_in_the_format_it_names(cluster, tmp_path):
    """Without `format`, out_dir gets .svo files, as voxelize_many and `voxelize --out-dir`
    write: the single call's bytes. A row's own `output` is written in the format its name
    says; one that names no format is that row's failure, and the others go on."""
    import ray.data

    from voxelizer.ray import voxelize_dataset

    out = tmp_path / "out"
    rows = [
        {"path": str(SOURCES["gear.ply"]), "output": "", "index": 0},
        {"path": str(SOURCES["knot.ply"]), "output": str(tmp_path / "knot.npz"), "index": 1},
        {"path": str(SOURCES["knot.ply"]), "output": str(tmp_path / "knot.xyz"), "index": 2},
    ]
    dataset = ray.data.from_items(rows)
    done = voxelize_dataset(dataset, grid=GRID, out_dir=out, actors=1).take_all()
    done = sorted(done, key=lambda row: row["index"])
    assert [row["status"] for row in done] == ["done", "done", "failed"], done
    assert files_under(out) == ["gear.svo"]
    voxelizer.save(voxelizer.voxelize(SOURCES["gear.ply"], GRID), tmp_path / "single.svo")
    assert (out / "gear.svo").read_bytes() == (tmp_path / "single.svo").read_bytes()
    assert_same_grid(voxelizer.load(tmp_path / "knot.npz"), single(SOURCES["knot.ply"]))
    assert done[2]["error"] == f"{SOURCES['knot.ply']}: cannot write .xyz: use " + ", ".join(
        voxelizer.io.OUTPUT_FORMATS
    )
    assert not (tmp_path / "knot.xyz").exists()


COLLECT = """
import sys
import pytest
code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"])
print("ray imported:", "ray" in sys.modules)
sys.exit(code)
"""


def test_collecting_the_tests_imports_no_ray():
    """Collecting every test (as each test process does before it runs one) imports no Ray:
    only the tests and fixtures that use it do."""
    done = subprocess.run(
        [sys.executable, "-c", COLLECT],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    assert done.stdout.splitlines()[-1] == "ray imported: False"


@pytest.mark.parametrize("name", ["VoxelizeBatch", "voxelize_files_on_ray"])
def test_the_ray_functions_show_the_batch_options_and_the_one_default_format(name):
    from voxelizer import ray as voxelizer_ray
    from voxelizer.ray import voxelize_dataset

    parameters = inspect.signature(getattr(voxelizer_ray, name)).parameters
    assert list(parameters)[-len(BATCH_OPTION_NAMES) :] == list(BATCH_OPTION_NAMES)
    assert parameters["format"].default == DEFAULT_FORMAT == "svo"
    assert inspect.signature(voxelize_dataset).parameters["format"].default == DEFAULT_FORMAT
    assert inspect.signature(voxelizer.voxelize_many).parameters["format"].default == "svo"


def test_cli_on_the_cluster_mirrors_the_tree_and_logs(cluster, tree, tmp_path, capsys):
    """`voxelize DIR --out-dir OUT --ray auto` (this process is connected: the batch runs on
    its cluster): the same files as the single calls, a log record per mesh, then a rerun
    with --skip-existing that voxelizes nothing."""
    out, log = tmp_path / "out", tmp_path / "log.jsonl"
    args = [tree, "--out-dir", out, "--grid", GRID, "--format", "npz", "--ray", "auto"]
    code, stdout, stderr = run_cli(capsys, *args, "--log", log)
    assert code == 0, stderr
    assert stdout.startswith("4 meshes: 4 done, 0 skipped, 0 failed in ")
    assert files_under(out) == ["gear.npz", "knot.npz", "sub/sphere.npz", "sub/torus.npz"]
    for relative, source in SOURCES.items():
        output = (out / relative).with_suffix(".npz")
        assert_same_grid(voxelizer.load(output), single(source))
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(r["input"] for r in records) == sorted(str(tree / r) for r in SOURCES)
    assert all(r["status"] == "done" and r["error"] is None for r in records)
    code, stdout, stderr = run_cli(capsys, *args, "--skip-existing")
    assert code == 0, stderr
    assert stdout.startswith("4 meshes: 0 done, 4 skipped, 0 failed in ")


ACTOR_TITLES = (b"ray::MapWorker", b"ray::_FileActor")  # map_batches', voxelize_files_on_ray's


def _actor_processes() -> list[int]:
    """The process ids of the voxelizing actors (by their process title) of this process's
    own cluster (ray.init started its head as a child of this process): never those of
    another test process's cluster running beside it."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if title.startswith(ACTOR_TITLES) and _descends_from_this_process(int(entry.name)):
            found.append(int(entry.name))
    return found


def _descends_from_this_process(pid: int) -> bool:
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the parent's id, after the name
        if pid == os.getpid():
            return True
    return False


def test_killed_actors_lose_and_duplicate_nothing(cluster, tmp_path):
    """Every actor killed (SIGKILL) after the first result: Ray restarts them and retries
    their batches; each mesh's result comes once, each output is there once and whole (no
    temporary left), and equal to the single call's."""
    from voxelizer.ray import voxelize_files_on_ray

    sources = [SOURCES["sub/torus.stl"], SOURCES["sub/sphere.ply"]] * 5
    folder = tmp_path / "in"
    folder.mkdir()
    inputs = []
    for number, source in enumerate(sources):
        inputs.append(folder / f"m{number:02d}{source.suffix}")
        shutil.copyfile(source, inputs[-1])
    out = tmp_path / "out"
    results = []
    killed: list[int] = []
    missing_after_kill = 0
    with voxelize_files_on_ray(
        inputs, out_dir=out, format="npz", grid=64, batch_size=1, actors=2
    ) as run:
        for result in run:
            results.append(result)
            if not killed:
                deadline = time.monotonic() + 60
                while not (killed := _actor_processes()) and time.monotonic() < deadline:
                    time.sleep(0.05)
                for pid in killed:
                    os.kill(pid, signal.SIGKILL)
                missing_after_kill = len(inputs) - len(list(out.glob("*.npz")))
    assert killed
    assert missing_after_kill > 0  # written after the kill: by the restarted actors
    assert sorted(r.index for r in results) == list(range(len(inputs)))
    assert all(r.status == "done" for r in results), [r.error for r in results if r.error]
    assert files_under(out) == sorted(f"m{n:02d}.npz" for n in range(len(inputs)))
    expected = {source: single(source, 64) for source in set(sources)}
    for number, source in enumerate(sources):
        assert_same_grid(voxelizer.load(out / f"m{number:02d}.npz"), expected[source])


@pytest.mark.slow
def test_actors_write_one_shard_store_that_zarr_reads_exactly(cluster, tree, tmp_path):
    """format "zarr" on the cluster: the actors write their meshes' chunks side by side, the
    driver the table; zarr reads every grid and placement as the single call gives them, and
    a resumed batch (one chunk gone) voxelizes that mesh only."""
    import zarr

    from voxelizer.io.zarr_store import chunk_path
    from voxelizer.ray import voxelize_files_on_ray

    paths = sorted(tree.rglob("*.ply")) + sorted(tree.rglob("*.stl"))
    store = tmp_path / "grids.zarr"
    run = voxelize_files_on_ray(
        paths, out_dir=store, format="zarr", grid=GRID, actors=2, batch_size=1
    )
    results = list(run)
    assert sorted(r.status for r in results) == ["done"] * len(paths)
    group = zarr.open_group(store, mode="r")
    for index, path in enumerate(paths):
        expected = single(path)
        got = np.unpackbits(group["voxels"][index], axis=-1, count=GRID).astype(bool)
        assert np.array_equal(got, expected.to_numpy())
        assert np.array_equal(group["origin"][index], expected.origin)
        assert group["voxel_size"][index] == expected.voxel_size
    assert list(group["status"][:]) == ["done"] * len(paths)
    chunk_path(store, 1).unlink()
    again = voxelize_files_on_ray(
        paths, out_dir=store, format="zarr", grid=GRID, actors=2, skip_existing=True
    )
    statuses = sorted((r.index, r.status) for r in again)
    assert [s for i, s in statuses if s == "done"] == ["done"] and statuses[1] == (1, "done")
    got = np.unpackbits(zarr.open_group(store, mode="r")["voxels"][1], axis=-1, count=GRID)
    assert np.array_equal(got.astype(bool), single(paths[1]).to_numpy())


class _WarmProbe:
    """A VoxelizeBatch in an actor (ray.remote(num_cpus=0.5)), as map_batches holds it, that
    also says which of its loader threads live on from one call to the next."""

    def __init__(self, **options: object):
        from voxelizer.ray import VoxelizeBatch

        self.batch = VoxelizeBatch(**options)
        self.seen: list = []

    def call(self, batch: dict) -> tuple[dict, int, bool]:
        import threading

        columns = self.batch(batch)
        alive_since_last = any(thread.is_alive() for thread in self.seen)
        self.seen = [t for t in threading.enumerate() if t.name.startswith("voxelizer-load")]
        return columns, id(self.batch.voxelizer), alive_since_last


def test_an_actor_keeps_its_voxelizer_and_threads_across_batches(cluster, tree):
    """The actor's Voxelizer and its loader threads serve every batch it gets (no start
    from empty per map_batches call); each batch's rows equal the single calls."""
    import ray

    from voxelizer.ray import to_dense

    paths = [tree / name for name in SOURCES]
    probe = ray.remote(num_cpus=0.5)(_WarmProbe).remote(grid=GRID, threads=2, load_processes=0)
    voxelizers, alive = set(), []
    for path in paths:
        batch = {"path": np.array([str(path)])}
        columns, voxelizer_id, threads_alive = ray.get(probe.call.remote(batch), timeout=120)
        voxelizers.add(voxelizer_id)
        alive.append(threads_alive)
        row = {name: values[0] for name, values in columns.items()}
        assert row["status"] == "done", row["error"]
        assert_same_grid(to_dense(row), single(path))
    assert len(voxelizers) == 1
    assert alive[1:] == [True] * (len(paths) - 1)
    ray.kill(probe)


class _CountingFileActor:
    """voxelize_files_on_ray's actor (ray.remote(num_cpus=0.5, max_concurrency=3)), counting
    the Voxelizers (devices) its process opens."""

    def __init__(self, **options: object):
        from voxelizer.batch import ray as batch_ray

        opened: list[int] = []

        class Counted(batch_ray.Voxelizer):
            def __init__(self, *args, **kwargs):
                opened.append(1)
                super().__init__(*args, **kwargs)

        batch_ray.Voxelizer = Counted  # type: ignore[misc]
        self.opened = opened
        self.actor = batch_ray._FileActor(**options)

    def run(self, chunk: dict) -> tuple[dict, int]:
        return self.actor.run(chunk), len(self.opened)


def test_overlapping_chunks_on_one_actor_one_device_and_a_failed_row(cluster, tree, tmp_path):
    """Three chunks at once on one actor (as voxelize_files_on_ray keeps them in flight), one
    with a file that is no mesh: that row fails with its one-line error, every other row is
    the single call's, and the actor opened one device for all of them."""
    import ray

    (tree / "bad.ply").write_bytes(BAD_PLY)
    paths = [tree / name for name in SOURCES]
    chunks = [paths[:2], [tree / "bad.ply", paths[2]], paths[3:]]
    out = tmp_path / "out"
    out.mkdir()
    actor = ray.remote(num_cpus=0.5, max_concurrency=3)(_CountingFileActor)
    probe = actor.remote(grid=GRID, format="npz", load_processes=0)
    calls = []
    for number, chunk in enumerate(chunks):
        outputs = [str(out / f"{number}-{row}.npz") for row in range(len(chunk))]
        calls.append({"path": [str(p) for p in chunk], "output": outputs})
    replies = ray.get([probe.run.remote(call) for call in calls], timeout=180)
    for call, (columns, opened) in zip(calls, replies):
        assert opened == 1
        for row, path in enumerate(call["path"]):
            if path.endswith("bad.ply"):
                assert columns["status"][row] == "failed"
                assert columns["error"][row].startswith(f"{path}: ")
                assert "\n" not in columns["error"][row]
                continue
            assert columns["status"][row] == "done", columns["error"][row]
            assert_same_grid(voxelizer.load(call["output"][row]), single(Path(path)))
    ray.kill(probe)


def _wait_for(found: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not found():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_the_actors_start_while_the_files_are_planned(cluster, tree, tmp_path, monkeypatch):
    """voxelize_files_on_ray asks for its actors before it plans the files: an actor's
    process is there while the plan is made (it used to be asked for after it), and the
    results are the single calls'."""
    from voxelizer.batch import ray as batch_ray

    plan = batch_ray.plan_tasks
    actors_while_planning: list[bool] = []

    def planned_once_an_actor_runs(*args, **kwargs):
        actors_while_planning.append(_wait_for(lambda: bool(_actor_processes()), 60.0))
        return plan(*args, **kwargs)

    monkeypatch.setattr(batch_ray, "plan_tasks", planned_once_an_actor_runs)
    paths = [tree / name for name in SOURCES]
    out = tmp_path / "out"
    with batch_ray.voxelize_files_on_ray(paths, out_dir=out, format="npz", grid=GRID) as run:
        results = list(run)
    assert actors_while_planning == [True]
    assert sorted(r.index for r in results) == list(range(len(paths)))
    assert all(r.status == "done" for r in results), [r.error for r in results if r.error]
    for number, path in enumerate(paths):
        output = Path(str(results[[r.index for r in results].index(number)].output))
        assert_same_grid(voxelizer.load(output), single(path))
    assert _wait_for(lambda: not _actor_processes(), 30.0)  # killed as the run ended


def test_a_batch_with_nothing_left_to_do_stops_the_actors_it_started(cluster, tree, tmp_path):
    """With every output there and skip_existing, the actors asked for while planning are
    stopped before any work (no actor process stays), and every mesh is skipped; a run
    closed unread stops them too."""
    from voxelizer.batch.ray import voxelize_files_on_ray

    paths = [tree / name for name in SOURCES]
    out = tmp_path / "out"
    for path in paths:
        (out / path.relative_to(tree)).with_suffix(".npz").parent.mkdir(parents=True, exist_ok=True)
    names = [(out / p.relative_to(tree)).with_suffix(".npz") for p in paths]
    for name in names:
        name.write_bytes(b"")
    keywords = {"out_dir": out, "format": "npz", "grid": GRID, "root": tree}
    with voxelize_files_on_ray(paths, skip_existing=True, **keywords) as run:
        assert [r.status for r in run] == ["skipped"] * len(paths)
    assert _wait_for(lambda: not _actor_processes(), 30.0)
    assert all(name.read_bytes() == b"" for name in names)
    run = voxelize_files_on_ray(paths, overwrite=True, **keywords)
    assert _wait_for(lambda: bool(_actor_processes()), 60.0)  # started before any iteration
    run.close()
    assert _wait_for(lambda: not _actor_processes(), 30.0)
    assert all(name.read_bytes() == b"" for name in names)
