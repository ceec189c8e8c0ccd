"""`python -m voxelizer`: the `voxelize` command, for when the script is not on PATH (an
unactivated venv, a user install) or to be sure which interpreter runs it."""

from __future__ import annotations

from .cli import run

if __name__ == "__main__":
    run()
