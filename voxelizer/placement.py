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
  to the fine lattice (multiples of 2^-FINE_BITS: `fine_vertices`); every solid decision
  depends only on these. Placed around the mesh, g is clipped to [0, n] (which absorbs the
  rounding at the mesh's extremes); a box may cut the mesh instead, and then nothing is
  clipped: the grid is voxelized as the window of a larger lattice that holds the mesh too
  (`WorkGrid`), so that crossings outside the box count as they would without it. Their
  float32 roundings (`grid_vertices`) feed the GPU's fast path and the surface modes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing

from .errors import GridError, MeshError
from .grid_spec import (
    AXES,
    BOX_FITS,
    DEFAULT_GRID,
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
from .mesh import Mesh
from .parallel import map_row_chunks
from .placed import Placed

__all__ = [
    "AXES",
    "BOX_FITS",
    "COLUMN_AXIS_ORDERS",
    "DEFAULT_GRID",
    "FINE_BITS",
    "FIXED_BITS",
    "MAX_RESOLUTION",
    "MIN_RESOLUTION",
    "NO_PADDING",
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
    "fixed_gap",
    "padded_shape",
    "shape_text",
    "to_fine",
    "voxel_sizes",
]

# The smallest side the voxel-size rule without bounds makes (and the .vox reader's grids).
MIN_RESOLUTION = 8
# Grid coordinates become fixed point with this many fractional bits (shaders/exact.glsl and
# voxelizer/reference.py); n * 2**FIXED_BITS <= 2**29 on every axis keeps every product in range.
FIXED_BITS = 16
# The solid decisions are exact for grid coordinates on the lattice of 2**-FINE_BITS (an int64
# up to 2**62 for coordinates up to 8192; float64 itself has that step from 8 up, so only
# coordinates below 8 are rounded, by at most 2**-50). shaders/fine.glsl has the same value.
FINE_BITS = 49
PLACEMENT_BLOCK_ROWS = 1 << 16  # vertices placed at a time: 1.5 MB of float64, in the cache
# A box within this many voxels of a whole number of voxels counts as whole (bounds with a
# voxel size: 4.5 / 0.05 is 90.00000000000001 in float64, and means 90).
WHOLE_VOXEL_TOLERANCE = 1e-6
# Parity along x, y or z (fill_mode="vote"): the vertex coordinates are rotated cyclically so
# that the axis comes last, the GPU's column axis; argsort(order) transposes the result back.
# The shape rotates with them: (shape[order[0]], shape[order[1]], shape[order[2]]).
COLUMN_AXIS_ORDERS = ((1, 2, 0), (2, 0, 1), (0, 1, 2))


def check_grid_request(
    shape: Shape | None, voxel_size: VoxelSize | None, bounds: np.ndarray | None, box_fit: str
) -> None:
    """GridError for checked options that do not go together."""
    if shape is not None and voxel_size is not None:
        raise GridError("give a grid or a voxel size, not both")
    if box_fit != "cover" and (bounds is None or shape is not None):
        raise GridError(
            f"box_fit={box_fit!r} fits voxels of a given size into bounds: it needs bounds "
            "and no grid (with bounds and a grid the box is always a whole number of voxels)"
        )


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
        origin = np.array(self.origin, dtype=np.float64).reshape(3)
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
            _check_finite_box(box, bmin, bmax, extent)
            if not (extent > 0).any():
                raise MeshError("the mesh has zero extent (all vertices are equal)")
            if bounds is None:
                shape, origin, h = _around_mesh(extent, bmin, bmax, shape, voxel_size)
            else:
                shape, origin, h = _exact_box(extent, bmin, shape, voxel_size, box_fit)
            shape, origin = _padded(shape, origin, h, pad)
            _check_finite_grid(box, bmin, bmax, np.array(shape, np.float64), origin, h)
        size: VoxelSize = float(h[0]) if h[0] == h[1] == h[2] else (h[0], h[1], h[2])
        return cls(shape, origin, size, clip=bounds is None)

    # -- the mesh in grid space ----------------------------------------------------------

    def work(self, mesh: Mesh) -> WorkGrid:
        """The lattice this grid is voxelized on for `mesh`: the grid itself where it holds
        the mesh, else (a box that cuts the mesh) the smallest that holds both (WorkGrid);
        GridError where that lattice would be larger than MAX_RESOLUTION on some axis."""
        if self.clip:
            return WorkGrid(self.shape, (0, 0, 0), self.shape)
        low, high = self._mesh_extent(mesh)
        first = np.minimum(np.floor(low), 0.0)
        last = np.maximum(np.ceil(high), np.array(self.shape, np.float64))
        sides = last - first
        for axis in range(3):
            if not sides[axis] <= MAX_RESOLUTION:
                raise GridError(
                    f"the box cuts the mesh, which reaches from {low[axis]:.6g} to "
                    f"{high[axis]:.6g} voxels along {AXES[axis]} (the grid: 0 to "
                    f"{self.shape[axis]}); a cropped grid is voxelized within a lattice that "
                    f"holds the mesh too, at most {MAX_RESOLUTION} voxels a side, and this "
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
        fine_shift = (shift.astype(np.int64) << FINE_BITS) if moved else None
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
                g *= float(1 << FINE_BITS)  # exact
                fine_chunk = fine_out[start:stop]
                fine_chunk[...] = np.rint(g, out=g)
                if fine_shift is not None:
                    fine_chunk += fine_shift  # exact: whole voxels
            if not gap:
                return 0
            assert used is not None
            mask = used[start:stop]
            rows = slice(start, stop) if mask.all() else np.flatnonzero(mask) + start
            return fixed_gap(grid_out[rows], fine_out[rows])

        def place_blocks(start: int, stop: int) -> int:
            """place() a cache-sized block at a time: its dozen passes then read the cache,
            not memory (8.9 against 12.6 ms for 800k vertices on 2 cores)."""
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
        return (self.shape, self.origin.tobytes(), self.spacing.tobytes(), self.clip)

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


def fixed_gap(grid_vertices: np.ndarray, fine: np.ndarray) -> int:
    """The largest gap, in fine units, between float32 grid-space vertices rounded to the
    fixed-point lattice (2**-FIXED_BITS, what the binning sees) and their fine coordinates,
    exact in int64 (X 2^33 and F are at most 2^62); 0 for no rows. The pipeline's
    fixed_error is its ceiling in fixed-point units."""
    if not len(grid_vertices):
        return 0
    fixed = np.rint(grid_vertices * np.float32(1 << FIXED_BITS)).astype(np.int64)  # (exact)
    fixed *= 1 << (FINE_BITS - FIXED_BITS)
    fixed -= fine
    return int(np.abs(fixed, out=fixed).max())


def to_fine(grid_vertices: np.ndarray) -> np.ndarray:
    """int64 round(g * 2**FINE_BITS) (half to even) of float64 grid-space values in [0, 8192]
    (the scaling is exact; NaN of stray, unreferenced vertices becomes 0)."""
    g = np.fmin(np.fmax(np.asarray(grid_vertices, np.float64), 0.0), float(MAX_RESOLUTION))
    g *= float(1 << FINE_BITS)  # exact
    return np.rint(g, out=g).astype(np.int64)


# -- the placement rules (the module docstring) ----------------------------------------------


def _around_mesh(
    extent: np.ndarray,
    bmin: np.ndarray,
    bmax: np.ndarray,
    shape: Shape | None,
    voxel_size: VoxelSize | None,
) -> tuple[Shape, np.ndarray, np.ndarray]:
    """Without bounds: cubes of the largest side / n, or n from the voxel size rounded up to
    a multiple of 4 (at least 8); centred on the mesh's box."""
    if voxel_size is None:
        shape = (DEFAULT_GRID,) * 3 if shape is None else shape
        sides = np.array(shape, np.float64)
        h = float((extent / sides).max())
        if not h > 0:  # an extent so small that h underflows
            raise MeshError(f"the mesh's extent {float(extent.max()):g} is too small for a grid")
        return shape, (bmin + bmax) / 2.0 - sides * h / 2.0, np.full(3, h)
    spacing = voxel_sizes(voxel_size)
    shape = _shape_for(extent, spacing, voxel_size)
    sides = np.array(shape, np.float64)
    return shape, bmin - (sides * spacing - extent) / 2.0, spacing


def _exact_box(
    extent: np.ndarray,
    bmin: np.ndarray,
    shape: Shape | None,
    voxel_size: VoxelSize | None,
    box_fit: str,
) -> tuple[Shape, np.ndarray, np.ndarray]:
    """With bounds: the box itself, voxel (0, 0, 0)'s corner at its min corner."""
    origin = np.array(bmin, np.float64)
    if shape is not None:
        spacing = extent / np.array(shape, np.float64)
        for axis in range(3):
            if not spacing[axis] > 0:
                raise GridError(
                    f"the bounds' side {extent[axis]:g} along {AXES[axis]} is too small "
                    f"for {shape[axis]} voxels"
                )
        return shape, origin, spacing
    if voxel_size is None:  # cubes that fit DEFAULT_GRID along the longest side
        spacing = np.full(3, float(extent.max()) / DEFAULT_GRID)
        size: VoxelSize = float(spacing[0])
    else:
        spacing, size = voxel_sizes(voxel_size), voxel_size
    sides = []
    for axis in range(3):
        voxels = extent[axis] / spacing[axis]
        whole = round(voxels) if math.isfinite(voxels) else voxels
        if abs(voxels - whole) <= WHOLE_VOXEL_TOLERANCE:
            n = whole
        else:
            n = math.ceil(voxels) if box_fit == "cover" else math.floor(voxels)
        if not n <= MAX_RESOLUTION:
            raise GridError(
                f"voxel size {voxel_size_text(size)} needs {voxels:.6g} voxels along "
                f"{AXES[axis]} for the bounds; each side can be at most {MAX_RESOLUTION}"
            )
        if n < 1:
            raise GridError(
                f"the bounds are {extent[axis]:g} along {AXES[axis]}, less than one voxel of "
                f"{spacing[axis]:g}: box_fit='inside' leaves no voxel (use 'cover')"
            )
        sides.append(int(n))
    return (sides[0], sides[1], sides[2]), origin, spacing


def padded_shape(shape: Shape, pad: Padding) -> Shape:
    """The shape with `pad` voxels added before and after on each axis."""
    (x, y, z), (x_lo, y_lo, z_lo), (x_hi, y_hi, z_hi) = shape, *pad
    return x + x_lo + x_hi, y + y_lo + y_hi, z + z_lo + z_hi


def _padded(
    shape: Shape, origin: np.ndarray, spacing: np.ndarray, pad: Padding
) -> tuple[Shape, np.ndarray]:
    """The shape and origin with `pad` voxels added before and after on each axis."""
    lo, hi = pad
    if lo == hi == (0, 0, 0):
        return shape, origin
    sides = tuple(n + a + b for n, a, b in zip(shape, lo, hi))
    for axis in range(3):
        if sides[axis] > MAX_RESOLUTION:
            raise GridError(
                f"the padded grid has {sides[axis]} voxels along {AXES[axis]} ({shape[axis]} "
                f"and {lo[axis]} + {hi[axis]} of padding); each side can be at most "
                f"{MAX_RESOLUTION}"
            )
    return (sides[0], sides[1], sides[2]), origin - np.array(lo, np.float64) * spacing


def _check_finite_box(box: str, bmin: np.ndarray, bmax: np.ndarray, extent: np.ndarray) -> None:
    """GridError unless the box's sides are finite (finite corners far apart overflow)."""
    for axis in range(3):
        if not math.isfinite(extent[axis]):
            raise GridError(
                f"{box} from {bmin[axis]:g} to {bmax[axis]:g} along {AXES[axis]} is too large: "
                f"its side overflows to {extent[axis]:g}"
            )


def _check_finite_grid(
    box: str,
    bmin: np.ndarray,
    bmax: np.ndarray,
    sides: np.ndarray,
    origin: np.ndarray,
    spacing: np.ndarray,
) -> None:
    """GridError naming the first value that overflowed: the voxel size, the grid's corners,
    or the box in grid space (the GPU's input). A grid that passes has every referenced
    vertex at a finite grid coordinate."""
    far = origin + sides * spacing
    low, high = (bmin - origin) / spacing, (bmax - origin) / spacing
    for axis in range(3):
        name, h = AXES[axis], float(spacing[axis])
        if not (math.isfinite(h) and h > 0):
            raise GridError(
                f"{box} gives a voxel size of {h:g} along {name}: it must be positive and finite"
            )
        if not math.isfinite(origin[axis]):
            raise GridError(
                f"voxel size {h:g} puts the grid's corner at {origin[axis]:g} along {name}"
            )
        if not math.isfinite(far[axis]):
            raise GridError(
                f"voxel size {h:g} puts the grid's far corner at {far[axis]:g} along {name}"
            )
        if not (math.isfinite(low[axis]) and math.isfinite(high[axis])):
            raise GridError(
                f"voxel size {h:g}: {box} along {name} is {low[axis]:g} to {high[axis]:g} "
                "in grid space, beyond floating point"
            )


def _shape_for(extent: np.ndarray, spacing: np.ndarray, voxel_size: VoxelSize) -> Shape:
    """Sides that cover `extent` with voxels of `spacing`: multiples of 4, at least 8."""
    h = voxel_size_text(voxel_size)
    with np.errstate(over="ignore"):
        need = np.ceil(extent / spacing)
    sides = [
        max(MIN_RESOLUTION, 4 * math.ceil(v / 4)) if math.isfinite(v) else v for v in need.tolist()
    ]
    if max(sides) > MAX_RESOLUTION:
        largest = max(range(3), key=lambda axis: sides[axis])
        if math.isfinite(sides[largest]) and sides[largest] > 1e6:  # no 300-digit numbers
            raise GridError(
                f"voxel size {h} is too small: it needs {need[largest]:.3g} voxels along "
                f"{AXES[largest]}; each side of the grid can be at most {MAX_RESOLUTION}"
            )
        if not all(math.isfinite(v) for v in sides):
            raise GridError(
                f"voxel size {h} is too small: each side of the grid can be at "
                f"most {MAX_RESOLUTION}"
            )
        raise GridError(
            f"voxel size {h} needs a {shape_text(sides)} grid; each side can be "
            f"at most {MAX_RESOLUTION}"
        )
    nx, ny, nz = (int(v) for v in sides)
    return nx, ny, nz
