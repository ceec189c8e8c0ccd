// Which tiles a triangle really touches: shared by triangle setup (counting) and pair
// emission (writing), so both passes agree on every pair.
//
// Loop budget: llvmpipe (lavapipe) ends every loop of an invocation once the invocation has
// made 65,535 loop iterations in total (its guard against hangs), silently. So the fixed
// 16-column test is unrolled, and the tile loops visit only the tiles of each tile row that
// the triangle can reach: about one iteration per emitted pair, plus two per row. A triangle
// covers at most half of the tiles of its bounding square, so at 1024^3, the largest grid
// lavapipe can hold in one buffer, that is at most 256^2 / 2 + 3 * 256, about 33,500.

// Bit c of the result is set iff column c of the tile (c = x + TILE_SIDE * y within the tile)
// lies inside the column rectangle [lo, hi] and the fine triangle may cover its centre: with
// delta == 0 (fine corners equal to these), iff this triangle covers it; else iff the centre
// is not SURE_OUT (exact.glsl) by the margins M of the whole triangle. The centres binned lie
// within delta of the bounding box (setup.comp), so |P - a| <= W + H + 2 delta per edge
// (W, H: the box's sides) and M = (|dx| + |dy| + 2 (W + H + 2 delta) + 4 delta') delta' with
// delta <= delta' = 2^shift bounds each column's m: SURE_OUT by M is SURE_OUT by m, and a
// column the fill may find a crossing in is never dropped.
uint tile_coverage(ivec3 a, ivec3 b, ivec3 c, ivec2 tile, ivec2 lo, ivec2 hi, int64_t delta) {
    int shift = findMSB(int(delta) - 1) + 1;
    ivec2 box = max(max(a.xy, b.xy), c.xy) - min(min(a.xy, b.xy), c.xy);
    int64_t reach = 2l * (int64_t(box.x) + int64_t(box.y) + 2l * delta) + (4l << shift);
    ivec2 ab = abs(b.xy - a.xy), bc = abs(c.xy - b.xy), ca = abs(a.xy - c.xy);
    int64_t ma = (int64_t(bc.x) + int64_t(bc.y) + reach) << shift;  // edge b->c, opposite a
    int64_t mb = (int64_t(ca.x) + int64_t(ca.y) + reach) << shift;
    int64_t mc = (int64_t(ab.x) + int64_t(ab.y) + reach) << shift;
    uint mask = 0u;
    [[unroll]] for (int bit = 0; bit < TILE_COLUMNS; ++bit) {
        ivec2 column = (tile << TILE_SHIFT) + ivec2(bit & (TILE_SIDE - 1), bit >> TILE_SHIFT);
        bool inside = all(greaterThanEqual(column, lo)) && all(lessThanEqual(column, hi));
        Coverage w = cover(a, b, c, column);
        bool some_out = w.wa < -ma || w.wb < -mb || w.wc < -mc;
        bool some_in = w.wa > ma || w.wb > mb || w.wc > mc;
        bool sure_out = some_out && (some_in || w.wa + w.wb + w.wc > ma + mb + mc);
        bool binned = delta == 0l ? w.covered : !sure_out;
#if BRANCHLESS
        mask |= uint(inside && binned) << bit;
#else
        if (inside && binned) mask |= 1u << bit;
#endif
    }
    return mask;
}

// Widens [x_min, x_max] by the x-extent of segment p-q within the band y0 <= y <= y1.
void band_extent(vec2 p, vec2 q, float y0, float y1, inout float x_min, inout float x_max) {
    float low = max(min(p.y, q.y), y0);
    float high = min(max(p.y, q.y), y1);
    if (low > high) return;
    float slope = p.y == q.y ? 0.0 : (q.x - p.x) / (q.y - p.y);
    float x0 = p.y == q.y ? p.x : p.x + (low - p.y) * slope;
    float x1 = p.y == q.y ? q.x : p.x + (high - p.y) * slope;
    float edge_min = min(p.x, q.x), edge_max = max(p.x, q.x);
    x_min = min(x_min, clamp(min(x0, x1), edge_min, edge_max));
    x_max = max(x_max, clamp(max(x0, x1), edge_min, edge_max));
}

// Tile columns [x, y] of tile row ty that can hold a covered centre: the triangle's x-extent
// over the band of that row's column centres, in float with a margin of one column (float
// only narrows the search; tile_coverage decides exactly). Empty when x > y. The band is
// widened by 1/128 of a voxel, more than the fine triangle's distance from this one (delta,
// at most 2^8 fixed-point units, exact.glsl), so a centre the fine triangle covers has a point
// of this triangle within the band and within one column of it; 1/128 keeps the band's ends
// exact in float, so the comparisons with the rounded corners stay monotone.
ivec2 candidate_tiles(ivec3 a, ivec3 b, ivec3 c, int ty, ivec2 lo, ivec2 hi) {
    const float scale = 1.0 / float(1 << FIXED_BITS);
    vec2 pa = vec2(a.xy) * scale, pb = vec2(b.xy) * scale, pc = vec2(c.xy) * scale;
    float y0 = float(max(ty << TILE_SHIFT, lo.y)) + (0.5 - 1.0 / 128.0);
    float y1 = float(min((ty << TILE_SHIFT) + TILE_SIDE - 1, hi.y)) + (0.5 + 1.0 / 128.0);
    float x_min = 3.0e38, x_max = -3.0e38;
    band_extent(pa, pb, y0, y1, x_min, x_max);
    band_extent(pb, pc, y0, y1, x_min, x_max);
    band_extent(pc, pa, y0, y1, x_min, x_max);
    if (x_min > x_max) return ivec2(1, 0);
    int first = max(int(floor(x_min - 0.5)) - 1, lo.x);
    int last = min(int(floor(x_max - 0.5)) + 1, hi.x);
    return ivec2(first, last) >> TILE_SHIFT;
}
