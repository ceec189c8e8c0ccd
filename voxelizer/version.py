"""The package's version, as its metadata (pyproject.toml's [project] version) states it."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

DISTRIBUTION = "voxelizer"


def package_version() -> str:
    """The installed distribution's version; in a source tree that is not installed, the
    version its pyproject.toml names (read as text: no TOML parser before Python 3.11)."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return _source_tree_version() or "0+unknown"


def _source_tree_version() -> str | None:
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        return None
    project = re.search(r"^\[project\]$(.*?)(?=^\[|\Z)", text, re.MULTILINE | re.DOTALL)
    found = project and re.search(r'^version\s*=\s*"([^"]+)"', project[1], re.MULTILINE)
    return found[1] if found else None
