"""Extreme input and memory: dense conversions cost what their result costs, a dense result
that host memory cannot hold is refused before the work, and a placement that overflows is
refused before any work with the value that overflowed, without numpy warnings."""

from __future__ import annotations

import tracemalloc
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pytest

import voxelizer
import voxelizer.budget
from voxelizer import SVO, GridError, MemoryBudgetError
from voxelizer.budget import available_host_memory
from voxelizer.io import load_mesh
from voxelizer.placement import GridPlacement

from ..helpers import PROJECT_MODELS, assert_one_line_error, placed, run_cli

HUGE = 1.5e308  # finite, but twice it is not
MESH_BYTES_PER_QUAD = 1024  # voxelizer.surface's peak per pair of triangles, measured (350-440)
LONG_SHAPES = [(8192, 8, 8), (2048, 8, 8)]  # padded cubes of 8192^3 and 2048^3 voxels


def long_solid(shape: tuple[int, int, int]) -> np.ndarray:
    """Full 8x8 cross-sections (full nodes), a thinner bar (mixed bricks) and scattered
    voxels (bricks with one voxel), along a long x axis."""
    nx = shape[0]
    voxels = np.zeros(shape, bool)
    voxels[nx // 8 : nx // 2] = True
    voxels[nx // 2 + 4 : nx - 4, 2:7, 1:6] = True
    x = np.arange(0, nx, 13)
    voxels[x, x % 8, (x // 8) % 8] = True
    return voxels


def peak_bytes(call: Callable[[], object]) -> tuple[object, int]:
    """The call's result and the most memory numpy and Python held at once during it."""
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def coarse_reference(voxels: np.ndarray, level: int, rule: str) -> np.ndarray:
    """SVO.lod's voxels from the dense array: block sums along each axis, never padded."""
    f = 1 << level
    counts = voxels.astype(np.int64)
    for axis, n in enumerate(voxels.shape):
        counts = np.add.reduceat(counts, np.arange(0, n, f), axis=axis)
    solid = counts > 0 if rule == "any" else counts * 2 > f**3
    out = np.zeros(tuple(max(8, -(-n // (4 * f)) * 4) for n in voxels.shape), bool)
    out[: solid.shape[0], : solid.shape[1], : solid.shape[2]] = solid
    return out


# --- dense conversions of long grids ------------------------------------------------------------


@pytest.mark.parametrize("shape", LONG_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_dense_conversions_cost_what_the_result_costs(shape):
    voxels = long_solid(shape)
    size = voxels.nbytes  # 512 KiB and 128 KiB; the padded cubes are 512 GiB and 8 GiB
    svo, peak = peak_bytes(partial(placed, voxels))
    assert isinstance(svo, SVO) and peak < 3 * size, peak

    dense, peak = peak_bytes(svo.to_numpy)
    assert np.array_equal(dense, voxels)
    assert peak < 4 * size, peak

    for level in (1, 3, svo.depth - 3):
        for rule in ("any", "majority"):
            lod, peak = peak_bytes(partial(svo.lod, level, rule))
            assert isinstance(lod, SVO)
            assert np.array_equal(lod.to_numpy(), coarse_reference(voxels, level, rule))
            assert peak < 8 * size, (level, rule, peak)

    mesh, peak = peak_bytes(svo.to_mesh)
    assert mesh.is_watertight and np.isclose(mesh.volume, voxels.sum())
    quads = len(mesh.faces) // 2  # the surface's own arrays follow its faces (voxelizer.surface)
    assert peak < 4 * size + MESH_BYTES_PER_QUAD * quads, (peak, quads)


@pytest.mark.parametrize("shape", LONG_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_writers_of_long_grids_stay_small(tmp_path, shape):
    voxels = long_solid(shape)
    svo = placed(voxels, origin=(1.0, 2.0, 3.0), h=0.25)
    quads = len(svo.to_mesh().faces) // 2
    for suffix, bound in ((".npz", 4), (".vox", 16), (".vti", 16), (".ply", None)):
        path = tmp_path / f"long{suffix}"
        _, peak = peak_bytes(partial(voxelizer.save, svo, path))
        limit = (
            4 * voxels.nbytes + 2 * MESH_BYTES_PER_QUAD * quads
            if bound is None
            else bound * voxels.nbytes
        )
        assert path.is_file() and peak < limit, (suffix, peak)
    assert np.array_equal(voxelizer.load(tmp_path / "long.npz").to_numpy(), voxels)


# --- the dense result must fit host memory ----------------------------------------------------


def test_available_host_memory_is_known_here():
    available = available_host_memory()
    assert isinstance(available, int) and available > 1 << 20


@pytest.fixture
def little_memory(monkeypatch):
    """Host memory that holds 50,000 bytes more."""
    monkeypatch.setattr(voxelizer.budget, "available_host_memory", lambda: 50_000)


def test_to_numpy_and_lod_refuse_a_dense_array_that_does_not_fit(little_memory):
    svo = placed(long_solid((2048, 8, 8)))
    with pytest.raises(MemoryBudgetError, match=r"SVO\.to_numpy: the dense 2048x8x8 voxel array"):
        svo.to_numpy()
    with pytest.raises(MemoryBudgetError, match=r"SVO\.lod: the dense 1024x8x8"):
        svo.lod(1)
    assert svo.lod(5).shape == (64, 8, 8)  # 4 KiB fits
    small = placed(long_solid((64, 8, 8)))
    assert np.array_equal(small.to_numpy(), long_solid((64, 8, 8)))


def test_voxelize_dense_refuses_before_the_gpu_work(gpu, little_memory):
    stages = []
    with pytest.raises(MemoryBudgetError, match="voxelize_dense: the dense 64x64x64 voxel array"):
        gpu.voxelize_dense(PROJECT_MODELS / "gear.ply", 64, progress=lambda *a: stages.append(a))
    assert stages == []
    assert gpu.voxelize(PROJECT_MODELS / "gear.ply", 64).count() > 0  # the SVO stays sparse


@pytest.mark.parametrize(
    "options",
    [["--grid", "64"], ["--grid", "8192x8x8"], [], ["--voxel-size", "0.01"]],
    ids=["grid", "long", "default", "voxel-size"],
)
@pytest.mark.parametrize("output", ["out.npz", "out.vox", "out.ply"])
def test_command_refuses_a_dense_output_that_does_not_fit(
    capsys, tmp_path, little_memory, monkeypatch, options, output
):
    def no_gpu_work(*args, **kwargs):
        raise AssertionError("the GPU work started")

    monkeypatch.setattr("voxelizer.api.Voxelizer.voxelize", no_gpu_work)
    code, out, err = run_cli(capsys, PROJECT_MODELS / "gear.ply", *options, "-o", tmp_path / output)
    assert_one_line_error(code, out, err, "voxel array needs")
    assert "host memory" in err and not (tmp_path / output).exists()


def test_command_refuses_a_preview_that_does_not_fit_but_writes_svo(
    capsys, tmp_path, little_memory
):
    code, out, err = run_cli(
        capsys, PROJECT_MODELS / "gear.ply", "--grid", "64", "--preview", tmp_path / "p.png"
    )
    assert_one_line_error(code, out, err, "p.png: the dense 64x64x64 voxel array")
    assert not (tmp_path / "p.png").exists()
    code, out, err = run_cli(
        capsys, PROJECT_MODELS / "gear.ply", "--grid", "64", "-o", tmp_path / "a.svo"
    )
    assert code == 0 and err == "" and (tmp_path / "a.svo").is_file()


def test_command_turns_memory_error_into_one_line(capsys, tmp_path, monkeypatch):
    def exhausted(self):
        raise MemoryError("Unable to allocate 8.00 GiB for an array with shape (1073741824,)")

    monkeypatch.setattr(SVO, "to_numpy", exhausted)
    code, out, err = run_cli(
        capsys, PROJECT_MODELS / "gear.ply", "--grid", "8", "-o", tmp_path / "a.npz"
    )
    assert_one_line_error(code, out, err, "out of host memory (Unable to allocate 8.00 GiB")
    assert not (tmp_path / "a.npz").exists()


# --- placements that overflow ----------------------------------------------------------------


def huge_cube(path: Path, scale: float) -> Path:
    """An OBJ cube with corners at +-scale (written as text: float64 survives)."""
    corners = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)]) * scale
    faces = [(1, 2, 4), (1, 4, 3), (5, 7, 8), (5, 8, 6), (1, 5, 6), (1, 6, 2),
             (3, 4, 8), (3, 8, 7), (1, 3, 7), (1, 7, 5), (2, 6, 8), (2, 8, 4)]  # fmt: skip
    lines = [f"v {x!r} {y!r} {z!r}" for x, y, z in corners.tolist()]
    lines += [f"f {a} {b} {c}" for a, b, c in faces]
    path.write_text("\n".join(lines) + "\n")
    return path


def extreme_runs(tmp_path: Path) -> list[tuple[list[object], str]]:
    """(arguments, what the error names) of the three inputs that overflow."""
    gear = PROJECT_MODELS / "gear.ply"
    h = repr(HUGE)
    return [
        ([gear, "--voxel-size", "1e308"], "voxel size 1e+308 puts the grid's corner at -inf"),
        ([huge_cube(tmp_path / "huge.obj", HUGE), "--grid", "8"],
         "the mesh's box from -1.5e+308 to 1.5e+308 along x is too large: its side overflows"),
        ([gear, "--bounds", f"-{h}", f"-{h}", f"-{h}", h, h, h],
         "the bounds from -1.5e+308 to 1.5e+308 along x is too large"),
    ]  # fmt: skip


@pytest.mark.parametrize("case", range(3), ids=["voxel-size", "mesh", "bounds"])
@pytest.mark.parametrize("output", ["out.svo", "out.npz"])
def test_overflowing_placements_are_one_line_errors(capsys, tmp_path, case, output):
    args, message = extreme_runs(tmp_path)[case]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as `python -W error`: any numpy warning fails
        code, out, err = run_cli(capsys, *args, "-o", tmp_path / output)
    # a GridError: the grid cannot be placed (status 2), one line naming the value
    assert code == 2 and out == "" and err.startswith("voxelize: error:") and message in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert "warning" not in err and not (tmp_path / output).exists()


def test_api_placement_names_the_value_that_overflowed():
    gear = load_mesh(PROJECT_MODELS / "gear.ply")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(GridError, match=r"voxel size 1e\+308 puts the grid's corner at -inf"):
            GridPlacement.fit(gear, voxel_size=1e308)
        with pytest.raises(GridError, match=r"the bounds from -1\.5e\+308 to 1\.5e\+308 along x"):
            GridPlacement.fit(gear, 8, bounds=[[-HUGE, -1, -1], [HUGE, 1, 1]])
        # the box fits 8 voxels of 1e307, centred on it the grid ends past the largest float
        high = load_mesh((np.array([[1.06e308, 0, 0], [1.75e308, 0, 0], [1.1e308, 1, 0],
                                    [1.1e308, 0, 1]]), np.array([[0, 1, 2], [0, 2, 3]])))  # fmt: skip
        with pytest.raises(
            GridError, match=r"voxel size 1e\+307 puts the grid's far corner at inf"
        ):
            GridPlacement.fit(high, voxel_size=1e307)
        placement = GridPlacement.fit(gear, 8, bounds=[[-8e307, -1, -1], [8e307, 1, 1]])
        assert np.isfinite(placement.origin).all() and np.isfinite(placement.spacing).all()
        assert np.isfinite(placement.grid_vertices(gear.vertices)).all()


def test_huge_but_finite_mesh_voxelizes_without_warnings(capsys, tmp_path):
    cube = huge_cube(tmp_path / "big.obj", 1e160)  # cross products of its edges overflow
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, _, err = run_cli(capsys, cube, "--grid", "8", "-o", tmp_path / "big.svo")
    assert code == 0 and err == "", err
    assert voxelizer.load(tmp_path / "big.svo").count() == 8**3
