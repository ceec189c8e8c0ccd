#version 460
// fill_mode="winding", evaluation of w = s - w_C (winding.glsl) at points (voxel centres):
// one workgroup per TILE_COLUMNS consecutive points, which winding_columns.comp and
// winding_refine.comp lay out so that they are close. Values and changes are sums the host
// clears; each dispatch adds its part:
//
// walk 1 (start) or 2 (resume): s, by walking the triangle hierarchy (pipeline/winding.py)
//   with the group: every lane visits the same nodes in the same order (uniform control flow
//   and loads), those whose box reaches below the group's highest point within the group's
//   columns; at a leaf each lane tests the triangles against its own downward ray with the
//   exact predicates. Nodes are numbered as a heap (root 1, children 2n and 2n + 1) and
//   walked depth first without a stack, so a walk that reaches WALK_LIMIT steps (llvmpipe's
//   loop budget, tiles.glsl) leaves (node, s) in walks and counts itself in walk_count; the
//   host resumes it with walk 2 until none is left. A finished walk adds s to values.
// edges [edge_first, edge_end): subtracts those boundary edges' share of w_C from values and
//   adds to changes a bound on their rounding and, with with_change, on how much they can
//   change along the point's segment (segments, same index as points), so that the whole
//   segment is decided by its one point when |w - 1/2| > changes (winding_refine.comp).
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 1 << (2 * TILE_SHIFT)) in;  // before the includes (gl_WorkGroupSize)
#include "common.glsl"
#include "exact.glsl"
#include "winding.glsl"

#define WALK_LIMIT 40000u  // steps per invocation; the edge loop takes at most 2^14 more
#define NO_POINT 0xFFFFFFFFu

struct WindingNode {
    vec4 low;   // xyz: the box of the node's triangles (grid units, rounded outwards)
    vec4 high;  // an empty node has low > high
};

layout(std430, binding = 0) readonly buffer Nodes { WindingNode nodes[]; };  // nodes[n]: node n
layout(std430, binding = 1) readonly buffer Corners { int corners[]; };  // 9 per triangle
layout(std430, binding = 2) readonly buffer Edges { ivec4 edges[]; };  // (x0, m), (x1, 0)
layout(std430, binding = 3) readonly buffer Points { uvec2 points[]; };  // (i | j << 16, k)
layout(std430, binding = 4) readonly buffer Segments { uvec2 segments[]; };  // (ij, begin | end << 16)
layout(std430, binding = 5) buffer Values { float values[]; };  // w
layout(std430, binding = 6) buffer Changes { float changes[]; };  // the bound above
layout(std430, binding = 7) buffer Walks { uvec2 walks[]; };  // (node, s) of unfinished walks
layout(std430, binding = 8) buffer WalkCount { uint walk_count; };

layout(push_constant) uniform Params {
    uint point_count;
    uint depth;           // the leaves are nodes 2^depth ... 2^(depth + 1) - 1
    uint triangle_count;  // leaf l holds triangles [l WINDING_LEAF, (l + 1) WINDING_LEAF)
    uint edge_first;
    uint edge_end;
    uint walk;         // 0: none, 1: start, 2: resume
    uint with_change;  // 1: bound the change along the point's segment
};

ivec3 corner(uint t, uint k) {
    uint base = 9u * t + 3u * k;
    return ivec3(corners[base], corners[base + 1u], corners[base + 2u]);
}

shared vec3 group_low[TILE_COLUMNS];
shared vec3 group_high[TILE_COLUMNS];

void main() {
    uint first_index = flat_group_id() * uint(TILE_COLUMNS);
    if (first_index >= point_count) return;  // the whole group (uniform)
    uint index = first_index + gl_LocalInvocationID.x;
    bool stored = index < point_count;  // values, changes and walks have room for it
    uvec2 packed = stored ? points[index] : uvec2(NO_POINT);
    bool valid = packed.x != NO_POINT;
    uvec3 voxel = valid ? uvec3(packed.x & 0xFFFFu, packed.x >> 16, packed.y) : uvec3(0u);
    ivec3 p = voxel_centre(voxel);
    vec3 centre = vec3(voxel) + 0.5;

    if (walk != 0u) {
        group_low[gl_LocalInvocationID.x] = valid ? centre : vec3(3.0e38);
        group_high[gl_LocalInvocationID.x] = valid ? centre : vec3(-3.0e38);
        barrier();
        vec3 low = vec3(3.0e38), high = vec3(-3.0e38);
        for (uint lane = 0u; lane < uint(TILE_COLUMNS); ++lane) {
            low = min(low, group_low[lane]);
            high = max(high, group_high[lane]);
        }
        uint node = walk == 1u ? 1u : walks[first_index].x;  // the same in every lane
        int s = walk == 1u || !stored ? 0 : int(walks[index].y);
        uint leaves = 1u << depth;
        uint steps = 0u;
        if (low.x > high.x) node = 0u;  // no point in the group
        while (node != 0u && steps < WALK_LIMIT) {
            WindingNode n = nodes[node];
            bool reaches = all(lessThanEqual(n.low.xy, high.xy))
                        && all(greaterThanEqual(n.high.xy, low.xy)) && n.low.z < high.z;
            if (reaches && node >= leaves) {
                uint first = (node - leaves) * uint(WINDING_LEAF);
                [[unroll]] for (uint j = 0u; j < uint(WINDING_LEAF); ++j) {
                    uint t = first + j;
                    if (valid && t < triangle_count) {
                        s += downward_crossing(corner(t, 0u), corner(t, 1u), corner(t, 2u),
                                               ivec2(voxel.xy), int(voxel.z));
                    }
                }
                steps += uint(WINDING_LEAF);
            }
            steps += 1u;
            if (reaches && node < leaves) {
                node *= 2u;
            } else {  // the next node after this one's subtree: climb while a right child
                while ((node & 1u) != 0u) {
                    node >>= 1u;
                    steps += 1u;
                }
                node = node == 0u ? 0u : node + 1u;
            }
        }
        if (node != 0u) {
            if (stored) walks[index] = uvec2(node, uint(s));
            if (gl_LocalInvocationID.x == 0u) atomicAdd(walk_count, 1u);
        } else if (valid) {
            values[index] += float(s);
        }
    }

    if (edge_end > edge_first) {
        float low = centre.z, high = centre.z;
        if (with_change != 0u && valid) {
            uint span = segments[index].y;
            low = float(span & 0xFFFFu) + 0.5;
            high = float(span >> 16) - 0.5;
        }
        float sum = 0.0, bound = 0.0, magnitude = 0.0;
        for (uint e = edge_first; e < edge_end; ++e) {
            ivec4 start = edges[2u * e], end = edges[2u * e + 1u];
            vec3 strip = strip_solid_angle(start.xyz, end.xyz, p, low, high);
            float multiplicity = float(start.w);
            sum += multiplicity * strip.x;
            magnitude += abs(multiplicity * strip.x);
            bound += abs(multiplicity) * (strip.y + (strip.z < 0.0 ? 3.0e37 : strip.z));
        }
        float count = float(edge_end - edge_first);
        if (valid) {
            values[index] -= sum / FOUR_PI;
            changes[index] += (bound + magnitude * (count + 8.0) / 8388608.0) / FOUR_PI;
        }
    }
}
