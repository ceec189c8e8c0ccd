"""Label grids: each part voxelized alone by the exact rule, against the CPU reference of
each part on the shared grid, bit for bit; the overlap rules; surface voxels labelled by
their face; several meshes in one call; a mesh of one part."""

from __future__ import annotations

import numpy as np
import pytest

import voxelizer
from voxelizer import DenseGrid, Mesh, ModeError
from voxelizer.attributes import Parts
from voxelizer.attributes.labels import label_grid
from voxelizer.reference import solid_columns, surface_face_ids

from ..helpers import PROJECT_MODELS, cli_usage_error, run_cli
from ..shapes import box, sphere

# Three parts: two spheres that overlap (the second smaller), and a box apart.
PARTS = [
    sphere((0.0, 0.0, 0.0), 1.0, subdivisions=3),
    sphere((0.9, 0.2, 0.1), 0.6, subdivisions=3),
    box((1.7, -0.8, -0.5), (2.6, 0.9, 0.7)),
]


def part_references(meshes, placement) -> list[np.ndarray]:
    """Each mesh's solid on the shared grid, by the CPU reference."""
    return [
        solid_columns(placement.fine_vertices(np.asarray(v, np.float64)), f, placement.shape)
        for v, f in meshes
    ]


def expected_labels(solids: list[np.ndarray], order: list[int]) -> np.ndarray:
    labels = np.zeros(solids[0].shape, np.uint16)
    for part in order:
        labels[solids[part]] = part + 1
    return labels


@pytest.mark.parametrize("overlap", ["last", "smallest"])
def test_labels_are_the_parts_references(gpu, overlap):
    grid = gpu.voxelize_dense(PARTS, (40, 24, 32), labels=True, overlap=overlap, warn=False)
    solids = part_references(PARTS, grid.placement)
    assert all(solid.any() for solid in solids)
    assert (solids[0] & solids[1]).any()  # the spheres overlap: the rule matters
    counts = [int(solid.sum()) for solid in solids]
    order = [0, 1, 2] if overlap == "last" else sorted(range(3), key=lambda p: (-counts[p], p))
    expected = expected_labels(solids, order)
    assert np.array_equal(grid.to_numpy("label"), expected)
    assert np.array_equal(grid.to_numpy(), expected > 0)  # the union of the parts
    assert grid.label_names == ("mesh 1", "mesh 2", "mesh 3")
    svo = gpu.voxelize(PARTS, (40, 24, 32), labels=True, overlap=overlap, warn=False)
    assert np.array_equal(svo.to_numpy("label"), expected)
    assert svo.label_names == grid.label_names and svo.attributes == ("label",)


def test_the_overlap_rules_decide_a_nested_part(gpu):
    big, small = box((-1, -1, -1), (1, 1, 1)), sphere((0.2, 0.0, 0.0), 0.5)
    last = gpu.voxelize_dense([small, big], 32, labels=True, warn=False).to_numpy("label")
    smallest = gpu.voxelize_dense(
        [small, big], 32, labels=True, overlap="smallest", warn=False
    ).to_numpy("label")
    assert set(np.unique(last).tolist()) == {2}  # the box comes last: it covers the sphere
    placement = gpu.voxelize_dense([small, big], 32, warn=False).placement
    inside = part_references([small], placement)[0]
    assert inside.any() and np.array_equal(smallest == 1, inside)
    assert np.array_equal(smallest > 0, last > 0)


@pytest.mark.parametrize("mode", ["both", "surface"])
def test_surface_voxels_take_the_part_of_their_face(gpu, mode):
    grid = gpu.voxelize_dense(PARTS, 32, labels=True, mode=mode, attributes=["face"], warn=False)
    placement = grid.placement
    vertices = np.concatenate([v for v, _ in PARTS])
    offsets = np.cumsum([0] + [len(v) for v, _ in PARTS[:-1]])
    faces = np.concatenate([f + o for (_, f), o in zip(PARTS, offsets)])
    part_of_face = np.repeat(np.arange(3), [len(f) for _, f in PARTS])
    ids = surface_face_ids(placement.grid_vertices(vertices), faces, placement.shape)
    marked = ids >= 0
    assert np.array_equal(grid.to_numpy("face"), ids)
    if mode == "both":
        expected = expected_labels(part_references(PARTS, placement), [0, 1, 2])
    else:
        expected = np.zeros(placement.shape, np.uint16)
    expected[marked] = part_of_face[ids[marked]] + 1
    assert np.array_equal(grid.to_numpy("label"), expected)
    assert np.array_equal(grid.to_numpy(), expected > 0)


def test_a_mesh_of_one_part_has_one_label(gpu):
    mesh = voxelizer.load_mesh(PROJECT_MODELS / "torus_knot.ply")
    assert mesh.parts is None
    plain = gpu.voxelize_dense(mesh, 48)
    labelled = gpu.voxelize_dense(mesh, 48, labels=True)
    assert np.array_equal(labelled.to_numpy(), plain.to_numpy())
    assert np.array_equal(labelled.to_numpy("label"), plain.to_numpy().astype(np.uint16))
    assert labelled.label_names == ("mesh",)
    named = gpu.voxelize_dense(PROJECT_MODELS / "torus_knot.ply", 16, labels=True)
    assert named.label_names == ("torus_knot",)


def test_parts_of_a_mesh_are_its_labels(gpu):
    """A Mesh with parts (as the readers make them): the same labels as the list."""
    vertices = np.concatenate([v for v, _ in PARTS])
    offsets = np.cumsum([0] + [len(v) for v, _ in PARTS[:-1]])
    faces = np.concatenate([f + o for (_, f), o in zip(PARTS, offsets)])
    ids = np.repeat(np.arange(3), [len(f) for _, f in PARTS])
    mesh = Mesh(vertices, faces, Parts(ids, ("a", "b", "c")))
    grid = gpu.voxelize_dense(mesh, 32, labels=True, warn=False)
    listed = gpu.voxelize_dense(PARTS, 32, labels=True, warn=False)
    assert np.array_equal(grid.to_numpy("label"), listed.to_numpy("label"))
    assert grid.label_names == ("a", "b", "c")


def test_obj_groups_label_the_voxels(gpu, tmp_path):
    lines = []
    for name, (v, f) in zip(("left", "right"), (PARTS[0], PARTS[2])):
        base = sum(1 for line in lines if line.startswith("v "))
        lines.append(f"g {name}")
        lines += [f"v {x!r} {y!r} {z!r}" for x, y, z in v.tolist()]
        lines += [f"f {a + base + 1} {b + base + 1} {c + base + 1}" for a, b, c in f]
    path = tmp_path / "two.obj"
    path.write_text("\n".join(lines) + "\n")
    grid = gpu.voxelize_dense(path, 32, labels=True)
    assert grid.label_names == ("left", "right")
    expected = expected_labels(part_references([PARTS[0], PARTS[2]], grid.placement), [0, 1])
    assert np.array_equal(grid.to_numpy("label"), expected)


def test_label_grid_rules_and_names():
    a = np.zeros((8, 8, 8), bool)
    b = np.zeros((8, 8, 8), bool)
    a[:4], b[2:] = True, True
    labels, union = label_grid([a, None, b], "smallest", (8, 8, 8))
    assert np.array_equal(union, a | b)
    assert (labels[2:4] == 1).all()  # a: 256 voxels, b: 384 -> a wins the overlap
    labels, _ = label_grid([a, None, b], "last", (8, 8, 8))
    assert (labels[2:4] == 3).all() and (labels[:2] == 1).all()
    with pytest.raises(ValueError, match="overlap rule"):
        label_grid([a], "first", (8, 8, 8))


def test_label_options_are_checked():
    with pytest.raises(ModeError, match="unknown overlap rule 'first'"):
        voxelizer.Options.create(labels=True, overlap="first")
    with pytest.raises(ModeError, match="labels must be True or False"):
        voxelizer.Options.create(labels="yes")


def test_cli_labels_of_a_one_part_mesh(tmp_path, capsys):
    out = tmp_path / "gear.npz"
    code, _, stderr = run_cli(
        capsys, PROJECT_MODELS / "gear.ply", "--grid", 16, "--labels", "-o", out
    )
    assert code == 0, stderr
    loaded = voxelizer.load(out)
    assert isinstance(loaded, DenseGrid) and loaded.label_names == ("gear",)
    assert np.array_equal(loaded.to_numpy("label"), loaded.to_numpy().astype(np.uint16))
    model = PROJECT_MODELS / "gear.ply"
    stderr = cli_usage_error(capsys, model, "--labels", "-o", tmp_path / "g.vox")
    assert "--labels: .vox holds no labels" in stderr
    assert "--overlap is for --labels" in cli_usage_error(capsys, model, "--overlap", "smallest")
    stderr = cli_usage_error(capsys, model, model, "--labels", "--out-dir", tmp_path)
    assert "--labels is for one model" in stderr
