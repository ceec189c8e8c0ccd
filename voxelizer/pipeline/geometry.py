"""The mesh as the passes read it: its grid-space vertices and faces, the fine coordinates the
solid is decided on, how far the float32 vertices are from them (fixed_error), and what of it
is on the device (`Geometry.upload`: a batch's triangles, the fine vertices, the batch's
vertex indices).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from ..errors import VoxelizerError
from ..gpu.buffers import STAGING, STORAGE, Binding, Buffer, BufferPool
from ..gpu.commands import Sequence
from ..gpu.kernels import TILE_SHIFT
from ..parallel import copy_rows, for_row_chunks, map_row_chunks
from ..placement import FINE_BITS, FIXED_BITS, fixed_gap, to_fine
from .layout import INDEX_BYTES, TILE_SIDE, Window

# The largest fixed_error the binning allows for (shaders/tiles.glsl): 1/256 voxel, in units
# of the grid's fixed point (2**-(FIXED_BITS - shift)). Float32 corners below 8192 are within
# 2**-12 + 2**-17 of their float64 values (17 units), mirrored ones (fill_mode="vote") within
# twice that; below 65,536, within 2**-9 + 2**-14 (17 units of FIXED_BITS - 3).
MAX_FIXED_ERROR_VOXELS_LOG2 = -8


def max_fixed_error(shift: int = 0) -> int:
    """The largest fixed_error in fixed-point units of a grid of lattice_shift `shift`."""
    return 1 << (FIXED_BITS - shift + MAX_FIXED_ERROR_VOXELS_LOG2)


Batch = tuple[int, int]  # triangles [first, end) of the mesh's faces

# Where a padded upload's extra triangles lie (Geometry.stage_padded): every corner at -2 in
# grid units, left of every column centre, so the setup bins them to no tile (their box
# ends before column 0 whatever fixed_error widens it by) and they make no pair, no crossing.
PADDING_COORDINATE = -2.0
# A padding triangle of the soup variants, as its staging rows hold it (made once: read-only).
_PADDING_TRIANGLE = np.full((3, 3), PADDING_COORDINATE, np.float32)
_PADDING_TRIANGLE.flags.writeable = False


@dataclass(frozen=True)
class Uploaded:
    """A batch's geometry on the device: "soup", or "vertices" and "indices" (the setup's
    inputs); and for the fill (`exact`), every vertex's fine coordinates and the batch's
    vertex indices that its near ties read."""

    geometry: dict[str, Binding]
    fine: Binding | None
    indices: Binding | None


@dataclass(frozen=True)
class PaddedUpload:
    """A mesh's uploads at capacities (Geometry.stage_padded): its staging buffers written,
    the copies into the device buffers (staging, target, bytes) still to record, and the
    bindings at the capacities' sizes, the same for every mesh that fits them."""

    uploaded: Uploaded
    copies: tuple[tuple[Buffer, Buffer, int], ...]
    triangles: int  # the triangle capacity: the setup and the emission run over this many
    upload_ms: float


class PaddingRows:
    """Which rows of the padded staging buffers hold padding already, per buffer: a mesh
    with fewer triangles than the last pads only the rows the last one's data filled."""

    def __init__(self) -> None:
        self._rows: dict[str, tuple[Buffer, int, int, bytes]] = {}

    def before_data(self, name: str, rows: int) -> None:
        """`rows` rows of data are about to be written from row 0: padding below is gone."""
        entry = self._rows.get(name)
        if entry is not None and entry[1] < rows:
            self._rows[name] = (entry[0], rows, max(entry[2], rows), entry[3])

    def pad(
        self, name: str, buffer: Buffer, view: np.ndarray, data_rows: int, row: np.ndarray
    ) -> None:
        """Padding `row` in rows [data_rows, len(view)) of `view` (the start of `buffer`)."""
        value = row.tobytes()
        end = len(view)
        entry = self._rows.get(name)
        if entry is None or entry[0] is not buffer or entry[3] != value:
            self._rows.pop(name, None)
            view[data_rows:] = row
            self._rows[name] = (buffer, data_rows, end, value)
            return
        _, start, padded_end, _ = entry
        if data_rows < start:
            view[data_rows:start] = row
        if padded_end < end:
            view[max(padded_end, data_rows) :] = row
        # What was padded before joins the rows padded now only where no row between is left.
        joined = start <= end
        self._rows[name] = (buffer, data_rows, max(end, padded_end) if joined else end, value)


class StagingCopies:
    """The copies into host-visible buffers that one staging needs, run together (each by
    copy_rows), each buffer forgotten before and noted as made from its sources after
    (Buffer.holds)."""

    def __init__(self) -> None:
        self._copies: list[tuple[np.ndarray, np.ndarray]] = []
        self._made: list[tuple[Buffer, tuple[np.ndarray, ...], Hashable]] = []

    def add(
        self,
        buffer: Buffer,
        sources: tuple[np.ndarray, ...],
        part: Hashable,
        target: np.ndarray,
        data: np.ndarray,
    ) -> None:
        """target[:] = data (a view of `buffer`), which then holds `sources` (`part`)."""
        buffer.forget()  # (the copy may be interrupted half way)
        self._copies.append((target, data))
        self._made.append((buffer, sources, part))

    def run(self) -> None:
        for target, data in self._copies:
            copy_rows(target, data)
        for buffer, sources, part in self._made:
            buffer.made_from(sources, part)


class Geometry:
    """The mesh of one voxelization, in grid space, as the passes take it.

    It owns the host arrays (float32 vertices, faces, fine vertices, the soup made before
    the call if any) and remembers what it uploaded last: the batch of triangles and their
    bindings, the fine vertices (once per runner) and the batch's vertex indices."""

    def __init__(
        self,
        vertices: np.ndarray,
        faces: np.ndarray,
        *,
        indexed: bool,
        fine: np.ndarray | None = None,
        used: np.ndarray | None = None,
        faces_key: np.ndarray | None = None,
        known_gap: int | None = None,
        soup: np.ndarray | None = None,
        shift: int = 0,
    ):
        self.indexed = indexed
        self.shift = shift  # placement.lattice_shift of the grid
        self.vertices = np.ascontiguousarray(vertices, np.float32)
        # The fine vertices (placement.fine_vertices) decide the solid; the float32 ones only
        # speed it up, within fixed_error of them (shaders/exact.glsl). `used`: the vertices
        # the faces refer to (Mesh.used, cached per mesh), if the caller has them.
        self.fine = np.ascontiguousarray(
            fine_vertices_of(self.vertices, shift) if fine is None else fine, np.int64
        )
        # uint32 as the indexed variants upload them, or int64 (intp) as the soup gather
        # indexes with them without a conversion of its own; anything else becomes uint32.
        self.faces = np.ascontiguousarray(
            faces, faces.dtype if faces.dtype in (np.uint32, np.intp) else np.uint32
        )
        self.triangles = len(self.faces)
        # A read-only array standing for the faces (the Mesh's: Mesh.frozen_faces, or
        # Mesh.indices where they are the faces), by which the buffers made from them remember
        # them; None: the faces may change, nothing made from them is remembered.
        self._faces_key = faces_key
        # The soup of these vertices and faces, made before the call (Job.soup), or None.
        self._soup = soup if soup is not None and soup.shape == (self.triangles, 3, 3) else None
        if known_gap is not None:  # the caller's placement found it (placed_fixed_gap)
            self.fixed_error = fixed_error_of_gap(known_gap, shift)
        else:
            if used is None:
                used = used_vertices(len(self.vertices), self.faces)
            self.fixed_error = remembered_fixed_error(self.vertices, self.fine, used, shift)
        self._uploaded: Batch | None = None
        self._geometry: dict[str, Binding] = {}
        self._fine: Binding | None = None
        self._batch_indices: Binding | None = None
        self._tile_boxes: np.ndarray | None = None

    def upload(
        self, sequence: Sequence, pool: BufferPool, batch: Batch, exact: bool
    ) -> tuple[Uploaded, float]:
        """Record the uploads the batch's passes need and are not on the device yet: its
        geometry and, for the fill (`exact`), the fine vertices and its vertex indices.
        Returns them with the host milliseconds (the copies into staging memory)."""
        started = time.perf_counter()
        first, end = batch
        if self._uploaded != batch:
            if self.indexed:
                self._upload_indexed(sequence, pool, batch)
            else:
                soup = pool.binding("soup", (end - first) * 36)
                self._geometry["soup"] = soup
                sequence.upload_made(
                    soup.buffer,
                    (end - first, 3, 3),
                    np.float32,
                    self._soup_sources(),
                    batch,
                    lambda view: self._gather(first, end, view),
                )
            self._batch_indices = self._geometry.get("indices")
            self._uploaded = batch
        if exact and self._fine is None:
            # Host-visible memory the fill reads as it is: no staging copy, no transfer, and
            # the rare near ties are its only readers.
            fine = pool.get("fine", self.fine.nbytes, STORAGE, host_visible=True)
            fine.write_once(self.fine)  # (placement.placed_vertices: once per mesh and grid)
            self._fine = Binding(fine, self.fine.nbytes)
        if exact and self._batch_indices is None:  # the soup variants' faces, for the fill
            self._batch_indices = self._fill_indices(pool, batch)
        uploaded = Uploaded(dict(self._geometry), self._fine, self._batch_indices)
        return uploaded, (time.perf_counter() - started) * 1e3

    def stage_padded(
        self, pool: BufferPool, triangles: int, vertices: int, padding: PaddingRows
    ) -> PaddedUpload:
        """The whole mesh into staging buffers of `triangles` triangles and `vertices`
        vertices (indexed, the last of them the padding's), the rows past the mesh's holding
        triangles that make no pair (PADDING_COORDINATE): uploads whose copies and bindings
        have the same sizes for every mesh that fits, so that a recording of them can be
        replayed for the next mesh (replay.py). The fine vertices and the soup variants'
        vertex indices are written where the fill reads them, as `upload` does. The copies
        a mesh needs (none of what a buffer holds already) run together (StagingCopies)."""
        started = time.perf_counter()
        count = self.triangles
        staged = StagingCopies()
        if self.indexed:
            copies = self._stage_indexed(pool, triangles, vertices, padding, staged)
            geometry = {
                name: Binding(target, size)
                for name, (_, target, size) in zip(("vertices", "indices"), copies)
            }
            indices = geometry["indices"]
        else:
            staging = pool.get("replay:soup", triangles * 36, STAGING, host_visible=True)
            view = staging.view(np.float32, (triangles, 3, 3))
            sources = self._soup_sources()
            if not staging.holds(sources, (0, count)):
                padding.before_data("soup", count)
                if self._soup is not None:
                    staged.add(staging, sources, (0, count), view[:count], self._soup)
                else:
                    staging.forget()  # (the gather may be interrupted half way)
                    self._gather(0, count, view[:count])
                    staging.made_from(sources, (0, count))
            padding.pad("soup", staging, view, count, _PADDING_TRIANGLE)
            soup = pool.get("soup", triangles * 36)
            copies = ((staging, soup, triangles * 36),)
            geometry = {"soup": Binding(soup, triangles * 36)}
            fine_indices = pool.get(
                "fine_indices", triangles * INDEX_BYTES, STORAGE, host_visible=True
            )
            if not fine_indices.holds(self._faces_sources(), (0, count)):
                target = fine_indices.view(np.uint32, (count, 3))
                staged.add(fine_indices, self._faces_sources(), (0, count), target, self.faces)
            indices = Binding(fine_indices, triangles * INDEX_BYTES)
        fine = pool.get("fine", vertices * 24, STORAGE, host_visible=True)
        if not fine.holds((self.fine,)):  # (the rows past the mesh's are never read)
            staged.add(fine, (self.fine,), None, fine.view(np.int64, self.fine.shape), self.fine)
        staged.run()
        uploaded = Uploaded(geometry, Binding(fine, vertices * 24), indices)
        return PaddedUpload(uploaded, copies, triangles, (time.perf_counter() - started) * 1e3)

    def _stage_indexed(
        self,
        pool: BufferPool,
        triangles: int,
        vertices: int,
        padding: PaddingRows,
        staged: StagingCopies,
    ) -> tuple[tuple[Buffer, Buffer, int], ...]:
        """stage_padded's vertices and indices (their copies added to `staged`): the padding
        triangles' corners are all the last vertex (vertices - 1), which no face names."""
        count = self.triangles
        vertex_staging = pool.get("replay:vertices", vertices * 12, STAGING, host_visible=True)
        vertex_view = vertex_staging.view(np.float32, (vertices, 3))
        if not vertex_staging.holds((self.vertices,)):
            target = vertex_view[: len(self.vertices)]
            staged.add(vertex_staging, (self.vertices,), None, target, self.vertices)
        vertex_view[vertices - 1] = PADDING_COORDINATE
        index_staging = pool.get("replay:indices", triangles * 12, STAGING, host_visible=True)
        index_view = index_staging.view(np.uint32, (triangles, 3))
        sources = self._faces_sources()
        if not index_staging.holds(sources, (0, count)):
            padding.before_data("indices", count)
            staged.add(index_staging, sources, (0, count), index_view[:count], self.faces)
        corner = vertices - 1
        padding.pad("indices", index_staging, index_view, count, np.array([corner] * 3, np.uint32))
        return (
            (vertex_staging, pool.get("vertices", vertices * 12), vertices * 12),
            (index_staging, pool.get("indices", triangles * 12), triangles * 12),
        )

    def _upload_indexed(self, sequence: Sequence, pool: BufferPool, batch: Batch) -> None:
        """The batch's indices (the whole array itself where the batch is the mesh: a
        read-only one, the Mesh's, is copied into staging memory only for another mesh), and
        the vertices with the first batch."""
        first, end = batch
        faces = self.faces if batch == (0, self.triangles) else self.faces[first:end]
        arrays: dict[str, np.ndarray] = {"indices": faces.astype(np.uint32, copy=False)}
        if self._uploaded is None:
            arrays["vertices"] = self.vertices
        for name, array in arrays.items():
            self._geometry[name] = pool.binding(name, array.nbytes)
            sequence.upload(self._geometry[name].buffer, array)

    def _fill_indices(self, pool: BufferPool, batch: Batch) -> Binding:
        """The soup variants' vertex indices of the batch, host-visible as the fine vertices,
        and as rarely read: converted to uint32 from the faces straight into it (no uint32
        copy of them on the host first), and again only for another mesh or batch."""
        first, end = batch
        size = (end - first) * INDEX_BYTES
        indices = pool.get("fine_indices", size, STORAGE, host_visible=True)
        sources = self._faces_sources()
        if not indices.holds(sources, batch):
            indices.forget()  # (the conversion may be interrupted half way)
            copy_rows(indices.view(np.uint32, (end - first, 3)), self.faces[first:end])
            indices.made_from(sources, batch)
        return Binding(indices, size)

    def _soup_sources(self) -> tuple[np.ndarray, ...]:
        """What the soup is made of, as its staging memory remembers it: the grid-space
        vertices and the faces, both read-only where they are a Mesh's (the placed vertices,
        and the faces' key); a repeated call on the same Mesh and grid then gathers nothing."""
        return (self.vertices, *self._faces_sources())

    def _faces_sources(self) -> tuple[np.ndarray]:
        """The faces as buffers made from them remember them: their key, or without one the
        faces themselves (remembered only if read-only)."""
        return (self.faces if self._faces_key is None else self._faces_key,)

    def _gather(self, first: int, end: int, soup: np.ndarray) -> None:
        """The triangle soup of faces [first, end) into `soup`, (count, 3, 3) float32 (the
        staging memory itself: no copy in between); copied from the one made before the
        call where there is one (a reading process's: a copy instead of a gather)."""
        if self._soup is not None:
            copy_rows(soup, self._soup[first:end])
            return

        # Each corner as one 12-byte item, indexed by intp: np.take then moves whole corners
        # and converts no indices (faster than taking float rows by uint32: docs/benchmarks.md,
        # "Figures behind the code").
        corners = self.vertices.view(np.dtype((np.void, 12))).reshape(-1)
        target = soup.reshape(-1, 3).view(np.dtype((np.void, 12))).reshape(-1)

        def gather(start: int, stop: int) -> None:
            np.take(
                corners,
                self.faces[first + start : first + stop].reshape(-1),
                out=target[3 * start : 3 * stop],
            )

        for_row_chunks(end - first, gather)

    def pair_bound(self, window: Window, batch: Batch) -> int:
        """An upper bound of a part's pair count, from the tiles of the triangles' bounding
        boxes inside the window: asked only when the setup pass saw a triangle with many tiles."""
        first, end = batch
        if self._tile_boxes is None:
            self._tile_boxes = tile_boxes(self.vertices, self.faces)
        x_tiles, ty_lo, ty_hi = self._tile_boxes[:, first:end]
        rows = (
            np.minimum(ty_hi, (window.row_hi >> TILE_SHIFT) - 1)
            - np.maximum(ty_lo, window.row_lo >> TILE_SHIFT)
            + 1
        )
        return int((x_tiles * np.maximum(rows, 0)).sum())


def tile_boxes(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """(3, T) int64: per triangle, the tiles its bounding box can touch along x, and its
    first and last tile row (one tile of margin each way: float only widens the bound)."""
    boxes = []
    for axis in (0, 1):
        a, b, c = (vertices[:, axis][faces[:, k]] for k in range(3))
        low = np.minimum(np.minimum(a, b), c)
        high = np.maximum(np.maximum(a, b), c)
        boxes.append(
            (
                np.floor(low / TILE_SIDE).astype(np.int64) - 1,
                np.floor(high / TILE_SIDE).astype(np.int64) + 1,
            )
        )
    (x_lo, x_hi), (y_lo, y_hi) = boxes
    return np.stack([x_hi - x_lo + 1, y_lo, y_hi])


def fine_vertices_of(vertices: np.ndarray, shift: int = 0) -> np.ndarray:
    """The fine coordinates of float32 grid-space vertices given as they are (exact but
    for values below the fine step, 2^-(FINE_BITS - shift)), shift the grid's lattice_shift."""
    return to_fine(np.asarray(vertices, np.float32).astype(np.float64), shift)


def fixed_error(vertices: np.ndarray, fine: np.ndarray, used: np.ndarray, shift: int = 0) -> int:
    """delta of shaders/exact.glsl: the ceiling of the largest gap, in fixed-point units,
    between a used vertex's fixed-point coordinates (from its float32 value) and its fine
    ones, computed exactly in int64 (X 2^33 and F are at most 2^62), in row chunks on the
    host's cores. `used`: bool (V,), the vertices some face refers to (stray vertices may be
    anything)."""

    def largest_gap(start: int, stop: int) -> int:
        mask = used[start:stop]
        rows = slice(start, stop) if mask.all() else np.flatnonzero(mask) + start
        return fixed_gap(vertices[rows], fine[rows], shift)

    return fixed_error_of_gap(max(map_row_chunks(len(vertices), largest_gap)), shift)


def fixed_error_of_gap(gap: int, shift: int = 0) -> int:
    """fixed_error from the largest gap in fine units (placement.fixed_gap) on a grid of
    lattice_shift `shift` (both lattices move together: the step between them is fixed)."""
    step = 1 << (FINE_BITS - FIXED_BITS)
    delta = -(-gap // step)
    if delta > max_fixed_error(shift):  # the binning's band (shaders/tiles.glsl) covers no more
        raise VoxelizerError(
            f"internal error: float32 vertices {delta} fixed-point units from the fine ones"
        )
    return delta


_last_fixed_error: tuple[list[weakref.ref[np.ndarray]], int, int] | None = None


def remembered_fixed_error(
    vertices: np.ndarray, fine: np.ndarray, used: np.ndarray, shift: int = 0
) -> int:
    """fixed_error, remembered for the last inputs that are all read-only (a repeated call
    on the same Mesh and grid: placement.placed_vertices, Mesh.used)."""
    global _last_fixed_error
    arrays = (vertices, fine, used)
    last = _last_fixed_error
    if (
        last is not None
        and last[2] == shift
        and all(ref() is array for ref, array in zip(last[0], arrays))
    ):
        return last[1]
    delta = fixed_error(vertices, fine, used, shift)
    if not any(array.flags.writeable for array in arrays):
        _last_fixed_error = ([weakref.ref(array) for array in arrays], delta, shift)
    return delta


def used_vertices(vertex_count: int, faces: np.ndarray) -> np.ndarray:
    """bool (V,): the vertices some face refers to, in row chunks of the faces."""
    used = np.zeros(vertex_count, bool)

    def mark(start: int, stop: int) -> None:
        used[faces[start:stop].reshape(-1)] = True  # (chunks only ever write True)

    for_row_chunks(len(faces), mark)
    return used
