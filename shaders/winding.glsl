// The generalized winding number w(p) of the mesh at a voxel centre (fill_mode="winding"):
// the sum over the triangles of their signed solid angles seen from p, divided by 4 pi. A
// voxel is solid iff w > 1/2 (voxelizer/reference_winding.py states the rule and computes it).
//
// The GPU never sums solid angles over the triangles. Close the surface S with the curtain
// C that hangs from its boundary up to z = +infinity (each boundary edge x0 -> x1 sweeps a
// vertical strip) and a lid at infinity, whose solid angle tends to 0: S + C is closed, so
// its winding number at p is the signed count of its crossings with any ray from p. The ray
// straight down never meets the vertical strips above the edges, so
//
//     w(p) = s(p) - c(p),
//     s(p) = sum over the triangles the downward ray crosses of -sign(N_z) (integers),
//     c(p) = sum over the boundary edges of m_e Omega(x1 - p, x0 - p, +z) / 4 pi,
//
// where m_e is the edge's net count in the boundary (uses a -> b minus uses b -> a, edges
// compared by position) and Omega(A, B, C) is the solid angle of the spherical triangle of
// directions A, B, C (Van Oosterom & Strackee: tan(Omega / 2) = det / den with
// det = A.(B x C), den = |A||B||C| + (A.B)|C| + (B.C)|A| + (C.A)|B|). s is counted by the
// parity passes' fill with their exact predicates (fill.comp, SIGNED_CROSSINGS: the top-left
// rule, a crossing at a centre's height is not below it), so a mesh whose boundary cancels
// (closed, or closed parts in any orientation, overlapping or not) has w = s exactly: for
// one closed, outward, non-self-intersecting mesh that is the parity answer bit for bit.
// Only c is rounded (float32, with the bound below).
//
// Geometry: the fixed-point corners (triangle.glsl), the same integers the parity passes
// use, and the centre P = (2 (i, j, k) + 1) 2^(FIXED_BITS - 1). Ties are those of the
// passes: P is nudged by (+e, +e^2, -E), E >> e > 0. For a strip that means: when P's column
// lies in the strip's vertical plane (det == 0 exactly), the strip is either entered from
// the side (+e, +e^2) says (omega = +-2 pi, if the nudged P lies above the edge within its
// span) or missed (0), decided in integers.

#define PI 3.14159265358979
#define FOUR_PI 12.5663706143592

ivec3 voxel_centre(uvec3 voxel) {
    return ivec3(voxel << FIXED_BITS) + (1 << (FIXED_BITS - 1));
}

// atan(t) for t in [0, 1]: Cephes' single-precision reduction and polynomial, within
// 1.6 2^-24 of atan(t) for exactly represented t (tests/test_winding.py emulates it).
float atan_unit(float t) {
    bool big = t > 0.41421356;  // tan(pi / 8)
    float x = big ? (t - 1.0) / (t + 1.0) : t;
    float z = x * x;
    float p = (((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z
               - 3.33329491539e-1) * z * x + x;
    return big ? 0.785398163 + p : p;
}

// atan2 within 2^-20 of the true angle (a driver's atan may be off by 4096 ulp in Vulkan).
float atan2_accurate(float y, float x) {
    float ax = abs(x), ay = abs(y);
    float a = atan_unit(min(ax, ay) / max(max(ax, ay), 1e-37));
    a = ay > ax ? 1.57079633 - a : a;
    a = x < 0.0 ? PI - a : a;
    return y < 0.0 ? -a : a;
}

// Whether P, nudged by (+e, +e^2, -E), lies inside the strip above edge x0 -> x1, given that
// P's column lies in the strip's vertical plane (and the edge is not vertical): within the
// edge's span along it, and strictly above it. Products of differences: |.| < 2^60.
bool in_strip(ivec3 x0, ivec3 x1, ivec3 p) {
    ivec2 d = x1.xy - x0.xy;
    bool along_x = d.x != 0;
    int64_t run = int64_t(along_x ? d.x : d.y);
    int64_t offset = int64_t(along_x ? p.x - x0.x : p.y - x0.y);  // P = x0 + offset / run d
    int direction = run > 0 ? 1 : -1;
    bool nudge_forward = d.x > 0 || (d.x == 0 && d.y > 0);  // (+e, +e^2) along d
    int64_t start = offset * direction, end = (run - offset) * direction;
    bool after_start = start > 0 || (start == 0 && nudge_forward);
    bool before_end = end > 0 || (end == 0 && !nudge_forward);
    int64_t height = int64_t(p.z - x0.z) * run - offset * int64_t(x1.z - x0.z);
    return after_start && before_end && height * direction > 0;
}

// strip_solid_angle (below) in parts: what depends on P's column only (x and y), the same
// at every height (winding_bisect.comp keeps it for a run's column; in_plane: det == 0
// exactly), and the term at a height.
struct StripColumn {
    float det;     // det (exact) rounded once
    float dot_xy;  // A.B, A^2 and B^2 in x and y
    float a2;
    float b2;
    bool in_plane;
};

StripColumn strip_column(ivec3 x0, ivec3 x1, ivec2 p) {
    const float scale = 1.0 / float(1 << FIXED_BITS);
    int64_t det = edge_function(x1.xy, x0.xy, p);  // A.(B x z) = (A x B)_z, A = x1 - P
    vec2 a = vec2(x1.xy - p) * scale, b = vec2(x0.xy - p) * scale;
    return StripColumn(float(det) * scale * scale, dot(a, b), dot(a, a), dot(b, b), det == 0);
}

// P's column in the strip's vertical plane: entered from the side (+e, +e^2) says, or missed.
vec2 strip_in_plane(ivec3 x0, ivec3 x1, ivec3 p) {
    if (x0.xy == x1.xy) return vec2(0.0);  // a vertical edge sweeps no area
    int64_t nx = int64_t(x1.y - x0.y), ny = int64_t(x0.x - x1.x);  // det's gradient in P
    bool positive = nx != 0 ? nx > 0 : ny > 0;  // det's sign at (+e, +e^2)
    float omega = in_strip(x0, x1, p) ? (positive ? 2.0 * PI : -2.0 * PI) : 0.0;
    return vec2(omega, 0.0);  // exact
}

// The term at height p_z of a strip whose column part is `column` (not in_plane), from the
// heights z0, z1 of the edge's ends.
vec2 strip_above(StripColumn column, int z0, int z1, int pz) {
    const float scale = 1.0 / float(1 << FIXED_BITS);
    float az = float(z1 - pz) * scale, bz = float(z0 - pz) * scale;
    float la = sqrt(column.a2 + az * az), lb = sqrt(column.b2 + bz * bz);
    float det_value = column.det;
    float den = la * lb + (column.dot_xy + az * bz) + bz * la + az * lb;
    float omega = 2.0 * atan2_accurate(det_value, den);
    // 1 / |(det, den)| (|det| >= 2^-32 here: the clamp never binds; within 2 ulp in Vulkan)
    float inverse_spread = inversesqrt(max(det_value * det_value + den * den, 1e-30));
    float error = 2.0 * (abs(det_value) / 8388608.0 + la * lb / 262144.0) * inverse_spread
                + 2.0 / 1048576.0 + abs(omega) / 8388608.0;
    return vec2(omega, error);
}

// The strip above boundary edge x0 -> x1 seen from P: x = its signed solid angle, y = a bound
// on x's rounding error.
//
// Rounding: det is an exact integer rounded once; den is a sum of products of rounded
// inputs, within 2^-18 |A||B| of its value; 2 atan2(det, den) moves by at most
// 2 (|d det| + |d den|) / |(det, den)|, plus twice atan2_accurate's 2^-20.
//
// Along P's column, |x| never decreases as P rises (the strip seen from P, shifted down by
// P's height, only grows: a larger piece of one plane, seen from one side) and its sign
// (the side of the plane, or the nudge's side) does not change: each m_e x is monotonic in
// the height, increasing where m_e x > 0 (winding_decide.comp bounds w on a run with this).
vec2 strip_solid_angle(ivec3 x0, ivec3 x1, ivec3 p) {
    StripColumn column = strip_column(x0, x1, p.xy);
    if (column.in_plane) return strip_in_plane(x0, x1, p);
    return strip_above(column, x0.z, x1.z, p.z);
}

// A bound on c along a whole column, cheap and rigorous (winding_evaluate.comp's first
// round). Seen from any P, the strip above edge x0 -> x1 covers, at each azimuth of the
// edge's projection seen from P's column, one vertical half-line: an elevation interval,
// whose solid angle per unit azimuth (the integral of cos(elevation)) is at most 2. So
// |omega| <= 2 phi, phi the angle the edge's projection subtends at P's column, whatever
// P's height, and omega has det's sign (or is 0 or +-2 pi where det == 0). With
// phi_+ = the sum of |m_e| phi_e over the edges where m_e det > 0 and phi_- over those where
// m_e det < 0 (det == 0 counts pi in both),
//
//     -phi_- / 2 pi <= c <= phi_+ / 2 pi     everywhere on the column.
//
// Far from the boundary (in x and y) both are small: the column's segments are decided by
// s alone (an integer). All in float32, from the integers A = x1 - P and B = x0 - P (in x
// and y, |.| < 2^30), each rounded once (2^-24 relative): det = A x B and dot = A.B are
// within 4 2^-24 (|A_x B_y| + |A_y B_x|) <= 2^-22 |A||B| of their values, and
// |A||B| = |(det, dot)|, so the angle of (det, dot) moves by less than 2^-21 and
// atan2_accurate adds 2^-20: each edge adds 2^-18 to its phi for that. Where |det| is not
// above its error (2^-21 |A|_1 |B|_1, rounded or not, is more), the side is unknown and phi
// counts on both sides; if P's column is on the edge's line, that phi is 0 off the edge or
// near pi on it (det's error is 0 there, dot's sign is exact: A and B collinear), but
// exactly at an end (A or B = 0, exact) the nudge may put P in the strip: pi. The sums'
// rounding: winding_evaluate.comp. (x, y) = the edge's share of (phi_+, phi_-).
vec2 azimuth_bound(ivec4 start, ivec4 end, ivec3 p) {
    vec2 a = vec2(end.xy - p.xy), b = vec2(start.xy - p.xy);
    float det = a.x * b.y - a.y * b.x;  // edge_function(x1.xy, x0.xy, P), as strip_solid_angle
    float dot_ab = a.x * b.x + a.y * b.y;
    float weight = abs(float(start.w));
    float uncertain = (abs(a.x) + abs(a.y)) * (abs(b.x) + abs(b.y)) / 2097152.0;
    bool at_end = (a.x == 0.0 && a.y == 0.0) || (b.x == 0.0 && b.y == 0.0);
    float phi = at_end ? PI : atan2_accurate(abs(det), dot_ab);
    phi = weight * (phi + 1.0 / 262144.0);
    if (at_end || abs(det) <= uncertain) return vec2(phi);
    return (det > 0.0) == (start.w > 0) ? vec2(phi, 0.0) : vec2(0.0, phi);
}

// The same bound for every column within `radius` of q (x and y, fixed point), from q (a
// tile's centre). phi as a function of P (x and y) is continuous off the edge's ends, with
// gradient perp((x1 - P) / r1^2 - (x0 - P) / r0^2) (r_i = |x_i - P|), of length
// |x1 - x0| / (r0 r1) (inversion in the unit circle: |u / |u|^2 - v / |v|^2| =
// |u - v| / (|u||v|)). Where both r_i(q) >= 2 radius, every r_i on the way from q to P is at
// least r_i(q) / 2, so phi(P) <= phi(q) + 4 radius |x1 - x0| / (r0(q) r1(q)); else phi <= pi
// (always). det keeps its sign over the disc where the edge's line passes farther than
// radius from q (det / |x1 - x0| is the signed distance to it, and det's error is as
// above); otherwise phi counts on both sides. The 1e-4 on radius covers the roundings of the
// lengths, the product and the quotient (2^-21 each); phi(q) has the slack above.
vec2 tile_azimuth_bound(ivec4 start, ivec4 end, ivec2 q, float radius) {
    vec2 a = vec2(end.xy - q), b = vec2(start.xy - q);
    float det = a.x * b.y - a.y * b.x;
    float dot_ab = a.x * b.x + a.y * b.y;
    float weight = abs(float(start.w));
    float reach = radius * 1.0001;
    float ra = length(a), rb = length(b), span = length(vec2(end.xy - start.xy));
    float phi = PI;
    if (ra > 2.0 * reach && rb > 2.0 * reach) {
        phi = min(PI, atan2_accurate(abs(det), dot_ab) + 4.0 * reach * span / (ra * rb));
    }
    phi = weight * (phi + 1.0 / 262144.0);
    float uncertain = (abs(a.x) + abs(a.y)) * (abs(b.x) + abs(b.y)) / 2097152.0;
    if (abs(det) - uncertain <= reach * span) return vec2(phi);
    return (det > 0.0) == (start.w > 0) ? vec2(phi, 0.0) : vec2(0.0, phi);
}
