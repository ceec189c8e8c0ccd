"""Which mesh files a batch's inputs name, and where each one's output goes.

Command-line style inputs (files, directories, globs, @list.txt) become a list of files and
the folder their outputs mirror. Paths only: nothing here reads a mesh or touches a device,
so the command line imports this without the batch machinery."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import MeshError, OutputError

# What a directory is searched for (case-insensitive): the mesh files of common datasets
# (ShapeNet .obj, ModelNet .off, Thingi10K .stl, Objaverse .glb) and the scanned .ply.
MESH_SUFFIXES = (".ply", ".stl", ".obj", ".off", ".glb", ".gltf")
GLOB_CHARACTERS = frozenset("*?[")


# --- finding meshes -------------------------------------------------------------------------


@dataclass(frozen=True)
class MeshFiles:
    """Mesh files found from command-line style inputs, and the folder their outputs mirror:
    the deepest folder common to every input's own root (a directory itself, a glob's fixed
    part, a file's folder)."""

    paths: list[Path]
    root: Path


def find_meshes(specs: Iterable[str | os.PathLike], exclude: Path | None = None) -> MeshFiles:
    """Files, directories (searched recursively for MESH_SUFFIXES), globs (`**` included) and
    `@list.txt` files (one input of these kinds per line; blank lines and `#` comments
    skipped; relative paths from the current folder), in the order given, each file once.
    Files under `exclude` (an output folder inside an input folder) are left out of
    directory and glob searches. MeshError names an input that matches nothing."""
    found: dict[Path, Path] = {}  # resolved -> as given (first occurrence)
    roots: list[Path] = []
    excluded = exclude.resolve() if exclude is not None else None

    def wanted(path: Path) -> bool:
        return excluded is None or not path.resolve().is_relative_to(excluded)

    def add(spec: str, listed_in: str | None) -> None:
        where = f" (listed in {listed_in})" if listed_in else ""
        path = Path(spec)
        if spec.startswith("@") and listed_in is None and not path.exists():
            add_list(Path(spec[1:]))
            return
        if path.is_dir():
            files = sorted(
                (p for p in path.rglob("*") if p.suffix.lower() in MESH_SUFFIXES and p.is_file()),
                key=lambda p: p.as_posix(),
            )
            files = [p for p in files if wanted(p)]
            if not files:
                raise MeshError(f"{spec}: no mesh files ({', '.join(MESH_SUFFIXES)}){where}")
            roots.append(path)
            for file in files:
                found.setdefault(file.resolve(), file)
            return
        if path.exists():
            roots.append(path.parent)
            found.setdefault(path.resolve(), path)
            return
        if GLOB_CHARACTERS & set(spec):
            matches = [
                Path(match)
                for match in sorted(glob.glob(spec, recursive=True))
                if Path(match).is_file() and wanted(Path(match))
            ]
            if not matches:
                raise MeshError(f"{spec}: no file matches{where}")
            roots.append(_glob_root(spec))
            for match in matches:
                found.setdefault(match.resolve(), match)
            return
        raise MeshError(f"{spec}: no such file{where}")

    def add_list(list_file: Path) -> None:
        try:
            lines = list_file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise MeshError(f"@{list_file}: cannot read the list ({exc})") from None
        entries = [line.strip() for line in lines]
        entries = [line for line in entries if line and not line.startswith("#")]
        if not entries:
            raise MeshError(f"@{list_file}: the list names no input")
        for entry in entries:
            add(entry, f"@{list_file}")

    for spec in specs:
        add(os.fspath(spec), None)
    if not found:
        raise MeshError("no input meshes")
    return MeshFiles(list(found.values()), common_root(roots))


def _glob_root(pattern: str) -> Path:
    """The folder part of a glob before its first wildcard (`meshes/**/*.ply` -> meshes)."""
    parts = Path(pattern).parts
    fixed = []
    for part in parts:
        if GLOB_CHARACTERS & set(part):
            break
        fixed.append(part)
    if len(fixed) == len(parts):  # the pattern's wildcard is in the last part only
        fixed = fixed[:-1]
    return Path(*fixed) if fixed else Path(".")


def common_root(folders: Iterable[Path]) -> Path:
    """The deepest folder that contains every one of `folders` (as an absolute path)."""
    resolved = [str(folder.resolve()) for folder in folders]
    return Path(os.path.commonpath(resolved)) if resolved else Path.cwd()


# --- naming outputs -----------------------------------------------------------------------------


def output_paths(
    paths: Sequence[Path], out_dir: str | os.PathLike, suffix: str, root: Path | None = None
) -> list[Path]:
    """Each input's output: its path below `root` (default: the inputs' deepest common
    folder), under `out_dir`, with `suffix`. OutputError if an input lies outside `root` or
    two inputs would write the same file (`a.ply` and `a.obj` both make `a.npz`)."""
    base = common_root(path.parent for path in paths) if root is None else root.resolve()
    outputs: list[Path] = []
    claimed: dict[Path, Path] = {}
    for path in paths:
        resolved = path.resolve()
        if not resolved.is_relative_to(base):
            raise OutputError(f"{path} is not inside {base}, whose tree the outputs mirror")
        output = Path(out_dir) / resolved.relative_to(base).with_suffix(suffix)
        if output in claimed:
            raise OutputError(
                f"{claimed[output]} and {path} would both write {output} (rename one, or "
                "voxelize them in separate batches)",
                path=output,
            )
        claimed[output] = path
        outputs.append(output)
    return outputs
