"""One Zarr (v3) store for a whole batch of dense grids of one shape: voxel shards.

Layout (every file plain Zarr v3, readable by the `zarr` library and by xarray; written here
without either, so that writing needs numpy only):

    batch.zarr/zarr.json          the group; attributes["voxelizer"]: grid, bits, options
    batch.zarr/voxels/            uint8 [n, X, Y, ceil(Z / 8)]: mesh i's grid, its bits
                                  packed along z (np.packbits(axis=-1), big bit order,
                                  pad bits 0), one chunk (one file, gzip level 1) per mesh
    batch.zarr/origin/            float64 [n, 3]: world position of voxel (0, 0, 0)'s corner
    batch.zarr/voxel_size/        float64 [n]
    batch.zarr/input, status,     the table: strings (input path, "done"/"skipped"/
      error, warnings/            "failed", the error, the warnings one per line)
    batch.zarr/triangles,         int64 counts, -1 where there is none
      solid_voxels, open_columns/

Concurrency: a mesh's chunk is written by whichever worker voxelized it, as a file of its
own, atomically (voxelizer.io.output: a temporary renamed into place), so workers and Ray
actors on any node write side by side and a killed writer leaves no half chunk. Everything
else (the metadata, the placement and the table) is written by the one process that
collects the results (`ShardWriter`), in blocks of TABLE_ROWS rows, each block rewritten
atomically as its rows arrive. A mesh counts as stored when its table row says "done" and
its chunk exists: a resumed batch (skip_existing) voxelizes every other mesh again.

Bits, not bytes: a 64³ grid is 32 KiB packed (4.6 KiB after gzip for the bunny) against
256 KiB of bools; 10^5 meshes fit in a few GB, and unpacking costs less than reading the
bools would (docs/benchmarks.md, "Voxel shards").
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import (
    ArgumentError,
    FormatError,
    GridError,
    GridIndexError,
    OutputError,
    VoxelizerError,
)
from ..grid import DenseGrid
from ..placement import GridPlacement, Placed, Shape, check_shape
from .files import os_error_text, read_regular, resolved
from .output import open_output

STORE_FORMAT = "voxelizer shards 1"
VOXELS = "voxels"
GZIP_LEVEL = 1
GZIP_WBITS = 31  # zlib's window bits for a gzip header and trailer
TABLE_ROWS = 4096  # rows per chunk of the table and placement arrays
FLUSH_SECONDS = 2.0  # the table's blocks are rewritten at most this often while a batch runs
NO_COUNT = -1
STRING_COLUMNS = ("input", "status", "error", "warnings")
COUNT_COLUMNS = ("triangles", "solid_voxels", "open_columns")


def packed_columns(result: Placed) -> np.ndarray:
    """uint8 (X, Y, ceil(Z / 8)): the grid's bits packed along z, as the store holds them.
    Taken from the GPU's column words without the bools where z is whole bytes."""
    columns = result.columns if isinstance(result, DenseGrid) else None
    nx, ny, nz = result.shape
    if columns is not None and nz % 8 == 0:
        return columns.packed_bits().reshape(nx, ny, nz // 8)
    return np.packbits(result.to_numpy(), axis=-1)


def unpacked(packed: np.ndarray, nz: int) -> np.ndarray:
    """bool (..., Z) of bits packed along the last axis."""
    return np.unpackbits(packed, axis=-1, count=nz).view(bool)


# --- Zarr v3 metadata and chunks --------------------------------------------------------------


def _array_meta(
    shape: Sequence[int], chunks: Sequence[int], dtype: str, codecs: list[dict[str, Any]]
) -> dict[str, Any]:
    fill: Any = {"uint8": 0, "int64": NO_COUNT, "float64": "NaN", "string": ""}[dtype]
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape),
        "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
        # "." keeps every chunk of an array in one folder: no folder per mesh to create
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "."}},
        "fill_value": fill,
        "codecs": codecs,
        "attributes": {},
        "storage_transformers": [],
    }


def _plain(dtype: str) -> list[dict[str, Any]]:
    if dtype == "string":
        return [{"name": "vlen-utf8", "configuration": {}}]
    return [{"name": "bytes", "configuration": {"endian": "little"}}]


def _encode_strings(values: Iterable[str]) -> bytes:
    """The vlen-utf8 codec's bytes: a uint32 count, then each string as length and UTF-8."""
    items = [value.encode("utf-8", "surrogateescape") for value in values]
    parts = [np.uint32(len(items)).tobytes()]
    for item in items:
        parts.append(np.uint32(len(item)).tobytes())
        parts.append(item)
    return b"".join(parts)


def _decode_strings(data: bytes, count: int) -> list[str]:
    if len(data) < 4 or int(np.frombuffer(data, "<u4", 1)[0]) != count:
        raise FormatError("a string chunk of the store's table does not hold its rows")
    values, at = [], 4
    for _ in range(count):
        if at + 4 > len(data):
            raise FormatError("a string chunk of the store's table is cut short")
        length = int(np.frombuffer(data, "<u4", 1, at)[0])
        if at + 4 + length > len(data):
            raise FormatError("a string chunk of the store's table is cut short")
        values.append(data[at + 4 : at + 4 + length].decode("utf-8", "surrogateescape"))
        at += 4 + length
    return values


def _write_json(path: Path, value: dict[str, Any]) -> None:
    with open_output(path, overwrite=True) as fh:
        fh.write(json.dumps(value, indent=2).encode())


def _write_bytes(path: Path, data: bytes | memoryview) -> None:
    with open_output(path, overwrite=True) as fh:
        fh.write(data)


def chunk_path(store: str | os.PathLike, index: int) -> Path:
    """The file that holds mesh `index`'s grid in the store: what a worker writes."""
    return Path(store) / VOXELS / f"c.{index}.0.0.0"


def write_chunk(result: Placed, path: str | os.PathLike) -> None:
    """Write one mesh's grid as its chunk file (atomically; replacing an earlier one)."""
    packed = packed_columns(result)
    _write_bytes(Path(path), _gzip(packed))


def _gzip(packed: np.ndarray) -> bytes:
    """The gzip codec's bytes (a gzip member, not zlib's stream: what zarr reads)."""
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, GZIP_WBITS)
    return compressor.compress(packed.data) + compressor.flush()


# --- the writer: the process that collects the results ----------------------------------------


@dataclass
class Row:
    """One mesh's row of the table (what BatchResult holds, and its placement)."""

    input: str
    status: str = ""
    error: str = ""
    warnings: str = ""
    triangles: int = NO_COUNT
    solid_voxels: int = NO_COUNT
    open_columns: int = NO_COUNT
    origin: tuple[float, float, float] = (np.nan, np.nan, np.nan)
    voxel_size: float = np.nan


class ShardWriter:
    """The store of one batch, as the collecting process sees it: creates (or reopens, to
    resume) the metadata, and writes the table and placement rows as results arrive. The
    grids themselves are written by the workers (write_chunk at chunk_path)."""

    def __init__(self, path: Path, shape: Shape, rows: list[Row], attributes: dict[str, Any]):
        self.path = path
        self.shape = shape
        self.rows = rows
        self.attributes = attributes
        self._dirty: set[int] = set()
        self._flushed = time.monotonic()

    @classmethod
    def create(
        cls,
        path: str | os.PathLike,
        inputs: Sequence[str],
        shape: Shape,
        *,
        options: dict[str, Any] | None = None,
        overwrite: bool = False,
        resume: bool = False,
    ) -> ShardWriter:
        """The store at `path` for these inputs on grids of `shape`: new; with `resume`, the
        existing store of the same inputs and shape (its rows kept); with `overwrite`, an
        existing store removed first. OutputError for anything else at `path`."""
        path = Path(path)
        shape = check_shape(shape)
        attributes = {
            "format": STORE_FORMAT,
            "grid": list(shape),
            "bits": "packed along z: np.packbits(axis=-1), big bit order, pad bits 0",
            "options": options or {},
        }
        if os.path.lexists(path):
            if resume:
                return cls._resumed(path, inputs, shape, attributes)
            if not overwrite:
                raise OutputError.file_exists(path)
            _refuse_inputs_inside(path, inputs)  # replacing the store removes its whole tree
            _remove_store(path)
        writer = cls(path, shape, [Row(str(item)) for item in inputs], attributes)
        writer._create_metadata()
        return writer

    @classmethod
    def _resumed(
        cls, path: Path, inputs: Sequence[str], shape: Shape, attributes: dict[str, Any]
    ) -> ShardWriter:
        stored = open_shards(path)
        if stored.shape != shape or list(stored.table["input"]) != [str(i) for i in inputs]:
            raise OutputError(
                f"{path}: holds another batch (other inputs or grid shape); resume it with the "
                "same inputs and grid, or write a new store",
                path=path,
            )
        rows = [stored.row(index) for index in range(len(stored))]
        writer = cls(path, shape, rows, attributes)
        for index, row in enumerate(rows):  # done without its chunk (deleted): not done
            if row.status == "done" and not chunk_path(path, index).exists():
                rows[index] = Row(row.input)
        return writer

    def stored(self, index: int) -> bool:
        """Whether mesh `index` is in the store already (a resumed batch skips it)."""
        return self.rows[index].status in ("done", "skipped") and (
            chunk_path(self.path, index).exists()
        )

    def _create_metadata(self) -> None:
        n = len(self.rows)
        nx, ny, nz = self.shape
        packed_z = -(-nz // 8)
        try:
            (self.path / VOXELS).mkdir(parents=True)
        except OSError as exc:
            raise OutputError(f"{self.path}: cannot create ({exc.strerror or exc})") from exc
        _write_json(
            self.path / "zarr.json",
            {
                "zarr_format": 3,
                "node_type": "group",
                "attributes": {"voxelizer": self.attributes},
            },
        )
        voxels = _array_meta(
            (n, nx, ny, packed_z),
            (1, nx, ny, packed_z),
            "uint8",
            [{"name": "bytes"}, {"name": "gzip", "configuration": {"level": GZIP_LEVEL}}],
        )
        voxels["attributes"] = {"grid": [nx, ny, nz], "packed_axis": 3}
        voxels["dimension_names"] = ["mesh", "x", "y", "z_bytes"]
        _write_json(self.path / VOXELS / "zarr.json", voxels)
        rows = min(TABLE_ROWS, max(n, 1))
        columns: dict[str, tuple[tuple[int, ...], tuple[int, ...], str, list[str]]] = {
            "origin": ((n, 3), (rows, 3), "float64", ["mesh", "axis"]),
            "voxel_size": ((n,), (rows,), "float64", ["mesh"]),
            **{name: ((n,), (rows,), "string", ["mesh"]) for name in STRING_COLUMNS},
            **{name: ((n,), (rows,), "int64", ["mesh"]) for name in COUNT_COLUMNS},
        }
        for name, (shape, chunks, dtype, dims) in columns.items():
            (self.path / name).mkdir()
            meta = _array_meta(shape, chunks, dtype, _plain(dtype))
            meta["dimension_names"] = dims
            _write_json(self.path / name / "zarr.json", meta)
        self._dirty = set(range(-(-n // TABLE_ROWS)))
        self.flush()

    def record(self, index: int, row: Row) -> None:
        """Mesh `index`'s row; written with its block at the next flush (at most every
        FLUSH_SECONDS, and at close)."""
        self.rows[index] = row
        self._dirty.add(index // TABLE_ROWS)
        if time.monotonic() - self._flushed >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Rewrite the blocks of the table that changed (each file atomically)."""
        for block in sorted(self._dirty):
            rows = self.rows[block * TABLE_ROWS : (block + 1) * TABLE_ROWS]
            self._write_block(block, rows)
        self._dirty.clear()
        self._flushed = time.monotonic()

    def _write_block(self, block: int, rows: list[Row]) -> None:
        pad = min(TABLE_ROWS, len(self.rows)) - len(rows)  # the last block: a whole chunk
        empty = Row("")
        full = rows + [empty] * pad
        for name in STRING_COLUMNS:
            data = _encode_strings(getattr(row, name) for row in full)
            _write_bytes(self.path / name / f"c.{block}", data)
        for name in COUNT_COLUMNS:
            counts = np.array([getattr(row, name) for row in full], "<i8")
            _write_bytes(self.path / name / f"c.{block}", counts.tobytes())
        origins = np.array([row.origin for row in full], "<f8").reshape(-1, 3)
        _write_bytes(self.path / "origin" / f"c.{block}.0", origins.tobytes())
        sizes = np.array([row.voxel_size for row in full], "<f8")
        _write_bytes(self.path / "voxel_size" / f"c.{block}", sizes.tobytes())

    def close(self) -> None:
        self.flush()


def _refuse_inputs_inside(path: Path, inputs: Sequence[str]) -> None:
    """OutputError if an input file lies inside the store `path` (as given, or on disk)."""
    given, real = Path(os.path.abspath(path)), resolved(path)
    for item in inputs:
        if not os.path.lexists(item):
            continue  # an in-memory mesh's label
        if Path(os.path.abspath(item)).is_relative_to(given) or resolved(item).is_relative_to(real):
            raise OutputError(
                f"{path}: replacing the store would remove the input {item} inside it",
                path=path,
            )


def _remove_store(path: Path) -> None:
    """Remove a store that overwrite replaces: only one this package wrote (its group's
    attributes say so), never another folder."""
    try:
        meta = json.loads(read_regular(path / "zarr.json", FormatError))
        ours = meta["attributes"]["voxelizer"]["format"] == STORE_FORMAT
    except (VoxelizerError, ValueError, KeyError, TypeError):
        ours = False
    if not ours:
        raise OutputError(
            f"{path}: exists and is not a voxel shard store; not replaced (remove it first)",
            path=path,
        )
    try:
        shutil.rmtree(path)
    except OSError as exc:
        raise OutputError(f"{path}: cannot replace ({exc.strerror or exc})", path=path) from exc


# --- the reader ---------------------------------------------------------------------------------


class Shards:
    """A voxel shard store, read without zarr: `len`, `grid(i)` (a DenseGrid), `voxels(i)`
    (bool [X, Y, Z]), `packed(i)`, the placement arrays `origin` and `voxel_size` and the
    table's columns in `table`. A mesh without a chunk (failed) reads as empty, as in zarr."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            group = json.loads(self._read(self.path / "zarr.json"))
            attributes = group["attributes"]["voxelizer"]
            if attributes["format"] != STORE_FORMAT:
                raise FormatError(f"{self.path}: an unknown store format {attributes['format']!r}")
            self.shape: Shape = check_shape(attributes["grid"])
            self.attributes: dict[str, Any] = attributes
            voxels = json.loads(self._read(self.path / VOXELS / "zarr.json"))
            self.count = voxels["shape"][0]
            if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 0:
                raise ValueError(f"{self.count!r} meshes")
            self._chunks = os.fspath(self.path / VOXELS) + os.sep + "c."
            nx, ny, nz = self.shape
            self._chunk_bytes = nx * ny * -(-nz // 8)  # a mesh's packed grid
            self._chunk_limit = 2 * self._chunk_bytes + 1024  # above gzip's worst case
            self.origin = self._column("origin", "<f8", (3,))
            self.voxel_size = self._column("voxel_size", "<f8", ())
            self.table: dict[str, np.ndarray] = {
                **{name: self._strings(name) for name in STRING_COLUMNS},
                **{name: self._column(name, "<i8", ()) for name in COUNT_COLUMNS},
            }
        except FormatError:
            raise
        except (ValueError, KeyError, TypeError, IndexError, GridError) as exc:
            raise FormatError(f"{self.path}: not a voxel shard store ({exc})") from exc

    def _read(self, path: Path) -> bytes:
        """A file of the store's metadata or table: a regular file, within host memory."""
        try:
            return read_regular(path, FormatError)
        except FormatError as exc:
            raise FormatError(f"{self.path}: not a voxel shard store ({exc})") from None

    def __len__(self) -> int:
        return self.count

    def _blocks(self) -> range:
        return range(-(-self.count // TABLE_ROWS))

    def _column(self, name: str, dtype: str, tail: tuple[int, ...]) -> np.ndarray:
        suffix = ".0" if tail else ""
        rows = min(TABLE_ROWS, max(self.count, 1))
        parts = []
        for block in self._blocks():
            data = self._read(self.path / name / f"c.{block}{suffix}")
            parts.append(np.frombuffer(data, dtype).reshape((rows, *tail)))
        whole = np.concatenate(parts) if parts else np.zeros((0, *tail), dtype)
        return whole[: self.count]

    def _strings(self, name: str) -> np.ndarray:
        rows = min(TABLE_ROWS, max(self.count, 1))
        values: list[str] = []
        for block in self._blocks():
            values += _decode_strings(self._read(self.path / name / f"c.{block}"), rows)
        return np.array(values[: self.count], dtype=object)

    def row(self, index: int) -> Row:
        table = self.table
        origin = self.origin[index]
        return Row(
            input=str(table["input"][index]),
            status=str(table["status"][index]),
            error=str(table["error"][index]),
            warnings=str(table["warnings"][index]),
            triangles=int(table["triangles"][index]),
            solid_voxels=int(table["solid_voxels"][index]),
            open_columns=int(table["open_columns"][index]),
            origin=(float(origin[0]), float(origin[1]), float(origin[2])),
            voxel_size=float(self.voxel_size[index]),
        )

    def packed(self, index: int) -> np.ndarray:
        """uint8 (X, Y, ceil(Z / 8)): mesh `index`'s bits packed along z."""
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise ArgumentError(f"a mesh's index is an integer, not {index!r}")
        if not 0 <= index < self.count:
            raise GridIndexError(f"mesh {index} of a store of {self.count}")
        nx, ny, nz = self.shape
        try:  # (os calls on a str path: a training loop reads thousands a second)
            data = _chunk_bytes(f"{self._chunks}{index}.0.0.0", self._chunk_limit)
        except FileNotFoundError:
            return np.zeros((nx, ny, -(-nz // 8)), np.uint8)
        except (OSError, ValueError) as exc:
            reason = os_error_text(exc) if isinstance(exc, OSError) else str(exc)
            raise FormatError(f"{chunk_path(self.path, index)}: cannot read ({reason})") from None
        # Inflated no further than a chunk's size: a few KB of zeros could claim gigabytes.
        inflater = zlib.decompressobj(GZIP_WBITS)
        try:
            raw = inflater.decompress(data, self._chunk_bytes + 1)
        except zlib.error as exc:
            raise FormatError(f"{chunk_path(self.path, index)}: a damaged chunk ({exc})") from exc
        if len(raw) != self._chunk_bytes or not inflater.eof:
            raise FormatError(f"{chunk_path(self.path, index)}: not a chunk of shape {self.shape}")
        return np.frombuffer(raw, np.uint8).reshape(nx, ny, -(-nz // 8))

    def voxels(self, index: int) -> np.ndarray:
        """bool (X, Y, Z): mesh `index`'s grid."""
        return unpacked(self.packed(index), self.shape[2])

    def grid(self, index: int) -> DenseGrid:
        """Mesh `index`'s grid with its placement; FormatError for a mesh not stored."""
        status = self.table["status"][index]
        if status not in ("done", "skipped"):
            raise FormatError(f"{self.path}: mesh {index} is {status or 'missing'}, not stored")
        try:
            placement = GridPlacement(self.shape, self.origin[index], self.voxel_size[index])
        except GridError as exc:
            raise FormatError(f"{self.path}: mesh {index}'s placement: {exc}") from None
        return DenseGrid(self.voxels(index), placement)


def _chunk_bytes(path: str, limit: int) -> bytes:
    """A chunk file's bytes: a regular file (a FIFO would block, a device never end) of at
    most `limit` bytes (ValueError otherwise); FileNotFoundError where there is none."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        found = os.fstat(descriptor)
        if not stat.S_ISREG(found.st_mode):
            raise ValueError("not a regular file")
        if found.st_size > limit:
            raise ValueError(f"{found.st_size} bytes, more than a chunk of its shape holds")
        return os.read(descriptor, found.st_size)
    finally:
        os.close(descriptor)


def open_shards(path: str | os.PathLike) -> Shards:
    """A voxel shard store written by a batch with format "zarr"."""
    return Shards(path)
