"""What a process pays before it voxelizes: `import voxelizer`, `voxelize --help` and
`--version` import neither trimesh, scipy, vulkan nor ray, and a voxelization starts no
subprocess (no compiler run, no version query) and writes no cache of voxelizer's own.
Each case runs in a fresh interpreter, since this one has imported everything already."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import PROJECT_MODELS

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("trimesh", "scipy", "vulkan", "ray")
REPORT_HEAVY = f"""
import json, sys
print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}} & {set(HEAVY)!r})))
"""


def _python(code: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,  # this checkout's voxelizer
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def _heavy(result: subprocess.CompletedProcess[str]) -> list[str]:
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_import_voxelizer_imports_no_heavy_package(tmp_path: Path) -> None:
    result = _python("import voxelizer\n" + REPORT_HEAVY, tmp_path)
    assert _heavy(result) == []


def test_the_heavy_packages_are_there_to_be_imported(tmp_path: Path) -> None:
    """The check above can fail: a mesh read from a file does import trimesh (its reader)."""
    code = f"import voxelizer\nvoxelizer.load_mesh({str(PROJECT_MODELS / 'gear.ply')!r})\n"
    assert "trimesh" in _heavy(_python(code + REPORT_HEAVY, tmp_path))


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_import_no_heavy_package(tmp_path: Path, flag: str) -> None:
    code = (
        f"""
from voxelizer.cli import main
try:
    main([{flag!r}])
except SystemExit as exit:
    assert exit.code == 0, exit.code
"""
        + REPORT_HEAVY
    )
    result = _python(code, tmp_path)
    assert _heavy(result) == []
    assert "voxelize" in result.stdout


def test_a_voxelization_starts_no_process_and_writes_no_cache(tmp_path: Path) -> None:
    code = f"""
import subprocess
import voxelizer

def refuse(*args, **kwargs):
    raise AssertionError(f"a subprocess was started: {{args}}")

subprocess.Popen.__init__ = refuse
svo = voxelizer.voxelize({str(PROJECT_MODELS / "gear.ply")!r}, 16)
print(svo.count())
"""
    cache = tmp_path / "cache"
    result = _python(code, tmp_path, XDG_CACHE_HOME=str(cache))
    assert int(result.stdout.split()[-1]) > 0
    assert not (cache / "voxelizer").exists()
