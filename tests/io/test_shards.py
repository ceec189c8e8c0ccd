"""Voxel shard stores (format "zarr"): one Zarr v3 store per batch, written by several
workers side by side and read back exactly by the real zarr library and by xarray; a resumed
batch fills in what is missing; the command line's --format zarr."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import trimesh
import xarray
import zarr

import voxelizer
from voxelizer import FormatError, OutputError, ThinResultWarning
from voxelizer.io.zarr_store import TABLE_ROWS, Row, ShardWriter, chunk_path, open_shards

from ..helpers import PROJECT_MODELS, run_cli, shared_model
from ..model.test_thin import table

GRID = 16
SOURCES = {
    "gear.ply": PROJECT_MODELS / "gear.ply",
    "knot.ply": PROJECT_MODELS / "torus_knot.ply",
    "sub/sphere.ply": PROJECT_MODELS / "hollow_sphere.ply",
    "sub/suzanne.ply": shared_model("suzanne.ply"),
}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The sources, a one-sided table (thin) and a file that is no mesh."""
    root = tmp_path / "in"
    for relative, source in SOURCES.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, root / relative)
    trimesh.Trimesh(*table(), process=False).export(root / "table.ply")
    (root / "broken.ply").write_bytes(b"ply\nformat ascii 1.0\nend_header\n")
    return root


def inputs_of(root: Path) -> list[Path]:
    return sorted(root.rglob("*.ply"))


def single(path: Path, grid=GRID) -> voxelizer.DenseGrid:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return voxelizer.voxelize_dense(path, grid)


def assert_store_holds(store: Path, paths: list[Path], grid=(GRID,) * 3) -> zarr.Group:
    """zarr reads each mesh's grid, placement and row as the single call gives them."""
    group = zarr.open_group(store, mode="r")
    voxels = group["voxels"]
    assert voxels.shape == (len(paths), grid[0], grid[1], -(-grid[2] // 8))
    assert voxels.chunks == (1, grid[0], grid[1], -(-grid[2] // 8))
    assert list(group["input"][:]) == [str(p) for p in paths]
    status, error = [str(s) for s in group["status"][:]], [str(e) for e in group["error"][:]]
    for index, path in enumerate(paths):
        if status[index] == "failed":
            assert str(path) in error[index]
            assert np.isnan(group["voxel_size"][index]) and group["triangles"][index] == -1
            continue
        expected = single(path, grid)
        got = np.unpackbits(voxels[index], axis=-1, count=grid[2]).astype(bool)
        assert np.array_equal(got, expected.to_numpy())
        assert np.array_equal(group["origin"][index], expected.origin)
        assert group["voxel_size"][index] == expected.voxel_size
        assert group["solid_voxels"][index] == expected.count()
        assert group["triangles"][index] == voxelizer.load_mesh(path).triangle_count
    return group


def test_two_workers_write_one_store_that_zarr_reads_exactly(gpu, tree):
    store = tree.parent / "grids.zarr"
    paths = inputs_of(tree)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = list(
            voxelizer.voxelize_many(paths, grid=GRID, out_dir=store, format="zarr", jobs=2)
        )
    assert len({r.device for r in results}) >= 1 and len(results) == len(paths)
    group = assert_store_holds(store, paths)
    statuses = dict(zip(map(Path, group["input"][:]), group["status"][:]))
    assert statuses[tree / "broken.ply"] == "failed"
    assert sum(status == "done" for status in statuses.values()) == len(paths) - 1
    # the table's warnings, the thin one among them, as the results carried them
    row = [str(p) for p in paths].index(str(tree / "table.ply"))
    assert "the solid result is empty" in str(group["warnings"][:][row])
    thin = [r for r in results if any(isinstance(w, ThinResultWarning) for w in r.warnings)]
    assert [r.input for r in thin] == [str(tree / "table.ply")]
    assert any(isinstance(w.message, ThinResultWarning) for w in caught)
    # xarray too
    dataset = xarray.open_zarr(store, consolidated=False)
    assert dataset["voxels"].dims == ("mesh", "x", "y", "z_bytes")
    assert list(dataset["status"].values) == list(group["status"][:])
    # the reader without zarr
    shards = open_shards(store)
    assert len(shards) == len(paths) and shards.shape == (GRID,) * 3
    gear = [str(p) for p in paths].index(str(tree / "gear.ply"))
    assert np.array_equal(shards.grid(gear).to_numpy(), single(paths[gear]).to_numpy())
    with pytest.raises(FormatError, match="failed, not stored"):
        shards.grid([str(p) for p in paths].index(str(tree / "broken.ply")))


def test_a_resumed_batch_fills_in_what_is_missing(gpu, tree):
    store = tree.parent / "grids.zarr"
    paths = inputs_of(tree)
    list(voxelizer.voxelize_many(paths, grid=GRID, out_dir=store, format="zarr"))
    # a batch stopped before mesh 1 was written and before mesh 2's row was: their chunks
    # gone or stale
    chunk_path(store, 1).unlink()
    before = chunk_path(store, 2).read_bytes()
    chunk_path(store, 2).write_bytes(b"half")
    writer = ShardWriter.create(store, [str(p) for p in paths], (GRID,) * 3, resume=True)
    writer.record(2, Row(str(paths[2])))
    writer.close()
    with pytest.raises(OutputError, match="file exists"):
        voxelizer.voxelize_many(paths, grid=GRID, out_dir=store, format="zarr")
    results = list(
        voxelizer.voxelize_many(paths, grid=GRID, out_dir=store, format="zarr", skip_existing=True)
    )
    done = sorted(r.index for r in results if r.status == "done")
    failed = [r.index for r in results if r.status == "failed"]  # (tried again)
    assert done == [1, 2]
    assert len([r for r in results if r.status == "skipped"]) == len(paths) - 2 - len(failed)
    assert chunk_path(store, 2).read_bytes() == before
    assert_store_holds(store, paths)
    # another batch's inputs or grid: refused, the store kept
    with pytest.raises(OutputError, match="holds another batch"):
        voxelizer.voxelize_many(
            paths[:2], grid=GRID, out_dir=store, format="zarr", skip_existing=True
        )
    # overwrite replaces the whole store
    results = list(
        voxelizer.voxelize_many(paths[1:3], grid=8, out_dir=store, format="zarr", overwrite=True)
    )
    assert [r.status for r in results] == ["done", "done"]
    assert_store_holds(store, paths[1:3], grid=(8, 8, 8))


def test_one_grid_shape_for_every_mesh(tree, tmp_path):
    with pytest.raises(OutputError, match="one grid shape"):
        voxelizer.voxelize_many(
            inputs_of(tree), voxel_size=0.1, out_dir=tmp_path / "s.zarr", format="zarr"
        )
    folder = tmp_path / "not-a-store"
    folder.mkdir()
    with pytest.raises(OutputError, match="not a voxel shard store"):
        voxelizer.voxelize_many(
            inputs_of(tree), grid=8, out_dir=folder, format="zarr", overwrite=True
        )


def test_an_anisotropic_grid_packs_its_last_axis(gpu, tree):
    store = tree.parent / "grids.zarr"
    paths = [tree / "gear.ply", tree / "knot.ply"]
    list(voxelizer.voxelize_many(paths, grid=(12, 16, 20), out_dir=store, format="zarr"))
    assert_store_holds(store, paths, grid=(12, 16, 20))


def test_the_table_spans_several_blocks(tmp_path):
    count = TABLE_ROWS + 3
    writer = ShardWriter.create(tmp_path / "s.zarr", [f"m{i}" for i in range(count)], (8, 8, 8))
    writer.record(
        count - 1, Row(f"m{count - 1}", "failed", error="é broken", origin=(1.0, 2.0, 3.0))
    )
    writer.close()
    group = zarr.open_group(tmp_path / "s.zarr", mode="r")
    status, error = list(group["status"][:]), list(group["error"][:])
    assert status[count - 1] == "failed" and error[count - 1] == "é broken"
    assert list(group["origin"][count - 1]) == [1.0, 2.0, 3.0]
    assert group["input"][:][TABLE_ROWS] == f"m{TABLE_ROWS}" and status[0] == ""
    assert open_shards(tmp_path / "s.zarr").row(count - 1).error == "é broken"


def test_the_command_line_writes_resumes_and_logs(gpu, tree, tmp_path, capsys):
    store, log = tmp_path / "out.zarr", tmp_path / "log.jsonl"
    args = [tree, "--out-dir", store, "--format", "zarr", "--grid", GRID]
    code, stdout, stderr = run_cli(capsys, *args, "--log", log)
    assert code == 1  # the broken file
    assert stdout.startswith("6 meshes: 5 done (1 thin), 0 skipped, 1 failed in ")
    assert "--mode both" in stderr and "mode='both'" not in stderr
    records = [json.loads(line) for line in log.read_text().splitlines()]
    thin = [r for r in records if r["thin"]]
    assert [Path(r["input"]).name for r in thin] == ["table.ply"]
    assert any("the solid result is empty" in w for w in thin[0]["warnings"])
    assert_store_holds(store, inputs_of(tree))
    code, stdout, stderr = run_cli(capsys, *args)
    assert code == 1 and "file exists (use --force to overwrite" in stderr
    code, stdout, stderr = run_cli(capsys, *args, "--skip-existing")
    assert stdout.startswith("6 meshes: 0 done, 5 skipped, 1 failed in ")


def test_the_options_are_kept_as_attributes(gpu, tree):
    store = tree.parent / "grids.zarr"
    box = [[-2, -2, -2], [2, 2, 2]]
    list(
        voxelizer.voxelize_many(
            [tree / "gear.ply"], grid=8, bounds=box, out_dir=store, format="zarr"
        )
    )
    options = zarr.open_group(store, mode="r").attrs["voxelizer"]["options"]
    assert options["bounds"] == box and options["fill_mode"] == "parity"
