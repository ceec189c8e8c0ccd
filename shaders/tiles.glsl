// Which tiles a triangle really touches: shared by triangle setup (counting) and pair
// emission (writing), so both passes agree on every pair.
//
// Loop budget: llvmpipe (lavapipe) ends every loop of an invocation once the invocation has
// made 65,535 loop iterations in total (its guard against hangs), silently. So the fixed
// 16-column test is unrolled, and the tile loops visit only the tiles of each tile row that
// the triangle can reach: about one iteration per emitted pair, plus two per row. A triangle
// covers at most half of the tiles of its bounding square, so at 1024^3, the largest grid
// lavapipe can hold in one buffer, that is at most 256^2 / 2 + 3 * 256, about 33,500.

// Which columns a triangle is binned for, decided once per triangle (triangle_binning) and
// evaluated per tile (tile_coverage): column centre P is binned iff every E + offset >= 0
// (E: the three edge functions at P, opposite a, b, c), or, with either_side, every
// offset - E >= 0. That is:
//   * delta == 0 (fine corners equal to these): offset = bias - 1 (bias: top_left_bias), and
//     every E + bias > 0 is the coverage test of exact.glsl (integers): binned iff covered;
//   * delta != 0: binned iff P is not SURE_OUT (exact.glsl) by the margins M of the whole
//     triangle (offset = M), i.e. iff no E < -M (every E + M >= 0), or no E > M (every
//     M - E >= 0) and D <= the sum of M (either_side; D = the sum of the three E at any P,
//     twice the area).
// The centres binned lie within delta of the bounding box (setup.comp), so |P - a| <= W + H
// + 2 delta per edge (W, H: the box's sides) and M = (|dx| + |dy| + 2 (W + H + 2 delta)
// + 4 delta') delta' with delta <= delta' = 2^shift bounds each column's m: SURE_OUT by M is
// SURE_OUT by m, and a column the fill may find a crossing in is never dropped.
struct Binning {
    i64vec3 offset;  // added to E (edges b->c, c->a, a->b)
    bool either_side;
};

Binning triangle_binning(ivec3 a, ivec3 b, ivec3 c, int64_t delta) {
    ivec2 bc = c.xy - b.xy, ca = a.xy - c.xy, ab = b.xy - a.xy;
    int shift = findMSB(int(delta) - 1) + 1;
    ivec2 box = max(max(a.xy, b.xy), c.xy) - min(min(a.xy, b.xy), c.xy);
    int64_t reach = 2l * (int64_t(box.x) + int64_t(box.y) + 2l * delta) + (4l << shift);
    i64vec3 margin = (i64vec3(abs(bc.x), abs(ca.x), abs(ab.x))
                      + i64vec3(abs(bc.y), abs(ca.y), abs(ab.y)) + reach) << shift;
    i64vec3 bias = i64vec3(top_left_bias(b.xy, c.xy), top_left_bias(c.xy, a.xy),
                           top_left_bias(a.xy, b.xy));
    bool exact = delta == 0l;
    Binning r;
    r.offset = exact ? bias - 1l : margin;
    r.either_side = !exact && edge_function(a.xy, b.xy, c.xy) <= margin.x + margin.y + margin.z;
    return r;
}

// Bit x + TILE_SIDE * y is set iff all three values are >= 0 at that column of the tile: the
// values at the tile's first column are `first`, and change by step_x and step_y per column
// (E is affine in P; every value is that of the same column's own E, so the bounds of
// exact.glsl hold for each). The sign of the three values or-ed is negative iff one is.
uint nonnegative_columns(i64vec3 first, i64vec3 step_x, i64vec3 step_y) {
    uint mask = 0u;
    i64vec3 row = first;
    [[unroll]] for (int y = 0; y < TILE_SIDE; ++y) {
        i64vec3 w = row;
        [[unroll]] for (int x = 0; x < TILE_SIDE; ++x) {
#if BRANCHLESS
            mask |= uint((w.x | w.y | w.z) >= 0l) << (x + TILE_SIDE * y);
#else
            if ((w.x | w.y | w.z) >= 0l) mask |= 1u << (x + TILE_SIDE * y);
#endif
            w += step_x;
        }
        row += step_y;
    }
    return mask;
}

// The columns of the tile with origin column `origin` that lie inside the rectangle [lo, hi].
uint rectangle_columns(ivec2 origin, ivec2 lo, ivec2 hi) {
    ivec2 first = max(lo - origin, 0), last = min(hi - origin, TILE_SIDE - 1);
    uint row = first.x <= last.x ? (2u << last.x) - (1u << first.x) : 0u;
    uint mask = 0u;
    [[unroll]] for (int y = 0; y < TILE_SIDE; ++y) {
        mask |= (first.y <= y && y <= last.y) ? row << (TILE_SIDE * y) : 0u;
    }
    return mask;
}

// Bit c of the result is set iff column c of the tile (c = x + TILE_SIDE * y within the tile)
// lies inside the column rectangle [lo, hi] and is binned (triangle_binning). Three edge
// functions per tile, then three int64 additions and one sign test per column (twice that
// with either_side, which only triangles of little or no projected area have).
uint tile_coverage(ivec3 a, ivec3 b, ivec3 c, Binning binning, ivec2 tile, ivec2 lo, ivec2 hi) {
    ivec2 origin = tile << TILE_SHIFT;
    ivec2 p = column_centre(origin);
    i64vec3 e = i64vec3(edge_function(b.xy, c.xy, p), edge_function(c.xy, a.xy, p),
                        edge_function(a.xy, b.xy, p));
    // One column on in x moves P by 2^FIXED_BITS in x, and E by -dy 2^FIXED_BITS; in y by dx.
    i64vec3 step_x = -i64vec3(c.y - b.y, a.y - c.y, b.y - a.y) * (1l << FIXED_BITS);
    i64vec3 step_y = i64vec3(c.x - b.x, a.x - c.x, b.x - a.x) * (1l << FIXED_BITS);
    uint mask = nonnegative_columns(e + binning.offset, step_x, step_y);
    if (binning.either_side) {  // then offset = M
        mask |= nonnegative_columns(binning.offset - e, -step_x, -step_y);
    }
    return mask & rectangle_columns(origin, lo, hi);
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
// at most 1/256 voxel, geometry.py's max_fixed_error) and the corners' conversion to float
// (below 2^29 fixed-point units: at most 2^-9 voxel), so a centre the fine triangle covers
// has a point of this triangle within the band and within one column of it; 1/128 keeps the
// band's ends exact in float (sides up to 65,536), so the comparisons with the rounded
// corners stay monotone.
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
