#version 460
// Pass 5, unique-marking: flag the first pair of every tile in the sorted pair list, or,
// after the counting sort (FROM_HISTOGRAM 1), every tile whose pair count is not zero.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"

#if FROM_HISTOGRAM
layout(std430, binding = 0) readonly buffer Counts { uint counts[]; };  // pairs per tile key
#else
layout(std430, binding = 0) readonly buffer Pairs { uvec2 pairs[]; };
#endif
layout(std430, binding = 1) writeonly buffer Flags { uint flags[]; };

layout(push_constant) uniform Params {
    uint count;  // pairs, or tile keys
};

void main() {
    uint i = flat_invocation_id();
    if (i >= count) return;
#if FROM_HISTOGRAM
    flags[i] = uint(counts[i] != 0u);
#else
    flags[i] = uint(i == 0u || pairs[i].x != pairs[i - 1u].x);
#endif
}
