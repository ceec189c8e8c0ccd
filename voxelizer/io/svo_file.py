"""The .svo file of docs/svo-format.md: header, level offsets, nodes, bricks, face ids
(version 3), the three voxel sizes of voxels that are not cubes (version 4), labels and
colours (version 5), CRC-32.

The reader trusts nothing: it checks the file's size against its header before allocating
anything, then the checksum, then (through the SVO constructor) the whole tree.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..attributes.voxel_values import SolidValues
from ..budget import check_host_fits
from ..errors import GridError, SVOFormatError
from ..octree import octree_levels, padded_resolution
from ..placement import GridPlacement, Placed, Shape, check_shape, shape_text
from ..svo import SVO, FaceIds
from .files import open_regular, os_error_text
from .output import open_output

MAGIC = b"VOXSVO\r\n"
VERSION = 2  # the version written without attributes; the reader also knows 1 (cubic grids)
VERSION_ATTRIBUTES = 3  # the version written with face ids
VERSION_SPACING = 4  # the version written for voxels that are not cubes (with or without ids)
VERSION_VALUES = 5  # the version written with labels or colours (any voxels, ids or not)
# magic, version, header size, nx, ny, nz, P, L, reserved, origin, voxel size, nodes, bricks,
# solid voxels
HEADER = struct.Struct("<8s8I3ddQQQ")
# Version 3: version 2's fields, then attributes (bit 0: face ids), reserved, the face ids
# beside the bricks, the bricks of full cubes with ids, and their ids
HEADER_V3 = struct.Struct("<8s8I3ddQQQ2I3Q")
# Version 4: version 3's fields (attributes 0 or face ids; the voxel size field 0), then the
# voxel sizes hx, hy, hz and a reserved word
HEADER_V4 = struct.Struct("<8s8I3ddQQQ2I3Q3dQ")
# Version 5: version 4's fields (the voxel size field h for cubes, else 0; the three sizes
# always), then the bytes of the label names and a reserved word
HEADER_V5 = struct.Struct("<8s8I3ddQQQ2I3Q3dQ2Q")
FACE_IDS = 1  # bits of the attributes word
LABELS = 2
COLORS = 4
KNOWN_ATTRIBUTES = FACE_IDS | LABELS | COLORS
# Version 1: magic, version, header size, N, P, L, reserved, origin, voxel size, nodes, bricks,
# solid voxels
HEADER_V1 = struct.Struct("<8s6I3ddQQQ")
PREFIX = struct.Struct("<8sII")  # magic, version, header size: the same in every version
CHECKSUM = struct.Struct("<I")
MAPPED_CHUNK = 1 << 24  # bytes of a mapped file checksummed at a time

assert HEADER.size == 96 and HEADER_V1.size == 88 and HEADER_V3.size == 128
assert HEADER_V4.size == 160 and HEADER_V5.size == 176
LAYOUTS = {
    1: HEADER_V1,
    VERSION: HEADER,
    VERSION_ATTRIBUTES: HEADER_V3,
    VERSION_SPACING: HEADER_V4,
    VERSION_VALUES: HEADER_V5,
}


def as_svo(result: Placed) -> SVO:
    """The octree of a result: an SVO as it is, a dense grid converted on the CPU (with its
    face ids, if it has them)."""
    if isinstance(result, SVO):
        return result
    faces = result.to_numpy("face") if "face" in result.attributes else None
    svo = SVO.from_dense(result.to_numpy(), result.placement, face_ids=faces)
    if not {"label", "color"} & set(result.attributes):
        return svo
    labels = result.to_numpy("label") if "label" in result.attributes else None
    colors = result.to_numpy("color") if "color" in result.attributes else None
    names = tuple(getattr(result, "label_names", ()))
    return svo.with_values(SolidValues.of_dense(svo, labels, colors, names))


def write_svo(result: Placed, path: str | os.PathLike, overwrite: bool = False) -> None:
    """Write the .svo file of docs/svo-format.md (refuses to replace a file unless asked)."""
    svo = as_svo(result)
    levels, faces = svo.levels, svo.face_ids
    values = svo.values
    labels = None if values is None else getattr(values, "labels", None)
    colors = None if values is None else getattr(values, "colors", None)
    origin = np.asarray(svo.placement.origin, np.float64)
    cubic = svo.placement.cubic
    if labels is not None or colors is not None:
        layout, version = HEADER_V5, VERSION_VALUES
    elif not cubic:
        layout, version = HEADER_V4, VERSION_SPACING
    elif faces is not None:
        layout, version = HEADER_V3, VERSION_ATTRIBUTES
    else:
        layout, version = HEADER, VERSION
    names = json.dumps(list(svo.label_names)).encode() if labels is not None else b""
    fields = [
        MAGIC,
        version,
        layout.size,
        *svo.shape,
        svo.padded_resolution,
        levels,
        0,
        *origin,
        svo.voxel_size if cubic else 0.0,
        svo.node_count,
        svo.brick_count,
        svo.count(),
    ]
    if version >= VERSION_ATTRIBUTES:
        attributes = (
            (FACE_IDS if faces is not None else 0)
            | (LABELS if labels is not None else 0)
            | (COLORS if colors is not None else 0)
        )
        counts = (
            (0, 0, 0)
            if faces is None
            else (len(faces.brick_ids), len(faces.full_codes), len(faces.full_ids))
        )
        fields += [attributes, 0, *counts]
    if version >= VERSION_SPACING:
        fields += [*svo.placement.spacing.tolist(), 0]
    if version == VERSION_VALUES:
        fields += [len(names), 0]
    parts = [
        layout.pack(*fields),
        svo.level_offsets.astype("<u4").tobytes(),
        svo.nodes.astype("<u4").tobytes(),
        bytes(brick_padding(layout.size, levels)),
        svo.bricks.astype("<u8").tobytes(),
    ]
    if faces is not None:
        parts += [
            faces.brick_ids.astype("<i4").tobytes(),
            bytes(4 * (len(faces.brick_ids) % 2)),
            faces.full_codes.astype("<u8").tobytes(),
            faces.full_masks.astype("<u8").tobytes(),
            faces.full_ids.astype("<i4").tobytes(),
        ]
    if version == VERSION_VALUES and faces is not None:
        parts.append(bytes(4 * (len(faces.full_ids) % 2)))  # the next section 8-byte aligned
    if labels is not None:
        parts += [_padded(labels.astype("<u2").tobytes()), _padded(names)]
    if colors is not None:
        parts.append(_padded(colors.tobytes()))
    crc = 0
    with open_output(path, overwrite) as fh:
        for part in parts:
            crc = zlib.crc32(part, crc)
            fh.write(part)
        fh.write(CHECKSUM.pack(crc))


class SVOFileSink:
    """An OctreeSink (voxelizer.octree) that writes an .svo file as the octree comes (version
    2, or 4 for voxels that are not cubes), so that the octree never has to be whole in
    memory: the header and level offsets at `begin`, the nodes and the bricks piece by piece,
    the checksum at `finish`. It writes into a file of open_output, which appears only when
    the block ends without an error."""

    def __init__(self, fh: BinaryIO, placement: GridPlacement):
        self._fh, self._placement = fh, placement
        self._crc = 0
        self._counts = (0, 0)  # nodes and bricks announced
        self._written = [0, 0]  # nodes and bricks written
        self._levels = octree_levels(padded_resolution(placement.resolution))
        self._layout = HEADER if placement.cubic else HEADER_V4

    def begin(self, level_offsets: np.ndarray, brick_count: int, solid: int) -> None:
        offsets = np.asarray(level_offsets, "<u4")
        if len(offsets) != self._levels + 1:
            raise ValueError(f"{len(offsets)} level offsets, not {self._levels + 1}")
        self._counts = (int(offsets[-1]), int(brick_count))
        placement = self._placement
        cubic = placement.cubic
        fields = [
            MAGIC, VERSION if cubic else VERSION_SPACING, self._layout.size, *placement.shape,
            padded_resolution(placement.resolution), self._levels, 0,
            *np.asarray(placement.origin, np.float64),
            float(placement.spacing[0]) if cubic else 0.0, *self._counts, int(solid),
        ]  # fmt: skip
        if not cubic:  # version 4: no face ids, the three sizes
            fields += [0, 0, 0, 0, 0, *placement.spacing.tolist(), 0]
        self._write(self._layout.pack(*fields))
        self._write(offsets.tobytes())

    def nodes(self, words: np.ndarray) -> None:
        if self._written[1]:
            raise ValueError("nodes after bricks")
        self._written[0] += len(words)
        self._write(np.ascontiguousarray(words, "<u4").tobytes())
        if self._written[0] == self._counts[0]:
            self._write(bytes(brick_padding(self._layout.size, self._levels)))

    def bricks(self, values: np.ndarray) -> None:
        if self._written[0] != self._counts[0]:
            raise ValueError("bricks before every node")
        self._written[1] += len(values)
        self._write(np.ascontiguousarray(values, "<u8").tobytes())

    def finish(self) -> None:
        """The checksum, once every node and brick has come (ValueError otherwise)."""
        if tuple(self._written) != self._counts:
            raise ValueError(f"{self._written} nodes and bricks written, not {self._counts}")
        self._fh.write(CHECKSUM.pack(self._crc))

    def _write(self, data: bytes) -> None:
        self._crc = zlib.crc32(data, self._crc)
        self._fh.write(data)


def read_svo(path: str | os.PathLike, *, mmap: bool = False) -> SVO:
    """Read an .svo file (version 5 with labels or colours, 4 for voxels that are not cubes,
    3 with face ids, 2, or 1 for a cube): sizes first (before allocating), then checksum, then
    structure; SVOFormatError names the file and what is wrong. mmap=True: the arrays stay in
    the file, mapped read-only (an octree larger than memory; the checksum is read through in
    pieces), for count() and region queries (to_numpy(box=...))."""
    path = Path(path)
    if mmap:
        return _mapped_svo(path)
    file = open_regular(path, SVOFormatError)
    try:
        with file as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(HEADER_V5.size)  # the longest header; shorter ones are a prefix
            header = read_header(head, size)
            check_host_fits(header.file_size, f"{path}: reading the file")
            data = head + fh.read(header.file_size - len(head))
        if len(data) != header.file_size:
            raise SVOFormatError("truncated while reading")
    except OSError as exc:
        raise SVOFormatError(f"{path}: cannot read ({os_error_text(exc)})") from exc
    except SVOFormatError as exc:
        raise SVOFormatError(f"{path}: {exc}") from None
    (crc,) = CHECKSUM.unpack_from(data, len(data) - CHECKSUM.size)
    if zlib.crc32(memoryview(data)[: -CHECKSUM.size]) != crc:
        raise SVOFormatError(f"{path}: checksum mismatch (the file is corrupted)")
    levels, at = header.levels, header.size
    level_offsets = np.frombuffer(data, "<u4", levels + 1, at)
    at += 4 * (levels + 1)
    nodes = np.frombuffer(data, "<u4", 2 * header.node_count, at).reshape(-1, 2)
    at += 8 * header.node_count
    padding = brick_padding(header.size, levels)
    if any(data[at : at + padding]):
        raise SVOFormatError(f"{path}: padding before the bricks is not zero")
    bricks = np.frombuffer(data, "<u8", header.brick_count, at + padding)
    at += padding + 8 * header.brick_count
    faces = None
    if header.faces is not None and header.attributes & FACE_IDS:
        face_count, full_bricks, full_count = header.faces
        brick_ids = np.frombuffer(data, "<i4", face_count, at)
        at += 4 * face_count
        if any(data[at : at + 4 * (face_count % 2)]):
            raise SVOFormatError(f"{path}: padding after the face ids is not zero")
        at += 4 * (face_count % 2)
        full_codes = np.frombuffer(data, "<u8", full_bricks, at)
        full_masks = np.frombuffer(data, "<u8", full_bricks, at + 8 * full_bricks)
        full_ids = np.frombuffer(data, "<i4", full_count, at + 16 * full_bricks)
        at += 16 * full_bricks + 4 * full_count
        if header.attributes & (LABELS | COLORS):  # version 5: aligned for what follows
            if any(data[at : at + 4 * (full_count % 2)]):
                raise SVOFormatError(f"{path}: padding after the face ids is not zero")
            at += 4 * (full_count % 2)
    values, problem = _values(data, at, header)
    if problem:
        raise SVOFormatError(f"{path}: {problem}")
    try:
        if header.faces is not None and header.attributes & FACE_IDS:
            faces = FaceIds.frozen(brick_ids, full_codes, full_masks, full_ids)
        svo = SVO(
            nodes,
            bricks,
            level_offsets,
            GridPlacement(header.shape, np.array(header.origin), header.voxel_size),
            face_ids=faces,
            values=values,
        )
    except SVOFormatError as exc:
        raise SVOFormatError(f"{path}: {exc}") from None
    if svo.count() != header.solid:
        raise SVOFormatError(
            f"{path}: the header says {header.solid} solid voxels, the tree holds {svo.count()}"
        )
    return svo


def _mapped_svo(path: Path) -> SVO:
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            header = read_header(fh.read(HEADER_V5.size), size)
        data = np.memmap(path, np.uint8, mode="r")
    except OSError as exc:
        raise SVOFormatError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except SVOFormatError as exc:
        raise SVOFormatError(f"{path}: {exc}") from None
    if header.faces is not None or header.attributes & ~FACE_IDS:
        raise SVOFormatError(f"{path}: a file with attributes cannot be mapped; read it whole")
    crc, end = 0, size - CHECKSUM.size
    for start in range(0, end, MAPPED_CHUNK):
        crc = zlib.crc32(data[start : min(end, start + MAPPED_CHUNK)].tobytes(), crc)
    if crc != CHECKSUM.unpack(bytes(data[end:]))[0]:
        raise SVOFormatError(f"{path}: checksum mismatch (the file is corrupted)")
    levels, at = header.levels, header.size
    level_offsets = np.array(data[at : at + 4 * (levels + 1)].view("<u4"))
    at += 4 * (levels + 1)
    nodes = data[at : at + 8 * header.node_count].view("<u4").reshape(-1, 2)
    at += 8 * header.node_count + brick_padding(header.size, levels)
    bricks = data[at : at + 8 * header.brick_count].view("<u8")
    placement = GridPlacement(header.shape, np.array(header.origin), header.voxel_size)
    try:
        svo = SVO(nodes, bricks, level_offsets, placement)
    except SVOFormatError as exc:
        raise SVOFormatError(f"{path}: {exc}") from None
    if svo.count() != header.solid:
        raise SVOFormatError(
            f"{path}: the header says {header.solid} solid voxels, the tree holds {svo.count()}"
        )
    return svo


def _check_attributes(version: int, attributes: int, names_bytes: int) -> None:
    """SVOFormatError for attribute bits a version does not have (versions 3 and 4: face ids
    alone; version 5: labels or colours, face ids too), or label names without labels."""
    ids_only = version in (VERSION_ATTRIBUTES, VERSION_SPACING)
    known = FACE_IDS if ids_only else KNOWN_ATTRIBUTES
    if (
        attributes & ~known
        or (ids_only and attributes != FACE_IDS)
        or (version == VERSION_VALUES and not attributes & (LABELS | COLORS))
    ):
        raise SVOFormatError(
            f"unknown attributes {attributes:#x} for version {version} (this reader knows "
            "face ids, labels and colours)"
        )
    if names_bytes and not attributes & LABELS:
        raise SVOFormatError("label names without labels")


def _values_bytes(
    attributes: int,
    face_counts: tuple[int, int, int] | None,
    solid: int,
    p: int,
    names_bytes: int,
) -> int:
    """Bytes of a version 5 file after its face ids: their padding, the labels and their
    names, the colours (SVOFormatError for more solid voxels than the cube holds)."""
    if solid > p**3:
        raise SVOFormatError(f"impossible count: {solid} solid voxels in {p}^3")
    size = 4 * (face_counts[2] % 2) if face_counts is not None and attributes & FACE_IDS else 0
    if attributes & LABELS:
        size += _aligned(2 * solid) + _aligned(names_bytes)
    if attributes & COLORS:
        size += _aligned(4 * solid)
    return size


def _values(data: bytes, at: int, header: SVOHeader) -> tuple[SolidValues | None, str]:
    """The labels (with their names) and colours of a version 5 file from offset `at`, and
    "" or why they are wrong (padding, names)."""
    labels = colors = None
    names: tuple[str, ...] = ()
    if header.attributes & LABELS:
        labels = np.frombuffer(data, "<u2", header.solid, at).astype(np.uint16)
        at += _aligned(2 * header.solid)
        raw = data[at : at + header.names_bytes]
        at += _aligned(header.names_bytes)
        try:
            decoded = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return None, "the label names are not a JSON list of strings"
        if not isinstance(decoded, list) or not all(isinstance(n, str) for n in decoded):
            return None, "the label names are not a JSON list of strings"
        names = tuple(decoded)
    if header.attributes & COLORS:
        colors = np.frombuffer(data, np.uint8, 4 * header.solid, at).reshape(-1, 4).copy()
    if labels is None and colors is None:
        return None, ""
    return SolidValues(labels, colors, names), ""


def _aligned(size: int) -> int:
    return size + (-size % 8)


def _padded(data: bytes) -> bytes:
    """The bytes with zeros up to a multiple of 8 (every section starts 8-byte aligned)."""
    return data + bytes(-len(data) % 8)


def _attributes_and_sizes(
    version: int, rest: tuple
) -> tuple[int, int, tuple[int, int, int] | None, float | tuple[float, float, float]]:
    """(attributes, reserved word, face id counts or None, voxel size) from the header's
    fields after the octree's: version 3's attributes, version 4's three sizes (attributes 0
    with no counts: no face ids; FACE_IDS stands for "as expected" either way), version 5's
    attributes and sizes (its voxel size field h for cubes, then the sizes are h, h, h)."""
    h = rest[3]
    if version < VERSION_ATTRIBUTES:
        return FACE_IDS, 0, None, h
    attributes, reserved = rest[7], rest[8]
    counts: tuple[int, int, int] | None = (rest[9], rest[10], rest[11])
    if version == VERSION_ATTRIBUTES:
        return attributes, reserved, counts, h
    sizes, reserved_v4 = rest[12:15], rest[15]
    if version == VERSION_VALUES:
        if reserved_v4 != 0 or (h != 0 and tuple(sizes) != (h, h, h)):
            raise SVOFormatError(f"bad header (voxel size {h}, sizes {sizes})")
        return attributes, reserved, counts, h if h != 0 else (sizes[0], sizes[1], sizes[2])
    if h != 0 or reserved_v4 != 0:
        raise SVOFormatError(f"bad header (voxel size {h}, reserved {reserved_v4})")
    if attributes == 0 and counts == (0, 0, 0):
        attributes, counts = FACE_IDS, None  # no face ids
    return attributes, reserved, counts, (sizes[0], sizes[1], sizes[2])


def brick_padding(header_size: int, levels: int) -> int:
    """Zero bytes before the bricks: they start 8-byte aligned (also when there are none)."""
    return (header_size + 4 * (levels + 1)) % 8


@dataclass(frozen=True)
class SVOHeader:
    """A checked .svo header, either version, with the file size its counts imply."""

    size: int
    shape: Shape
    levels: int
    origin: tuple[float, float, float]
    voxel_size: float | tuple[float, float, float]
    node_count: int
    brick_count: int
    solid: int
    file_size: int
    faces: tuple[int, int, int] | None  # versions 3 to 5: the three face id counts
    attributes: int = 0  # FACE_IDS (versions 1 to 4: as expected), LABELS, COLORS (version 5)
    names_bytes: int = 0  # version 5 with labels: the label names' JSON


def read_header(head: bytes, size: int) -> SVOHeader:
    """Check the header on its own (its version's layout) against the file's size."""
    if head[: len(MAGIC)] != MAGIC[: len(head)]:
        raise SVOFormatError("not an SVO file (bad magic)")
    if len(head) < PREFIX.size:
        raise SVOFormatError(f"truncated: {size} bytes, shorter than the header")
    _, version, header_size = PREFIX.unpack_from(head)
    if version not in LAYOUTS:
        raise SVOFormatError(
            f"unsupported format version {version} (this reader knows "
            f"{', '.join(map(str, sorted(LAYOUTS)))})"
        )
    layout = LAYOUTS[version]
    if len(head) < layout.size:
        raise SVOFormatError(f"truncated: {size} bytes, shorter than the header")
    fields = layout.unpack_from(head)
    if version == 1:  # one side N: the cube N^3
        sides, (p, levels, reserved), rest = (fields[3],) * 3, fields[4:7], fields[7:]
    else:
        sides, (p, levels, reserved), rest = fields[3:6], fields[6:9], fields[9:]
    origin, node_count, brick_count, solid = rest[0:3], rest[4], rest[5], rest[6]
    attributes, reserved_v3, face_counts, voxel_size = _attributes_and_sizes(version, rest)
    names_bytes, reserved_v5 = rest[16:18] if version == VERSION_VALUES else (0, 0)
    if header_size != layout.size or reserved != 0 or reserved_v3 != 0 or reserved_v5 != 0:
        raise SVOFormatError(f"bad header (size {header_size}, reserved {reserved})")
    _check_attributes(version, attributes, names_bytes)
    try:
        shape = check_shape(sides)
    except GridError as exc:
        raise SVOFormatError(f"bad grid shape: {exc}") from None
    if p != padded_resolution(max(shape)) or levels != octree_levels(p):
        raise SVOFormatError(f"shape {shape_text(shape)}, P = {p}, L = {levels} do not agree")
    steps = np.array(voxel_size if isinstance(voxel_size, tuple) else (voxel_size,))
    if not (np.isfinite(origin).all() and np.isfinite(steps).all() and (steps > 0).all()):
        raise SVOFormatError("origin and voxel size must be finite, voxel size positive")
    if not 1 <= node_count <= sum(8**level for level in range(levels)) or brick_count > 8**levels:
        raise SVOFormatError(f"impossible counts: {node_count} nodes, {brick_count} bricks")
    expected = (
        layout.size
        + 4 * (levels + 1)
        + 8 * node_count
        + brick_padding(layout.size, levels)
        + 8 * brick_count
        + CHECKSUM.size
    )
    if face_counts is not None:
        face_count, full_bricks, full_count = face_counts
        if (
            face_count > 64 * brick_count
            or full_bricks > 8**levels
            or full_count > 64 * full_bricks
        ):
            raise SVOFormatError(
                f"impossible face id counts: {face_count} beside {brick_count} bricks, "
                f"{full_count} in {full_bricks} bricks of full cubes"
            )
        expected += 4 * face_count + 4 * (face_count % 2) + 16 * full_bricks + 4 * full_count
    if version == VERSION_VALUES:
        expected += _values_bytes(attributes, face_counts, solid, p, names_bytes)
    if size != expected:
        raise SVOFormatError(
            f"size {size} bytes, but the header's counts imply {expected} (truncated or corrupted)"
        )
    return SVOHeader(
        layout.size,
        shape,
        levels,
        tuple(origin),
        voxel_size,
        node_count,
        brick_count,
        solid,
        expected,
        face_counts,
        attributes,
        names_bytes,
    )
