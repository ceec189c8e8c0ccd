"""What one voxelize call keeps for the next and derives in fewer passes: staging memory that
remembers the read-only arrays it was made from (the soup, the indexed variants' vertices and
faces), the fixed-point gap found while the vertices are placed, and the SVO's voxel count
by word popcounts. Every result is compared with the CPU reference or the dense grid."""

from __future__ import annotations

import numpy as np
import pytest

from voxelizer import Voxelizer
from voxelizer.gpu.buffers import STAGING, BufferPool
from voxelizer.gpu.commands import Sequence
from voxelizer.gpu.device import Device
from voxelizer.mesh import Mesh
from voxelizer.pipeline.geometry import fixed_error, fixed_error_of_gap
from voxelizer.placement import GridPlacement, fixed_gap
from voxelizer.reference import voxelize_reference

from ..helpers import assert_same_voxels, load_model, noisy_blobs, placed, reference_grid
from ..shapes import box, box_expected


def copy_of(mesh: Mesh) -> Mesh:
    """The same mesh as a new Mesh (nothing of the original's caches)."""
    return Mesh(mesh.vertices.copy(), mesh.faces.copy())


@pytest.mark.parametrize("variant", ["naive", "branchless", "indexed", "combined"])
def test_repeated_meshes_between_others(gpu, variant):
    """Meshes voxelized in turn, then again (the same Mesh objects), on two grids: what the
    staging memory holds from the call before is another mesh's or another grid's, and a
    repeated call finds its own only where nothing came in between."""
    bunny, torus = copy_of(load_model("bunny.ply")), copy_of(load_model("torus.stl"))
    expected = {(name, n): reference_grid(name, n).to_numpy() for name in ("bunny.ply", "torus.stl") for n in (24, 32)}  # fmt: skip
    order = [(bunny, "bunny.ply", 24), (bunny, "bunny.ply", 24), (torus, "torus.stl", 24),
             (bunny, "bunny.ply", 32), (bunny, "bunny.ply", 24), (torus, "torus.stl", 32),
             (torus, "torus.stl", 32), (torus, "torus.stl", 24), (bunny, "bunny.ply", 24)]  # fmt: skip
    for mesh, name, n in order:
        svo = gpu.voxelize(mesh, n, variant=variant)
        assert_same_voxels(svo.to_numpy(), expected[name, n])
        dense = gpu.voxelize_dense(mesh, n, variant=variant)
        assert_same_voxels(dense.to_numpy(), expected[name, n])


@pytest.mark.parametrize("variant", ["branchless", "combined"])
def test_repeated_mesh_in_triangle_batches(gpu, variant):
    """A budget that splits the triangles into batches: the staging memory holds the last
    batch when the call ends, so a repeated call must upload the first one again."""
    mesh = copy_of(load_model("bunny.ply"))
    expected = reference_grid("bunny.ply", 32).to_numpy()
    for _ in range(3):
        grid = gpu.voxelize_dense(mesh, 32, variant=variant, max_memory="4MiB")
        assert grid.stats.counts["triangle_batch"] < mesh.triangle_count
        assert_same_voxels(grid.to_numpy(), expected)


def test_writable_vertices_are_gathered_again(gpu):
    """Grid-space vertices the caller owns (voxelize_grid: writable, may change in place
    between calls) are never taken as held: the changed mesh gives its own voxels."""
    mesh = load_model("bunny.ply")
    placement = GridPlacement.around(mesh, (32, 32, 32), None, None)
    vertices = placement.grid_vertices(mesh.vertices)
    first = gpu.voxelize_grid(vertices, mesh.faces, 32, variant="branchless")
    assert_same_voxels(first, reference_grid("bunny.ply", 32).to_numpy())
    vertices *= np.float32(0.5)  # the same array, half the size
    second = gpu.voxelize_grid(vertices, mesh.faces, 32, variant="branchless")
    assert_same_voxels(second, gpu.voxelize_grid(vertices.copy(), mesh.faces, 32))
    assert 0 < second.sum() < first.sum() / 4


def test_staging_remembers_only_read_only_sources():
    """upload_made runs `make` unless the staging buffer holds what it made from these very
    read-only arrays and part; a writable source, another part, another array or a write
    in between makes it run again."""
    device = Device()
    pool = BufferPool(device)
    sequence = Sequence(device, pool)
    try:
        target = pool.get("soup", 64)
        made: list[int] = []

        def upload(sources: tuple[np.ndarray, ...], part: object) -> bool:
            sequence.begin()
            ran = sequence.upload_made(
                target, (4,), np.float32, sources, part, lambda view: made.append(len(view))
            )
            sequence.submit()
            return ran

        frozen = np.arange(4, dtype=np.float32)
        frozen.flags.writeable = False
        other = frozen.copy()
        other.flags.writeable = False
        writable = np.arange(4, dtype=np.float32)
        assert upload((frozen,), 1) and not upload((frozen,), 1)
        assert upload((frozen,), 2) and upload((other,), 2) and not upload((other,), 2)
        assert upload((other, frozen), 2) and not upload((other, frozen), 2)
        assert upload((writable,), 2) and upload((writable,), 2)
        assert upload((frozen,), 3)
        staging = pool.get("upload:soup", 16, STAGING, host_visible=True)
        staging.write(np.zeros(4, np.float32))
        assert upload((frozen,), 3)  # written since: made again
        assert not upload((frozen,), 3) and len(made) == 8
    finally:
        sequence.destroy()
        pool.destroy()
        device.close()


def test_fixed_gap_found_while_placing():
    """The gap placement finds with the vertices equals fixed_error's own pass over the used
    vertices, stray vertices (far outside the grid, or not finite) left out."""
    mesh = load_model("bunny.ply")
    stray = np.array([[1e30, -1e30, 0.0], [np.nan, 0.0, 0.0], [np.inf, 1.0, 2.0]])
    vertices = np.concatenate([stray, mesh.vertices])
    with_strays = Mesh(vertices, mesh.faces + len(stray))
    for n in (8, 100, 1024):
        placement = GridPlacement.around(with_strays, (n, n, n), None, None)
        grid, fine = placement.placed_vertices(with_strays)
        gap = placement.placed_fixed_gap(with_strays)
        used = with_strays.used
        assert not used[: len(stray)].any()
        assert fixed_error_of_gap(gap) == fixed_error(grid, fine, used)
        assert gap == fixed_gap(grid[used], fine[used]) > 0
        assert np.array_equal(grid, placement.grid_vertices(vertices), equal_nan=True)
        assert np.array_equal(fine, placement.fine_vertices(vertices))


def test_strays_voxelize_as_the_reference(gpu):
    """A mesh with stray vertices (unused, outside the box) through the API, whose passes
    take the placement's gap."""
    mesh = load_model("torus.stl")
    stray = np.array([[1e30, -1e30, 0.0], [5e3, 0.0, -7e3]])
    with_strays = Mesh(np.concatenate([stray, mesh.vertices]), mesh.faces + len(stray))
    expected = voxelize_reference(with_strays, 40).to_numpy()
    for variant in ("branchless", "combined"):
        assert_same_voxels(gpu.voxelize(with_strays, 40, variant=variant).to_numpy(), expected)


@pytest.mark.parametrize(
    ("grid", "max_memory"),
    [
        ((40, 24, 12), None),
        ((36, 60, 20), None),
        ((256, 128, 96), "3MiB"),
        ((128, 256, 64), "3MiB"),
    ],
)
def test_voxel_counts_equal_the_dense_grid(gpu, grid, max_memory):
    """The SVO's count (stats and SVO.count) equals np.count_nonzero of the dense result: on
    grids padded to a larger power-of-two cube and over slabs merged into one tree."""
    mesh = load_model("bunny.ply")
    svo = gpu.voxelize(mesh, grid, max_memory=max_memory)
    dense = gpu.voxelize_dense(mesh, grid, max_memory=max_memory).to_numpy()
    if max_memory is not None:
        assert svo.stats.counts["slabs"] > 1
    assert svo.count() == svo.stats.counts["solid_voxels"] == np.count_nonzero(dense) > 0
    assert_same_voxels(svo.to_numpy(), dense)


@pytest.mark.parametrize("shape", [(8, 8, 8), (12, 40, 28), (64, 8, 16), (72, 72, 72)])
def test_counts_of_full_cubes_and_bricks(shape):
    """Counts from full children at every level and from mixed bricks: boxes, noise, full."""
    for seed in range(3):
        voxels = noisy_blobs(shape, seed)
        assert placed(voxels).count() == np.count_nonzero(voxels)
    assert placed(np.ones(shape, bool)).count() == np.prod(shape)
    assert placed(np.zeros(shape, bool)).count() == 0


def permuted(vertices: np.ndarray, faces: np.ndarray, seed: int) -> Mesh:
    """The same surface with its vertices stored in another order (other face indices)."""
    order = np.random.default_rng(seed).permutation(len(vertices))
    return Mesh(vertices[order], np.argsort(order)[faces])


@pytest.mark.parametrize("variant", ["naive", "branchless"])
def test_fill_indices_follow_the_mesh(gpu, variant):
    """The soup variants' fill reads every triangle's vertex indices (converted from the faces
    straight into host-visible memory, remembered per Mesh and batch) where a column centre
    is a near tie: boxes 1e-6 voxel off the centres' planes, one of them also with its
    vertices in another order (the same triangle count, other indices), in turn and again.
    Indices left from another mesh would decide those ties from the wrong vertices."""
    e = 1e-6
    boxes = {"in": ((0.5 + e, 1.5 - e, 2.5 + e), (6.5 - e, 5.5 + e, 7.5 - e)),
             "out": ((0.5 - e, 1.5 + e, 2.5 - e), (6.5 + e, 5.5 - e, 7.5 + e))}  # fmt: skip
    meshes = [(Mesh(*box(*boxes["in"])), "in"), (permuted(*box(*boxes["in"]), 1), "in"),
              (Mesh(*box(*boxes["out"])), "out"), (permuted(*box(*boxes["out"]), 2), "out")]  # fmt: skip
    bounds = [[0.0, 0.0, 0.0], [8.0, 8.0, 8.0]]
    for mesh, name in [*meshes, *meshes[::-1], meshes[1], meshes[1], meshes[3]]:
        grid = gpu.voxelize_dense(mesh, voxel_size=1.0, bounds=bounds, variant=variant)
        assert_same_voxels(grid.to_numpy(), box_expected(*boxes[name], 8))
    expected = box_expected(*boxes["in"], 8)
    assert not np.array_equal(expected, box_expected(*boxes["out"], 8))  # the ties decide


def test_buffer_growth_is_counted_on_the_call_that_grows():
    """host_ms["buffer_growth"]: the first call on a new Voxelizer allocates its buffers; the
    same call again allocates none and has no such step. Voxels as the reference's."""
    mesh = load_model("bunny.ply")
    expected = reference_grid("bunny.ply", 32).to_numpy()
    with Voxelizer() as fresh:
        first = fresh.voxelize(mesh, 32)
        again = fresh.voxelize(mesh, 32)
    assert first.stats.host_ms["buffer_growth"] > 0
    assert "buffer_growth" not in again.stats.host_ms
    for svo in (first, again):
        assert_same_voxels(svo.to_numpy(), expected)
