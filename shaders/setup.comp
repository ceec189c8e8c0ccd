#version 460
// Pass 1, triangle setup: one thread per triangle. Converts the corners to fixed point,
// orients them counter-clockwise in xy (keeping the given orientation as the record's winding
// step), and counts the tiles holding at least one column centre the triangle covers (exactly
// the tiles pair emission will write). With CONSERVATIVE 1 (surface voxelization) it counts
// instead every tile whose closed square the triangle's projection touches, degenerate
// projections included (shaders/touch.glsl), and counts each such pair in its tile's entry
// of TilePairs instead of the triangle's: scanned, that says where emission writes the pair so
// that the pairs come out grouped by tile (no sort), and sums to the pairs' total.
#extension GL_GOOGLE_include_directive : require
#ifndef CONSERVATIVE
#define CONSERVATIVE 0
#endif
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"
#include "triangle.glsl"
#include "exact.glsl"
#include "tiles.glsl"
#include "touch.glsl"

#if INDEXED
layout(std430, binding = 0) readonly buffer Vertices { float vertices[]; };   // 3 per vertex
layout(std430, binding = 1) readonly buffer Indices { uint indices[]; };      // 3 per triangle
#else
layout(std430, binding = 0) readonly buffer Soup { float soup[]; };           // 9 per triangle
#endif
layout(std430, binding = 2) writeonly buffer Records { TriangleRecord records[]; };
layout(std430, binding = 4) buffer WrapFlag { uint may_wrap; };  // cleared by the host
#if CONSERVATIVE
layout(std430, binding = 5) buffer TilePairs { uint tile_pairs[]; };  // per tile key; cleared by the host
#else
layout(std430, binding = 3) writeonly buffer TileCounts { uint tile_counts[]; };
#endif

layout(push_constant) uniform Params {
    uint triangle_count;
    Window window;  // only columns inside it count
    uint tile_limit;  // more tiles than this in one triangle, and the scanned total may wrap
    uint fixed_error;  // delta of exact.glsl: the fixed-point corners' distance from the fine ones
};

vec3 corner(uint t, uint k) {
#if INDEXED
    uint v = indices[3u * t + k];
    return vec3(vertices[3u * v], vertices[3u * v + 1u], vertices[3u * v + 2u]);
#else
    uint base = 9u * t + 3u * k;
    return vec3(soup[base], soup[base + 1u], soup[base + 2u]);
#endif
}

void main() {
    uint t = flat_invocation_id();
    if (t >= triangle_count) return;

    ivec3 a = to_fixed(corner(t, 0u));
    ivec3 b = to_fixed(corner(t, 1u));
    ivec3 c = to_fixed(corner(t, 2u));
    int64_t twice_area = edge_function(a.xy, b.xy, c.xy);
#if BRANCHLESS
    bvec3 flip = bvec3(twice_area < 0);
    ivec3 second = mix(b, c, flip);
    c = mix(c, b, flip);
    b = second;
#else
    if (twice_area < 0) {
        ivec3 swap = b;
        b = c;
        c = swap;
    }
#endif

    ivec2 first_column = ivec2(0, window.row_lo), last_column = ivec2(window.nx, window.row_hi) - 1;
#if CONSERVATIVE
    // Columns whose closed squares the triangle's xy bounding box touches, in the window.
    ivec2 lo, hi;
    touched_rectangle(a, b, c, first_column, last_column, lo, hi);
    bool covers_columns = all(lessThanEqual(lo, hi));
#else
    // Columns whose centres i + 1/2 lie inside the bounding box of the fine triangle (that of
    // this one grown by delta, exact.glsl), clamped to the window. A triangle whose projection
    // has no area here may still have some in the fine coordinates: it is binned too.
    const int half_voxel = 1 << (FIXED_BITS - 1);
    int delta = int(fixed_error);
    ivec2 lo_fixed = min(min(a.xy, b.xy), c.xy) - half_voxel - delta;
    ivec2 hi_fixed = max(max(a.xy, b.xy), c.xy) - half_voxel + delta;
    ivec2 lo = max((lo_fixed + ((1 << FIXED_BITS) - 1)) >> FIXED_BITS, first_column);
    ivec2 hi = min(hi_fixed >> FIXED_BITS, last_column);

    bool covers_columns = (twice_area != 0 || fixed_error != 0u) && all(lessThanEqual(lo, hi));
#endif
    lo = min(lo, last_column);
    hi = max(hi, first_column);  // keep an inactive triangle's rectangle packable
    uint tiles = 0u;
    if (covers_columns) {
#if !CONSERVATIVE
        Binning binning = triangle_binning(a, b, c, int64_t(fixed_error));
#endif
        for (int ty = lo.y >> TILE_SHIFT; ty <= (hi.y >> TILE_SHIFT); ++ty) {
#if CONSERVATIVE
            ivec2 span = touched_tile_span(a, b, c, ty, lo, hi);
            for (int tx = span.x; tx <= span.y; ++tx) {
                if (tile_touched(a, b, c, ivec2(tx, ty))) {
                    ++tiles;
                    atomicAdd(tile_pairs[tile_key(window, ivec2(tx, ty))], 1u);
                }
            }
#else
            ivec2 span = candidate_tiles(a, b, c, ty, lo, hi);
            for (int tx = span.x; tx <= span.y; ++tx) {
                tiles += uint(tile_coverage(a, b, c, binning, ivec2(tx, ty), lo, hi) != 0u);
            }
#endif
        }
    }
    records[t].a = ivec4(a, int(pack_column(lo)));
    records[t].b = ivec4(b, int(pack_column(hi)));
    // Crossing it upwards enters the surface where it faces down (as given, clockwise in xy).
    int step = select_int(-1, 1, twice_area < 0);
    records[t].c = ivec4(c, select_int(0, step, covers_columns));
#if !CONSERVATIVE
    tile_counts[t] = tiles;
#endif
    if (tiles > tile_limit) atomicOr(may_wrap, 1u);
}
