"""Files written from an SVO (.svo, .binvox, .vox, .npz, meshes, the preview PNG), the .svo
reader's refusals, the voxel surface mesh, and the command line's outputs."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
import trimesh
from trimesh.exchange.binvox import load_binvox, parse_binvox

import voxelizer
from voxelizer import SVO, DenseGrid, OutputError, SVOFormatError, write_preview
from voxelizer.io import OUTPUT_FORMATS, load_mesh, save
from voxelizer.io.svo_file import HEADER
from voxelizer.reference import voxelize_reference

from ..helpers import (
    PROJECT_MODELS,
    cli_usage_error,
    placed,
    read_vox,
    run_cli,
    shared_model,
    vox_voxels,
)


@pytest.fixture(scope="module")
def torus(gpu) -> SVO:
    grid = gpu.voxelize_dense(shared_model("torus.stl"), 36)
    return SVO.from_dense(grid.to_numpy(), grid.placement)


@pytest.fixture(scope="module")
def bunny(gpu) -> SVO:
    grid = gpu.voxelize_dense(shared_model("bunny.ply"), 100)
    return SVO.from_dense(grid.to_numpy(), grid.placement)


def small_cases():
    rng = np.random.default_rng(3)
    yield placed(np.zeros((8, 8, 8), bool))
    yield placed(np.ones((16, 16, 16), bool), origin=(-1, 2, 3), h=0.125)
    yield placed(rng.random((12, 12, 12)) < 0.4, origin=(0.1, 0.2, 0.3), h=0.7)


# --- .svo ---------------------------------------------------------------------------------


def test_svo_files_round_trip(tmp_path, torus, bunny):
    for index, svo in enumerate([*small_cases(), torus, bunny]):
        path = tmp_path / f"{index}.svo"
        voxelizer.save(svo, path)
        loaded = voxelizer.load(path)
        assert loaded == svo and loaded.count() == svo.count()
        assert np.array_equal(loaded.to_numpy(), svo.to_numpy())
        padding = 4 if svo.levels % 2 == 0 else 0  # L + 1 odd
        assert path.stat().st_size == HEADER.size + svo.nbytes + padding + 4


def test_svo_header_fields(tmp_path, torus):
    path = tmp_path / "t.svo"
    voxelizer.save(torus, path)
    data = path.read_bytes()
    fields = HEADER.unpack_from(data)
    assert fields[:9] == (b"VOXSVO\r\n", 2, 96, 36, 36, 36, 64, 4, 0)
    assert np.array_equal(fields[9:12], torus.origin) and fields[12] == torus.voxel_size
    assert fields[13:] == (torus.node_count, torus.brick_count, torus.count())
    assert struct.unpack("<I", data[-4:])[0] == zlib.crc32(data[:-4])
    offsets = np.frombuffer(data, "<u4", 5, 96)
    assert np.array_equal(offsets, torus.level_offsets)
    # L + 1 = 5 words of offsets leave the bricks 4 bytes short of 8-byte alignment: padded.
    bricks_at = 96 + 20 + 8 * torus.node_count
    assert data[bricks_at : bricks_at + 4] == b"\0\0\0\0"
    bricks = np.frombuffer(data, "<u8", torus.brick_count, bricks_at + 4)
    assert np.array_equal(bricks, torus.bricks)


def small_file(tmp_path) -> bytes:
    path = tmp_path / "small.svo"
    voxelizer.save(list(small_cases())[2], path)
    return path.read_bytes()


def load_bytes(tmp_path, data: bytes) -> SVO:
    path = tmp_path / "case.svo"
    path.write_bytes(data)
    return voxelizer.load(path)


def with_crc(data: bytes) -> bytes:
    return data[:-4] + struct.pack("<I", zlib.crc32(data[:-4]))


def test_every_truncation_is_refused(tmp_path):
    data = small_file(tmp_path)
    for length in range(len(data)):
        with pytest.raises(SVOFormatError):
            load_bytes(tmp_path, data[:length])
    with pytest.raises(SVOFormatError, match="size"):
        load_bytes(tmp_path, data + b"\0")


def test_every_bit_flip_is_refused(tmp_path):
    data = small_file(tmp_path)
    rng = np.random.default_rng(0)
    for offset in range(len(data)):
        for bit in rng.choice(8, 2, replace=False):
            corrupted = bytearray(data)
            corrupted[offset] ^= 1 << int(bit)
            with pytest.raises(SVOFormatError):
                load_bytes(tmp_path, bytes(corrupted))


def patched(data: bytes, offset: int, fmt: str, value) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return with_crc(bytes(out))


@pytest.mark.parametrize(
    "offset, fmt, value, message",
    [
        (0, "<8s", b"VOXSVO\n\n", "not an SVO file"),
        (8, "<I", 6, "unsupported format version 6"),
        (8, "<I", 0, "unsupported format version 0"),
        (12, "<I", 88, "bad header"),
        (16, "<I", 0, "side x must be at least 1"),
        (16, "<I", 2**31, "larger than the supported maximum"),
        (20, "<I", 0, "side y must be at least 1"),
        (24, "<I", 2**31, "side z 2147483648 is larger than the supported maximum"),
        (16, "<I", 20, "do not agree"),  # P = 16 is no longer max(shape) rounded up
        (24, "<I", 8, "padding"),  # P still agrees, but the tree has voxels beyond z = 8
        (28, "<I", 32, "do not agree"),
        (32, "<I", 3, "do not agree"),
        (36, "<I", 1, "bad header"),
        (64, "<d", 0.0, "voxel size"),
        (64, "<d", float("inf"), "finite"),
        (40, "<d", float("nan"), "finite"),
        (72, "<Q", 2**62, "impossible counts"),  # would be exabytes
        (72, "<Q", 1, "size"),  # possible, but not this file's size
        (80, "<Q", 2**40, "impossible counts"),
        (80, "<Q", 0, "size"),
        (88, "<Q", 12345, "solid voxels"),
    ],
)
def test_bad_headers_are_refused_before_allocating(tmp_path, offset, fmt, value, message):
    data = small_file(tmp_path)
    with pytest.raises(SVOFormatError, match=message):
        load_bytes(tmp_path, patched(data, offset, fmt, value))


def test_structure_is_checked_behind_a_valid_checksum(tmp_path):
    data = small_file(tmp_path)
    nodes_at = 96 + 4 * 3
    with pytest.raises(SVOFormatError, match="first_child"):
        load_bytes(tmp_path, patched(data, nodes_at + 4, "<I", 7))
    with pytest.raises(SVOFormatError, match="level_offsets"):
        load_bytes(tmp_path, patched(data, 96 + 4, "<I", 0))
    with pytest.raises(SVOFormatError, match="padding"):  # L + 1 = 3: 4 bytes before the bricks
        svo = list(small_cases())[2]
        load_bytes(tmp_path, patched(data, nodes_at + 8 * svo.node_count, "<I", 1))


def test_foreign_and_missing_files_are_refused(tmp_path):
    for data in (
        b"",
        b"VOX",
        b"VOXSVO\r",
        b"\x89PNG\r\n\x1a\n" + bytes(100),
        shared_model("torus.stl").read_bytes(),
    ):
        with pytest.raises(SVOFormatError):
            load_bytes(tmp_path, data)
    with pytest.raises(SVOFormatError, match="cannot read"):
        voxelizer.load(tmp_path / "missing.svo")


# --- binvox, vox, npz, meshes ------------------------------------------------------------


@pytest.mark.parametrize("case", ["torus", "empty", "full", "noise"])
def test_binvox_reads_back_with_trimesh(tmp_path, torus, case):
    svo = {
        "torus": torus,
        "empty": placed(np.zeros((64, 64, 64), bool)),
        "full": placed(np.ones((12, 12, 12), bool), origin=(1, 2, 3), h=0.5),
        "noise": list(small_cases())[2],
    }[case]
    path = tmp_path / "model.binvox"
    save(svo, path)
    with open(path, "rb") as fh:
        grid = load_binvox(fh)
    assert np.array_equal(grid.matrix, svo.to_numpy())
    with open(path, "rb") as fh:
        header = parse_binvox(fh)
    assert np.array_equal(header.shape, [svo.resolution] * 3)
    assert np.array_equal(header.translate, svo.origin)  # the grid corner, exactly
    assert header.scale == svo.resolution * svo.voxel_size
    # binvox voxel centres: translate + scale * (index + 1/2) / dim
    index = np.argwhere(svo.to_numpy())
    centres = header.translate + header.scale * (index + 0.5) / svo.resolution
    assert np.allclose(centres, svo.placement.voxel_centres(index), rtol=0, atol=1e-12)


def test_vox_one_model(tmp_path, torus):
    path = tmp_path / "torus.vox"
    save(torus, path)
    parsed = read_vox(path)
    assert [size for size, _ in parsed["models"]] == [(36, 36, 36)]
    assert np.array_equal(vox_voxels(parsed, 36), torus.to_numpy())
    assert tuple(parsed["palette"][0]) == (200, 200, 200, 255)  # colour index 1


def test_vox_splits_grids_larger_than_256(tmp_path):
    n = 300
    squares = (np.arange(n) - 150.0) ** 2
    voxels = squares[None, None, :] < (140.0**2 - squares[:, None] - squares[None, :])[:, :, None]
    for corner in np.ndindex(2, 2, 2):  # one voxel in each corner: all 8 tiles have voxels
        voxels[tuple(299 * np.array(corner))] = True
    voxels[:, 10, 10] = True  # crosses the tile boundary at 256
    svo = placed(voxels)
    path = tmp_path / "big.vox"
    save(svo, path)
    parsed = read_vox(path)
    sizes = sorted(size for size, _ in parsed["models"])
    assert sizes == [(150, 150, 150)] * 8  # each side cut into two equal tiles
    assert np.array_equal(vox_voxels(parsed, n), voxels)
    empty = placed(np.zeros((260, 260, 260), bool))
    save(empty, tmp_path / "empty.vox")
    parsed = read_vox(tmp_path / "empty.vox")
    assert len(parsed["models"]) == 1 and len(parsed["models"][0][1]) == 0


def test_npz_matches_dense_grid_files(tmp_path, torus):
    save(torus, tmp_path / "t.npz")
    loaded = voxelizer.load(tmp_path / "t.npz")
    assert isinstance(loaded, DenseGrid)
    assert np.array_equal(loaded.to_numpy(), torus.to_numpy())
    assert np.array_equal(loaded.origin, torus.origin) and loaded.voxel_size == torus.voxel_size


@pytest.mark.parametrize("suffix", [".ply", ".obj", ".glb"])
def test_mesh_files(tmp_path, torus, suffix):
    path = tmp_path / f"torus{suffix}"
    save(torus, path)
    mesh = trimesh.load(path, force="mesh", process=False)
    assert mesh.is_watertight and mesh.is_winding_consistent
    assert mesh.volume == pytest.approx(torus.volume(), rel=1e-6)


def test_writers_refuse_to_overwrite_and_wrap_os_errors(tmp_path, torus):
    for suffix in OUTPUT_FORMATS:
        path = tmp_path / f"keep{suffix}"
        path.write_bytes(b"precious")
        with pytest.raises(OutputError, match=r"file exists \(pass overwrite=True"):
            save(torus, path)
        assert path.read_bytes() == b"precious"
        save(torus, path, overwrite=True)
        assert path.read_bytes() != b"precious"
        with pytest.raises(OutputError, match="cannot write"):
            save(torus, tmp_path / "no-such-dir" / f"x{suffix}")
    with pytest.raises(OutputError, match=r"cannot write \.3mf"):
        save(torus, tmp_path / "x.3mf")


# --- the surface mesh ----------------------------------------------------------------------


def surface_cases():
    yield "cube", np.pad(np.ones((1, 1, 1), bool), ((3, 4), (3, 4), (3, 4)))
    edge = np.zeros((8, 8, 8), bool)
    edge[2, 2, 2] = edge[3, 3, 2] = True  # touching along an edge
    yield "edge", edge
    corner = np.zeros((8, 8, 8), bool)
    corner[2, 2, 2] = corner[3, 3, 3] = True  # touching at a corner
    yield "corner", corner
    cavities = np.zeros((8, 8, 8), bool)
    cavities[1:7, 1:7, 1:7] = True
    cavities[3, 3, 3] = cavities[4, 4, 3] = False  # two cavities touching along an edge
    yield "cavities", cavities
    rng = np.random.default_rng(2)
    for p in (0.3, 0.5, 0.7):
        yield f"noise{p}", np.pad(rng.random((14, 14, 14)) < p, 1)


@pytest.mark.parametrize(
    "name, voxels", list(surface_cases()), ids=lambda v: v if isinstance(v, str) else ""
)
def test_surface_is_closed_and_outward(name, voxels):
    svo = placed(voxels, origin=(0.5, -1.0, 2.0), h=0.5)
    mesh = svo.to_mesh()
    assert mesh.is_watertight and mesh.is_winding_consistent, name
    assert mesh.volume == pytest.approx(svo.volume(), rel=1e-12)  # positive: outward normals
    padded = np.pad(voxels, 1).astype(np.int8)
    faces = sum(int((np.diff(padded, axis=axis) != 0).sum()) for axis in range(3))
    # two triangles per face; a fan around the centre of the faces at a contact
    assert len(mesh.faces) == 2 * faces if name == "cube" else len(mesh.faces) > 2 * faces
    assert np.allclose(
        mesh.bounds,
        svo.origin
        + svo.voxel_size
        * np.array([np.argwhere(voxels).min(axis=0), np.argwhere(voxels).max(axis=0) + 1]),
    )


def test_surface_merges_vertices():
    mesh = placed(np.pad(np.ones((2, 1, 1), bool), ((3, 3), (3, 4), (3, 4)))).to_mesh()
    assert len(mesh.vertices) == 12 and len(mesh.faces) == 20
    edge = dict(surface_cases())["edge"]
    mesh = placed(edge).to_mesh()
    # The shared edge's ends stay shared (14 corners), its middle gets one vertex per pair
    # of faces (2), and its 4 faces are fans of 5 triangles around their centres (4).
    assert len(mesh.vertices) == 14 + 2 + 4 and len(mesh.faces) == 8 * 2 + 4 * 5
    assert len(trimesh.Trimesh(mesh.vertices, mesh.faces).vertices) == 20  # none merged


def test_model_surface(bunny):
    mesh = bunny.to_mesh()
    assert mesh.is_watertight and mesh.is_winding_consistent
    assert mesh.volume == pytest.approx(bunny.volume(), rel=1e-12)


def test_to_trimesh_voxel_grid(torus):
    grid = torus.to_trimesh()
    assert np.array_equal(grid.matrix, torus.to_numpy())
    index = np.argwhere(torus.to_numpy())
    assert np.allclose(grid.points, torus.placement.voxel_centres(index))
    assert np.allclose(
        grid.bounds,
        [
            torus.origin + torus.voxel_size * index.min(axis=0),
            torus.origin + torus.voxel_size * (index.max(axis=0) + 1),
        ],
    )


# --- preview -----------------------------------------------------------------------------


def read_png(path) -> tuple[int, int, np.ndarray]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, chunks = 8, []
    while at < len(data):
        (length,) = struct.unpack_from(">I", data, at)
        tag, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        assert struct.unpack_from(">I", data, at + 8 + length)[0] == zlib.crc32(tag + body)
        chunks.append((tag, body))
        at += 12 + length
    assert [tag for tag, _ in chunks] == [b"IHDR", b"IDAT", b"IEND"]
    width, height, depth, colour, *_ = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, colour) == (8, 2)
    rows = np.frombuffer(zlib.decompress(chunks[1][1]), np.uint8).reshape(height, 1 + 3 * width)
    assert (rows[:, 0] == 0).all()
    return width, height, rows[:, 1:].reshape(height, width, 3)


def test_preview_png(tmp_path, bunny):
    path = tmp_path / "bunny.png"
    write_preview(bunny, path)
    width, height, image = read_png(path)
    assert width > 3 * 256 and height > 256
    shaded = (image != 255).any(axis=2)
    assert 0.2 < shaded.mean() < 0.8  # an object in every view, not a blank or a full frame
    thirds = np.array_split(shaded, 3, axis=1)
    assert all(part.any() for part in thirds)
    dense = DenseGrid(bunny.to_numpy(), bunny.placement)
    for source in (dense, dense.to_numpy()):
        other = tmp_path / "other.png"
        write_preview(source, other, overwrite=True)
        assert other.read_bytes() == path.read_bytes()
    with pytest.raises(OutputError, match=r"file exists \(pass overwrite=True") as caught:
        write_preview(bunny, path)
    assert caught.value.exists and caught.value.path == path
    with pytest.raises(ValueError):
        write_preview(np.zeros((4, 4)), tmp_path / "bad.png")


# --- command line ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gear16() -> SVO:
    grid = voxelize_reference(load_mesh(PROJECT_MODELS / "gear.ply"), 16)
    return SVO.from_dense(grid.to_numpy(), grid.placement)


@pytest.mark.parametrize("suffix", OUTPUT_FORMATS)
def test_cli_writes_every_format_and_refuses_to_overwrite(tmp_path, capsys, gear16, suffix):
    out = tmp_path / f"gear{suffix}"
    code, stdout, stderr = run_cli(capsys, PROJECT_MODELS / "gear.ply", "--grid", 16, "-o", out)
    assert code == 0, stderr
    assert len(stdout.strip().splitlines()) == 1 and stdout.strip().endswith(f"-> {out}")
    assert f"{gear16.count():,} solid voxels" in stdout
    if suffix == ".svo":
        assert voxelizer.load(out) == gear16
    elif suffix == ".npz":
        assert np.array_equal(voxelizer.load(out).to_numpy(), gear16.to_numpy())
    elif suffix == ".binvox":
        with open(out, "rb") as fh:
            assert np.array_equal(load_binvox(fh).matrix, gear16.to_numpy())
    elif suffix == ".vox":
        assert np.array_equal(vox_voxels(read_vox(out), 16), gear16.to_numpy())
    elif suffix == ".vti":
        loaded = voxelizer.load(out)
        assert np.array_equal(loaded.to_numpy(), gear16.to_numpy())
        assert np.array_equal(loaded.origin, gear16.origin)
    else:  # an STL stores corners: merged by position, as slicers merge them
        mesh = trimesh.load(out, force="mesh", process=suffix == ".stl")
        assert mesh.is_watertight and mesh.volume == pytest.approx(gear16.volume(), rel=1e-6)
    written = out.read_bytes()
    code, _, stderr = run_cli(capsys, PROJECT_MODELS / "gear.ply", "--grid", 16, "-o", out)
    assert code == 1 and f"{out}: file exists (use --force to overwrite)" in stderr
    assert "overwrite=True" not in stderr and out.read_bytes() == written
    code, _, _ = run_cli(capsys, PROJECT_MODELS / "gear.ply", "--grid", 16, "-o", out, "--force")
    assert code == 0 and out.stat().st_size == len(written)  # the same voxels, written again


def test_cli_preview(tmp_path, capsys):
    png, out = tmp_path / "gear.png", tmp_path / "gear.svo"
    code, stdout, stderr = run_cli(
        capsys, PROJECT_MODELS / "gear.ply", "--grid", 32, "--preview", png, "-o", out
    )
    assert code == 0, stderr
    assert stdout.strip().endswith(f"-> {out}, {png}")
    width, height, _ = read_png(png)
    assert width > height > 0
    assert voxelizer.load(out).count() > 0
    before = png.read_bytes()
    code, _, stderr = run_cli(capsys, PROJECT_MODELS / "gear.ply", "--grid", 32, "--preview", png)
    assert code == 1 and "exists" in stderr and "--force" in stderr and png.read_bytes() == before
    code, _, _ = run_cli(
        capsys, PROJECT_MODELS / "gear.ply", "--grid", 32, "--preview", png, "--force"
    )
    assert code == 0 and png.read_bytes() == before  # the same image, written again


@pytest.mark.parametrize("name", ["out.xyz", "out", "out.SVO.txt"])
def test_cli_unknown_extension_is_a_usage_error(tmp_path, capsys, name):
    stderr = cli_usage_error(capsys, PROJECT_MODELS / "gear.ply", "-o", tmp_path / name)
    assert "cannot write" in stderr and ".svo" in stderr
    assert not (tmp_path / name).exists()
