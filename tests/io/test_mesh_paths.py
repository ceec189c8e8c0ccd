"""find_meshes and output_paths work on paths as text (a dataset's thousands of files cost
the command's start-up no Path per entry): the files found and the outputs named are those
that pathlib's rules give, on names whose suffixes pathlib reads unusually too."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from voxelizer.errors import OutputError
from voxelizer.io.mesh_files import MESH_SUFFIXES, find_meshes, output_paths

NAMES = [
    "a.ply",
    "b.PLY",
    "c.tar.stl",
    ".ply",  # a hidden name without a suffix
    "..ply",  # the suffix .ply, by pathlib's reading
    "d.ply.",  # no suffix
    "e.obj.txt",
    "sub/f.off",
    "sub/deeper/g.glb",
    "sub/.hidden/h.gltf",
]


def _by_pathlib(folder: Path) -> list[Path]:
    """What a directory input names by pathlib's reading: rglob, symlinked folders not
    entered, files and links whose suffix is a mesh's, sorted."""
    found = [
        path
        for path in folder.rglob("*")
        if path.suffix.lower() in MESH_SUFFIXES and (path.is_symlink() or path.is_file())
    ]
    return sorted(found, key=lambda p: p.as_posix())


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    for name in NAMES:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"")
    (folder / "folder.ply").mkdir()  # a folder, not a mesh
    (folder / "linked.stl").symlink_to(folder / "a.ply")
    (folder / "broken.obj").symlink_to(folder / "nowhere")
    (folder / "dirlink.ply").symlink_to(folder / "sub")  # found as a mesh, not entered
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "i.ply").write_bytes(b"")
    (folder / "entered-not").symlink_to(tmp_path / "elsewhere")
    return folder


@pytest.mark.parametrize("spelled", ["in", "in/", "./in", "in/../in", "."])
def test_a_folder_names_the_files_pathlib_would(
    tree: Path, spelled: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tree if spelled == "." else tree.parent)
    found = find_meshes([spelled])
    expected = _by_pathlib(Path(spelled))
    assert found.paths == expected
    assert [str(path) for path in found.paths] == [str(path) for path in expected]
    assert {path.name for path in found.paths} >= {"..ply", "dirlink.ply", "broken.obj"}
    assert not {".ply", "d.ply.", "i.ply", "folder.ply"} & {p.name for p in found.paths}


def test_the_output_folder_inside_the_input_is_left_out(tree: Path) -> None:
    (tree / "out").mkdir()
    (tree / "out" / "old.ply").write_bytes(b"")
    found = find_meshes([tree], exclude=tree / "out")
    assert tree / "out" / "old.ply" not in found.paths
    assert found.paths == [p for p in _by_pathlib(tree) if "out" not in p.parts]


@pytest.mark.parametrize("suffix", [".npz", ".svo", ".vox.gz"])
def test_outputs_are_named_as_pathlib_names_them(tree: Path, suffix: str) -> None:
    inputs = [path for path in _by_pathlib(tree) if path.name != "linked.stl"]
    base = Path(os.path.abspath(tree))
    expected = [
        Path("out") / Path(os.path.abspath(path)).relative_to(base).with_suffix(suffix)
        for path in inputs
    ]
    assert output_paths(inputs, "out", suffix, root=tree) == expected


def test_an_input_outside_the_root_or_two_inputs_for_one_output_are_refused(
    tree: Path,
) -> None:
    with pytest.raises(OutputError, match="is not inside"):
        output_paths([tree / "a.ply"], "out", ".npz", root=tree / "sub")
    with pytest.raises(OutputError, match="would both write"):
        output_paths([tree / "a.ply", tree / "a.stl"], "out", ".npz", root=tree)
    # a folder beside the root whose name starts with the root's is outside it
    (tree.parent / "in2").mkdir()
    with pytest.raises(OutputError, match="is not inside"):
        output_paths([tree.parent / "in2" / "x.ply"], "out", ".npz", root=tree)
