#version 460
// Between the tile-count scan and pair emission, when the host records a part's passes in one
// submission before it knows the pair count (voxelizer/pipeline/passes.py, PassRunner): the
// dispatch sizes of emission (one thread per triangle) and of the counting sort's passes over
// the pairs (one thread per pair), as VkDispatchIndirectCommands. Where the pairs do not fit
// the `capacity` the host sized the pair buffers for, or the 32-bit total may have wrapped,
// both are empty: nothing is emitted, grouped or filled, and the host runs the part again
// with what it reads back.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 1) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"

layout(std430, binding = 0) readonly buffer PairTotal { uint pair_count; };
layout(std430, binding = 1) readonly buffer WrapFlag { uint may_wrap; };
layout(std430, binding = 2) writeonly buffer PairDispatch {
    uvec4 emit_groups;  // x, y, z (and one unused word)
    uvec4 pair_groups;
};

layout(push_constant) uniform Params {
    uint triangle_count;
    uint capacity;      // pairs the pair buffers hold
    uint max_groups_x;  // the device's maxComputeWorkGroupCount[0], capped at 65,535
};

// Workgroups of WG_SIZE threads for `items`, folded into 2-D (common.glsl, flat_group_id).
uvec4 groups_for(uint items) {
    uint groups = (items + (WG_SIZE - 1u)) / WG_SIZE;
    uint rows = (groups + max_groups_x - 1u) / max_groups_x;
    return uvec4(min(groups, max_groups_x), rows, 1u, 0u);
}

void main() {
    bool fits = may_wrap == 0u && pair_count <= capacity;
    emit_groups = groups_for(fits ? triangle_count : 0u);
    pair_groups = groups_for(fits ? pair_count : 0u);
}
