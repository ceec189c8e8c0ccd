// The exact per-column ranges of surface voxelization (shaders/surface.comp says what they
// decide): for one triangle (fixed point, counter-clockwise in xy as triangle setup leaves it)
// and one column, the contiguous range [k0, k1] of voxels it marks (EMPTY when k0 > k1).
//
// Every bound is a linear inequality g(k) = g0 + m k 2^FIXED_BITS >= 0 in integers of up to
// ~2^92 (Wide below): a float estimate of its root, within 1/64 of a voxel where it matters,
// and exact sign tests where the estimate cannot tell (constrain). Bounds (coordinates in [0, 2^29]): edge
// differences and the (u, z) axes below 2^30, the normal's components below 2^60.
//
// Needs common.glsl, exact.glsl and touch.glsl.

const int ONE = 1 << FIXED_BITS;
const int HALF = ONE >> 1;
const ivec2 EMPTY = ivec2(1, 0);

// -- exact linear bounds on k -----------------------------------------------------------------

// A signed integer hi * 2^32 + lo with 0 <= lo < 2^32 (accumulate_product, exact.glsl, keeps
// the form; |hi| stays below 2^62 for every sum built here).
struct Wide {
    int64_t hi;
    int64_t lo;
};

void add_product(inout Wide sum, int64_t w, int d) {
    accumulate_product(sum.hi, sum.lo, w, d);
}

// Within 2^-23 |value| + 2^9 of the value (the low word rounds by at most 2^8).
float wide_float(Wide value) {
    return float(value.hi) * 4294967296.0 + float(value.lo);
}

bool nonnegative_at(Wide g0, int64_t m, int k) {
    Wide g = g0;
    add_product(g, m, k << FIXED_BITS);
    return g.hi >= 0;
}

// g0 + m k 2^FIXED_BITS >= 0 for the int64 bounds (|g0| < 2^61, |m| < 2^30: no overflow).
bool nonnegative_at(int64_t g0, int m, int k) {
    return g0 + mul_wide(m, k << FIXED_BITS) >= 0;
}

// Every estimated root below is within 1/64 of the true root where |root| <= 2^14 + 2.
const float CERTAIN = 1.0 / 32.0;

// The bound g(k) >= 0 puts on k, estimated from its root r: the first k where g increases,
// the last where it decreases; clamped to [-2, n + 1], which keeps its effect on a range in
// [0, n - 1]. `keep` is the range's end it may cut. With `exact` the caller corrects it by
// sign tests. Branchless: always, and the estimate is taken CERTAIN short of r (then it is the
// bound or one short of it, which the sign of g at it tells). Naive: off by at most one, and
// corrected by two sign tests only where r lies within CERTAIN of an integer (near
// [-2, n + 1]) and cannot be seen to leave `keep` as it is.
int estimated_bound(float root, bool increasing, int keep, int n, out bool exact) {
#if BRANCHLESS
    float short_of = increasing ? ceil(root - CERTAIN) : floor(root + CERTAIN);
    exact = true;
    return int(clamp(short_of, -2.0, float(n + 1)));
#else
    int k = int(clamp(increasing ? ceil(root) : floor(root), -2.0, float(n + 1)));
    float position = root - floor(root);
    bool settled = (position > CERTAIN && position < 1.0 - CERTAIN) || root < -2.5
                   || root > float(n) + 1.5;
    bool harmless = increasing ? root + CERTAIN <= float(keep) : root - CERTAIN >= float(keep);
    exact = !settled && !harmless;
    if (harmless) k = keep;
    return k;
#endif
}

// The estimate corrected by the signs of g at k and at its neighbour below (increasing) or
// above (decreasing).
int corrected_bound(int k, bool increasing, bool at_k, bool at_neighbour) {
    return k + (increasing ? int(!at_k) - int(at_neighbour) : int(at_neighbour) - int(!at_k));
}

// Branchless: the estimate one short of the bound or the bound; g(k) >= 0 iff the bound.
int short_bound(int k, bool increasing, bool at_k) {
    return k + (increasing ? int(!at_k) : -int(!at_k));
}

void apply_bound(inout ivec2 range, int k, bool increasing) {
    if (increasing) {
        range.x = max(range.x, k);
    } else {
        range.y = min(range.y, k);
    }
}

// Restricts range to the k with g(k) = g0 + m k 2^FIXED_BITS >= 0, g0 of up to ~2^92. The
// root -g0 / (m 2^FIXED_BITS) is estimated within 2^-21 |root| + 2^-6 (wide_float, the
// conversion of m, the division).
void constrain(inout ivec2 range, Wide g0, int64_t m, int n) {
    if (m == 0) {
        if (g0.hi < 0) range = EMPTY;
        return;
    }
    bool increasing = m > 0, exact;
    float root = -wide_float(g0) / (float(m) * float(ONE));
    int k = estimated_bound(root, increasing, increasing ? range.x : range.y, n, exact);
#if BRANCHLESS
    k = short_bound(k, increasing, nonnegative_at(g0, m, k));
#else
    if (exact) {
        int neighbour = increasing ? k - 1 : k + 1;
        k = corrected_bound(k, increasing, nonnegative_at(g0, m, k),
                            nonnegative_at(g0, m, neighbour));
    }
#endif
    apply_bound(range, k, increasing);
}

// The same for g0 of int64 and a slope of int32 (the root within 2^-21 |root|).
void constrain(inout ivec2 range, int64_t g0, int m, int n) {
    if (m == 0) {
        if (g0 < 0) range = EMPTY;
        return;
    }
    bool increasing = m > 0, exact;
    float root = -float(g0) / (float(m) * float(ONE));
    int k = estimated_bound(root, increasing, increasing ? range.x : range.y, n, exact);
#if BRANCHLESS
    k = short_bound(k, increasing, nonnegative_at(g0, m, k));
#else
    if (exact) {
        int neighbour = increasing ? k - 1 : k + 1;
        k = corrected_bound(k, increasing, nonnegative_at(g0, m, k),
                            nonnegative_at(g0, m, neighbour));
    }
#endif
    apply_bound(range, k, increasing);
}

i64vec3 cross64(ivec3 u, ivec3 v) {
    return i64vec3(mul_wide(u.y, v.z) - mul_wide(u.z, v.y),
                   mul_wide(u.z, v.x) - mul_wide(u.x, v.z),
                   mul_wide(u.x, v.y) - mul_wide(u.y, v.x));
}

// -- conservative -----------------------------------------------------------------------------

// The axis normal to edge p->q in a (u, z)-plane (u = x or y; r the third corner), against the
// cubes [u0, u0 + 1] x [k, k + 1] of the column: their projections overlap the triangle's.
void side_axis(inout ivec2 range, ivec2 p, ivec2 q, ivec2 r, int u0, int n) {
    int lu = p.y - q.y, lz = q.x - p.x;
    int64_t third = mul_wide(lu, r.x - p.x) + mul_wide(lz, r.y - p.y);
    // The projection of the cube k = 0 relative to p; cube k adds lz k ONE to both ends.
    int64_t base = mul_wide(lu, u0 - p.x) - mul_wide(lz, p.y);
    int64_t cube_min = base + mul_wide(ONE, min(lu, 0) + min(lz, 0));
    int64_t cube_max = base + mul_wide(ONE, max(lu, 0) + max(lz, 0));
    constrain(range, max(third, 0l) - cube_min, -lz, n);
    constrain(range, cube_max - min(third, 0l), lz, n);
}

void side_axes(inout ivec2 range, ivec2 a, ivec2 b, ivec2 c, int u0, int n) {
    side_axis(range, a, b, c, u0, n);
    side_axis(range, b, c, a, u0, n);
    side_axis(range, c, a, b, u0, n);
}

// Voxels of a column whose closed square the triangle touches (square_touched, touch.glsl)
// whose closed cubes the closed triangle meets (EMPTY if none).
ivec2 touched_column_range(ivec3 a, ivec3 b, ivec3 c, ivec2 column, int nz) {
    ivec2 corner = column << FIXED_BITS;
    int z_low = min(min(a.z, b.z), c.z), z_high = max(max(a.z, b.z), c.z);
    ivec2 range = ivec2(max(((z_low + (ONE - 1)) >> FIXED_BITS) - 1, 0),
                        min(z_high >> FIXED_BITS, nz - 1));
    side_axes(range, a.yz, b.yz, c.yz, corner.y, nz);
    side_axes(range, a.xz, b.xz, c.xz, corner.x, nz);
    // The normal N = (b - a) x (c - a); N.z >= 0 (setup's counter-clockwise order), and
    // N.z == 0 leaves it in the xy-plane (the square's test decided).
    i64vec3 normal = cross64(b - a, c - a);
    if (normal.z != 0) {
        // The cube's N-projection runs from N.xy . least + N.z k ONE to N.xy . most +
        // N.z (k + 1) ONE (corners of the square); the triangle's is the single value N . a.
        ivec2 least = corner + ONE * ivec2(lessThan(normal.xy, i64vec2(0)));
        ivec2 most = corner + ONE * ivec2(greaterThan(normal.xy, i64vec2(0)));
        Wide upper = Wide(0l, 0l);  // N . a - (N.xy . least) - N.z k ONE >= 0
        add_product(upper, normal.x, a.x - least.x);
        add_product(upper, normal.y, a.y - least.y);
        add_product(upper, normal.z, a.z);
        constrain(range, upper, -normal.z, nz);
        Wide lower = Wide(0l, 0l);  // N.xy . most + N.z (k + 1) ONE - N . a >= 0
        add_product(lower, normal.x, most.x - a.x);
        add_product(lower, normal.y, most.y - a.y);
        add_product(lower, normal.z, ONE - a.z);
        constrain(range, lower, normal.z, nz);
    }
    return range;
}

// Voxels of the column whose closed cubes the closed triangle meets (EMPTY if none).
ivec2 conservative_range(ivec3 a, ivec3 b, ivec3 c, ivec2 column, int nz) {
    if (!square_touched(a, b, c, column << FIXED_BITS, ONE)) return EMPTY;
    return touched_column_range(a, b, c, column, nz);
}

// -- thin -------------------------------------------------------------------------------------

// Dominant z: the voxel at floor(crossing height) of the column's centre line, if the closed
// triangle covers the centre (edges included); a crossing on the grid's top marks the top.
ivec2 thin_range_z(ivec3 a, ivec3 b, ivec3 c, ivec2 column, int nz) {
    ivec2 p = column_centre(column);
    int64_t wa = edge_function(b.xy, c.xy, p);
    int64_t wb = edge_function(c.xy, a.xy, p);
    int64_t wc = edge_function(a.xy, b.xy, p);
    if (wa < 0 || wb < 0 || wc < 0) return EMPTY;
    int64_t d = wa + wb + wc;  // N.z > 0: the crossing height is (wa za + wb zb + wc zc) / d
    ivec2 range = ivec2(0, nz - 1);
    Wide above = Wide(0l, 0l);  // sum w z - d k ONE >= 0: k ONE <= height
    add_product(above, wa, a.z);
    add_product(above, wb, b.z);
    add_product(above, wc, c.z);
    constrain(range, above, -d, nz);
    Wide below = Wide(0l, 0l);  // d (k + 1) ONE - sum w z - 1 >= 0: height < (k + 1) ONE
    add_product(below, wa, -a.z);
    add_product(below, wb, -b.z);
    add_product(below, wc, -c.z);
    add_product(below, d, ONE);
    add_product(below, -1l, 1);
    constrain(range, below, d, nz);
    range.x = min(range.x, nz - 1);
    return range;
}

// Coverage of (pv, k ONE + HALF) by the (v, z)-projection, edge p->q: s E(k) >= 0, with E the
// edge function (exact.glsl) and s the sign of the projection's doubled area.
void cover_axis(inout ivec2 range, ivec2 p, ivec2 q, int pv, int s, int n) {
    int dv = q.x - p.x;
    int64_t g0 = mul_wide(dv, HALF - p.y) - mul_wide(q.y - p.y, pv - p.x);
    constrain(range, s > 0 ? g0 : -g0, s > 0 ? dv : -dv, n);
}

// Dominant x, in coordinates (u, v, z) (the caller swaps x and y for dominant y): voxels
// (u, v, k) of column (u, v) whose centre line along u, through (v + 1/2, k + 1/2), the closed
// (v, z)-projection covers, where the plane's u lies in [u, u + 1) (in [u, u + 1] for the
// last u < n_u).
ivec2 thin_range_side(ivec3 a, ivec3 b, ivec3 c, ivec2 column, int n_u, int nz) {
    i64vec3 normal = cross64(b - a, c - a);
    int s = normal.x > 0 ? 1 : -1;  // normal.x is the (v, z)-projection's doubled area
    normal = s > 0 ? normal : -normal;
    int pv = (column.y << FIXED_BITS) + HALF;
    ivec2 range = ivec2(0, nz - 1);
    cover_axis(range, a.yz, b.yz, pv, s, nz);
    cover_axis(range, b.yz, c.yz, pv, s, nz);
    cover_axis(range, c.yz, a.yz, pv, s, nz);
    // F(u) = N . ((u, pv, k ONE + HALF) - a), increasing in u, vanishes at the plane's u.
    int u0 = column.x << FIXED_BITS;
    Wide from = Wide(0l, 0l);  // plane u >= u0: -F(u0) >= 0
    add_product(from, -normal.x, u0 - a.x);
    add_product(from, -normal.y, pv - a.y);
    add_product(from, -normal.z, HALF - a.z);
    constrain(range, from, -normal.z, nz);
    if (column.x < n_u - 1) {
        Wide below = Wide(0l, 0l);  // plane u < u0 + ONE: F(u0 + ONE) - 1 >= 0
        add_product(below, normal.x, u0 + ONE - a.x);
        add_product(below, normal.y, pv - a.y);
        add_product(below, normal.z, HALF - a.z);
        add_product(below, -1l, 1);
        constrain(range, below, normal.z, nz);
    }
    return range;
}

// The thin surface's voxels of the column, on a grid of `size` voxels.
ivec2 thin_range(ivec3 a, ivec3 b, ivec3 c, ivec2 column, ivec3 size) {
    i64vec3 normal = cross64(b - a, c - a);
    i64vec3 magnitude = abs(normal);
    if (all(equal(normal, i64vec3(0)))) return conservative_range(a, b, c, column, size.z);
    if (magnitude.z >= magnitude.x && magnitude.z >= magnitude.y) {
        return thin_range_z(a, b, c, column, size.z);
    }
    if (magnitude.y >= magnitude.x) {
        return thin_range_side(a.yxz, b.yxz, c.yxz, column.yx, size.y, size.z);
    }
    return thin_range_side(a, b, c, column, size.x, size.z);
}
