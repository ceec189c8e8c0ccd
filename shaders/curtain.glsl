// fill_mode="winding": c at a point, the sum over the boundary edges of their strips' solid
// angles (winding.glsl), split between lanes (winding_evaluate.comp, winding_bisect.comp).
// The includer declares edges[] ((x0, m), (x1, 0) per edge) and includes winding.glsl.

// An edge's term (count m, its strip's angle and rounding bound) into a lane's sums.
void add_term(inout vec4 sums, int m, vec2 strip) {
    float term = float(m) * strip.x;
    if (term > 0.0) {
        sums.x += term;
    } else {
        sums.y += term;
    }
    sums.z += abs(float(m)) * strip.y;
    sums.w += abs(term);
}

// One lane's part of c at P: the edges first + slice, + lanes, ... below end. (growing
// terms, other terms, the terms' own rounding bounds, the sum of |terms|).
vec4 curtain_part(ivec3 p, uint first, uint end, uint slice, uint lanes) {
    vec4 sums = vec4(0.0);
    for (uint e = first + slice; e < end; e += lanes) {
        ivec4 start = edges[2u * e], stop = edges[2u * e + 1u];
        add_term(sums, start.w, strip_solid_angle(start.xyz, stop.xyz, p));
    }
    return sums;
}

// The parts of n edges' terms, added up: (growing, other, their rounding bound, 0) over
// 4 pi. n terms of one sign summed in m <= n parts and added are within (n + m) 2^-24 of
// their sum; (2 n + 16) 2^-24 covers it.
vec4 curtain_value(vec4 sums, uint n) {
    float bound = sums.z + sums.w * (float(n) + 8.0) / 8388608.0;
    return vec4(sums.x, sums.y, bound, 0.0) / FOUR_PI;
}
