#version 460
// Two-level triangle grids (after Kalojanov, Billeter and Slusallek 2011): each top cell's
// own resolution, from the references the top level gave it. A cell with n references is
// cut into round(side * cbrt(density * n / volume)) leaves along each axis (at least 1, at
// most `limit` on that axis: the leaves of a whole row of top cells stay within 8192, the
// fixed-point bound of cells.glsl); an empty cell gets none. Writes the resolution and the
// leaf count (whose exclusive scan, by the host, is each cell's first leaf), and adds the
// leaf counts to Totals as cells.comp adds references (64 bits, per workgroup first).
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer CellEnds { uint cell_ends[]; };
layout(std430, binding = 1) restrict writeonly buffer Resolutions { uvec4 resolutions[]; };
layout(std430, binding = 2) restrict writeonly buffer LeafCounts { uint leaf_counts[]; };
layout(std430, binding = 3) restrict buffer Totals { uint totals[]; };  // (low, high), cleared

layout(push_constant) uniform Params {
    uint cell_count;
    float density;  // leaves per reference
    float side_x;   // a top cell's sides (any unit)
    float side_y;
    float side_z;
    int limit_x;    // the most leaves along each axis
    int limit_y;
    int limit_z;
};

shared uint group_leaves;

uint resolve(uint cell) {
    if (cell >= cell_count) return 0u;
    uint references = cell_ends[cell] - (cell == 0u ? 0u : cell_ends[cell - 1u]);
    uvec3 r = uvec3(0u);
    if (references != 0u) {
        vec3 side = vec3(side_x, side_y, side_z);
        float per_unit = pow(density * float(references) / (side.x * side.y * side.z), 1.0 / 3.0);
        r = uvec3(clamp(ivec3(round(side * per_unit)), ivec3(1), ivec3(limit_x, limit_y, limit_z)));
    }
    resolutions[cell] = uvec4(r, 0u);
    uint leaves = r.x * r.y * r.z;
    leaf_counts[cell] = leaves;
    return leaves;
}

void main() {
    if (gl_LocalInvocationID.x == 0u) group_leaves = 0u;
    barrier();
    uint leaves = resolve(flat_invocation_id());
    if (leaves != 0u) atomicAdd(group_leaves, leaves);
    barrier();
    if (gl_LocalInvocationID.x == 0u && group_leaves != 0u) {
        uint before = atomicAdd(totals[0], group_leaves);
        if (before + group_leaves < before) atomicAdd(totals[1], 1u);
    }
}
