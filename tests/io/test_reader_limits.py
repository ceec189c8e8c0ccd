"""Readers against hostile files: bombs that unpack to gigabytes, headers that claim more than
the file holds, special files (FIFOs, /dev/zero), symlink loops, names too long, scene graphs
that reuse their nodes, placements no grid can have. Each must end in one typed line, fast,
without allocating what the file claims."""

from __future__ import annotations

import bz2
import json
import os
import shutil
import struct
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest

import voxelizer
import voxelizer.budget
from voxelizer import DenseGrid, FormatError, GridError, MemoryBudgetError, MeshError, OutputError
from voxelizer.io import load_mesh
from voxelizer.placement import GridPlacement

from ..helpers import PROJECT_MODELS, time_limit

VOXEL_FORMATS = (".svo", ".npz", ".vti", ".binvox", ".vox")


@pytest.fixture
def host_memory(monkeypatch: pytest.MonkeyPatch):
    """Say that the host has `bytes` of memory available (set(bytes)), for every reader."""

    def set_available(size: int) -> None:
        monkeypatch.setattr(voxelizer.budget, "_read_available_host_memory", lambda: size)
        monkeypatch.setattr(voxelizer.budget, "_available_read", None)

    yield set_available
    voxelizer.budget._available_read = None  # the real figure again for the next test


def empty_grid(n: int) -> DenseGrid:
    return DenseGrid(np.zeros((n, n, n), bool), GridPlacement(n, np.zeros(3), 1.0))


# --- bombs: small files that claim (or unpack to) far more than memory holds -------------------


@pytest.mark.parametrize("suffix", [".npz", ".vti", ".binvox"])
def test_a_grid_larger_than_memory_is_refused_before_it_is_unpacked(tmp_path, host_memory, suffix):
    """A 256³ grid of zeros packs into a few KB; with 4 MiB available the reader refuses it
    (naming the file and the memory) before unpacking its 16.7 million voxels."""
    path = tmp_path / f"zeros{suffix}"
    voxelizer.save(empty_grid(256), path)
    assert path.stat().st_size < 200_000
    host_memory(4 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(MemoryBudgetError, match=f"^{path}: .*only 4.0 MiB is available"):
            voxelizer.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak


@pytest.mark.parametrize("nz", [256, 252])
def test_read_npz_holds_the_voxels_once(tmp_path, nz):
    """Columns of whole bytes (nz a multiple of 8): the grid stays as column words, an
    eighth of its bools, until asked for them. Otherwise the unpacked bits are the bool
    array (a view, not a copy): the grid's bytes and its bits, not twice the grid."""
    path = tmp_path / "noise.npz"
    voxels = np.random.default_rng(3).random((256, 256, nz)) < 0.3
    voxelizer.save(DenseGrid(voxels, GridPlacement(voxels.shape, np.zeros(3), 1.0)), path)
    tracemalloc.start()
    try:
        grid = voxelizer.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert grid.count() == np.count_nonzero(voxels)
    assert np.array_equal(grid.to_numpy(), voxels)
    if nz % 8 == 0:
        assert peak < voxels.size / 2, peak  # words and bits: no bool array
    else:
        assert peak < 1.3 * voxels.size, peak  # one bool array (+ bits, 1/8): not 2 arrays


@pytest.mark.parametrize("shape", [(8, 8, 8), (12, 20, 16), (40, 12, 72), (16, 8, 40)])
def test_packed_bits_become_the_column_words_of_the_same_voxels(shape):
    from voxelizer.grid import ColumnBits

    voxels = np.random.default_rng(sum(shape)).random(shape) < 0.4
    bits = np.packbits(voxels, axis=None)
    columns = ColumnBits.of_packed_bits(bits, shape)
    assert np.array_equal(columns.to_numpy(), voxels)
    assert np.array_equal(columns.packed_bits(), bits)
    assert columns.count() == np.count_nonzero(voxels)
    with pytest.raises(voxelizer.ArgumentError, match="not whole bytes"):
        ColumnBits.of_packed_bits(np.packbits(np.zeros((8, 8, 12), bool)), (8, 8, 12))


def test_a_zip_of_a_large_mesh_is_refused_before_it_is_unpacked(tmp_path, host_memory):
    """A 20 MB STL of zeros zipped into 20 KB: with 32 MiB available, trimesh never gets to
    unpack it (it would need several times its size)."""
    stl = bytes(80) + struct.pack("<I", 400_000) + bytes(50 * 400_000)
    path = tmp_path / "mesh.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("mesh.stl", stl)
    assert path.stat().st_size < 100_000
    host_memory(32 << 20)
    with time_limit(5.0), pytest.raises(MeshError, match=f"^{path}: .*unpacks to"):
        load_mesh(path)


def test_a_bz2_mesh_is_unpacked_only_as_far_as_memory_allows(tmp_path, host_memory):
    """A .stl.bz2 declares no size: it is unpacked piece by piece and refused as soon as it
    outgrows what memory can parse (with 8 MiB available: after 2 MiB, not 20 MB)."""
    stl = bytes(80) + struct.pack("<I", 400_000) + bytes(50 * 400_000)
    path = tmp_path / "mesh.stl.bz2"
    path.write_bytes(bz2.compress(stl))
    assert path.stat().st_size < 1000
    host_memory(8 << 20)
    tracemalloc.start()
    try:
        with (
            time_limit(5.0),
            pytest.raises(MeshError, match=f"^{path}: .*\\(or more\\) it unpacks"),
        ):
            load_mesh(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak


def test_a_bz2_mesh_that_fits_reads_as_its_format(tmp_path):
    mesh = load_mesh(PROJECT_MODELS / "gear.ply")
    path = tmp_path / "gear.ply.bz2"
    path.write_bytes(bz2.compress((PROJECT_MODELS / "gear.ply").read_bytes()))
    packed = load_mesh(path)
    assert np.array_equal(packed.vertices, mesh.vertices)
    assert np.array_equal(packed.faces, mesh.faces)


# --- headers that claim more than their file holds: FormatError, not MemoryError -----------


def npy_bytes(array: np.ndarray, shape: tuple[int, ...] | None = None) -> bytes:
    """An .npy member of `array`, its header claiming `shape` (default: the array's)."""
    header = {"descr": array.dtype.str, "fortran_order": False, "shape": shape or array.shape}
    text = repr(header).encode("latin1")
    text += b" " * (-(len(text) + 11) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + array.tobytes()


def npz_file(path: Path, **members: bytes) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(f"{name}.npy", data)
    return path


def placement_members(shape=(8, 8, 8), origin=(0.0, 0.0, 0.0), h=1.0) -> dict[str, bytes]:
    return {
        "shape": npy_bytes(np.array(shape)),
        "origin": npy_bytes(np.array(origin, np.float64)),
        "voxel_size": npy_bytes(np.array(h, np.float64)),
    }


def test_an_npz_member_claiming_a_terabyte_is_a_format_error(tmp_path):
    path = npz_file(
        tmp_path / "claims.npz",
        bits=npy_bytes(np.zeros(64, np.uint8), shape=(1 << 40,)),
        **placement_members(),
    )
    with pytest.raises(FormatError, match="do not fit the shape"):
        voxelizer.load(path)


def test_a_vti_block_table_claiming_terabytes_is_a_format_error(tmp_path):
    """An 8192³ Float64 image whose one zlib block claims all of its 4 TiB in 16 bytes: no
    zlib stream inflates 2^38-fold; refused before anything is allocated."""
    n, compressed = 8192, zlib.compress(bytes(1024))
    expected = n**3 * 8
    table = np.array([1, expected, 0, len(compressed)], "<u8").tobytes()
    extent = f"0 {n} 0 {n} 0 {n}"
    xml = (
        '<?xml version="1.0"?>\n<VTKFile type="ImageData" version="1.0" '
        'byte_order="LittleEndian" header_type="UInt64" compressor="vtkZLibDataCompressor">\n'
        f'<ImageData WholeExtent="{extent}" Origin="0 0 0" Spacing="1 1 1">\n'
        f'<Piece Extent="{extent}"><CellData><DataArray type="Float64" Name="solid" '
        'format="appended" offset="0"/></CellData></Piece>\n</ImageData>\n'
        '<AppendedData encoding="raw">\n_'
    ).encode()
    path = tmp_path / "claims.vti"
    path.write_bytes(xml + table + compressed + b"\n</AppendedData>\n</VTKFile>\n")
    with pytest.raises(FormatError, match="cannot hold"):
        voxelizer.load(path)


def vox_file(chunks: list[tuple[bytes, bytes]]) -> bytes:
    body = b"".join(
        name + struct.pack("<ii", len(content), 0) + content for name, content in chunks
    )
    return b"VOX " + struct.pack("<i", 150) + b"MAIN" + struct.pack("<ii", 0, len(body)) + body


def vox_dict(items: dict[str, str]) -> bytes:
    out = struct.pack("<i", len(items))
    for key, value in items.items():
        for text in (key, value):
            out += struct.pack("<i", len(text)) + text.encode()
    return out


def vox_model() -> list[tuple[bytes, bytes]]:
    return [(b"SIZE", struct.pack("<3i", 2, 2, 2)), (b"XYZI", struct.pack("<i4B", 1, 0, 0, 0, 1))]


def vox_transform(node: int, child: int, translation: str) -> tuple[bytes, bytes]:
    frame = vox_dict({"_t": translation})
    return b"nTRN", struct.pack("<i", node) + vox_dict({}) + struct.pack(
        "<4i", child, -1, 0, 1
    ) + frame


def vox_shape(node: int, model: int) -> tuple[bytes, bytes]:
    return b"nSHP", struct.pack("<i", node) + vox_dict({}) + struct.pack(
        "<ii", 1, model
    ) + vox_dict({})


def vox_group(node: int, children: list[int]) -> tuple[bytes, bytes]:
    content = struct.pack("<i", node) + vox_dict({}) + struct.pack("<i", len(children))
    return b"nGRP", content + struct.pack(f"<{len(children)}i", *children)


def test_a_vox_translation_beyond_any_integer_is_a_format_error(tmp_path):
    path = tmp_path / "far.vox"
    path.write_bytes(
        vox_file(
            [*vox_model(), vox_transform(0, 1, "99999999999999999999999 0 0"), vox_shape(1, 0)]
        )
    )
    with pytest.raises(FormatError, match="bad translation"):
        voxelizer.load(path)


def test_a_vox_scene_graph_that_reuses_its_nodes_is_refused_at_once(tmp_path):
    """40 group levels, each naming the next twice: 1.4 KB that would place 2^40 models."""
    levels = 40
    chunks = [*vox_model(), vox_transform(0, 1, "0 0 0")]
    for level in range(levels):
        chunks.append(vox_group(1 + level, [2 + level, 2 + level]))
    chunks.append(vox_shape(1 + levels, 0))
    path = tmp_path / "reuse.vox"
    path.write_bytes(vox_file(chunks))
    assert path.stat().st_size < 2000
    with time_limit(2.0), pytest.raises(FormatError, match="reached twice"):
        voxelizer.load(path)


def test_a_vox_scene_graph_that_places_one_model_too_often_is_refused(tmp_path):
    """A tree, but 64 shape nodes all placing one full 16³ model at one spot: far more voxels
    than the grid has; refused before they are placed."""
    size = 16
    full = np.argwhere(np.ones((size,) * 3, bool)).astype(np.uint8)
    xyzi = np.concatenate([full, np.ones((len(full), 1), np.uint8)], axis=1)
    chunks = [
        (b"SIZE", struct.pack("<3i", size, size, size)),
        (b"XYZI", struct.pack("<i", len(xyzi)) + xyzi.tobytes()),
        vox_transform(0, 1, "0 0 0"),
        vox_group(1, [2 + 2 * i for i in range(64)]),
    ]
    for i in range(64):
        chunks += [vox_transform(2 + 2 * i, 3 + 2 * i, "8 8 8"), vox_shape(3 + 2 * i, 0)]
    path = tmp_path / "piled.vox"
    path.write_bytes(vox_file(chunks))
    with pytest.raises(FormatError, match="places 262,144 voxels on a grid of 4,096"):
        voxelizer.load(path)


# --- special files: refused without reading (a FIFO would block, /dev/zero never ends) ---------


@pytest.mark.parametrize("suffix", VOXEL_FORMATS)
def test_voxel_readers_refuse_fifos_and_devices(tmp_path, suffix):
    fifo = tmp_path / f"fifo{suffix}"
    os.mkfifo(fifo)
    zero = tmp_path / f"zero{suffix}"
    zero.symlink_to("/dev/zero")
    for path, kind in ((fifo, "a FIFO"), (zero, "a character device")):
        with time_limit(2.0), pytest.raises(FormatError) as caught:
            voxelizer.load(path)
        assert str(caught.value) == f"{path}: not a file ({kind})"


def test_the_mesh_reader_refuses_fifos_and_devices(tmp_path):
    fifo = tmp_path / "fifo.ply"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.off"  # read by trimesh
    zero.symlink_to("/dev/zero")
    for path, kind in ((fifo, "a FIFO"), (zero, "a character device")):
        with time_limit(2.0), pytest.raises(MeshError, match=f"^{path}: not a file \\({kind}\\)$"):
            load_mesh(path)


def gltf_naming(tmp_path: Path, uri: str) -> Path:
    """A .gltf of one triangle whose buffer is the file `uri`."""
    tree = {
        "asset": {"version": "2.0"},
        "buffers": [{"uri": uri, "byteLength": 36}],
        "bufferViews": [{"buffer": 0, "byteLength": 36}],
        "accessors": [
            {
                "bufferView": 0,
                "componentType": 5126,
                "count": 3,
                "type": "VEC3",
                "max": [1, 1, 0],
                "min": [0, 0, 0],
            }
        ],
        "meshes": [{"primitives": [{"attributes": {"POSITION": 0}}]}],
        "nodes": [{"mesh": 0}],
        "scenes": [{"nodes": [0]}],
        "scene": 0,
    }
    path = tmp_path / "mesh.gltf"
    path.write_text(json.dumps(tree))
    return path


def test_a_gltf_buffer_naming_a_fifo_is_refused_without_waiting(tmp_path):
    os.mkfifo(tmp_path / "buffer.bin")
    path = gltf_naming(tmp_path, "buffer.bin")
    with time_limit(2.0), pytest.raises(MeshError) as caught:
        load_mesh(path)
    assert str(caught.value).startswith(f"{path}: ") and "a FIFO" in str(caught.value)


def test_a_gltf_buffer_in_a_regular_file_still_loads(tmp_path):
    corners = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], np.float32)
    (tmp_path / "buffer.bin").write_bytes(corners.tobytes())
    mesh = load_mesh(gltf_naming(tmp_path, "buffer.bin"))
    assert mesh.triangle_count == 1 and np.array_equal(mesh.vertices, corners)


# --- paths: symlink loops, names too long --------------------------------------------------------


def test_symlink_loops_and_long_names_are_typed_errors(tmp_path):
    long_name = "x" * 300
    for suffix in (".ply", *VOXEL_FORMATS):
        loop, other = tmp_path / f"loop{suffix}", tmp_path / f"other{suffix}"
        loop.symlink_to(other.name)
        other.symlink_to(loop.name)
        error = MeshError if suffix == ".ply" else FormatError
        read = load_mesh if suffix == ".ply" else voxelizer.load
        with pytest.raises(error, match=f"^{loop}: cannot read \\(a symlink loop"):
            read(loop)
        with pytest.raises(error, match="name is too long"):
            read(tmp_path / f"{long_name}{suffix}")


# --- placements: every reader checks them as the .svo reader does -----------------------------


@pytest.mark.parametrize(
    ("members", "message"),
    [
        (placement_members(origin=(np.nan, 0.0, 0.0)), "must be finite"),
        (placement_members(h=-1.0), "voxel size positive"),
        (placement_members(h=0.0), "voxel size positive"),
        (placement_members(shape=(8.5, 8, 8)), "shape must be three integers"),
    ],
)
def test_the_npz_reader_checks_the_placement(tmp_path, members, message):
    path = npz_file(tmp_path / "placed.npz", bits=npy_bytes(np.zeros(64, np.uint8)), **members)
    with pytest.raises(FormatError, match=message):
        voxelizer.load(path)


@pytest.mark.parametrize(("origin", "h"), [((np.nan, 0, 0), 1.0), ((0, 0, np.inf), 1.0),
                                           ((0, 0, 0), -1.0), ((0, 0, 0), np.nan)])  # fmt: skip
def test_no_grid_has_a_placement_its_files_would_refuse(origin, h):
    with pytest.raises(GridError):
        GridPlacement(8, np.array(origin, float), h)


# --- voxel shard stores: the same rules for their files -----------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A shard store of two meshes at 16³."""
    from voxelizer import voxelize_many

    path = tmp_path / "grids.zarr"
    models = [PROJECT_MODELS / "gear.ply", PROJECT_MODELS / "torus_knot.ply"]
    results = list(voxelize_many(models, grid=16, out_dir=path, format="zarr"))
    assert [r.status for r in results] == ["done", "done"]
    return path


def test_a_shard_store_refuses_special_files(store):
    from voxelizer.io.zarr_store import chunk_path, open_shards

    chunk = chunk_path(store, 1)
    chunk.unlink()
    chunk.symlink_to("/dev/zero")
    shards = open_shards(store)
    with time_limit(2.0), pytest.raises(FormatError, match="not a regular file"):
        shards.packed(1)
    metadata = store / "zarr.json"
    metadata.unlink()
    os.mkfifo(metadata)
    with time_limit(2.0), pytest.raises(FormatError, match=r"not a file \(a FIFO\)"):
        open_shards(store)


def test_a_shard_chunk_is_inflated_no_further_than_its_grid(store):
    """A chunk of 1.5 KB (what the reader takes at 16³) that would inflate to 1.5 MiB, 3000
    times the grid's 512 packed bytes (at 512³, 32 MiB would inflate to 32 GiB): refused
    after the grid's worth, without the rest."""
    from voxelizer.io.zarr_store import GZIP_WBITS, chunk_path, open_shards

    packer = zlib.compressobj(9, zlib.DEFLATED, GZIP_WBITS)
    bomb = packer.compress(bytes(3 << 19)) + packer.flush()
    assert len(bomb) < 2 * 512 + 1024  # within the chunk size the reader takes
    chunk_path(store, 0).write_bytes(bomb)
    shards = open_shards(store)
    tracemalloc.start()
    try:
        with pytest.raises(FormatError, match="not a chunk of shape"):
            shards.packed(0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 256 << 10, peak


def test_a_damaged_shard_table_or_placement_is_a_format_error(store):
    from voxelizer.io.zarr_store import open_shards

    shards = open_shards(store)
    with pytest.raises(voxelizer.ArgumentError):
        shards.packed("0")
    with pytest.raises(IndexError):
        shards.packed(2)
    origin = store / "origin" / "c.0.0"
    values = np.frombuffer(origin.read_bytes(), "<f8").copy()
    values[0] = np.nan
    origin.write_bytes(values.tobytes())
    with pytest.raises(FormatError, match="mesh 0's placement"):
        open_shards(store).grid(0)
    origin.write_bytes(values.tobytes()[:-8])  # a row short
    with pytest.raises(FormatError, match="not a voxel shard store"):
        open_shards(store)
    (store / "input" / "c.0").write_bytes(struct.pack("<II", 2, 1000) + b"x")
    with pytest.raises(FormatError):
        open_shards(store)


def test_replacing_a_shard_store_never_removes_an_input_inside_it(store):
    from voxelizer import voxelize_many

    inside = store / "mine.ply"
    shutil.copyfile(PROJECT_MODELS / "gear.ply", inside)
    with pytest.raises(OutputError, match="would remove the input"):
        list(voxelize_many([inside], grid=16, out_dir=store, format="zarr", overwrite=True))
    assert inside.is_file()
