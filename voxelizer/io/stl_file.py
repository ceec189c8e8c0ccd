"""STL meshes, binary and ASCII: the triangles in file order, their corners merged where
their positions are equal (an STL stores each triangle's three corners; the mesh gets each
position once, in the order it first appears, and faces indexing them). The triangles are
exactly trimesh's (`vertices[faces]` equal, value for value); only fewer vertices carry them,
which the indexed variants upload and the topology check compares.

A file is binary when its size is exactly what its triangle count says (84 + 50·n bytes),
as trimesh decides; otherwise it must be an ASCII STL (`solid` ... `endsolid`), whose
`vertex` lines are read in any encoding. An ASCII file of several solids (`solid NAME` ...
`endsolid`) gives each triangle the part of its solid, named by the solid (decoded as UTF-8,
any other byte replaced)."""

from __future__ import annotations

import numpy as np

from ..attributes.appearance import Parts
from .mesh_parsing import (
    MalformedMesh,
    MeshBytes,
    ReadMesh,
    TextLines,
    float64_copy,
    merged_corners,
    parse_numbers,
    parse_table,
    text_bytes,
    token_counts,
)

HEADER_BYTES = 84  # 80 bytes of anything, then the triangle count (uint32)
TRIANGLE = np.dtype([("normal", "<f4", (3,)), ("corners", "<f4", (3, 3)), ("attribute", "<u2")])


def read_stl(data: MeshBytes) -> ReadMesh:
    """(vertices (V, 3) float64, faces (T, 3) int64, parts) of an STL file, or
    MalformedMesh; parts only for an ASCII file of several solids."""
    size = len(data)
    if size >= HEADER_BYTES:
        count = int.from_bytes(data[80:HEADER_BYTES], "little")
        expected = HEADER_BYTES + TRIANGLE.itemsize * count
        if size == expected:
            return _binary(data, count)
        binary = (
            f"the {count:,} triangles in the header of a binary STL need {expected:,} bytes, "
            f"the file has {size:,}"
        )
    else:
        binary = f"{size:,} bytes, shorter than the 84-byte header of a binary STL"
    text = text_bytes(data)
    if text.lstrip()[:5].lower() != b"solid":
        raise MalformedMesh(f"cut off or corrupt: {binary}")
    if b"endsolid" not in text.lower():
        raise MalformedMesh(
            f"an ASCII STL cut off (no endsolid line), or a binary STL whose size is wrong "
            f"({binary})"
        )
    return _ascii(text)


def _binary(data: MeshBytes, count: int) -> ReadMesh:
    corners = np.frombuffer(data, TRIANGLE, count=count, offset=HEADER_BYTES)["corners"]
    positions, rows = merged_corners(corners)
    return ReadMesh(float64_copy(positions), rows.reshape(-1, 3))


def _ascii(text: bytes) -> ReadMesh:
    lines = TextLines(text)
    vertex_lines = lines.with_keyword(b"vertex", ignore_case=True)
    if len(vertex_lines) == 0:
        return ReadMesh(np.empty((0, 3)), np.empty((0, 3), np.int64))
    payload = lines.payload(vertex_lines, len(b"vertex"))
    vertices = parse_table(payload, np.float64)
    if vertices is None or vertices.shape != (len(vertex_lines), 3):
        line_numbers = vertex_lines + 1
        counts = token_counts(payload)
        wrong = np.flatnonzero(counts != 3)
        if len(wrong):
            raise MalformedMesh(
                f"line {line_numbers[wrong[0]]:,}: a vertex with {counts[wrong[0]]} values, not 3"
            )
        parse_numbers(payload, np.float64, "vertex coordinate", line_numbers)  # names the word
        raise MalformedMesh("a vertex line that is not three numbers")
    if len(vertices) % 3:
        raise MalformedMesh(f"{len(vertices):,} vertex lines, not three per facet")
    positions, rows = merged_corners(vertices)
    return ReadMesh(positions, rows.reshape(-1, 3), _solids(lines, vertex_lines))


def _solids(lines: TextLines, vertex_lines: np.ndarray) -> Parts | None:
    """The solid of each triangle, for a file of several solids (None for one)."""
    solid_lines = lines.with_keyword(b"solid", ignore_case=True)
    if len(solid_lines) < 2:
        return None
    names = []
    for number, line in enumerate(solid_lines.tolist(), start=1):
        raw = lines.text[int(lines.heads[line]) + len(b"solid") : int(lines.ends[line])]
        names.append(raw.strip().decode("utf-8", "replace") or f"solid {number}")
    solid = np.searchsorted(solid_lines, vertex_lines[0::3], side="right") - 1
    return Parts.of_groups(np.maximum(solid, 0), names)
