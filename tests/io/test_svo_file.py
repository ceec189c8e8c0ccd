"""The .svo file (voxelizer/io/svo_file.py) on grids of any shape: version 2 written and read
back field by field, version 1 files (cubes) still read, and voxelizer.save / voxelizer.load
keeping the placement."""

from __future__ import annotations

import re
import struct
import zlib

import numpy as np
import pytest

import voxelizer
from voxelizer import SVO, DenseGrid, SVOFormatError
from voxelizer.io.svo_file import HEADER, HEADER_V1, read_svo, write_svo
from voxelizer.placement import GridPlacement

from ..helpers import noisy_blobs, placed, svo_cases


def test_svo_v2_files_round_trip(tmp_path):
    for index, (name, voxels) in enumerate(svo_cases()):
        svo = placed(voxels, origin=(0.1, -2.7e5, 1 / 3), h=0.1 + index)
        path = tmp_path / f"{index}.svo"
        voxelizer.save(svo, path)
        data = path.read_bytes()
        fields = HEADER.unpack_from(data)
        assert fields[:9] == (
            b"VOXSVO\r\n",
            2,
            96,
            *voxels.shape,
            svo.padded_resolution,
            svo.levels,
            0,
        ), name
        assert fields[9:13] == (0.1, -2.7e5, 1 / 3, 0.1 + index)
        loaded = voxelizer.load(path)
        assert loaded == svo and loaded.shape == voxels.shape
        assert np.array_equal(loaded.origin, svo.origin) and loaded.voxel_size == svo.voxel_size
        assert np.array_equal(loaded.to_numpy(), voxels)
        padding = 4 if svo.levels % 2 == 0 else 0
        assert len(data) == HEADER.size + svo.nbytes + padding + 4


def version_1_file(svo: SVO) -> bytes:
    """A version 1 file of a cubic SVO, laid out by hand from docs/svo-format.md."""
    n = svo.resolution
    header = HEADER_V1.pack(
        b"VOXSVO\r\n",
        1,
        88,
        n,
        svo.padded_resolution,
        svo.levels,
        0,
        *svo.origin,
        svo.voxel_size,
        svo.node_count,
        svo.brick_count,
        svo.count(),
    )
    body = (
        header
        + svo.level_offsets.astype("<u4").tobytes()
        + svo.nodes.astype("<u4").tobytes()
        + bytes((88 + 4 * (svo.levels + 1)) % 8)
        + svo.bricks.astype("<u8").tobytes()
    )
    return body + struct.pack("<I", zlib.crc32(body))


def test_version_1_files_still_load(tmp_path):
    for n, seed in [(8, 1), (12, 2), (20, 3), (36, 4)]:
        svo = placed(noisy_blobs((n, n, n), seed), origin=(0.1, -2.5, 3.25), h=0.3)
        path = tmp_path / f"v1_{n}.svo"
        path.write_bytes(version_1_file(svo))
        loaded = voxelizer.load(path)
        assert loaded == svo and loaded.shape == (n, n, n)
        assert np.array_equal(loaded.to_numpy(), svo.to_numpy())
    data = version_1_file(svo)
    bad = bytearray(data)
    struct.pack_into("<I", bad, 16, 0)  # N
    bad[-4:] = struct.pack("<I", zlib.crc32(bytes(bad[:-4])))
    path.write_bytes(bytes(bad))
    with pytest.raises(SVOFormatError, match="at least 1"):
        voxelizer.load(path)
    path.write_bytes(data[:-1])
    with pytest.raises(SVOFormatError, match="size"):
        voxelizer.load(path)


def test_load_keeps_the_placement_of_an_svo(tmp_path):
    voxels = noisy_blobs((40, 12, 8), 21)
    svo = placed(voxels, origin=(-7.25, 1e-3, 4.0e6), h=1 / 3)
    path = tmp_path / "placed.svo"
    voxelizer.save(svo, path)
    loaded = voxelizer.load(path)
    assert isinstance(loaded, SVO) and loaded == svo
    assert loaded.shape == (40, 12, 8) and loaded.voxel_size == 1 / 3
    assert np.array_equal(loaded.origin, [-7.25, 1e-3, 4.0e6])
    assert np.array_equal(np.asarray(loaded), voxels)
    assert loaded.count() == int(voxels.sum())


def test_an_svo_file_of_a_dense_grid_is_the_file_of_its_octree(tmp_path):
    """The .svo writer takes a DenseGrid too: it writes SVO.from_dense of it, byte for byte."""
    voxels = noisy_blobs((16, 8, 12), 22)
    placement = GridPlacement((16, 8, 12), np.array([1.5, -2.0, 0.25]), 0.125)
    voxelizer.save(DenseGrid(voxels, placement), tmp_path / "dense.svo")
    write_svo(SVO.from_dense(voxels, placement), tmp_path / "octree.svo")
    written = (tmp_path / "dense.svo").read_bytes()
    assert written == (tmp_path / "octree.svo").read_bytes()
    assert read_svo(tmp_path / "dense.svo") == SVO.from_dense(voxels, placement)


def test_load_names_the_file_it_refuses(tmp_path):
    path = tmp_path / "broken.svo"
    path.write_bytes(b"VOXSVO\r\n" + struct.pack("<II", 2, 96) + bytes(10))  # a header cut short
    with pytest.raises(SVOFormatError, match=f"^{re.escape(str(path))}: truncated"):
        voxelizer.load(path)
    with pytest.raises(SVOFormatError, match="cannot read"):
        voxelizer.load(tmp_path / "missing.svo")
