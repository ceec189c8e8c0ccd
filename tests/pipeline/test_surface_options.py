"""The surface modes as options: checked once (ModeError before the mesh is read), on the
command line (--mode, --surface: usage errors exit 2), in the stats and the summary line."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import voxelizer
from voxelizer import ModeError, OpenMeshWarning, Options
from voxelizer.reference.surface import voxelize_surface_reference

from ..helpers import (
    PROJECT_MODELS,
    cli_usage_error,
    load_model,
    read_back,
    run_cli,
    shared_model,
)

GEAR = PROJECT_MODELS / "gear.ply"
MISSING = PROJECT_MODELS / "no-such-mesh.ply"


def test_modes_and_their_defaults():
    assert (Options.create().mode, Options.create().surface) == ("solid", None)
    assert Options.create(mode="surface").surface == "conservative"
    assert Options.create(mode="surface", surface="thin").surface == "thin"
    assert Options.create(mode="both").surface == "conservative"
    assert Options.create(mode="both", attributes=["face", "face"]).attributes == ("face",)


@pytest.mark.parametrize(
    "keywords, message",
    [
        ({"mode": "shell"}, "unknown mode 'shell'"),
        ({"mode": None}, "unknown mode None"),
        ({"mode": "surface", "surface": "thick"}, "unknown surface 'thick'"),
        ({"surface": "thin"}, "surface='thin' needs mode='surface' or mode='both'"),
        ({"mode": "both", "surface": "thin"}, "surface='thin' is for mode='surface'"),
        ({"mode": "surface", "fill_mode": "vote"}, "mode='surface' has none"),
        ({"attributes": ["face"]}, "face ids belong to surface voxels"),
        ({"mode": "surface", "attributes": ["colour"]}, "unknown attribute 'colour'"),
        ({"mode": "surface", "attributes": "face"}, "must be a list of names"),
    ],
)
def test_bad_modes_fail_before_the_mesh_is_read(keywords, message):
    with pytest.raises(ModeError, match=message):
        Options.create(**keywords)
    with pytest.raises(ModeError, match=message):
        voxelizer.voxelize_dense(MISSING, 16, **keywords)


def test_an_open_mesh_warns_only_where_a_solid_is_filled(gpu):
    suzanne = load_model("suzanne.ply")  # open
    with warnings.catch_warnings():
        warnings.simplefilter("error", OpenMeshWarning)
        gpu.voxelize_dense(suzanne, 16, mode="surface")
    with pytest.warns(OpenMeshWarning, match="not closed"):
        gpu.voxelize_dense(suzanne, 16, mode="both")


def test_stats_name_the_mode_and_count_its_voxels(gpu):
    thin = gpu.voxelize(GEAR, 24, mode="surface", surface="thin")
    assert (thin.stats.mode, thin.stats.surface) == ("surface", "thin")
    assert thin.stats.counts["surface_voxels"] == thin.count() > 0
    assert thin.stats.counts["surface_pairs"] > 0 and "surface" in thin.stats.gpu_ms
    both = gpu.voxelize_dense(GEAR, 24, mode="both")
    assert (both.stats.mode, both.stats.surface) == ("both", "")
    assert both.stats.counts["voxels"] == both.count()
    assert {"fill", "surface"} <= set(both.stats.gpu_ms)
    as_json = json.loads(json.dumps(both.stats.to_dict()))
    assert (as_json["mode"], as_json["surface"]) == ("both", "")


# -- the command line ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["--mode", "shell"], "invalid choice: 'shell'"),
        (["--mode", "surface", "--surface", "thick"], "invalid choice: 'thick'"),
        (["--surface", "thin"], "--surface thin needs --mode surface or --mode both"),
        (["--mode", "both", "--surface", "thin"], "--surface thin is for --mode surface"),
        (["--mode", "surface", "--fill-mode", "union"], "--fill-mode union fills a solid"),
    ],
)
def test_mode_usage_errors_exit_2(capsys, args, message):
    stderr = cli_usage_error(capsys, GEAR, *args)
    assert message in stderr
    assert stderr.strip().splitlines()[-1].startswith("voxelize: error:")


@pytest.mark.parametrize(
    "args, mode, surface, noun",
    [
        (["--mode", "surface"], "surface", "conservative", "surface voxels"),
        (["--mode", "surface", "--surface", "thin"], "surface", "thin", "surface voxels"),
        (["--mode", "both"], "both", "conservative", "voxels"),
    ],
)
def test_the_command_writes_each_mode(tmp_path, capsys, args, mode, surface, noun):
    out, stats = tmp_path / "m.npz", tmp_path / "stats.json"
    model = shared_model("torus.stl")
    code, stdout, stderr = run_cli(
        capsys, model, "--grid", 32, *args, "-o", out, "--stats-json", stats
    )
    assert code == 0 and stderr == "", stderr
    expected = voxelize_surface_reference(load_model("torus.stl"), 32, mode, surface)
    assert np.array_equal(read_back(out).to_numpy(), expected.to_numpy())
    assert f"{expected.count():,} {noun}, " in stdout
    assert json.loads(stats.read_text())["mode"] == mode


@pytest.mark.parametrize(
    ("mode", "noun"), [("solid", "solid voxels"), ("surface", "surface voxels"), ("both", "voxels")]
)
def test_a_results_text_says_what_its_voxels_are(gpu, mode, noun):
    """repr names the voxels of the result's mode, not "solid voxels" for every result."""
    vertices = np.array([[1, 1, 1], [7, 1, 1], [1, 7, 1], [1, 1, 7]], np.float32)
    faces = np.array([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]], np.int32)
    svo = gpu.voxelize((vertices, faces), 8, mode=mode)
    dense = gpu.voxelize_dense((vertices, faces), 8, mode=mode)
    for result in (svo, dense):
        text = repr(result)
        assert f" {result.count():,} {noun}," in text, text
        assert mode == "solid" or "solid voxels" not in text, text
