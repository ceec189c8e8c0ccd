// Which columns and tiles a triangle touches, for surface voxelization (conservative
// binning, shaders/setup.comp and emit.comp with CONSERVATIVE 1, and shaders/surface.comp).
//
// A column (i, j) is the closed square [i, i + 1] x [j, j + 1] of the xy-plane (fixed point:
// times 2^FIXED_BITS); a tile is the closed square of its TILE_SIDE x TILE_SIDE columns, the
// union of theirs. "Touches" means the closed triangle's xy-projection (a segment or a point
// when the projection is degenerate) shares at least one point with the closed square: a
// triangle whose edge runs along the line x = i touches both columns i - 1 and i. Every
// decision is exact: the separating-axis test in 2-D (the square's two axes and the normal
// of each projected edge) on int64 values below 2^60 (coordinates in [0, 2^29]).

// int64_t(v), sign-extended through a bit cast: lavapipe (Mesa 22.3, LLVM 15) gets
// comparisons and float conversions of a plain int64_t(int) wrong for negative values (they
// act as if zero-extended), so every widening that may reach one goes through here.
int64_t to_int64(int v) {
    return packInt2x32(ivec2(v, v >> 31));
}

// a * b, exact: one signed 32 x 32 -> 64 multiplication (no widening of the factors first).
int64_t mul_wide(int a, int b) {
    int high, low;
    imulExtended(a, b, high, low);
    return packInt2x32(ivec2(low, high));
}

// True iff the projection of the closed triangle onto the normal of edge p->q (r the third
// corner) overlaps that of the square [lo, lo + side]^2. A zero edge gives no axis (true).
bool edge_axis_overlaps(ivec2 p, ivec2 q, ivec2 r, ivec2 lo, int side) {
    int lx = p.y - q.y, ly = q.x - p.x;
    int64_t third = mul_wide(lx, r.x - p.x) + mul_wide(ly, r.y - p.y);
    int64_t base = mul_wide(lx, lo.x - p.x) + mul_wide(ly, lo.y - p.y);
    int64_t square_min = base + mul_wide(side, min(lx, 0) + min(ly, 0));
    int64_t square_max = base + mul_wide(side, max(lx, 0) + max(ly, 0));
    return square_min <= max(third, 0l) && square_max >= min(third, 0l);
}

// True iff the closed triangle's xy-projection touches the closed square [lo, lo + side]^2.
bool square_touched(ivec3 a, ivec3 b, ivec3 c, ivec2 lo, int side) {
    ivec2 low = min(min(a.xy, b.xy), c.xy), high = max(max(a.xy, b.xy), c.xy);
    bool boxes = all(lessThanEqual(low, lo + side)) && all(greaterThanEqual(high, lo));
#if BRANCHLESS
    return (int(boxes) & int(edge_axis_overlaps(a.xy, b.xy, c.xy, lo, side))
            & int(edge_axis_overlaps(b.xy, c.xy, a.xy, lo, side))
            & int(edge_axis_overlaps(c.xy, a.xy, b.xy, lo, side))) != 0;
#else
    return boxes && edge_axis_overlaps(a.xy, b.xy, c.xy, lo, side)
           && edge_axis_overlaps(b.xy, c.xy, a.xy, lo, side)
           && edge_axis_overlaps(c.xy, a.xy, b.xy, lo, side);
#endif
}

bool tile_touched(ivec3 a, ivec3 b, ivec3 c, ivec2 tile) {
    return square_touched(a, b, c, tile << (TILE_SHIFT + FIXED_BITS), TILE_SIDE << FIXED_BITS);
}

// Columns (i, j) whose closed squares the triangle's xy bounding box touches, clamped to
// [first, last]: i from ceil(x_min) - 1 to floor(x_max), in grid units.
void touched_rectangle(ivec3 a, ivec3 b, ivec3 c, ivec2 first, ivec2 last,
                       out ivec2 lo, out ivec2 hi) {
    const int one = 1 << FIXED_BITS;
    ivec2 low = min(min(a.xy, b.xy), c.xy), high = max(max(a.xy, b.xy), c.xy);
    lo = max(((low + (one - 1)) >> FIXED_BITS) - 1, first);
    hi = min(high >> FIXED_BITS, last);
}

// Widens [x_min, x_max] by the x-extent of segment p-q within the band y0 <= y <= y1 (fixed
// point). The division truncates, so each end is within one unit of the exact point.
void band_span(ivec2 p, ivec2 q, int y0, int y1, inout int x_min, inout int x_max) {
    int low = max(min(p.y, q.y), y0), high = min(max(p.y, q.y), y1);
    if (low > high) return;
    if (p.y == q.y) {
        x_min = min(x_min, min(p.x, q.x));
        x_max = max(x_max, max(p.x, q.x));
        return;
    }
    int64_t dx = to_int64(q.x - p.x), dy = to_int64(q.y - p.y);
    int x_low = p.x + int(dx * to_int64(low - p.y) / dy);
    int x_high = p.x + int(dx * to_int64(high - p.y) / dy);
    x_min = min(x_min, min(x_low, x_high));
    x_max = max(x_max, max(x_low, x_high));
}

// Tile columns [x, y] of tile row ty that the triangle may touch inside the column rectangle
// [lo, hi]: the triangle's x-extent within the row's closed band of y, widened by one column
// for the truncation (tile_touched decides exactly). Empty when x > y. Like candidate_tiles
// (tiles.glsl), it keeps the tile loops near one iteration per pair (llvmpipe's loop guard).
ivec2 touched_tile_span(ivec3 a, ivec3 b, ivec3 c, int ty, ivec2 lo, ivec2 hi) {
    int y0 = max(ty << TILE_SHIFT, lo.y) << FIXED_BITS;
    int y1 = (min((ty << TILE_SHIFT) + TILE_SIDE - 1, hi.y) + 1) << FIXED_BITS;
    int x_min = 0x7FFFFFFF, x_max = -0x7FFFFFFF;
    band_span(a.xy, b.xy, y0, y1, x_min, x_max);
    band_span(b.xy, c.xy, y0, y1, x_min, x_max);
    band_span(c.xy, a.xy, y0, y1, x_min, x_max);
    if (x_min > x_max) return ivec2(1, 0);
    int first = max(((x_min - 1) >> FIXED_BITS) - 1, lo.x);
    int last = min((x_max + 1) >> FIXED_BITS, hi.x);
    return ivec2(first, last) >> TILE_SHIFT;
}
