// Exact geometric predicates on fixed-point grid coordinates (see triangle.glsl).
//
// Grids of up to 8192 a side take FIXED_BITS 16; larger ones (up to 65,536) FIXED_BITS
// 16 - LATTICE_SHIFT (voxelizer/placement.py, lattice_shift), so that n 2^FIXED_BITS stays
// within 2^29 and every integer bound below holds as it is. The float estimates' errors are
// relative, so their absolute size grows with z* <= 2^(13 + LATTICE_SHIFT): the thresholds
// that compare with them grow by 2^LATTICE_SHIFT.
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
// z* <= 2^(13 + LATTICE_SHIFT) the estimate is within 2^(LATTICE_SHIFT - 7) <= 2^-4 of z*.
// The true floor(z* + 1/2) is therefore one of k0 - 1, k0, k0 + 1 for k0 = floor(estimate +
// 1/2), and two exact sign tests pick it. The naive variant skips them when estimate + 1/2
// lies farther than 2^(LATTICE_SHIFT - 6) (1/64 up to 8192) from an integer: then k0 is
// already exact. The branchless variant always runs both tests.

#define LATTICE_SHIFT (16 - FIXED_BITS)

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

// The float32 estimate of the crossing height z* (grid units), within 2^-20 z* (above).
float crossing_estimate(Coverage w, ivec3 a, ivec3 b, ivec3 c) {
    float d = float(w.wa + w.wb + w.wc);
    return (float(w.wa) * float(a.z) + float(w.wb) * float(b.z) + float(w.wc) * float(c.z))
           / (d * float(1 << FIXED_BITS));
}

// First voxel index k in [0, n] whose centre lies above the crossing (n: none).
int first_voxel_above(Coverage w, ivec3 a, ivec3 b, ivec3 c, int n) {
    float z = crossing_estimate(w, a, b, c);
    int k0 = int(floor(z + 0.5));
    const float certain = float(1 << LATTICE_SHIFT) / 64.0;
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

// -- The fast path for the fine coordinates (fine.glsl) --------------------------------------
//
// The solid decisions are defined on the fine coordinates F (fine.glsl); the record holds
// fixed-point coordinates X that the host keeps within `delta` of them: |X - F 2^-33| <= delta
// fixed-point units for every coordinate (the host measures the largest gap exactly and
// passes its ceiling as the push constant fixed_error; 0 when every F is on the fixed-point
// lattice, and then the fixed-point decisions are the fine ones, ties and all).
//
// Coverage. Moving the corners of edge a->b by at most delta per coordinate changes its edge
// function at P, E = dx (Py - ay) - dy (Px - ax), by at most
//   m = delta (|dx| + |dy| + 2 |Px - ax| + 2 |Py - ay| + 4 delta)
// (each difference moves by delta or 2 delta; the product of the two moves adds 2 delta^2
// per term), so where |E| > m the fine edge function has the sign of E, strictly. Hence:
//   * every E > m: the fine triangle has the same orientation (D = sum of E > 0) and covers
//     P strictly: SURE_IN;
//   * some E < -m, and either some E > m (strict signs of both kinds: no orientation covers
//     P) or D > sum of m (the fine D, the sum of the fine E, has D's sign: the orientation is
//     the same, and that edge excludes P): SURE_OUT;
//   * anything else is a NEAR_TIE, decided on the fine coordinates. Binning (tiles.glsl) keeps
//     every column that is not SURE_OUT, so no tie is lost before the fill sees it.
// Bounds: |dx|, |Px - ax| <= 2^30 and delta < 2^8 keep m below 2^41.
//
// Depth, for a SURE_IN column. Let Q' be the fine crossing at P, with the fine barycentric
// weights (all >= 0: P is covered), and Q the point of the fixed-point triangle with the same
// weights: Q is within delta of Q' in every coordinate. Q lies on the fixed plane, whose
// height at P is z*, with slopes -Nx / D and -Ny / D (N = (B - A) x (C - A), D = Nz > 0), and
// Q.xy is within delta of P, so
//   |fine z* - z*| <= delta (1 + (|Nx| + |Ny|) / D) = spread (fixed-point units).
// Where no centre k + 1/2 lies within spread of z*, the fine crossing is on the same side of
// every centre as z*, and the fixed-point kfirst (exact, above) is the fine one.

const int SURE_OUT = 0;
const int SURE_IN = 1;
const int NEAR_TIE = 2;

// m of the edge a->b at p, for delta <= 2^shift: a shift, not a 64-bit product (which
// llvmpipe's vector units emulate), and m only grows with delta.
int64_t edge_margin(ivec2 a, ivec2 b, ivec2 p, int shift) {
    ivec2 d = abs(b - a), r = abs(p - a);
    int64_t sum = int64_t(d.x) + int64_t(d.y) + 2l * (int64_t(r.x) + int64_t(r.y)) + (4l << shift);
    return sum << shift;
}

int fine_coverage(Coverage w, ivec3 a, ivec3 b, ivec3 c, ivec2 column, int64_t delta) {
    if (delta == 0l) return w.covered ? SURE_IN : SURE_OUT;  // uniform: a push constant
    ivec2 p = column_centre(column);
    int shift = findMSB(int(delta) - 1) + 1;  // delta <= 2^shift (delta <= 2^8)
    int64_t ma = edge_margin(b.xy, c.xy, p, shift);
    int64_t mb = edge_margin(c.xy, a.xy, p, shift);
    int64_t mc = edge_margin(a.xy, b.xy, p, shift);
    bool all_in = w.wa > ma && w.wb > mb && w.wc > mc;
    bool some_in = w.wa > ma || w.wb > mb || w.wc > mc;
    bool some_out = w.wa < -ma || w.wb < -mb || w.wc < -mc;
    bool oriented = w.wa + w.wb + w.wc > ma + mb + mc;
    return all_in ? SURE_IN : ((some_out && (some_in || oriented)) ? SURE_OUT : NEAR_TIE);
}

// For a SURE_IN column: true iff no voxel centre lies within spread of z* (see above). The
// estimate z is within (z + 1) 2^-19 of z* (exact.glsl: 2^-20 relative), z + 1/2 adds at most
// 2^(LATTICE_SHIFT - 11) (float32 below 2^(13 + LATTICE_SHIFT)), and spread, computed in
// float32 from exact integers (relative error below 2^-20), is taken 1.001 times.
bool depth_certain(Coverage w, ivec3 a, ivec3 b, ivec3 c, int64_t delta) {
    if (delta == 0l) return true;
    ivec3 u = b - a, v = c - a;
    int64_t nx = int64_t(u.y) * int64_t(v.z) - int64_t(u.z) * int64_t(v.y);
    int64_t ny = int64_t(u.z) * int64_t(v.x) - int64_t(u.x) * int64_t(v.z);
    float d = float(w.wa + w.wb + w.wc);
    float spread = float(delta) * (1.0 + (float(abs(nx)) + float(abs(ny))) / d)
                 * (1.001 / float(1 << FIXED_BITS));
    float z = crossing_estimate(w, a, b, c);
    float position = z + 0.5 - floor(z + 0.5);  // in [0, 1)
    float margin = spread + (abs(z) + 1.0) * (1.0 / 524288.0) + float(1 << LATTICE_SHIFT) / 1024.0;
    return position > margin && position < 1.0 - margin;
}
