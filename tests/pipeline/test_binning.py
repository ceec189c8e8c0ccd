"""The pairs binned on the GPU are exactly those of the binning rule (shaders/tiles.glsl),
evaluated here column by column on the fixed-point corners: a (tile, triangle) pair for each
tile holding a column of the triangle's rectangle that the triangle covers (fixed_error 0) or
that is not surely outside by the triangle's margins (else), for every variant."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from voxelizer import VARIANTS, Voxelizer
from voxelizer.gpu.kernels import TILE_SHIFT
from voxelizer.mesh import Mesh, checked_mesh
from voxelizer.pipeline.geometry import fixed_error
from voxelizer.placement import FIXED_BITS

from ..helpers import load_model, random_soup


def edge(a: np.ndarray, b: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Edge functions of a->b at points p (int64, the bounds of shaders/exact.glsl)."""
    return (b[..., 0] - a[..., 0]) * (p[..., 1] - a[..., 1]) - (b[..., 1] - a[..., 1]) * (
        p[..., 0] - a[..., 0]
    )


def top_left(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d = b - a
    return (d[..., 1] < 0) | ((d[..., 1] == 0) & (d[..., 0] > 0))


def expected_pairs(fixed: np.ndarray, n: int, delta: int) -> int:
    """The pair count of the rule, for fixed-point corners (T, 3, 3) on an n^2 window."""
    a, b, c = (fixed[:, k, :2].astype(np.int64) for k in range(3))
    area = edge(a, b, c)
    flip = area < 0
    b, c = np.where(flip[:, None], c, b), np.where(flip[:, None], b, c)
    half, one = 1 << (FIXED_BITS - 1), 1 << FIXED_BITS
    low = np.minimum(np.minimum(a, b), c) - half - delta
    high = np.maximum(np.maximum(a, b), c) - half + delta
    lo = np.maximum(-(-low // one), 0)
    hi = np.minimum(high // one, n - 1)
    active = ((area != 0) | (delta != 0)) & np.all(lo <= hi, axis=1)
    shift = int(delta - 1).bit_length() if delta else 0
    box = np.maximum(np.maximum(a, b), c) - np.minimum(np.minimum(a, b), c)
    reach = 2 * (box.sum(axis=1) + 2 * delta) + (4 << shift)

    def margin(p: np.ndarray, q: np.ndarray) -> np.ndarray:
        return (np.abs(q - p).sum(axis=1) + reach) << shift

    margins = np.stack([margin(b, c), margin(c, a), margin(a, b)], axis=1)
    biases = np.stack([top_left(b, c), top_left(c, a), top_left(a, b)], axis=1)
    tiles: set[tuple[int, int, int]] = set()
    side = (hi - lo + 1).max(initial=0)
    for dy in range(side):
        for dx in range(side):
            column = lo + np.array([dx, dy])
            inside = active & np.all(column <= hi, axis=1)
            centre = column * one + half
            w = np.stack([edge(b, c, centre), edge(c, a, centre), edge(a, b, centre)], axis=1)
            if delta == 0:
                binned = np.all(w + biases > 0, axis=1)
            else:
                some_out = np.any(w < -margins, axis=1)
                some_in = np.any(w > margins, axis=1)
                binned = ~(some_out & (some_in | (w.sum(axis=1) > margins.sum(axis=1))))
            for t in np.flatnonzero(inside & binned):
                x, y = column[t] >> TILE_SHIFT
                tiles.add((int(t), int(x), int(y)))
    return len(tiles)


def binned_and_expected(gpu: Voxelizer, mesh: Mesh, n: int, variant: str) -> tuple[int, int, int]:
    """(GPU pairs, the rule's pairs, fixed_error) with grid space = world space."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # open soups: the column counts warn
        result = gpu.voxelize_dense(mesh, n, bounds=[[0, 0, 0], [n, n, n]], variant=variant)
    vertices, fine = result.placement.placed_vertices(mesh)
    delta = fixed_error(vertices, fine, mesh.used)
    fixed = np.rint(vertices[mesh.faces] * np.float32(1 << FIXED_BITS)).astype(np.int64)
    return result.stats.counts["pairs"], expected_pairs(fixed, n, delta), delta


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_random_soups_bin_by_the_rule(gpu, variant):
    """Large, overlapping and degenerate triangles (zero projected area too), with vertices on
    column centres and edges (fixed_error 0) or anywhere (fixed_error > 0)."""
    rng = np.random.default_rng(18)
    deltas = set()
    for trial in range(12):
        n = int(rng.choice([16, 24, 32]))
        step = (None, 2, 4)[trial % 3]
        g, faces = random_soup(rng, n, int(rng.integers(4, 30)), int(rng.integers(2, 40)), step)
        if trial % 4 == 0:  # walls: triangles standing on one xy edge (no projected area)
            faces[::2, 2] = faces[::2, 1]
            g[faces[::2, 2], :2] = g[faces[::2, 0], :2]
        if np.all(g[faces].max(axis=(0, 1)) == g[faces].min(axis=(0, 1))):
            continue
        mesh = checked_mesh(g.astype(np.float64), faces, "soup")
        got, expected, delta = binned_and_expected(gpu, mesh, n, variant)
        assert got == expected, (trial, delta)
        deltas.add(delta == 0)
    assert deltas == {True, False}  # both rules were compared


@pytest.mark.parametrize("variant", ["branchless", "naive"])
def test_models_bin_by_the_rule(gpu, variant):
    mesh = load_model("bunny.ply")
    lo, hi = mesh.vertices.min(axis=0), mesh.vertices.max(axis=0)
    n = 48
    placed = checked_mesh((mesh.vertices - lo) / (hi - lo).max() * (n - 1) + 0.3, mesh.faces, "b")
    got, expected, delta = binned_and_expected(gpu, placed, n, variant)
    assert delta > 0 and got == expected


def test_needle_binned_only_by_the_either_side_test(gpu):
    """A needle (its third corner 3 fixed-point units off the line of the others) whose
    column (6, 7) is binned only because no edge function there exceeds its margin: one is
    below its margin, and D is within the sum of the margins (fixed_error 1, from a z off the
    fixed-point lattice). Found by a search over such needles; both orientations."""
    unit = 2.0**-FIXED_BITS
    xy = np.array([[715415, 233793], [101039, 780857], [331430, 575708]]) * unit
    corners = np.column_stack([xy, [2.0000001, 9.0, 14.0]])
    g = np.concatenate([corners, corners[::-1]])
    mesh = checked_mesh(g, np.arange(6).reshape(2, 3), "needle")
    for variant in VARIANTS:
        got, expected, delta = binned_and_expected(gpu, mesh, 16, variant)
        assert delta == 1 and got == expected, variant
