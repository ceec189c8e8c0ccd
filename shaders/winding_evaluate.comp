#version 460
// fill_mode="winding": c (winding.glsl) at both ends of each run of winding_decide.comp
// (point 2r: the run's lowest voxel, 2r + 1: its highest; in the first round, with
// whole_columns, the column's lowest and highest voxels in the box, for its first run
// only: those bound c on every segment of the column), one workgroup per TILE_COLUMNS
// points (neighbouring runs are close: winding_columns.comp), summed over the boundary edges
// [edge_first, edge_end) (the host clears the sums and splits the edges into chunks):
// x = the terms that grow with the height, y = the others, z = a bound on the rounding of
// x + y (all over 4 pi).
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 1 << (2 * TILE_SHIFT)) in;  // before the includes (gl_WorkGroupSize)
#include "common.glsl"
#include "exact.glsl"
#include "winding.glsl"

#define NO_POINT 0xFFFFFFFFu

layout(std430, binding = 0) readonly buffer Edges { ivec4 edges[]; };  // (x0, m), (x1, 0)
layout(std430, binding = 1) readonly buffer Runs { uvec4 runs[]; };  // winding_decide.comp
layout(std430, binding = 2) buffer Curtain { vec4 curtain[]; };  // per end of a run

layout(push_constant) uniform Params {
    uint point_count;  // twice the runs
    uint edge_first;
    uint edge_end;
    uint whole_columns;  // first round: only each column's first run, at the column's ends
    int column_lo;       // the lowest voxel of every column (box k_lo)
    int column_hi;       // one past its highest (box k_hi)
};

void main() {
    uint index = flat_group_id() * uint(TILE_COLUMNS) + gl_LocalInvocationID.x;
    if (index >= point_count) return;
    uvec4 run = runs[index >> 1];
    if (run.x == NO_POINT || (whole_columns != 0u && run.z != run.w)) return;
    uint low = run.y & 0xFFFFu, high = (run.y >> 16) - 1u;
    if (whole_columns != 0u) {
        low = uint(column_lo);
        high = uint(column_hi - 1);
    }
    uint k = (index & 1u) == 0u ? low : high;
    ivec3 p = voxel_centre(uvec3(run.x & 0xFFFFu, run.x >> 16, k));
    float growing = 0.0, other = 0.0, bound = 0.0, magnitude = 0.0;
    for (uint e = edge_first; e < edge_end; ++e) {
        ivec4 start = edges[2u * e], end = edges[2u * e + 1u];
        vec2 strip = strip_solid_angle(start.xyz, end.xyz, p);
        float term = float(start.w) * strip.x;
        if (term > 0.0) {
            growing += term;
        } else {
            other += term;
        }
        magnitude += abs(term);
        bound += abs(float(start.w)) * strip.y;
    }
    float count = float(edge_end - edge_first);
    // the sums' own rounding: at most (count + 2) 2^-24 of the magnitude each, both
    bound += magnitude * (count + 8.0) / 8388608.0;
    curtain[index] += vec4(growing, other, bound, 0.0) / FOUR_PI;
}
