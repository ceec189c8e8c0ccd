#version 460
// fill_mode="winding": c (winding.glsl) at points of the runs of winding_decide.comp,
// CURTAIN_GROUP / point_spread points per workgroup, summed over the boundary edges
// [edge_first, edge_end) (the host splits the edges into chunks; the sums start cleared):
// x = the terms that grow with the height, y = the others, z = a bound on the rounding of
// x + y (all over 4 pi).
// The points, by stage:
//   0 (first round): the lowest and highest voxels of the column's range in the box, for
//     each column's first run r only (curtain[2r], [2r + 1]): they bound c on every segment
//     of the column. 2 TILE_COLUMNS points per tile, its first group of slots
//     (winding_columns.comp: offsets), so a tile's columns are evaluated together.
//   1 (second round): each run's lowest voxel and highest (curtain[3r], [3r + 2]; a run of
//     one voxel: its middle, curtain[3r + 1], only): most runs are decided by their ends,
//     and the later rounds evaluate the middles of the others. An end that is its column's
//     end in the box is copied from stage 0's evaluation (columns[]).
//   2 (later rounds): each run's middle (curtain[3r + 1]); winding_decide.comp carried the
//     two others over from the round before.
// A workgroup evaluates its points together: those that need c are listed, and each gets
// as many of the group's lanes as the list allows (a power of two), which split the edges
// between them and add their parts up in a fixed order. A point's sum depends only on the
// list's length, so every run of the same job rounds it the same way; few points in a group
// (most are decided by a bound, or a later round has few runs: point_spread) cost a few
// edges per lane instead of all of them.
// In the first round, a column that winding_bound.comp decided (bounds[]: c is within 0.49
// of 0 on all of it, so s alone decides its segments) is not evaluated; only flagged tiles
// list such columns' segments.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = CURTAIN_GROUP) in;  // before the includes (gl_WorkGroupSize)
#include "common.glsl"
#include "exact.glsl"
#include "winding.glsl"

#define NO_POINT 0xFFFFFFFFu

layout(std430, binding = 0) readonly buffer Edges { ivec4 edges[]; };  // (x0, m), (x1, 0)
layout(std430, binding = 1) readonly buffer Runs { uvec4 runs[]; };  // winding_decide.comp
layout(std430, binding = 2) buffer Curtain { vec4 curtain[]; };  // 2 or 3 per run
layout(std430, binding = 3) readonly buffer Offsets { uint offsets[]; };  // winding_columns
layout(std430, binding = 4) readonly buffer Columns { vec4 columns[]; };  // stage 0's curtain
// winding_decide.comp's next_count, and the points whose c was evaluated (winding_evaluations)
layout(std430, binding = 5) buffer Counts { uint next_count; uint evaluated; };
// winding_bound.comp's (phi_+, phi_-) / 2 pi per column of the window's tiles (stage 0)
layout(std430, binding = 6) readonly buffer Bounds { vec2 bounds[]; };

#include "curtain.glsl"

layout(push_constant) uniform Params {
    Window window;       // the slab (stage 0: where each tile's columns are)
    uint point_count;
    uint edge_first;
    uint edge_end;
    uint stage;          // above: 0, 1 or 2
    int column_lo;       // the lowest voxel of every column (box k_lo)
    int column_hi;       // one past its highest (box k_hi)
    uint point_spread;   // a workgroup takes CURTAIN_GROUP / point_spread points (stage 0: 1)
};

// The points that evaluate c: (P, where c goes); each lane's part of a listed point's sums.
shared ivec4 listed_points[gl_WorkGroupSize.x];
shared uint listed_count;
shared vec4 parts[gl_WorkGroupSize.x];

// The curtain of a point of a column decided by a bound: winding_decide.comp reads
// s - above and s + below as the bounds of w on each of the column's segments (w = 1 marks
// it: not c at the point, never reused in stage 1).
vec4 bound_curtain(uint which, float above, float below) {
    return which == 0u ? vec4(-below, 0.0, 0.0, 1.0) : vec4(above, 0.0, 0.0, 1.0);
}

// c at the listed points over the edges [edge_first, edge_end), added to curtain[]: a point
// gets `lanes` lanes (the most that fit, a power of two), each sums every lanes-th edge, and
// the first adds the parts in lane order. Called by the whole workgroup.
void evaluate_listed() {
    uint count = listed_count;  // the same in every lane (read after a barrier)
    if (count == 0u) return;
    uint lane = gl_LocalInvocationID.x;
    uint lanes = 1u << findMSB(gl_WorkGroupSize.x / count);
    uint point = lane / lanes, slice = lane % lanes;
    ivec4 target = listed_points[min(point, count - 1u)];
    parts[lane] = point < count
        ? curtain_part(target.xyz, edge_first, edge_end, slice, lanes) : vec4(0.0);
    barrier();
    if (point >= count || slice != 0u) return;
    vec4 sums = vec4(0.0);
    for (uint part = lane; part < lane + lanes; ++part) sums += parts[part];
    curtain[uint(target.w)] += curtain_value(sums, edge_end - edge_first);
}

void main() {
    uint lane = gl_LocalInvocationID.x;
    if (lane == 0u) listed_count = 0u;
    uint index = flat_group_id() * (gl_WorkGroupSize.x / point_spread) + lane;
    uint run_index = index, which = 1u;  // which: 0 the low point, 1 the middle, 2 the high
    bool listed = index < point_count && lane < gl_WorkGroupSize.x / point_spread;
    uint at = stage == 2u ? 3u * index + 1u : index;
    uint tile = index / uint(2 * TILE_COLUMNS), local = index % uint(2 * TILE_COLUMNS);
    if (stage == 0u) {  // 2 TILE_COLUMNS points per tile: its columns' first runs (if any)
        uint group = listed ? offsets[tile] : 0u;
        listed = listed && offsets[tile + 1u] > group;
        run_index = group * uint(TILE_COLUMNS) + (local >> 1);
        which = 2u * (local & 1u);
        at = 2u * run_index + (local & 1u);
    } else if (stage == 1u) {
        run_index = index / 3u;
        which = index - 3u * run_index;
    }
    uvec4 run = listed ? runs[run_index] : uvec4(NO_POINT);
    uint run_begin = run.y & 0xFFFFu, run_end = run.y >> 16;
    bool has_point = run.x != NO_POINT && (stage != 0u || run.z == run.w)
                  && (stage != 1u || (which == 1u) == (run_end - run_begin == 1u));
    uint k = which == 0u ? run_begin : which == 1u ? (run_begin + run_end) >> 1 : run_end - 1u;
    if (stage == 0u) k = which == 0u ? uint(column_lo) : uint(column_hi - 1);
    uint column_end = which == 0u ? uint(column_lo) : uint(column_hi - 1);
    bool evaluate = has_point;  // no return before the last barrier
    if (stage == 1u && has_point && which != 1u && k == column_end) {
        // the run's end is its column's: stage 0 evaluated c there (run.w: the column's run)
        vec4 known = columns[2u * run.w + which / 2u];
        if (known.w == 0.0) {
            curtain[at] = known;
            evaluate = false;
        }
    }
    ivec3 p = voxel_centre(uvec3(run.x & 0xFFFFu, run.x >> 16, k));
    if (stage == 0u && has_point) {
        // winding.glsl: -phi_- / 2 pi <= c <= phi_+ / 2 pi on the whole column. Where both
        // are below 0.49, s (an integer) decides every segment: the low point stores
        // -phi_- / 2 pi as its growing part, the high point phi_+ / 2 pi, so that
        // winding_decide.comp's bounds on a segment are s - phi_+ / 2 pi and s + phi_- / 2 pi
        // (both at least 0.01 from 1/2, which no rounding of the comparison can cross).
        vec2 bound = bounds[tile * uint(TILE_COLUMNS) + (local >> 1)];
        if (max(bound.x, bound.y) < 0.49) {
            curtain[at] = bound_curtain(which, bound.x, bound.y);
            evaluate = false;
        }
    }
    barrier();  // listed_count cleared
    if (evaluate) listed_points[atomicAdd(listed_count, 1u)] = ivec4(p, int(at));
    barrier();
    evaluate_listed();
    if (lane == 0u && edge_first == 0u && listed_count != 0u) atomicAdd(evaluated, listed_count);
}
