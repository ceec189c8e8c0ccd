"""The voxel-face meshes (SVO.to_mesh(), .ply, .obj, .glb) as trimesh's default load (which
merges vertices by position) and open3d see them: closed, every edge in exactly two
triangles, consistently wound, not self-intersecting, bounded by the voxels' box, and
enclosing count * h^3, where the solid touches itself along an edge or at a corner too.

Volume tolerances. A reader computes the volume as a float64 sum over the F triangles of
signed tetrahedra: a . (b x c) / 6 from the origin (open3d), or N_x (a_x + b_x + c_x) / 6
with N = (b - a) x (c - b) (trimesh). Two separate claims are checked:

- geometry: the volume of the vertices exactly as read (in rational arithmetic: every float
  is an integer times a power of two) is count * h^3 exactly when h is a power of two and
  the origin a multiple of h/64 (then every vertex, lattice point or moved copy, is
  representable, in float32 as well). Otherwise it is within the first-order effect of
  rounding each coordinate `origin + g h` (2 float64 roundings, plus 4 float32 ones for a
  float32 reader: open3d's OBJ and glTF).
- sum: the reader's float volume is within gamma_(F + 8) * S / 6 of that exact volume,
  gamma_n = n u / (1 - n u), u = 2^-53, S the sum of the absolute values of the terms of
  either formula (the larger): the worst case of evaluating each triangle's term (at most
  8 roundings) and the running sum of F terms in float64. That is all the difference the
  tests allow on dyadic placements: the rounding of the sum, none of the geometry.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import open3d as o3d
import pytest
import trimesh

import voxelizer
from voxelizer import SVO
from voxelizer.surface import FINE, SPLIT_MOVE, fine_surface

from ..helpers import edge_uses, noisy_blobs, placed, shared_model

U64 = 2.0**-53
U32 = 2.0**-24
FORMATS = (".ply", ".obj", ".glb")
DYADIC = {"origin": (0.25, -1.0, 2.0), "h": 0.5}  # every vertex exact, in float32 too
DECIMAL = {"origin": (0.3, -1.7, 2.9), "h": 0.1}  # every vertex rounded

o3d.utility.set_verbosity_level(o3d.utility.VerbosityLevel.Error)


# --- exact and rounded volumes ------------------------------------------------------------------


def exact_volume(vertices: np.ndarray, faces: np.ndarray) -> Fraction:
    """The volume the triangles enclose, in rational arithmetic on the floats as they are."""
    mantissa, exponent = np.frexp(np.asarray(vertices, np.float64))
    integer = (mantissa * 2.0**53).astype(np.int64)  # exact: 53 bits
    shift = exponent - 53
    low = int(shift.min())
    exact = integer.astype(object) * 2 ** (shift - low).astype(object)
    a, b, c = (exact[faces[:, k]] for k in range(3))
    cross = np.stack(
        [
            b[:, 1] * c[:, 2] - b[:, 2] * c[:, 1],
            b[:, 2] * c[:, 0] - b[:, 0] * c[:, 2],
            b[:, 0] * c[:, 1] - b[:, 1] * c[:, 0],
        ],
        axis=1,
    )
    return Fraction(int((a * cross).sum()), 6) * Fraction(2) ** (3 * low)


def abs_cross(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """|p| x |q| term by term: (|p_y q_z| + |p_z q_y|, ...), the magnitude of p x q's terms."""
    p, q = np.abs(p), np.abs(q)
    return np.stack(
        [
            p[:, 1] * q[:, 2] + p[:, 2] * q[:, 1],
            p[:, 2] * q[:, 0] + p[:, 0] * q[:, 2],
            p[:, 0] * q[:, 1] + p[:, 1] * q[:, 0],
        ],
        axis=1,
    )


def sum_rounding_bound(vertices: np.ndarray, faces: np.ndarray) -> float:
    """gamma_(F + 8) * S / 6 (see the module docstring)."""
    a, b, c = (vertices[faces[:, k]] for k in range(3))
    from_origin = float((np.abs(a) * abs_cross(b, c)).sum())
    divergence = float(
        (abs_cross(b - a, c - b)[:, 0] * (np.abs(a) + np.abs(b) + np.abs(c))[:, 0]).sum()
    )
    n = len(faces) + 8
    return n * U64 / (1 - n * U64) * max(from_origin, divergence) / 6 * (1 + 1e-9)


def placement_rounding_bound(vertices: np.ndarray, faces: np.ndarray, delta: np.ndarray) -> float:
    """How much the enclosed volume can change, to first order (with 1% for the rest), when
    each coordinate moves by at most `delta` (an array like `vertices`)."""
    a, b, c = (vertices[faces[:, k]] for k in range(3))
    da, db, dc = (delta[faces[:, k]] for k in range(3))
    change = (
        (da * abs_cross(b, c)).sum()
        + (np.abs(a) * abs_cross(db, c)).sum()
        + (np.abs(a) * abs_cross(b, dc)).sum()
    )
    return float(change) / 6 * 1.01


def coordinate_error(svo: SVO, vertices: np.ndarray, float32: bool) -> np.ndarray:
    """Per coordinate, how far `origin + g h` as a reader holds it can be from the exact
    value: 2 float64 roundings, and for a float32 reader 4 more in float32."""
    origin, offset = np.abs(svo.origin), np.abs(vertices - svo.origin)
    return (2.01 * U64 + (4.01 * U32 if float32 else 0.0)) * (origin + offset)


def is_dyadic(svo: SVO) -> bool:
    """h a power of two and the origin a multiple of h / FINE: every vertex exact."""
    h = svo.voxel_size
    steps = np.asarray(svo.origin) / h * FINE
    return np.frexp(h)[0] == 0.5 and np.array_equal(steps, np.round(steps))


def assert_volume(
    svo: SVO, vertices: np.ndarray, faces: np.ndarray, volume: float, float32: bool
) -> None:
    """The two claims of the module docstring, for a reader's vertices and volume."""
    target = Fraction(svo.voxel_size) ** 3 * svo.count()
    enclosed = exact_volume(vertices, faces)
    if is_dyadic(svo):
        assert enclosed == target
    else:
        delta = coordinate_error(svo, vertices, float32)
        assert abs(enclosed - target) <= placement_rounding_bound(vertices, faces, delta)
    assert abs(Fraction(volume) - enclosed) <= sum_rounding_bound(vertices, faces)


# --- what each reader sees ----------------------------------------------------------------------


def trimesh_default(path) -> trimesh.Trimesh:
    """trimesh.load with its defaults (process=True: vertices merged by position); a glTF
    file is a scene, its node's matrix applied by to_mesh()."""
    loaded = trimesh.load(path)
    return loaded.to_mesh() if isinstance(loaded, trimesh.Scene) else loaded


def assert_box(svo: SVO, vertices: np.ndarray) -> None:
    index = np.argwhere(svo.to_numpy())
    box = svo.origin + svo.voxel_size * np.array([index.min(axis=0), index.max(axis=0) + 1])
    bounds = np.array([vertices.min(axis=0), vertices.max(axis=0)])
    if is_dyadic(svo):
        assert np.array_equal(bounds, box)
    else:
        assert np.allclose(bounds, box, rtol=0, atol=4 * U32 * np.abs(box).max())


def assert_trimesh_sees_the_surface(svo: SVO, mesh: trimesh.Trimesh, float32: bool = False) -> None:
    assert mesh.is_watertight and mesh.is_winding_consistent
    assert (edge_uses(mesh.faces) == 2).all()  # 2-manifold after the merge by position
    assert mesh.volume > 0  # outward
    assert_volume(svo, mesh.vertices, mesh.faces, mesh.volume, float32)
    assert_box(svo, mesh.vertices)


def assert_open3d_sees_the_surface(
    svo: SVO, shape: o3d.geometry.TriangleMesh, float32: bool
) -> None:
    assert shape.is_edge_manifold(allow_boundary_edges=False) and shape.is_vertex_manifold()
    assert shape.is_orientable() and not shape.is_self_intersecting()
    vertices, faces = np.asarray(shape.vertices), np.asarray(shape.triangles)
    assert_volume(svo, vertices, faces, shape.get_volume(), float32)  # it refuses an open mesh
    assert_box(svo, vertices)


def assert_every_reader_sees_the_surface(svo: SVO, tmp_path, formats=FORMATS) -> None:
    """to_mesh() in memory, then each file through trimesh's default load and open3d."""
    mesh = svo.to_mesh()
    assert len(np.unique(mesh.vertices, axis=0)) == len(mesh.vertices)  # no two at one place
    assert_trimesh_sees_the_surface(svo, trimesh.Trimesh(mesh.vertices, mesh.faces))
    ours = np.unique(mesh.vertices, axis=0)
    for suffix in formats:
        path = tmp_path / f"surface{suffix}"
        voxelizer.save(svo, path, overwrite=True)
        loaded = trimesh_default(path)
        assert np.array_equal(np.unique(loaded.vertices, axis=0), ours), suffix  # as written
        assert_trimesh_sees_the_surface(svo, loaded)
        shape = o3d.io.read_triangle_mesh(str(path))
        assert len(shape.vertices) == len(mesh.vertices), suffix
        assert_open3d_sees_the_surface(svo, shape, float32=suffix != ".ply")


# --- cases --------------------------------------------------------------------------------------


def _block(size: tuple[int, int, int], inner: np.ndarray) -> np.ndarray:
    """`inner` placed one voxel in from the low corner of an empty grid of `size`."""
    voxels = np.zeros(size, bool)
    voxels[1 : 1 + inner.shape[0], 1 : 1 + inner.shape[1], 1 : 1 + inner.shape[2]] = inner
    return voxels


def _checkerboard(n: int, parity: int) -> np.ndarray:
    return np.indices((n, n, n)).sum(axis=0) % 2 == parity


def _holes() -> np.ndarray:
    """A 3x3x3 block without its centre, one edge's middle voxel and one corner voxel: the
    empty cells touch the outside and each other along edges and at corners."""
    block = np.ones((3, 3, 3), bool)
    block[1, 1, 1] = block[2, 2, 1] = block[0, 0, 0] = block[2, 1, 2] = False
    return block


def contact_cases():
    two = np.zeros((2, 2, 1), bool)
    two[0, 0, 0] = two[1, 1, 0] = True
    yield "edge", _block((8, 8, 8), two)
    corner = np.zeros((2, 2, 2), bool)
    corner[0, 0, 0] = corner[1, 1, 1] = True
    yield "corner", _block((8, 8, 8), corner)
    yield "empty-edge", _block((8, 8, 8), ~np.pad(two, ((1, 1), (1, 1), (1, 1))))
    yield "empty-corner", _block((8, 8, 8), ~np.pad(corner, 1))
    yield "line", _block((8, 8, 8), np.repeat(two, 5, axis=2))  # a contact line of 5 edges
    yield "checkerboard-even", _block((8, 8, 8), _checkerboard(6, 0))
    yield "checkerboard-odd", _block((8, 8, 8), _checkerboard(6, 1))
    yield "holes", _block((8, 8, 8), _holes())
    rng = np.random.default_rng(7)
    for density in (0.1, 0.3, 0.5, 0.7):
        yield f"random-{density}", _block((12, 12, 12), rng.random((10, 10, 10)) < density)
    yield "non-cubic", noisy_blobs((16, 8, 12), 4) ^ (rng.random((16, 8, 12)) < 0.15)


CASES = dict(contact_cases())


# The densest random fillings are in the full run alone: the quick run has the sparser two
# and every contact case.
SLOW_CASES = {"random-0.5", "random-0.7"}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[pytest.mark.slow] if n in SLOW_CASES else []) for n in CASES]
)
def test_every_reader_sees_a_closed_surface_of_the_exact_volume(tmp_path, name):
    svo = placed(CASES[name], **DYADIC)
    assert_every_reader_sees_the_surface(svo, tmp_path)


@pytest.mark.parametrize("name", ["edge", "corner", "checkerboard-odd", "holes", "random-0.3"])
def test_rounded_placements_stay_within_their_rounding(tmp_path, name):
    """h = 0.1 and origin (0.3, -1.7, 2.9): no vertex is exact, in float64 or float32."""
    assert_every_reader_sees_the_surface(placed(CASES[name], **DECIMAL), tmp_path)


def test_every_configuration_around_a_point():
    """All 254 mixed fillings of the 8 cells around one lattice point."""
    for filling in range(1, 255):
        cells = np.array([(filling >> k) & 1 for k in range(8)], bool).reshape(2, 2, 2)
        svo = placed(_block((8, 8, 8), cells.transpose(2, 1, 0)), **DYADIC)
        mesh = svo.to_mesh()
        assert len(np.unique(mesh.vertices, axis=0)) == len(mesh.vertices), filling
        assert_trimesh_sees_the_surface(svo, trimesh.Trimesh(mesh.vertices, mesh.faces))
        shape = o3d.geometry.TriangleMesh(
            o3d.utility.Vector3dVector(mesh.vertices), o3d.utility.Vector3iVector(mesh.faces)
        )
        assert_open3d_sees_the_surface(svo, shape, float32=False)


def test_random_grids_in_grid_units():
    """Many random grids, in grid units (exact integers), through open3d's checks."""
    rng = np.random.default_rng(11)
    for trial in range(60):
        size = tuple(int(n) for n in rng.integers(2, 7, 3))
        voxels = _block((8, 8, 8), rng.random(size) < rng.uniform(0.2, 0.8))
        fine, faces = fine_surface(voxels)
        assert exact_volume(fine.astype(np.float64), faces) == voxels.sum() * FINE**3, trial
        shape = o3d.geometry.TriangleMesh(
            o3d.utility.Vector3dVector(fine.astype(np.float64)), o3d.utility.Vector3iVector(faces)
        )
        assert shape.is_watertight() and not shape.is_self_intersecting(), trial
        merged = trimesh.Trimesh(fine, faces)
        assert len(merged.vertices) == len(fine) and merged.is_watertight, trial


def test_a_shape_without_contacts_keeps_two_triangles_per_face():
    voxels = np.zeros((8, 8, 8), bool)
    voxels[1:3, 2:5, 4] = True
    voxels[5, 5, 5:7] = True
    mesh = placed(voxels, origin=(1, 2, 3), h=0.25).to_mesh()
    padded = np.pad(voxels, 1).astype(np.int8)
    quads = sum(int((np.diff(padded, axis=axis) != 0).sum()) for axis in range(3))
    assert len(mesh.faces) == 2 * quads and len(mesh.vertices) == 3 * 4 * 2 + 2 * 2 * 3
    assert np.array_equal(mesh.vertices, np.round(mesh.vertices * 4) / 4)  # lattice points


@pytest.mark.parametrize(
    "name, moved", [("edge", [2, 2, 1.5]), ("corner", [2, 2, 2]), ("empty-corner", [3, 3, 3])]
)
def test_one_copy_moves_by_a_sixty_fourth_of_a_voxel_along_two_axes(name, moved):
    """Two voxels along an edge (z at x = y = 2): the copy of one pair of faces at the edge's
    middle moves across it; at a corner (2, 2, 2) one cone's vertex moves. Every other
    vertex stays on the lattice, at an edge's middle or a face's centre."""
    svo = placed(CASES[name], **DYADIC)
    grid = (svo.to_mesh().vertices - svo.origin) / svo.voxel_size * FINE
    assert np.array_equal(grid, np.round(grid))  # multiples of h / FINE
    off = grid - np.round(grid / (FINE // 2)) * (FINE // 2)
    away = np.flatnonzero(np.abs(off).max(axis=1) > 0)
    assert len(away) == 1
    assert np.array_equal(np.round(grid[away[0]] / (FINE // 2)) / 2, moved)
    assert np.array_equal(np.sort(np.abs(off[away[0]])), [0, SPLIT_MOVE, SPLIT_MOVE])


@pytest.mark.parametrize("resolution", [32, pytest.param(64, marks=pytest.mark.slow)])
def test_a_real_model(gpu, tmp_path, resolution):
    """The bunny, where it has edge and corner contacts: at its own placement (rounded) and
    on a dyadic one (exact), through every reader (open3d's quadratic self-intersection test
    on the PLY only at 64^3)."""
    svo = gpu.voxelize(shared_model("bunny.ply"), resolution)
    fine, _ = fine_surface(svo.to_numpy())
    assert (fine % (FINE // 4) != 0).any()  # contacts were split
    formats = FORMATS if resolution == 32 else (".ply",)
    assert_every_reader_sees_the_surface(svo, tmp_path, formats)
    exact = placed(svo.to_numpy(), origin=(-2.0, 0.5, 1.0), h=2.0**-5)
    assert_every_reader_sees_the_surface(exact, tmp_path, formats)
    for suffix in FORMATS[1:] if resolution == 64 else ():
        voxelizer.save(exact, tmp_path / f"b{suffix}")
        assert_trimesh_sees_the_surface(exact, trimesh_default(tmp_path / f"b{suffix}"))
