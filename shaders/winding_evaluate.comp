#version 460
// fill_mode="winding": c (winding.glsl) at points of the runs of winding_decide.comp, summed
// over the boundary edges [edge_first, edge_end) (the host splits the edges into chunks; the
// sums start cleared): x = the terms that grow with the height, y = the others, z = a bound on
// the rounding of x + y (all over 4 pi). An item (a column, or a run) has one or two points,
// both in one column, so each edge's x-y part of its term is found once for both
// (winding.glsl, StripColumn). CURTAIN_GROUP / point_spread items per workgroup.
// The items, by stage:
//   0 (first round): each column with segments (its first run r: curtain[2r], [2r + 1]): the
//     lowest and highest voxels of its range in the box, which bound c on every segment of
//     the column. TILE_COLUMNS items per tile (its first group of slots, winding_columns.comp:
//     offsets). A column that winding_bound.comp decided (bounds[]: c is within 0.49 of 0 on
//     all of it, so s alone decides its segments; only flagged tiles list such columns'
//     segments) is not evaluated.
//   1 (second round): each run, at its lowest voxel and highest (curtain[3r], [3r + 2]; a run
//     of one voxel: its middle, curtain[3r + 1], only): most runs are decided by their ends,
//     and the later rounds evaluate the middles of the others. An end that is its column's
//     end in the box is copied from stage 0's evaluation (columns[]).
//   2 (later rounds): each run, at its middle (curtain[3r + 1]); winding_decide.comp carried
//     the two others over from the round before.
// A workgroup evaluates its items together: those with a point to evaluate are listed, and
// each gets as many of the group's lanes as the list allows (a power of two), which split the
// edges between them and add their parts up in a fixed order. A point's sum depends only on
// the list's length, so every run of the same job rounds it the same way; few items in a
// group (most are decided by a bound, or a later round has few runs: point_spread) cost a
// few edges per lane instead of all of them.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = CURTAIN_GROUP) in;  // before the includes (gl_WorkGroupSize)
#include "common.glsl"
#include "exact.glsl"
#include "winding.glsl"

#define NO_POINT 0xFFFFFFFFu
#define PART_RUN 8  // parts added in runs of this many first

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
    uint item_count;
    uint edge_first;
    uint edge_end;
    uint stage;          // above: 0, 1 or 2
    int column_lo;       // the lowest voxel of every column (box k_lo)
    int column_hi;       // one past its highest (box k_hi)
    uint point_spread;   // a workgroup takes CURTAIN_GROUP / point_spread items
};

// The items that evaluate c: (column i | j << 16, the heights k of their points, the second
// -1 if none) and where each point's c goes; each lane's parts of a listed item's sums.
shared ivec3 listed_points[gl_WorkGroupSize.x];
shared uvec2 listed_at[gl_WorkGroupSize.x];
shared uint listed_count;
shared uint listed_evaluations;  // the listed points (one or two per item)
shared vec4 parts[gl_WorkGroupSize.x];
shared vec4 second_parts[gl_WorkGroupSize.x];

// The curtain of a point of a column decided by a bound: winding_decide.comp reads
// s - above and s + below as the bounds of w on each of the column's segments (w = 1 marks
// it: not c at the point, never reused in stage 1).
vec4 bound_curtain(uint which, float above, float below) {
    return which == 0u ? vec4(-below, 0.0, 0.0, 1.0) : vec4(above, 0.0, 0.0, 1.0);
}

// c at the listed items' points over the edges [edge_first, edge_end), added to curtain[]:
// an item gets `lanes` lanes (the most that fit, a power of two), each sums every lanes-th
// edge, and the first adds the parts in lane order. Called by the whole workgroup.
void evaluate_listed() {
    uint count = listed_count;  // the same in every lane (read after a barrier)
    if (count == 0u) return;
    uint lane = gl_LocalInvocationID.x;
    uint lanes = 1u << findMSB(gl_WorkGroupSize.x / count);
    uint item = lane / lanes, slice = lane % lanes;
    ivec3 target = listed_points[min(item, count - 1u)];
    ivec2 column = ivec2(target.x & 0xFFFF, target.x >> 16);
    if (item < count) {
        curtain_parts(column, target.y, target.z, edge_first, edge_end, slice, lanes,
                      parts[lane], second_parts[lane]);
    }
    barrier();
    // more than PART_RUN parts: runs of PART_RUN added first, then the runs' sums
    uint step = lanes > uint(PART_RUN) ? uint(PART_RUN) : 1u;
    if (step > 1u) {
        if (item < count && slice % step == 0u) {
            vec4 run_a = vec4(0.0), run_b = vec4(0.0);
            for (uint part = lane; part < lane + step; ++part) {
                run_a += parts[part];
                run_b += second_parts[part];
            }
            parts[lane] = run_a;
            second_parts[lane] = run_b;
        }
        barrier();
    }
    if (item >= count || slice != 0u) return;
    vec4 sums_a = vec4(0.0), sums_b = vec4(0.0);
    for (uint part = lane; part < lane + lanes; part += step) {
        sums_a += parts[part];
        sums_b += second_parts[part];
    }
    uvec2 at = listed_at[item];
    curtain[at.x] += curtain_value(sums_a, edge_end - edge_first);
    if (target.z >= 0) curtain[at.y] += curtain_value(sums_b, edge_end - edge_first);
}

void main() {
    uint lane = gl_LocalInvocationID.x;
    if (lane == 0u) {
        listed_count = 0u;
        listed_evaluations = 0u;
    }
    uint index = flat_group_id() * (gl_WorkGroupSize.x / point_spread) + lane;
    bool listed = index < item_count && lane < gl_WorkGroupSize.x / point_spread;
    uint run_index = index, tile = index / uint(TILE_COLUMNS);
    if (stage == 0u) {  // TILE_COLUMNS items per tile: its columns' first runs (if any)
        uint group = listed ? offsets[tile] : 0u;
        listed = listed && offsets[tile + 1u] > group;
        run_index = group * uint(TILE_COLUMNS) + index % uint(TILE_COLUMNS);
    }
    uvec4 run = listed ? runs[run_index] : uvec4(NO_POINT);
    bool has_run = run.x != NO_POINT && (stage != 0u || run.z == run.w);
    int run_begin = int(run.y & 0xFFFFu), run_end = int(run.y >> 16);
    // the item's points: (height, where c goes, to evaluate) for the low one (or the only one)
    // and the high one
    int k_a = run_begin, k_b = run_end - 1;
    uint at_a = 3u * run_index, at_b = 3u * run_index + 2u;
    bool eval_a = has_run, eval_b = has_run;
    if (stage == 0u) {
        k_a = column_lo;
        k_b = column_hi - 1;
        at_a = 2u * run_index;
        at_b = at_a + 1u;
        vec2 bound = has_run ? bounds[tile * uint(TILE_COLUMNS) + index % uint(TILE_COLUMNS)]
                             : vec2(1.0);
        if (max(bound.x, bound.y) < 0.49) {
            // winding.glsl: -phi_- / 2 pi <= c <= phi_+ / 2 pi on the whole column. Where
            // both are below 0.49, s (an integer) decides every segment: the low point
            // stores -phi_- / 2 pi as its growing part, the high point phi_+ / 2 pi, so that
            // winding_decide.comp's bounds on a segment are s - phi_+ / 2 pi and
            // s + phi_- / 2 pi (both at least 0.01 from 1/2, which no rounding of the
            // comparison can cross).
            curtain[at_a] = bound_curtain(0u, bound.x, bound.y);
            curtain[at_b] = bound_curtain(2u, bound.x, bound.y);
            eval_a = eval_b = false;
        }
    } else if (stage == 2u || run_end - run_begin == 1) {  // the middle only
        k_a = (run_begin + run_end) >> 1;
        at_a = 3u * run_index + 1u;
        eval_b = false;
    } else {  // stage 1: an end that is its column's end in the box was evaluated in stage 0
        // (run.w: the column's run)
        vec4 low = has_run && k_a == column_lo ? columns[2u * run.w] : vec4(1.0);
        vec4 high = has_run && k_b == column_hi - 1 ? columns[2u * run.w + 1u] : vec4(1.0);
        if (low.w == 0.0) {
            curtain[at_a] = low;
            eval_a = false;
        }
        if (high.w == 0.0) {
            curtain[at_b] = high;
            eval_b = false;
        }
    }
    if (!eval_a) {  // the high point alone (if any) takes the first place
        k_a = k_b;
        at_a = at_b;
        eval_a = eval_b;
        eval_b = false;
    }
    barrier();  // listed_count cleared
    if (eval_a) {
        uint slot = atomicAdd(listed_count, 1u);
        listed_points[slot] = ivec3(int(run.x), k_a, eval_b ? k_b : -1);
        listed_at[slot] = uvec2(at_a, at_b);
        atomicAdd(listed_evaluations, eval_b ? 2u : 1u);
    }
    barrier();
    evaluate_listed();
    if (lane == 0u && edge_first == 0u && listed_evaluations != 0u) {
        atomicAdd(evaluated, listed_evaluations);
    }
}
