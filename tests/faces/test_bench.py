"""The benchmark's pieces: generated meshes, peers on our grid, byte estimates, reports, a run."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest

from voxelizer import Voxelizer, load_mesh
from voxelizer.benchmarks import __main__ as bench
from voxelizer.benchmarks import meshes, peers
from voxelizer.benchmarks.bandwidth import bandwidth_fractions, device_bandwidth, pass_bytes
from voxelizer.benchmarks.report import markdown, write_json
from voxelizer.choices import variant_candidates
from voxelizer.pipeline.layout import PAIR_BYTES, RECORD_BYTES, TILE_BYTES
from voxelizer.reference import voxelize_reference

from ..helpers import PROJECT_MODELS, edge_uses, load_model, signed_volume
from ..shapes import box

# Faces on the voxel faces of a 16-voxel grid: 16 x 12 x 8 voxels inside, no ties to decide.
BOX = load_mesh(box((-0.5, -0.375, -0.25), (0.5, 0.375, 0.25)))


def test_subdivision_keeps_the_surface_and_stays_closed():
    mesh = load_model("torus_knot.ply")
    once = meshes.subdivided(mesh, 1)
    twice = meshes.subdivided(mesh, 2)
    assert len(once.faces) == 4 * len(mesh.faces) and len(twice.faces) == 16 * len(mesh.faces)
    assert signed_volume(twice.vertices, twice.faces) == pytest.approx(
        signed_volume(mesh.vertices, mesh.faces), rel=1e-12
    )
    # closed by index: every edge has exactly two faces, so midpoints were shared, not doubled
    assert set(edge_uses(twice.faces)) == {2}
    assert twice.topology.closed
    assert len(np.unique(twice.vertices, axis=0)) == len(twice.vertices)
    # winding kept: the same signed volume (checked above) and every child faces its parent's way
    parent = np.arange(len(twice.faces)) % len(mesh.faces)

    def normal(v: np.ndarray, f: np.ndarray) -> np.ndarray:
        return np.cross(v[f[:, 1]] - v[f[:, 0]], v[f[:, 2]] - v[f[:, 0]])

    assert (
        np.einsum(
            "ij,ij->i",
            normal(twice.vertices, twice.faces),
            normal(mesh.vertices, mesh.faces)[parent],
        )
        > 0
    ).all()
    # every corner lies in its original triangle: barycentric weights in [0, 1] that rebuild it
    a, b, c = (mesh.vertices[mesh.faces[parent, i]] for i in range(3))
    basis = np.stack([b - a, c - a], axis=2)  # (F, 3, 2)
    for corner in range(3):
        point = twice.vertices[twice.faces[:, corner]]
        weights = np.linalg.solve(
            np.einsum("fki,fkj->fij", basis, basis),  # least squares
            np.einsum("fki,fk->fi", basis, point - a)[..., None],
        )[..., 0]
        rebuilt = a + np.einsum("fki,fi->fk", basis, weights)
        assert np.abs(rebuilt - point).max() < 1e-9 * np.ptp(mesh.vertices)
        assert (weights > -1e-9).all() and (weights.sum(axis=1) < 1 + 1e-9).all()


def test_models_resolve_by_name_suffix_and_path(tmp_path, models_dir):
    name, mesh = meshes.resolve_model("torus_knot-x4", PROJECT_MODELS)
    assert name == "torus_knot-x4" and len(mesh.faces) == 4 * 6912
    assert (
        meshes.resolve_model("torus_knot-x16", PROJECT_MODELS)[1]
        is meshes.resolve_model("torus_knot-x16", PROJECT_MODELS)[1]
    )  # generated once per run
    name, mesh = meshes.resolve_model("bunny", models_dir)
    assert name == "bunny" and mesh.triangle_count == load_model("bunny.ply").triangle_count
    assert meshes.resolve_model(str(PROJECT_MODELS / "gear.ply"))[0] == "gear"  # no directory
    with pytest.raises(ValueError, match="power of four"):
        meshes.resolve_model("torus_knot-x8", PROJECT_MODELS)
    with pytest.raises(ValueError, match="no model 'nothing'"):
        meshes.resolve_model("nothing", tmp_path)
    with pytest.raises(ValueError, match="no models directory"):
        meshes.resolve_model("bunny")


def test_models_dir_comes_from_the_option_then_the_environment_then_cwd(
    tmp_path, monkeypatch, models_dir
):
    """The library never guesses a checkout's models: the user's option, $VOXELIZER_MODELS,
    else ./models."""
    monkeypatch.delenv(bench.MODELS_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert bench.parser().parse_args([]).models_dir == Path("models")
    monkeypatch.setenv(bench.MODELS_ENV, str(models_dir))
    assert bench.parser().parse_args([]).models_dir == models_dir
    args = bench.parser().parse_args(["--models-dir", str(tmp_path)])
    assert args.models_dir == tmp_path


def test_a_model_not_in_the_directory_is_refused_before_measuring(tmp_path, capsys):
    with pytest.raises(SystemExit) as caught:
        bench.main(["--models-dir", str(tmp_path), "--models", "gear"])
    stderr = capsys.readouterr().err
    assert caught.value.code == 2 and "no model 'gear'" in stderr and "--models-dir" in stderr
    with pytest.raises(SystemExit, match="2"):
        bench.main(["--models-dir", str(PROJECT_MODELS), "--models", "gear-x8"])
    assert "power of four" in capsys.readouterr().err


@pytest.mark.parametrize("peer", [p for p in peers.PEERS if not peers.unavailable(p)])
def test_peers_answer_on_our_voxel_centres(peer):
    """A box whose faces lie on voxel faces: a peer placed half a voxel off would miss a
    layer. pyvista and the reference are exact here; trimesh adds a shell of surface voxels.
    (Peers of the optional `bench` extra are checked where it is installed.)"""
    mesh, n = BOX, 16
    ours = voxelize_reference(mesh, n).to_numpy()
    assert ours.sum() == 16 * 12 * 8
    run, to_ours = peers.prepare(peer, mesh, n)
    extra, missing = peers.wrong_voxels(to_ours(run()), ours)
    assert missing == 0
    assert extra == 0 if peer != "trimesh" else extra > 0


def test_a_peer_that_is_not_installed_is_skipped_with_the_reason(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *rest: None if name == "pyvista" else real(name, *rest),
    )
    outcome = peers.measure_peer("pyvista", BOX, 16, np.zeros((16,) * 3, bool))
    assert outcome["status"] == "skipped" and "pyvista" in outcome["reason"]


def test_wrong_voxels_counts_voxels_outside_the_grid_as_extra():
    ours = np.zeros((4, 4, 4), bool)
    ours[1:3, 1:3, 1:3] = True
    theirs = peers.place(np.array([[1, 1, 1], [1, 2, 1], [0, 0, 0], [-1, 2, 2], [4, 0, 0]]), 4)
    assert peers.wrong_voxels(theirs, ours) == (3, 6)


def test_byte_estimates_follow_the_counts():
    t, v, p, k, grid = 10, 8, 20, 5, 16
    keys, grid_bytes = 16, 16 * 16 * 4  # (16/4)^2 tile keys; 16 x 16 columns of one word
    soup = pass_bytes(grid, t, v, p, k, indexed=False, sort="counting")
    assert soup == {
        "setup": 36 * t + RECORD_BYTES * t + 4 * t,
        "scan": 8 * t,
        "emit": RECORD_BYTES * t + 4 * t + PAIR_BYTES * p,
        "sort": 2 * PAIR_BYTES * p + 8 * keys,
        "mark": 8 * keys,
        "compact": 4 * keys + TILE_BYTES * k,
        "fill": (PAIR_BYTES + RECORD_BYTES) * p + TILE_BYTES * k + grid_bytes,
    }
    indexed = pass_bytes(grid, t, v, p, k, indexed=True, sort="bitonic", svo_nodes=9, svo_bricks=4)
    assert indexed["setup"] == 12 * t + 12 * v + RECORD_BYTES * t + 4 * t
    assert indexed["sort"] == 2 * PAIR_BYTES * p
    assert indexed["mark"] == PAIR_BYTES * p + 4 * p
    assert indexed["compact"] == 4 * p + TILE_BYTES * k
    # A 16^3 grid: the root and its 8 leaves; counts: the root's stored flag, its mixed
    # children, and the mixed bricks of its leaves.
    assert indexed["svo_classify"] == grid_bytes + 4 * (1 + 8) + 4 * 3
    assert indexed["svo_scan"] == 8 * 3
    assert indexed["svo_write"] == 8 * 1 + 8 * 4 + 8 * 9 + 8 * 4


def test_bandwidth_fractions_and_known_devices():
    fractions = bandwidth_fractions(
        {"setup": 10**9, "fill": 10**9, "sort": 5},
        {"setup": 1.0, "fill": 3.0, "upload": 2.0},
        1000.0,
    )
    assert fractions == pytest.approx({"setup": 1.0, "fill": 1 / 3, "total": 0.5})
    assert device_bandwidth("NVIDIA H100 80GB HBM3") == 3350
    assert device_bandwidth("NVIDIA H200") == 4800
    assert device_bandwidth("llvmpipe (LLVM 15.0.6, 256 bits)") is None


def _doc(fractions: dict | None = None) -> dict:
    row = {
        "model": "bunny",
        "triangles": 69630,
        "vertices": 34817,
        "grid": 256,
        "variant": "branchless",
        "sort": "counting",
        "output": "svo",
        "status": "ok",
        "wall_ms": {"median": 10.0, "min": 9.0, "max": 12.0, "runs": [9.0, 10.0, 12.0]},
        "from_arrays_ms": 20.0,
        "gpu_ms": {"setup": 1.5, "fill": 2.25, "download": 0.0},
        "gpu_ms_total": 3.75,
        "gpu_ms_compute": 3.5,
        "host_ms": {"load": 0.1},
        "counts": {"pairs": np.int64(58786), "tiles": 2591},
        "memory": {"device_peak_bytes": 3 << 20, "staging_peak_bytes": 1 << 20},
    }
    if fractions:
        row["bandwidth_fraction"] = fractions
    skipped = {
        "model": "bunny",
        "triangles": 69630,
        "grid": 8192,
        "variant": "naive",
        "sort": "bitonic",
        "status": "skipped",
        "reason": "GridError: too large",
    }
    return {
        "date": "2025-01-01T00:00:00+00:00",
        "device": {"name": "Some GPU", "driver": "x 1.0"},
        "host": "a CPU",
        "commit": "abc1234",
        "settings": {"output": "svo", "repeat": 3},
        "rows": [row, skipped],
        "peers": [
            {
                "model": "bunny",
                "grid": 256,
                "peer": "pyvista",
                "status": "ok",
                "seconds": 0.02,
                "ours_ms": 10.0,
                "ratio": 0.5,
                "extra_voxels": 0,
                "missing_voxels": 2,
            },
            {
                "model": "bunny",
                "grid": 512,
                "peer": "trimesh",
                "status": "skipped",
                "reason": "grid above 256",
                "seconds": None,
                "ours_ms": 10.0,
                "ratio": None,
            },
        ],
        "cli": [{"model": "bunny", "grid": 256, "status": "ok", "wall_s": 1.25, "reported_s": 0.5}],
    }


def test_markdown_tables():
    text = markdown(_doc())
    assert "- device: Some GPU (driver: x 1.0)" in text
    assert (
        "| bunny | 69,630 | 256 | branchless | counting | 10.0 (9.0–12.0) | 20.0 | 3.75 | 3.50 "
        "| 58,786 | 2,591 | 3.0 |"
    ) in text
    assert "bandwidth %" not in text
    assert "| model | grid | variant | sort | setup | fill |" in text  # no column without time
    assert "| bunny | 256 | pyvista | 20.0 | 10.0 | 0.50 | 0 | 2 |  |" in text
    assert "| bunny | 512 | trimesh |  | 10.0 |  |  |  | skipped: grid above 256 |" in text
    assert "| bunny | 256 | 1.25 | 0.50 |  |" in text
    assert "- bunny 8192³ naive bitonic: GridError: too large" in text
    for line in text.splitlines():  # every table line has as many cells as its header
        if line.startswith("| model") or line.startswith("| CLI"):
            width = line.count("|")
        elif line.startswith("|"):
            assert line.count("|") == width
    with_bandwidth = markdown(_doc({"setup": 0.5, "total": 0.125}))
    assert "| bandwidth % |" in with_bandwidth and "| 3.0 | 12.5 |" in with_bandwidth


def test_json_round_trip(tmp_path):
    path = tmp_path / "results.json"
    write_json(_doc(), path)
    back = json.loads(path.read_text())
    assert back["rows"][0]["counts"]["pairs"] == 58786
    assert back["peers"][0]["ratio"] == 0.5


def test_a_tiny_run_writes_every_output(gpu, tmp_path, capsys):
    args = [
        "--models-dir",
        str(PROJECT_MODELS),
        "--models",
        "gear",  # by name, in --models-dir (also the CLI's model)
        "--grids",
        "16",
        "0",
        "--repeat",
        "1",
        "--peers",
        "reference",
        "--json",
        str(tmp_path / "run.json"),
        "--markdown",
        str(tmp_path / "run.md"),
        "--bandwidth",
        "100",
    ]
    plots = importlib.util.find_spec("matplotlib") is not None
    if plots:
        args += ["--plots", str(tmp_path / "plots")]
    assert bench.main(args) == 0
    doc = json.loads((tmp_path / "run.json").read_text())
    ok, skipped = doc["rows"]
    assert ok["status"] == "ok" and ok["grid"] == 16 and ok["counts"]["triangles"] == 1920
    assert ok["counts"]["pairs"] > 0 and ok["memory"]["device_peak_bytes"] > 0
    assert ok["wall_ms"]["min"] <= ok["wall_ms"]["median"] <= ok["wall_ms"]["max"]
    assert ok["from_arrays_ms"] > 0 and 0 < ok["gpu_ms_compute"] < ok["gpu_ms_total"]
    assert {"setup", "fill", "svo_write"} <= set(ok["bytes"])
    assert ok["bandwidth_fraction"]["total"] > 0
    assert skipped["status"] == "skipped" and skipped["grid"] == 0 and skipped["reason"]
    (reference,) = doc["peers"]
    assert reference["status"] == "ok", reference
    assert (reference["extra_voxels"], reference["missing_voxels"]) == (0, 0)
    assert reference["ratio"] > 0
    assert [c["grid"] for c in doc["cli"]] == [16, 0]
    assert doc["cli"][0]["status"] == "ok" and doc["cli"][1]["status"] == "failed"
    assert doc["device"]["name"] and doc["commit"] != ""
    printed = capsys.readouterr().out
    assert printed == (tmp_path / "run.md").read_text() + "\n"
    with Voxelizer() as probe:  # the default: the variant "auto" runs on this device
        default = variant_candidates("auto", probe.device.is_cpu)[0]
    assert ok["variant"] == default and doc["settings"]["variants"] == [default]
    assert f"| gear | 1,920 | 16 | {default} | counting |" in printed
    if plots:
        figures = {p.name: p.read_bytes() for p in (tmp_path / "plots").iterdir()}
        assert set(figures) >= {"runtime.png", "passes.png", "memory.png"}
        for name, data in figures.items():
            assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000, name


@pytest.mark.slow
def test_trees_side_by_side_time_every_pass_of_both(tmp_path):
    """The trees benchmark on two copies of this package: each runs in its own process, both
    give the same voxels, and the table has every pass of the case with a ratio."""
    import shutil
    import subprocess
    import sys

    from voxelizer.benchmarks import trees

    copies = [tmp_path / "first", tmp_path / "second"]
    for copy in copies:
        shutil.copytree(
            Path(trees.__file__).parents[1], copy / "voxelizer",
            ignore=shutil.ignore_patterns("__pycache__"),
        )  # fmt: skip
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable, "-m", "voxelizer.benchmarks.trees", "--trees", *map(str, copies),
            "--models", str(PROJECT_MODELS / "torus_knot.ply"), "--grids", "16",
            "--cases", "parity, combined, counting", "--rounds", "1", "--repeat", "2",
            "--warmup", "0", "--out", str(out),
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = (out / "passes.md").read_text()
    assert "differ" not in text
    rows = [line for line in text.splitlines() if line.startswith("| torus_knot | 16 |")]
    passes = {row.split(" | ")[3] for row in rows}
    assert {"setup", "scan", "emit", "fill", "svo_classify", "sum"} <= passes
    assert all(float(row.split(" | ")[-1].rstrip(" |")) > 0 for row in rows)
    rounds = json.loads((out / "passes.json").read_text())
    assert [Path(found[0]["package"]).parent for found in rounds.values()] == copies


@pytest.mark.slow
def test_datasets_compares_two_trees_beside_their_ceilings(tmp_path, models_dir):
    """The datasets benchmark with --before a copy of this package: each tree's rounds run
    in a process importing that tree, and each grid has both trees' rates, the ratios, and
    the ceilings (parse rate, the reading processes' whole rate, summed GPU time, the device
    thread's CPU per mesh)."""
    import shutil
    import subprocess
    import sys

    from voxelizer.benchmarks import datasets

    before = tmp_path / "before"
    shutil.copytree(
        Path(datasets.__file__).parents[1], before / "voxelizer",
        ignore=shutil.ignore_patterns("__pycache__"),
    )  # fmt: skip
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable, "-m", "voxelizer.benchmarks.datasets", "--models-dir",
            str(models_dir), "--work", str(tmp_path / "work"), "--limit", "2", "--grids", "16",
            "--rounds", "1", "--ways", "many", "--parse-processes", "1", "--before",
            str(before), "--out", str(out),
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads((out / "datasets.json").read_text())
    assert result["trees"]["before"] == str(before)
    (grid,) = result["grids"]
    for tree in ("before", "after"):
        found = grid[tree]
        assert found["rounds"]["many"][0] > 0
        limits = found["ceilings"]
        assert limits["parse_files_per_s"] > 0 and limits["device_thread_cpu_ms_per_mesh"] > 0
        assert limits["prepare_files_per_s"] > 0
        assert limits["gpu_ms_per_mesh"] > 0  # lavapipe has timestamps
        assert limits["device_thread_other_wait_ms_per_mesh"] is not None
        assert limits["device_thread_mesh_wait_ms_per_mesh"] >= 0
    assert grid["after_over_before"]["many"]["best"] > 0
    assert grid["after_over_before"]["parse_files_per_s"] > 0
    assert grid["after_over_before"]["prepare_files_per_s"] > 0
    text = (out / "datasets.md").read_text()
    assert "| many |" in text and "ceilings: parse" in text
    assert "read and prepared for the grid" in text


@pytest.mark.slow
def test_the_colours_benchmark_writes_its_files_and_their_sizes(tmp_path, capsys):
    """A tiny run of voxelizer.benchmarks.colours on the bundled models: every call and file
    in the JSON, the same voxels with and without colours, the .ply float32 on the power of
    two voxel size."""
    from voxelizer.benchmarks import colours

    args = [str(tmp_path), "--textured", str(PROJECT_MODELS / "painted_gear.obj")]
    args += ["--part", str(PROJECT_MODELS / "gear.ply"), "--grid", "16", "--part-voxels", "30"]
    assert colours.main([*args, "--runs", "1"]) == 0
    doc = json.loads((tmp_path / "colours.json").read_text())
    textured, part = doc["textured"], doc["part"]
    assert textured["voxels"]["plain"] == textured["voxels"]["colors"] > 0
    assert textured["parts"] == ["gear", "axle"] and textured["distinct_colours"] > 10
    assert textured["ratio_to_plain"]["plain"] == 1.0
    assert [row["file"] for row in textured["files"]] == [
        f"painted_gear-16.{suffix}" for suffix in colours.TEXTURED_FORMATS
    ]
    assert part["grid"][0] in (30, 31, 32) and part["voxels"] > 0  # (the placement's margin)
    for row in [*textured["files"], *part["files"], part["dyadic"]]:
        path = tmp_path / row["file"]
        files = sorted(path.iterdir()) if path.is_dir() else [path]
        assert row["bytes"] == sum(f.stat().st_size for f in files) > 0
    assert part["dyadic"]["ply_float32"] and part["dyadic"]["voxel_size"] <= part["voxel_size"]
    assert "| colors+labels |" in capsys.readouterr().out


@pytest.mark.slow
def test_trigrid_rebuild_compares_two_checkouts(tmp_path):
    """The build's fixed cost and a submission's round trip, this checkout against itself as
    the baseline: a row for the round trip and one a mesh, each side's times, its host CPU
    time and one submission a build, the table and the JSON written."""
    from voxelizer.benchmarks import trigrid_rebuild

    out = tmp_path / "out"
    arguments = ["--baseline", str(trigrid_rebuild.CHECKOUT), "--models-dir", str(tmp_path),
                 "--out", str(out), "--models", "sphere-1", "--rounds", "1", "--builds", "2",
                 "--profile", "2"]  # fmt: skip
    assert trigrid_rebuild.main(arguments) == 0
    document = json.loads((out / "results.json").read_text())
    trip, row = document["rows"]
    assert trip["model"] == "submission"
    assert row["model"] == "sphere-1" and row["triangles"] == 80
    for side in ("baseline", "this"):
        assert row[side]["submissions"] == 1
        for key in ("wall_ms", "read_ms", "block_ms", "cpu_ms"):
            assert 0 < row[side][key]["min"] <= row[side][key]["median"]
        assert 0 < trip[side]["trip_us"]["min"] <= trip[side]["trip_us"]["median"]
    assert row["wall_ms_ratio"]["min"] > 0 and trip["cpu_us_ratio"]["median"] > 0
    text = (out / "results.md").read_text(encoding="utf-8")
    assert "| sphere-1 (80) | build ms |" in text and "| submission | host CPU time" in text


@pytest.mark.slow
def test_datasets_times_the_command_on_a_ray_head_it_starts_and_stops(tmp_path, models_dir):
    """--ray-gpus 0: cli_batch_ray runs the command with --ray on a local head that the
    benchmark starts (one for the tree that has voxelizer.ray, none for a tree without it:
    the way is skipped there, not a crash) and stops: no Ray process of it is left, and no
    note of it for a later ray.init() on this machine."""
    import shutil
    import subprocess
    import sys

    from voxelizer.benchmarks import datasets

    before = tmp_path / "before"
    shutil.copytree(
        Path(datasets.__file__).parents[1], before / "voxelizer",
        ignore=shutil.ignore_patterns("__pycache__"),
    )  # fmt: skip
    (before / "voxelizer" / "ray.py").unlink()  # a tree from before Ray support
    note = Path("/tmp/ray/ray_current_cluster")
    noted = note.read_text() if note.exists() else None
    out = tmp_path / "out"
    with subprocess.Popen(
        [
            sys.executable, "-m", "voxelizer.benchmarks.datasets", "--models-dir",
            str(models_dir), "--work", str(tmp_path / "work"), "--limit", "2", "--grids", "16",
            "--rounds", "1", "--ways", "cli_batch,cli_batch_ray", "--parse-processes", "0",
            "--ray-gpus", "0", "--before", str(before), "--out", str(out),
        ],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    ) as benchmark:  # fmt: skip
        _, stderr = benchmark.communicate(timeout=600)
    assert benchmark.returncode == 0, stderr
    (grid,) = json.loads((out / "datasets.json").read_text())["grids"]
    assert set(grid["after"]["rounds"]) == {"cli_batch", "cli_batch_ray"}
    assert grid["after"]["rounds"]["cli_batch_ray"][0] > 0
    assert set(grid["before"]["rounds"]) == {"cli_batch"}
    assert "| cli_batch_ray |" in (out / "datasets.md").read_text()
    assert (note.read_text() if note.exists() else None) == noted
    assert not _head_folders_of(benchmark.pid)  # other processes' heads are theirs


def _head_folders_of(pid: int) -> list[Path]:
    from voxelizer.benchmarks.ray_head import FOLDER_PREFIX

    return list(Path("/tmp").glob(f"{FOLDER_PREFIX}{pid}-*"))


@pytest.mark.slow
@pytest.mark.parametrize("auth_mode", [None, "token"])
def test_the_ray_timeline_notes_every_phase_in_order(tmp_path, capsys, monkeypatch, auth_mode):
    """voxelizer.benchmarks.ray_timeline on a local head it starts: each phase of the
    command's process noted once, in the order they happen, and every file done. The head
    authenticates as the processes that connect to it: RAY_AUTH_MODE unset (no token) or
    "token" (as in a process that ran ray.init()); a head of the other mode than its
    clients' cancels their actors before they start."""
    import secrets
    import shutil

    from voxelizer.benchmarks import ray_timeline

    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    if auth_mode is not None:
        monkeypatch.setenv("RAY_AUTH_MODE", auth_mode)
        monkeypatch.setenv("RAY_AUTH_TOKEN", secrets.token_hex(32))

    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("gear.ply", "torus_knot.ply"):
        shutil.copyfile(PROJECT_MODELS / name, folder / name)
    out = tmp_path / "timeline.json"
    assert ray_timeline.main([str(folder), "--grid", "8", "--runs", "1", "--json", str(out)]) == 0
    (run,) = json.loads(out.read_text())["this"]
    assert run["done"] == 2 and run["failed"] == 0
    assert run["command"] > 0  # the whole command, timed beside the timeline
    marks = run["marks"]
    times = [marks[phase] for phase in ray_timeline.PHASES]
    assert times == sorted(times) and times[0] > 0
    assert marks["probe asked"] <= marks["probe constructor"] <= marks["probe device open"]
    assert "first result" in capsys.readouterr().out
    assert not _head_folders_of(os.getpid())
