"""Wavefront OBJ meshes: the `v` and `f` lines; objects, groups, materials, texture
coordinates and vertex colours are read by obj_groups, for files that have them; normals
and comments are skipped.

Vertices are every `v` line in file order (a w or colour column is ignored); a face's corners
may be `v`, `v/vt`, `v/vt/vn` or `v//vn`, counted from 1, or negative: relative to the
vertices defined so far. Polygons are fanned as trimesh fans them (all faces alike: every
triangle, then the quads' halves, then larger polygons; mixed: face by face)."""

from __future__ import annotations

import re

import numpy as np

from .mesh_parsing import (
    MalformedMesh,
    MeshBytes,
    ReadMesh,
    TextLines,
    check_indices,
    parse_numbers,
    parse_table,
    text_bytes,
    token_counts,
    triangles_of_polygons,
    without_comments,
)
from .obj_groups import has_extras, read_extras

_CONTINUED_LINE = re.compile(rb"\\[ \t]*\r?\n")


def read_obj(data: MeshBytes) -> ReadMesh:
    """(vertices (V, 3) float64, faces (T, 3) int64, parts, appearance) of an OBJ file, or
    MalformedMesh; the parts and appearance only for a file that has them (obj_groups)."""
    text = text_bytes(data)
    if b"\\" in text:
        text = _CONTINUED_LINE.sub(b" ", text)
    lines = TextLines(text)
    vertex_lines = lines.with_keyword(b"v")
    face_lines = lines.with_keyword(b"f")
    vertices = _vertices(lines, vertex_lines)
    corners, counts = _corners(lines, face_lines)
    indices = _zero_based(corners, counts, lines, face_lines, vertex_lines)
    starts = np.cumsum(counts) - counts
    check_indices(
        indices,
        len(vertices),
        lambda at: (
            f"line {lines.line_number(face_lines[np.searchsorted(starts, at, 'right') - 1]):,}"
        ),
        written=corners,
    )
    grouped = bool(len(counts) and (counts == counts[0]).all())  # all faces alike
    if grouped and counts[0] == 3:
        faces = indices.reshape(-1, 3)
    else:
        faces = triangles_of_polygons(indices, counts, grouped=grouped)
    extras = None
    if has_extras(lines, vertex_lines):
        extras = read_extras(lines, face_lines, vertex_lines, counts, grouped)
    if extras is None:
        return ReadMesh(vertices, faces)
    return ReadMesh(vertices, faces, extras.parts, extras.appearance_maker())


def _vertices(lines: TextLines, vertex_lines: np.ndarray) -> np.ndarray:
    payload = without_comments(lines.payload(vertex_lines, 1))
    vertices = parse_table(payload, np.float64, columns=3)
    if vertices is not None and len(vertices) == len(vertex_lines):
        return np.ascontiguousarray(vertices)
    line_numbers = vertex_lines + 1
    counts = token_counts(payload)
    short = np.flatnonzero(counts < 3)
    if len(short):
        raise MalformedMesh(
            f"line {line_numbers[short[0]]:,}: a vertex with {counts[short[0]]} values, not 3"
        )
    parse_numbers(payload, np.float64, "vertex coordinate", line_numbers)  # names the word
    raise MalformedMesh("a vertex line that does not start with three numbers")


def _corners(lines: TextLines, face_lines: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The vertex index of every face corner as written (flat, int64), and each face's
    corner count."""
    payload = without_comments(lines.payload(face_lines, 1))
    slashes = b"/" in payload
    numbers = payload.replace(b"/", b" ") if slashes else payload
    table = parse_table(numbers, np.int64)
    if table is not None and len(table) == len(face_lines):  # every face the same form
        if not slashes:
            return table.reshape(-1), np.full(len(table), table.shape[1], np.int64)
        firsts = _first_numbers(payload, face_lines)
        pattern = firsts[: table.shape[1]]  # which columns are vertex indices, if all alike
        if firsts.size == table.size and (firsts.reshape(table.shape) == pattern).all():
            vertex_columns = table[:, pattern]
            return vertex_columns.reshape(-1), np.full(len(table), vertex_columns.shape[1])
    values = parse_numbers(numbers, np.int64, "vertex index", face_lines + 1)
    firsts = _first_numbers(payload, face_lines) if slashes else np.ones(len(values), bool)
    counts = token_counts(payload)
    if len(firsts) != len(values) or counts.sum() != np.count_nonzero(firsts):
        raise MalformedMesh("face lines whose words are not vertex indices")
    return values[firsts], counts


def _first_numbers(payload: bytes, face_lines: np.ndarray) -> np.ndarray:
    """For each number of the face lines, whether it is the first of its corner (the vertex
    index of v/vt/vn, v//vn or v/vt), read from the bytes around it."""
    array = np.frombuffer(payload, np.uint8)
    blank = array <= ord(" ")
    slash = array == ord("/")
    separator = blank | slash
    number_start = ~separator
    number_start[1:] &= separator[:-1]
    corner_start = ~blank
    corner_start[1:] &= blank[:-1]
    if (corner_start & slash).any():
        at = int(np.flatnonzero(corner_start & slash)[0])
        line = int(np.count_nonzero(array[:at] == ord("\n")))
        raise MalformedMesh(f"line {face_lines[line] + 1:,}: a face corner without a vertex index")
    return corner_start[number_start]


def _zero_based(
    corners: np.ndarray,
    counts: np.ndarray,
    lines: TextLines,
    face_lines: np.ndarray,
    vertex_lines: np.ndarray,
) -> np.ndarray:
    """Indices from 0: positive ones count from 1, negative ones back from the last vertex
    defined before their face line."""
    if len(corners) and corners.min() > 0:  # the usual file: one reduction
        return corners - 1
    if (corners == 0).any():
        face = int(np.searchsorted(np.cumsum(counts), np.flatnonzero(corners == 0)[0], "right"))
        raise MalformedMesh(
            f"line {lines.line_number(face_lines[face]):,}: vertex index 0 (OBJ counts from 1)"
        )
    if (corners > 0).all():
        return corners - 1
    defined_before = np.searchsorted(vertex_lines, face_lines)  # v lines above each f line
    return np.where(corners > 0, corners - 1, np.repeat(defined_before, counts) + corners)
