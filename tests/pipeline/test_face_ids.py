"""Face ids in the SVO (docs/svo-format.md version 3) and in .npz files: the GPU's equal the
CPU reference's bit for bit (every variant, both kinds of surface, mode "both" with every
fill mode, slabs), they survive every round trip (.svo, .npz, dense <-> octree), and broken
files are refused with SVOFormatError / FormatError only."""

from __future__ import annotations

import struct
import zlib
from functools import cache

import numpy as np
import pytest

import voxelizer
from voxelizer import SVO, DenseGrid, FormatError, SVOFormatError
from voxelizer.io.svo_file import HEADER, HEADER_V3
from voxelizer.placement import GridPlacement
from voxelizer.reference.surface import surface_face_ids, voxelize_surface_reference

from ..helpers import (
    PROJECT_MODELS,
    assert_same_svo,
    cli_usage_error,
    load_model,
    quick_diagonal,
    read_back,
    run_cli,
)

GEAR = PROJECT_MODELS / "gear.ply"


@cache
def reference_faces(name: str, grid, surface: str = "conservative") -> np.ndarray:
    mesh = load_model(name)
    placement = voxelize_surface_reference(mesh, grid).placement
    return surface_face_ids(placement.grid_vertices(mesh.vertices), mesh.faces, grid, surface)


@cache
def reference_voxels(name: str, grid, mode: str, surface: str, fill_mode: str = "parity"):
    return voxelize_surface_reference(load_model(name), grid, mode, surface, fill_mode).to_numpy()


def assert_same_faces(svo: SVO, voxels: np.ndarray, faces: np.ndarray) -> None:
    """The GPU's SVO is the reference's octree, with the reference's face ids stored the
    same way (the format's arrays equal) and read back the same (the dense ids equal)."""
    expected = SVO.from_dense(voxels, svo.placement, face_ids=faces)
    assert_same_svo(svo, expected)
    assert svo.face_ids == expected.face_ids
    got = svo.to_numpy(attribute="face")
    assert got.dtype == np.int32 and np.array_equal(got, faces)


# --- the GPU against the reference --------------------------------------------------------


@pytest.mark.parametrize(
    "surface, variant", quick_diagonal([("conservative",), ("thin",)], voxelizer.VARIANTS)
)
def test_svo_face_ids_match_reference_on_every_variant(gpu, variant, surface):
    for name, n in [("suzanne.ply", 40), ("bunny.ply", 64)]:
        svo = gpu.voxelize(
            load_model(name), n, variant=variant, mode="surface", surface=surface,
            attributes=["face"],
        )  # fmt: skip
        faces = reference_faces(name, n, surface)
        assert_same_faces(svo, reference_voxels(name, n, "surface", surface), faces)
        assert svo.attributes == ("face",) and "face_ids" in svo.stats.host_ms
        # Few marked voxels: only they come back, gathered on the device.
        assert "face_gather" in svo.stats.gpu_ms
        assert svo.stats.counts["face_ids"] == np.count_nonzero(faces >= 0)


def test_svo_face_ids_of_a_mostly_marked_grid(gpu):
    """Most voxels marked: the gathered pairs would outgrow the plan's staging copy, so the
    whole face-id grid comes back instead, with the same result."""
    name, n = "dragon.ply", 8
    svo = gpu.voxelize(load_model(name), n, mode="surface", attributes=["face"])
    faces = reference_faces(name, n)
    assert np.count_nonzero(faces >= 0) * 4 > faces.size
    assert "face_gather" not in svo.stats.gpu_ms
    assert_same_faces(svo, reference_voxels(name, n, "surface", "conservative"), faces)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("dragon.ply", marks=pytest.mark.slow),  # the quick run: the bunny and
        pytest.param("armadillo.ply", marks=pytest.mark.slow),  # suzanne (every variant)
        "torus.stl",
        "featuretype.stl",
    ],
)
def test_svo_face_ids_of_shared_models(gpu, name):
    svo = gpu.voxelize(load_model(name), 48, mode="surface", attributes=["face"])
    assert_same_faces(svo, reference_voxels(name, 48, "surface", "conservative"),
                      reference_faces(name, 48))  # fmt: skip


@pytest.mark.slow
def test_svo_face_ids_in_slabs_and_batches(gpu):
    """Slabs of rows (forests merged) and triangle batches: each slab's ids are gathered
    from its own face-id grid and placed in the merged tree."""
    name, shape = "bunny.ply", (128, 96, 160)
    svo = gpu.voxelize(
        load_model(name), shape, mode="surface", attributes=["face"], max_memory="4MiB"
    )
    assert svo.stats.counts["slabs"] > 1
    assert svo.stats.counts["triangle_batch"] < svo.stats.counts["triangles"]
    voxels = reference_voxels(name, shape, "surface", "conservative")
    assert_same_faces(svo, voxels, reference_faces(name, shape))
    both = gpu.voxelize(load_model(name), shape, mode="both", attributes=["face"],
                        max_memory="4MiB")  # fmt: skip
    assert both.stats.counts["slabs"] > 1
    assert_same_faces(both, reference_voxels(name, shape, "both", "conservative"),
                      reference_faces(name, shape))  # fmt: skip
    faces = both.face_ids
    assert faces is not None and (faces.brick_ids < 0).any()  # set, inside: no id
    assert len(faces.full_codes) > 0  # full bricks and cubes hold surface voxels too


@pytest.mark.parametrize("fill_mode", ["vote", "union"])
def test_svo_face_ids_of_both_with_other_fill_modes(gpu, fill_mode):
    name = "bunny_scan.ply"  # open
    svo = gpu.voxelize(load_model(name), 48, mode="both", fill_mode=fill_mode,
                       attributes=["face"])  # fmt: skip
    voxels = reference_voxels(name, 48, "both", "conservative", fill_mode)
    assert_same_faces(svo, voxels, reference_faces(name, 48))


def test_dense_and_svo_face_ids_agree(gpu):
    dense = gpu.voxelize_dense(GEAR, 36, mode="both", attributes=["face"])
    svo = gpu.voxelize(GEAR, 36, mode="both", attributes=["face"])
    assert np.array_equal(svo.to_numpy(attribute="face"), dense.to_numpy(attribute="face"))
    assert np.array_equal(dense.to_numpy("face"), dense.face_ids)
    assert dense.attributes == ("face",)
    plain = gpu.voxelize(GEAR, 36, mode="both")
    assert plain.attributes == () and plain.face_ids is None and plain != svo
    assert_same_svo(plain, svo)
    with pytest.raises(ValueError, match="no face ids"):
        plain.to_numpy(attribute="face")
    with pytest.raises(ValueError, match="attribute must be 'face'"):
        svo.to_numpy(attribute="colour")


# --- the octree's arrays on the CPU -------------------------------------------------------


def random_case(shape, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Voxels with a full 8-cube and a full brick (ids there too), some set voxels without
    an id, ids up to 2^31 - 1."""
    rng = np.random.default_rng(seed)
    voxels = rng.random(shape) < 0.3
    voxels[:8, :8, :8] = True
    voxels[-4:, -4:, -4:] = True
    marked = voxels & (rng.random(shape) < 0.7)
    marked[-4:, -4:, -4:] = True
    ids = np.where(marked, rng.integers(0, 2**31 - 1, shape, endpoint=True), -1)
    return voxels, ids.astype(np.int32)


@pytest.mark.parametrize("shape", [(16, 8, 12), (32, 32, 32), (8, 36, 20), (40, 12, 8)])
def test_from_dense_keeps_every_id(shape):
    voxels, ids = random_case(shape, sum(shape))
    svo = SVO.from_dense(voxels, GridPlacement(shape, np.zeros(3), 1.0), face_ids=ids)
    assert np.array_equal(svo.to_numpy(attribute="face"), ids)
    faces = svo.face_ids
    assert faces is not None and len(faces.brick_ids) == int(
        sum(bin(int(b)).count("1") for b in svo.bricks)
    )
    assert len(faces.full_codes) >= 2  # the 8-cube's bricks with ids and the full brick
    again = SVO(svo.nodes, svo.bricks, svo.level_offsets, svo.placement, face_ids=faces)
    assert again == svo


def test_brick_ids_follow_brick_and_bit_order():
    """One brick, voxels (1, 0, 0) and (0, 1, 0) set (bits 1 and 4): ids in bit order."""
    voxels = np.zeros((8, 8, 8), bool)
    voxels[1, 0, 0] = voxels[0, 1, 0] = voxels[4, 4, 4] = True
    ids = np.full((8, 8, 8), -1, np.int32)
    ids[1, 0, 0], ids[0, 1, 0] = 7, 3
    svo = SVO.from_dense(voxels, GridPlacement((8, 8, 8), np.zeros(3), 1.0), face_ids=ids)
    faces = svo.face_ids
    assert faces is not None
    assert faces.brick_ids.tolist() == [7, 3, -1]  # bricks (0,0,0) then (1,1,1)
    assert len(faces.full_codes) == len(faces.full_ids) == 0


def test_with_face_ids_refuses_voxels_that_are_not_set():
    voxels, ids = random_case((16, 16, 16), 5)
    svo = SVO.from_dense(voxels, GridPlacement((16, 16, 16), np.zeros(3), 1.0))
    empty = np.argwhere(~voxels)[:1]
    with pytest.raises(ValueError, match="not set"):
        svo.with_face_ids(empty, [1])
    with pytest.raises(ValueError, match="outside"):
        svo.with_face_ids([[16, 0, 0]], [1])
    with pytest.raises(ValueError, match="twice"):
        svo.with_face_ids([[0, 0, 0], [0, 0, 0]], [1, 2])
    with pytest.raises(ValueError, match="one non-negative"):
        svo.with_face_ids([[0, 0, 0]], [-1])
    with pytest.raises(ValueError, match="int32 face ids"):
        SVO.from_dense(voxels, svo.placement, face_ids=ids.astype(np.int64))


# --- files ---------------------------------------------------------------------------------


def cpu_case(seed: int = 1, shape=(16, 8, 12)) -> SVO:
    voxels, ids = random_case(shape, seed)
    return SVO.from_dense(
        voxels, GridPlacement(shape, np.array([0.5, -2.0, 3.0]), 0.25), face_ids=ids
    )


def test_svo_files_with_face_ids_round_trip(tmp_path, gpu):
    gpu_svo = gpu.voxelize(GEAR, 36, mode="both", attributes=["face"])
    for index, svo in enumerate([cpu_case(), cpu_case(2, (32, 32, 32)), gpu_svo]):
        path = tmp_path / f"{index}.svo"
        voxelizer.save(svo, path)
        loaded = read_back(path)
        assert isinstance(loaded, SVO) and loaded == svo
        assert np.array_equal(loaded.to_numpy(attribute="face"), svo.to_numpy(attribute="face"))
        data = path.read_bytes()
        fields = HEADER_V3.unpack_from(data)
        faces = svo.face_ids
        assert faces is not None
        assert fields[1:3] == (3, 128)
        assert fields[16:] == (1, 0, len(faces.brick_ids), len(faces.full_codes),
                               len(faces.full_ids))  # fmt: skip
        assert struct.unpack("<I", data[-4:])[0] == zlib.crc32(data[:-4])
    plain = tmp_path / "plain.svo"
    voxelizer.save(gpu.voxelize(GEAR, 36, mode="both"), plain)
    assert HEADER.unpack_from(plain.read_bytes())[1:3] == (2, 96)  # no ids: version 2


def test_a_dense_grid_with_face_ids_saves_as_an_svo_with_them(tmp_path, gpu):
    dense = gpu.voxelize_dense(GEAR, 36, mode="surface", surface="thin", attributes=["face"])
    voxelizer.save(dense, tmp_path / "d.svo")
    loaded = read_back(tmp_path / "d.svo")
    assert np.array_equal(loaded.to_numpy(attribute="face"), dense.face_ids)


def test_npz_files_keep_face_ids(tmp_path, gpu):
    svo = gpu.voxelize(GEAR, 36, mode="both", attributes=["face"])
    dense = gpu.voxelize_dense(GEAR, 36, mode="both", attributes=["face"])
    for name, result in [("svo.npz", svo), ("dense.npz", dense)]:
        voxelizer.save(result, tmp_path / name)
        loaded = read_back(tmp_path / name)
        assert isinstance(loaded, DenseGrid) and loaded.attributes == ("face",)
        assert np.array_equal(loaded.to_numpy(), dense.to_numpy())
        assert np.array_equal(loaded.face_ids, dense.face_ids)
        with np.load(tmp_path / name) as data:  # numpy alone reads them
            assert data["face_ids"].dtype == np.int32
            assert np.array_equal(data["face_ids"], dense.face_ids)
    voxelizer.save(gpu.voxelize(GEAR, 36, mode="both"), tmp_path / "plain.npz")
    plain = read_back(tmp_path / "plain.npz")
    assert plain.attributes == () and plain.face_ids is None


def test_npz_files_with_bad_face_ids_are_refused(tmp_path, gpu):
    dense = gpu.voxelize_dense(GEAR, 16, mode="surface", attributes=["face"])
    voxels = dense.to_numpy()
    base = {
        "bits": np.packbits(voxels, axis=None),
        "shape": np.array(voxels.shape),
        "origin": dense.origin,
        "voxel_size": np.float64(dense.voxel_size),
    }
    on_empty = dense.face_ids.copy()
    on_empty[~voxels] = 0
    below = dense.face_ids.copy()
    below[voxels] = -2
    for faces, message in [
        (dense.face_ids.astype(np.int64), "int32"),
        (dense.face_ids[:8], "int32"),
        (on_empty, "empty voxel"),
        (below, "below -1"),
    ]:
        path = tmp_path / "bad.npz"
        np.savez(path, **base, face_ids=faces)
        with pytest.raises(FormatError, match=message):
            voxelizer.load(path)


def write_bytes(tmp_path, svo: SVO) -> bytes:
    path = tmp_path / "f.svo"
    voxelizer.save(svo, path, overwrite=True)
    return path.read_bytes()


def load_bytes(tmp_path, data: bytes) -> SVO:
    path = tmp_path / "case.svo"
    path.write_bytes(data)
    result = voxelizer.load(path)
    assert isinstance(result, SVO)
    return result


def with_crc(data: bytes) -> bytes:
    return data[:-4] + struct.pack("<I", zlib.crc32(data[:-4]))


def test_every_truncation_and_bit_flip_of_a_version_3_file_is_refused(tmp_path):
    data = write_bytes(tmp_path, cpu_case(3, (8, 8, 8)))
    assert load_bytes(tmp_path, data).face_ids is not None
    for length in range(len(data)):
        with pytest.raises(SVOFormatError):
            load_bytes(tmp_path, data[:length])
    rng = np.random.default_rng(1)
    for offset in range(len(data)):
        corrupted = bytearray(data)
        corrupted[offset] ^= 1 << int(rng.integers(8))
        with pytest.raises(SVOFormatError):
            load_bytes(tmp_path, bytes(corrupted))


def sections(svo: SVO) -> dict[str, int]:
    """Byte offsets of the face sections of svo's version 3 file."""
    faces = svo.face_ids
    assert faces is not None
    bricks_at = HEADER_V3.size + 4 * (svo.levels + 1) + 8 * svo.node_count
    bricks_at += (HEADER_V3.size + 4 * (svo.levels + 1)) % 8
    brick_ids = bricks_at + 8 * svo.brick_count
    codes = brick_ids + 4 * len(faces.brick_ids) + 4 * (len(faces.brick_ids) % 2)
    return {
        "brick_ids": brick_ids,
        "codes": codes,
        "masks": codes + 8 * len(faces.full_codes),
        "full_ids": codes + 16 * len(faces.full_codes),
    }


def test_consistent_but_wrong_face_sections_are_refused(tmp_path):
    """Checksums made right again: the structure checks refuse each."""
    svo = cpu_case(4, (32, 32, 32))
    data = write_bytes(tmp_path, svo)
    at = sections(svo)
    faces = svo.face_ids
    assert faces is not None and len(faces.full_codes) >= 2

    def patched(offset: int, fmt: str, value) -> bytes:
        out = bytearray(data)
        struct.pack_into(fmt, out, offset, value)
        return with_crc(bytes(out))

    # The last listed brick moved to a stored brick after the one before it: still sorted,
    # but outside the full cubes.
    last = at["codes"] + 8 * (len(faces.full_codes) - 1)
    stored = svo._tree.brick_codes
    stored_code = int(stored[stored > int(faces.full_codes[-2])][0])
    cases = [
        (patched(at["brick_ids"], "<i", -2), "from -1"),
        (patched(at["full_ids"], "<i", -1), "do not fit their masks"),
        (patched(at["masks"], "<Q", 0), "do not fit their masks"),
        (patched(at["masks"], "<Q", 1), "do not fit their masks"),
        (patched(at["codes"], "<Q", int(faces.full_codes[1])), "not sorted"),
        (patched(last, "<Q", stored_code), "outside the full cubes"),
        (patched(96, "<I", 3), "unknown attributes"),
        (patched(100, "<I", 1), "bad header"),
        (patched(104, "<Q", 64 * svo.brick_count + 1), "impossible face id counts"),
        (patched(104, "<Q", len(faces.brick_ids) - 2), "size"),
        (patched(112, "<Q", len(faces.full_codes) + 1), "size"),
        (patched(120, "<Q", len(faces.full_ids) + 1), "size"),
    ]
    if len(faces.brick_ids) % 2:
        cases.append((patched(at["codes"] - 4, "<I", 1), "padding after the face ids"))
    for corrupted, message in cases:
        with pytest.raises(SVOFormatError, match=message):
            load_bytes(tmp_path, corrupted)
    # Counts that shift the sections by whole entries, the file resized to match.
    grown = bytearray(data[:-4])
    struct.pack_into("<Q", grown, 104, len(faces.brick_ids) + 2)
    grown[at["codes"] : at["codes"]] = bytes(8)
    with pytest.raises(SVOFormatError, match="face ids beside the bricks"):
        load_bytes(tmp_path, with_crc(bytes(grown) + bytes(4)))


# --- the command line ----------------------------------------------------------------------


def test_cli_face_ids(tmp_path, capsys, gpu):
    for suffix in (".svo", ".npz"):
        out = tmp_path / f"gear{suffix}"
        code, stdout, stderr = run_cli(
            capsys, GEAR, "--grid", 36, "--mode", "both", "--face-ids", "-o", out, "--quiet"
        )
        assert code == 0 and stdout == "", stderr
        expected = gpu.voxelize_dense(GEAR, 36, mode="both", attributes=["face"])
        assert np.array_equal(read_back(out).to_numpy(attribute="face"), expected.face_ids)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--face-ids", "-o", "x.svo"], "use --mode surface or --mode both"),
        (["--mode", "surface", "--face-ids", "-o", "x.ply"], "--face-ids stores the ids"),
        (["--mode", "surface", "--face-ids"], "--face-ids stores the ids"),
    ],
)
def test_cli_face_ids_usage_errors(tmp_path, capsys, args, message):
    args = [str(tmp_path / a) if a.startswith("x.") else a for a in args]
    assert message in cli_usage_error(capsys, GEAR, "--grid", 16, *args)
