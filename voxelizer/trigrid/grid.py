"""TriangleGrid: a uniform grid (or a two-level grid) of triangle references, its queries and
its arrays.

Cell (i, j, k) is the closed box origin + [(i, j, k), (i + 1, j + 1, k + 1)] * cell_size; it
lists every triangle that touches it, exactly: the closed triangle on the grid's fixed-point
corners (grid-space coordinates rounded to 2^-16 of a cell, placement.py) meets the closed
box (the conservative surface's 13-axis test). So a triangle on a face, edge or corner of
cells is listed in every cell that shares it. The lists are CSR arrays: cells in C order of
(i, j, k), `offsets` (cells + 1), and `triangle_ids` (int32 indices into the faces), in no
particular order within a cell (`triangles_in` sorts them).

A two-level grid (levels=2) is a uniform top grid whose every cell (i, j, k) is cut into
`leaf_resolution[i, j, k]` leaves along each axis (none for an empty cell), listed the same
way from `leaf_start[i, j, k]` on, in C order within the cell: `leaf_offsets` and
`leaf_triangle_ids`.

The queries run on the GPU (queries.py) and mean the triangles on the same corners, which
float32 holds exactly (X / 2^16 with X = roundEven(g * 2^16): below 2^24 any integer, above
it g * 2^16 itself, g being a float32), in grid space: a ray's t is the same as in world
space, and its hits are those traverse.comp decides (first hit, any hit; watertight).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing

from ..errors import VoxelizerError
from ..placement import FIXED_BITS
from ..stats import Stats
from . import queries
from .build import DeviceGrid
from .placement import CellPlacement, Shape

ONE = 1 << FIXED_BITS
# The keys of to_numpy() (and of the .npz file): every grid's, then a two-level grid's.
GRID_KEYS = ("shape", "origin", "cell_size", "levels", "corners", "offsets", "triangle_ids")
LEAF_KEYS = ("leaf_resolution", "leaf_start", "leaf_offsets", "leaf_triangle_ids")


class TriangleGrid:
    """The triangles of a mesh listed by the cells of a grid, built on the GPU
    (voxelizer.triangle_grid), with ray and box queries on the GPU."""

    def __init__(
        self,
        placement: CellPlacement,
        levels: int,
        *,
        device: DeviceGrid | None = None,
        arrays: dict[str, np.ndarray] | None = None,
        stats: Stats | None = None,
        uploader: Callable[[], DeviceGrid] | None = None,
    ):
        if device is None and arrays is None:
            raise ValueError("a TriangleGrid needs its device buffers or its arrays")
        self.placement = placement
        self.levels = levels
        self.stats = stats if stats is not None else Stats(shape=placement.shape)
        self._device: DeviceGrid | None = None
        self._freed: weakref.finalize | None = None
        self._arrays = arrays
        self._uploader = uploader  # makes the device buffers of a grid read from a file
        if device is not None:
            self._hold(device)

    def _hold(self, device: DeviceGrid) -> None:
        """Keep `device`, freed with this grid (by close, or when it is collected)."""
        self._device = device
        self._freed = weakref.finalize(self, device.destroy)

    # -- the placement ---------------------------------------------------------------------

    @property
    def shape(self) -> Shape:
        return self.placement.shape

    @property
    def origin(self) -> np.ndarray:
        return self.placement.origin

    @property
    def cell_size(self) -> np.ndarray:
        return self.placement.cell_size

    @property
    def triangle_count(self) -> int:
        if self._device is not None:
            return self._device.triangles
        return len(self._host()["corners"])

    @property
    def reference_count(self) -> int:
        """Triangle references in the (top level's) cells."""
        if self._device is not None:
            return self._device.references
        return len(self._host()["triangle_ids"])

    # -- the arrays --------------------------------------------------------------------------

    def _host(self) -> dict[str, np.ndarray]:
        if self._arrays is None:
            if self._device is None:
                raise VoxelizerError("this triangle grid is closed")
            self._arrays = queries.download(self._device.engine, self._device)
            for array in self._arrays.values():
                array.flags.writeable = False
        return self._arrays

    @property
    def offsets(self) -> np.ndarray:
        """int64 (cells + 1): cell c = (i * ny + j) * nz + k lists triangle_ids[offsets[c]:
        offsets[c + 1]]."""
        return self._host()["offsets"]

    @property
    def triangle_ids(self) -> np.ndarray:
        """int32 (references,): the cells' triangles, cell after cell."""
        return self._host()["triangle_ids"]

    @property
    def cell_start(self) -> np.ndarray:
        """int64 (nx, ny, nz): where each cell's triangles start in triangle_ids."""
        return self.offsets[:-1].reshape(self.shape)

    @property
    def cell_count(self) -> np.ndarray:
        """int32 (nx, ny, nz): how many triangles each cell lists."""
        return np.diff(self.offsets).astype(np.int32).reshape(self.shape)

    @property
    def corners(self) -> np.ndarray:
        """int32 (T, 3, 3): each triangle's corners in fixed point (grid units times 2^16),
        as the faces list them: the triangles every decision is exact for."""
        return self._host()["corners"]

    def triangles_in(self, i: int, j: int, k: int) -> np.ndarray:
        """int32, increasing: the triangles that touch cell (i, j, k)."""
        cell = self._cell_key(i, j, k)
        return np.sort(self.triangle_ids[self.offsets[cell] : self.offsets[cell + 1]])

    def leaves_in(self, i: int, j: int, k: int) -> list[np.ndarray]:
        """A two-level grid's leaves of top cell (i, j, k), in C order: each leaf's
        triangles (int32, increasing)."""
        if self.levels != 2:
            raise ValueError("leaves_in is for two-level grids (levels=2)")
        host = self._host()
        cell = self._cell_key(i, j, k)
        first = int(host["leaf_start"][cell])
        count = int(np.prod(host["resolutions"][cell]))
        offsets, ids = host["leaf_offsets"], host["leaf_triangle_ids"]
        return [
            np.sort(ids[offsets[leaf] : offsets[leaf + 1]]) for leaf in range(first, first + count)
        ]

    def _cell_key(self, i: int, j: int, k: int) -> int:
        index = (int(i), int(j), int(k))
        if not all(0 <= n < size for n, size in zip(index, self.shape)):
            raise IndexError(f"cell {index} is outside the grid of {self.shape} cells")
        return int(np.ravel_multi_index(index, self.shape))

    def to_numpy(self) -> dict[str, np.ndarray]:
        """The grid as arrays (GRID_KEYS, and LEAF_KEYS for two levels): shape, origin,
        cell_size, levels, corners, offsets and triangle_ids; the leaves' resolution (int32
        (nx, ny, nz, 3)), first leaf (int64 (nx, ny, nz)), offsets and triangle ids."""
        host = self._host()
        arrays = {
            "shape": np.array(self.shape, np.int64),
            "origin": self.origin.copy(),
            "cell_size": self.cell_size.copy(),
            "levels": np.int64(self.levels),
            "corners": host["corners"],
            "offsets": host["offsets"],
            "triangle_ids": host["triangle_ids"],
        }
        if self.levels == 2:
            arrays.update(
                leaf_resolution=host["resolutions"].reshape(*self.shape, 3),
                leaf_start=host["leaf_start"].reshape(self.shape),
                leaf_offsets=host["leaf_offsets"],
                leaf_triangle_ids=host["leaf_triangle_ids"],
            )
        return arrays

    def to_torch(self, device: Any = None) -> dict[str, Any]:
        """to_numpy()'s arrays as torch tensors on `device` (default the CPU); needs torch
        (pip install torch)."""
        from ..convert import optional_module  # (on use: `import voxelizer` stays light)

        torch = optional_module("torch", "TriangleGrid.to_torch()")
        return {
            name: torch.as_tensor(np.array(array), device=device)
            for name, array in self.to_numpy().items()
        }

    @property
    def nbytes(self) -> int:
        """Host bytes of the arrays (those of to_numpy)."""
        return sum(array.nbytes for array in self.to_numpy().values())

    @property
    def device_bytes(self) -> int:
        """Device bytes of the structure while it is on the device (0 once closed)."""
        return self._device.nbytes if self._device is not None else 0

    # -- the queries -------------------------------------------------------------------------

    @property
    def device_grid(self) -> DeviceGrid:
        """The device buffers (uploaded first for a grid read from a file)."""
        return self._on_device()

    def _on_device(self) -> DeviceGrid:
        if self._device is None:
            if self._uploader is None:
                raise VoxelizerError("this triangle grid is closed")
            self._hold(self._uploader())
        assert self._device is not None
        return self._device

    def intersect(
        self,
        origins: numpy.typing.ArrayLike,
        directions: numpy.typing.ArrayLike,
        *,
        t_min: float = 0.0,
        t_max: float = float("inf"),
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The first hit of each ray origin + t * direction with t_min <= t <= t_max (world
        units; directions need not be unit vectors): (t float32 (R,), +inf for a miss;
        triangle int32 (R,), -1 for a miss; uv float32 (R, 2), the hit's barycentrics:
        (1 - u - v) A + u B + v C for the face's corners A, B, C). Ties in t go to the
        lower triangle index."""
        hits = self._trace(origins, directions, t_min, t_max, any_hit=False)
        return hits["t"], hits["triangle"], np.stack([hits["u"], hits["v"]], axis=1)

    def any_hit(
        self,
        origins: numpy.typing.ArrayLike,
        directions: numpy.typing.ArrayLike,
        *,
        t_min: float = 0.0,
        t_max: float = float("inf"),
    ) -> np.ndarray:
        """bool (R,): whether each ray hits any triangle with t_min <= t <= t_max (occlusion:
        each ray stops at the first hit it finds)."""
        return self._trace(origins, directions, t_min, t_max, any_hit=True)["triangle"] >= 0

    def _trace(
        self,
        origins: numpy.typing.ArrayLike,
        directions: numpy.typing.ArrayLike,
        t_min: float,
        t_max: float,
        any_hit: bool,
    ) -> np.ndarray:
        o, d = _rays(origins, directions)
        if not (t_min <= t_max) or np.isnan(t_min) or np.isnan(t_max):
            raise ValueError(f"need t_min <= t_max, not {t_min} and {t_max}")
        o_grid, d_grid = self.placement.grid_points(o), self.placement.grid_directions(d)
        device = self._on_device()
        hits = queries.trace(
            device.engine, device, o_grid, d_grid, t_min=t_min, t_max=t_max, any_hit=any_hit
        )
        left = np.flatnonzero(hits["triangle"] == queries.UNFINISHED)
        if len(left):  # rays llvmpipe's loop budget stopped: the same arithmetic on the CPU
            from .reference import reference_trace  # (rare: `import voxelizer` stays light)

            hits[left] = reference_trace(
                self.corners, o_grid[left], d_grid[left], t_min, t_max, any_hit
            )
        return hits

    def triangles_in_box(
        self, lo: numpy.typing.ArrayLike, hi: numpy.typing.ArrayLike
    ) -> np.ndarray:
        """int32, increasing: the triangles that touch the closed box [lo, hi] (world
        coordinates, lo <= hi), exactly, with the box's corners rounded to the grid's
        fixed point as the vertices are."""
        lo_fixed, hi_fixed = self.fixed_box(lo, hi)
        if (lo_fixed > hi_fixed).any():
            return np.zeros(0, np.int32)
        device = self._on_device()
        return queries.triangles_in_box(device.engine, device, lo_fixed, hi_fixed)

    def fixed_box(
        self, lo: numpy.typing.ArrayLike, hi: numpy.typing.ArrayLike
    ) -> tuple[np.ndarray, np.ndarray]:
        """The box [lo, hi] (world) in fixed point, clipped to the grid (int64 (3,) each; lo
        above hi on some axis where the box misses the grid)."""
        low = np.asarray(lo, np.float64).reshape(-1)
        high = np.asarray(hi, np.float64).reshape(-1)
        if low.shape != (3,) or high.shape != (3,) or not np.isfinite([low, high]).all():
            raise ValueError("lo and hi must be three finite numbers each")
        if (low > high).any():
            raise ValueError(f"lo {low.tolist()} must not exceed hi {high.tolist()}")
        limit = np.array(self.shape, np.int64) * ONE
        box = []
        for corner in (low, high):
            g = self.placement.grid_points(corner[None])[0].astype(np.float64)
            fixed = np.rint(np.clip(g, -1.0, limit / ONE + 1.0) * ONE).astype(np.int64)
            box.append(fixed)
        return np.maximum(box[0], 0), np.minimum(box[1], limit)

    # -- lifetime ----------------------------------------------------------------------------

    def close(self) -> None:
        """Free the device buffers; the arrays stay readable if they were read before."""
        self._device, self._uploader = None, None
        if self._freed is not None:
            self._freed()

    def __enter__(self) -> TriangleGrid:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        levels = "" if self.levels == 1 else ", levels=2"
        return (
            f"TriangleGrid(shape={self.shape}, triangles={self.triangle_count:,}, "
            f"references={self.reference_count:,}{levels})"
        )


def _rays(
    origins: numpy.typing.ArrayLike, directions: numpy.typing.ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    o = np.asarray(origins, np.float64)
    d = np.asarray(directions, np.float64)
    if o.ndim == 1:
        o = o[None]
    if d.ndim == 1:
        d = d[None]
    o, d = np.broadcast_arrays(o, d)
    if o.ndim != 2 or o.shape[1] != 3:
        raise ValueError(f"origins and directions must be (R, 3) arrays, not {o.shape}")
    if not (np.isfinite(o).all() and np.isfinite(d).all()):
        raise ValueError("origins and directions must be finite")
    return o, d
