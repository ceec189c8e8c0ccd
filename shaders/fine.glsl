// Exact decisions on the fine lattice: the float64 grid coordinates g = (v - origin) / h,
// rounded once to multiples of 2^-FINE_BITS (F = roundEven(g 2^FINE_BITS), an int64 up to
// 2^62: FINE_BITS 49 for g <= 8192, 46 for the larger grids' g <= 65536, FIXED_BITS + 33 in
// both; float64 itself has that step from 8, or 64, up, so only coordinates below move, by
// at most 2^-(FINE_BITS + 1)). These coordinates, not the fixed-point record, define every solid decision:
// the fixed-point record (triangle.glsl) is a fast path that decides wherever it provably
// agrees with them (the bounds are in exact.glsl), and the near ties it cannot call come here.
//
// Wide integers: 192 bits as three 64-bit words, little-endian, two's complement. Bounds,
// with coordinates and column centres in [0, 2^62]: coordinate differences |d| <= 2^62 fit
// int64; a 2x2 determinant of such differences is below 2^125; the depth sum S below
// (heights minus a centre up to (2 n + 1) 2^(FINE_BITS - 1) <= 2^63) is a sum of three products
// of a determinant and a difference, below 3 * 2^188 < 2^191: every value fits, and every
// operation (sum, product modulo 2^192) is exact.
//
// No loops here: the exact path adds no loop iterations to llvmpipe's 65,535-iteration guard
// (tiles.glsl), however long a tile's list of near ties.

#define FINE_BITS (FIXED_BITS + 33)  // voxelizer/placement.py, FINE_BITS and lattice_shift

struct Wide {
    uint64_t w0, w1, w2;
};

// u v = hi 2^64 + lo, exactly, from four 32 x 32-bit products.
void multiply_words(uint64_t u, uint64_t v, out uint64_t hi, out uint64_t lo) {
    uint64_t u0 = u & 0xFFFFFFFFul, u1 = u >> 32, v0 = v & 0xFFFFFFFFul, v1 = v >> 32;
    uint64_t low = u0 * v0, cross0 = u0 * v1, cross1 = u1 * v0;
    uint64_t middle = (low >> 32) + (cross0 & 0xFFFFFFFFul) + (cross1 & 0xFFFFFFFFul);  // < 3 2^32
    lo = (middle << 32) | (low & 0xFFFFFFFFul);
    hi = u1 * v1 + (cross0 >> 32) + (cross1 >> 32) + (middle >> 32);
}

Wide wide_add(Wide a, Wide b) {
    Wide r;
    r.w0 = a.w0 + b.w0;
    uint64_t carry = uint64_t(r.w0 < a.w0);
    uint64_t partial = a.w1 + b.w1;
    r.w1 = partial + carry;
    carry = uint64_t(partial < a.w1) + uint64_t(r.w1 < partial);
    r.w2 = a.w2 + b.w2 + carry;
    return r;
}

Wide wide_negate_if(Wide a, bool negate) {
    if (!negate) return a;
    Wide r;
    r.w0 = ~a.w0 + 1ul;
    uint64_t carry = uint64_t(r.w0 == 0ul);
    r.w1 = ~a.w1 + carry;
    carry = uint64_t(carry != 0ul && r.w1 == 0ul);
    r.w2 = ~a.w2 + carry;
    return r;
}

uint64_t magnitude(int64_t x) {
    return x < 0l ? uint64_t(0) - uint64_t(x) : uint64_t(x);
}

// w d for |w| < 2^127 and |d| <= 2^63, exactly (the bounds above keep it below 2^191).
Wide wide_times(Wide w, int64_t d) {
    bool negative_w = int64_t(w.w2) < 0l;
    Wide m = wide_negate_if(w, negative_w);  // |w| = m.w1 2^64 + m.w0
    uint64_t u = magnitude(d), h0, l0, h1, l1;
    multiply_words(m.w0, u, h0, l0);
    multiply_words(m.w1, u, h1, l1);
    Wide r;
    r.w0 = l0;
    r.w1 = h0 + l1;
    r.w2 = h1 + uint64_t(r.w1 < h0);
    return wide_negate_if(r, negative_w != (d < 0l));
}

int wide_sign(Wide a) {
    if (int64_t(a.w2) < 0l) return -1;
    return int((a.w0 | a.w1 | a.w2) != 0ul);
}

// A non-negative value below 2^128 as a float: two conversions (relative error 2^-24 each),
// an exact scaling and one sum of non-negative terms: relative error below 3 * 2^-24 (plus
// second-order terms).
float wide_float(Wide a) {
    return float(a.w0) + float(a.w1) * 18446744073709551616.0;
}

// p.x q.y - p.y q.x, exactly (|coordinates| <= 2^62).
Wide wide_cross(i64vec2 p, i64vec2 q) {
    Wide first, second;
    first.w0 = 0ul;
    first.w1 = 0ul;
    first.w2 = 0ul;
    second = first;
    multiply_words(magnitude(p.x), magnitude(q.y), first.w1, first.w0);
    multiply_words(magnitude(p.y), magnitude(q.x), second.w1, second.w0);
    return wide_add(wide_negate_if(first, (p.x < 0l) != (q.y < 0l)),
                    wide_negate_if(second, (p.y < 0l) == (q.x < 0l) && p.y != 0l && q.x != 0l));
}

// S(k) = wA (ZA - K) + wB (ZB - K) + wC (ZC - K), K = (2k + 1) 2^(FINE_BITS - 1): < 0 iff the
// centre of voxel k lies strictly above the crossing (exact.glsl, with D > 0).
bool fine_centre_above(Wide wa, Wide wb, Wide wc, i64vec3 z, int k) {
    int64_t centre = int64_t(2 * k + 1) << (FINE_BITS - 1);
    Wide s = wide_add(wide_add(wide_times(wa, z.x - centre), wide_times(wb, z.y - centre)),
                      wide_times(wc, z.z - centre));
    return wide_sign(s) < 0;
}

// 1 where a point exactly on edge a->b counts as inside (the top-left rule of exact.glsl).
bool fine_top_left(i64vec2 a, i64vec2 b) {
    i64vec2 d = b - a;
    return d.y < 0l || (d.y == 0l && d.x > 0l);
}

bool fine_edge_covers(Wide w, i64vec2 a, i64vec2 b) {
    int s = wide_sign(w);
    return s > 0 || (s == 0 && fine_top_left(a, b));
}

// The crossing of the triangle (a, b, c as given, fine coordinates) with the column, decided
// exactly: x = k, the first voxel in [0, n] whose centre lies above it (n: none), y = step,
// the change of the winding number across it going up (+1 where the triangle as given is
// clockwise in xy, -1 where counter-clockwise, 0: the column misses it or its projection has
// no area). The rules are exact.glsl's, applied to the fine coordinates.
ivec2 fine_crossing(i64vec3 a, i64vec3 b, i64vec3 c, ivec2 column, int n) {
    i64vec2 p = (i64vec2(column) * 2l + 1l) << (FINE_BITS - 1);
    int orientation = wide_sign(wide_cross(b.xy - a.xy, c.xy - a.xy));
    if (orientation == 0) return ivec2(n, 0);
    if (orientation < 0) {
        i64vec3 swap = b;
        b = c;
        c = swap;
    }
    i64vec2 ra = a.xy - p, rb = b.xy - p, rc = c.xy - p;
    Wide wa = wide_cross(rb, rc);  // orient2d(b, c, p): the weight of a, times D
    Wide wb = wide_cross(rc, ra);
    Wide wc = wide_cross(ra, rb);
    if (!(fine_edge_covers(wa, b.xy, c.xy) && fine_edge_covers(wb, c.xy, a.xy)
          && fine_edge_covers(wc, a.xy, b.xy))) {
        return ivec2(n, 0);
    }
    // Estimate: the weights are >= 0 and D = wa + wb + wc > 0. Each weight over D is within
    // 11 * 2^-24 (two conversions, one division of 2.5 ulp), relative; then three products
    // with coordinates (converted within 2^-24, scaled exactly by 2^-FINE_BITS) and two sums
    // of non-negative terms: z is within 15 * 2^-24 * z <= 2^-3.9 of z* for z* <= 65536, and
    // z + 1/2 adds at most 2^-9. So floor(z + 1/2) is within one of floor(z* + 1/2), and two
    // exact sign tests settle it (as in exact.glsl).
    float d = wide_float(wide_add(wide_add(wa, wb), wc));
    const float scale = 1.0 / float(1ul << FINE_BITS);  // exact: a power of two
    float z = (wide_float(wa) / d) * (float(a.z) * scale) + (wide_float(wb) / d) * (float(b.z) * scale)
            + (wide_float(wc) / d) * (float(c.z) * scale);
    int k0 = int(floor(z + 0.5));
    i64vec3 heights = i64vec3(a.z, b.z, c.z);
    int k = k0 + 1 - int(fine_centre_above(wa, wb, wc, heights, k0))
                   - int(fine_centre_above(wa, wb, wc, heights, k0 - 1));
    return ivec2(clamp(k, 0, n), orientation < 0 ? 1 : -1);
}
