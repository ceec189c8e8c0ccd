"""What `pip install .` gives a user: a typed package (mypy reads its hints, no
`import-untyped`), the licence and the metadata, checked in a fresh, clean venv."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What the build reads (pyproject's [tool.setuptools] and [project]): copied, so that the
# build's own files (build/, *.egg-info) never land in the checkout.
BUILD_FILES = ("pyproject.toml", "README.md", "LICENSE")
BUILD_DIRS = ("voxelizer", "shaders")
USER_SCRIPT = """\
import voxelizer

svo = voxelizer.voxelize("bunny.ply", grid=64)
solid: int = svo.count()
"""
INSTALLED = """\
import json
from importlib.metadata import distribution

dist = distribution("voxelizer")
print(json.dumps({
    "license": dist.metadata["License-Expression"],
    "license_files": dist.metadata.get_all("License-File"),
    "classifiers": dist.metadata.get_all("Classifier"),
    "files": [str(f) for f in dist.files or ()],
}))
"""


def _run(*command: object, cwd: Path) -> str:
    result = subprocess.run(
        [str(part) for part in command], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a new venv (no system site-packages) with `pip install --no-deps .`."""
    work = tmp_path_factory.mktemp("install")
    source = work / "source"
    source.mkdir()
    for name in BUILD_FILES:
        shutil.copy2(ROOT / name, source / name)
    for name in BUILD_DIRS:
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    venv = work / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=work)
    python = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
    # This environment's pip installs into the new venv; the build runs isolated, as for users.
    _run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", source, cwd=work)  # fmt: skip
    return python


@pytest.mark.slow
def test_mypy_reads_the_installed_package(installed: Path, tmp_path: Path) -> None:
    script = tmp_path / "user.py"
    script.write_text(USER_SCRIPT)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--python-executable", str(installed),
         "--cache-dir", str(tmp_path / "cache"), "--strict", str(script)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert "import-untyped" not in output and "import-not-found" not in output, output
    assert result.returncode == 0 and "Success" in output, output


@pytest.mark.slow
def test_the_install_has_the_licence_the_marker_and_the_metadata(
    installed: Path, tmp_path: Path
) -> None:
    found = json.loads(_run(installed, "-c", INSTALLED, cwd=tmp_path))
    assert found["license"] == "MIT" and found["license_files"] == ["LICENSE"]
    assert "Typing :: Typed" in found["classifiers"]
    files = set(found["files"])
    assert {"voxelizer/py.typed", "voxelizer/__main__.py", "voxelizer/log.py"} <= files
    assert any(f.endswith(".dist-info/licenses/LICENSE") for f in files), sorted(files)
    assert "voxelizer/_shaders/fill.comp" in files


def test_the_licence_is_mit() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "the voxelizer authors" in text


def test_every_package_of_the_tree_is_in_the_packages_list() -> None:
    """pyproject.toml lists the packages (the GLSL sources ship as voxelizer._shaders, from
    another folder, which package discovery cannot map): a folder of the package that holds
    modules or shipped data and is missing from the list would be missing from the wheel,
    and setuptools warns about data folders it was not told of."""
    listed = set(
        re.findall(r'^    "(voxelizer[\w.]*)",$', (ROOT / "pyproject.toml").read_text(), re.M)
    )
    folders = {
        ".".join(folder.relative_to(ROOT).parts)
        for folder in [ROOT / "voxelizer", *(ROOT / "voxelizer").rglob("*")]
        if folder.is_dir()
        and folder.name != "__pycache__"
        and any(f.is_file() and f.suffix in (".py", ".spv", ".json") for f in folder.iterdir())
    }
    assert folders | {"voxelizer._shaders"} == listed


def test_the_install_script_takes_dev_only() -> None:
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install.sh"), "--tests"], capture_output=True, text=True
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "install.sh: unknown option --tests (the only one is --dev)\n"
    shown = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install.sh"), "--help"], capture_output=True, text=True
    )
    assert shown.returncode == 0 and "--dev" in shown.stdout and "#" not in shown.stdout
