#version 460
// fill_mode="winding", segments that one point cannot decide: w is continuous along a
// segment but may cross 1/2 inside it near the boundary of an open mesh. Where |w - 1/2| at
// the segment's point does not exceed the bound on its change along the segment (plus
// rounding; winding_evaluate.comp), every voxel of the segment is evaluated.
//
// REFINE_STAGE 0, count: one thread per slot of winding_columns.comp (and one more, for the
//   total): the voxels to evaluate, end - begin if the slot's point cannot decide, else 0.
// REFINE_STAGE 1, emit: with offsets scanned, the points of each such segment, in order (a
//   run of voxels of one column: neighbours, so winding_evaluate.comp's groups stay close).
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Segments { uvec2 segments[]; };  // per slot
#if REFINE_STAGE == 0
layout(std430, binding = 1) readonly buffer Values { float values[]; };  // w per slot
layout(std430, binding = 2) readonly buffer Changes { float changes[]; };
layout(std430, binding = 3) writeonly buffer Offsets { uint offsets[]; };
#else
layout(std430, binding = 1) readonly buffer Offsets { uint offsets[]; };  // scanned
layout(std430, binding = 2) writeonly buffer Points { uvec2 points[]; };
#endif

layout(push_constant) uniform Params {
    uint slot_count;
};

void main() {
    uint s = flat_invocation_id();
#if REFINE_STAGE == 0
    if (s > slot_count) return;
    uint voxels = 0u;
    if (s < slot_count && segments[s].x != 0xFFFFFFFFu) {
        uint span = segments[s].y;
        bool decided = abs(values[s] - 0.5) > changes[s];  // false for NaN too
        voxels = decided ? 0u : (span >> 16) - (span & 0xFFFFu);
    }
    offsets[s] = voxels;
#else
    if (s >= slot_count || offsets[s + 1u] == offsets[s]) return;
    uvec2 segment = segments[s];
    uint begin = segment.y & 0xFFFFu, end = segment.y >> 16;
    for (uint k = begin; k < end; ++k) {
        points[offsets[s] + k - begin] = uvec2(segment.x, k);
    }
#endif
}
