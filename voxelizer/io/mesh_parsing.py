"""What the native mesh readers (ply_file, stl_file, obj_file) share: the error that names
what breaks a format, text lines by keyword, numbers parsed from text, polygons as triangles,
and the conversion of file arrays to the Mesh's float64 vertices and int64 faces.

Every function works on whole arrays (numpy releases the GIL in its loops, and large arrays
are converted in row chunks on the host's cores); Python loops run only over the rows of
files whose rows differ in layout."""

from __future__ import annotations

import codecs
import io
import mmap
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..parallel import copy_rows, for_row_chunks
from .text_numbers import fast_numbers, fast_table

if TYPE_CHECKING:
    from ..attributes.appearance import Appearance, Parts

MeshBytes = bytes | mmap.mmap
"""A whole mesh file: bytes, or the file mapped into memory (binary bodies are read in place)."""

_BYTE_ORDER_MARKS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),  # before UTF-16 LE: its mark starts the same way
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
    (codecs.BOM_UTF8, "utf-8"),
)
_INDENT_STEPS = 32
_SPACES = bytes.maketrans(b"\n\r\t\v\f", b"     ")
# Bytes above ASCII that numpy's text parser (reading Latin-1) takes for blanks: as spaces in
# payloads, so that counting words by bytes agrees with it.
_WIDE_BLANKS = bytes.maketrans(b"\x85\xa0", b"  ")


class ReadMesh(NamedTuple):
    """What a native reader finds in a file: the triangles, and where the file has them, the
    part of each face and how to make the faces' appearance once the file's path is known
    (an OBJ's materials and textures lie beside it)."""

    vertices: np.ndarray  # (V, 3) float64
    faces: np.ndarray  # (T, 3) int64
    parts: Parts | None = None
    appearance: Callable[[Path], Appearance] | None = None


class MalformedMesh(ValueError):
    """A fact about the file breaks its format: the one-line message says which, and the
    caller (voxelizer.io.meshes) adds the file and the format."""


def text_bytes(data: MeshBytes) -> bytes:
    """A text file's bytes in an ASCII-compatible encoding: a UTF-16 or UTF-32 file (known by
    its byte order mark) is re-encoded as UTF-8 and a UTF-8 mark is dropped. Any other
    encoding passes as it is: the readers only take numbers and keywords, which are ASCII in
    every such encoding, and never decode a name or a comment."""
    head = bytes(data[:4])
    for mark, encoding in _BYTE_ORDER_MARKS:
        if head.startswith(mark):
            if encoding == "utf-8":
                return bytes(data[len(mark) :])
            return bytes(data[len(mark) :]).decode(encoding, "replace").encode("utf-8")
    return bytes(data)


def starts_with_byte_order_mark(data: MeshBytes) -> bool:
    """Whether the file starts with a UTF-8, UTF-16 or UTF-32 byte order mark."""
    head = bytes(data[:4])
    return any(head.startswith(mark) for mark, _ in _BYTE_ORDER_MARKS)


def _blank(chars: np.ndarray) -> np.ndarray:
    """Spaces and tabs: what may indent a line."""
    return (chars == ord(" ")) | (chars == ord("\t"))


class TextLines:
    """The lines of a text file and where each line's first word starts, to pick the lines
    that begin with a keyword (after any spaces or tabs) in whole-array operations."""

    def __init__(self, text: bytes) -> None:
        self.text = text if text.endswith(b"\n") else text + b"\n"
        self.array = np.frombuffer(self.text, np.uint8)
        self.ends = np.flatnonzero(self.array == ord("\n"))
        self.starts = np.concatenate(([0], self.ends[:-1] + 1))
        heads = self.starts.copy()
        indented = np.flatnonzero(_blank(self.array[heads]))
        for _ in range(_INDENT_STEPS):  # one step per column, for the indented lines only
            if not indented.size:
                break
            heads[indented] += 1
            indented = indented[_blank(self.array[heads[indented]])]
        for line in indented.tolist():  # deeper indentation: line by line
            words = self.text[heads[line] : self.ends[line]]
            heads[line] += len(words) - len(words.lstrip(b" \t"))
        self.heads = heads
        self._columns: dict[int, np.ndarray] = {}

    def column(self, offset: int) -> np.ndarray:
        """The byte `offset` places after each line's first word starts (the newline for a
        line that ends before), gathered once per offset."""
        if offset not in self._columns:
            self._columns[offset] = self.array[np.minimum(self.heads + offset, self.ends)]
        return self._columns[offset]

    def with_keyword(self, keyword: bytes, ignore_case: bool = False) -> np.ndarray:
        """Indices of the lines whose first word is `keyword` (ASCII letters)."""
        selected = self.column(len(keyword)) <= ord(" ")  # then a blank or the line's end
        for offset, char in enumerate(keyword.lower()):
            found = self.column(offset)
            selected &= (found | 0x20 if ignore_case else found) == char
        return np.flatnonzero(selected)

    def payload(self, lines: np.ndarray, keyword_length: int) -> bytes:
        """The text of `lines` (sorted line indices) with their keyword blanked: one line
        each, ending in a newline."""
        if len(lines) == 0:
            return b""
        run_starts = np.flatnonzero(np.diff(lines) != 1) + 1
        if len(run_starts) < max(16, len(lines) // 64):  # few runs of consecutive lines
            text = self._runs_blanked(lines, run_starts, keyword_length)
        else:
            copy = bytearray(self.text)
            blanked = np.frombuffer(copy, np.uint8)
            for offset in range(keyword_length):
                blanked[self.heads[lines] + offset] = ord(" ")
            selected = np.zeros(len(self.starts), bool)
            selected[lines] = True
            text = blanked[np.repeat(selected, self.ends - self.starts + 1)].tobytes()
        return text.translate(_WIDE_BLANKS) if _has_wide_blanks(text) else text

    def _runs_blanked(
        self, lines: np.ndarray, run_starts: np.ndarray, keyword_length: int
    ) -> bytes:
        """payload() of lines in a few runs of consecutive lines (`run_starts`: where each run
        but the first starts in `lines`): the runs joined, then their keywords blanked in
        that copy (a copy of the whole text first would cost as much again)."""
        first_of_run = np.concatenate(([0], run_starts))
        firsts = lines[first_of_run]
        lasts = lines[np.concatenate((run_starts - 1, [len(lines) - 1]))]
        starts, stops = self.starts[firsts], self.ends[lasts] + 1
        view = memoryview(self.text)
        joined = bytearray().join(
            view[start:stop] for start, stop in zip(starts.tolist(), stops.tolist())
        )
        # a line's place in the joined text: its place in the text, less its run's start,
        # plus the length of the runs before
        lengths = stops - starts
        shifts = np.cumsum(lengths) - lengths - starts
        run_of_line = np.repeat(np.arange(len(firsts)), np.diff(first_of_run, append=len(lines)))
        heads = self.heads[lines] + shifts[run_of_line]
        blanked = np.frombuffer(joined, np.uint8)
        for offset in range(keyword_length):
            blanked[heads + offset] = ord(" ")
        return bytes(joined)

    def line_number(self, line: int) -> int:
        """The 1-based number of line index `line`, for messages."""
        return int(line) + 1


def _has_wide_blanks(text: bytes) -> bool:
    """Whether `text` holds a byte of _WIDE_BLANKS (a byte search is 40x faster than the
    translation it spares)."""
    return b"\x85" in text or b"\xa0" in text


def parse_table(payload: bytes, dtype: type, columns: int | None = None) -> np.ndarray | None:
    """The numbers of `payload` as rows (one per line): the first `columns` of each line
    (more are ignored), or, without `columns`, every number when all lines hold the same
    count. None when the lines are not such a table (a line too short, lines of different
    lengths, or a word that is not a number: parse_numbers and first_bad_word tell which)."""
    if not payload or payload.isspace():
        return np.empty((0, columns or 0), dtype)
    if b"\r" in payload:  # CRLF lines: the row parser wants plain newlines
        payload = payload.replace(b"\r", b" ")
    fast = fast_table(payload, dtype, columns)  # the usual text, without the GIL
    if fast is not None:
        return fast
    usecols = None if columns is None else range(columns)
    try:
        table: np.ndarray = np.loadtxt(
            io.BytesIO(payload), dtype=dtype, usecols=usecols, comments=None, ndmin=2
        )
    except ValueError:
        return None
    return table


def parse_numbers(payload: bytes, dtype: type, what: str, line_numbers: np.ndarray) -> np.ndarray:
    """Every number of `payload` in order, or MalformedMesh naming the first word that is not
    a number (`line_numbers[i]` is the file's line number of the payload's line i)."""
    if not payload or payload.isspace():
        return np.empty(0, dtype)
    fast = fast_numbers(payload, dtype)  # the usual text, without the GIL
    if fast is not None:
        return fast
    try:
        one_line = io.BytesIO(payload.translate(_SPACES))
        return np.loadtxt(one_line, dtype=dtype, comments=None, ndmin=1)
    except ValueError:
        raise MalformedMesh(first_bad_word(payload, dtype, what, line_numbers)) from None


def first_bad_word(payload: bytes, dtype: type, what: str, line_numbers: np.ndarray) -> str:
    """Why the numbers of `payload` do not parse, with the line of the file (slow: only for
    the message of a file that has failed the fast parse)."""
    kind = "an integer" if np.issubdtype(dtype, np.integer) else "a number"
    for row, line in enumerate(payload.split(b"\n")):
        for word in line.split():
            try:
                np.array(word.decode("latin-1"), dtype=dtype)  # accepts what loadtxt does
            except (ValueError, OverflowError):
                shown = word[:24].decode("latin-1")
                return f"line {line_numbers[row]:,}: {what} {shown!r} is not {kind}"
    return f"a value in the {what}s that is not {kind}"


def token_counts(payload: bytes) -> np.ndarray:
    """Words per line of a payload (lines ending in newlines; any byte up to a space is a
    blank)."""
    array = np.frombuffer(payload, np.uint8)
    blank = array <= ord(" ")
    starts = ~blank
    starts[1:] &= blank[:-1]
    newline = array == ord("\n")
    events = np.flatnonzero(starts | newline)  # word starts and line ends, in order
    is_end = newline[events]
    line_of_event = np.cumsum(is_end) - is_end  # a line's end belongs to that line
    counts = np.bincount(line_of_event[~is_end], minlength=int(np.count_nonzero(newline)))
    return counts.astype(np.int64)


# --- polygons -------------------------------------------------------------------------------


def triangles_of_polygons(corners: np.ndarray, counts: np.ndarray, grouped: bool) -> np.ndarray:
    """(T, 3) int64 triangles of polygons given as their corners in a row and the corner
    count of each, fanned from each polygon's first corner; a quad (a, b, c, d) becomes
    (a, b, c) and (c, d, a). Polygons of fewer than 3 corners give none.

    grouped: the order trimesh gives (all triangles, then every quad's first half, then every
    quad's second half, then the larger polygons' fans), else each polygon's triangles in
    the polygons' order."""
    counts = counts.astype(np.int64, copy=False)
    starts = np.cumsum(counts) - counts
    if grouped:
        triangles = starts[counts == 3]
        quads = starts[counts == 4]
        larger = counts > 4
        pieces = [
            corners[triangles[:, None] + np.arange(3)],
            corners[quads[:, None] + np.arange(3)],
            corners[quads[:, None] + np.array([2, 3, 0])],
            corners[_fans(starts[larger], counts[larger])],
        ]
        return np.ascontiguousarray(np.concatenate(pieces), np.int64)
    keep = counts >= 3
    positions = _fans(starts[keep], counts[keep])
    second_of_quad = _second_triangles_of_quads(counts[keep])
    positions[second_of_quad] = np.roll(positions[second_of_quad], -1, axis=1)
    return np.ascontiguousarray(corners[positions], np.int64)


def _fans(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """(T, 3) positions of the fan triangles (s, s+i, s+i+1) of each polygon, in order."""
    per_polygon = counts - 2
    owner_start = np.repeat(starts, per_polygon)
    first_of_owner = np.repeat(np.cumsum(per_polygon) - per_polygon, per_polygon)
    step = np.arange(len(owner_start)) - first_of_owner + 1
    return np.stack([owner_start, owner_start + step, owner_start + step + 1], axis=1)


def _second_triangles_of_quads(counts: np.ndarray) -> np.ndarray:
    """Rows of the fans of these polygons that are the second triangle of a quad."""
    per_polygon = counts - 2
    first_rows = np.cumsum(per_polygon) - per_polygon
    return first_rows[counts == 4] + 1


# --- the Mesh's arrays ------------------------------------------------------------------------


def float64_vertices(columns: Sequence[np.ndarray]) -> np.ndarray:
    """(V, 3) float64, C-contiguous, from the x, y and z columns: views of any numeric type
    and stride (a file's rows in place), converted in row chunks on the host's cores."""
    vertices = np.empty((len(columns[0]), 3), np.float64)

    def convert(start: int, stop: int) -> None:
        for axis, column in enumerate(columns):  # a strided column: numpy's fastest cast
            vertices[start:stop, axis] = column[start:stop]

    for_row_chunks(len(vertices), convert)
    return vertices


def int64_faces(columns: Sequence[np.ndarray], vertex_count: int) -> np.ndarray:
    """(T, 3) int64, C-contiguous, from the three corner columns (integer views of any type
    and stride), or MalformedMesh when an index is not one of the `vertex_count` vertices."""
    faces = np.empty((len(columns[0]), 3), np.int64)
    largest: list[int] = []

    def convert(start: int, stop: int) -> None:
        chunk = faces[start:stop]
        for axis, column in enumerate(columns):
            chunk[:, axis] = column[start:stop]
        # a negative index is larger than any valid one as uint64: one pass checks both ends
        largest.append(int(chunk.view(np.uint64).max(initial=0)))

    for_row_chunks(len(faces), convert)
    if largest and max(largest) >= vertex_count:  # named as written: 2^63 is not negative
        check_indices(faces.reshape(-1), vertex_count, written=np.stack(columns, axis=1).ravel())
    return faces


def check_indices(
    indices: np.ndarray,
    vertex_count: int,
    where: Callable[[int], str] | None = None,
    written: np.ndarray | None = None,
) -> None:
    """MalformedMesh naming the first of `indices` that is not one of `vertex_count`
    vertices; `where(i)` says where index i is in the file (default: three per face), and
    `written` holds the indices as the file writes them, when that differs."""
    if not len(indices) or (indices.min() >= 0 and indices.max() < vertex_count):
        return  # two reductions: the usual file, without a mask of every index
    bad = np.flatnonzero((indices < 0) | (indices >= vertex_count))
    if len(bad):
        first = int(bad[0])
        place = where(first) if where is not None else f"face {first // 3:,}"
        shown = (indices if written is None else written)[first]
        raise MalformedMesh(
            f"a face refers to a vertex that does not exist ({place} refers to vertex "
            f"{int(shown):,}, the file has {vertex_count:,} vertices)"
        )


def without_comments(payload: bytes) -> bytes:
    """A payload with '#' comments cut from its lines."""
    return re.sub(rb"#[^\n]*", b"", payload) if b"#" in payload else payload


def float64_copy(values: np.ndarray) -> np.ndarray:
    """A C-contiguous float64 copy of a view of any numeric type and stride, converted in
    chunks of its first axis on the host's cores."""
    copy = np.empty(values.shape, np.float64)
    copy_rows(copy, values)
    return copy


# --- corners shared by position ---------------------------------------------------------------

_MIX = np.uint64(0xC2B2AE3D27D4EB4F)
_SPREAD = np.uint64(0x9E3779B97F4A7C15)
"""Odd 64-bit constants: a row's hash is ((k_last * MIX + ...) * MIX + k_0) * SPREAD over its
key columns, and its slot the top bits of that (multiplicative hashing)."""


def merged_corners(corners: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of (..., 3) float `corners` (a view of any stride) in the order they
    first appear, and for each corner the index of its row: a soup's corners become an indexed
    mesh. Rows are equal when their values are (-0.0 and 0.0 are one; the pipeline sees no
    difference), found with a hash table built in whole-array rounds, in time linear in N;
    each step is one numpy pass over the rows, done in place where it can be.

    The table is built over the rows in reverse order: numpy writes repeated indices in
    order, so of the rows written to one slot the last, the file's first, stays, and every
    write is a forward scatter (a reversed one is 3x slower)."""
    count = corners.size // 3
    if count == 0:
        return np.empty((0, 3), corners.dtype), np.empty(0, np.int64)
    keys = _row_keys(corners)  # row r: the file's corner count - 1 - r
    slot_bits = max(4, (2 * count - 1).bit_length())  # at most half of the slots used
    at = _slots(keys, slot_bits)
    mask = (1 << slot_bits) - 1
    table = np.full(1 << slot_bits, -1, np.int64 if count >= 1 << 31 else np.int32)
    table[at] = np.arange(count, dtype=table.dtype)  # the first round, for every row
    owners = np.take(table, at)
    found = _same_rows(keys, owners, None)
    pending = np.flatnonzero(~found)
    at = (at[pending] + 1) & mask  # linear probing
    while len(pending):
        free = table[at] < 0
        # rows with one key wait at the same slots in lockstep: the last of them claims one
        table[at[free]] = pending[free]
        owner = table[at]
        found = _same_rows(keys, owner, pending)
        owners[pending[found]] = owner[found]
        missed = ~found
        pending = pending[missed]
        at = (at[missed] + 1) & mask
    owners = (count - 1) - owners[::-1]  # in the file's order: each corner's first equal
    firsts = np.flatnonzero(owners == np.arange(count, dtype=owners.dtype))
    row_of_first = np.empty(count, np.int64)  # read only where a row first appears
    row_of_first[firsts] = np.arange(len(firsts))
    return _rows_of(keys, (count - 1) - firsts, corners.dtype), np.take(row_of_first, owners)


def _row_keys(corners: np.ndarray) -> list[np.ndarray]:
    """Contiguous unsigned columns (one entry per row, the rows of (..., 3) floats `corners`
    in reverse order) that together are the bits of each row with -0.0 as 0.0 (adding 0.0
    makes it so): float32 x and y in one uint64 and z, or the three float64 coordinates.
    Each is one copy from the view (a copy into a contiguous column is fast, into a strided
    one slow), then one pass in place."""
    if corners.strides[-1] != corners.itemsize:  # the coordinates of a row apart: together
        corners = np.ascontiguousarray(corners)
    backwards = corners[(slice(None, None, -1),) * (corners.ndim - 1)]
    if corners.itemsize == 4:  # x and y side by side in each row: one uint64
        views = [backwards[..., :2].view(np.uint64)[..., 0], backwards[..., 2].view(np.uint32)]
    else:
        unsigned = np.dtype(f"u{corners.itemsize}")
        views = [backwards[..., axis].view(unsigned) for axis in range(3)]
    columns = [np.ascontiguousarray(view).reshape(-1) for view in views]
    for column in columns:
        values = column.view(corners.dtype)
        np.add(values, 0, out=values)
    return columns


def _rows_of(keys: list[np.ndarray], picked: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """(len(picked), 3) rows of `dtype` of the _row_keys columns, at the rows picked."""
    rows = np.empty((len(picked), 3), dtype)
    if len(keys) == 2:  # column by column: a copy of rows of two values is 3x slower
        pairs = np.take(keys[0], picked).view(dtype)
        rows[:, 0], rows[:, 1] = pairs[0::2], pairs[1::2]
        rows[:, 2] = np.take(keys[1], picked).view(dtype)
    else:
        for axis, key in enumerate(keys):
            rows[:, axis] = np.take(key, picked).view(dtype)
    return rows


def _slots(keys: list[np.ndarray], slot_bits: int) -> np.ndarray:
    """Each row's home slot (int64) in a table of 2**slot_bits: the top bits of its hash,
    computed in one uint64 array, in place."""
    hashes = keys[-1].astype(np.uint64)
    with np.errstate(over="ignore"):
        for key in keys[-2::-1]:
            hashes *= _MIX
            hashes += key
        hashes *= _SPREAD
    hashes >>= np.uint64(64 - slot_bits)
    return hashes.view(np.int64)  # below 2**63 after the shift


def _same_rows(keys: list[np.ndarray], rows: np.ndarray, others: np.ndarray | None) -> np.ndarray:
    """Whether row rows[i] equals row others[i] (row i where others is None), key by key
    (np.take: indexing with an int32 array is 3x slower)."""
    same: np.ndarray | None = None
    for key in keys:
        equal = np.take(key, rows) == (key if others is None else np.take(key, others))
        same = equal if same is None else same & equal
    assert same is not None
    return same
