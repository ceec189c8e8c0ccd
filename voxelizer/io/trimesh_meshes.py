"""trimesh's meshes and scenes as Meshes, with their parts and colours.

A scene (what trimesh reads from GLB, glTF, 3MF, ...) becomes one Mesh of every mesh
instance, transforms applied, in the order of trimesh's own `Scene.to_mesh()` (so the
vertices and faces are exactly the ones trimesh gives), each instance (each glTF primitive
of each node) one part named by its geometry (a later instance of one geometry: NAME (2),
NAME (3), ...). Colours come from each geometry's visual: a material's base colour and
texture with the UVs (TextureVisuals), or vertex or face colours (ColorVisuals).

glTF's rule for a textured material is kept: the texture's colour times the base colour
factor (trimesh's own `to_color()` leaves the factor out; with the usual factor 1 the two
agree). A texture in a simple (OBJ-style) material is taken alone, as trimesh shows it.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from ..attributes.appearance import (
    FACE,
    VERTEX,
    Appearance,
    Material,
    Parts,
    Texture,
    joined_appearance,
)
from ..errors import MeshError
from ..mesh import Mesh, checked_mesh

if TYPE_CHECKING:
    import trimesh

WHITE = (255, 255, 255, 255)


def mesh_of_trimesh(loaded: Any, what: str) -> Mesh:
    """A checked Mesh of a trimesh.Trimesh or trimesh.Scene (MeshError naming `what` when
    it holds no triangles)."""
    import trimesh

    if isinstance(loaded, trimesh.Scene):
        geometries = [g for g in loaded.dump() if isinstance(g, trimesh.Trimesh)]
    elif isinstance(loaded, trimesh.Trimesh):
        geometries = [loaded]
    else:
        geometries = []
    if not geometries:
        raise MeshError(f"{what}: the file holds no triangles")
    vertex_counts = [len(g.vertices) for g in geometries]
    face_counts = [len(g.faces) for g in geometries]
    offsets = np.cumsum([0, *vertex_counts[:-1]])
    vertices = np.vstack([np.asarray(g.vertices, np.float64) for g in geometries])
    faces = np.vstack(
        [np.asarray(g.faces, np.int64).reshape(-1, 3) + o for g, o in zip(geometries, offsets)]
    )
    parts = None
    if len(geometries) > 1:
        kept = [count > 0 for count in face_counts]
        names = _distinct(
            [_name(g, n) for n, (g, keep) in enumerate(zip(geometries, kept)) if keep]
        )
        ids = np.repeat(np.arange(len(names)), [c for c in face_counts if c > 0])
        parts = Parts(ids, tuple(names))
    textures: dict[int, Texture] = {}  # instances of one mesh share their images
    appearance = joined_appearance(
        [appearance_of(g, textures) for g in geometries], vertex_counts, face_counts
    )
    return checked_mesh(vertices, faces, what, parts, appearance)


def _name(geometry: trimesh.Trimesh, number: int) -> str:
    metadata = getattr(geometry, "metadata", None) or {}
    return str(metadata.get("name") or metadata.get("node") or f"part {number + 1}")


def _distinct(names: list[str]) -> list[str]:
    """Names that tell the parts apart: a later instance of a geometry (a glTF mesh that two
    nodes place) named NAME (2), NAME (3), ..."""
    taken = set(names)
    seen: dict[str, int] = {}
    distinct = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        unique, number = name, seen[name]
        while number > 1 and unique in taken:
            unique = f"{name} ({number})"
            number += 1
        taken.add(unique)
        distinct.append(unique)
    return distinct


def appearance_of(
    geometry: trimesh.Trimesh, textures: dict[int, Texture] | None = None
) -> Appearance | None:
    """The colours of one trimesh geometry's visual, or None when it has none; `textures`
    keeps one Texture per image object (read once, however many geometries use it)."""
    visual: Any = getattr(geometry, "visual", None)
    kind = getattr(visual, "kind", None)
    count = len(geometry.faces)
    if kind == "texture":
        material = _material(visual.material, {} if textures is None else textures)
        uv = getattr(visual, "uv", None)
        corner_uvs = None
        if material.texture is not None and uv is not None and len(uv) == len(geometry.vertices):
            corner_uvs = np.asarray(uv, np.float64)[:, :2][np.asarray(geometry.faces)]
        return Appearance.of_materials(np.zeros(count, np.int32), [material], corner_uvs)
    none = np.full(count, -1, np.int32)
    if kind == "vertex":
        colors = np.asarray(visual.vertex_colors, np.uint8)
        return Appearance(np.full(count, VERTEX, np.uint8), none, vertex_colors=colors)
    if kind == "face":
        colors = np.asarray(visual.face_colors, np.uint8)
        return Appearance(np.full(count, FACE, np.uint8), none, face_colors=colors)
    return None


def _material(material: Any, textures: dict[int, Texture]) -> Material:
    """A trimesh material as ours: PBR (glTF) base colour factor and texture, or a simple
    material's diffuse colour (its texture, if any, taken alone: tint white)."""
    name = str(getattr(material, "name", None) or "material")
    image = getattr(material, "baseColorTexture", None)
    if hasattr(material, "baseColorFactor"):
        factor = material.baseColorFactor
        color = WHITE if factor is None else _rgba(factor)
        tint = None
    else:
        image = getattr(material, "image", None)
        diffuse = getattr(material, "diffuse", None)
        color, tint = (WHITE if diffuse is None else _rgba(diffuse)), WHITE
    texture = None
    if image is not None:
        texture = textures.setdefault(
            id(image), Texture(f"{name} (texture)", partial(_same, image))
        )
    return Material(name, color, texture, tint)


def _same(image: object) -> object:
    """A texture's loader for an image trimesh has read already (picklable with it)."""
    return image


def _rgba(values: Any) -> tuple[int, int, int, int]:
    array = np.asarray(values).reshape(-1)
    if array.dtype.kind == "f":
        array = np.floor(np.clip(array, 0.0, 1.0) * 255.0 + 0.5)
    rgba = [int(v) for v in np.clip(array, 0, 255)] + [255] * (4 - len(array))
    return rgba[0], rgba[1], rgba[2], rgba[3]
