#version 460
// fill_mode="winding": decide runs of voxels of one column, or split them. A run (i | j << 16,
// begin | end << 16, slot, the slot of the column's first run in the first two rounds) lies
// inside one segment (winding_columns.comp), so s is the segment's (crossings[slot]) on all
// of it; winding_runs.glsl bounds w on it from c at a height L at or below its lowest voxel
// and H at or above its highest (winding_evaluate.comp). A run whose whole range lies above
// 1/2 is solid (its bits are ORed into the grid, which the host cleared); below, empty; a
// voxel whose own c was evaluated is decided by w there. The rest go to the next round
// (next, next_count).
//
// By stage (winding_evaluate.comp's):
//   0 (first round): L and H are the ends of the column's range in the box (the run run.w
//     names holds them, curtain[2 run.w] and [2 run.w + 1]), which bound c on every segment
//     (for a column decided by a bound, winding_evaluate.comp stores -phi_- / 2 pi and
//     phi_+ / 2 pi as the growing parts there: the bounds become s - phi_+ / 2 pi and
//     s + phi_- / 2 pi); a segment they do not decide goes on whole.
//   1 (second round): c at the run's own lowest and highest voxels (curtain[3r], [3r + 2];
//     a run of one voxel: at it, [3r + 1]); a run they do not decide goes on whole, with
//     them (next_curtain), and the next round evaluates its middle.
//   2 (later rounds, when winding_bisect.comp does not take them): curtain holds three per
//     run (at L, at the middle voxel M = (begin + end) / 2, at H), and the two halves
//     [begin, M) and [M, end) are decided with (L, M) and (M, H): a half that is not
//     decided goes on with its two values, and the next round evaluates only its middle.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"

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
    uint stage;  // above: 0, 1 or 2
};

#include "winding_runs.glsl"

// A later round's half: decided, or on to the next round with c at L and H (its middle's
// sum cleared for the next evaluation).
void decide_half(uvec4 run, int begin, int end, float s, vec4 low, vec4 high) {
    int solid = verdict(s, low, high);
    if (solid == 1) fill_run(run.x, begin, end);
    if (solid == UNDECIDED) defer_run(run, begin, end, low, high, 0u);
}

void main() {
    uint index = flat_invocation_id();
    if (index >= run_count) return;
    uvec4 run = runs[index];
    if (run.x == NO_POINT) return;
    int begin = int(run.y & 0xFFFFu), end = int(run.y >> 16);
    float s = float(crossings[run.z]);
    if (stage == 0u) {
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
    if (stage == 1u) {
        decide_half(run, begin, end, s, low, high);
        return;
    }
    decide_half(run, begin, m, s, low, middle);
    if (end - m == 1) {
        decide_voxel(run, m, s, middle);
    } else {
        decide_half(run, m, end, s, middle, high);
    }
}
