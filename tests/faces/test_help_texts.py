"""What a user reads is complete and speaks the face's language: every option of `voxelize
--help` is in the command line's reference page; every fill mode is in --help, in
Voxelizer.voxelize's docstring and in the reference pages; warnings say `--fill-mode winding`
on the command line (one mesh or a batch) and `fill_mode="winding"` in Python; the version is
the same wherever it is shown."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from importlib import metadata

import pytest

import voxelizer
from voxelizer import FILL_MODES, version
from voxelizer.command_words import in_command_words

from ..helpers import PROJECT_MODELS, run_cli, shared_model

ROOT = PROJECT_MODELS.parent
CLI_PAGE = ROOT / "docs" / "guide" / "command-line.md"
PYTHON_PAGE = ROOT / "docs" / "guide" / "python.md"


@pytest.fixture(scope="module")
def help_text() -> str:
    done = subprocess.run(
        [sys.executable, "-m", "voxelizer", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _options(help_text: str) -> set[str]:
    """Every option string --help lists (both spellings of an option with two): the words
    that start its option lines, `  -o FILE, --output FILE    write ...`."""
    options = set()
    for line in help_text.splitlines():
        listed = re.match(r"  (-\S.*?)(?:  |$)", line)
        if listed:
            options.update(part.split()[0] for part in listed[1].split(", "))
    return options


def test_every_option_of_help_is_in_the_command_line_page(help_text: str) -> None:
    page = CLI_PAGE.read_text()
    options = _options(help_text)
    assert {"-h", "--help", "--grid", "--fill-mode", "--out-dir", "--version"} <= options
    missing = sorted(o for o in options if not re.search(rf"`{re.escape(o)}[` ]", page))
    assert not missing, f"{CLI_PAGE.name} does not describe {missing}"


def test_every_fill_mode_is_in_help_the_docstring_and_the_pages(help_text: str) -> None:
    fill_mode_help = help_text[help_text.index("  --fill-mode") : help_text.index("  --mode")]
    fill_mode_help = " ".join(fill_mode_help.split())
    docstring = voxelizer.Voxelizer.voxelize.__doc__ or ""
    for mode in FILL_MODES:
        assert re.search(rf"\b{mode} \(", fill_mode_help), (mode, fill_mode_help)
        assert f'"{mode}"' in docstring, mode
        for page in (CLI_PAGE, PYTHON_PAGE):
            assert f"`{mode}`" in page.read_text() or f'`"{mode}"`' in page.read_text(), page


def test_help_describes_solid_and_surface_voxelization(help_text: str) -> None:
    description = " ".join(help_text.split("\n\n")[1].split())
    assert description.startswith("Exact solid and surface voxelization"), description
    assert "--mode surface" in description


def test_the_library_speaks_python_and_recommends_winding_for_open_meshes() -> None:
    for fill_mode in ("parity", "vote", "union"):
        (warning,) = voxelizer.mesh_warnings({"open_columns": 3}, fill_mode)
        assert isinstance(warning, voxelizer.OpenMeshWarning)
        assert "fill_mode='winding'" in str(warning) and "--fill-mode" not in str(warning)
    (overlap,) = voxelizer.mesh_warnings({"overlap_columns": 3}, "parity")
    assert "fill_mode='union'" in str(overlap)


def test_command_words() -> None:
    text = """fill_mode="winding" bridges holes; mode='both'; surface='thin'; a_fill_mode=x"""
    assert in_command_words(text) == (
        "--fill-mode winding bridges holes; --mode both; --surface thin; a_fill_mode=x"
    )


def test_the_command_warns_in_its_own_words(capsys, tmp_path) -> None:
    """One mesh, then a batch of two: each warning line names the flag, never the keyword."""
    code, _, stderr = run_cli(capsys, shared_model("bunny_scan.ply"), "--grid", 16)
    assert code == 0
    (line,) = stderr.strip().splitlines()
    assert line.startswith("voxelize: warning: the mesh is not closed")
    assert "--fill-mode winding" in line and "fill_mode" not in line, line
    folder = tmp_path / "scans"
    folder.mkdir()
    for name in ("a.ply", "b.ply"):
        shutil.copyfile(shared_model("bunny_scan.ply"), folder / name)
    code, _, stderr = run_cli(
        capsys, folder, "--out-dir", tmp_path / "out", "--grid", 16, "--fill-mode", "vote"
    )
    assert code == 0
    warned = [line for line in stderr.splitlines() if "warning" in line]
    assert len(warned) == 2, stderr
    for line in warned:
        assert "--fill-mode winding" in line and "fill_mode" not in line, line


def test_version_is_the_metadata_everywhere(capsys) -> None:
    installed = metadata.version("voxelizer")
    assert voxelizer.__version__ == installed
    with pytest.raises(SystemExit) as exited:
        run_cli(capsys, "--version")
    assert (exited.value.code, capsys.readouterr().out) == (0, f"voxelize {installed}\n")
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'\nversion = "{installed}"\n' in pyproject
    assert f"## [{installed}]" in (ROOT / "CHANGELOG.md").read_text()


def test_a_source_tree_that_is_not_installed_reads_its_pyproject(monkeypatch) -> None:
    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(version, "version", not_installed)
    assert version.package_version() == metadata.version("voxelizer")
