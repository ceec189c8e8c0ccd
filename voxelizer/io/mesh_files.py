"""Which mesh files a batch's inputs name, and where each one's output goes.

Command-line style inputs (files, directories, globs, @list.txt) become a list of files and
the folder their outputs mirror. Paths only: nothing here reads a mesh or touches a device,
so the command line imports this without the batch machinery."""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import ArgumentError, MemoryBudgetError, MeshError, OutputError
from .files import read_regular, resolved

# What a directory is searched for (case-insensitive): the mesh files of common datasets
# (ShapeNet .obj, ModelNet .off, Thingi10K .stl, Objaverse .glb) and the scanned .ply.
MESH_SUFFIXES = (".ply", ".stl", ".obj", ".off", ".glb", ".gltf")
GLOB_CHARACTERS = frozenset("*?[")


# --- finding meshes -------------------------------------------------------------------------


@dataclass(frozen=True)
class MeshFiles:
    """Mesh files found from command-line style inputs, and the folder their outputs mirror:
    the deepest folder common to every input's own root (a directory itself, a glob's fixed
    part, a file's folder). `lists`: the @list.txt files read (inputs, not outputs)."""

    paths: list[Path]
    root: Path
    lists: tuple[Path, ...] = ()


def absolute(path: str | os.PathLike) -> Path:
    """The path made absolute as written, `..` taken lexically, symlinks kept: the name a
    user gave, which outputs mirror (a file behind a link is named by the link)."""
    return Path(os.path.abspath(path))


def find_meshes(specs: Iterable[str | os.PathLike], exclude: Path | None = None) -> MeshFiles:
    """Files, directories (searched recursively for MESH_SUFFIXES), globs (`**` included) and
    `@list.txt` files (one input of these kinds per line; blank lines and `#` comments
    skipped; relative paths from the current folder), in the order given, each path once.
    Paths are taken as given: two symlinks to one file are two inputs, and a link inside a
    folder is found there even where it is broken or loops (it then fails as one mesh).
    Files under `exclude` (an output folder inside an input folder) are left out of
    directory and glob searches. MeshError names an input that matches nothing."""
    found: dict[str, Path] = {}  # absolute (as text) -> as given (first occurrence)
    roots: list[Path] = []
    lists: list[Path] = []
    left_out = _left_out(exclude)

    def add(spec: str, listed_in: str | None) -> None:
        where = f" (listed in {listed_in})" if listed_in else ""
        path = Path(spec)
        if spec.startswith("@") and listed_in is None and not os.path.lexists(path):
            add_list(Path(spec[1:]))
            return
        if os.path.isdir(path):
            candidates = sorted(_meshes_under(path))
            files = [name for name in candidates if not left_out(name)]
            if not files:
                raise MeshError(_nothing_found(spec, where, bool(candidates), exclude))
            roots.append(path)
            for name in files:
                key = os.path.abspath(name)
                if key not in found:
                    found[key] = Path(name)
            return
        if os.path.lexists(path):  # a file, or a link (a broken one fails as its mesh)
            roots.append(path.parent)
            found.setdefault(os.path.abspath(path), path)
            return
        if GLOB_CHARACTERS & set(spec):
            globbed = [
                Path(match)
                for match in sorted(glob.glob(spec, recursive=True))
                if os.path.isfile(match) or os.path.islink(match)
            ]
            matches = [match for match in globbed if not left_out(os.fspath(match))]
            if not matches:
                raise MeshError(_nothing_found(spec, where, bool(globbed), exclude))
            roots.append(_glob_root(spec))
            for match in matches:
                found.setdefault(os.path.abspath(match), match)
            return
        raise MeshError(f"{spec}: no such file{where}")

    def add_list(list_file: Path) -> None:
        try:  # a regular file only: a FIFO or /dev/zero named as the list would never end
            lines = read_regular(list_file, MeshError).decode("utf-8").splitlines()
        except (MeshError, MemoryBudgetError, UnicodeDecodeError) as exc:
            reason = str(exc).removeprefix(f"{list_file}: ")
            raise MeshError(f"@{list_file}: cannot read the list ({reason})") from None
        lists.append(list_file)
        entries = [line.strip() for line in lines]
        entries = [line for line in entries if line and not line.startswith("#")]
        if not entries:
            raise MeshError(f"@{list_file}: the list names no input")
        for entry in entries:
            add(entry, f"@{list_file}")

    for spec in _specs(specs):
        add(spec, None)
    if not found:
        raise MeshError("no input meshes")
    return MeshFiles(list(found.values()), common_root(roots), tuple(lists))


def _meshes_under(folder: Path) -> list[str]:
    """The files and symlinks below `folder` (symlinked folders not entered) whose names end
    in MESH_SUFFIXES (as Path.suffix reads a name), as text joined to `folder` as written:
    one scandir per folder, no Path per entry (a dataset's folder holds thousands)."""
    found: list[str] = []
    pending = [os.fspath(folder)]
    while pending:
        top = pending.pop()
        try:
            with os.scandir(top) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                    elif _suffix(entry.name).lower() in MESH_SUFFIXES and (
                        entry.is_symlink() or entry.is_file()
                    ):
                        found.append(entry.path)
        except PermissionError:  # (a folder it may not read: passed over, as rglob does)
            continue
    return found


def _suffix(name: str) -> str:
    """A file name's suffix as Path.suffix reads it (none for `.ply` or `a.`)."""
    dot = name.rfind(".")
    return name[dot:] if 0 < dot < len(name) - 1 else ""


def _within(path: str, folder: str) -> bool:
    """Whether the absolute, normalized `path` is `folder` or lies below it (as
    Path.is_relative_to compares them, part by part)."""
    return path == folder or path.startswith(folder if folder.endswith("/") else folder + "/")


def _left_out(exclude: Path | None) -> Callable[[str], bool]:
    """Whether a found file lies in the output folder `exclude`, by the path as given or
    by where its folders really are."""
    if exclude is None:
        return lambda path: False
    given, real = os.path.abspath(exclude), str(resolved(exclude))
    folders = _Folders()
    return lambda path: _within(os.path.abspath(path), given) or _within(folders.entry(path), real)


def _nothing_found(spec: str, where: str, any_left_out: bool, exclude: Path | None) -> str:
    """Why an input named no mesh file: none there, or every one in the output folder."""
    if any_left_out:
        return (
            f"{spec}: its mesh files are all in the output folder {exclude}, which a batch "
            f"does not read (its outputs go there; choose another output folder){where}"
        )
    nothing = "no file matches" if GLOB_CHARACTERS & set(spec) else "no mesh files"
    return f"{spec}: {nothing} ({', '.join(MESH_SUFFIXES)}){where}"


def _specs(specs: object) -> list[str]:
    """The inputs as text: one path (a str or a Path) or an iterable of them; ArgumentError
    for anything else (a str is one input, never its characters)."""
    if isinstance(specs, (str, os.PathLike)):
        specs = [specs]
    if not isinstance(specs, Iterable):
        raise ArgumentError(f"find_meshes takes paths, not {type(specs).__name__}")
    texts = []
    for spec in specs:
        if not isinstance(spec, (str, os.PathLike)):
            raise ArgumentError(f"find_meshes takes paths, not {type(spec).__name__}")
        texts.append(os.fspath(spec))
    return texts


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
    """The deepest folder that contains every one of `folders` (absolute, as written)."""
    given = {str(absolute(folder)) for folder in folders}
    return Path(os.path.commonpath(sorted(given))) if given else Path.cwd()


# --- naming outputs -----------------------------------------------------------------------------


def output_paths(
    paths: Sequence[Path], out_dir: str | os.PathLike, suffix: str, root: Path | None = None
) -> list[Path]:
    """Each input's output: its path below `root` (default: the inputs' deepest common
    folder), under `out_dir`, with `suffix`; paths as given (a file behind a symlink is
    named by the link). OutputError if an input lies outside `root` or two inputs would
    write the same file (`a.ply` and `a.obj` both make `a.npz`)."""
    base = common_root(path.parent for path in paths) if root is None else absolute(root)
    folder, out = str(base), Path(out_dir)
    start = len(folder) if folder.endswith("/") else len(folder) + 1
    outputs: list[Path] = []
    claimed: dict[Path, Path] = {}
    for path in paths:
        given = os.path.abspath(path)
        if not _within(given, folder):
            raise OutputError(f"{path} is not inside {base}, whose tree the outputs mirror")
        output = out / _with_suffix(given[start:], suffix)
        if output in claimed:
            raise OutputError(
                f"{claimed[output]} and {path} would both write {output} (rename one, or "
                "voxelize them in separate batches)",
                path=output,
            )
        claimed[output] = path
        outputs.append(output)
    return outputs


def _with_suffix(relative: str, suffix: str) -> str | Path:
    """`relative` (text below the outputs' root) with its name's suffix replaced, as
    Path.with_suffix does it; Path's own method (and its error) for a name it refuses."""
    folder, slash, name = relative.rpartition("/")
    usual = suffix.startswith(".") and len(suffix) > 1 and "/" not in suffix
    if not usual or name in ("", ".", ".."):
        return Path(relative).with_suffix(suffix)
    old = _suffix(name)
    return f"{folder}{slash}{name[: len(name) - len(old)] if old else name}{suffix}"


def refuse_outputs_of_inputs(inputs: Sequence[Path], outputs: Sequence[Path | None]) -> None:
    """OutputError if an output would replace one of `inputs` (see replaced_input)."""
    found = replaced_input(inputs, outputs)
    if found is not None:
        output, replaced = found
        raise OutputError(
            f"{output}: an output would replace the input {replaced} (choose another output "
            "folder or format)",
            path=output,
        )


def replaced_input(
    inputs: Sequence[Path], outputs: Sequence[Path | None]
) -> tuple[Path, Path] | None:
    """The first (output, input) where writing the output would replace the input: the same
    path, a path to it through a symlinked folder, the file a symlinked input points to,
    or, for an output that exists, a hard link to it. None where no output would."""
    folders = _Folders()
    entries: dict[str, Path] = {}
    for path in inputs:
        entries.setdefault(folders.entry(path), path)
        if os.path.islink(path):  # replacing the link's target loses the input too
            entries.setdefault(str(resolved(path)), path)
    identities: dict[tuple[int, int], Path] | None = None
    for output in outputs:
        if output is None:
            continue
        replaced = entries.get(folders.entry(output))
        if replaced is None and os.path.lexists(output):
            if identities is None:
                identities = _identities(inputs)
            replaced = identities.get(_identity(output) or (-1, -1))
        if replaced is not None:
            return output, replaced
    return None


class _Folders:
    """Folders resolved once each: a batch's files share a few folders."""

    def __init__(self) -> None:
        self._real: dict[str, str] = {}

    def entry(self, path: str | os.PathLike) -> str:
        """Where the directory entry `path` really is, as text: its folder resolved
        (symlinked folders followed), its own name kept (a symlink is itself, not its
        target)."""
        given = os.path.abspath(path)
        folder, name = os.path.split(given)
        real = self._real.get(folder)
        if real is None:
            real = self._real[folder] = str(resolved(folder))
        return os.path.join(real, name) if name else real


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _identities(paths: Sequence[Path]) -> dict[tuple[int, int], Path]:
    """The (device, inode) of each file that exists, followed through symlinks."""
    found: dict[tuple[int, int], Path] = {}
    for path in paths:
        identity = _identity(path)
        if identity is not None:
            found.setdefault(identity, path)
    return found
