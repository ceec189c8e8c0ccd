"""Wavefront material libraries (.mtl), for the colours of an OBJ's faces: each material's
diffuse colour (`Kd`, with `d` as its alpha) and diffuse texture (`map_Kd`, read on first
use). Other statements (ambient, specular, illumination models) do not colour voxels and
are skipped.

A face whose material has a texture takes the texture's colour (as trimesh and most viewers
show it, without `Kd`), else its material's `Kd`; a library or a material that cannot be
found is a problem the colours warn about (voxelizer.errors.ColorWarning), and its faces
take the default colour.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..attributes.appearance import MATERIAL, VERTEX, Appearance, Material, Texture

WHITE = (255, 255, 255, 255)  # an OBJ texture's tint: the texture's own colours

if TYPE_CHECKING:
    from .obj_groups import ObjExtras

# map_Kd options and how many values follow each (-o, -s and -t take one to three numbers)
_MAP_OPTIONS = {
    "-blendu": 1,
    "-blendv": 1,
    "-bm": 1,
    "-boost": 1,
    "-cc": 1,
    "-clamp": 1,
    "-imfchan": 1,
    "-mm": 2,
    "-texres": 1,
    "-o": 3,
    "-s": 3,
    "-t": 3,
}


def obj_appearance(path: Path, extras: ObjExtras) -> Appearance:
    """The appearance of an OBJ at `path` from what its reader found (ObjExtras): its
    materials from the libraries beside it, textures where they have UVs, vertex colours
    elsewhere if it has them."""
    problems: list[str] = []
    library: dict[str, Material] = {}
    for name in extras.libraries:
        found = path.parent / name
        try:
            text = found.read_bytes()
        except OSError as exc:
            problems.append(f"{path}: material library {name}: cannot read it ({exc.strerror})")
            continue
        for material in parse_mtl(text, found.parent):
            library.setdefault(material.name, material)  # the first definition counts
    unique, line_material = np.unique(
        np.array(list(extras.material_names), dtype=object), return_inverse=True
    )
    materials = []
    for name in unique:
        found_material = library.get(str(name))
        if found_material is None:
            problems.append(f"{path}: material {name!r} is not defined in its libraries")
            found_material = Material(str(name))
        materials.append(found_material)
    assert extras.face_materials is not None  # (appearance_maker asks for materials only then)
    face_materials = np.where(
        extras.face_materials >= 0, line_material.reshape(-1)[extras.face_materials], -1
    )
    appearance = Appearance.of_materials(face_materials, materials, extras.corner_uvs, problems)
    if extras.vertex_colors is None:
        return appearance
    sources = appearance.sources.copy()
    sources[sources == MATERIAL] = VERTEX  # a vertex colour is more specific than a material
    return Appearance(
        sources,
        appearance.face_materials,
        appearance.materials,
        appearance.corner_uvs,
        extras.vertex_colors,
        problems=appearance.problems,
    )


def parse_mtl(text: bytes, folder: Path) -> list[Material]:
    """The materials of an .mtl file's bytes; texture files are found from `folder`."""
    materials: list[Material] = []
    name: str | None = None
    color = [1.0, 1.0, 1.0]
    alpha = 1.0
    texture: Path | None = None

    def finish() -> None:
        if name is not None:
            rgba = np.floor(np.clip([*color, alpha], 0.0, 1.0) * 255.0 + 0.5).astype(int)
            r, g, b, a = (int(value) for value in rgba)
            found = None if texture is None else image_texture(texture)
            materials.append(Material(name, (r, g, b, a), found, tint=WHITE))

    for raw in text.splitlines():
        words = raw.split(b"#", 1)[0].split()
        if not words:
            continue
        keyword, rest = words[0].lower(), raw.split(b"#", 1)[0].strip()[len(words[0]) :].strip()
        if keyword == b"newmtl":
            finish()
            name, color, alpha, texture = rest.decode("utf-8", "replace"), [1.0] * 3, 1.0, None
        elif keyword == b"kd" and len(words) >= 2:
            numbers = _floats(words[1:4])
            if numbers is not None and len(numbers) in (1, 3):
                color = numbers * 3 if len(numbers) == 1 else numbers
        elif keyword == b"d" and len(words) >= 2:
            numbers = _floats(words[1:2])
            alpha = alpha if numbers is None else numbers[0]
        elif keyword == b"map_kd" and rest:
            file_name = _map_file(rest.decode("utf-8", "replace"))
            if file_name:
                texture = folder / file_name.replace("\\", "/")
    finish()
    return materials


def _floats(words: list[bytes]) -> list[float] | None:
    try:
        return [float(word) for word in words]
    except ValueError:
        return None


def _map_file(statement: str) -> str:
    """The file name of a map_Kd statement, after its options (the name may hold blanks)."""
    words = statement.split()
    at = 0
    while at < len(words) and words[at] in _MAP_OPTIONS:
        most = _MAP_OPTIONS[words[at]]
        at += 1
        taken = 0
        while taken < most and at < len(words) - 1 and _floats([words[at].encode()]) is not None:
            at += 1
            taken += 1
        if most < 3 and taken < most and at < len(words) - 1:  # a word option (-clamp on)
            at += 1
    return " ".join(words[at:])


def image_texture(path: Path) -> Texture:
    """A texture read from an image file with Pillow on first use (picklable: a Mesh read
    in another process carries it)."""
    return Texture(str(path), functools.partial(read_image, path))


def read_image(source: Path | bytes) -> object:
    """The RGBA image of a file or of its bytes, read with Pillow (an ImportError saying how
    to install it when it is missing)."""
    try:
        from PIL import Image
    except ImportError:
        raise ImportError(
            "textures need Pillow (pip install pillow, or the colors extra)"
        ) from None
    import io

    with Image.open(io.BytesIO(source) if isinstance(source, bytes) else source) as image:
        return image.convert("RGBA")
