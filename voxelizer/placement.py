"""Where the grid sits in world space, and the one rounding step from world to grid space.

Contract shared by the GPU passes and the CPU reference (docs/guide/grids.md states the
placement rules with their formulas):

* the grid has a shape (nx, ny, nz), each side from 1 to MAX_RESOLUTION, and voxels of size
  (hx, hy, hz) (cubes: one h), with the corner of voxel (0, 0, 0) at `origin`;
* without bounds the box is the mesh's, and the grid is placed around it (`clip`): with a
  shape asked for, h = max over the axes of (box side / n) and the grid is centred on the
  box: origin = (bmin + bmax)/2 - n*h/2; with a voxel size, n = ceil(box side / h) rounded
  up to a multiple of 4 (at least 8), centred the same way: origin = bmin - (n*h - side)/2;
* with bounds the grid is the box exactly: origin = bmin; with a shape, h = side / n per
  axis; with a voxel size, n = side / h where that is a whole number (within
  WHOLE_VOXEL_TOLERANCE), else ceil ("cover") or floor ("inside"); with neither, cubes of
  h = longest side / DEFAULT_GRID, covering the box;
* padding adds whole voxels on each side: origin -= pad_lo * h, n += pad_lo + pad_hi;
* grid-space vertices g = (v - origin) / h are computed in float64 per axis and rounded once
  to the fine lattice (multiples of 2^-fine_bits(shape), FINE_BITS up to FINE_LATTICE_MAX a
  side and LARGE_LATTICE_SHIFT fewer above: `fine_vertices`); every solid decision
  depends only on these. Placed around the mesh, g is clipped to [0, n] (which absorbs the
  rounding at the mesh's extremes); a box may cut the mesh instead, and then nothing is
  clipped: the grid is voxelized as the window of a larger lattice that holds the mesh too
  (`WorkGrid`), so that crossings outside the box count as they would without it. Their
  float32 roundings (`grid_vertices`) feed the GPU's fast path and the surface modes.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing

from .errors import GridError, MeshError
from .grid_spec import (
    AXES,
    BOX_FITS,
    DEFAULT_GRID,
    FINE_LATTICE_MAX,
    LARGE_LATTICE_SHIFT,
    MAX_RESOLUTION,
    NO_PADDING,
    GridLike,
    Padding,
    PadLike,
    Shape,
    VoxelSize,
    VoxelSizeLike,
    check_bounds,
    check_box_fit,
    check_pad,
    check_resolution,
    check_shape,
    check_voxel_size,
    shape_text,
    voxel_size_text,
    voxel_sizes,
)
from .mesh import Mesh, real_array
from .parallel import map_row_chunks

if TYPE_CHECKING:
    import trimesh  # imported by to_trimesh: `import voxelizer` stays light

from .placement_rules import (
    MIN_RESOLUTION,
    WHOLE_VOXEL_TOLERANCE,
    around_mesh,
    check_finite_box,
    check_finite_grid,
    check_grid_request,
    exact_box,
    padded,
    padded_shape,
)

__all__ = [
    "AXES",
    "BOX_FITS",
    "COLUMN_AXIS_ORDERS",
    "DEFAULT_GRID",
    "FINE_BITS",
    "FINE_LATTICE_MAX",
    "FIXED_BITS",
    "LARGE_LATTICE_SHIFT",
    "MAX_RESOLUTION",
    "MIN_RESOLUTION",
    "NO_PADDING",
    "WHOLE_VOXEL_TOLERANCE",
    "GridLike",
    "GridPlacement",
    "Padding",
    "Placed",
    "Shape",
    "VoxelSize",
    "WorkGrid",
    "check_bounds",
    "check_box_fit",
    "check_grid_request",
    "check_pad",
    "check_resolution",
    "check_shape",
    "check_voxel_size",
    "fine_bits",
    "fixed_bits",
    "fixed_gap",
    "lattice_shift",
    "padded_shape",
    "shape_text",
    "to_fine",
    "voxel_sizes",
]

# Grid coordinates become fixed point with this many fractional bits (shaders/exact.glsl and
# voxelizer/reference/solid.py); n * 2**FIXED_BITS <= 2**29 on every axis keeps every
# product in range.
FIXED_BITS = 16
# The solid decisions are exact for grid coordinates on the lattice of 2**-FINE_BITS (an int64
# up to 2**62 for coordinates up to 8192; float64 itself has that step from 8 up, so only
# coordinates below 8 are rounded, by at most 2**-50). shaders/fine.glsl has the same value.
FINE_BITS = 49
# A grid over FINE_LATTICE_MAX a side (up to MAX_RESOLUTION, as an SVO: the sparse path)
# takes both LARGE_LATTICE_SHIFT bits fewer (FIXED_BITS 13, FINE_BITS 46: 2**29 and 2**62
# again at 65,536; float64 has the fine step from 64 up, so coordinates below 64 are rounded,
# by at most 2**-47), and column indices still fit 16 bits (triangle.glsl).
PLACEMENT_BLOCK_ROWS = 1 << 16  # vertices placed at a time: 1.5 MB of float64, in the cache
# Parity along x, y or z (fill_mode="vote"): the vertex coordinates are rotated cyclically so
# that the axis comes last, the GPU's column axis; argsort(order) transposes the result back.
# The shape rotates with them: (shape[order[0]], shape[order[1]], shape[order[2]]).
COLUMN_AXIS_ORDERS = ((1, 2, 0), (2, 0, 1), (0, 1, 2))


def lattice_shift(shape: Sequence[int]) -> int:
    """Bits by which a grid of `shape` takes FIXED_BITS and FINE_BITS coarser: 0 up to
    FINE_LATTICE_MAX a side, LARGE_LATTICE_SHIFT above."""
    return 0 if max(map(int, shape)) <= FINE_LATTICE_MAX else LARGE_LATTICE_SHIFT


def fine_bits(shape: Sequence[int]) -> int:
    """The fine lattice's fractional bits for a grid of `shape` (FINE_BITS up to 8192)."""
    return FINE_BITS - lattice_shift(shape)


def fixed_bits(shape: Sequence[int]) -> int:
    """The fixed-point record's fractional bits for a grid of `shape` (FIXED_BITS up to 8192)."""
    return FIXED_BITS - lattice_shift(shape)


@dataclass(frozen=True)
class WorkGrid:
    """The lattice a placement's grid is voxelized on, and where the grid lies in it.

    Where the grid holds every vertex of the mesh (`crops` false) it is the grid itself.
    Where a box cuts the mesh, it is the smallest lattice of the same voxels that holds both
    the grid and the mesh: the grid is the window [offset, offset + window) of it. Grid-space
    coordinates move by whole voxels between the two (exactly: the fine coordinates by
    offset * 2**FINE_BITS), and every decision depends only on them, so the window's voxels
    are the grid's, decided as if the grid reached around the whole mesh."""

    shape: Shape  # voxels of the lattice along x, y, z
    offset: Shape  # the lattice's index of the grid's voxel (0, 0, 0)
    window: Shape  # the grid's shape

    @property
    def crops(self) -> bool:
        return self.shape != self.window

    def cut(self, voxels: np.ndarray) -> np.ndarray:
        """The grid's part of an array of the lattice's shape (a view; itself without a crop)."""
        if not self.crops:
            return voxels
        (i, j, k), (nx, ny, nz) = self.offset, self.window
        return voxels[i : i + nx, j : j + ny, k : k + nz]


@dataclass(frozen=True, eq=False)
class GridPlacement:
    """A grid of `shape` voxels of size `voxel_size` (h for cubes, (hx, hy, hz) for others)
    with the corner of voxel (0, 0, 0) at `origin`.

    `shape` may be given as an int N for the cube N^3; it is stored as (nx, ny, nz). Three
    equal sizes are stored as one float. `clip`: the grid was placed around the mesh, whose
    grid coordinates are then clipped to [0, n] (float rounding at its extremes); False for
    a box the user gave, which may cut the mesh (see WorkGrid)."""

    shape: Shape  # voxels along x, y, z
    origin: np.ndarray  # world position of the grid's corner (0, 0, 0), float64 (3,)
    voxel_size: VoxelSize  # world units: h, or (hx, hy, hz)
    clip: bool = True
    _spacing: np.ndarray = field(init=False, repr=False)  # (hx, hy, hz), read-only

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", check_shape(self.shape))
        origin = np.array(real_array(self.origin, np.float64, "origin", GridError)).reshape(3)
        if not np.isfinite(origin).all():  # what the .svo format (and every reader) refuses
            raise GridError(f"origin must be finite, not {origin.tolist()}")
        object.__setattr__(self, "origin", origin)
        object.__setattr__(self, "voxel_size", check_voxel_size(self.voxel_size))
        spacing = voxel_sizes(self.voxel_size)
        spacing.flags.writeable = False
        object.__setattr__(self, "_spacing", spacing)

    @property
    def spacing(self) -> np.ndarray:
        """(hx, hy, hz), float64 (3,), read-only: the voxel's size along each axis."""
        return self._spacing

    @property
    def cubic(self) -> bool:
        """Whether the voxels are cubes (one voxel size)."""
        return not isinstance(self.voxel_size, tuple)

    @property
    def resolution(self) -> int:
        """The longest side, max(shape): the SVO's padded cube follows it."""
        return max(self.shape)

    @property
    def bounds(self) -> np.ndarray:
        """(2, 3): the grid's corners, origin and origin + shape * spacing."""
        return np.array([self.origin, self.origin + np.array(self.shape) * self.spacing])

    def describe(self) -> str:
        """'64x64x32 voxels of 0.05 from (-1.6, -1.6, -0.8)': one line for summaries."""
        corner = ", ".join(f"{v:g}" for v in self.origin)
        return (
            f"{shape_text(self.shape)} voxels of {voxel_size_text(self.voxel_size)} from ({corner})"
        )

    # -- placing a grid ------------------------------------------------------------------

    @classmethod
    def fit(
        cls,
        mesh: Mesh,
        grid: GridLike | None = None,
        voxel_size: VoxelSizeLike | None = None,
        bounds: np.typing.ArrayLike | None = None,
        *,
        box_fit: str = "cover",
        pad: PadLike = 0,
    ) -> GridPlacement:
        """Place a grid around `bounds` (default: the mesh's box) with the shape `grid` (an
        int N for N^3, or (nx, ny, nz)) or the voxel size `voxel_size` (h or (hx, hy, hz));
        neither: DEFAULT_GRID^3 (the module docstring states the rules). `box_fit` ("cover"
        or "inside"): bounds with a voxel size that does not divide them. `pad`: empty
        voxels added around (k, (kx, ky, kz) or ((x_lo, x_hi), (y_lo, y_hi), (z_lo, z_hi))).
        Checks its arguments (GridError); `around` takes them checked."""
        shape = None if grid is None else check_shape(grid)
        size = None if voxel_size is None else check_voxel_size(voxel_size)
        box = None if bounds is None else check_bounds(bounds)
        box_fit = check_box_fit(box_fit)
        check_grid_request(shape, size, box, box_fit)
        return cls.around(mesh, shape, size, box, box_fit=box_fit, pad=check_pad(pad))

    @classmethod
    def around(
        cls,
        mesh: Mesh,
        shape: Shape | None,
        voxel_size: VoxelSize | None,
        bounds: np.ndarray | None,
        *,
        box_fit: str = "cover",
        pad: Padding = NO_PADDING,
    ) -> GridPlacement:
        """`fit` for arguments already checked (voxelizer.Options): a shape or a voxel size
        (not both), (2, 3) bounds or None, a box fit and a padding."""
        if bounds is None:
            bmin, bmax = mesh.bounds
            box = "the mesh's box"
        else:
            bmin, bmax = bounds
            box = "the bounds"
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused below
            extent = bmax - bmin
            check_finite_box(box, bmin, bmax, extent)
            if not (extent > 0).any():
                raise MeshError("the mesh has zero extent (all vertices are equal)")
            if bounds is None:
                shape, origin, h = around_mesh(extent, bmin, bmax, shape, voxel_size)
            else:
                shape, origin, h = exact_box(extent, bmin, shape, voxel_size, box_fit)
            shape, origin = padded(shape, origin, h, pad)
            check_finite_grid(box, bmin, bmax, np.array(shape, np.float64), origin, h)
        size: VoxelSize = float(h[0]) if h[0] == h[1] == h[2] else (h[0], h[1], h[2])
        return cls(shape, origin, size, clip=bounds is None)

    # -- the mesh in grid space ----------------------------------------------------------

    def work(self, mesh: Mesh) -> WorkGrid:
        """The lattice this grid is voxelized on for `mesh`: the grid itself where it holds
        the mesh, else (a box that cuts the mesh) the smallest that holds both (WorkGrid);
        GridError where that lattice would be larger than FINE_LATTICE_MAX on some axis."""
        if self.clip:
            return WorkGrid(self.shape, (0, 0, 0), self.shape)
        low, high = self._mesh_extent(mesh)
        first = np.minimum(np.floor(low), 0.0)
        last = np.maximum(np.ceil(high), np.array(self.shape, np.float64))
        sides = last - first
        crops = bool((sides != np.array(self.shape, np.float64)).any())
        for axis in range(3):  # (the sparse path of larger grids takes no crops)
            if crops and not sides[axis] <= FINE_LATTICE_MAX:
                raise GridError(
                    f"the box cuts the mesh, which reaches from {low[axis]:.6g} to "
                    f"{high[axis]:.6g} voxels along {AXES[axis]} (the grid: 0 to "
                    f"{self.shape[axis]}); a cropped grid is voxelized within a lattice that "
                    f"holds the mesh too, at most {FINE_LATTICE_MAX} voxels a side, and this "
                    f"one needs {sides[axis]:.6g}"
                )
        offset = tuple(int(-v) for v in first)
        work = tuple(int(v) for v in sides)
        return WorkGrid((work[0], work[1], work[2]), (offset[0], offset[1], offset[2]), self.shape)

    def holds_part_of(self, mesh: Mesh) -> bool:
        """Whether the grid's closed box meets the mesh's box (else the grid holds no part
        of the mesh, and its voxels are all outside: an empty result)."""
        low, high = self._mesh_extent(mesh)
        return bool((high >= 0).all() and (low <= np.array(self.shape, np.float64)).all())

    def _mesh_extent(self, mesh: Mesh) -> tuple[np.ndarray, np.ndarray]:
        """The grid coordinates of the mesh's box, by the placement's own steps (rounding is
        monotone, so they bound every referenced vertex's coordinates)."""
        with np.errstate(over="ignore", invalid="ignore"):
            low, high = mesh.bounds - self.origin
            low /= self.spacing
            high /= self.spacing
        return low, high

    def grid_vertices(self, vertices: np.ndarray) -> np.ndarray:
        """float32 grid-space positions of `vertices` in this grid's own frame."""
        return self._place(vertices, grid=True, fine=False)[0]

    def fine_vertices(self, vertices: np.ndarray) -> np.ndarray:
        """int64 fine grid-space positions in this grid's own frame: g = (v - origin) / h in
        float64, clipped to [0, n] where the grid was placed around the mesh, rounded once
        to multiples of 2**-FINE_BITS (within 2**-50 of g; exact from 8 up)."""
        return self._place(vertices, grid=False, fine=True)[1]

    def _place(
        self,
        vertices: np.ndarray,
        grid: bool,
        fine: bool,
        used: np.ndarray | None = None,
        work: WorkGrid | None = None,
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """grid_vertices and/or fine_vertices (an empty array for the one not asked for),
        from one float64 g = (v - origin) / h per row chunk: both from the same steps, in
        one pass over the vertices, in the frame of `work` (moved by its offset: the fine
        coordinates exactly, after their rounding) or this grid's own. With both and `used`
        (bool (V,), the vertices some face refers to), also their fixed_gap over the used
        rows (else 0), while each chunk is at hand."""
        vertices = np.asarray(vertices, np.float64)
        grid_out = np.empty(vertices.shape if grid else (0, 3), np.float32)
        fine_out = np.empty(vertices.shape if fine else (0, 3), np.int64)
        shift = np.zeros(3) if work is None else np.array(work.offset, np.float64)
        moved = bool(shift.any())
        if self.clip or work is not None:
            sides = np.array(self.shape if work is None else work.shape, np.float64)
            low, high = -shift, sides - shift
        else:  # this grid's own frame, not clipped (sides far beyond any grid: NaN to 0)
            sides = np.full(3, 2.0 * MAX_RESOLUTION)
            low, high = -sides, sides
        top32 = sides.astype(np.float32)
        bits = fine_bits(self.shape if work is None else work.shape)
        fine_shift = (shift.astype(np.int64) << bits) if moved else None
        gap = grid and fine and used is not None

        def place(start: int, stop: int) -> int:
            with np.errstate(over="ignore", invalid="ignore"):
                g = vertices[start:stop] - self.origin
                g /= self.spacing
            if grid:
                # Referenced vertices stay inside the frame (checked by `around` and `work`);
                # only stray ones may overflow, and they are never read.
                chunk = grid_out[start:stop]
                with np.errstate(over="ignore", invalid="ignore"):
                    chunk[...] = g + shift if moved else g  # the one rounding to float32
                np.maximum(chunk, np.float32(0), out=chunk)  # np.clip is several times slower
                np.minimum(chunk, top32, out=chunk)
            if fine:
                np.fmax(g, low, out=g)  # fmax and fmin also turn NaN of stray vertices into 0
                np.fmin(g, high, out=g)
                g *= float(1 << bits)  # exact
                fine_chunk = fine_out[start:stop]
                fine_chunk[...] = np.rint(g, out=g)
                if fine_shift is not None:
                    fine_chunk += fine_shift  # exact: whole voxels
            if not gap:
                return 0
            assert used is not None
            mask = used[start:stop]
            rows = slice(start, stop) if mask.all() else np.flatnonzero(mask) + start
            return fixed_gap(grid_out[rows], fine_out[rows], FINE_BITS - bits)

        def place_blocks(start: int, stop: int) -> int:
            """place() a cache-sized block at a time: its dozen passes then read the cache,
            not memory (docs/benchmarks.md, "Figures behind the code")."""
            blocks = range(start, stop, PLACEMENT_BLOCK_ROWS)
            return max((place(a, min(a + PLACEMENT_BLOCK_ROWS, stop)) for a in blocks), default=0)

        gaps = map_row_chunks(len(vertices), place_blocks)
        return grid_out, fine_out, max(gaps)

    def placed_vertices(self, mesh: Mesh) -> tuple[np.ndarray, np.ndarray]:
        """(grid_vertices, fine_vertices) of the mesh's vertices in the frame of
        `work(mesh)` (this grid's own unless the grid crops the mesh), read-only, computed
        once per Mesh and placement (Mesh.placed): a repeated call costs nothing here."""
        grid, fine, _ = self._placed(mesh)
        return grid, fine

    def placed_fixed_gap(self, mesh: Mesh) -> int:
        """fixed_gap of placed_vertices over the vertices the faces use (Mesh.used), found as
        they are placed (computed once per Mesh and placement, as they are)."""
        return self._placed(mesh)[2]

    def make_soup(self, mesh: Mesh) -> np.ndarray:
        """The placed grid vertices of each face's corners, (T, 3, 3) float32 (what the soup
        variants upload), read-only, kept on the Mesh for this placement (placed_soup)."""

        def gather() -> np.ndarray:
            grid, _ = self.placed_vertices(mesh)
            soup = np.take(grid, mesh.faces, axis=0)
            soup.flags.writeable = False
            return soup

        soup = mesh.placed_soup(self.cache_key(), gather)
        assert soup is not None
        return soup

    def placed_soup(self, mesh: Mesh) -> np.ndarray | None:
        """make_soup's soup where it was made for this placement, else None (never made here:
        the passes gather it straight into staging memory)."""
        return mesh.placed_soup(self.cache_key())

    def cache_key(self) -> tuple[object, ...]:
        """What a Mesh keeps its per-placement caches under (placed, placed_soup)."""
        return (self.shape, self.origin.tobytes(), self._spacing.tobytes(), self.clip)

    def _placed(self, mesh: Mesh) -> tuple[np.ndarray, np.ndarray, int]:
        def place() -> tuple[np.ndarray, np.ndarray, int]:
            work = self.work(mesh)
            grid, fine, gap = self._place(
                mesh.vertices, grid=True, fine=True, used=mesh.used, work=work
            )
            grid.flags.writeable = fine.flags.writeable = False
            return grid, fine, gap

        return mesh.placed(self.cache_key(), place)

    # -- cell centres and world positions ------------------------------------------------

    def axis_centres(self, axis: int) -> np.ndarray:
        """float64 (n,): the world coordinates of the voxel centres along one axis (0, 1, 2),
        origin + (i + 1/2) * h."""
        return self.origin[axis] + (np.arange(self.shape[axis]) + 0.5) * self.spacing[axis]

    def centres(
        self, indices: np.typing.ArrayLike | None = None
    ) -> tuple[np.ndarray, ...] | np.ndarray:
        """Without `indices`: (X, Y, Z), each a read-only float64 (nx, ny, nz) view of the
        voxel centres' world coordinates that holds only one axis's values (np.broadcast_to:
        no memory per voxel), ready for f(X, Y, Z). With (M, 3) integer `indices`: their
        centres, float64 (M, 3)."""
        if indices is not None:
            return self.voxel_centres(np.asarray(indices))
        shape = self.shape
        return tuple(
            np.broadcast_to(
                self.axis_centres(axis).reshape([-1 if a == axis else 1 for a in range(3)]), shape
            )
            for axis in range(3)
        )

    def voxel_centres(self, indices: np.ndarray) -> np.ndarray:
        """World positions of the centres of voxels given as (M, 3) integer indices."""
        return self.origin + (np.asarray(indices, np.float64) + 0.5) * self.spacing

    def world_to_index(self, points: np.typing.ArrayLike) -> np.ndarray:
        """int64 (..., 3): the voxel holding each world point (..., 3): floor(g) of its grid
        coordinate g = (p - origin) / h, taken with the placement's own steps and its one
        rounding to the fine lattice, so that a mesh vertex's voxel is where the voxelizer
        sees it; a point on a face between voxels belongs to the upper one. Points outside
        the grid get indices outside [0, shape): test them with `inside(indices)`."""
        p = np.asarray(points, np.float64)
        if p.shape[-1:] != (3,):
            raise GridError(f"points must have shape (..., 3), not {p.shape}")
        if not np.isfinite(p).all():
            raise GridError("points must be finite")
        with np.errstate(over="ignore"):
            g = (p - self.origin) / self.spacing
        limit = float(2 * MAX_RESOLUTION)  # far outside every grid, and an int64 still
        fine = np.rint(np.clip(g, -limit, limit) * float(1 << FINE_BITS)).astype(np.int64)
        return fine >> FINE_BITS  # floor, negative values too

    def inside(self, indices: np.typing.ArrayLike) -> np.ndarray:
        """bool (...): which voxel indices (..., 3) lie in the grid."""
        index = np.asarray(indices)
        return np.asarray(((index >= 0) & (index < np.array(self.shape))).all(axis=-1))


def fixed_gap(grid_vertices: np.ndarray, fine: np.ndarray, shift: int = 0) -> int:
    """The largest gap, in fine units, between float32 grid-space vertices rounded to the
    fixed-point lattice (2**-(FIXED_BITS - shift), what the binning sees) and their fine
    coordinates (2**-(FINE_BITS - shift)), exact in int64 (X 2^33 and F are at most 2^62);
    0 for no rows. The pipeline's fixed_error is its ceiling in fixed-point units."""
    if not len(grid_vertices):
        return 0
    scale = np.float32(1 << (FIXED_BITS - shift))
    fixed = np.rint(grid_vertices * scale).astype(np.int64)  # (exact)
    fixed *= 1 << (FINE_BITS - FIXED_BITS)
    fixed -= fine
    return int(np.abs(fixed, out=fixed).max())


def to_fine(grid_vertices: np.ndarray, shift: int = 0) -> np.ndarray:
    """int64 round(g * 2**(FINE_BITS - shift)) (half to even) of float64 grid-space values in
    [0, FINE_LATTICE_MAX << shift] (the scaling is exact; NaN of stray, unreferenced
    vertices becomes 0); shift: lattice_shift of the grid."""
    top = float(FINE_LATTICE_MAX << shift)
    g = np.fmin(np.fmax(np.asarray(grid_vertices, np.float64), 0.0), top)
    g *= float(1 << (FINE_BITS - shift))  # exact
    return np.rint(g, out=g).astype(np.int64)


class Placed(ABC):
    """The protocol DenseGrid and SVO share, so that writers and callers take either: where
    the voxels sit, how many are solid, and the voxels as one bool (nx, ny, nz) array
    (`to_numpy()`, also what `np.asarray(result)` gives), or an attribute they carry as one
    array of the same shape (`to_numpy(attribute="face")`)."""

    placement: GridPlacement

    @abstractmethod
    def to_numpy(self, attribute: str | None = None) -> np.ndarray:
        """bool array of shape (nx, ny, nz), indexed [i, j, k] = [x, y, z]; with
        attribute="face", the int32 face ids (-1 where none); "label", uint16 labels (0
        where empty); "color", uint8 RGBA (nx, ny, nz, 4)."""

    @property
    def attributes(self) -> tuple[str, ...]:
        """The per-voxel attributes carried, of "face", "label" and "color"."""
        return ()

    @abstractmethod
    def count(self) -> int:
        """Solid voxels."""

    def __array__(
        self, dtype: np.typing.DTypeLike | None = None, copy: bool | None = None
    ) -> np.ndarray:
        """np.asarray(result): the voxels, as to_numpy() gives them (numpy's copy rules)."""
        voxels = self.to_numpy()
        if dtype is not None and np.dtype(dtype) != voxels.dtype:
            if copy is False:
                raise ValueError(f"the voxels are bool: {np.dtype(dtype)} needs a copy")
            return voxels.astype(dtype)
        return voxels.copy() if copy else voxels

    @property
    def shape(self) -> Shape:
        """(nx, ny, nz): voxels along x, y and z."""
        return self.placement.shape

    @property
    def resolution(self) -> int:
        """The longest side, max(shape) (N for a cube N^3)."""
        return self.placement.resolution

    @property
    def origin(self) -> np.ndarray:
        """World position of the corner of voxel (0, 0, 0)."""
        return self.placement.origin.copy()

    @property
    def voxel_size(self) -> VoxelSize:
        """h, the side of a cubic voxel; (hx, hy, hz) for voxels that are not cubes."""
        return self.placement.voxel_size

    @property
    def spacing(self) -> np.ndarray:
        """(hx, hy, hz), float64 (3,): the voxel's size along each axis (cubes too)."""
        return self.placement.spacing.copy()

    # --- cell centres ------------------------------------------------------------------------

    @property
    def xs(self) -> np.ndarray:
        """float64 (nx,): the x of the voxel centres, origin[0] + (i + 1/2) * hx."""
        return self.placement.axis_centres(0)

    @property
    def ys(self) -> np.ndarray:
        """float64 (ny,): the y of the voxel centres."""
        return self.placement.axis_centres(1)

    @property
    def zs(self) -> np.ndarray:
        """float64 (nz,): the z of the voxel centres."""
        return self.placement.axis_centres(2)

    def centres(self, indices: numpy.typing.ArrayLike | None = None) -> Any:
        """(X, Y, Z): the voxel centres' world coordinates, each a read-only (nx, ny, nz)
        view that stores one axis's values only (no memory per voxel), so that a field
        f(X, Y, Z) is evaluated at every centre; with (M, 3) integer `indices`, their
        centres as float64 (M, 3)."""
        return self.placement.centres(indices)

    def world_to_index(self, points: numpy.typing.ArrayLike) -> np.ndarray:
        """int64 (..., 3): the index of the voxel holding each world point (..., 3); points
        outside the grid get indices outside [0, shape) (see `inside`)."""
        return self.placement.world_to_index(points)

    def inside(self, indices: numpy.typing.ArrayLike) -> np.ndarray:
        """bool (...): which voxel indices (..., 3) lie in the grid."""
        return self.placement.inside(indices)

    # --- other libraries and notebooks (voxelizer.convert; files are voxelizer.io's) --------
    # voxelizer.convert and voxelizer.surface are imported where they are used: a
    # voxelization (the command's above all) needs neither.

    def to_mesh(self) -> trimesh.Trimesh:
        """The voxels' outer faces, closed and outward (see voxelizer.surface)."""
        from .surface import voxel_surface

        return voxel_surface(self.to_numpy(), self.placement.origin, self.placement.spacing)

    def to_trimesh(self) -> trimesh.voxel.VoxelGrid:
        """The same voxels as a trimesh VoxelGrid; its transform maps index -> voxel centre."""
        import trimesh

        spacing = self.placement.spacing
        transform = np.eye(4)
        transform[:3, :3] *= spacing
        transform[:3, 3] = np.asarray(self.placement.origin, np.float64) + spacing / 2
        return trimesh.voxel.VoxelGrid(self.to_numpy(), transform=transform)

    def to_open3d(self) -> Any:
        """open3d.geometry.VoxelGrid of the solid voxels, with our origin and voxel size: its
        voxel (i, j, k) is ours and get_voxel_center_coordinate gives our centre (cubic
        voxels only: GridError for others)."""
        from . import convert

        return convert.to_open3d(self.to_numpy(), self.placement.origin, self.placement.spacing)

    def to_pyvista(self) -> Any:
        """pyvista.ImageData whose cell (i, j, k) is voxel (i, j, k): origin the grid corner,
        spacing (hx, hy, hz), dimensions shape + 1, cell data "solid" (uint8 0/1)."""
        from . import convert

        return convert.to_pyvista(self.to_numpy(), self.placement.origin, self.placement.spacing)

    def to_torch(self, device: Any = None) -> Any:
        """torch bool tensor (nx, ny, nz) of the voxels, on `device` (default the CPU, sharing
        memory with to_numpy() as np.asarray does); needs torch (pip install torch)."""
        from . import convert

        return convert.to_torch(self.to_numpy(), device)

    def __dlpack__(self, **kwargs: Any) -> Any:
        """DLPack export of to_numpy() (torch.from_dlpack, jax, cupy...): bool, or uint8 0/1
        on numpy releases whose DLPack has no bool (before 1.25)."""
        from . import convert

        return convert.dlpack_array(self.to_numpy()).__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        """The CPU, where the voxels are (DLPack's (kDLCPU, 0))."""
        device_type, device_id = self.to_numpy().__dlpack_device__()
        return int(device_type), int(device_id)

    def _repr_png_(self) -> bytes | None:
        """The three-view preview as PNG bytes (voxelizer.write_preview's image), for
        notebooks; None above 512^3 voxels, which would be densified on every display."""
        from . import convert

        if math.prod(self.shape) > convert.PREVIEW_MAX_VOXELS:
            return None
        return convert.preview_png(self.to_numpy())

    def _repr_html_(self) -> str:
        """Shape, voxel size, origin and solid voxels, with the preview inline."""
        from . import convert

        return convert.summary_html(
            type(self).__name__,
            self.shape,
            self.placement.origin,
            self.placement.spacing,
            self.count(),
            self._repr_png_(),
        )
