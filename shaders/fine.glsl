// Exact decisions on the fine lattice: the float64 grid coordinates g = (v - origin) / h,
// rounded once to multiples of 2^-FINE_BITS (F = roundEven(g 2^49), an int64 up to 2^62 for
// g <= 8192; float64 itself has that step from 8 up, so only coordinates below 8 move, by at
// most 2^-50). These coordinates, not the fixed-point record, define every solid decision:
// the fixed-point record (triangle.glsl) is a fast path that decides wherever it provably
// agrees with them (the bounds are in exact.glsl), and the near ties it cannot call come here.
//
// Wide integers: six 32-bit limbs, little-endian, two's complement (192 bits). Bounds, with
// coordinates and column centres in [0, 2^62]: coordinate differences |d| <= 2^62 fit int64;
// a 2x2 determinant of such differences is below 2^125; the depth sum S below (heights minus a
// centre up to (2 * 8192 + 1) 2^48: |d| < 2^63) is a sum of three products of a determinant
// and a difference, below 3 * 2^188 < 2^191: every value fits, and every operation (sum,
// product modulo 2^192) is exact.
//
// No loops here: the limb operations are written out (macros below), so the exact path adds
// no loop iterations to llvmpipe's 65,535-iteration guard (tiles.glsl), which counts the loops
// a compiler chooses not to unroll, however long a tile's list of near ties.

#define FINE_BITS 49  // voxelizer/placement.py, FINE_BITS
#define WIDE_LIMBS 6

struct Wide {
    uint limb[WIDE_LIMBS];
};

Wide wide_from(int64_t x) {
    Wide r;
    uint64_t bits = uint64_t(x);
    uint extension = x < 0l ? 0xFFFFFFFFu : 0u;
    r.limb[0] = uint(bits);
    r.limb[1] = uint(bits >> 32);
    r.limb[2] = extension;
    r.limb[3] = extension;
    r.limb[4] = extension;
    r.limb[5] = extension;
    return r;
}

// a + b (with invert: a - b, as a + ~b + 1).
Wide wide_add(Wide a, Wide b, bool invert) {
    Wide r;
    uint64_t carry = uint64_t(invert), sum;
    uint flip = invert ? 0xFFFFFFFFu : 0u;
#define WIDE_ADD_LIMB(i) \
    sum = uint64_t(a.limb[i]) + uint64_t(b.limb[i] ^ flip) + carry; \
    r.limb[i] = uint(sum); \
    carry = sum >> 32;
    WIDE_ADD_LIMB(0) WIDE_ADD_LIMB(1) WIDE_ADD_LIMB(2)
    WIDE_ADD_LIMB(3) WIDE_ADD_LIMB(4) WIDE_ADD_LIMB(5)
#undef WIDE_ADD_LIMB
    return r;
}

// a * b modulo 2^192: the exact product of two's complement values whose product fits.
Wide wide_mul(Wide a, Wide b) {
    Wide r;
    r.limb[0] = 0u;
    r.limb[1] = 0u;
    r.limb[2] = 0u;
    r.limb[3] = 0u;
    r.limb[4] = 0u;
    r.limb[5] = 0u;
    uint64_t carry, t;
    // Row i adds a_i * b into r from limb i up; (2^32 - 1)^2 + 2 (2^32 - 1) = 2^64 - 1: no
    // step overflows, and what would carry past limb 5 is dropped (modulo 2^192).
#define WIDE_MUL_STEP(i, j) \
    t = uint64_t(a.limb[i]) * uint64_t(b.limb[j]) + uint64_t(r.limb[i + j]) + carry; \
    r.limb[i + j] = uint(t); \
    carry = t >> 32;
    carry = 0ul;
    WIDE_MUL_STEP(0, 0) WIDE_MUL_STEP(0, 1) WIDE_MUL_STEP(0, 2)
    WIDE_MUL_STEP(0, 3) WIDE_MUL_STEP(0, 4) WIDE_MUL_STEP(0, 5)
    carry = 0ul;
    WIDE_MUL_STEP(1, 0) WIDE_MUL_STEP(1, 1) WIDE_MUL_STEP(1, 2) WIDE_MUL_STEP(1, 3) WIDE_MUL_STEP(1, 4)
    carry = 0ul;
    WIDE_MUL_STEP(2, 0) WIDE_MUL_STEP(2, 1) WIDE_MUL_STEP(2, 2) WIDE_MUL_STEP(2, 3)
    carry = 0ul;
    WIDE_MUL_STEP(3, 0) WIDE_MUL_STEP(3, 1) WIDE_MUL_STEP(3, 2)
    carry = 0ul;
    WIDE_MUL_STEP(4, 0) WIDE_MUL_STEP(4, 1)
    carry = 0ul;
    WIDE_MUL_STEP(5, 0)
#undef WIDE_MUL_STEP
    return r;
}

int wide_sign(Wide a) {
    if (int(a.limb[WIDE_LIMBS - 1]) < 0) return -1;
    uint any_bits = a.limb[0] | a.limb[1] | a.limb[2] | a.limb[3] | a.limb[4] | a.limb[5];
    return int(any_bits != 0u);
}

// A non-negative value below 2^127 as a float: each limb converted (relative error 2^-24)
// and scaled by an exact power of two, three sums of non-negative terms: relative error
// below 4 * 2^-24 (plus second-order terms).
float wide_float(Wide a) {
    return float(a.limb[0]) + float(a.limb[1]) * 4294967296.0
         + float(a.limb[2]) * 18446744073709551616.0 + float(a.limb[3]) * 79228162514264337593543950336.0;
}

// p.x q.y - p.y q.x, exactly.
Wide wide_cross(i64vec2 p, i64vec2 q) {
    return wide_add(wide_mul(wide_from(p.x), wide_from(q.y)),
                    wide_mul(wide_from(p.y), wide_from(q.x)), true);
}

// S(k) = wA (ZA - K) + wB (ZB - K) + wC (ZC - K), K = (2k + 1) 2^(FINE_BITS - 1): < 0 iff the
// centre of voxel k lies strictly above the crossing (exact.glsl, with D > 0).
bool fine_centre_above(Wide wa, Wide wb, Wide wc, i64vec3 z, int k) {
    int64_t centre = int64_t(2 * k + 1) << (FINE_BITS - 1);
    Wide s = wide_mul(wa, wide_from(z.x - centre));
    s = wide_add(s, wide_mul(wb, wide_from(z.y - centre)), false);
    s = wide_add(s, wide_mul(wc, wide_from(z.z - centre)), false);
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
    // with coordinates (converted within 2^-24, scaled exactly by 2^-49) and two sums of
    // non-negative terms: z is within 15 * 2^-24 * z <= 2^-6.9 of z* for z* <= 8192, and
    // z + 1/2 adds 2^-11. So floor(z + 1/2) is within one of floor(z* + 1/2), and two exact
    // sign tests settle it (as in exact.glsl).
    float d = wide_float(wide_add(wide_add(wa, wb, false), wc, false));
    const float scale = 1.0 / 562949953421312.0;  // 2^-49
    float z = (wide_float(wa) / d) * (float(a.z) * scale) + (wide_float(wb) / d) * (float(b.z) * scale)
            + (wide_float(wc) / d) * (float(c.z) * scale);
    int k0 = int(floor(z + 0.5));
    i64vec3 heights = i64vec3(a.z, b.z, c.z);
    int k = k0 + 1 - int(fine_centre_above(wa, wb, wc, heights, k0))
                   - int(fine_centre_above(wa, wb, wc, heights, k0 - 1));
    return ivec2(clamp(k, 0, n), orientation < 0 ? 1 : -1);
}
