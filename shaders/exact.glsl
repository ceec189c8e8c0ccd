// Exact geometric predicates on fixed-point grid coordinates (see triangle.glsl).
//
// Everything that decides a voxel is integer arithmetic, so every device and the CPU
// reference agree bit for bit. Bounds (coordinates in [0, 2^29]):
//   * coordinate differences fit in int32 (|d| <= 2^29);
//   * an edge function is a difference of two products of such differences: |E| < 2^59;
//   * for a covered column centre the barycentric weights wA, wB, wC are edge functions in
//     [0, D], with D = twice the projected area <= 2^58.
//
// Coverage: the column centre P is inside the CCW triangle iff every edge function is > 0,
// or == 0 on a "top-left" edge (dy < 0, or dy == 0 and dx > 0). That is the same as moving P
// by an infinitesimal (+e, +e^2): a point on a shared edge or vertex belongs to exactly one
// of the triangles around it, so a closed mesh crosses every column an even number of times.
//
// Depth: the column crosses the triangle's plane at z* = (wA ZA + wB ZB + wC ZC) / (D 2^F).
// Voxel k's centre lies above the crossing iff z* < k + 1/2, i.e. iff
//   S(k) = wA (ZA - K) + wB (ZB - K) + wC (ZC - K) < 0,  K = (2k + 1) 2^(F-1),
// since wA + wB + wC = D > 0. The crossing flips voxels k >= kfirst = floor(z* + 1/2).
// S(k) needs up to ~2^90, so each product w * d (w < 2^58, |d| < 2^30) is split at bit 32:
// w = wh 2^32 + wl with wh < 2^26 and wl < 2^32; wh d and wl d fit int64, and carrying the
// low part's excess into the high part keeps S = hi 2^32 + lo with 0 <= lo < 2^32, so
// sign(S) = sign(hi) unless hi == 0 (then S >= 0). No division, no rounding.
//
// kfirst starts from a float32 estimate: all terms are non-negative, so there is no
// cancellation; seven correctly rounded conversions, products and sums (2^-24 each) and one
// division (2.5 ulp allowed by Vulkan) keep its relative error below 2^-20, so with
// z* <= 2^13 the estimate is within 2^-7 of z*. The true floor(z* + 1/2) is therefore one of
// k0 - 1, k0, k0 + 1 for k0 = floor(estimate + 1/2), and two exact sign tests pick it. The
// naive variant skips them when estimate + 1/2 lies farther than 1/64 (> 2^-7) from an
// integer: then k0 is already exact. The branchless variant always runs both tests.

int64_t edge_function(ivec2 a, ivec2 b, ivec2 p) {
    return int64_t(b.x - a.x) * int64_t(p.y - a.y) - int64_t(b.y - a.y) * int64_t(p.x - a.x);
}

// 1 where a point exactly on edge a->b counts as inside (the top-left rule), else 0.
int64_t top_left_bias(ivec2 a, ivec2 b) {
    ivec2 d = b - a;
    return int64_t((d.y < 0) || (d.y == 0 && d.x > 0));
}

ivec2 column_centre(ivec2 column) {
    return (column << FIXED_BITS) + (1 << (FIXED_BITS - 1));
}

struct Coverage {
    bool covered;
    int64_t wa, wb, wc;  // barycentric weights times D (edge functions opposite A, B, C)
};

Coverage cover(ivec3 a, ivec3 b, ivec3 c, ivec2 column) {
    ivec2 p = column_centre(column);
    Coverage r;
    r.wa = edge_function(b.xy, c.xy, p);
    r.wb = edge_function(c.xy, a.xy, p);
    r.wc = edge_function(a.xy, b.xy, p);
#if BRANCHLESS
    r.covered = (int(r.wa + top_left_bias(b.xy, c.xy) > 0)
               & int(r.wb + top_left_bias(c.xy, a.xy) > 0)
               & int(r.wc + top_left_bias(a.xy, b.xy) > 0)) != 0;
#else
    r.covered = true;
    if (r.wa < 0 || (r.wa == 0 && top_left_bias(b.xy, c.xy) == 0)) r.covered = false;
    if (r.wb < 0 || (r.wb == 0 && top_left_bias(c.xy, a.xy) == 0)) r.covered = false;
    if (r.wc < 0 || (r.wc == 0 && top_left_bias(a.xy, b.xy) == 0)) r.covered = false;
#endif
    return r;
}

// Adds w * d into the split accumulator (hi 2^32 + lo), keeping 0 <= lo < 2^32.
void accumulate_product(inout int64_t hi, inout int64_t lo, int64_t w, int d) {
    int64_t low = (w & 0xFFFFFFFFl) * int64_t(d);
    hi += (w >> 32) * int64_t(d) + (low >> 32);
    lo += low & 0xFFFFFFFFl;
    hi += lo >> 32;
    lo &= 0xFFFFFFFFl;
}

// True iff voxel centre k + 1/2 lies strictly above the crossing: S(k) < 0.
bool centre_above_crossing(Coverage w, int za, int zb, int zc, int k) {
    int centre = (2 * k + 1) << (FIXED_BITS - 1);
    int64_t hi = 0, lo = 0;
    accumulate_product(hi, lo, w.wa, za - centre);
    accumulate_product(hi, lo, w.wb, zb - centre);
    accumulate_product(hi, lo, w.wc, zc - centre);
    return hi < 0;
}

// First voxel index k in [0, n] whose centre lies above the crossing (n: none).
int first_voxel_above(Coverage w, ivec3 a, ivec3 b, ivec3 c, int n) {
    float d = float(w.wa + w.wb + w.wc);
    float z = (float(w.wa) * float(a.z) + float(w.wb) * float(b.z) + float(w.wc) * float(c.z))
              / (d * float(1 << FIXED_BITS));
    int k0 = int(floor(z + 0.5));
    const float certain = 1.0 / 64.0;
#if BRANCHLESS
    int k = k0 + 1 - int(centre_above_crossing(w, a.z, b.z, c.z, k0))
                   - int(centre_above_crossing(w, a.z, b.z, c.z, k0 - 1));
#else
    float position = z + 0.5 - float(k0);  // in [0, 1)
    if (position > certain && position < 1.0 - certain) return clamp(k0, 0, n);
    int k = k0 + 1;
    if (centre_above_crossing(w, a.z, b.z, c.z, k0 - 1)) {
        k = k0 - 1;
    } else if (centre_above_crossing(w, a.z, b.z, c.z, k0)) {
        k = k0;
    }
#endif
    return clamp(k, 0, n);
}
