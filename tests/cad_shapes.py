"""CAD-style near-tie meshes in grid space: boxes, trays and wedges whose faces lie on voxel
centre planes, or within 1e-6 / 1e-7 voxel above or below them, vertices on column centres,
diagonals through column centres, near 0 and near the top of grids up to 8192.

Each case is placed with voxel size 1 and bounds [0, shape], so the float64 grid coordinates
are the vertices as written here (no placement rounding).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from .shapes import Shape, box

OFFSETS = (0.0, 1e-6, -1e-6, 1e-7, -1e-7)


class Case(NamedTuple):
    name: str
    vertices: np.ndarray  # float64 grid space
    faces: np.ndarray
    shape: tuple[int, int, int]


def tray(lo, hi, pocket_lo, pocket_hi) -> Shape:
    """A closed tray: the box [lo, hi] with the pocket [pocket_lo, pocket_hi] (its top at
    hi[2]) cut into its top; 16 vertices, 32 outward triangles."""
    x0, y0, z0 = lo
    x1, y1, z1 = hi
    px0, py0, pz = pocket_lo[0], pocket_lo[1], pocket_lo[2]
    px1, py1 = pocket_hi[0], pocket_hi[1]
    outer = [(x0, y0), (x1, y0), (x1, y1), (x0, y1)]  # counter-clockwise from above
    inner = [(px0, py0), (px1, py0), (px1, py1), (px0, py1)]
    v = [(x, y, z0) for x, y in outer] + [(x, y, z1) for x, y in outer]  # 0-3, 4-7
    v += [(x, y, z1) for x, y in inner] + [(x, y, pz) for x, y in inner]  # 8-11, 12-15
    quads = [(0, 3, 2, 1)]  # bottom, facing down
    for q in range(4):
        r = (q + 1) % 4
        quads.append((q, r, 4 + r, 4 + q))  # outer wall
        quads.append((4 + q, 4 + r, 8 + r, 8 + q))  # rim
        quads.append((8 + q, 8 + r, 12 + r, 12 + q))  # pocket wall, facing in
    quads.append((12, 13, 14, 15))  # pocket floor, facing up
    faces = [(a, b, c) for a, b, c, _ in quads] + [(a, c, d) for a, _, c, d in quads]
    return np.array(v, np.float64), np.array(faces, np.int64)


def wedge(lo, hi) -> Shape:
    """A triangular prism over the xy-triangle (lo, (hi_x, lo_y), hi) from lo_z to hi_z: its
    sloped wall holds the diagonal of its bounding box."""
    x0, y0, z0 = lo
    x1, y1, z1 = hi
    v = np.array(
        [(x0, y0, z0), (x1, y0, z0), (x1, y1, z0), (x0, y0, z1), (x1, y0, z1), (x1, y1, z1)],
        np.float64,
    )
    f = np.array(
        [[0, 2, 1], [3, 4, 5], [0, 1, 4], [0, 4, 3], [1, 2, 5], [1, 5, 4], [2, 0, 3], [2, 3, 5]]
    )
    return v, f


def cases(sizes: tuple[int, ...] = (8, 64, 8192)) -> Iterator[Case]:
    """The near-tie suite: for each offset e, faces at centre planes c + e, on small and large
    grids, near 0 and near the top (non-cubic grids keep the large ones cheap)."""
    for e in OFFSETS:
        tag = f"{e:+.0e}" if e else "0"
        for n in sizes:
            shape = (n, 8, 8) if n > 64 else (n, n, n)
            top = n - 0.5  # the last column / voxel centre along x
            if n <= 64:
                lo, hi = (0.5 + e, 0.5 + e, 0.5 + e), (n - 1.5 - e, n - 2.5 + e, n - 0.5 - e)
                yield Case(f"box_near_0_{n}_{tag}", *box(lo, hi), shape)
                yield Case(
                    f"tray_{n}_{tag}",
                    *tray(
                        (0.5, 0.5, 0.5),
                        (n - 0.5, n - 0.5, n - 1.5 + e),
                        (2.5 + e, 1.5 - e, 2.5 + e),
                        (n - 2.5 - e, n - 3.5 + e),
                    ),
                    shape,
                )
                yield Case(
                    f"wedge_{n}_{tag}",
                    *wedge((1.5, 0.5 + e, 1.5 + e), (n - 2.5, n - 1.5 - e, n - 1.5)),
                    shape,
                )
            else:
                lo, hi = (top - 40 + e, 1.5 + e, 0.5 - e), (top - e, 6.5 - e, 7.5 + e)
                yield Case(f"box_near_top_x{n}_{tag}", *box(lo, hi), shape)
                tall = (8, 8, n)
                lo, hi = (1.5 + e, 0.5, top - 50 + e), (6.5, 7.5 - e, top - e)
                yield Case(f"box_near_top_z{n}_{tag}", *box(lo, hi), tall)
                yield Case(
                    f"wedge_top_z{n}_{tag}",
                    *wedge((0.5 + e, 0.5, top - 30 - e), (7.5, 7.5 - e, top + e)),
                    tall,
                )
