#version 460
// fill_mode="winding": decide runs of voxels of one column, or split them. A run (i | j << 16,
// begin | end << 16, slot, the slot of the column's first run in the first two rounds) lies
// inside one segment (winding_columns.comp), so s is the segment's (crossings[slot]) on all
// of it, and c is a sum of terms each monotonic in the height (winding.glsl): with g the
// growing terms and o the others, evaluated at a height
// L at or below the run's lowest voxel and H at or above its highest (winding_evaluate.comp),
// every voxel of the run has
//
//     s - g(H) - o(L) <= w <= s - g(L) - o(H),
//
// each side within the sum of the two rounding bounds. A run whose whole range lies above
// 1/2 is solid (its bits are ORed into the grid, which the host cleared); below, empty; a
// voxel whose own c was evaluated is decided by w = s - g - o there (so only that rounding
// can differ from the exact rule). The rest go to the next round (next, next_count).
//
// First round (whole_columns): L and H are the ends of the column's range in the box (the
// run run.w names holds them, curtain[2 run.w] and [2 run.w + 1]), which bound c on every
// segment (for a column decided by a bound, winding_evaluate.comp stores -phi_- / 2 pi and
// phi_+ / 2 pi as the growing parts there: the bounds become s - phi_+ / 2 pi and
// s + phi_- / 2 pi); a segment they do not decide goes on whole, and the next round
// evaluates c at its lowest voxel, its middle and its highest. Later rounds: curtain holds
// three per run (at L, at the middle voxel M = (begin + end) / 2, at H), and the two halves
// [begin, M) and [M, end) are decided with (L, M) and (M, H): a half that is not decided
// goes on with its two values (next_curtain), and the next round evaluates only its middle.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"

#define NO_POINT 0xFFFFFFFFu
#define UNDECIDED -1

layout(std430, binding = 0) buffer Grid { uint grid[]; };
layout(std430, binding = 1) readonly buffer Runs { uvec4 runs[]; };
layout(std430, binding = 2) readonly buffer Curtain { vec4 curtain[]; };  // 2 or 3 per run
layout(std430, binding = 3) readonly buffer Crossings { int crossings[]; };  // s per slot
layout(std430, binding = 4) writeonly buffer Next { uvec4 next[]; };  // room for 2 per run
layout(std430, binding = 5) buffer NextCount { uint next_count; };
layout(std430, binding = 6) writeonly buffer NextCurtain { vec4 next_curtain[]; };  // 3 per

layout(push_constant) uniform Params {
    Window window;
    uint run_count;
    uint whole_columns;  // first round: c's bounds are the column's (run.w's curtain)
};

// 1: w > 1/2 on the whole run, 0: w <= 1/2 on it, UNDECIDED: the bounds straddle 1/2.
int verdict(float s, vec4 low, vec4 high) {
    float error = low.z + high.z;
    if (s - high.x - low.y - error > 0.5) return 1;
    if (s - low.x - high.y + error <= 0.5) return 0;
    return UNDECIDED;
}

// The run's voxels into the grid (cleared by the host). A word wholly inside the run is
// this invocation's alone (the runs of a column are disjoint): stored; the run's end words
// may hold another run's voxels too: ORed.
void fill_run(uint ij, int begin, int end) {
    uint base = column_base(window, ivec2(ij & 0xFFFFu, ij >> 16));
    int first = begin >> 5, last = (end - 1) >> 5;
    atomicOr(grid[base + uint(first)], word_range_mask(first, begin, end));
    for (int q = first + 1; q < last; ++q) grid[base + uint(q)] = 0xFFFFFFFFu;
    if (last > first) atomicOr(grid[base + uint(last)], word_range_mask(last, begin, end));
}

// A later round's half: decided, or on to the next round with c at L and H (its middle's
// sum cleared for the next evaluation).
void decide_half(uvec4 run, int begin, int end, float s, vec4 low, vec4 high) {
    int solid = verdict(s, low, high);
    if (solid == 1) fill_run(run.x, begin, end);
    if (solid != UNDECIDED) return;
    uint slot = atomicAdd(next_count, 1u);
    next[slot] = uvec4(run.x, uint(begin) | (uint(end) << 16), run.z, 0u);
    next_curtain[3u * slot] = low;
    next_curtain[3u * slot + 1u] = vec4(0.0);
    next_curtain[3u * slot + 2u] = high;
}

// Decided by w at the voxel itself (c evaluated there).
void decide_voxel(uvec4 run, int k, float s, vec4 at) {
    if (s - (at.x + at.y) > 0.5) fill_run(run.x, k, k + 1);
}

void main() {
    uint index = flat_invocation_id();
    if (index >= run_count) return;
    uvec4 run = runs[index];
    if (run.x == NO_POINT) return;
    int begin = int(run.y & 0xFFFFu), end = int(run.y >> 16);
    float s = float(crossings[run.z]);
    if (whole_columns != 0u) {
        int solid = verdict(s, curtain[2u * run.w], curtain[2u * run.w + 1u]);
        if (solid == 1) fill_run(run.x, begin, end);
        if (solid == UNDECIDED) next[atomicAdd(next_count, 1u)] = run;  // run.w: the column's
        return;
    }
    vec4 low = curtain[3u * index], middle = curtain[3u * index + 1u];
    vec4 high = curtain[3u * index + 2u];
    int m = (begin + end) >> 1;
    if (end - begin == 1) {
        decide_voxel(run, begin, s, middle);
        return;
    }
    decide_half(run, begin, m, s, low, middle);
    if (end - m == 1) {
        decide_voxel(run, m, s, middle);
    } else {
        decide_half(run, m, end, s, middle, high);
    }
}
