"""DenseGrid: the voxelization as a full (nx, ny, nz) bit grid, in the layout the GPU writes.

Its .npz file is voxelizer.io's (voxelizer.save, voxelizer.load)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cache

import numpy as np

from .errors import ArgumentError
from .grid_spec import voxel_size_text
from .placement import GridPlacement, Placed, Shape, shape_text
from .stats import Stats


@cache
def _reversed_byte_pairs() -> np.ndarray:
    """uint16 -> the same two bytes, each with its bits in the opposite order (the GPU's
    little bit order to np.packbits' big one): a 128 KiB table, faster than one of 256 bytes
    (docs/benchmarks.md, "Figures behind the code")."""
    byte = np.arange(256)
    reversed_byte = np.zeros(256, np.uint16)
    for bit in range(8):
        reversed_byte |= ((byte >> bit) & 1).astype(np.uint16) << (7 - bit)
    pairs = np.arange(1 << 16)
    return reversed_byte[pairs & 0xFF] | (reversed_byte[pairs >> 8] << 8)


PACKED_ROWS_BYTES = 1 << 20  # packed bytes turned into words at a time


@cache
def _reversed_bytes() -> np.ndarray:
    """uint8 -> the same byte with its bits in the opposite order."""
    return (_reversed_byte_pairs()[:256] & 0xFF).astype(np.uint8)


def column_words(nz: int) -> int:
    """32-bit words per voxel column: a column (i, j) holds bits k = 0..nz-1, padded to 32."""
    return (nz + 31) // 32


def grid_bytes(nx: int, rows: int, nz: int) -> int:
    """Bytes of the GPU bit grid of `rows` rows of nx columns, each nz voxels tall."""
    return nx * rows * column_words(nz) * 4


def unpack_columns(words: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """GPU layout -> bool[i, j, k]. The GPU stores column (i, j) at word (j*nx + i)*W, bit k."""
    return ColumnBits(np.asarray(words, np.uint32).reshape(-1), shape).to_numpy()


def pack_columns(voxels: np.ndarray) -> np.ndarray:
    """bool[i, j, k] -> the GPU layout (the inverse of unpack_columns)."""
    nx, ny, nz = voxels.shape
    padded = np.zeros((ny, nx, column_words(nz) * 32), bool)
    padded[:, :, :nz] = voxels.transpose(1, 0, 2)
    return np.packbits(padded, axis=2, bitorder="little").view(np.uint32).reshape(-1)


def bit_count(values: np.ndarray) -> int:
    """Set bits in an integer array (any width, signed ones as their two's complement bits),
    summed: one hardware popcount per word (np.bitwise_count), no per-byte table lookup."""
    values = np.asarray(values)
    unsigned = values.view(f"u{values.itemsize}") if values.dtype.kind == "i" else values
    if unsigned.itemsize < 8 and unsigned.flags.c_contiguous and unsigned.nbytes % 8 == 0:
        unsigned = unsigned.reshape(-1).view(np.uint64)  # half the words (or fewer) to count
    return int(np.bitwise_count(unsigned).sum(dtype=np.int64))


@dataclass(frozen=True, eq=False)
class ColumnBits:
    """A dense grid as the GPU writes it: column (i, j) in the W = column_words(nz) uint32
    words from (j*nx + i)*W, voxel k at bit k % 32 of its word k // 32 (bits k >= nz are
    padding, never read as voxels). An eighth of the bool array's bytes: results stay in
    this form until someone asks for the bools.

    `clean_padding`: every padding bit is known to be 0, as in the GPU's words (the fill
    pass masks them, the surface pass marks none) and every grid built here; count() is
    then one pass over the words. Words of other origin may hold anything there."""

    words: np.ndarray  # uint32 (ny * nx * W,)
    shape: Shape
    clean_padding: bool = False

    def __post_init__(self) -> None:
        nx, ny, nz = self.shape
        expected = (nx * ny * column_words(nz),)
        if self.words.dtype != np.uint32 or self.words.shape != expected:
            raise ArgumentError(
                f"expected uint32 words of shape {expected}, got "
                f"{self.words.dtype} {self.words.shape}"
            )

    @classmethod
    def empty(cls, shape: Shape) -> ColumnBits:
        """The words of a grid with no voxel set."""
        nx, ny, nz = shape
        return cls(np.zeros(nx * ny * column_words(nz), np.uint32), shape, clean_padding=True)

    @classmethod
    def of_voxels(cls, voxels: np.ndarray) -> ColumnBits:
        """The words of a bool[i, j, k] array."""
        nx, ny, nz = voxels.shape
        return cls(pack_columns(voxels), (nx, ny, nz), clean_padding=True)

    @classmethod
    def of_packed_bits(cls, bits: np.ndarray, shape: Shape) -> ColumnBits:
        """The words of np.packbits of a bool[i, j, k] array (packed_bits' inverse, an .npz
        file's bits), for nz a multiple of 8 (each column whole bytes): the bytes put in
        [j, i] order and each one's bits reversed, without the bools."""
        nx, ny, nz = shape
        if nz % 8:
            raise ArgumentError(f"columns of {nz} voxels are not whole bytes")
        per_column = nz // 8
        columns = np.zeros((ny, nx, 4 * column_words(nz)), np.uint8)
        stored = np.asarray(bits, np.uint8).reshape(nx, ny, per_column).transpose(1, 0, 2)
        table = _reversed_bytes()
        rows = max(1, PACKED_ROWS_BYTES // (nx * per_column))  # (take's indices are intp)
        for low in range(0, ny, rows):
            columns[low : low + rows, :, :per_column] = table[stored[low : low + rows]]
        return cls(columns.view(np.uint32).reshape(-1), shape, clean_padding=True)

    def rows(self, row_lo: int, row_hi: int) -> np.ndarray:
        """The words of the column rows j in [row_lo, row_hi) (a view: rows are contiguous)."""
        nx, _, nz = self.shape
        per_row = nx * column_words(nz)
        return self.words[row_lo * per_row : row_hi * per_row]

    def _column_bytes(self) -> np.ndarray:
        """uint8 (ny, nx, 4W): each column's bytes, voxel k at bit k % 8 of byte k // 8."""
        nx, ny, nz = self.shape
        return self.words.view(np.uint8).reshape(ny, nx, 4 * column_words(nz))

    def to_numpy(self) -> np.ndarray:
        """bool[i, j, k], C-contiguous: the bytes are put in [i, j] order first, then
        unpacked (one pass over the bools)."""
        nz = self.shape[2]
        columns = np.ascontiguousarray(self._column_bytes()[:, :, : -(-nz // 8)].transpose(1, 0, 2))
        return np.unpackbits(columns, axis=2, count=nz, bitorder="little").view(bool)

    def to_numpy_xzy(self) -> np.ndarray:
        """bool[i, k, j], C-contiguous (y fastest, then z, then x: .binvox's order)."""
        nz = self.shape[2]
        rows = np.ascontiguousarray(self._column_bytes()[:, :, : -(-nz // 8)].transpose(1, 2, 0))
        return np.unpackbits(rows, axis=1, count=nz, bitorder="little").view(bool)

    def count(self) -> int:
        """Set voxels: the words' set bits, less those of the padding above nz unless it is
        known to be clean (without a copy of the words either way)."""
        if self.clean_padding:
            return bit_count(self.words)
        return bit_count(self.words) - self.padding_bits()

    def padding_bits(self) -> int:
        """Set bits past nz (0 where clean_padding holds): every column's last word read."""
        nz = self.shape[2]
        if nz % 32 == 0 or not self.words.size:
            return 0
        last = self.words.reshape(-1, column_words(nz))[:, -1]
        return bit_count(last & ~np.uint32((1 << nz % 32) - 1))

    def packed_bits(self) -> np.ndarray:
        """np.packbits of the bool[i, j, k] array in C order (big bit order), as .npz files
        hold it. When nz is a multiple of 8 a column is whole bytes: each byte's bits are
        reversed and the bytes put in [i, j] order, without the bools."""
        nx, ny, nz = self.shape
        if nz % 8:
            return np.packbits(self.to_numpy(), axis=None)
        reversed_bytes = np.take(_reversed_byte_pairs(), self.words.view(np.uint16))
        columns = reversed_bytes.view(np.uint8).reshape(ny, nx, 4 * column_words(nz))
        return np.ascontiguousarray(columns[:, :, : nz // 8].transpose(1, 0, 2)).reshape(-1)

    def __or__(self, other: ColumnBits) -> ColumnBits:
        """The union of two grids of one shape."""
        if other.shape != self.shape:
            raise ArgumentError(f"shapes differ: {self.shape} and {other.shape}")
        clean = self.clean_padding and other.clean_padding
        return ColumnBits(self.words | other.words, self.shape, clean_padding=clean)


class DenseGrid(Placed):
    """A voxelization on a dense grid: in mode "solid", voxel (i, j, k) is set iff its
    centre is inside the mesh (README.md states the surface modes).

    The voxels are held either as a bool array (a grid built from one) or, for a grid
    straight from the GPU, as its column words (ColumnBits, 1 bit a voxel): count() and the
    .npz writer read those, and the first to_numpy() (or np.asarray) unpacks them into the
    bool array, which then is the storage (a caller may change it, as with a grid built
    from one).

    `face_ids` (voxelize_dense(..., attributes=["face"])): int32 (nx, ny, nz), for every
    surface voxel the smallest index (row of the mesh's faces) of the triangles that mark
    it, -1 elsewhere; None when not asked for.

    `labels` (voxelize_dense(..., labels=True)): uint16 (nx, ny, nz), the part of every set
    voxel (1 up; 0 for empty voxels), named by `label_names` (label l is label_names[l - 1]).
    `colors` (colors=True): uint8 (nx, ny, nz, 4), the RGBA of every set voxel, 0 elsewhere.
    None when not asked for."""

    def __init__(
        self,
        voxels: np.ndarray | ColumnBits,
        placement: GridPlacement,
        stats: Stats | None = None,
        *,
        face_ids: np.ndarray | None = None,
    ):
        """`voxels`: the bool array, or the GPU's column words (kept as they are: of_columns)."""
        self._voxels: np.ndarray | None = None
        self._columns: ColumnBits | None = None
        if isinstance(voxels, ColumnBits):
            if voxels.shape != placement.shape:
                raise ArgumentError(
                    f"expected words of shape {placement.shape}, got {voxels.shape}"
                )
            self._columns = voxels
        else:
            if voxels.shape != placement.shape or voxels.dtype != bool:
                raise ArgumentError(
                    f"expected a bool array of shape {placement.shape}, got "
                    f"{voxels.dtype} {voxels.shape}"
                )
            self._voxels = voxels
        if face_ids is not None and (
            face_ids.shape != placement.shape or face_ids.dtype != np.int32
        ):
            raise ArgumentError(f"expected int32 face ids of shape {placement.shape}")
        self.face_ids = face_ids
        self.placement = placement
        self.stats = stats if stats is not None else Stats()
        self.labels: np.ndarray | None = None
        self.colors: np.ndarray | None = None
        self.label_names: tuple[str, ...] = ()

    @classmethod
    def of_columns(
        cls,
        columns: ColumnBits,
        placement: GridPlacement,
        stats: Stats | None = None,
        *,
        face_ids: np.ndarray | None = None,
    ) -> DenseGrid:
        """The grid of the GPU's column words, kept as they are (no bool array yet)."""
        return cls(columns, placement, stats, face_ids=face_ids)

    @property
    def columns(self) -> ColumnBits | None:
        """The column words while they are the storage; None once the bools are."""
        return self._columns

    def to_numpy(self, attribute: str | None = None) -> np.ndarray:
        """bool array of shape (nx, ny, nz), indexed [i, j, k] = [x, y, z]; attribute="face":
        face_ids, "label": labels, "color": colors (ArgumentError when the grid has none)."""
        if attribute is None:
            if self._voxels is None:
                assert self._columns is not None  # one of the two is always the storage
                self._voxels, self._columns = self._columns.to_numpy(), None
            return self._voxels
        arrays = {"face": self.face_ids, "label": self.labels, "color": self.colors}
        if attribute not in arrays:
            raise ArgumentError(f"attribute must be 'face', 'label' or 'color', not {attribute!r}")
        array = arrays[attribute]
        if array is None:
            asked = {"face": "attributes=['face']", "label": "labels=True"}.get(
                attribute, "colors=True"
            )
            raise ArgumentError(f"this grid has no {attribute} attribute (voxelize with {asked})")
        return array

    @property
    def attributes(self) -> tuple[str, ...]:
        arrays = {"face": self.face_ids, "label": self.labels, "color": self.colors}
        return tuple(name for name, array in arrays.items() if array is not None)

    def with_attributes(
        self,
        labels: np.ndarray | None = None,
        colors: np.ndarray | None = None,
        label_names: tuple[str, ...] = (),
    ) -> DenseGrid:
        """This grid (its voxels shared) carrying labels and colours: uint16 (nx, ny, nz)
        labels with their names, uint8 (nx, ny, nz, 4) RGBA colours (ValueError otherwise)."""
        shape = self.placement.shape
        if labels is not None and (labels.shape != shape or labels.dtype != np.uint16):
            raise ValueError(f"expected uint16 labels of shape {shape}")
        if labels is not None and labels.size and int(labels.max()) > len(label_names):
            raise ValueError("a label without a name")
        if colors is not None and (colors.shape != (*shape, 4) or colors.dtype != np.uint8):
            raise ValueError(f"expected uint8 colours of shape {(*shape, 4)}")
        out = copy.copy(self)
        out.labels, out.colors, out.label_names = labels, colors, tuple(label_names)
        return out

    def count(self) -> int:
        """Solid voxels."""
        if self._columns is not None:
            return self._columns.count()
        return int(np.count_nonzero(self.to_numpy()))

    def __repr__(self) -> str:
        return (
            f"DenseGrid({shape_text(self.shape)}, {self.count()} {self.stats.voxel_noun()}, "
            f"voxel_size={voxel_size_text(self.voxel_size)})"
        )
