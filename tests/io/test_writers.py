"""The writers of voxelizer.io on grids of any shape, from an SVO or a DenseGrid alike, and the
preview image's proportions."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest
import trimesh
from trimesh.exchange.binvox import load_binvox

import voxelizer
from voxelizer import DenseGrid, OutputError
from voxelizer.io import OUTPUT_FORMATS, save
from voxelizer.io.npz_file import packed_bits, write_npy
from voxelizer.io.preview import render_views
from voxelizer.io.writers import OutputFormat

from ..helpers import noisy_blobs, placed, read_vox, vox_voxels


def test_writers_on_a_non_cubic_grid(tmp_path):
    voxels = noisy_blobs((40, 12, 8), 9)
    svo = placed(voxels)
    save(svo, tmp_path / "g.npz")
    loaded = voxelizer.load(tmp_path / "g.npz")
    assert isinstance(loaded, DenseGrid) and loaded.shape == (40, 12, 8)
    assert np.array_equal(loaded.to_numpy(), voxels)
    save(svo, tmp_path / "g.vox")
    parsed = read_vox(tmp_path / "g.vox")
    assert [size for size, _ in parsed["models"]] == [(40, 12, 8)]
    assert np.array_equal(vox_voxels(parsed, 40)[:, :12, :8], voxels)
    save(svo, tmp_path / "g.svo")
    assert voxelizer.load(tmp_path / "g.svo") == svo
    for suffix in (".ply", ".obj", ".glb"):
        save(svo, tmp_path / f"g{suffix}")
        mesh = trimesh.load(tmp_path / f"g{suffix}", force="mesh", process=False)
        assert mesh.is_watertight and mesh.volume == pytest.approx(svo.volume(), rel=1e-9)


def test_vox_tiles_follow_each_side(tmp_path):
    voxels = np.zeros((264, 8, 300), bool)
    voxels[0, 0, 0] = voxels[263, 7, 299] = voxels[100, 3, 260] = True
    svo = placed(voxels)
    save(svo, tmp_path / "big.vox")
    parsed = read_vox(tmp_path / "big.vox")
    assert [size for size, _ in parsed["models"]] == [(132, 8, 150)] * 3  # equal tiles
    assert np.array_equal(vox_voxels(parsed, 300)[:264, :8, :300], voxels)


def test_binvox_refuses_non_cubic_grids(tmp_path):
    """binvox has one scale for the whole grid, and trimesh cannot load other shapes."""
    svo = placed(noisy_blobs((16, 8, 12), 1))
    with pytest.raises(OutputError, match="cubic grids only, not 16x8x12"):
        save(svo, tmp_path / "g.binvox")
    assert not (tmp_path / "g.binvox").exists()
    cube = placed(noisy_blobs((16, 16, 16), 1))
    save(cube, tmp_path / "cube.binvox")
    with open(tmp_path / "cube.binvox", "rb") as fh:
        assert np.array_equal(load_binvox(fh).matrix, cube.to_numpy())


def test_preview_keeps_proportions():
    voxels = np.zeros((40, 12, 8), bool)
    voxels[2:30, 3:9, 1:7] = True
    image = render_views(voxels)
    # One scale for all views: 40 voxels -> 280 pixels (factor 7); views 40x12, 8x12, 40x8
    # (width x height) side by side with 8-pixel gaps, centred on the tallest.
    assert image.shape == (8 + 12 * 7 + 8, 8 + 280 + 8 + 56 + 8 + 280 + 8, 3)
    third = image[8:-8, 8 + 280 + 8 + 56 + 8 : -8]
    assert (third[:14] == 255).all() and (third[-14:] == 255).all()  # (84 - 56) / 2 above, below
    assert (third[14:-14] != 255).any()
    cube = render_views(np.pad(voxels, [(0, 0), (0, 28), (0, 32)]))
    assert cube.shape == (8 + 280 + 8, 8 + 3 * 288, 3)


@pytest.mark.parametrize("suffix", OUTPUT_FORMATS)
def test_every_writer_takes_a_dense_grid(tmp_path, suffix):
    """A DenseGrid and the SVO of the same voxels give the same file (.npz: the same grid)."""
    svo = placed(noisy_blobs((16, 16, 16), 5), origin=(0.5, -1.0, 2.0), h=0.25)
    grid = DenseGrid(svo.to_numpy(), svo.placement)
    from_grid, from_svo = tmp_path / f"grid{suffix}", tmp_path / f"svo{suffix}"
    save(grid, from_grid)
    save(svo, from_svo)
    if suffix == ".npz":
        loaded = voxelizer.load(from_grid)
        assert np.array_equal(loaded.to_numpy(), grid.to_numpy())
        assert np.array_equal(loaded.origin, grid.origin) and loaded.voxel_size == 0.25
        assert np.array_equal(voxelizer.load(from_svo).to_numpy(), grid.to_numpy())
    else:
        assert from_grid.read_bytes() == from_svo.read_bytes() != b""


def test_binvox_refuses_a_non_cubic_dense_grid(tmp_path):
    svo = placed(noisy_blobs((16, 8, 12), 1))
    with pytest.raises(OutputError, match="cubic grids only, not 16x8x12") as caught:
        save(DenseGrid(svo.to_numpy(), svo.placement), tmp_path / "g.binvox")
    assert not caught.value.exists and caught.value.path == tmp_path / "g.binvox"
    assert not (tmp_path / "g.binvox").exists()


@pytest.mark.parametrize("suffix", OUTPUT_FORMATS)
def test_an_existing_file_is_refused_in_the_words_of_the_api(tmp_path, suffix):
    path = tmp_path / f"keep{suffix}"
    path.write_bytes(b"precious")
    svo = placed(noisy_blobs((16, 16, 16), 6))
    for result in (svo, DenseGrid(svo.to_numpy(), svo.placement)):
        with pytest.raises(OutputError) as caught:
            save(result, path)
        assert str(caught.value) == f"{path}: file exists (pass overwrite=True to replace it)"
        assert caught.value.exists and caught.value.path == path
        assert "--force" not in str(caught.value)
        assert path.read_bytes() == b"precious"
    save(svo, path, overwrite=True)
    assert path.read_bytes() != b"precious"


def test_save_refuses_unknown_extensions(tmp_path):
    svo = placed(noisy_blobs((16, 16, 16), 7))
    for name in ("g.3mf", "g", "g.svo.txt"):
        with pytest.raises(OutputError, match="cannot write") as caught:
            save(svo, tmp_path / name)
        assert not caught.value.exists
        assert not (tmp_path / name).exists()


@pytest.mark.parametrize("suffix", OUTPUT_FORMATS)
def test_an_output_format_decoded_once_writes_whatever_the_file_is_named(tmp_path, suffix):
    """A batch decodes its format once (OutputFormat) and hands it to the writer: the file it
    writes is save's for that extension, without a look at the file's own name."""
    name = suffix[1:]
    output_format = OutputFormat.named(name)
    assert output_format == OutputFormat.named(suffix) == OutputFormat.named(name.upper())
    assert output_format == OutputFormat.of_path(tmp_path / f"G{suffix.upper()}")
    assert OutputFormat.named(output_format) is output_format
    assert (output_format.name, output_format.suffix) == (name, suffix)
    assert output_format.dense == (suffix != ".svo")
    assert output_format.takes_up_axis == (suffix == ".vox")
    svo = placed(noisy_blobs((16, 16, 16), 3))
    output_format.write(svo, tmp_path / "named.otherwise")
    save(svo, tmp_path / f"saved{suffix}")
    if suffix == ".npz":  # (a zip: compared by its contents)
        (tmp_path / "named.otherwise").rename(tmp_path / "renamed.npz")
        renamed, saved = (voxelizer.load(tmp_path / f"{n}.npz") for n in ("renamed", "saved"))
        assert np.array_equal(renamed.to_numpy(), saved.to_numpy())
        assert np.array_equal(renamed.origin, saved.origin)
        assert renamed.voxel_size == saved.voxel_size
    else:
        assert (tmp_path / "named.otherwise").read_bytes() == (
            tmp_path / f"saved{suffix}"
        ).read_bytes()


def test_an_output_format_refuses_unknown_names_and_an_up_axis_it_cannot_take(tmp_path):
    with pytest.raises(OutputError, match=r"cannot write 'xyz': use one of svo, binvox, "):
        OutputFormat.named("xyz")
    with pytest.raises(OutputError, match=r"cannot write \.xyz: use \.svo, \.binvox, ") as caught:
        OutputFormat.of_path(tmp_path / "g.xyz")
    assert caught.value.path == tmp_path / "g.xyz"
    svo = placed(noisy_blobs((16, 16, 16), 4))
    with pytest.raises(OutputError, match=r"up_axis is for \.vox files only"):
        OutputFormat.named("npz").write(svo, tmp_path / "g.npz", up_axis="y")
    assert not (tmp_path / "g.npz").exists()
    flat = placed(noisy_blobs((16, 8, 16), 4))
    with pytest.raises(OutputError, match="cubic grids only"):
        OutputFormat.named("binvox").write(flat, tmp_path / "g.dat")
    assert not (tmp_path / "g.dat").exists()
    OutputFormat.named("vox").write(svo, tmp_path / "g.vox", up_axis="y")
    save(svo, tmp_path / "saved.vox", up_axis="y")
    assert (tmp_path / "g.vox").read_bytes() == (tmp_path / "saved.vox").read_bytes()


@pytest.mark.parametrize("shape", [(24, 16, 40), (8, 12, 36), (16, 16, 16)])
def test_npz_bits_of_a_transposed_grid_are_those_of_its_copy(shape):
    """The GPU's [j, i, k] layout seen as [i, j, k] is packed as its C-ordered copy is."""
    rng = np.random.default_rng(8)
    stored = rng.random((shape[1], shape[0], shape[2])) < 0.3
    voxels = stored.transpose(1, 0, 2)
    expected = np.packbits(np.ascontiguousarray(voxels), axis=None)
    assert np.array_equal(packed_bits(voxels), expected)
    assert np.array_equal(packed_bits(np.ascontiguousarray(voxels)), expected)


NPY_CASES = {
    "0-d float64": np.asanyarray(np.float64(0.125)),
    "int64 shape": np.array([24, 16, 40], np.int64),
    "uint8 bits": np.arange(1000, dtype=np.uint8),
    "transposed int32": np.arange(24, dtype=np.int32).reshape(2, 3, 4).transpose(1, 0, 2),
    "bool 3-d": np.arange(60).reshape(3, 4, 5) % 3 == 0,
    "empty": np.zeros((0, 3), np.float32),
}


@pytest.mark.parametrize("case", NPY_CASES)
def test_npy_members_are_written_as_numpy_writes_them(case):
    """write_npy hands numpy's bytes over without its copy: the same header (0-d stays 0-d),
    the same data in C order, in a plain buffer and in a compressed zip member."""
    array = NPY_CASES[case]
    expected = io.BytesIO()
    np.lib.format.write_array(expected, array, allow_pickle=False)
    written = io.BytesIO()
    write_npy(written, array)
    assert written.getvalue() == expected.getvalue()
    archive_bytes = io.BytesIO()
    with (
        zipfile.ZipFile(archive_bytes, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive,
        archive.open("a.npy", "w", force_zip64=True) as member,
    ):
        write_npy(member, array)
    with zipfile.ZipFile(archive_bytes) as archive:
        assert archive.read("a.npy") == expected.getvalue()
    loaded = np.load(io.BytesIO(expected.getvalue()))
    assert loaded.shape == array.shape and np.array_equal(loaded, array)
