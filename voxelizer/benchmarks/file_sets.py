"""The sets of files the datasets benchmark voxelizes, and what each holds.

- `made`: make_dataset's files (voxelizer/benchmarks/meshes.py): 8 bases x binary PLY,
  binary STL and OBJ, each copy turned, stretched and moved at random (24 files a copy).
- `real`: mesh files as they come, and the broken files a crawl of real files also finds.
  Each mesh file directly in the folders given (the benchmark's `--real-from`, by default
  its `--models-dir`), at its full size, with the files an OBJ names beside it (its MTL and
  textures: copied along); three text forms a crawl holds besides the binary ones (the
  smallest binary STL as ASCII STL, the smallest binary PLY as ASCII PLY, the largest binary
  PLY as OBJ); and BROKEN, the
  files that must each end as one error line: a PLY and an STL cut off part-way, an empty
  file, a text file named .obj, random bytes named .stl, a PLY of points without faces.
  Every copy is a folder of its own; the files of copy N > 0 differ from the originals in
  bytes that leave the mesh alone (a PLY comment, a binary STL's header, an OBJ comment,
  the ASCII STL's solid name), so that no cache keyed by path or content sees a copy twice.

`holds` lists a set: the files by format, the triangle range of the meshes, the broken
files. Paths come from the caller; none is built in here.
"""

from __future__ import annotations

import math
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from voxelizer.benchmarks.meshes import make_dataset
from voxelizer.io import load_mesh

MESH_SUFFIXES = (".ply", ".stl", ".obj", ".off", ".glb")
SIDECAR_SUFFIXES = (".mtl", ".png", ".jpg", ".jpeg")
BROKEN = (
    "cut-off binary PLY",
    "cut-off binary STL",
    "empty file",
    "text file named .obj",
    "random bytes named .stl",
    "PLY of points, no faces",
)
_NOTES = "Thanks for downloading this model!\nLicence: CC-BY 4.0. Open it in any viewer.\n"


@dataclass(frozen=True)
class FileSet:
    """A set's files in the order the benchmark voxelizes them, the folder that holds them
    (the batch command reads it whole) and the files that must each fail with one line."""

    name: str
    folder: Path
    files: list[Path]
    broken: frozenset[Path] = field(default_factory=frozenset)
    holds: dict[str, Any] = field(default_factory=dict)


def made_set(models_dir: Path, folder: Path, copies: int) -> FileSet:
    files = make_dataset(models_dir, folder, copies=copies)
    return FileSet("made", folder, files, holds=holds(files, frozenset(), copies))


@dataclass(frozen=True)
class _Source:
    """One distinct file of the real set: written from `data` (bytes of copy 0), as `kind`."""

    name: str
    data: bytes
    kind: str
    broken: bool = False
    sidecars: tuple[Path, ...] = ()


def real_set(sources: list[Path], folder: Path, copies: int | None, size: int) -> FileSet:
    """The real set from the mesh files directly in `sources` (folders), in `folder`:
    `copies` copies (None: as many as make about `size` files)."""
    distinct = _real_sources(sources)
    if copies is None:
        copies = max(1, math.ceil(size / len(distinct)))
    folder.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    broken: set[Path] = set()
    for copy in range(copies):
        into = folder / f"c{copy:02d}"
        into.mkdir(exist_ok=True)
        for source in distinct:
            path = into / f"c{copy:02d}-{source.name}"  # a stem of its own in the whole set
            files.append(path)
            if source.broken:
                broken.add(path)
            if not path.is_file():
                path.write_bytes(marked(source.data, path.suffix.lower(), copy, source.kind))
            for sidecar in source.sidecars:
                if not (into / sidecar.name).is_file():
                    shutil.copyfile(sidecar, into / sidecar.name)
    found = frozenset(broken)
    return FileSet("real", folder, files, found, holds(files, found, copies))


def _real_sources(sources: list[Path]) -> list[_Source]:
    """The distinct files of one copy: the meshes as they come, their text forms, the
    broken files (module docstring); the meshes first, so that a run warms up on one."""
    missing = [str(folder) for folder in sources if not Path(folder).is_dir()]
    if missing:
        raise ValueError(f"no folder {', '.join(missing)}")
    meshes = [
        path
        for folder in sources
        for path in sorted(Path(folder).iterdir())
        if path.suffix.lower() in MESH_SUFFIXES and path.is_file()
    ]
    if not meshes:
        raise ValueError(f"no mesh files ({', '.join(MESH_SUFFIXES)}) in {sources}")
    found: list[_Source] = []
    for path in meshes:  # (a name in two folders: the second with its folder's in front)
        name = path.name
        if any(source.name == name for source in found):
            name = f"{path.parent.name}-{name}"
        found.append(_Source(name, path.read_bytes(), _kind(path), sidecars=_sidecars(path)))
    plys = _binary(meshes, ".ply")
    stls = _binary(meshes, ".stl")
    found += _text_forms(plys, stls)
    return found + _broken_sources(plys, stls)


def _binary(meshes: list[Path], suffix: str) -> list[Path]:
    """The binary files of `suffix` among `meshes`, smallest first."""
    return sorted(
        (path for path in meshes if path.suffix.lower() == suffix and "binary" in _kind(path)),
        key=lambda path: path.stat().st_size,
    )


def _text_forms(plys: list[Path], stls: list[Path]) -> list[_Source]:
    """The forms a crawl holds besides binary files: the smallest binary STL as ASCII STL,
    the smallest binary PLY as ASCII PLY, the largest binary PLY as OBJ."""
    import trimesh  # writing text forms: a benchmark-only use

    found = []
    forms: tuple[tuple[list[Path], str, dict[str, Any], str, str], ...] = (
        (stls[:1], "stl_ascii", {}, "ascii.stl", "STL (ASCII)"),
        (plys[:1], "ply", {"encoding": "ascii"}, "ascii.ply", "PLY (ASCII)"),
        (plys[-1:], "obj", {"include_normals": False}, "obj.obj", "OBJ"),
    )
    for paths, file_type, options, ending, kind in forms:
        for path in paths:
            mesh = load_mesh(path)
            shape = trimesh.Trimesh(mesh.vertices, mesh.faces, process=False)
            data = shape.export(file_type=file_type, **options)
            data = data.encode() if isinstance(data, str) else data
            assert isinstance(data, bytes)  # (a scene would export a dict)
            found.append(_Source(f"{path.stem}-{ending}", data, kind))
    return found


def _broken_sources(plys: list[Path], stls: list[Path]) -> list[_Source]:
    """BROKEN, in its order; the cut-off files from the largest binary PLY and STL."""
    rng = np.random.default_rng(0)
    points = (
        "ply\nformat ascii 1.0\nelement vertex 4\nproperty float x\nproperty float y\n"
        "property float z\nend_header\n0 0 0\n1 0 0\n0 1 0\n0 0 1\n"
    )
    found = []
    if plys:
        whole = plys[-1].read_bytes()
        found.append(_Source(f"cut-{plys[-1].name}", whole[: len(whole) // 2], BROKEN[0], True))
    if stls:
        whole = stls[-1].read_bytes()
        cut = whole[: len(whole) * 3 // 5 + 7]
        found.append(_Source(f"cut-{stls[-1].name}", cut, BROKEN[1], True))
    found += [
        _Source("empty.stl", b"", BROKEN[2], True),
        _Source("readme.obj", _NOTES.encode(), BROKEN[3], True),
        _Source("noise.stl", rng.bytes(4096), BROKEN[4], True),
        _Source("points.ply", points.encode(), BROKEN[5], True),
    ]
    return found


def _kind(path: Path) -> str:
    """`PLY (binary)`, `STL (ASCII)`, `OBJ`, ...: a file's format as its bytes say."""
    suffix = path.suffix.lower().lstrip(".").upper()
    with open(path, "rb") as file:
        head = file.read(512)
    if suffix == "PLY":
        return "PLY (ASCII)" if b"format ascii" in head else "PLY (binary)"
    if suffix == "STL":
        solid = head.lstrip().startswith(b"solid") and b"facet" in head
        return "STL (ASCII)" if solid else "STL (binary)"
    return suffix


def _sidecars(path: Path) -> tuple[Path, ...]:
    """The files an OBJ names that lie beside it: its MTL libraries and their textures."""
    if path.suffix.lower() != ".obj":
        return ()
    found: list[Path] = []
    for line in path.read_text(errors="replace").splitlines():
        words = line.split()
        if len(words) > 1 and words[0] in ("mtllib", "map_Kd", "map_Ka", "map_Ks", "map_d"):
            named = path.parent / words[-1]
            if named.suffix.lower() in SIDECAR_SUFFIXES and named.is_file() and named not in found:
                found.append(named)
                if named.suffix.lower() == ".mtl":
                    found += [p for p in _sidecars_of_mtl(named) if p not in found]
    return tuple(found)


def _sidecars_of_mtl(mtl: Path) -> list[Path]:
    names = [line.split()[-1] for line in mtl.read_text(errors="replace").splitlines()
             if line.split()[:1] and line.split()[0].startswith("map_")]  # fmt: skip
    return [mtl.parent / name for name in names if (mtl.parent / name).is_file()]


def marked(data: bytes, suffix: str, copy: int, kind: str) -> bytes:
    """`data` as copy `copy` writes it: the same mesh (or the same fault) in other bytes;
    copy 0 as it came."""
    if copy == 0 or not data:
        return data
    tag = f"copy {copy}".encode()
    if suffix == ".ply" and data.startswith(b"ply") and data.count(b"\n", 0, 200) >= 2:
        second = data.index(b"\n", data.index(b"\n") + 1) + 1  # after the format line
        return data[:second] + b"comment " + tag + b"\n" + data[second:]
    if suffix == ".stl" and kind == "STL (ASCII)":
        return b"solid " + tag.replace(b" ", b"-") + data[data.index(b"\n") :]
    if suffix == ".stl" and len(data) >= 80:  # a binary STL's header is free text
        return tag.ljust(80, b" ") + data[80:]
    if suffix == ".obj":
        return b"# " + tag + b"\n" + data
    return data


def limited(found: FileSet, limit: int | None, work: Path) -> FileSet:
    """The first `limit` files of a set (all: None) in a folder of their own under `work`
    (the batch command reads a whole folder), an OBJ's MTL and textures copied along."""
    if limit is None:
        return found
    folder = work / f"{found.name}-subset"
    shutil.rmtree(folder, ignore_errors=True)
    files, broken = [], set()
    for path in found.files[:limit]:
        into = folder / path.parent.relative_to(found.folder)
        into.mkdir(parents=True, exist_ok=True)
        files.append(Path(shutil.copy(path, into / path.name)))
        if path in found.broken:
            broken.add(files[-1])
        for sidecar in _sidecars(path):
            shutil.copy(sidecar, into / sidecar.name)
    return FileSet(found.name, folder, files, frozenset(broken), holds(files, frozenset(broken), 1))


def holds(files: list[Path], broken: frozenset[Path], copies: int) -> dict[str, Any]:
    """What a set holds: files by format, the triangle range of its meshes (read from the
    first copy), how many are broken and which kinds."""
    per_copy = len(files) // copies
    first = files[:per_copy]
    triangles = [len(load_mesh(path).faces) for path in first if path not in broken]
    formats = Counter(_kind(path) for path in files if path not in broken)
    broken_names = [path.name.split("-", 1)[-1] for path in first if path in broken]
    return {
        "files": len(files),
        "distinct": per_copy,
        "copies": copies,
        "meshes": len(files) - len(broken),
        "broken": len(broken),
        "formats": dict(sorted(formats.items())),
        "triangles": [min(triangles), max(triangles)] if triangles else None,
        "broken_files": broken_names,
    }


def holds_text(name: str, found: dict[str, Any]) -> str:
    """One line: what set `name` holds."""
    formats = ", ".join(f"{count} {kind}" for kind, count in found["formats"].items())
    low, high = found["triangles"] or (0, 0)
    text = (
        f"set {name}: {found['files']} files ({found['distinct']} distinct x "
        f"{found['copies']} copies): {found['meshes']} meshes of {low:,}-{high:,} triangles "
        f"({formats})"
    )
    if found["broken"]:
        text += f", {found['broken']} broken ({', '.join(found['broken_files'])} each copy)"
    return text
