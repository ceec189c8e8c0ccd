#version 460
// Pass 3, pair emission: one thread per triangle writes a (tile key, triangle) pair for every
// tile it covers, at the offset the prefix scan gave it (tile keys: common.glsl, tile_key).
// With CONSERVATIVE 1, every tile it touches (setup.comp counted the same ones), each pair at
// the next free place of its tile (TileCursors: the exclusive scan of setup's per-tile counts,
// counted up here), so that the pairs come out grouped by tile in any order within a tile.
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

layout(std430, binding = 0) readonly buffer Records { TriangleRecord records[]; };
#if CONSERVATIVE
layout(std430, binding = 3) buffer TileCursors { uint tile_cursors[]; };
#else
layout(std430, binding = 1) readonly buffer Offsets { uint offsets[]; };  // exclusive scan of tile counts
#endif
layout(std430, binding = 2) writeonly buffer Pairs { uvec2 pairs[]; };    // (tile key, triangle)

layout(push_constant) uniform Params {
    uint triangle_count;
    Window window;
    uint fixed_error;  // delta of exact.glsl (setup.comp)
};

void main() {
    uint t = flat_invocation_id();
    if (t >= triangle_count) return;
    TriangleRecord r = records[t];
    if (r.c.w == 0) return;  // no tiles were counted (zero projected area, or none in the window)

    ivec2 lo = unpack_column(r.a.w);
    ivec2 hi = unpack_column(r.b.w);
#if !CONSERVATIVE
    uint out_index = offsets[t];
    Binning binning = triangle_binning(r.a.xyz, r.b.xyz, r.c.xyz, int64_t(fixed_error));
#endif
    for (int ty = lo.y >> TILE_SHIFT; ty <= (hi.y >> TILE_SHIFT); ++ty) {
#if CONSERVATIVE
        ivec2 span = touched_tile_span(r.a.xyz, r.b.xyz, r.c.xyz, ty, lo, hi);
        for (int tx = span.x; tx <= span.y; ++tx) {
            if (tile_touched(r.a.xyz, r.b.xyz, r.c.xyz, ivec2(tx, ty))) {
                uint key = tile_key(window, ivec2(tx, ty));
                pairs[atomicAdd(tile_cursors[key], 1u)] = uvec2(key, t);
            }
        }
#else
        ivec2 span = candidate_tiles(r.a.xyz, r.b.xyz, r.c.xyz, ty, lo, hi);
        for (int tx = span.x; tx <= span.y; ++tx) {
            if (tile_coverage(r.a.xyz, r.b.xyz, r.c.xyz, binning, ivec2(tx, ty), lo, hi) != 0u) {
                pairs[out_index] = uvec2(tile_key(window, ivec2(tx, ty)), t);
                ++out_index;
            }
        }
#endif
    }
}
