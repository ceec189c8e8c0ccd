"""What a mesh file says beyond its triangles: the part of each face, and where each face's
colour comes from.

`Parts`: a part id per face and the parts' names (OBJ objects and groups, PLY face
properties, STL solids, the primitives of a glTF scene). `Appearance`: per face one colour
source (a material's colour, a texture through the corners' UVs, the corners' vertex
colours, or the face's own colour) and the arrays those sources read. A mesh without either
has None: the readers build them only for files that have them.

Textures are read on first use (Pillow, an optional dependency), so that reading a mesh
costs nothing for colours nobody asks for; a texture that cannot be read is a problem the
colours warn about (ColorWarning), and its faces take their material's colour.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_COLOR = (200, 200, 200, 255)
"""RGBA of a face that has no colour of its own (the light grey of an uncoloured .vox)."""

# Colour sources, one per face (Appearance.sources).
MATERIAL = 0  # the face's material colour (DEFAULT_COLOR without a material)
TEXTURE = 1  # the material's texture at the UV of the point, times the material colour
VERTEX = 2  # the vertex colours of the face's corners, interpolated at the point
FACE = 3  # the face's own colour
SOURCE_NAMES = ("material", "texture", "vertex", "face")

MAX_PARTS = 65535  # labels are uint16, 0 for empty voxels


@dataclass(frozen=True, eq=False)
class Parts:
    """The part of every face: `ids` (T,) int32 in [0, len(names)), and each part's name
    (names may repeat: two instances of one glTF mesh are two parts of one name)."""

    ids: np.ndarray
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        ids = np.ascontiguousarray(self.ids, np.int32)
        ids.flags.writeable = False
        object.__setattr__(self, "ids", ids)
        object.__setattr__(self, "names", tuple(str(name) for name in self.names))
        if ids.ndim != 1 or (ids.size and (ids.min() < 0 or ids.max() >= len(self.names))):
            raise ValueError(f"part ids must be (T,) integers in [0, {len(self.names)})")
        if len(self.names) > MAX_PARTS:
            raise ValueError(f"{len(self.names):,} parts: at most {MAX_PARTS:,} are supported")

    @property
    def count(self) -> int:
        return len(self.names)

    @classmethod
    def of_groups(cls, groups: np.ndarray, names: Sequence[str]) -> Parts:
        """Parts of faces given by group: `groups` (T,) indexes `names`, and groups of one
        name are one part. Parts are numbered in the order their first face comes; names
        no face uses are dropped."""
        names_array = np.array([str(name) for name in names] or [""], dtype=object)
        unique, name_of_group = np.unique(names_array, return_inverse=True)
        groups = np.asarray(groups, np.int64)
        # Files list faces group by group: work on the runs of one group, not on the faces.
        starts = (
            np.concatenate(([0], np.flatnonzero(np.diff(groups)) + 1)) if len(groups) else groups
        )
        run_name = name_of_group.reshape(-1)[groups[starts]]
        used, first = np.unique(run_name, return_index=True)
        order = used[np.argsort(first, kind="stable")]
        number = np.zeros(len(unique), np.int32)
        number[order] = np.arange(len(order), dtype=np.int32)
        lengths = np.diff(np.append(starts, len(groups)))
        return cls(np.repeat(number[run_name], lengths), tuple(str(unique[i]) for i in order))

    @classmethod
    def single(cls, faces: int, name: str) -> Parts:
        """One part holding every face."""
        return cls(np.zeros(faces, np.int32), (name,))


class Texture:
    """An image read on first use: `load()` gives it as an array or a PIL image. `pixels()`
    is RGBA uint8 (H, W, 4), or None when it cannot be read: `problem` then says why (the
    colours warn with it, voxelizer.errors.ColorWarning)."""

    def __init__(self, name: str, load: Callable[[], object]) -> None:
        self.name = name
        self._load = load
        self._pixels: np.ndarray | None = None
        self.problem = ""

    def pixels(self) -> np.ndarray | None:
        if self._pixels is None and not self.problem:
            try:
                self._pixels = rgba_pixels(self._load())
            except Exception as exc:  # Pillow and the loaders raise many types
                detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                self.problem = (
                    f"texture {self.name}: cannot read it ({detail or type(exc).__name__}); "
                    "its faces take their material's colour"
                )
        return self._pixels


def rgba_pixels(image: object) -> np.ndarray:
    """RGBA uint8 (H, W, 4) of a PIL image or an array (grey, grey+alpha, RGB or RGBA)."""
    if hasattr(image, "convert"):  # a PIL image: Pillow converts every mode it reads
        image = image.convert("RGBA")
    array = np.asarray(image)
    if array.ndim == 2:
        array = array[:, :, None]
    if array.ndim != 3 or array.shape[2] not in (1, 2, 3, 4) or 0 in array.shape[:2]:
        raise ValueError(f"not an image: an array of shape {array.shape}")
    if array.dtype != np.uint8:
        raise ValueError(f"not an 8-bit image: {array.dtype}")
    channels = array.shape[2]
    out = np.full(array.shape[:2] + (4,), 255, np.uint8)
    if channels in (1, 2):
        out[:, :, :3] = array[:, :, :1]
    else:
        out[:, :, :3] = array[:, :, :3]
    if channels in (2, 4):
        out[:, :, 3] = array[:, :, -1]
    out.flags.writeable = False
    return out


@dataclass(frozen=True, eq=False)
class Material:
    """A material's diffuse (base) colour, RGBA uint8, and its texture if it has one, with
    the colour the texture's is multiplied by (`tint`; None: `color`, glTF's rule; an OBJ
    material's texture is taken alone, tint white). `color` is what a face takes where the
    texture cannot be read."""

    name: str
    color: tuple[int, int, int, int] = DEFAULT_COLOR
    texture: Texture | None = None
    tint: tuple[int, int, int, int] | None = None


@dataclass(frozen=True, eq=False)
class Appearance:
    """Where the colour of each of T faces comes from.

    sources (T,) uint8: MATERIAL, TEXTURE, VERTEX or FACE. face_materials (T,) int32: the
    face's material (-1: none, DEFAULT_COLOR). corner_uvs (T, 3, 2) float64: the UV of each
    corner, for TEXTURE faces (None when no face has one). vertex_colors (V, 4) uint8 for
    VERTEX faces, face_colors (T, 4) uint8 for FACE faces. `problems`: what the reader found
    wrong with the colours (a material library that cannot be read), warned when colours
    are made."""

    sources: np.ndarray
    face_materials: np.ndarray
    materials: tuple[Material, ...] = ()
    corner_uvs: np.ndarray | None = None
    vertex_colors: np.ndarray | None = None
    face_colors: np.ndarray | None = None
    problems: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        count = len(self.sources)
        checks = {
            "sources": (self.sources, np.uint8, (count,)),
            "face_materials": (self.face_materials, np.int32, (count,)),
            "corner_uvs": (self.corner_uvs, np.float64, (count, 3, 2)),
            "vertex_colors": (self.vertex_colors, np.uint8, None),
            "face_colors": (self.face_colors, np.uint8, (count, 4)),
        }
        for name, (array, dtype, shape) in checks.items():
            if array is None:
                continue
            converted = np.ascontiguousarray(array, dtype)
            if shape is not None and converted.shape != shape:
                raise ValueError(f"{name} must have shape {shape}, not {converted.shape}")
            converted.flags.writeable = False
            object.__setattr__(self, name, converted)
        if self.vertex_colors is not None and self.vertex_colors.shape[1:] != (4,):
            raise ValueError("vertex_colors must have shape (V, 4)")
        if self.face_materials.size and self.face_materials.max() >= len(self.materials):
            raise ValueError("a face refers to a material that does not exist")
        needed = {TEXTURE: self.corner_uvs, VERTEX: self.vertex_colors, FACE: self.face_colors}
        for source, array in needed.items():
            if array is None and (self.sources == source).any():
                raise ValueError(f"faces of source {SOURCE_NAMES[source]} without their array")

    @classmethod
    def of_materials(
        cls,
        face_materials: np.ndarray,
        materials: Sequence[Material],
        corner_uvs: np.ndarray | None = None,
        problems: Sequence[str] = (),
    ) -> Appearance:
        """Faces coloured by their materials: TEXTURE where the material has a texture and
        the face has UVs (corner_uvs not NaN), else MATERIAL."""
        face_materials = np.asarray(face_materials, np.int32)
        sources = np.full(len(face_materials), MATERIAL, np.uint8)
        textured = np.array([m.texture is not None for m in materials] + [False], bool)
        if corner_uvs is not None:
            has_uv = ~np.isnan(corner_uvs).any(axis=(1, 2))
            sources[textured[face_materials] & has_uv] = TEXTURE
        return cls(sources, face_materials, tuple(materials), corner_uvs, problems=tuple(problems))

    def texture_tints(self) -> np.ndarray:
        """(M, 4) uint8: what each material's texture colour is multiplied by."""
        rows = [m.color if m.tint is None else m.tint for m in self.materials]
        return np.array(rows + [DEFAULT_COLOR], np.uint8)

    def material_colors(self) -> np.ndarray:
        """(T, 4) uint8: each face's material colour (DEFAULT_COLOR without a material)."""
        table = np.array([m.color for m in self.materials] + [DEFAULT_COLOR], np.uint8)
        return table[self.face_materials]  # -1: the last row, the default


def joined_parts(
    parts: Sequence[Parts | None], face_counts: Sequence[int], names: Sequence[str]
) -> Parts:
    """The parts of meshes put one after another: a mesh with parts keeps them (named
    "NAME/PART"), one without is one part named NAME (its entry of `names`)."""
    ids: list[np.ndarray] = []
    all_names: list[str] = []
    for mesh_parts, faces, name in zip(parts, face_counts, names):
        if mesh_parts is None:
            ids.append(np.full(faces, len(all_names), np.int32))
            all_names.append(name)
        else:
            ids.append(mesh_parts.ids + len(all_names))
            all_names += [f"{name}/{part}" for part in mesh_parts.names]
    return Parts(np.concatenate(ids), tuple(all_names))


def joined_appearance(
    appearances: Sequence[Appearance | None],
    vertex_counts: Sequence[int],
    face_counts: Sequence[int],
) -> Appearance | None:
    """The appearance of meshes put one after another (None if none of them has one):
    a mesh without one takes the default colour, arrays that only some meshes have are
    filled in for the others (NaN UVs, the default colour)."""
    if all(appearance is None for appearance in appearances):
        return None
    sources: list[np.ndarray] = []
    face_materials: list[np.ndarray] = []
    materials: list[Material] = []
    uvs: list[np.ndarray | None] = []
    vertex_colors: list[np.ndarray | None] = []
    face_colors: list[np.ndarray | None] = []
    problems: list[str] = []
    for appearance, faces in zip(appearances, face_counts):
        if appearance is None:
            appearance = Appearance(np.zeros(faces, np.uint8), np.full(faces, -1, np.int32))
        sources.append(appearance.sources)
        shifted = np.where(
            appearance.face_materials >= 0, appearance.face_materials + len(materials), -1
        )
        face_materials.append(shifted)
        materials += appearance.materials
        uvs.append(appearance.corner_uvs)
        vertex_colors.append(appearance.vertex_colors)
        face_colors.append(appearance.face_colors)
        problems += appearance.problems
    return Appearance(
        np.concatenate(sources),
        np.concatenate(face_materials).astype(np.int32),
        tuple(materials),
        _filled(uvs, face_counts, (3, 2), np.float64, np.nan),
        _filled(vertex_colors, vertex_counts, (4,), np.uint8, DEFAULT_COLOR),
        _filled(face_colors, face_counts, (4,), np.uint8, DEFAULT_COLOR),
        tuple(problems),
    )


def _filled(
    arrays: Sequence[np.ndarray | None],
    counts: Sequence[int],
    row: tuple[int, ...],
    dtype: type,
    fill: object,
) -> np.ndarray | None:
    """The arrays one after another, `counts[i]` rows of `fill` for a missing one; None if
    all are missing."""
    if all(array is None for array in arrays):
        return None
    return np.concatenate(
        [
            np.full((count, *row), fill, dtype) if array is None else array
            for array, count in zip(arrays, counts)
        ]
    )
