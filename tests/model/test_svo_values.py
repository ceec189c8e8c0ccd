"""Labels and colours of an SVO: the solid order (every brick with a solid voxel, stored or
in a full cube, by Morton code, then bit order), and the .svo file's version 5 laid out as
docs/svo-format.md says, read back, and refused when broken."""

from __future__ import annotations

import json
import struct
import zlib

import numpy as np
import pytest

import voxelizer
from voxelizer import SVO, SVOFormatError
from voxelizer.attributes.voxel_values import SolidValues
from voxelizer.io.svo_file import HEADER_V5
from voxelizer.placement import GridPlacement
from voxelizer.svo import morton_encode

from ..helpers import noisy_blobs


def labelled(shape=(24, 16, 32), seed=3) -> tuple[SVO, np.ndarray, np.ndarray]:
    """An octree with full cubes and mixed bricks, random labels 1..3 and colours."""
    voxels = noisy_blobs(shape, seed)
    voxels[:16, :16, :16] = True  # full cubes at two levels
    rng = np.random.default_rng(seed)
    labels = np.where(voxels, rng.integers(1, 4, shape), 0).astype(np.uint16)
    colors = np.where(voxels[..., None], rng.integers(0, 256, (*shape, 4)), 0).astype(np.uint8)
    svo = SVO.from_dense(voxels, GridPlacement(shape, (0.5, -1.0, 2.0), 0.25))
    values = SolidValues.of_dense(svo, labels, colors, ("a", "b", "c"))
    return svo.with_values(values), labels, colors


def test_the_solid_order_is_bricks_by_morton_code_then_bits():
    svo, labels, colors = labelled()
    voxels = svo.to_numpy()
    cells = np.argwhere(voxels)
    brick = morton_encode(cells[:, 0] // 4, cells[:, 1] // 4, cells[:, 2] // 4, svo.levels)
    bit = (cells % 4) @ np.array([1, 4, 16])
    order = np.lexsort((bit, brick))
    expected = labels[tuple(cells[order].T)]
    assert np.array_equal(svo.values.labels, expected)
    assert np.array_equal(svo.values.colors, colors[tuple(cells[order].T)])
    assert len(svo.values.labels) == svo.count() and svo.brick_count < len(svo.solid_bricks()[0])
    assert np.array_equal(svo.to_numpy("label"), labels)
    assert np.array_equal(svo.to_numpy("color"), colors)
    assert svo.attributes == ("label", "color") and svo.label_names == ("a", "b", "c")


def test_values_that_do_not_fit_the_tree_are_refused():
    svo, labels, _ = labelled()
    with pytest.raises(SVOFormatError, match="labels for"):
        svo.with_values(SolidValues(labels=np.ones(3, np.uint16), label_names=("a",)))
    with pytest.raises(SVOFormatError, match="labels outside"):
        svo.with_values(SolidValues.of_dense(svo, labels, None, ("a",)))


def test_version_5_files_are_laid_out_as_documented(tmp_path):
    svo, _, colors = labelled()
    path = tmp_path / "v.svo"
    voxelizer.save(svo, path)
    data = path.read_bytes()
    fields = HEADER_V5.unpack_from(data)
    names = json.dumps(["a", "b", "c"]).encode()
    assert fields[1:3] == (5, 176)
    assert fields[16:18] == (2 | 4, 0)  # labels and colours, no face ids
    assert (
        fields[18:21] == (0, 0, 0) and fields[21:24] == (svo.voxel_size,) * 3 == (fields[12],) * 3
    )
    assert fields[24:] == (0, len(names), 0)
    solid = fields[15]
    assert solid == svo.count()
    bricks_end = 176 + 4 * (svo.levels + 1) + 8 * svo.node_count
    bricks_end += bricks_end % 8 + 8 * svo.brick_count
    padded = lambda size: size + (-size % 8)  # noqa: E731
    assert np.array_equal(np.frombuffer(data, "<u2", solid, bricks_end), svo.values.labels)
    at = bricks_end + padded(2 * solid)
    assert data[at : at + len(names)] == names
    at += padded(len(names))
    assert np.array_equal(np.frombuffer(data, np.uint8, 4 * solid, at), svo.values.colors.ravel())
    assert len(data) == at + padded(4 * solid) + 4
    loaded = voxelizer.load(path)
    assert loaded == svo and np.array_equal(loaded.to_numpy("color"), colors)


def rewritten(data: bytes, at: int, new: bytes) -> bytes:
    """The file with bytes replaced at `at` and its checksum made right again."""
    body = data[:at] + new + data[at + len(new) : -4]
    return body + struct.pack("<I", zlib.crc32(body))


def test_broken_version_5_files_are_refused(tmp_path):
    svo, _, _ = labelled()
    path = tmp_path / "v.svo"
    voxelizer.save(svo, path)
    data = path.read_bytes()
    solid = svo.count()
    bricks_end = 176 + 4 * (svo.levels + 1) + 8 * svo.node_count
    bricks_end += bricks_end % 8 + 8 * svo.brick_count
    names_at = bricks_end + 2 * solid + (-2 * solid % 8)
    cases = {
        "labels outside": rewritten(data, bricks_end, struct.pack("<H", 9)),
        "not a JSON list": rewritten(data, names_at, b"{"),
        "unknown attributes": rewritten(data, 96, struct.pack("<I", 2 | 8)),
        "bad header": rewritten(data, 168, struct.pack("<Q", 1)),
        "sizes": rewritten(data, 136, struct.pack("<d", 3.0)),  # a cube's hy not its h
        "size": data[:-20] + data[-4:],
    }
    for message, broken in cases.items():
        (tmp_path / "b.svo").write_bytes(broken)
        with pytest.raises(SVOFormatError, match=message):
            voxelizer.load(tmp_path / "b.svo")
    version_3 = rewritten(data, 8, struct.pack("<I", 3))  # labels in a version 3 header
    (tmp_path / "b.svo").write_bytes(version_3)
    with pytest.raises(SVOFormatError):
        voxelizer.load(tmp_path / "b.svo")


def test_face_ids_labels_and_colours_in_one_file(gpu, tmp_path):
    from ..shapes import sphere

    mesh = sphere((0, 0, 0), 1.0)
    svo = gpu.voxelize(mesh, 24, mode="both", attributes=["face"], labels=True, colors=True)
    path = tmp_path / "all.svo"
    voxelizer.save(svo, path)
    assert HEADER_V5.unpack_from(path.read_bytes())[16] == 1 | 2 | 4
    assert voxelizer.load(path) == svo
    plain = gpu.voxelize(mesh, 24, mode="both", attributes=["face"])
    voxelizer.save(plain, tmp_path / "faces.svo")
    assert (tmp_path / "faces.svo").read_bytes()[8] == 3  # face ids alone: still version 3


def test_labels_and_colours_of_voxels_that_are_not_cubes(gpu, tmp_path):
    """Version 5 keeps the three voxel sizes of version 4 beside the labels and colours."""
    from ..shapes import sphere

    mesh = sphere((0, 0, 0), 1.0)
    svo = gpu.voxelize(mesh, voxel_size=(0.1, 0.125, 0.2), labels=True, colors=True)
    path = tmp_path / "anisotropic.svo"
    voxelizer.save(svo, path)
    fields = HEADER_V5.unpack_from(path.read_bytes())
    assert fields[1] == 5 and fields[12] == 0 and fields[21:24] == (0.1, 0.125, 0.2)
    loaded = voxelizer.load(path)
    assert loaded == svo and loaded.voxel_size == (0.1, 0.125, 0.2)
    assert np.array_equal(loaded.to_numpy("label"), svo.to_numpy("label"))
    assert np.array_equal(loaded.to_numpy("color"), svo.to_numpy("color"))
