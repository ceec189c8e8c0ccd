"""The input mesh: float64 vertices and int64 triangles, and the checks every mesh passes.

Reading mesh files is voxelizer.io's (voxelizer.io.load_mesh)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, TypeVar, cast

import numpy as np
import numpy.typing

from .errors import MeshError, VoxelizerError
from .parallel import copy_rows, for_row_chunks, map_row_chunks

if TYPE_CHECKING:
    from .attributes.appearance import Appearance, Parts

T = TypeVar("T")


@dataclass(eq=False)
class MeshMemo:
    """What calls derived from one Mesh for a key (a placement on a grid, a call's options),
    kept for the next call that asks with an equal key; only the last key's of each kind is
    kept. It goes along when the Mesh is pickled (a batch's reading process prepares one)."""

    placed: tuple[Hashable, object] | None = None  # Mesh.placed's
    soup: tuple[Hashable, np.ndarray] | None = None  # Mesh.placed_soup's
    kept: dict[str, tuple[Hashable, object]] = field(default_factory=dict)  # Mesh.kept's


@dataclass(frozen=True, eq=False)
class Mesh:
    """An indexed triangle mesh exactly as given: no merging, no repair, no reordering.

    Build one with checked_mesh or voxelizer.io.load_mesh, which check it. What is derived
    from it (the used vertices, the bounds, the topology) is computed once per Mesh, so
    voxelizing the same Mesh again costs nothing on the host before the passes."""

    vertices: np.ndarray  # (V, 3) float64
    faces: np.ndarray  # (T, 3) int64, each index < V
    # What the file says beyond the triangles (voxelizer.attributes): the part of each face
    # and the parts' names, and where each face's colour comes from; None where it has none.
    parts: Parts | None = None
    appearance: Appearance | None = None
    # What calls derived for a key: the one part of a Mesh that changes (as cached_property's).
    _memo: MeshMemo = field(default_factory=MeshMemo, init=False, repr=False)

    @property
    def triangle_count(self) -> int:
        return int(self.faces.shape[0])

    def __setstate__(self, state: dict[str, object]) -> None:
        """A Mesh read and prepared in another process (voxelizer.batch.readers) arrives
        with what it derived there; the derived arrays come back read-only, as they were
        made (the device buffers keep a read-only array as written: Buffer.write_once)."""
        self.__dict__.update(state)
        for name, value in state.items():
            if name not in ("vertices", "faces", "parts", "appearance"):
                _freeze(value)

    # The passes over every face and vertex below run in row chunks on the host's cores
    # (numpy releases the GIL in its loops): for a mesh of millions of triangles they are
    # most of what a first call costs on the host.

    @cached_property
    def indices(self) -> np.ndarray:
        """(T, 3) uint32, contiguous: the faces as the GPU reads them (converted once)."""
        indices = np.empty(self.faces.shape, np.uint32)
        copy_rows(indices, self.faces)
        indices.flags.writeable = False  # (a buffer may keep it as written: write_once)
        return indices

    @property
    def made_indices(self) -> np.ndarray | None:
        """`indices` where they were made already (by a batch's reading process: prepared
        with the mesh), else None: for a caller that can take either them or the faces."""
        return cast("np.ndarray | None", self.__dict__.get("indices"))

    @cached_property
    def frozen_faces(self) -> np.ndarray:
        """The faces as a read-only view (no copy): what buffers made from them remember them
        by, since a Mesh never changes its faces (Buffer.holds takes read-only arrays only)."""
        view = self.faces.view()
        view.flags.writeable = False
        return view

    def placed(self, key: Hashable, place: Callable[[], T]) -> T:
        """place(): what one placement of this mesh on a grid (`key`) derives from it, computed
        once while calls keep that placement (voxelizing the same Mesh on the same grid again
        reuses it). Only the last placement is kept."""
        last = self._memo.placed
        if last is None or last[0] != key:
            last = self._memo.placed = (key, place())
        return cast(T, last[1])

    def kept(self, name: str, key: Hashable, make: Callable[[], T]) -> T:
        """make(): what a call derives from this mesh for `key` (hashable: its options),
        kept under `name` while calls ask with an equal key; only the last key's is kept."""
        last = self._memo.kept.get(name)
        if last is None or last[0] != key:
            last = self._memo.kept[name] = (key, make())
        return cast(T, last[1])

    def placed_soup(
        self, key: Hashable, make: Callable[[], np.ndarray] | None = None
    ) -> np.ndarray | None:
        """The triangle soup of one placement (`key`, as for placed): kept from make() for
        that placement, or None where none was made (make=None asks without making it).
        A reading process makes it, so that the batch's device thread copies it into staging
        memory instead of gathering it there."""
        last = self._memo.soup
        if last is None or last[0] != key:
            if make is None:
                return None
            last = self._memo.soup = (key, make())
        return last[1]

    @cached_property
    def used(self) -> np.ndarray:
        """bool (V,): vertices that some face refers to (stray vertices do not count)."""
        used = np.zeros(len(self.vertices), bool)
        faces = self.faces

        def mark(start: int, stop: int) -> None:
            used[faces[start:stop].reshape(-1)] = True  # a scatter: half np.bincount's time

        for_row_chunks(len(faces), mark)
        used.flags.writeable = False
        return used

    @cached_property
    def problem(self) -> str:
        """Why this mesh cannot be voxelized, or "" (checked once per Mesh)."""
        faces = self.faces
        if faces.size == 0:
            return "no triangles, or a face refers to a vertex that does not exist"
        # Read as unsigned, a negative index is above every valid one: one reduction, the max.
        unsigned = faces.view(f"u{faces.dtype.itemsize}") if faces.dtype.kind == "i" else faces
        highest = map_row_chunks(len(faces), lambda start, stop: unsigned[start:stop].max())
        if max(highest) >= len(self.vertices):
            return "no triangles, or a face refers to a vertex that does not exist"
        # The bounds are finite iff every used vertex is: min and max propagate a NaN, and
        # an infinity is a min or a max (one pass over the vertices less).
        low, high = self.bounds
        if not (np.isfinite(low).all() and np.isfinite(high).all()):
            return "vertex coordinates contain NaN or infinity"
        if np.all(low == high):
            return "the mesh has zero extent (all vertices are equal)"
        return ""

    @cached_property
    def bounds(self) -> np.ndarray:
        """(2, 3) min and max corner of the used vertices."""
        used = self._used_vertices

        def corners(start: int, stop: int) -> np.ndarray:
            # column by column: numpy reduces a strided column far faster than axis 0
            # (docs/benchmarks.md, "Figures behind the code")
            rows = used[start:stop].T
            return np.array([[column.min() for column in rows], [column.max() for column in rows]])

        chunks = map_row_chunks(len(used), corners)
        return np.array(
            [np.min([c[0] for c in chunks], axis=0), np.max([c[1] for c in chunks], axis=0)]
        )

    @property
    def _used_vertices(self) -> np.ndarray:
        """The vertices some face refers to (all of them, without a copy, in most meshes)."""
        used = self.used
        return self.vertices if used.all() else self.vertices[used]

    @cached_property
    def axis_areas(self) -> np.ndarray:
        """float64 (3,): the triangles' areas projected on the planes normal to x, y and z,
        each triangle counted as unsigned (|n_x| A, |n_y| A, |n_z| A summed). A surface of
        area A and unit normal n crosses about (|n_x| + |n_y| + |n_z|) A / h^2 cubes of side
        h: what voxelizer.thin estimates the surface's voxels by."""
        # By coordinate columns: each gather and product then runs over contiguous rows,
        # faster than over the (n, 3) rows' strided columns (docs/benchmarks.md, "Figures
        # behind the code"), with the same products and the same sums.
        x, y, z = np.ascontiguousarray(self.vertices.T)
        faces = self.faces

        def sums(start: int, stop: int) -> np.ndarray:
            first, second, third = np.ascontiguousarray(faces[start:stop].T)
            ax, ay, az = x[first], y[first], z[first]
            ux, uy, uz = x[second] - ax, y[second] - ay, z[second] - az
            vx, vy, vz = x[third] - ax, y[third] - ay, z[third] - az
            return np.array(  # the cross product by its components: np.cross's is slower
                [
                    np.abs(uy * vz - uz * vy).sum(),
                    np.abs(uz * vx - ux * vz).sum(),
                    np.abs(ux * vy - uy * vx).sum(),
                ]
            )

        with np.errstate(over="ignore", invalid="ignore"):
            areas = np.sum(map_row_chunks(len(faces), sums), axis=0) / 2.0
        areas.flags.writeable = False
        return areas

    @cached_property
    def topology(self) -> Topology:
        """Counts that say whether parity fill means "inside" for this mesh.

        Triangles and edges are compared by vertex position, so a mesh whose faces share
        positions but not indices (an STL soup) still counts as closed. A boundary edge has
        one face, a non-manifold edge more than two. Degenerate triangles (zero area) and
        duplicates (the same three positions as another face) are valid input: the passes
        skip the former, and a duplicate pair of opposite windings cancels out.
        """
        corners = self.faces
        boundary, nonmanifold = _edge_uses(corners, len(self.vertices))
        if boundary or nonmanifold:  # maybe only unshared indices: compare by position
            rows = np.ascontiguousarray(self.vertices + 0.0)  # + 0.0 merges -0.0 into 0.0
            _, position_ids = np.unique(
                rows.view(np.dtype((np.void, 24))).ravel(), return_inverse=True
            )
            corners = position_ids.reshape(-1)[self.faces]
            boundary, nonmanifold = _edge_uses(corners, len(rows))

        a, b, c = (self.vertices[self.faces[:, i]] for i in range(3))
        with np.errstate(over="ignore", invalid="ignore"):  # huge coordinates: inf or nan, not 0
            (ux, uy, uz), (vx, vy, vz) = (b - a).T, (c - a).T
            area = (uy * vz - uz * vy != 0) | (uz * vx - ux * vz != 0) | (ux * vy - uy * vx != 0)
        triples = np.sort(corners, axis=1)
        if len(self.vertices) < 1 << 21:  # three ids fit one int64 key
            keys = (triples[:, 0] << 42) | (triples[:, 1] << 21) | triples[:, 2]
            duplicates = len(keys) - len(np.unique(keys))
        else:
            ordered = triples[np.lexsort(triples.T[::-1])]
            duplicates = int(np.count_nonzero((ordered[1:] == ordered[:-1]).all(axis=1)))
        return Topology(boundary, nonmanifold, int(np.count_nonzero(~area)), duplicates)


def _freeze(value: object) -> None:
    """Make the arrays in `value` (an array, tuples of them, a MeshMemo's) read-only."""
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    elif isinstance(value, tuple):
        for item in value:
            _freeze(item)
    elif isinstance(value, MeshMemo):
        # Each entry is (key, what was made for it): a key is hashable, so it holds no
        # array to walk through (a batch's reading thread does this for every mesh).
        made = (value.placed, value.soup, *value.kept.values())
        _freeze(tuple(entry[1] for entry in made if entry is not None))


def _edge_uses(corners: np.ndarray, vertex_count: int) -> tuple[int, int]:
    """(edges used by one face, edges used by more than two) of (T, 3) corner ids."""
    first = corners.reshape(-1)
    second = corners[:, [1, 2, 0]].reshape(-1)
    keep = first != second  # collapsed edges of degenerate triangles
    low, high = np.minimum(first, second)[keep], np.maximum(first, second)[keep]
    keys = np.sort(low * vertex_count + high)
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1], True])
    uses = np.diff(starts)
    return int(np.count_nonzero(uses == 1)), int(np.count_nonzero(uses > 2))


@dataclass(frozen=True)
class Topology:
    boundary_edges: int
    nonmanifold_edges: int
    degenerate_triangles: int
    duplicate_triangles: int

    @property
    def closed(self) -> bool:
        return self.boundary_edges == 0 and self.nonmanifold_edges == 0


def checked_mesh(
    vertices: np.typing.ArrayLike,
    faces: np.typing.ArrayLike,
    what: str,
    parts: Parts | None = None,
    appearance: Appearance | None = None,
) -> Mesh:
    """A Mesh of array-likes (with the parts and appearance of its faces, if any), or
    MeshError naming `what` (the source, as the user knows it)."""
    try:
        v = real_array(vertices, np.float64, f"{what}: vertices", MeshError)
        f = np.asarray(faces)
    except (TypeError, ValueError) as exc:
        raise MeshError(f"{what}: vertices and faces must be numeric arrays ({exc})") from exc
    if f.size == 0 or v.size == 0:
        raise MeshError(f"{what}: the mesh has no triangles")
    if v.ndim != 2 or v.shape[1] != 3:
        raise MeshError(f"{what}: vertices must have shape (V, 3), not {v.shape}")
    if f.ndim != 2 or f.shape[1] != 3:
        raise MeshError(f"{what}: faces must have shape (T, 3) (triangles only), not {f.shape}")
    if not np.issubdtype(f.dtype, np.integer):
        raise MeshError(f"{what}: faces must be integer vertex indices")
    if f.min() < 0 or f.max() >= len(v):
        raise MeshError(f"{what}: a face refers to a vertex that does not exist")
    if (parts is not None and len(parts.ids) != len(f)) or (
        appearance is not None
        and (
            len(appearance.sources) != len(f)
            or (appearance.vertex_colors is not None and len(appearance.vertex_colors) != len(v))
        )
    ):
        raise MeshError(f"{what}: the parts or colours do not match the faces and vertices")
    mesh = Mesh(np.ascontiguousarray(v), np.ascontiguousarray(f, dtype=np.int64), parts, appearance)
    return usable_mesh(mesh, what)


def real_array(
    values: np.typing.ArrayLike, dtype: type, what: str, error: type[VoxelizerError]
) -> np.ndarray:
    """`values` as an array of `dtype`, if they are real numbers; error(...) naming `what`
    otherwise. A plain cast would drop an imaginary part (with no more than numpy's
    ComplexWarning) and read strings and bools as numbers."""
    array = np.asarray(values)
    if array.dtype.kind not in "iufO":
        raise error(f"{what} must be real numbers, not {array.dtype}")
    try:
        return array.astype(dtype, copy=False)
    except (TypeError, ValueError) as exc:  # an object array of other things
        raise error(f"{what} must be real numbers ({exc})") from None


def usable_mesh(mesh: Mesh, what: str) -> Mesh:
    """The mesh itself, or MeshError if it cannot be voxelized (the verdict is cached per Mesh)."""
    if mesh.problem:
        raise MeshError(f"{what}: {mesh.problem}")
    return mesh
