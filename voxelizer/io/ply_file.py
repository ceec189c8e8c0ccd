"""PLY meshes (ASCII, binary little and big endian): the x, y, z of the vertex element and
the index lists of the face element; every other property and element is skipped by its
layout.

Binary rows are read in place (np.frombuffer on the mapped file): when every list of an
element is as long as in its first row (all triangles: the usual file) each property is one
strided view; otherwise the rows are walked once to find where each lies. Polygons become
triangles exactly as trimesh makes them, in the same order, so that the arrays match."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from .mesh_parsing import (
    MalformedMesh,
    MeshBytes,
    ReadMesh,
    check_indices,
    float64_vertices,
    int64_faces,
    parse_numbers,
    starts_with_byte_order_mark,
    text_bytes,
    triangles_of_polygons,
)
from .ply_extras import has_extras, read_extras

# The property types of PLY headers, with the aliases found in the wild (those trimesh reads).
_TYPES = {
    "char": "i1",
    "int8": "i1",
    "uchar": "u1",
    "uint8": "u1",
    "short": "i2",
    "int16": "i2",
    "ushort": "u2",
    "uint16": "u2",
    "int": "i4",
    "int32": "i4",
    "uint": "u4",
    "uint32": "u4",
    "int64": "i8",
    "uint64": "u8",
    "float16": "f2",
    "float": "f4",
    "float32": "f4",
    "double": "f8",
    "float64": "f8",
}
_FORMATS = {b"ascii": "", b"binary_little_endian": "<", b"binary_big_endian": ">"}
_FACE_LISTS = ("vertex_indices", "vertex_index")
_HEADER_END = b"end_header"


@dataclass(frozen=True)
class Property:
    """One property of an element: a value, or a list (`count` is the type of its length)."""

    name: str
    value: np.dtype
    count: np.dtype | None = None


@dataclass
class Element:
    name: str
    rows: int
    properties: list[Property] = field(default_factory=list)


@dataclass(frozen=True)
class Header:
    byte_order: str  # "<" or ">" for binary data, "" for ASCII
    elements: list[Element]
    body_start: int  # where the data starts in the file
    lines: int  # lines of the header, for the line numbers of ASCII data


def read_ply(data: MeshBytes) -> ReadMesh:
    """(vertices (V, 3) float64, faces (T, 3) int64, parts, appearance) of a PLY file, or
    MalformedMesh; the parts and appearance only for a file whose header declares them
    (ply_extras)."""
    if starts_with_byte_order_mark(data):  # an ASCII PLY saved as UTF-16, UTF-32 or UTF-8
        data = text_bytes(data)
    header = parse_header(data)
    body: Body
    if header.byte_order:
        body = BinaryBody(data, header.byte_order, header.body_start)
    else:
        body = AsciiBody(bytes(data[header.body_start :]), header.lines)
    layouts = element_layouts(body, header.elements)
    vertex = next((e for e in header.elements if e.name == "vertex"), None)
    face = next((e for e in header.elements if e.name == "face"), None)
    if face is None or face.rows == 0:
        return ReadMesh(np.empty((0, 3)), np.empty((0, 3), np.int64))
    if vertex is None:
        raise MalformedMesh("the header declares faces but no vertex element")
    vertices = read_vertices(body, vertex, layouts[id(vertex)])
    faces = read_faces(body, face, layouts[id(face)], len(vertices))
    if not has_extras(vertex, face):
        return ReadMesh(vertices, faces)
    parts, appearance = read_extras(
        vertex,
        face,
        lambda element, prop: read_scalar(body, element, layouts[id(element)], prop),
        lambda element, prop: read_list_table(body, element, layouts[id(element)], prop),
        polygon_sizes(face, layouts[id(face)]),
        faces,
        bytes(data[: header.body_start]),
    )
    return ReadMesh(vertices, faces, parts, appearance)


# --- the header ----------------------------------------------------------------------------


_REMARKS = (b"comment", b"obj_info")  # header lines that say nothing about the data


def parse_header(data: MeshBytes) -> Header:
    """The header's format and elements, checked line by line up to end_header."""
    first_line = bytes(data[:256]).lstrip().split(b"\n", 1)[0]
    if b"ply" not in first_line.lower():
        raise MalformedMesh("it does not start with a ply line")
    end = _header_end(data)
    newline = data.find(b"\n", end)
    body_start = len(data) if newline < 0 else newline + 1
    raw_lines = bytes(data[:end]).split(b"\n")
    lines = [line.strip() for line in raw_lines if line.strip()]
    # Comments may come before the format line, as other readers and writers allow.
    after_magic = [line for line in lines[1:] if line.split()[0] not in _REMARKS]
    format_words = after_magic[0].split() if after_magic else []
    if format_words[:1] != [b"format"] or len(format_words) < 2:
        raise MalformedMesh("no format line follows the ply line")
    if format_words[1] not in _FORMATS:
        raise MalformedMesh(f"unknown format {_text(format_words[1])!r}")
    byte_order = _FORMATS[format_words[1]]
    elements: list[Element] = []
    for line in after_magic[1:]:
        words = line.split()
        if words[0] == b"element":
            if len(words) != 3 or not words[2].isdigit():
                raise MalformedMesh(f"bad element line {_text(line)!r}")
            elements.append(Element(_text(words[1]), int(words[2])))
        elif words[0] == b"property":
            if not elements:
                raise MalformedMesh("a property line before any element line")
            elements[-1].properties.append(_property(words, line, byte_order or "<"))
    return Header(byte_order, elements, body_start, len(raw_lines))


def _header_end(data: MeshBytes) -> int:
    """Where the end_header line starts (the first line whose first word it is)."""
    position = 0
    while True:
        found = data.find(_HEADER_END, position)
        if found < 0:
            raise MalformedMesh("the header is cut off (no end_header line)")
        line_start = data.rfind(b"\n", 0, found) + 1
        after = bytes(data[found + len(_HEADER_END) : found + len(_HEADER_END) + 1])
        if not bytes(data[line_start:found]).strip() and after.strip() == b"":
            return found
        position = found + 1


def _property(words: list[bytes], line: bytes, byte_order: str) -> Property:
    is_list = words[1:2] == [b"list"]
    types = [_text(word) for word in (words[2:4] if is_list else words[1:2])]
    if len(words) != (5 if is_list else 3) or not all(name in _TYPES for name in types):
        raise MalformedMesh(f"bad property line {_text(line)!r}")
    dtypes = [np.dtype(byte_order + _TYPES[name]) for name in types]
    if is_list:
        return Property(_text(words[4]), dtypes[1], dtypes[0])
    return Property(_text(words[2]), dtypes[0])


def _text(word: bytes) -> str:
    """A header word for a message, whatever its bytes."""
    return word.decode("utf-8", "replace")


# --- where the rows lie --------------------------------------------------------------------


class Body(ABC):
    """The data after the header, in units (bytes of binary data, values of ASCII data)."""

    limit: int  # the end of the data
    start: int  # where the first element starts

    @abstractmethod
    def width(self, dtype: np.dtype) -> int:
        """Units one value of `dtype` takes (its bytes, or 1 in ASCII)."""

    @abstractmethod
    def count_reader(self, dtype: np.dtype) -> Callable[[int], int]:
        """A function reading one list length at a position (fast: rows are walked with it)."""

    @abstractmethod
    def table(
        self, start: int, row: int, rows: int, dtype: np.dtype, offset: int, width: int
    ) -> np.ndarray:
        """(rows, width) values of `dtype` at `offset` in fixed rows of `row` units."""

    @abstractmethod
    def gather(self, positions: np.ndarray, dtype: np.dtype) -> np.ndarray:
        """The values of `dtype` at each of `positions`."""

    def declared(self, values: np.ndarray, dtype: np.dtype) -> np.ndarray:
        """Values as the file holds them (ASCII values, parsed as float64, in their type)."""
        return values

    def indices(self, values: np.ndarray) -> np.ndarray:
        """Vertex indices as integers: those of a float type must be whole numbers."""
        if values.dtype.kind in "iu":
            return values
        whole = np.isfinite(values) & (values == np.trunc(values))
        if not whole.all():
            raise MalformedMesh(f"a vertex index that is not a whole number ({values[~whole][0]})")
        huge = np.abs(values) >= 2.0**63  # no int64 holds it: named here, never wrapped
        if huge.any():
            raise MalformedMesh(
                f"a face refers to vertex {values[huge][0]:.0f}, which does not exist"
            )
        return values.astype(np.int64)

    @abstractmethod
    def cut_off(self, declared: str, needed: int) -> MalformedMesh:
        """The error for data that ends before what the header declares."""


class BinaryBody(Body):
    def __init__(self, data: MeshBytes, byte_order: str, start: int) -> None:
        self.data = data
        self.byte_order = byte_order
        self.start = start
        self.limit = len(data)

    def width(self, dtype: np.dtype) -> int:
        return dtype.itemsize

    def count_reader(self, dtype: np.dtype) -> Callable[[int], int]:
        data = self.data
        if dtype.itemsize == 1 and dtype.kind == "u":
            return data.__getitem__  # a byte of bytes or mmap is an int
        order: Literal["little", "big"] = "little" if self.byte_order == "<" else "big"
        size, signed = dtype.itemsize, dtype.kind == "i"
        return lambda at: int.from_bytes(data[at : at + size], order, signed=signed)

    def table(
        self, start: int, row: int, rows: int, dtype: np.dtype, offset: int, width: int
    ) -> np.ndarray:
        layout = np.dtype(
            {"names": ["v"], "formats": [(dtype, (width,))], "offsets": [offset], "itemsize": row}
        )
        return np.frombuffer(self.data, layout, count=rows, offset=start)["v"]

    def gather(self, positions: np.ndarray, dtype: np.dtype) -> np.ndarray:
        raw = np.frombuffer(self.data, np.uint8)
        picked = raw[positions[:, None] + np.arange(dtype.itemsize)]
        return picked.view(dtype).reshape(-1)

    def cut_off(self, declared: str, needed: int) -> MalformedMesh:
        return MalformedMesh(
            f"the data is cut off: the header declares {declared} ({needed - self.start:,} "
            f"bytes), the file has {self.limit - self.start:,} after the header"
        )


class AsciiBody(Body):
    def __init__(self, text: bytes, header_lines: int) -> None:
        line_numbers = np.arange(text.count(b"\n") + 1) + header_lines + 1
        self.values = parse_numbers(text, np.float64, "value", line_numbers)
        self.start = 0
        self.limit = len(self.values)

    def width(self, dtype: np.dtype) -> int:
        return 1

    def count_reader(self, dtype: np.dtype) -> Callable[[int], int]:
        values = memoryview(self.values.data)  # Python floats, quickly

        def read(at: int) -> int:
            value = values[at]
            if not math.isfinite(value) or value != int(value):
                raise MalformedMesh(f"a list length that is not a whole number ({value})")
            return int(value)

        return read

    def table(
        self, start: int, row: int, rows: int, dtype: np.dtype, offset: int, width: int
    ) -> np.ndarray:
        block = self.values[start : start + rows * row].reshape(rows, row)
        return block[:, offset : offset + width]

    def gather(self, positions: np.ndarray, dtype: np.dtype) -> np.ndarray:
        return self.values[positions]

    def declared(self, values: np.ndarray, dtype: np.dtype) -> np.ndarray:
        # as trimesh reads ASCII: parsed as float64, then held in the declared type
        return values.astype(dtype.newbyteorder("="))

    def cut_off(self, declared: str, needed: int) -> MalformedMesh:
        return MalformedMesh(
            f"the data is cut off: the header declares {declared} ({needed:,} values), "
            f"the file has {self.limit:,}"
        )


@dataclass
class Layout:
    """Where an element's rows lie: `row` units each from `start` (every list as long as in
    the first row, `lengths`), or, when the lists differ, each row's start and lengths."""

    start: int
    end: int
    row: int | None  # units per row when fixed
    lengths: list[int]  # of the lists in a fixed row, in order
    row_starts: np.ndarray | None = None  # when not fixed
    row_lengths: list[np.ndarray] | None = None  # per list, each row's length


def element_layouts(body: Body, elements: list[Element]) -> dict[int, Layout]:
    """Each element's layout (keyed by id), checked to fill the data exactly."""
    declared = ", ".join(f"{element.rows:,} {element.name}" for element in elements)
    layouts: dict[int, Layout] = {}
    position = body.start
    for number, element in enumerate(elements):
        try:
            layout = _layout(body, element, position)
        except _OutOfData as short:
            rest = sum(e.rows * _least_row(body, e) for e in elements[number + 1 :])
            raise body.cut_off(declared, max(short.needed, position) + rest) from None
        layouts[id(element)] = layout
        position = layout.end
    if position != body.limit:
        unit = "bytes" if isinstance(body, BinaryBody) else "values"
        raise MalformedMesh(
            f"the data does not match the header's elements and properties ({declared}: "
            f"{position - body.start:,} {unit}, the file has {body.limit - body.start:,})"
        )
    return layouts


class _OutOfData(Exception):
    def __init__(self, needed: int) -> None:
        self.needed = needed


def _least_row(body: Body, element: Element) -> int:
    """The units of a row whose lists are all empty."""
    return sum(body.width(p.count if p.count is not None else p.value) for p in element.properties)


def _layout(body: Body, element: Element, start: int) -> Layout:
    rows, properties = element.rows, element.properties
    least = _least_row(body, element)
    if rows == 0 or all(p.count is None for p in properties):
        if start + rows * least > body.limit:
            raise _OutOfData(start + rows * least)
        return Layout(start, start + rows * least, least, [])
    lengths: list[int] = []
    position = start
    for prop in properties:  # the first row: its list lengths give the fixed layout
        if prop.count is None:
            position += body.width(prop.value)
            continue
        if position + body.width(prop.count) > body.limit:
            raise _OutOfData(start + rows * least)
        length = _length(body.count_reader(prop.count)(position))
        lengths.append(length)
        position += body.width(prop.count) + length * body.width(prop.value)
    row = position - start
    if start + rows * least > body.limit:  # not even rows of empty lists fit
        raise _OutOfData(start + rows * row)
    if start + rows * row <= body.limit and _lists_all_as_first(body, element, start, row, lengths):
        return Layout(start, start + rows * row, row, lengths)
    return _walk(body, element, start)


def _lists_all_as_first(
    body: Body, element: Element, start: int, row: int, lengths: list[int]
) -> bool:
    """Whether every row's lists are as long as the first row's (one strided view each)."""
    offset, number = 0, 0
    for prop in element.properties:
        if prop.count is None:
            offset += body.width(prop.value)
            continue
        counts = body.table(start, row, element.rows, prop.count, offset, 1)
        if not (counts == lengths[number]).all():
            return False
        offset += body.width(prop.count) + lengths[number] * body.width(prop.value)
        number += 1
    return True


def _length(value: int) -> int:
    if value < 0:
        raise MalformedMesh(f"a list of negative length ({value})")
    return value


def _walk(body: Body, element: Element, start: int) -> Layout:
    """Each row's start and list lengths, row by row (lists of differing lengths)."""
    # per property: (units of a value, or of a list's length; units of a list item; reader)
    plan = [
        (
            body.width(p.count if p.count is not None else p.value),
            body.width(p.value) if p.count is not None else 0,
            body.count_reader(p.count) if p.count is not None else None,
        )
        for p in element.properties
    ]
    row_starts = array("q", bytes(8 * element.rows))
    lengths = [array("q", bytes(8 * element.rows)) for p in plan if p[2] is not None]
    position, limit = start, body.limit
    for row in range(element.rows):
        row_starts[row] = position
        number = 0
        for width, item, read in plan:
            if read is not None:
                if position + width > limit:
                    raise _OutOfData(position + width)
                length = _length(read(position))
                lengths[number][row] = length
                number += 1
                position += length * item
            position += width
        if position > limit:
            raise _OutOfData(position)
    return Layout(
        start,
        position,
        None,
        [],
        np.frombuffer(row_starts, np.int64),
        [np.frombuffer(row_lengths, np.int64) for row_lengths in lengths],
    )


def _offsets(body: Body, element: Element, layout: Layout, name: str) -> np.ndarray | int:
    """Where property `name` starts: within each fixed row (an int), or in the data per row
    (an array, for walked rows)."""
    offset: np.ndarray | int = 0
    number = 0
    for prop in element.properties:
        if prop.name == name:
            break
        if prop.count is None:
            offset = offset + body.width(prop.value)
            continue
        if layout.row_lengths is None:
            length: np.ndarray | int = layout.lengths[number]
        else:
            length = layout.row_lengths[number]
        offset = offset + body.width(prop.count) + length * body.width(prop.value)
        number += 1
    if layout.row_starts is not None:
        return layout.row_starts + offset
    return offset


# --- vertices and faces ----------------------------------------------------------------------


def read_scalar(body: Body, element: Element, layout: Layout, prop: Property) -> np.ndarray:
    """One scalar property of every row of an element, in its declared type."""
    offset = _offsets(body, element, layout, prop.name)
    if layout.row is None:  # walked rows
        values = body.gather(np.asarray(offset), prop.value)
    else:
        values = body.table(layout.start, layout.row, element.rows, prop.value, int(offset), 1)
        values = values[:, 0]
    return body.declared(values, prop.value)


def read_list_table(body: Body, element: Element, layout: Layout, prop: Property) -> np.ndarray:
    """(rows, n) values of a list property whose every row has n items (rows of fixed
    layout only); MalformedMesh otherwise."""
    lists = [p for p in element.properties if p.count is not None]
    number = lists.index(prop)
    if layout.row is None or layout.row_lengths is not None:
        raise MalformedMesh(f"the {prop.name} lists differ in length")
    offset = int(_offsets(body, element, layout, prop.name))
    assert prop.count is not None
    width = layout.lengths[number]
    table = body.table(
        layout.start, layout.row, element.rows, prop.value, offset + body.width(prop.count), width
    )
    return body.declared(table, prop.value)


def polygon_sizes(face: Element, layout: Layout) -> np.ndarray:
    """The corner count of every face (as read_faces fans them)."""
    lists = [prop for prop in face.properties if prop.count is not None]
    chosen = next((prop for prop in lists if prop.name in _FACE_LISTS), lists[0])
    number = lists.index(chosen)
    if layout.row_lengths is None:
        return np.full(face.rows, layout.lengths[number], np.int64)
    return layout.row_lengths[number]


def read_vertices(body: Body, vertex: Element, layout: Layout) -> np.ndarray:
    """(V, 3) float64 from the x, y, z properties, whatever their types and neighbours."""
    named: dict[str, Property] = {}
    for prop in vertex.properties:
        named.setdefault(prop.name, prop)
    axes = [named.get(name) for name in "xyz"]
    if any(prop is None or prop.count is not None for prop in axes):
        raise MalformedMesh("the vertex element has no x, y and z values")
    x, y, z = (prop for prop in axes if prop is not None)
    offsets = [_offsets(body, vertex, layout, prop.name) for prop in (x, y, z)]
    if layout.row is None:  # walked rows
        columns = [body.gather(np.asarray(o), p.value) for o, p in zip(offsets, (x, y, z))]
    elif x.value == y.value == z.value and [int(o) for o in offsets] == [
        int(offsets[0]) + i * body.width(x.value) for i in range(3)
    ]:  # x, y, z side by side: one strided view
        table = body.table(layout.start, layout.row, vertex.rows, x.value, int(offsets[0]), 3)
        columns = [table[:, 0], table[:, 1], table[:, 2]]
    else:
        columns = [
            body.table(layout.start, layout.row, vertex.rows, p.value, int(o), 1)[:, 0]
            for o, p in zip(offsets, (x, y, z))
        ]
    return float64_vertices([body.declared(c, p.value) for c, p in zip(columns, (x, y, z))])


def read_faces(body: Body, face: Element, layout: Layout, vertex_count: int) -> np.ndarray:
    """(T, 3) int64 triangles of the face element's index lists (polygons fanned)."""
    lists = [prop for prop in face.properties if prop.count is not None]
    chosen = next((prop for prop in lists if prop.name in _FACE_LISTS), None)
    if chosen is None and len(lists) == 1:
        chosen = lists[0]
    if chosen is None:
        raise MalformedMesh("the face element has no vertex_indices list")
    number = lists.index(chosen)
    offset = _offsets(body, face, layout, chosen.name)
    count_width = body.width(chosen.count) if chosen.count is not None else 0
    if layout.row_lengths is None:  # every face has the first face's corner count
        corners = layout.lengths[number]
        table = body.table(
            layout.start,
            layout.row or 0,
            face.rows,
            chosen.value,
            int(offset) + count_width,
            corners,
        )
        if corners == 3:
            table = body.indices(table)
            return int64_faces([table[:, 0], table[:, 1], table[:, 2]], vertex_count)
        written = body.indices(table.reshape(-1))
        counts = np.full(face.rows, corners, np.int64)
    else:
        counts = layout.row_lengths[number]
        item_width = body.width(chosen.value)
        firsts = np.asarray(offset) + count_width
        owner_first = np.repeat(firsts, counts)
        rank = np.arange(len(owner_first)) - np.repeat(np.cumsum(counts) - counts, counts)
        written = body.indices(body.gather(owner_first + rank * item_width, chosen.value))
    flat = written.astype(np.int64)  # a uint64 index from 2^63 up wraps: named as written
    starts = np.cumsum(counts) - counts
    check_indices(
        flat,
        vertex_count,
        lambda at: f"face {int(np.searchsorted(starts, at, side='right')) - 1:,}",
        written=written,
    )
    return triangles_of_polygons(flat, counts, grouped=True)
