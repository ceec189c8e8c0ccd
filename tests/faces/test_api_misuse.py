"""The Python API against misuse: every refusal is a VoxelizerError subclass (never a bare
ValueError, TypeError or AttributeError), raised before the work; a progress callback that
calls back into its own Voxelizer gets an error, not a deadlock; numbers that are not what
they seem (complex coordinates, indices from 2^63) are refused as what they are."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import trimesh

import voxelizer
from voxelizer import (
    ArgumentError,
    DenseGrid,
    GridError,
    GridIndexError,
    MeshError,
    ReentrantCallError,
    Voxelizer,
    VoxelizerError,
)
from voxelizer.io import load_mesh
from voxelizer.placement import GridPlacement

from ..helpers import PROJECT_MODELS, assert_same_voxels, placed, time_limit

TRIANGLE = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
GEAR = PROJECT_MODELS / "gear.ply"


def two_boxes() -> trimesh.Trimesh:
    """Two overlapping closed parts: fill_mode="union" reports its progress once per part."""
    first = trimesh.creation.box(extents=[1, 1, 1])
    second = trimesh.creation.box(extents=[1, 1, 1])
    second.apply_translation([0.5, 0.5, 0.5])
    return trimesh.util.concatenate([first, second])


# --- typed errors ---------------------------------------------------------------------------


def test_misused_results_raise_voxelizer_errors():
    svo = placed(np.ones((8, 8, 8), bool))
    grid = DenseGrid(np.ones((8, 8, 8), bool), GridPlacement(8, np.zeros(3), 1.0))
    calls = [
        (lambda: svo.lod(-1), "level must be an integer"),
        (lambda: svo.lod(0, rule="most"), "rule must be"),
        (lambda: svo.to_numpy(attribute="bogus"), "attribute must be 'face'"),
        (lambda: grid.to_numpy(attribute="bogus"), "attribute must be 'face'"),
        (lambda: svo.to_numpy(attribute="face"), "no face ids"),
        (lambda: svo[1, 2], "index with three integers"),
        (lambda: svo.contains(np.zeros((3, 2))), r"\(M, 3\) array"),
        (lambda: svo.contains(np.zeros((1, 3), complex)), "real numbers"),
        (lambda: voxelizer.save(None, "x.svo"), "writes an SVO or a DenseGrid, not NoneType"),
        (lambda: voxelizer.save(svo, None), "takes a path"),
        (lambda: voxelizer.load(None), "takes a path"),
        (lambda: voxelizer.load(3), "takes a path"),
        (lambda: voxelizer.write_preview(svo, 3), "takes a path"),
        (lambda: DenseGrid(np.ones((8, 8, 4), bool), grid.placement), "expected a bool array"),
        (lambda: voxelizer.find_meshes(None), "takes paths, not NoneType"),
        (lambda: voxelizer.find_meshes([3]), "takes paths, not int"),
        (lambda: voxelizer.mesh_warnings(None, "parity"), "counts must be a mapping"),
    ]
    for call, message in calls:
        with pytest.raises(VoxelizerError, match=message) as caught:
            call()
        # still what such calls raised before, for code that catches those
        assert isinstance(caught.value, (ValueError, TypeError)), caught.value
    with pytest.raises(GridIndexError, match="outside the 8x8x8 grid"):
        svo[8, 0, 0]
    with pytest.raises(IndexError):
        svo[0, 0, -1]


def test_find_meshes_takes_one_path_as_one_input():
    """A str is one input (a folder here), never a sequence of one-letter inputs."""
    assert len(voxelizer.find_meshes(str(PROJECT_MODELS)).paths) == len(
        voxelizer.find_meshes([PROJECT_MODELS]).paths
    )
    assert voxelizer.find_meshes(GEAR).paths == [GEAR]


def test_a_progress_that_is_not_callable_is_refused_before_the_work(gpu):
    for call in (gpu.voxelize, gpu.voxelize_dense, voxelizer.voxelize):
        with pytest.raises(ArgumentError, match="progress must be a callable"):
            call(GEAR, 16, progress=5)


# --- a progress callback that calls back ----------------------------------------------------


@pytest.mark.parametrize("calls_back", ["close", "voxelize", "voxelize_dense", "module function"])
def test_a_progress_callback_calling_its_own_voxelizer_is_an_error_not_a_deadlock(calls_back):
    with Voxelizer() as own:
        if calls_back == "module function":
            own = voxelizer.api.shared_voxelizer()
        actions = {
            "close": own.close,
            "voxelize": lambda: own.voxelize(GEAR, 16),
            "voxelize_dense": lambda: own.voxelize_dense(GEAR, 16),
            "module function": lambda: voxelizer.voxelize(GEAR, 16),
        }

        def progress(stage: str, done: int, total: int) -> None:
            actions[calls_back]()

        with time_limit(60.0), pytest.raises(ReentrantCallError, match="inside a voxelization"):
            own.voxelize(two_boxes(), 16, fill_mode="union", progress=progress)
        # the Voxelizer is still open and gives the same voxels as before
        again = own.voxelize_dense(two_boxes(), 16, fill_mode="union").to_numpy()
        fresh = Voxelizer()
        try:
            expected = fresh.voxelize_dense(two_boxes(), 16, fill_mode="union").to_numpy()
        finally:
            fresh.close()
        assert_same_voxels(again, expected)


def test_another_voxelizer_may_be_used_from_a_progress_callback(gpu):
    counts: list[int] = []
    with Voxelizer() as own:

        def progress(stage: str, done: int, total: int) -> None:
            counts.append(gpu.voxelize(GEAR, 16).count())

        own.voxelize(two_boxes(), 16, fill_mode="union", progress=progress)
    assert len(counts) == 2 and counts[0] == counts[1] > 0


# --- numbers that are not what they seem ----------------------------------------------------


@pytest.mark.parametrize(
    "vertices",
    [
        TRIANGLE.astype(complex),
        TRIANGLE + 1j,
        [[0, 0, 0], [1, 0, 0], [0, 1j, 0]],
        TRIANGLE.astype(str),
        TRIANGLE.astype(bool),
    ],
    ids=["complex", "imaginary", "list", "strings", "bools"],
)
def test_vertices_that_are_not_real_numbers_are_refused(vertices):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning on the way
        with pytest.raises(MeshError, match="vertices must be real numbers"):
            load_mesh((vertices, [[0, 1, 2]]))


def test_complex_numbers_are_refused_wherever_coordinates_are_taken(gpu):
    with pytest.raises(MeshError, match="real numbers"):
        gpu.voxelize_grid(TRIANGLE.astype(complex) * 4, np.array([[0, 1, 2]]), 8)
    with pytest.raises(GridError, match="real numbers"):
        gpu.voxelize(GEAR, 16, bounds=np.array([[-1, -1, -1], [1, 1, 1]], complex))
    with pytest.raises(GridError, match="real numbers"):
        GridPlacement(8, np.zeros(3, complex), 1.0)


def test_a_face_index_from_two_to_the_63_is_named_as_written(tmp_path):
    """A uint64 index >= 2^63 is no negative vertex number: the message names it as stored."""
    header = (
        b"ply\nformat binary_little_endian 1.0\nelement vertex 3\nproperty float x\n"
        b"property float y\nproperty float z\nelement face 2\n"
        b"property list uchar uint64 vertex_indices\nend_header\n"
    )
    faces = [[0, 1, 2], [0, 1, 2**63 + 7]]
    body = TRIANGLE.astype(np.float32).tobytes()
    body += b"".join(bytes([3]) + np.array(face, np.uint64).tobytes() for face in faces)
    path = tmp_path / "big_index.ply"
    path.write_bytes(header + body)
    with pytest.raises(MeshError, match="face 1 refers to vertex 9,223,372,036,854,775,815,"):
        load_mesh(path)
    quads = (
        header.replace(b"element face 2", b"element face 1") + TRIANGLE.astype(np.float32).tobytes()
    )
    quads += bytes([4]) + np.array([0, 1, 2, 2**64 - 1], np.uint64).tobytes()
    path.write_bytes(quads)
    with pytest.raises(MeshError, match="refers to vertex 18,446,744,073,709,551,615,"):
        load_mesh(path)
    with pytest.raises(MeshError, match="refers to a vertex that does not exist"):
        load_mesh((TRIANGLE, np.array([[0, 1, 2**63]], np.uint64)))
