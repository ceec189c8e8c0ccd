"""Outputs pinned by digest: the SVO arrays, the .svo file bytes and the dense bits of several
models, variants, sorts, fill modes, shapes and slab plans, as main produced them before the
pipeline was restructured (the fill modes, the surface modes and face ids since the second
restructuring). A refactoring that changes one voxel or one SVO byte fails here.

Regenerate (only for an intended change of the output): VOXELIZER_WRITE_DIGESTS=1 pytest
tests/pipeline/test_outputs_unchanged.py.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest

import voxelizer

from ..helpers import PROJECT_MODELS, model_path
from ..shapes import box, combine, inverted, sphere

DIGESTS = PROJECT_MODELS.parent / "tests" / "data" / "digests.json"

# (case name, model, grid, options for voxelize / voxelize_dense)
CASES = [
    ("torus_knot-64-naive", "torus_knot.ply", 64, {"variant": "naive"}),
    ("torus_knot-64-branchless", "torus_knot.ply", 64, {"variant": "branchless"}),
    ("torus_knot-64-indexed", "torus_knot.ply", 64, {"variant": "indexed"}),
    ("torus_knot-64-combined", "torus_knot.ply", 64, {"variant": "combined"}),
    ("torus_knot-64-bitonic", "torus_knot.ply", 64, {"sort": "bitonic"}),
    ("hollow_sphere-96", "hollow_sphere.ply", 96, {"variant": "combined"}),
    ("gear-80x48x32", "gear.ply", (80, 48, 32), {}),
    ("bunny-128", "bunny.ply", 128, {"variant": "indexed"}),
    ("dragon-128-bitonic", "dragon.ply", 128, {"sort": "bitonic"}),
    ("bunny_scan-64-vote", "bunny_scan.ply", 64, {"fill_mode": "vote"}),
    ("armadillo-256-slabs", "armadillo.ply", 256, {"max_memory": "6MiB"}),
    ("suzanne-256x128x192-slabs", "suzanne.ply", (256, 128, 192), {"max_memory": "3MiB"}),
    ("parts-64-union", "parts", 64, {"fill_mode": "union"}),
    ("parts-128-union-slabs", "parts", 128, {"fill_mode": "union", "max_memory": "3MiB"}),
    ("bunny_scan-64-winding", "bunny_scan.ply", 64, {"fill_mode": "winding"}),
    (
        "bunny_scan-256-winding-slabs",
        "bunny_scan.ply",
        256,
        {"fill_mode": "winding", "max_memory": "5MiB"},
    ),
    ("torus_knot-64-surface", "torus_knot.ply", 64, {"mode": "surface"}),
    ("gear-64-thin", "gear.ply", 64, {"mode": "surface", "surface": "thin"}),
    ("bunny-128-surface-slabs", "bunny.ply", 128, {"mode": "surface", "max_memory": "2MiB"}),
    ("gear-64-both", "gear.ply", 64, {"mode": "both"}),
    ("bunny_scan-64-both-vote", "bunny_scan.ply", 64, {"mode": "both", "fill_mode": "vote"}),
    ("parts-64-both-union", "parts", 64, {"mode": "both", "fill_mode": "union"}),
    ("bunny_scan-48-both-winding", "bunny_scan.ply", 48, {"mode": "both", "fill_mode": "winding"}),
    (
        "torus_knot-64-surface-faces",
        "torus_knot.ply",
        64,
        {"mode": "surface", "attributes": ["face"]},
    ),
    (
        "gear-64-thin-faces",
        "gear.ply",
        64,
        {"mode": "surface", "surface": "thin", "attributes": ["face"]},
    ),
    ("gear-64-both-faces", "gear.ply", 64, {"mode": "both", "attributes": ["face"]}),
    (
        "bunny-128-both-faces-slabs",
        "bunny.ply",
        128,
        {"mode": "both", "attributes": ["face"], "max_memory": "8MiB"},
    ),
    (
        "bunny_scan-64-both-vote-faces",
        "bunny_scan.ply",
        64,
        {"mode": "both", "fill_mode": "vote", "attributes": ["face"]},
    ),
    (
        "parts-64-both-winding-faces",
        "parts",
        64,
        {"mode": "both", "fill_mode": "winding", "attributes": ["face"]},
    ),
    # Calls that the grid options (any size, exact boxes, crops, padding) must leave as they
    # were: a voxel size without bounds, a fill mode on it, odd-shaped surfaces.
    ("torus_knot-voxel_size", "torus_knot.ply", None, {"voxel_size": 0.037}),
    ("gear-voxel_size-union", "gear.ply", None, {"voxel_size": 0.03, "fill_mode": "union"}),
    ("gear-48x40x16-surface", "gear.ply", (48, 40, 16), {"mode": "surface"}),
    ("torus_knot-56-thin", "torus_knot.ply", 56, {"mode": "surface", "surface": "thin"}),
    (
        "suzanne-96x64x72-both-vote",
        "suzanne.ply",
        (96, 64, 72),
        {"mode": "both", "fill_mode": "vote"},
    ),
]
FACE_ARRAYS = ("brick_ids", "full_codes", "full_masks", "full_ids")  # svo.FaceIds
# Meshes made here: overlapping and nested closed parts (several runs of fill_mode="union").
SHAPES = {
    "parts": lambda: combine(
        sphere((0.4, 0.5, 0.5), 0.3),
        sphere((0.6, 0.5, 0.5), 0.3),
        inverted(sphere((0.4, 0.5, 0.5), 0.1)),
        box((0.1, 0.1, 0.1), (0.3, 0.9, 0.2)),
    ),
}


def _digest(*arrays: np.ndarray | bytes) -> str:
    digest = hashlib.sha256()
    for array in arrays:
        digest.update(array if isinstance(array, bytes) else np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def _outputs(gpu, model: str, grid, options: dict, tmp_path) -> dict[str, str]:
    mesh = SHAPES[model]() if model in SHAPES else model_path(model)
    svo = gpu.voxelize(mesh, grid, warn=False, **options)
    dense = gpu.voxelize_dense(mesh, grid, warn=False, **options)
    path = tmp_path / "out.svo"
    voxelizer.save(svo, path)
    found = {
        "svo_arrays": _digest(svo.nodes, svo.bricks, svo.level_offsets),
        "svo_file": _digest(path.read_bytes()),
        "dense_bits": _digest(np.packbits(dense.to_numpy(), axis=None)),
        "solid": str(dense.count()),
    }
    if options.get("attributes"):
        assert svo.face_ids is not None and dense.face_ids is not None
        found["svo_face_ids"] = _digest(*(getattr(svo.face_ids, name) for name in FACE_ARRAYS))
        found["dense_face_ids"] = _digest(dense.face_ids)
    return found


# The largest case is in the full run alone: the quick run pins the winding fill in slabs
# through test_winding.py's slab and batch check, and its voxels through the smaller cases.
SLOW_CASES = {"bunny_scan-256-winding-slabs"}


@pytest.mark.parametrize(
    "name, model, grid, options",
    [
        pytest.param(*case, id=case[0], marks=[pytest.mark.slow] if case[0] in SLOW_CASES else [])
        for case in CASES
    ],
)
def test_outputs_match_the_stored_digests(gpu, tmp_path, name, model, grid, options):
    found = _outputs(gpu, model, grid, options, tmp_path)
    if os.environ.get("VOXELIZER_WRITE_DIGESTS"):
        stored = json.loads(DIGESTS.read_text()) if DIGESTS.is_file() else {}
        stored[name] = found
        DIGESTS.write_text(json.dumps(stored, indent=2, sort_keys=True) + "\n")
    stored = json.loads(DIGESTS.read_text())
    assert found == stored[name]


# (case name, model, grid, options, file suffixes): the files each writer makes of a dense grid
FILE_CASES = [
    ("files-torus_knot-64", "torus_knot.ply", 64, {}, (".binvox", ".vti", ".vox", ".npz")),
    ("files-gear-voxel_size", "gear.ply", None, {"voxel_size": 0.03}, (".vti", ".vox", ".npz")),
]


def _file_digest(path) -> str:
    """The bytes of a written file; for .npz, its arrays (a zip member carries a time)."""
    if path.suffix != ".npz":
        return _digest(path.read_bytes())
    with np.load(path) as data:
        return _digest(*(name.encode() + data[name].tobytes() for name in sorted(data.files)))


@pytest.mark.parametrize(
    "name, model, grid, options, suffixes", FILE_CASES, ids=[case[0] for case in FILE_CASES]
)
def test_written_files_match_the_stored_digests(
    gpu, tmp_path, name, model, grid, options, suffixes
):
    dense = gpu.voxelize_dense(model_path(model), grid, **options)
    found = {}
    for suffix in suffixes:
        path = tmp_path / f"out{suffix}"
        voxelizer.save(dense, path)
        found[suffix] = _file_digest(path)
    if os.environ.get("VOXELIZER_WRITE_DIGESTS"):
        stored = json.loads(DIGESTS.read_text()) if DIGESTS.is_file() else {}
        stored[name] = found
        DIGESTS.write_text(json.dumps(stored, indent=2, sort_keys=True) + "\n")
    stored = json.loads(DIGESTS.read_text())
    assert found == stored[name]
