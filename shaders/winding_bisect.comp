#version 460
// fill_mode="winding": the rounds after the second, in one dispatch. A workgroup takes one
// run that winding_decide.comp left undecided, with c at its ends (L and H: curtain[3r] and
// [3r + 2]), and splits it as the rounds of winding_evaluate.comp and winding_decide.comp
// would: c at a voxel M, summed over every boundary edge by all the group's lanes (each
// every CURTAIN_GROUP-th edge, the parts added in a fixed order), then [begin, M) decided
// with (L, M) and [M, end) with (M, H) (winding_runs.glsl); an undecided half goes on the
// group's stack, depth first.
// M is the middle, (begin + end) / 2, except where the estimates of w at L and H lie on both
// sides of 1/2: then it is where w would cross 1/2 if it were linear in the height (every
// other split, so that a run is at least halved every two).
// c at L is always c at the run's lowest voxel (winding_decide.comp's second round evaluates
// the runs' own ends, and each split keeps it), so a lower half of one voxel is decided
// without an evaluation.
// After step_budget evaluations, or when the stack holds STACK_LEFT halves, what is left
// goes to the next dispatch in winding_decide.comp's format (next, next_curtain). The host
// dispatches this only when every edge fits in one dispatch (winding.py, EDGE_CHUNK).
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = CURTAIN_GROUP) in;  // before the includes (gl_WorkGroupSize)
#include "common.glsl"
#include "exact.glsl"
#include "winding.glsl"

// STACK_LEFT (a define of the host's, kernels.BISECT_LEFT): halves a run leaves to the next
// dispatch at most, as many as the host's buffers hold per run
#define PART_GROUPS 8  // the lanes' parts are added in PART_GROUPS groups, then the groups

layout(std430, binding = 0) readonly buffer Edges { ivec4 edges[]; };  // (x0, m), (x1, 0)
layout(std430, binding = 1) buffer Grid { uint grid[]; };
// (i | j << 16, begin | end << 16, slot, 1: split in the middle next), winding_decide.comp
layout(std430, binding = 2) readonly buffer Runs { uvec4 runs[]; };
layout(std430, binding = 3) readonly buffer Curtain { vec4 curtain[]; };  // 3 per run
layout(std430, binding = 4) readonly buffer Crossings { int crossings[]; };  // s per slot
layout(std430, binding = 5) writeonly buffer Next { uvec4 next[]; };  // STACK_LEFT per run
// runs left for the next dispatch, and the points whose c was evaluated (winding_evaluations)
layout(std430, binding = 6) buffer Counts { uint next_count; uint evaluated; };
layout(std430, binding = 7) writeonly buffer NextCurtain { vec4 next_curtain[]; };  // 3 per

layout(push_constant) uniform Params {
    Window window;
    uint run_count;
    uint edge_count;   // all of them: [0, edge_count)
    uint step_budget;  // evaluations per run and dispatch
};

#include "curtain.glsl"
#include "winding_runs.glsl"

// The halves still to decide: (begin | end << 16, c at L, c at H), the top last.
shared uint stack_span[STACK_LEFT];
shared vec4 stack_low[STACK_LEFT];
shared vec4 stack_high[STACK_LEFT];
shared bool stack_halves[STACK_LEFT];  // split in the middle (the parent was interpolated)
shared uint stack_size;
shared vec4 parts[gl_WorkGroupSize.x];
shared vec4 group_parts[PART_GROUPS];

// Every point of a run is in the run's column: with at most CACHE_EDGES edges (the host's
// kernels.BISECT_CACHED_EDGES), a lane keeps its edges' column parts (winding.glsl,
// StripColumn; CACHED_EDGES per lane) for the whole run, and each point costs only the
// terms' heights.
#define CACHED_EDGES 4
#if CACHE_EDGES > CACHED_EDGES * CURTAIN_GROUP
#error CACHE_EDGES: more edges than the lanes' registers hold
#endif
StripColumn cached[CACHED_EDGES];
ivec3 cached_ends[CACHED_EDGES];  // (z0, z1, m)

void cache_edges(ivec2 column) {
    uint lane = gl_LocalInvocationID.x;
    [[unroll]] for (uint k = 0u; k < CACHED_EDGES; ++k) {
        uint e = lane + k * gl_WorkGroupSize.x;
        if (e < edge_count) {
            ivec4 start = edges[2u * e], stop = edges[2u * e + 1u];
            cached[k] = strip_column(start.xyz, stop.xyz, column);
            cached_ends[k] = ivec3(start.z, stop.z, start.w);
        }
    }
}

// curtain_parts at p over every edge (lane, + CURTAIN_GROUP, ...) from the cached column
// parts: the same terms, added in the same order.
vec4 cached_part(ivec3 p) {
    uint lane = gl_LocalInvocationID.x;
    vec4 sums = vec4(0.0);
    [[unroll]] for (uint k = 0u; k < CACHED_EDGES; ++k) {
        uint e = lane + k * gl_WorkGroupSize.x;
        if (e < edge_count) {
            vec2 strip = cached[k].in_plane
                ? strip_in_plane(edges[2u * e].xyz, edges[2u * e + 1u].xyz, p)
                : strip_above(cached[k], cached_ends[k].x, cached_ends[k].y, p.z);
            add_term(sums, cached_ends[k].z, strip);
        }
    }
    return sums;
}

// A half with c at its ends: decided, or pushed. Returns the stack's new size.
uint decide_or_push(
    uvec4 run, int begin, int end, float s, vec4 low, vec4 high, bool halves, uint size
) {
    int solid = verdict(s, low, high);
    if (solid == 1) fill_run(run.x, begin, end);
    if (solid != UNDECIDED) return size;
    stack_span[size] = uint(begin) | (uint(end) << 16);
    stack_low[size] = low;
    stack_high[size] = high;
    stack_halves[size] = halves;
    return size + 1u;
}

// Where to split [begin, end): the middle, or, where the estimates of w - 1/2 at its ends
// (c at begin and at or above end - 1) differ in sign, where the line between them crosses 0.
int split_at(int begin, int end, float s, vec4 low, vec4 high, bool halves) {
    float below = s - (low.x + low.y) - 0.5, above = s - (high.x + high.y) - 0.5;
    if (halves || (below > 0.0) == (above > 0.0)) return (begin + end) >> 1;
    float t = below / (below - above);  // in [0, 1]
    return clamp(begin + int(t * float(end - begin)), begin + 1, end - 1);
}

void main() {
    uint lane = gl_LocalInvocationID.x;
    uint index = flat_group_id();
    if (index >= run_count) return;  // the whole group
    uvec4 run = runs[index];
    if (run.x == NO_POINT) return;  // the whole group
    float s = float(crossings[run.z]);
    if (lane == 0u) {
        stack_span[0] = run.y;
        stack_low[0] = curtain[3u * index];
        stack_high[0] = curtain[3u * index + 2u];
        stack_halves[0] = run.w != 0u;  // (winding_decide.comp's runs: 0)
        stack_size = 1u;
    }
    barrier();
    bool use_cache = edge_count <= uint(CACHE_EDGES);  // the same in every lane
    if (use_cache) cache_edges(voxel_centre(uvec3(run.x & 0xFFFFu, run.x >> 16, 0u)).xy);
    uint steps = 0u;
    for (; steps < step_budget; ++steps) {
        uint size = stack_size;  // the same in every lane (written before a barrier)
        if (size == 0u || size == uint(STACK_LEFT)) break;
        uint span = stack_span[size - 1u];
        int begin = int(span & 0xFFFFu), end = int(span >> 16);
        vec4 low = stack_low[size - 1u], high = stack_high[size - 1u];
        bool halves = stack_halves[size - 1u];
        int m = end - begin == 1 ? begin : split_at(begin, end, s, low, high, halves);
        ivec3 p = voxel_centre(uvec3(run.x & 0xFFFFu, run.x >> 16, uint(m)));
        if (use_cache) {
            parts[lane] = cached_part(p);
        } else {
            vec4 unused;
            curtain_parts(ivec2(run.x & 0xFFFFu, run.x >> 16), m, -1, 0u, edge_count, lane,
                          gl_WorkGroupSize.x, parts[lane], unused);
        }
        barrier();
        const uint width = gl_WorkGroupSize.x / PART_GROUPS;
        if (lane < PART_GROUPS) {
            vec4 sums = vec4(0.0);
            for (uint q = lane * width; q < (lane + 1u) * width; ++q) sums += parts[q];
            group_parts[lane] = sums;
        }
        barrier();
        if (lane == 0u) {
            vec4 sums = vec4(0.0);
            for (uint q = 0u; q < PART_GROUPS; ++q) sums += group_parts[q];
            vec4 middle = curtain_value(sums, edge_count);
            size -= 1u;  // popped
            if (end - begin == 1) {
                decide_voxel(run, begin, s, middle);
            } else {
                if (m - begin == 1) {
                    decide_voxel(run, begin, s, low);
                } else {
                    size = decide_or_push(run, begin, m, s, low, middle, !halves, size);
                }
                if (end - m == 1) {
                    decide_voxel(run, m, s, middle);
                } else {
                    size = decide_or_push(run, m, end, s, middle, high, !halves, size);
                }
            }
            stack_size = size;
        }
        barrier();
    }
    uint left = stack_size;
    if (lane < left) {
        uint span = stack_span[lane];
        uint how = uint(stack_halves[lane]);
        defer_run(run, int(span & 0xFFFFu), int(span >> 16), stack_low[lane], stack_high[lane], how);
    }
    if (lane == 0u && steps != 0u) atomicAdd(evaluated, steps);
}
