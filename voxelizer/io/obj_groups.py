"""What an OBJ file says beyond its triangles: objects and groups (`o`, `g`), materials
(`usemtl`, `mtllib`), texture coordinates (`vt` and the corners' second index) and vertex
colours (`v x y z r g b`).

Parts: a face belongs to the last `o` or `g` line above it (faces above any are the part
"default", as OBJ's default group); a file with neither but with `usemtl` lines has one
part per material. Parts of one name are one part. Each triangle has the part and material
of the polygon it was cut from.

obj_file reads the geometry; it calls `read_extras` only for files with lines that start
with such keywords (`has_extras`: a pass over the lines' first bytes, which obj_file has
gathered already), so a plain OBJ costs nothing more. The materials themselves are
in the `.mtl` files beside the OBJ (mtl_file), read when the mesh's appearance is made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..attributes.appearance import VERTEX, Appearance, Parts
from .mesh_parsing import (
    MalformedMesh,
    TextLines,
    parse_numbers,
    parse_table,
    triangles_of_polygons,
    without_comments,
)

DEFAULT_GROUP = "default"


def has_extras(lines: TextLines, vertex_lines: np.ndarray) -> bool:
    """Whether the file may hold groups, objects, materials or vertex colours: a line that
    starts with o, g or u, or a first vertex line of six numbers or more. Each line's first
    byte is at hand (obj_file's keyword search gathered it), so the test costs one pass
    over the lines, not over the text; read_extras confirms it keyword by keyword."""
    first = lines.column(0)
    starts = (first == ord("o")) | (first == ord("g")) | (first == ord("u"))
    return bool(starts.any()) or _vertex_words(lines, vertex_lines) >= 6


def _vertex_words(lines: TextLines, vertex_lines: np.ndarray) -> int:
    """Words on the first `v` line (6 or 7 when the file has vertex colours)."""
    if not len(vertex_lines):
        return 0
    first = int(vertex_lines[0])
    line = lines.text[int(lines.heads[first]) : int(lines.ends[first])]
    return len(line.split(b"#", 1)[0].split())


@dataclass(frozen=True)
class ObjExtras:
    """The parts of a file's triangles, and what its appearance needs: each triangle's
    material name (an index into material_names, -1 before any usemtl), the corners' UVs,
    the vertex colours and the material libraries named."""

    parts: Parts | None
    material_names: tuple[str, ...]
    face_materials: np.ndarray | None  # (T,) int32
    corner_uvs: np.ndarray | None  # (T, 3, 2) float64, NaN where a corner has no vt
    vertex_colors: np.ndarray | None  # (V, 4) uint8
    libraries: tuple[str, ...]
    triangles: int

    def appearance_maker(self) -> Callable[[Path], Appearance] | None:
        """The function making the appearance once the OBJ's path is known (its material
        libraries are found beside it), or None for a file without colours."""
        if self.face_materials is not None and self.material_names:
            from .mtl_file import obj_appearance

            return lambda path: obj_appearance(path, self)
        if self.vertex_colors is not None:
            sources = np.full(self.triangles, VERTEX, np.uint8)
            none = np.full(self.triangles, -1, np.int32)
            appearance = Appearance(sources, none, vertex_colors=self.vertex_colors)
            return lambda path: appearance
        return None


def read_extras(
    lines: TextLines,
    face_lines: np.ndarray,
    vertex_lines: np.ndarray,
    counts: np.ndarray,
    grouped: bool,
) -> ObjExtras | None:
    """The extras of a file whose triangles were cut from the polygons of `face_lines`
    (each with `counts` corners, fanned grouped or not as obj_file did); None when the file
    has none after all."""
    first = lines.column(0)
    empty = np.zeros(0, np.int64)
    may_group = bool(((first == ord("o")) | (first == ord("g"))).any())
    groups = _keyword_lines(lines, (b"o", b"g")) if may_group else empty
    materials = lines.with_keyword(b"usemtl") if (first == ord("u")).any() else empty
    colors = _vertex_colors(lines, vertex_lines)
    if not len(groups) and not len(materials) and colors is None:
        return None
    if (counts == 3).all():  # triangles only: each its own polygon, in order
        triangle_lines, triangles = face_lines, len(counts)
    else:
        polygon_of_corner = np.repeat(np.arange(len(counts)), counts)
        owners = triangles_of_polygons(polygon_of_corner, counts, grouped)[:, 0]
        triangle_lines, triangles = face_lines[owners], len(owners)  # each one's f line
    parts = None
    if len(groups):
        parts = _parts(lines, groups, triangle_lines, 1)
    elif len(materials):
        parts = _parts(lines, materials, triangle_lines, len(b"usemtl"))
    names: tuple[str, ...] = ()
    face_materials = corner_uvs = None
    if len(materials):
        names = tuple(_line_text(lines, line, len(b"usemtl")) for line in materials.tolist())
        face_materials = (np.searchsorted(materials, triangle_lines, side="right") - 1).astype(
            np.int32
        )
        corner_uvs = _corner_uvs(lines, face_lines, counts, grouped)
    library_lines = lines.with_keyword(b"mtllib") if (first == ord("m")).any() else empty
    libraries = tuple(_line_text(lines, line, len(b"mtllib")) for line in library_lines.tolist())
    return ObjExtras(parts, names, face_materials, corner_uvs, colors, libraries, triangles)


def _keyword_lines(lines: TextLines, keywords: tuple[bytes, ...]) -> np.ndarray:
    return np.sort(np.concatenate([lines.with_keyword(keyword) for keyword in keywords]))


def _line_text(lines: TextLines, line: int, keyword_length: int) -> str:
    """A keyword line's words after the keyword, as text (comments cut, blanks trimmed)."""
    raw = lines.text[int(lines.heads[line]) + keyword_length : int(lines.ends[line])]
    return raw.split(b"#", 1)[0].strip().decode("utf-8", "replace")


def _parts(
    lines: TextLines, named: np.ndarray, triangle_lines: np.ndarray, keyword_length: int
) -> Parts:
    """Parts by the last of the `named` lines above each triangle's f line."""
    names = [_line_text(lines, line, keyword_length) or DEFAULT_GROUP for line in named.tolist()]
    group = np.searchsorted(named, triangle_lines, side="right")  # 0: above every named line
    return Parts.of_groups(group, [DEFAULT_GROUP, *names])


def _vertex_colors(lines: TextLines, vertex_lines: np.ndarray) -> np.ndarray | None:
    """RGBA uint8 (V, 4) of `v x y z r g b` lines (colours from 0 to 1), when every vertex
    line has them; None otherwise."""
    if _vertex_words(lines, vertex_lines) < 6:
        return None
    payload = without_comments(lines.payload(vertex_lines, 1))
    table = parse_table(payload, np.float64, columns=6)
    if table is None or len(table) != len(vertex_lines):
        return None
    rgb = np.clip(table[:, 3:6], 0.0, 1.0) * 255.0
    colors = np.full((len(table), 4), 255, np.uint8)
    colors[:, :3] = np.floor(rgb + 0.5)
    return colors


def _corner_uvs(
    lines: TextLines, face_lines: np.ndarray, counts: np.ndarray, grouped: bool
) -> np.ndarray | None:
    """(T, 3, 2) UVs of the triangles' corners from the `vt` lines and each corner's second
    index; NaN for a corner without one. None for a file without `vt` lines."""
    uv_lines = lines.with_keyword(b"vt")
    if not len(uv_lines):
        return None
    uv_payload = without_comments(lines.payload(uv_lines, 2))
    uvs = parse_table(uv_payload, np.float64, columns=2)
    if uvs is None or len(uvs) != len(uv_lines):
        raise MalformedMesh("a vt line that does not start with two numbers")
    payload = without_comments(lines.payload(face_lines, 1))
    indices = _second_indices(payload, face_lines)  # per corner, 0 where none
    relative = indices < 0
    if relative.any():  # negative: counted back from the vt lines above the face line
        defined = np.repeat(np.searchsorted(uv_lines, face_lines), counts)
        indices = np.where(relative, defined + indices + 1, indices)
    valid = (indices >= 1) & (indices <= len(uvs))
    table = np.vstack([uvs, [[np.nan, np.nan]]])
    picked = table[np.where(valid, indices - 1, len(uvs))]  # (corners, 2)
    corners = triangles_of_polygons(np.arange(len(picked)), counts, grouped)
    return picked[corners]


def _second_indices(payload: bytes, face_lines: np.ndarray) -> np.ndarray:
    """For each face corner (v, v/vt, v/vt/vn, v//vn), its vt index as written, 0 where it
    has none."""
    array = np.frombuffer(payload, np.uint8)
    blank = array <= ord(" ")
    slash = array == ord("/")
    separator = blank | slash
    number_start = ~separator
    number_start[1:] &= separator[:-1]
    corner_start = ~blank
    corner_start[1:] &= blank[:-1]
    slashes = np.cumsum(slash)
    corner_of_byte = np.cumsum(corner_start) - 1
    starts = np.flatnonzero(corner_start)
    numbers = np.flatnonzero(number_start)
    corner = corner_of_byte[numbers]
    slot = slashes[numbers] - slashes[starts[corner]]  # slashes between the corner and it
    values = parse_numbers(payload.replace(b"/", b" "), np.int64, "texture index", face_lines + 1)
    out = np.zeros(len(starts), np.int64)
    second = slot == 1
    out[corner[second]] = values[second]
    return out
