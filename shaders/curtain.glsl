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

// One lane's parts of c at one or two heights of a column (k_b < 0: k_a only): the edges
// first + slice, + lanes, ... below end, each edge's x-y part found once for both (growing
// terms, other terms, the terms' own rounding bounds, the sum of |terms|).
void curtain_parts(ivec2 column, int k_a, int k_b, uint first, uint end, uint slice,
                   uint lanes, out vec4 sums_a, out vec4 sums_b) {
    sums_a = vec4(0.0);
    sums_b = vec4(0.0);
    ivec2 centre = voxel_centre(uvec3(uvec2(column), 0u)).xy;
    ivec3 p_a = ivec3(centre, voxel_centre(uvec3(0u, 0u, uint(k_a))).z);
    ivec3 p_b = ivec3(centre, voxel_centre(uvec3(0u, 0u, uint(max(k_b, 0)))).z);
    for (uint e = first + slice; e < end; e += lanes) {
        ivec4 start = edges[2u * e], stop = edges[2u * e + 1u];
        StripColumn part = strip_column(start.xyz, stop.xyz, centre);
        if (part.in_plane) {
            add_term(sums_a, start.w, strip_in_plane(start.xyz, stop.xyz, p_a));
            if (k_b >= 0) add_term(sums_b, start.w, strip_in_plane(start.xyz, stop.xyz, p_b));
        } else {
            add_term(sums_a, start.w, strip_above(part, start.z, stop.z, p_a.z));
            if (k_b >= 0) add_term(sums_b, start.w, strip_above(part, start.z, stop.z, p_b.z));
        }
    }
}

// The parts of n edges' terms, added up: (growing, other, their rounding bound, 0) over
// 4 pi. n terms of one sign summed in m <= n parts and added are within (n + m) 2^-24 of
// their sum; (2 n + 16) 2^-24 covers it.
vec4 curtain_value(vec4 sums, uint n) {
    float bound = sums.z + sums.w * (float(n) + 8.0) / 8388608.0;
    return vec4(sums.x, sums.y, bound, 0.0) / FOUR_PI;
}
