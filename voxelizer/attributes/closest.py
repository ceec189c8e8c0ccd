"""The nearest point of a triangle to a point, as barycentric weights: where a surface
voxel's colour is read on its face (the point of the face nearest to the voxel's centre).

Ericson's region test (Real-Time Collision Detection, 5.1.5), vectorized: the point's
projection if it falls inside the triangle, else the nearest point of the nearest edge or
corner. float64 throughout; a degenerate triangle (no area) gives its nearest corner's or
edge's weights, never NaN.
"""

from __future__ import annotations

import numpy as np


def _dot(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", u, v)


def closest_weights(points: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """(N, 3) barycentric weights (of a, b and c, summing to 1, each in [0, 1]) of the
    point of each triangle (a[i], b[i], c[i]) nearest to points[i]; all (N, 3) float64."""
    ab, ac, ap = b - a, c - a, points - a
    d1, d2 = _dot(ab, ap), _dot(ac, ap)
    bp = points - b
    d3, d4 = _dot(ab, bp), _dot(ac, bp)
    cp = points - c
    d5, d6 = _dot(ab, cp), _dot(ac, cp)
    va = d3 * d6 - d5 * d4
    vb = d5 * d2 - d1 * d6
    vc = d1 * d4 - d3 * d2
    count = len(points)
    weights = np.empty((count, 3))
    with np.errstate(divide="ignore", invalid="ignore"):
        total = va + vb + vc
        v, w = vb / total, vc / total  # inside the triangle: the projection
        weights[:] = np.stack([1.0 - v - w, v, w], axis=1)
        # The regions outside, each overriding the ones before (Ericson's order reversed).
        edge_bc = (va <= 0) & (d4 - d3 >= 0) & (d5 - d6 >= 0)
        t = (d4 - d3) / ((d4 - d3) + (d5 - d6))
        _set(weights, edge_bc, 0.0, 1.0 - t, t)
        edge_ac = (vb <= 0) & (d2 >= 0) & (d6 <= 0)
        t = d2 / (d2 - d6)
        _set(weights, edge_ac, 1.0 - t, 0.0, t)
        corner_c = (d6 >= 0) & (d5 <= d6)
        _set(weights, corner_c, 0.0, 0.0, 1.0)
        edge_ab = (vc <= 0) & (d1 >= 0) & (d3 <= 0)
        t = d1 / (d1 - d3)
        _set(weights, edge_ab, 1.0 - t, t, 0.0)
        corner_b = (d3 >= 0) & (d4 <= d3)
        _set(weights, corner_b, 0.0, 1.0, 0.0)
        corner_a = (d1 <= 0) & (d2 <= 0)
        _set(weights, corner_a, 1.0, 0.0, 0.0)
    bad = ~np.isfinite(weights).all(axis=1)  # a degenerate triangle fell through: corner a
    weights[bad] = (1.0, 0.0, 0.0)
    np.clip(weights, 0.0, 1.0, out=weights)
    return weights


def _set(
    weights: np.ndarray,
    rows: np.ndarray,
    wa: float | np.ndarray,
    wb: float | np.ndarray,
    wc: float | np.ndarray,
) -> None:
    """weights[rows] = (wa, wb, wc), each a number or an (N,) array picked at rows."""
    if not rows.any():
        return
    columns = [np.broadcast_to(w, rows.shape)[rows] for w in (wa, wb, wc)]
    weights[rows] = np.stack(columns, axis=1)
