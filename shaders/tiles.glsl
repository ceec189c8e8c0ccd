// Which tiles a triangle really touches: shared by triangle setup (counting) and pair
// emission (writing), so both passes agree on every pair.

// Bit c of the result is set iff column c of the tile (c = x + TILE_SIDE * y within the tile)
// lies inside the column rectangle [lo, hi] and its centre is covered by the triangle.
uint tile_coverage(ivec3 a, ivec3 b, ivec3 c, ivec2 tile, ivec2 lo, ivec2 hi) {
    uint mask = 0u;
    ivec2 first = max(tile << TILE_SHIFT, lo);
    ivec2 last = min((tile << TILE_SHIFT) + (TILE_SIDE - 1), hi);
    for (int j = first.y; j <= last.y; ++j) {
        for (int i = first.x; i <= last.x; ++i) {
            Coverage w = cover(a, b, c, ivec2(i, j));
            uint bit = uint((i & (TILE_SIDE - 1)) + TILE_SIDE * (j & (TILE_SIDE - 1)));
#if BRANCHLESS
            mask |= uint(w.covered) << bit;
#else
            if (w.covered) mask |= 1u << bit;
#endif
        }
    }
    return mask;
}
