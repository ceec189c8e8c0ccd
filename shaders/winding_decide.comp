#version 460
// fill_mode="winding": decide runs of voxels of one column, or split them. A run (i | j << 16,
// begin | end << 16, slot, 0) lies inside one segment (winding_columns.comp), so s is the
// segment's (crossings[slot]) on all of it, and c is a sum of terms each monotonic in the
// height (winding.glsl): with g the growing terms and o the others, evaluated at the run's
// lowest voxel (L) and highest (H) by winding_evaluate.comp, every voxel of the run has
//
//     s - g(H) - o(L) <= w <= s - g(L) - o(H),
//
// each side within the sum of the two rounding bounds. A run whose whole range lies above
// 1/2 is solid (its bits are ORed into the grid, which the host cleared); below, empty; a
// run of one voxel is decided by w = s - g - o there (so only that rounding can differ from
// the exact rule); any other run is split into halves, appended to next (next_count), for
// the next round. In the first round (whole_columns) L and H are the ends of the column's
// range in the box (run.w names the run that holds them), which bound c on every segment.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"

#define NO_POINT 0xFFFFFFFFu

layout(std430, binding = 0) buffer Grid { uint grid[]; };
layout(std430, binding = 1) readonly buffer Runs { uvec4 runs[]; };
layout(std430, binding = 2) readonly buffer Curtain { vec4 curtain[]; };  // 2 per run
layout(std430, binding = 3) readonly buffer Crossings { int crossings[]; };  // s per slot
layout(std430, binding = 4) writeonly buffer Next { uvec4 next[]; };  // room for 2 per run
layout(std430, binding = 5) buffer NextCount { uint next_count; };

layout(push_constant) uniform Params {
    Window window;
    uint run_count;
    uint whole_columns;  // first round: c's bounds are the column's (run.w's curtain)
};

void main() {
    uint index = flat_invocation_id();
    if (index >= run_count) return;
    uvec4 run = runs[index];
    if (run.x == NO_POINT) return;
    int begin = int(run.y & 0xFFFFu), end = int(run.y >> 16);
    float s = float(crossings[run.z]);
    uint at = whole_columns != 0u ? run.w : index;
    vec4 low = curtain[2u * at], high = curtain[2u * at + 1u];
    float error = low.z + high.z;
    bool solid;
    if (end - begin == 1 && whole_columns == 0u) {
        solid = s - (low.x + low.y) > 0.5;
    } else if (s - high.x - low.y - error > 0.5) {
        solid = true;
    } else if (s - low.x - high.y + error <= 0.5) {
        solid = false;
    } else {
        if (end - begin == 1) {  // first round: evaluated at its own voxel next
            next[atomicAdd(next_count, 1u)] = uvec4(run.x, run.y, run.z, 0u);
            return;
        }
        uint slot = atomicAdd(next_count, 2u);
        int middle = (begin + end) >> 1;
        next[slot] = uvec4(run.x, uint(begin) | (uint(middle) << 16), run.z, 0u);
        next[slot + 1u] = uvec4(run.x, uint(middle) | (uint(end) << 16), run.z, 0u);
        return;
    }
    if (!solid) return;
    uint base = column_base(window, ivec2(run.x & 0xFFFFu, run.x >> 16));
    for (int q = begin >> 5; q <= (end - 1) >> 5; ++q) {
        atomicOr(grid[base + uint(q)], word_range_mask(q, begin, end));
    }
}
