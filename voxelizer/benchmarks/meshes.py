"""Benchmark meshes: models by name from a models directory, files by path, and subdivided
models by suffix.

The directory is always the caller's (the benchmark's `--models-dir`): where a checkout keeps
its models is no business of the library.

`dragon-x16` is dragon.ply after two midpoint subdivisions (16 times the triangles). Each
step splits every triangle into four on the same plane, so the solid is exactly the same
and only the workload grows: the 6.4M-triangle `dragon-x64` stands in for the 7.2M-triangle
XYZ RGB Dragon without a 300 MB download.

`make_dataset` writes the many-meshes dataset of the end-to-end and datasets benchmarks:
each of BASES in each of FORMATS (a folder per format), turned, stretched and moved at
random (24 files).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from voxelizer.io import load_mesh
from voxelizer.mesh import Mesh

MESH_SUFFIXES = (".ply", ".stl", ".obj", ".off", ".glb")
SUBDIVIDED = re.compile(r"^(?P<base>.+)-x(?P<factor>\d+)$")

_cache: dict[tuple[str, int], Mesh] = {}  # (resolved base path, steps) -> mesh, for one run


def subdivide(vertices: np.ndarray, faces: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One midpoint step: every triangle (a, b, c) becomes four with the edge midpoints.

    Each edge gets one midpoint however many faces share it, so a closed mesh stays closed.
    The children keep their parent's winding and come in four blocks of T faces: face f of
    the result lies in face f % T of the input."""
    faces = np.asarray(faces, np.int64)
    count = len(faces)
    edges = np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]])
    low, high = edges.min(axis=1), edges.max(axis=1)
    _, first, inverse = np.unique(
        low * len(vertices) + high, return_index=True, return_inverse=True
    )
    midpoints = (vertices[low[first]] + vertices[high[first]]) * 0.5
    ab, bc, ca = len(vertices) + inverse.reshape(3, count)
    a, b, c = faces.T
    children = np.concatenate(
        [
            np.stack(corners, axis=1)
            for corners in ((a, ab, ca), (ab, b, bc), (ca, bc, c), (ab, bc, ca))
        ]
    )
    return np.concatenate([vertices, midpoints]), children


def subdivided(mesh: Mesh, steps: int) -> Mesh:
    """`mesh` after `steps` midpoint subdivisions (4**steps times the triangles)."""
    vertices, faces = mesh.vertices, mesh.faces
    for _ in range(steps):
        vertices, faces = subdivide(vertices, faces)
    return Mesh(vertices, faces)


def resolve_model(spec: str, models_dir: Path | None = None) -> tuple[str, Mesh]:
    """(name, mesh) for a file path, a model name in `models_dir`, or NAME-xF with F a power
    of four (NAME a name or a file path). Subdivided meshes are kept for the rest of the run,
    each level built from the one below it."""
    path = Path(spec)
    if path.suffix and path.is_file():
        return path.stem, load_mesh(path)
    base, steps = check_model(spec, models_dir)
    if steps:
        done = max((s for key, s in _cache if key == str(base) and s <= steps), default=0)
        mesh = _cache[str(base), done] if done else load_mesh(base)
        for level in range(done + 1, steps + 1):
            mesh = subdivided(mesh, 1)
            _cache[str(base), level] = mesh
        return spec, mesh
    return spec, load_mesh(base)


def check_model(spec: str, models_dir: Path | None = None) -> tuple[Path, int]:
    """(file, subdivision steps) that `resolve_model(spec)` would use, without loading
    anything, so that a run can refuse a misspelt model before measuring; ValueError says
    what is wrong."""
    match = None if Path(spec).is_file() else SUBDIVIDED.match(spec)
    if match is None:
        return model_path(spec, models_dir), 0
    factor = int(match["factor"])
    steps = factor.bit_length() // 2
    if factor < 4 or 4**steps != factor:
        raise ValueError(f"{spec}: the factor after -x must be a power of four (4, 16, 64)")
    return model_path(match["base"], models_dir), steps


def model_path(name: str, models_dir: Path | None = None) -> Path:
    """The file of a model given by path or by name in `models_dir` (None: paths only)."""
    if Path(name).suffix and Path(name).is_file():
        return Path(name)
    if models_dir is None:
        raise ValueError(f"no file {name!r}, and no models directory to look the name up in")
    candidates = sorted(Path(models_dir).glob(f"{name}.*"))
    meshes = [p for p in candidates if p.suffix.lower() in MESH_SUFFIXES]
    if not meshes:
        known = sorted({p.stem for p in Path(models_dir).glob("*.*") if p.suffix != ".md"})
        raise ValueError(
            f"no model {name!r} in {models_dir} (known: {', '.join(known) or 'none'}; "
            "or give a file path)"
        )
    return meshes[0]


# Dataset bases: (shared model, midpoint subdivisions); all between 5k and 100k triangles.
BASES = (
    ("bunny", 0),
    ("dragon", 0),
    ("armadillo", 0),
    ("torus", 0),
    ("torus", 1),
    ("featuretype", 1),
    ("suzanne", 2),
    ("bunny_scan", 0),
)
FORMATS = ("ply", "stl", "obj")


def model_arrays(models_dir: Path, name: str, steps: int) -> tuple[np.ndarray, np.ndarray]:
    path = next(p for p in sorted(models_dir.glob(f"{name}.*")) if p.suffix in (".ply", ".stl"))
    mesh = load_mesh(path)
    vertices, faces = mesh.vertices, mesh.faces
    for _ in range(steps):
        vertices, faces = subdivide(vertices, faces)
    return vertices, faces


def write_binary_ply(path: Path, vertices: np.ndarray, faces: np.ndarray) -> None:
    header = (
        "ply\nformat binary_little_endian 1.0\n"
        f"element vertex {len(vertices)}\nproperty float x\nproperty float y\nproperty float z\n"
        f"element face {len(faces)}\nproperty list uchar int vertex_indices\nend_header\n"
    )
    rows = np.empty(len(faces), [("n", "u1"), ("corners", "<i4", (3,))])
    rows["n"], rows["corners"] = 3, faces
    with open(path, "wb") as file:
        file.write(header.encode())
        file.write(np.ascontiguousarray(vertices, "<f4").tobytes())
        file.write(rows.tobytes())


def make_dataset(models_dir: Path, folder: Path, seed: int = 0, copies: int = 1) -> list[Path]:
    """Each base in each format, `copies` times, every copy turned, stretched and moved at
    random (8 bases x 3 formats x copies files; the first copy is the same for any copies)."""
    import trimesh  # writing STL and OBJ: a benchmark-only use

    folder.mkdir(parents=True, exist_ok=True)
    draws = [np.random.default_rng(seed)]
    draws += [np.random.default_rng([seed, copy]) for copy in range(1, copies)]
    files = []
    for copy, rng in enumerate(draws):
        suffix = "" if copy == 0 else f"-{copy}"
        for index, (name, steps) in enumerate(BASES):
            vertices, faces = model_arrays(models_dir, name, steps)
            for fmt in FORMATS:
                # One folder per format: a batch's outputs (name.npz) do not collide.
                path = folder / fmt / f"{index:02d}-{name}-x{4**steps}{suffix}.{fmt}"
                path.parent.mkdir(exist_ok=True)
                files.append(path)
                turn, _ = np.linalg.qr(rng.normal(size=(3, 3)))
                stretch, shift = rng.uniform(0.5, 2.0, 3), rng.uniform(-5, 5, 3)
                if path.is_file():
                    continue
                moved = (vertices @ turn) * stretch + shift
                if fmt == "ply":
                    write_binary_ply(path, moved, faces)
                else:
                    trimesh.Trimesh(moved, faces, process=False).export(path)
    return files
