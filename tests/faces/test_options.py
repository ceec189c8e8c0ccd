"""Options are checked once, before the mesh is read; every parameter after `grid` is
keyword-only; Stats is typed and keeps its JSON form."""

from __future__ import annotations

import dataclasses
import inspect
import json

import numpy as np
import pytest

import voxelizer
from voxelizer import (
    FillModeError,
    GridError,
    MemoryBudgetError,
    Options,
    Stats,
    VariantError,
    VoxelizerError,
    cli,
)
from voxelizer.api import Voxelizer
from voxelizer.options import BATCH_OPTION_NAMES, DEFAULTS, OPTION_NAMES, batch_options_of

from ..helpers import PROJECT_MODELS

GEAR = PROJECT_MODELS / "gear.ply"
MISSING = PROJECT_MODELS / "no-such-mesh.ply"


def test_defaults_are_checked_values():
    options = Options.create()
    assert (options.shape, options.voxel_size, options.bounds) == (None, None, None)
    assert (options.variant, options.fill_mode, options.sort) == (
        "auto",
        "parity",
        "counting",
    )
    assert options.max_memory is None and options.progress is None


def test_values_are_normalised_once():
    options = Options.create(np.int64(16), max_memory="1KiB", bounds=[[0, 0, 0], [1, 2, 3]])
    assert options.shape == (16, 16, 16) and options.max_memory == 1024
    assert options.bounds.dtype == np.float64 and not options.bounds.flags.writeable
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.variant = "naive"  # type: ignore[misc]


@pytest.mark.parametrize(
    "keywords, error, message",
    [
        ({"variant": "fast"}, VariantError, "unknown variant 'fast'"),
        ({"variant": ["naive"]}, VariantError, r"unknown variant \['naive'\]"),
        ({"sort": "quick"}, VariantError, "unknown sort 'quick'"),
        ({"fill_mode": "flood"}, FillModeError, "unknown fill mode 'flood'"),
        ({"grid": 0}, GridError, "at least 1"),
        ({"grid": 16, "voxel_size": 0.1}, GridError, "not both"),
        ({"voxel_size": -1.0}, GridError, "positive"),
        ({"bounds": [[0, 0, 0], [0, 1, 1]]}, GridError, "less than"),
        ({"max_memory": "lots"}, MemoryBudgetError, "cannot read memory size"),
    ],
)
def test_bad_options_fail_before_the_mesh_is_read(keywords, error, message):
    """A missing mesh would be a MeshError: the option's own error comes first."""
    with pytest.raises(error, match=message):
        Options.create(**keywords)
    with pytest.raises(error, match=message):
        voxelizer.voxelize(MISSING, **keywords)


def test_parameters_after_grid_are_keyword_only(gpu):
    with pytest.raises(TypeError, match="positional"):
        gpu.voxelize_dense(GEAR, 16, "naive")  # type: ignore[misc]
    with pytest.raises(TypeError, match="positional"):
        voxelizer.voxelize(GEAR, 16, "naive")  # type: ignore[misc]
    with pytest.raises(TypeError, match="unexpected keyword"):
        gpu.voxelize(GEAR, 16, colour="red")  # type: ignore[call-arg]
    assert gpu.voxelize_dense(GEAR, 16, variant="naive").stats.variant == "naive"


def test_stats_are_typed_and_keep_their_json_form(gpu):
    svo = gpu.voxelize(GEAR, 16, variant="indexed", sort="bitonic")
    stats = svo.stats
    assert isinstance(stats, Stats)
    assert (stats.variant, stats.sort, stats.fill_mode, stats.shape) == (
        "indexed",
        "bitonic",
        "parity",
        (16, 16, 16),
    )
    assert stats.counts["solid_voxels"] == svo.count() > 0
    assert stats.gpu_total_ms == pytest.approx(sum(stats.gpu_ms.values()))
    assert stats.memory.device_peak_bytes == sum(stats.memory.device_buffers.values()) > 0
    as_json = json.loads(json.dumps(stats.to_dict()))
    assert set(as_json) == {"device", "variant", "sort", "fill_mode", "mode", "surface",
                            "shape", "gpu_ms", "host_ms", "counts", "memory"}  # fmt: skip
    assert (as_json["mode"], as_json["surface"]) == ("solid", "")
    assert as_json["shape"] == [16, 16, 16] and as_json["counts"] == stats.counts
    assert as_json["memory"]["device_peak_bytes"] == stats.memory.device_peak_bytes


def test_vote_keeps_the_job_shape_and_the_counts_of_one_direction(gpu):
    parity = gpu.voxelize_dense(GEAR, (16, 8, 12))
    vote = gpu.voxelize_dense(GEAR, (16, 8, 12), fill_mode="vote")
    assert vote.stats.shape == parity.stats.shape == (16, 8, 12)
    assert vote.stats.fill_mode == "vote"
    # counts are those of one direction (the triangles were not counted six times)
    assert vote.stats.counts["triangles"] == parity.stats.counts["triangles"]
    assert set(vote.stats.gpu_ms) == set(parity.stats.gpu_ms)


def test_a_closed_voxelizer_refuses_work_with_a_voxelizer_error():
    closed = Voxelizer()
    closed.close()
    with pytest.raises(VoxelizerError, match="closed"):
        closed.voxelize(GEAR, 16)


# --- the option names, written once -------------------------------------------------------------


def keyword_only(function: object) -> dict[str, object]:
    """The keyword-only parameters that inspect.signature (help(), Jupyter) shows, with
    their defaults."""
    parameters = inspect.signature(function).parameters.values()  # type: ignore[arg-type]
    assert not any(p.kind is p.VAR_KEYWORD for p in parameters), "a **options is shown"
    return {p.name: p.default for p in parameters if p.kind is p.KEYWORD_ONLY}


@pytest.mark.parametrize(
    ("function", "own"),
    [
        (voxelizer.voxelize, {"device": None, "out": None, "overwrite": False}),
        (voxelizer.voxelize_dense, {"device": None}),
        (Voxelizer.voxelize, {"warn": True, "count_voxels": True, "out": None, "overwrite": False}),
        (Voxelizer.voxelize_dense, {"warn": True, "count_voxels": True}),
        (Options.create, {}),
    ],
)
def test_the_signatures_show_every_option_as_a_keyword(function, own):
    shown = keyword_only(function)
    assert list(shown) == [*own, *OPTION_NAMES]
    assert shown == {**own, **DEFAULTS}


def test_voxelize_many_shows_the_batch_options_as_keywords():
    shown = keyword_only(voxelizer.voxelize_many)
    assert list(shown)[-len(BATCH_OPTION_NAMES) :] == list(BATCH_OPTION_NAMES)
    assert not set(shown) & {"progress", "attributes"}  # a batch has none
    assert {name: shown[name] for name in BATCH_OPTION_NAMES} == {
        name: DEFAULTS[name]
        for name in BATCH_OPTION_NAMES  # type: ignore[literal-required]
    }


def test_the_option_names_are_the_checked_fields_and_the_defaults_are_the_checked_ones():
    assert set(BATCH_OPTION_NAMES) < set(OPTION_NAMES) == set(DEFAULTS)
    fields = {field.name for field in dataclasses.fields(Options)}
    assert fields == {"shape", *OPTION_NAMES}
    checked = Options.create()
    assert Options.create(**checked.keywords()).keywords() == checked.keywords()
    assert {name: getattr(checked, name) for name in OPTION_NAMES} == DEFAULTS


def test_a_name_that_is_no_option_is_a_type_error_listing_them():
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'colour' \(.*fill_mode"):
        Options.create(colour="red")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'progres' "):
        voxelizer.voxelize(MISSING, progres=None)  # type: ignore[call-arg]


def test_the_command_has_an_option_for_every_batch_option():
    """The command hands its parsed options over by name (batch_options_of)."""
    args = cli._parser().parse_args(["mesh.ply"])
    options = batch_options_of(args)
    assert list(options) == list(BATCH_OPTION_NAMES)
    assert Options.create(**options).keywords() == Options.create().keywords()
