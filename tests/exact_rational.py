"""An exact rational evaluation of the solid (parity) contract on float64 grid coordinates:
the oracle the near-tie suite checks the GPU and the CPU reference against.

Every float64 is a dyadic rational, so all coordinates are scaled by one common power of two
into Python integers and every decision below is exact: no rounding anywhere. Written apart
from voxelizer/reference/solid.py (plain loops, no shared code) so that the two can catch
each other.

The rule: along column (i, j), centre P = (i + 1/2, j + 1/2), each triangle with non-zero
projected area whose xy-projection covers P (edge functions > 0, or == 0 on a top-left edge of
the counter-clockwise projection) crosses at z*; voxel k is solid iff an odd number of crossings
have floor(z* + 1/2) <= k, i.e. lie strictly below the centre k + 1/2.
"""

from __future__ import annotations

import math

import numpy as np


def _scale_bits(values: np.ndarray) -> int:
    """The smallest s >= 1 with every value * 2**s an integer (values are float64)."""
    bits = 1
    for value in np.unique(np.abs(values)):
        denominator = float(value).as_integer_ratio()[1]
        bits = max(bits, denominator.bit_length() - 1)
    return bits


def exact_solid(vertices: np.ndarray, faces: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """bool[i, j, k] of the parity rule for float64 grid-space vertices, decided exactly."""
    g = np.asarray(vertices, np.float64).reshape(-1, 3)
    faces = np.asarray(faces, np.int64).reshape(-1, 3)
    nx, ny, nz = shape
    s = _scale_bits(g[np.unique(faces)])
    one = 1 << s
    scaled = [[int(math.ldexp(float(c), s)) for c in row] for row in g]  # exact: c * 2**s
    flips = np.zeros((nx, ny, nz + 1), np.uint8)
    for face in faces:
        a, b, c = (scaled[int(v)] for v in face)
        d = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
        if d == 0:
            continue
        if d < 0:
            b, c, d = c, b, -d
        edges = [(b, c), (c, a), (a, b)]  # opposite a, b, c: the barycentric weights
        ties = [(q[1] - p[1] < 0) or (q[1] == p[1] and q[0] - p[0] > 0) for p, q in edges]
        xs, ys = (a[0], b[0], c[0]), (a[1], b[1], c[1])
        # columns whose centres (2i + 1) * one / 2 lie in the bounding box
        i_lo = max(0, -((one - 2 * min(xs)) // (2 * one)))
        i_hi = min(nx - 1, (2 * max(xs) - one) // (2 * one))
        j_lo = max(0, -((one - 2 * min(ys)) // (2 * one)))
        j_hi = min(ny - 1, (2 * max(ys) - one) // (2 * one))
        for i in range(i_lo, i_hi + 1):
            px2 = (2 * i + 1) * one  # twice the centre's x, scaled
            for j in range(j_lo, j_hi + 1):
                py2 = (2 * j + 1) * one
                w = []
                for (p, q), tie in zip(edges, ties):
                    e = (q[0] - p[0]) * (py2 - 2 * p[1]) - (q[1] - p[1]) * (px2 - 2 * p[0])
                    if e < 0 or (e == 0 and not tie):
                        break
                    w.append(e)
                else:
                    # z* * one = sum(w_v * Z_v) / (2 d); kfirst = floor(z* + 1/2)
                    num = w[0] * a[2] + w[1] * b[2] + w[2] * c[2]
                    kfirst = (2 * num + 2 * d * one) // (4 * d * one)
                    flips[i, j, min(max(kfirst, 0), nz)] ^= 1
    return np.logical_xor.accumulate(flips[:, :, :nz].astype(bool), axis=2)
