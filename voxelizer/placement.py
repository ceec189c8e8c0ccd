"""Where the grid sits in world space, and the one rounding step from world to grid space.

Contract shared by the GPU passes and the CPU reference:

* the grid has a shape (nx, ny, nz), each side a multiple of 4 from 8 to MAX_RESOLUTION
  (grids with a side over FINE_LATTICE_MAX are voxelized as an SVO, on a lattice coarser by
  LARGE_LATTICE_SHIFT bits: `lattice_shift`);
* the box is the given bounds, else the bounding box of the mesh's referenced vertices; every
  referenced vertex lies inside it;
* with a shape asked for: h = max over the axes of (box side / n); the grid is centred on the
  box centre on every axis: origin = (bmin + bmax)/2 - n*h/2 (for a cube N^3 and no bounds,
  h = longest side / N);
* with a voxel size h asked for: n = ceil(box side / h) rounded up to a multiple of 4 (at
  least 8), and the grid is centred on the box the same way, computed as
  origin = bmin - (n*h - side)/2 so that it is bmin exactly where n*h == side;
* grid-space vertices g = (v - origin) / h are computed in float64, clipped to [0, n] per
  axis, and rounded once to the fine lattice (multiples of 2^-fine_bits(shape):
  `fine_vertices`);
  every solid decision depends only on these. Their float32 roundings (`grid_vertices`,
  clipped the same way) feed the GPU's fast path and the surface modes.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing

from .errors import GridError, MeshError
from .mesh import Mesh
from .parallel import map_row_chunks

if TYPE_CHECKING:
    import trimesh  # imported by to_trimesh: `import voxelizer` stays light

MIN_RESOLUTION = 8
# Grid coordinates become fixed point with this many fractional bits (shaders/exact.glsl and
# voxelizer/reference/solid.py); n * 2**FIXED_BITS <= 2**29 on every axis keeps every
# product in range.
FIXED_BITS = 16
# The solid decisions are exact for grid coordinates on the lattice of 2**-FINE_BITS (an int64
# up to 2**62 for coordinates up to 8192; float64 itself has that step from 8 up, so only
# coordinates below 8 are rounded, by at most 2**-50). shaders/fine.glsl has the same value.
FINE_BITS = 49
# The sides those two keep every integer in range for. A larger grid (up to MAX_RESOLUTION,
# as an SVO) takes both LARGE_LATTICE_SHIFT bits fewer (FIXED_BITS 13, FINE_BITS 46: 2**29
# and 2**62 again at 65,536; float64 has the fine step from 64 up, so coordinates below 64
# are rounded, by at most 2**-47), and column indices still fit 16 bits (triangle.glsl).
FINE_LATTICE_MAX = 8192
LARGE_LATTICE_SHIFT = 3
MAX_RESOLUTION = FINE_LATTICE_MAX << LARGE_LATTICE_SHIFT
PLACEMENT_BLOCK_ROWS = 1 << 16  # vertices placed at a time: 1.5 MB of float64, in the cache
DEFAULT_GRID = 512  # the cube used when neither a grid nor a voxel size is asked for
AXES = "xyz"
# Parity along x, y or z (fill_mode="vote"): the vertex coordinates are rotated cyclically so
# that the axis comes last, the GPU's column axis; argsort(order) transposes the result back.
# The shape rotates with them: (shape[order[0]], shape[order[1]], shape[order[2]]).
COLUMN_AXIS_ORDERS = ((1, 2, 0), (2, 0, 1), (0, 1, 2))

Shape = tuple[int, int, int]
GridLike = int | Sequence[int]  # N for the cube N^3, or (nx, ny, nz)


def check_resolution(resolution: object, what: str = "grid") -> int:
    """Return one grid side as an int, or raise GridError saying what is allowed."""
    if isinstance(resolution, bool) or not isinstance(resolution, (int, np.integer)):
        raise GridError(f"{what} must be an integer, not {resolution!r}")
    n = int(resolution)
    if n < MIN_RESOLUTION or n % 4:
        raise GridError(f"{what} must be a multiple of 4 from {MIN_RESOLUTION} up, not {n}")
    if n > MAX_RESOLUTION:
        raise GridError(f"{what} {n} is larger than the supported maximum {MAX_RESOLUTION}")
    return n


def check_shape(grid: object) -> Shape:
    """(nx, ny, nz) from an int N (the cube N^3) or three ints, or GridError saying why not."""
    if isinstance(grid, (int, np.integer)) and not isinstance(grid, bool):
        n = check_resolution(grid)
        return (n, n, n)
    if isinstance(grid, np.ndarray):
        grid = grid.tolist() if grid.ndim == 1 else grid
    if isinstance(grid, (str, bytes)) or not isinstance(grid, Sequence):
        raise GridError(f"grid must be an integer N or three integers (nx, ny, nz), not {grid!r}")
    if len(grid) != 3:
        raise GridError(f"grid must have three sides (nx, ny, nz), not {len(grid)}: {grid!r}")
    nx, ny, nz = (check_resolution(side, f"grid side {axis}") for axis, side in zip(AXES, grid))
    return nx, ny, nz


def lattice_shift(shape: Sequence[int]) -> int:
    """Bits by which a grid of `shape` takes FIXED_BITS and FINE_BITS coarser: 0 up to
    FINE_LATTICE_MAX a side, LARGE_LATTICE_SHIFT above."""
    return 0 if max(int(n) for n in shape) <= FINE_LATTICE_MAX else LARGE_LATTICE_SHIFT


def fine_bits(shape: Sequence[int]) -> int:
    """The fine lattice's fractional bits for a grid of `shape` (FINE_BITS up to 8192)."""
    return FINE_BITS - lattice_shift(shape)


def fixed_bits(shape: Sequence[int]) -> int:
    """The fixed-point record's fractional bits for a grid of `shape` (FIXED_BITS up to 8192)."""
    return FIXED_BITS - lattice_shift(shape)


def shape_text(shape: Sequence[int]) -> str:
    """'512x256x128': how a shape is written on the command line and in summaries."""
    return "x".join(str(int(n)) for n in shape)


def check_bounds(bounds: object) -> np.ndarray:
    """float64 (2, 3) [[xmin, ymin, zmin], [xmax, ymax, zmax]], finite with min < max, or
    GridError."""
    try:
        box = np.array(bounds, dtype=np.float64)
    except (TypeError, ValueError):
        raise GridError(
            f"bounds must be numbers [[xmin, ymin, zmin], [xmax, ymax, zmax]], not {bounds!r}"
        ) from None
    if box.shape != (2, 3):
        raise GridError(
            f"bounds must have shape (2, 3) [[xmin, ymin, zmin], [xmax, ymax, zmax]], "
            f"not {box.shape}"
        )
    if not np.isfinite(box).all():
        raise GridError("bounds must be finite")
    for axis in range(3):
        if not box[0, axis] < box[1, axis]:
            raise GridError(
                f"bounds: {AXES[axis]}min {box[0, axis]:g} must be less than "
                f"{AXES[axis]}max {box[1, axis]:g}"
            )
    return box


def check_voxel_size(voxel_size: object) -> float:
    """h as a positive finite float, or GridError."""
    if isinstance(voxel_size, bool) or not isinstance(
        voxel_size, (int, float, np.integer, np.floating)
    ):
        raise GridError(f"voxel size must be a number, not {voxel_size!r}")
    h = float(voxel_size)
    if not (math.isfinite(h) and h > 0):
        raise GridError(f"voxel size must be positive and finite, not {h!r}")
    return h


@dataclass(frozen=True, eq=False)
class GridPlacement:
    """A grid of `shape` voxels of side `voxel_size` with its corner (0, 0, 0) at `origin`.

    `shape` may be given as an int N for the cube N^3; it is stored as (nx, ny, nz)."""

    shape: Shape  # voxels along x, y, z
    origin: np.ndarray  # world position of the grid's corner (0, 0, 0), float64 (3,)
    voxel_size: float  # h, world units

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", check_shape(self.shape))
        origin = np.array(self.origin, dtype=np.float64).reshape(3)
        object.__setattr__(self, "origin", origin)
        object.__setattr__(self, "voxel_size", float(self.voxel_size))

    @property
    def resolution(self) -> int:
        """The longest side, max(shape): the SVO's padded cube follows it."""
        return max(self.shape)

    @classmethod
    def fit(
        cls,
        mesh: Mesh,
        grid: GridLike | None = None,
        voxel_size: float | None = None,
        bounds: np.typing.ArrayLike | None = None,
    ) -> GridPlacement:
        """Place a grid around `bounds` (default: the mesh's box) with the shape `grid` (an
        int N for N^3, or (nx, ny, nz)) or the cube side `voxel_size`; neither: DEFAULT_GRID^3.
        Checks its arguments (GridError); `around` takes them checked."""
        if grid is not None and voxel_size is not None:
            raise GridError("give a grid or a voxel size, not both")
        return cls.around(
            mesh,
            None if grid is None else check_shape(grid),
            None if voxel_size is None else check_voxel_size(voxel_size),
            None if bounds is None else check_bounds(bounds),
        )

    @classmethod
    def around(
        cls,
        mesh: Mesh,
        shape: Shape | None,
        voxel_size: float | None,
        bounds: np.ndarray | None,
    ) -> GridPlacement:
        """`fit` for arguments already checked (voxelizer.Options): a shape or a voxel size
        (not both), and (2, 3) bounds or None."""
        if bounds is None:
            bmin, bmax = mesh.bounds
            box = "the mesh's box"
        else:
            bmin, bmax = bounds
            box = "the bounds"
            _check_inside(mesh, bmin, bmax)
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused below
            extent = bmax - bmin
            _check_finite_box(box, bmin, bmax, extent)
            if not (extent > 0).any():
                raise MeshError("the mesh has zero extent (all vertices are equal)")
            if voxel_size is None:
                shape = (DEFAULT_GRID,) * 3 if shape is None else shape
                sides = np.array(shape, np.float64)
                h = float((extent / sides).max())
                if not h > 0:  # an extent so small that h underflows
                    raise MeshError(
                        f"the mesh's extent {float(extent.max()):g} is too small for a grid"
                    )
                origin = (bmin + bmax) / 2.0 - sides * h / 2.0
            else:
                h = voxel_size
                shape = _shape_for(extent, h)
                sides = np.array(shape, np.float64)
                origin = bmin - (sides * h - extent) / 2.0
            _check_finite_grid(box, bmin, bmax, sides, origin, h)
        return cls(shape, origin, h)

    def grid_vertices(self, vertices: np.ndarray) -> np.ndarray:
        """float32 grid-space positions: the only input the voxelization decisions see."""
        return self._place(vertices, grid=True, fine=False)[0]

    def fine_vertices(self, vertices: np.ndarray) -> np.ndarray:
        """int64 fine grid-space positions: g = (v - origin) / h in float64, clipped to
        [0, n], rounded once to multiples of 2**-fine_bits(shape) (FINE_BITS up to 8192:
        within 2**-50 of g, exact from 8 up)."""
        return self._place(vertices, grid=False, fine=True)[1]

    def _place(
        self, vertices: np.ndarray, grid: bool, fine: bool, used: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """grid_vertices and/or fine_vertices (an empty array for the one not asked for),
        from one float64 g = (v - origin) / h per row chunk: both from the same steps, in
        one pass over the vertices. With both and `used` (bool (V,), the vertices some face
        refers to), also their fixed_gap over the used rows (else 0), while each chunk is
        at hand."""
        vertices = np.asarray(vertices, np.float64)
        grid_out = np.empty(vertices.shape if grid else (0, 3), np.float32)
        fine_out = np.empty(vertices.shape if fine else (0, 3), np.int64)
        top32 = np.array(self.shape, np.float32)
        top = np.array(self.shape, np.float64)
        gap = grid and fine and used is not None
        shift = lattice_shift(self.shape)

        def place(start: int, stop: int) -> int:
            with np.errstate(over="ignore", invalid="ignore"):
                g = vertices[start:stop] - self.origin
                g /= self.voxel_size
            if grid:
                # Referenced vertices stay in [0, n] (checked by `around`); only stray ones
                # may overflow, and they are never read.
                chunk = grid_out[start:stop]
                with np.errstate(over="ignore", invalid="ignore"):
                    chunk[...] = g  # the one rounding to float32
                np.maximum(chunk, np.float32(0), out=chunk)  # np.clip is several times slower
                np.minimum(chunk, top32, out=chunk)
            if fine:
                np.fmax(g, 0.0, out=g)  # fmax and fmin also turn NaN of stray vertices into 0
                np.fmin(g, top, out=g)
                g *= float(1 << (FINE_BITS - shift))  # exact
                fine_out[start:stop] = np.rint(g, out=g)
            if not gap:
                return 0
            assert used is not None
            mask = used[start:stop]
            rows = slice(start, stop) if mask.all() else np.flatnonzero(mask) + start
            return fixed_gap(grid_out[rows], fine_out[rows], shift)

        def place_blocks(start: int, stop: int) -> int:
            """place() a cache-sized block at a time: its dozen passes then read the cache,
            not memory (docs/benchmarks.md, "Figures behind the code")."""
            blocks = range(start, stop, PLACEMENT_BLOCK_ROWS)
            return max((place(a, min(a + PLACEMENT_BLOCK_ROWS, stop)) for a in blocks), default=0)

        gaps = map_row_chunks(len(vertices), place_blocks)
        return grid_out, fine_out, max(gaps)

    def placed_vertices(self, mesh: Mesh) -> tuple[np.ndarray, np.ndarray]:
        """(grid_vertices, fine_vertices) of the mesh's vertices, read-only, computed once per
        Mesh and placement (Mesh.placed): a repeated call costs nothing here."""
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
        return (self.shape, self.origin.tobytes(), self.voxel_size)

    def _placed(self, mesh: Mesh) -> tuple[np.ndarray, np.ndarray, int]:
        def place() -> tuple[np.ndarray, np.ndarray, int]:
            grid, fine, gap = self._place(mesh.vertices, grid=True, fine=True, used=mesh.used)
            grid.flags.writeable = fine.flags.writeable = False
            return grid, fine, gap

        return mesh.placed(self.cache_key(), place)

    def voxel_centres(self, indices: np.ndarray) -> np.ndarray:
        """World positions of the centres of voxels given as (M, 3) integer indices."""
        return self.origin + (np.asarray(indices, np.float64) + 0.5) * self.voxel_size


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


def _check_finite_box(box: str, bmin: np.ndarray, bmax: np.ndarray, extent: np.ndarray) -> None:
    """GridError unless the box's sides are finite (finite corners far apart overflow)."""
    for axis in range(3):
        if not math.isfinite(extent[axis]):
            raise GridError(
                f"{box} from {bmin[axis]:g} to {bmax[axis]:g} along {AXES[axis]} is too large: "
                f"its side overflows to {extent[axis]:g}"
            )


def _check_finite_grid(
    box: str, bmin: np.ndarray, bmax: np.ndarray, sides: np.ndarray, origin: np.ndarray, h: float
) -> None:
    """GridError naming the first value that overflowed: the voxel size, the grid's corners,
    or the box in grid space (the GPU's input). A grid that passes has every referenced
    vertex at a finite grid coordinate."""
    if not (math.isfinite(h) and h > 0):
        raise GridError(f"{box} gives a voxel size of {h:g}: it must be positive and finite")
    far = origin + sides * h
    low, high = (bmin - origin) / h, (bmax - origin) / h
    for axis in range(3):
        name = AXES[axis]
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


def _check_inside(mesh: Mesh, bmin: np.ndarray, bmax: np.ndarray) -> None:
    """GridError unless every referenced vertex lies in the closed box: the exactness proof
    needs every grid coordinate in [0, n], so the mesh cannot be cropped."""
    low, high = mesh.bounds
    for axis in range(3):
        with np.errstate(over="ignore"):  # boxes far apart: the distance is inf
            below, above = bmin[axis] - low[axis], high[axis] - bmax[axis]
        if below > 0 or above > 0:
            sides = [f"{d:g} {side}" for d, side in ((below, "below"), (above, "above")) if d > 0]
            raise GridError(
                f"the mesh reaches {' and '.join(sides)} the bounds along {AXES[axis]} "
                f"(mesh {AXES[axis]} from {low[axis]:g} to {high[axis]:g}, bounds from "
                f"{bmin[axis]:g} to {bmax[axis]:g}); bounds must contain the whole mesh "
                f"(cropping is not supported)"
            )


def _shape_for(extent: np.ndarray, h: float) -> Shape:
    """Sides that cover `extent` with voxels of size h: multiples of 4, at least 8."""
    with np.errstate(over="ignore"):
        need = np.ceil(extent / h)
    sides = [
        max(MIN_RESOLUTION, 4 * math.ceil(v / 4)) if math.isfinite(v) else v for v in need.tolist()
    ]
    if max(sides) > MAX_RESOLUTION:
        largest = max(range(3), key=lambda axis: sides[axis])
        if math.isfinite(sides[largest]) and sides[largest] > 1e6:  # no 300-digit numbers
            raise GridError(
                f"voxel size {h:g} is too small: it needs {need[largest]:.3g} voxels along "
                f"{AXES[largest]}; each side of the grid can be at most {MAX_RESOLUTION}"
            )
        if not all(math.isfinite(v) for v in sides):
            raise GridError(
                f"voxel size {h:g} is too small: each side of the grid can be at "
                f"most {MAX_RESOLUTION}"
            )
        raise GridError(
            f"voxel size {h:g} needs a {shape_text(sides)} grid; each side can be "
            f"at most {MAX_RESOLUTION}"
        )
    nx, ny, nz = (int(v) for v in sides)
    return nx, ny, nz


class Placed(ABC):
    """The protocol DenseGrid and SVO share, so that writers and callers take either: where
    the voxels sit, how many are solid, and the voxels as one bool (nx, ny, nz) array
    (`to_numpy()`, also what `np.asarray(result)` gives), or an attribute they carry as one
    array of the same shape (`to_numpy(attribute="face")`)."""

    placement: GridPlacement

    @abstractmethod
    def to_numpy(self, attribute: str | None = None) -> np.ndarray:
        """bool array of shape (nx, ny, nz), indexed [i, j, k] = [x, y, z]; with
        attribute="face", the int32 face ids (-1 where none)."""

    @property
    def attributes(self) -> tuple[str, ...]:
        """The per-voxel attributes carried: ("face",) with face ids, else ()."""
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
    def voxel_size(self) -> float:
        return self.placement.voxel_size

    # --- other libraries and notebooks (voxelizer.convert; files are voxelizer.io's) --------
    # voxelizer.convert and voxelizer.surface are imported where they are used: a
    # voxelization (the command's above all) needs neither.

    def to_mesh(self) -> trimesh.Trimesh:
        """The voxels' outer faces, closed and outward (see voxelizer.surface)."""
        from .surface import voxel_surface

        return voxel_surface(self.to_numpy(), self.placement.origin, self.voxel_size)

    def to_trimesh(self) -> trimesh.voxel.VoxelGrid:
        """The same voxels as a trimesh VoxelGrid; its transform maps index -> voxel centre."""
        import trimesh

        transform = np.eye(4)
        transform[:3, :3] *= self.voxel_size
        transform[:3, 3] = np.asarray(self.placement.origin, np.float64) + self.voxel_size / 2
        return trimesh.voxel.VoxelGrid(self.to_numpy(), transform=transform)

    def to_open3d(self) -> Any:
        """open3d.geometry.VoxelGrid of the solid voxels, with our origin and voxel size: its
        voxel (i, j, k) is ours and get_voxel_center_coordinate gives our centre."""
        from . import convert

        return convert.to_open3d(self.to_numpy(), self.placement.origin, self.voxel_size)

    def to_pyvista(self) -> Any:
        """pyvista.ImageData whose cell (i, j, k) is voxel (i, j, k): origin the grid corner,
        spacing h, dimensions shape + 1, cell data "solid" (uint8 0/1)."""
        from . import convert

        return convert.to_pyvista(self.to_numpy(), self.placement.origin, self.voxel_size)

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
            self.voxel_size,
            self.count(),
            self._repr_png_(),
        )
