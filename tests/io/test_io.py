"""voxelizer.io as users call it: save and load by extension with the placement kept, the typed
errors of files that cannot be read, the existing-file error in the API's words and in the
command line's, and meshes from every kind of source."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest
import trimesh

import voxelizer
from voxelizer import (
    SVO,
    DenseGrid,
    FormatError,
    MeshError,
    OutputError,
    SVOFormatError,
    VoxelizerError,
)
from voxelizer.cli import command_line_message
from voxelizer.io import INPUT_FORMATS, load, load_mesh, save
from voxelizer.mesh import Mesh
from voxelizer.placement import GridPlacement

from ..helpers import PROJECT_MODELS, noisy_blobs, placed, run_cli

# --- save and load ----------------------------------------------------------------------------


def test_package_exports_save_load_and_the_preview():
    assert voxelizer.save is save and voxelizer.load is load
    assert voxelizer.load_mesh is load_mesh and callable(voxelizer.write_preview)
    assert INPUT_FORMATS == (".svo", ".npz", ".vti", ".binvox", ".vox")


def test_npz_round_trip_keeps_the_placement(tmp_path):
    voxels = noisy_blobs((12, 40, 8), 31)
    placement = GridPlacement((12, 40, 8), np.array([-3.5, 1e5, 0.1]), 0.01)
    grid = DenseGrid(voxels, placement)
    path = tmp_path / "grid.npz"
    save(grid, path)
    loaded = load(path)
    assert isinstance(loaded, DenseGrid) and loaded.shape == (12, 40, 8)
    assert np.array_equal(loaded.to_numpy(), voxels) and loaded.count() == grid.count()
    assert np.array_equal(loaded.origin, [-3.5, 1e5, 0.1]) and loaded.voxel_size == 0.01
    with np.load(path) as data:  # plain numpy reads it too
        assert sorted(data.files) == ["bits", "origin", "shape", "voxel_size"]
        assert data["shape"].tolist() == [12, 40, 8]
    with zipfile.ZipFile(path) as archive:  # compressed, as np.savez_compressed writes it
        members = archive.infolist()
        assert {m.compress_type for m in members} == {zipfile.ZIP_DEFLATED}
        bits = archive.getinfo("bits.npy")
        assert bits.compress_size < bits.file_size


def test_an_svo_saved_as_npz_loads_as_its_dense_grid(tmp_path):
    svo = placed(noisy_blobs((16, 8, 12), 32), origin=(1.0, 2.0, 3.0), h=0.5)
    path = tmp_path / "svo.npz"
    save(svo, path)
    loaded = load(path)
    assert isinstance(loaded, DenseGrid) and np.array_equal(np.asarray(loaded), np.asarray(svo))
    assert np.array_equal(loaded.origin, svo.origin) and loaded.voxel_size == svo.voxel_size
    assert SVO.from_dense(loaded.to_numpy(), loaded.placement) == svo


def test_extensions_are_read_case_blind(tmp_path):
    svo = placed(noisy_blobs((8, 8, 8), 33))
    save(svo, tmp_path / "upper.SVO")
    assert load(tmp_path / "upper.SVO") == svo
    save(svo, tmp_path / "upper.NPZ")
    assert np.array_equal(load(tmp_path / "upper.NPZ").to_numpy(), svo.to_numpy())


@pytest.mark.parametrize("name", ["model.ply", "model.obj", "model.glb", "model", "m.npz.gz"])
def test_load_refuses_formats_it_does_not_read(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"something")
    with pytest.raises(
        FormatError, match=r"voxelizer\.load reads \.svo, \.npz, \.vti, \.binvox, \.vox"
    ):
        load(path)


def test_format_errors_are_typed():
    assert issubclass(FormatError, VoxelizerError) and issubclass(SVOFormatError, FormatError)


def test_broken_npz_files_are_format_errors(tmp_path):
    with pytest.raises(FormatError, match="cannot read"):
        load(tmp_path / "missing.npz")
    path = tmp_path / "text.npz"
    path.write_text("not a zip archive")
    with pytest.raises(FormatError, match="not a voxel grid"):
        load(path)
    path = tmp_path / "other.npz"
    np.savez(path, something=np.arange(3))
    with pytest.raises(FormatError, match="without bits, shape, origin, voxel_size"):
        load(path)
    path = tmp_path / "short.npz"
    np.savez(
        path, bits=np.zeros(3, np.uint8), shape=np.array([8, 8, 8]), origin=np.zeros(3),
        voxel_size=np.float64(1.0),
    )  # fmt: skip
    with pytest.raises(FormatError, match="do not fit the shape"):
        load(path)
    path = tmp_path / "shape.npz"
    np.savez(
        path, bits=np.zeros(0, np.uint8), shape=np.array([8, 8, 0]), origin=np.zeros(3),
        voxel_size=np.float64(1.0),
    )  # fmt: skip
    with pytest.raises(FormatError, match="at least 1"):
        load(path)
    path = tmp_path / "sizes.npz"
    np.savez(
        path, bits=np.zeros(64, np.uint8), shape=np.array([8, 8, 8]), origin=np.zeros(3),
        voxel_size=np.ones(2),
    )  # fmt: skip
    with pytest.raises(FormatError, match="one number or three"):
        load(path)


# --- the existing-file error: API words, command-line words ----------------------------------


def test_output_error_says_how_to_overwrite_from_python(tmp_path):
    path = tmp_path / "kept.svo"
    error = OutputError.file_exists(path)
    assert str(error) == f"{path}: file exists (pass overwrite=True to replace it)"
    assert error.exists and error.path == path and isinstance(error, VoxelizerError)
    plain = OutputError("something else")
    assert not plain.exists and plain.path is None


def test_command_line_says_force(tmp_path):
    path = tmp_path / "kept.svo"
    message = command_line_message(OutputError.file_exists(path))
    assert message == f"{path}: file exists (use --force to overwrite)"
    other = OutputError(f"{path}: cannot write (Permission denied)", path=path)
    assert command_line_message(other) == str(other)
    assert command_line_message(MeshError("x.ply: no such file")) == "x.ply: no such file"


def test_command_line_translates_a_refusal_from_the_writer(tmp_path, capsys, monkeypatch):
    """A file that appears after the command's own check: the writer refuses it, and the
    command still says --force."""
    import voxelizer.cli

    out = tmp_path / "late.npz"  # (an .svo alone streams through voxelize(out=...))

    def save_after_someone_else(result, path, *, overwrite=False, **options):
        path.write_bytes(b"theirs")
        save(result, path, overwrite=overwrite, **options)

    monkeypatch.setattr(voxelizer.cli, "save", save_after_someone_else)
    code, stdout, stderr = run_cli(capsys, PROJECT_MODELS / "gear.ply", "--grid", 16, "-o", out)
    assert code == 1 and stdout == ""
    assert stderr == f"voxelize: error: {out}: file exists (use --force to overwrite)\n"
    assert out.read_bytes() == b"theirs"


# --- meshes ----------------------------------------------------------------------------------


def test_load_mesh_takes_every_kind_of_source():
    path = PROJECT_MODELS / "gear.ply"
    from_file = load_mesh(path)
    loaded = trimesh.load(path, process=False, force="mesh")
    for source in (str(path), loaded, (loaded.vertices, loaded.faces), from_file):
        mesh = load_mesh(source)
        assert isinstance(mesh, Mesh)
        assert np.array_equal(mesh.vertices, from_file.vertices)
        assert np.array_equal(mesh.faces, from_file.faces)
    assert load_mesh(from_file) is from_file


def test_load_mesh_refusals_name_the_source(tmp_path):
    with pytest.raises(MeshError, match="no such file"):
        load_mesh(tmp_path / "missing.ply")
    with pytest.raises(MeshError, match="not a file"):
        load_mesh(tmp_path)
    (tmp_path / "bad.ply").write_text("ply\nnonsense\n")
    with pytest.raises(MeshError, match=r"bad\.ply: cannot read mesh"):
        load_mesh(tmp_path / "bad.ply")
    with pytest.raises(MeshError, match=r"\(vertices, faces\): a face refers"):
        load_mesh((np.zeros((3, 3)), np.array([[0, 1, 3]])))
    with pytest.raises(MeshError, match="zero extent"):
        load_mesh(Mesh(np.ones((3, 3)), np.array([[0, 1, 2]])))
    with pytest.raises(MeshError, match="cannot voxelize a int"):
        load_mesh(3)
