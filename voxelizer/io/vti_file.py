""".vti files: VTK's XML ImageData, which ParaView, PyVista and VTK open as they are.

Written with numpy and the standard library (no VTK needed): the grid's points are the voxel
corners (Origin = grid origin, Spacing = (hx, hy, hz), WholeExtent 0..n per axis), so that cell
(i, j, k) is voxel (i, j, k), and the cell array "solid" (UInt8 0/1, i fastest) holds the
voxels, zlib-compressed in raw appended data. A result with labels also gets the cell
array "label" (UInt16, 0 for empty voxels), one with colours "color" (UInt8, 4 components:
RGBA); ParaView shows "color" as colours when "Map Scalars" is off.

The reader takes these files back and the other ways VTK stores one such array (inline
base64 "binary", appended raw or base64, "ascii", compressed with zlib or not), so that a file
re-saved by ParaView or PyVista loads too: a voxel is solid where "solid" is not 0.
"""

from __future__ import annotations

import base64
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

import numpy as np

from ..budget import check_host_fits
from ..convert import reversed_axes, vtk_cell_order
from ..errors import FormatError, GridError, MemoryBudgetError
from ..grid import DenseGrid
from ..placement import GridPlacement, Placed, check_shape
from .files import read_regular
from .output import open_output

ARRAY_NAME = "solid"
BLOCK_BYTES = 1 << 20  # uncompressed bytes per zlib block (VTK's blocks may be any size)
# VTK's type names -> numpy dtypes (byte order added from the file's byte_order).
VTK_TYPES = {
    "Int8": "i1",
    "UInt8": "u1",
    "Int16": "i2",
    "UInt16": "u2",
    "Int32": "i4",
    "UInt32": "u4",
    "Int64": "i8",
    "UInt64": "u8",
    "Float32": "f4",
    "Float64": "f8",
}
ZLIB = "vtkZLibDataCompressor"
# Deflate inflates at most 1032-fold (a 258-byte match per 2 bits); a zlib stream of nothing
# is 8 bytes. A table claiming more is corrupted, or a bomb.
ZLIB_MAX_RATIO = 1032
ZLIB_SMALLEST_STREAM = 8


def write_vti(result: Placed, path: str | os.PathLike, overwrite: bool = False) -> None:
    """VTK XML ImageData with cell data "solid" (and "label", "color" when the result has
    them): origin, voxel size and shape kept."""
    nx, ny, nz = result.shape
    arrays = [(ARRAY_NAME, "UInt8", 1, vtk_cell_order(result.to_numpy()), "0", "1")]
    if "label" in result.attributes:
        labels = reversed_axes(result.to_numpy("label")).reshape(-1)
        arrays.append(("label", "UInt16", 1, labels, "0", str(int(labels.max(initial=0)))))
    if "color" in result.attributes:
        colors = np.ascontiguousarray(result.to_numpy("color").transpose(2, 1, 0, 3))
        arrays.append(("color", "UInt8", 4, colors.reshape(-1), "0", "255"))
    pieces: list[bytes] = []
    declarations: list[str] = []
    offset = 0
    for name, kind, components, data, low, high in arrays:
        piece = _compressed(data.view(np.uint8))
        several = f' NumberOfComponents="{components}"' if components > 1 else ""
        declarations.append(
            f'        <DataArray type="{kind}" Name="{name}"{several} format="appended" '
            f'RangeMin="{low}" RangeMax="{high}" offset="{offset}"/>\n'
        )
        pieces.append(piece)
        offset += len(piece)
    origin = " ".join(repr(float(v)) for v in result.placement.origin)
    spacing = " ".join(repr(float(h)) for h in result.placement.spacing)
    extent = f"0 {nx} 0 {ny} 0 {nz}"
    xml = (
        '<?xml version="1.0"?>\n'
        '<VTKFile type="ImageData" version="1.0" byte_order="LittleEndian" '
        f'header_type="UInt64" compressor="{ZLIB}">\n'
        f'  <ImageData WholeExtent="{extent}" Origin="{origin}" Spacing="{spacing}" '
        'Direction="1 0 0 0 1 0 0 0 1">\n'
        f'    <Piece Extent="{extent}">\n'
        "      <PointData>\n"
        "      </PointData>\n"
        f'      <CellData Scalars="{ARRAY_NAME}">\n' + "".join(declarations) + "      </CellData>\n"
        "    </Piece>\n"
        "  </ImageData>\n"
        '  <AppendedData encoding="raw">\n'
        "   _"
    )
    with open_output(path, overwrite) as fh:
        fh.write(xml.encode("ascii"))
        for piece in pieces:
            fh.write(piece)
        fh.write(b"\n  </AppendedData>\n</VTKFile>\n")


def _compressed(data: np.ndarray) -> bytes:
    """One appended array as VTK's zlib compressor lays it out: the table (block count,
    block size, the last block's size, each block's compressed size), then the blocks."""
    blocks = [
        zlib.compress(data[at : at + BLOCK_BYTES].tobytes(), 6)
        for at in range(0, len(data), BLOCK_BYTES)
    ]
    last = len(data) - BLOCK_BYTES * (len(blocks) - 1)
    header = np.array([len(blocks), BLOCK_BYTES, last, *map(len, blocks)], "<u8")
    return header.tobytes() + b"".join(blocks)


def read_vti(path: str | os.PathLike) -> DenseGrid:
    """The DenseGrid of a .vti file of one ImageData piece with the cell array "solid";
    FormatError names the file and what is wrong."""
    path = Path(path)
    raw = read_regular(path, FormatError)
    try:
        return _parse(raw)
    except FormatError as exc:
        raise FormatError(f"{path}: {exc}") from None
    except MemoryBudgetError as exc:
        raise MemoryBudgetError(f"{path}: {exc}") from None


def _parse(raw: bytes) -> DenseGrid:
    """The grid of a whole .vti file's bytes (FormatError without the file name)."""
    appended = raw.find(b"<AppendedData")
    encoding = None
    if appended < 0:
        xml, binary = raw, b""
    else:  # binary data follows the tag's "_": parse the XML before it on its own
        start = raw.find(b"_", raw.find(b">", appended)) + 1
        if start == 0:
            raise FormatError("no '_' starting the appended data")
        xml, binary = raw[:appended] + b"</VTKFile>", raw[start:]
        encoding = re.search(rb'encoding="(\w+)"', raw[appended:start])
        if encoding is None or encoding.group(1) not in (b"raw", b"base64"):
            raise FormatError("appended data must have encoding raw or base64")
        if encoding.group(1) == b"base64":
            binary = binary[: binary.find(b"<")].strip() if b"<" in binary else binary.strip()
    try:
        root = ElementTree.fromstring(xml)
    except ElementTree.ParseError as exc:
        raise FormatError(f"not a VTK XML file ({exc})") from None
    if root.tag != "VTKFile" or root.get("type") != "ImageData":
        raise FormatError(f"not a VTK ImageData file (type {root.get('type')!r})")
    order = {"LittleEndian": "<", "BigEndian": ">"}.get(root.get("byte_order", "LittleEndian"))
    header_type = {"UInt32": "u4", "UInt64": "u8"}.get(root.get("header_type", "UInt32"))
    compressor = root.get("compressor")
    if order is None or header_type is None or compressor not in (None, "", ZLIB):
        raise FormatError(
            f"unsupported byte_order {root.get('byte_order')!r}, header_type "
            f"{root.get('header_type')!r} or compressor {compressor!r}"
        )
    image = root.find("ImageData")
    pieces = [] if image is None else image.findall("Piece")
    if image is None or len(pieces) != 1:
        raise FormatError("the reader takes one ImageData with one Piece")
    placement = _placement(image, pieces[0])
    arrays = _CellArrays(
        piece=pieces[0],
        cells=int(np.prod(placement.shape, dtype=np.int64)),
        order=order,
        header=order + header_type,
        compressor=compressor,
        appended=appended >= 0,
        binary=binary,
        encoded=encoding is not None and encoding.group(1) == b"base64",
    )
    solid = arrays.values(ARRAY_NAME, 1)
    if solid is None:
        raise FormatError(f'no cell array "{ARRAY_NAME}" (the voxels)')
    ijk = placement.shape[::-1]
    voxels = reversed_axes(solid.reshape(ijk) != 0)  # [k, j, i] -> [i, j, k]
    return _with_attributes(DenseGrid(voxels, placement), arrays, ijk)


def _with_attributes(grid: DenseGrid, arrays: _CellArrays, ijk: tuple[int, ...]) -> DenseGrid:
    """The grid with the file's "label" and "color" arrays, if it has them (the labels named
    "part 1", "part 2", ...: the file holds no names)."""
    labels, colors = arrays.values("label", 1), arrays.values("color", 4)
    if labels is None and colors is None:
        return grid
    names: tuple[str, ...] = ()
    if labels is not None:
        labels = reversed_axes(labels.reshape(ijk).astype(np.uint16))
        names = tuple(f"part {label}" for label in range(1, int(labels.max(initial=0)) + 1))
    if colors is not None:
        colors = np.ascontiguousarray(
            colors.reshape(*ijk, 4).astype(np.uint8).transpose(2, 1, 0, 3)
        )
    return grid.with_attributes(labels, colors, names)


@dataclass(frozen=True)
class _CellArrays:
    """The cell arrays of a file's one piece, read by name, with what their bytes need."""

    piece: ElementTree.Element
    cells: int
    order: str  # "<" or ">"
    header: str  # the arrays' header type, with byte order
    compressor: str | None
    appended: bool  # whether the file has AppendedData
    binary: bytes  # the appended data (after its "_")
    encoded: bool  # base64 appended data

    def values(self, name: str, components: int) -> np.ndarray | None:
        """The cell array `name` of `components` components, or None if the file has none."""
        found = [a for a in self.piece.iterfind("CellData/DataArray") if a.get("Name") == name]
        if not found:
            return None
        array = found[0]
        kind = VTK_TYPES.get(array.get("type", ""))
        if kind is None or array.get("NumberOfComponents", "1") != str(components):
            raise FormatError(
                f'"{name}" must be {components} component(s) of a numeric type, not '
                f"{array.get('NumberOfComponents', '1')} of {array.get('type')!r}"
            )
        dtype = np.dtype(self.order + kind)
        form = array.get("format")
        count = self.cells * components
        if form == "ascii":
            return _ascii(array.text or "", dtype, count)
        if form == "binary":
            text = (array.text or "").strip().encode("ascii")
            return _binary(text, True, self.header, self.compressor, dtype, count)
        if form == "appended":
            if not self.appended:
                raise FormatError(f'"{name}" is appended, but the file has no AppendedData')
            offset = _integer(array.get("offset"), "offset")
            data = self.binary[offset:]
            return _binary(data, self.encoded, self.header, self.compressor, dtype, count)
        raise FormatError(f"unknown DataArray format {form!r}")


def _placement(image: ElementTree.Element, piece: ElementTree.Element) -> GridPlacement:
    """Shape, origin and voxel size from the ImageData and Piece attributes."""
    extent = _numbers(image.get("WholeExtent"), "WholeExtent", 6, int)
    if _numbers(piece.get("Extent"), "Piece Extent", 6, int) != extent:
        raise FormatError("the piece does not cover the whole extent")
    origin = _numbers(image.get("Origin", "0 0 0"), "Origin", 3, float)
    spacing = _numbers(image.get("Spacing", "1 1 1"), "Spacing", 3, float)
    direction = _numbers(image.get("Direction", "1 0 0 0 1 0 0 0 1"), "Direction", 9, float)
    if direction != [1, 0, 0, 0, 1, 0, 0, 0, 1]:
        raise FormatError("rotated images (Direction other than the identity) are not supported")
    if not all(np.isfinite(h) and h > 0 for h in spacing):
        raise FormatError(f"voxel sizes must be positive and finite, not Spacing {spacing}")
    if not np.isfinite(origin).all():
        raise FormatError(f"Origin must be finite, not {origin}")
    try:
        shape = check_shape([extent[2 * a + 1] - extent[2 * a] for a in range(3)])
    except GridError as exc:
        raise FormatError(f"cells per axis: {exc}") from None
    corner = np.array(origin) + np.array(extent[0::2], np.float64) * np.array(spacing)
    return GridPlacement(shape, corner, tuple(spacing))


def _numbers(text: str | None, what: str, count: int, kind: type) -> list:
    try:
        values = [kind(word) for word in (text or "").split()]
    except ValueError:
        values = []
    if len(values) != count:
        raise FormatError(f"{what} must be {count} numbers, not {text!r}")
    return values


def _integer(text: str | None, what: str) -> int:
    try:
        value = int(text or "")
    except ValueError:
        raise FormatError(f"{what} must be an integer, not {text!r}") from None
    if value < 0:
        raise FormatError(f"{what} must not be negative, not {value}")
    return value


def _ascii(text: str, dtype: np.dtype, cells: int) -> np.ndarray:
    """The values of an ascii array, converted a piece of text at a time (a list of every
    word of a large array would take dozens of bytes per value)."""
    _check_values_fit(cells, 8)  # as int64 or float64
    values = np.empty(cells, np.float64 if dtype.kind == "f" else np.int64)
    filled = at = 0
    while at < len(text):
        space = _SPACE.search(text, min(at + ASCII_PIECE, len(text)))
        end = space.start() if space else len(text)
        words = text[at:end].split()
        if filled + len(words) > cells:
            raise FormatError(f"more than {cells} values for {cells} cells")
        try:
            values[filled : filled + len(words)] = np.array(words, values.dtype)
        except ValueError as exc:
            raise FormatError(f"bad ascii values ({exc})") from None
        filled, at = filled + len(words), end
    if filled != cells:
        raise FormatError(f"{filled} values for {cells} cells")
    return values


ASCII_PIECE = 1 << 20  # characters of an ascii array converted at a time
_SPACE = re.compile(r"\s")


def _binary(
    data: bytes, encoded: bool, header: str, compressor: str | None, dtype: np.dtype, cells: int
) -> np.ndarray:
    """One array's values from its bytes as VTK lays them out: a header (byte count, or the
    compressed blocks' table) then the data; base64 where `encoded` (a compressed array's
    header is encoded on its own, as VTK writes it)."""
    item = np.dtype(header).itemsize
    expected = cells * dtype.itemsize
    if encoded:
        data = b"".join(data.split())
    if not compressor:  # header and data together (base64 as one text)
        raw = _decode(data[: _encoded_length(item)], True) if encoded else data
        if len(raw) < item:
            raise FormatError("truncated array header")
        (size,) = np.frombuffer(raw, header, 1)
        if encoded and size == expected:
            raw = _decode(data[: _encoded_length(item + expected)], True)
        if size != expected or len(raw) < item + expected:
            raise FormatError(
                f"the array holds {int(size)} bytes (file has {len(raw) - item}), "
                f"{cells} cells need {expected}"
            )
        _check_values_fit(cells, 0)  # the values are the file's bytes
        return np.frombuffer(raw, dtype, cells, item)
    # Compressed: a table (block count, block size, last block's size or 0 when full, each
    # block's compressed size), then the zlib blocks; in base64, the table is a text of its own.
    first = _decode(data[: _encoded_length(item)], True) if encoded else data
    if len(first) < item:
        raise FormatError("truncated array header")
    blocks = int(np.frombuffer(first, header, 1)[0])
    table_size = (3 + blocks) * item
    if table_size > len(data):
        raise FormatError(f"truncated: a table of {blocks} compressed blocks does not fit")
    table_end = _encoded_length(table_size) if encoded else table_size
    table = _decode(data[:table_end], True) if encoded else data[:table_end]
    if len(table) < table_size:
        raise FormatError("truncated compressed-array header")
    counts = [int(v) for v in np.frombuffer(table, header, 3 + blocks)]
    block_size, last, sizes = counts[1], counts[2], counts[3:]
    compressed = sum(sizes)
    rest = data[table_end:]
    body = _decode(rest[: _encoded_length(compressed)], True) if encoded else rest
    total = block_size * (blocks - 1) + (last or block_size) if blocks else 0
    if total != expected or compressed > len(body):
        raise FormatError(
            f"the compressed array holds {total} bytes in {blocks} blocks ({compressed} "
            f"compressed, file has {len(body)}); {cells} cells need {expected}"
        )
    if total > ZLIB_MAX_RATIO * compressed + ZLIB_SMALLEST_STREAM * blocks:
        raise FormatError(
            f"{compressed} compressed bytes cannot hold {total} bytes (zlib inflates "
            f"at most {ZLIB_MAX_RATIO}-fold)"
        )
    _check_values_fit(cells, dtype.itemsize)
    out = np.empty(expected, np.uint8)
    at = start = 0
    for index, size in enumerate(sizes):
        want = last if index == blocks - 1 and last else block_size
        inflater = zlib.decompressobj()
        try:
            piece = inflater.decompress(body[at : at + size], want)
        except zlib.error as exc:
            raise FormatError(f"block {index} does not decompress ({exc})") from None
        if len(piece) != want or inflater.unconsumed_tail:
            raise FormatError(f"block {index} holds other than {want} bytes")
        out[start : start + want] = np.frombuffer(piece, np.uint8)
        at, start = at + size, start + want
    return out.view(dtype)


def _check_values_fit(cells: int, value_bytes: int) -> None:
    """MemoryBudgetError unless host memory holds the values (`value_bytes` each) and the
    voxels made of them (value != 0, then in [i, j, k] order: two bytes a cell)."""
    check_host_fits(cells * (value_bytes + 2), f"the grid of {cells:,} cells")


def _encoded_length(size: int) -> int:
    """Characters of the base64 text of `size` bytes."""
    return 4 * -(-int(size) // 3)


def _decode(data: bytes, encoded: bool) -> bytes:
    if not encoded:
        return data
    try:
        return base64.b64decode(data, validate=True)
    except ValueError as exc:
        raise FormatError(f"bad base64 data ({exc})") from None
