"""What a PLY file says beyond its triangles: a part per face (an integer face property
named as in PART_PROPERTIES), and colours: vertex or face colours (red, green, blue and
alpha properties, integers from 0 to 255 or floats from 0 to 1), or a texture (a
`comment TextureFile NAME` line) with texture coordinates per vertex (s and t, u and v,
texture_u and texture_v) or per face corner (a `texcoord` list of six values).

ply_file reads the geometry; it calls `read_extras` only for files whose header declares
such properties (`has_extras`), handing it functions that read a property's values, so
that a plain PLY costs nothing more and this module needs none of ply_file's insides.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..attributes.appearance import FACE, TEXTURE, VERTEX, Appearance, Material, Parts
from .mesh_parsing import triangles_of_polygons

# Face properties that name a face's part, in the order they are looked for.
PART_PROPERTIES = (
    "part",
    "part_id",
    "label",
    "segment",
    "segment_id",
    "object",
    "object_id",
    "group",
    "material",
    "material_index",
    "material_id",
)
COLOR_PROPERTIES = (
    ("red", "green", "blue", "alpha"),
    ("r", "g", "b", "a"),
    ("diffuse_red", "diffuse_green", "diffuse_blue", "diffuse_alpha"),
)
UV_PROPERTIES = (("s", "t"), ("u", "v"), ("texture_u", "texture_v"), ("texture_s", "texture_t"))
CORNER_UVS = "texcoord"
TEXTURE_COMMENT = b"texturefile"


class PropertyLike(Protocol):
    name: str
    value: np.dtype
    count: np.dtype | None


class ElementLike(Protocol):
    name: str
    rows: int
    properties: list  # of PropertyLike


Column = Callable[[Any, Any], np.ndarray]  # (element, property) -> values


def has_extras(vertex: ElementLike, face: ElementLike) -> bool:
    """Whether the header declares a part, a colour or texture coordinates."""
    return bool(
        _part_property(face)
        or _color_properties(vertex)
        or _color_properties(face)
        or _uv_properties(vertex)
        or _corner_uv_property(face)
    )


def read_extras(
    vertex: ElementLike,
    face: ElementLike,
    column: Column,
    table: Column,
    sizes: np.ndarray,
    faces: np.ndarray,
    header: bytes,
) -> tuple[Parts | None, Callable[[Path], Appearance] | None]:
    """The parts and the appearance maker of a file: `column(element, property)` reads a
    scalar property, `table(element, property)` a list property of fixed length, `sizes`
    is every face's corner count, `faces` the triangles and `header` the header's bytes
    (its comments)."""
    owners = _owners(sizes)  # the face each triangle was cut from (None: each its own)
    triangles = len(sizes) if owners is None else len(owners)
    parts = None
    part = _part_property(face)
    if part is not None:
        unique, groups = _distinct(column(face, part))
        names = [f"{part.name} {_number_text(value)}" for value in unique]
        parts = Parts.of_groups(groups if owners is None else groups[owners], names)
    sources = np.full(triangles, -1, np.int16)
    face_colors = vertex_colors = corner_uvs = None
    texture_names: list[str] = []
    face_materials = np.full(triangles, -1, np.int32)
    textures = _texture_names(header)
    uvs = _corner_uvs(vertex, face, column, table, owners, faces)
    if uvs is not None and textures:
        texture_names = textures[:1]
        corner_uvs = uvs
        face_materials[:] = 0
        sources[~np.isnan(uvs).any(axis=(1, 2))] = TEXTURE
    color = _color_properties(vertex)
    if color:
        vertex_colors = _rgba([column(vertex, prop) for prop in color])
        sources[sources < 0] = VERTEX
    color = _color_properties(face)
    if color:
        face_colors = _rgba([column(face, prop) for prop in color])
        face_colors = face_colors if owners is None else face_colors[owners]
        sources[sources < 0] = FACE
    if (sources < 0).all():
        return parts, None
    sources[sources < 0] = 0  # MATERIAL: no material, the default colour
    appearance = _maker(
        sources.astype(np.uint8),
        face_materials,
        texture_names,
        corner_uvs,
        vertex_colors,
        face_colors,
    )
    return parts, appearance


def _maker(
    sources: np.ndarray,
    face_materials: np.ndarray,
    texture_names: list[str],
    corner_uvs: np.ndarray | None,
    vertex_colors: np.ndarray | None,
    face_colors: np.ndarray | None,
) -> Callable[[Path], Appearance]:
    """The appearance, once the file's path says where its texture lies (beside it)."""
    from .mtl_file import image_texture

    def make(path: Path) -> Appearance:
        materials = tuple(
            Material(name, texture=image_texture(path.parent / name)) for name in texture_names
        )
        return Appearance(
            sources, face_materials, materials, corner_uvs, vertex_colors, face_colors
        )

    return make


def _owners(sizes: np.ndarray) -> np.ndarray | None:
    """The face each triangle was cut from, fanned as ply_file fans the faces; None when
    every face is a triangle (each triangle is its face)."""
    if (sizes == 3).all():
        return None
    polygon_of_corner = np.repeat(np.arange(len(sizes)), sizes)
    return triangles_of_polygons(polygon_of_corner, sizes, grouped=True)[:, 0]


def _scalars(element: ElementLike) -> dict[str, PropertyLike]:
    named: dict[str, PropertyLike] = {}
    for prop in element.properties:
        if prop.count is None:
            named.setdefault(prop.name, prop)
    return named


def _part_property(face: ElementLike) -> PropertyLike | None:
    named = _scalars(face)
    return next((named[name] for name in PART_PROPERTIES if name in named), None)


def _color_properties(element: ElementLike) -> list[PropertyLike]:
    named = _scalars(element)
    for names in COLOR_PROPERTIES:
        if all(name in named for name in names[:3]):
            return [named[name] for name in names if name in named]
    return []


def _uv_properties(vertex: ElementLike) -> list[PropertyLike]:
    named = _scalars(vertex)
    for names in UV_PROPERTIES:
        if all(name in named for name in names):
            return [named[name] for name in names]
    return []


def _corner_uv_property(face: ElementLike) -> PropertyLike | None:
    return next((p for p in face.properties if p.count is not None and p.name == CORNER_UVS), None)


def _distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, each value's index among them), as np.unique gives them;
    small non-negative integers (the usual part numbers) by counting, in linear time."""
    values = np.ascontiguousarray(values)  # (a column of the file's rows: strided)
    if values.dtype.kind in "iu" and values.size and values.min() >= 0 and values.max() < 1 << 20:
        present = np.bincount(values) > 0
        index = np.cumsum(present) - 1
        return np.flatnonzero(present), index[values]
    unique, inverse = np.unique(values, return_inverse=True)
    return unique, inverse.reshape(-1)


def _number_text(value: object) -> str:
    number = float(value)  # type: ignore[arg-type]
    return str(int(number)) if number.is_integer() else repr(number)


def _rgba(columns: Sequence[np.ndarray]) -> np.ndarray:
    """(N, 4) uint8 of 3 or 4 colour columns: integers as 0..255, floats from 0 to 1."""
    out = np.full((len(columns[0]), 4), 255, np.uint8)
    for channel, values in enumerate(columns):
        if values.dtype.kind == "f":
            values = np.floor(np.clip(values, 0.0, 1.0) * 255.0 + 0.5)
        out[:, channel] = np.clip(values, 0, 255)
    return out


def _corner_uvs(
    vertex: ElementLike,
    face: ElementLike,
    column: Column,
    table: Column,
    owners: np.ndarray | None,
    faces: np.ndarray,
) -> np.ndarray | None:
    """(T, 3, 2) float64 UVs of the triangles' corners: from a face's texcoord list, or
    from the vertices' texture coordinates; None when the file has neither."""
    listed = _corner_uv_property(face)
    if listed is not None:
        uvs = np.asarray(table(face, listed), np.float64)
        if uvs.shape[1] == 6 and owners is None:  # triangles only
            return uvs.reshape(-1, 3, 2)
        return None
    properties = _uv_properties(vertex)
    if not properties:
        return None
    uvs = np.stack([np.asarray(column(vertex, p), np.float64) for p in properties], axis=1)
    return uvs[faces]


def _texture_names(header: bytes) -> list[str]:
    """The files of the header's `comment TextureFile NAME` lines."""
    names = []
    for line in header.splitlines():
        words = line.split(None, 2)
        if len(words) == 3 and words[0] == b"comment" and words[1].lower() == TEXTURE_COMMENT:
            names.append(words[2].strip().decode("utf-8", "replace"))
    return names
