#version 460
// Pass 5, unique-marking: flag the first pair of every tile in the sorted pair list.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Pairs { uvec2 pairs[]; };
layout(std430, binding = 1) writeonly buffer Flags { uint flags[]; };

layout(push_constant) uniform Params {
    uint pair_count;
};

void main() {
    uint i = flat_invocation_id();
    if (i >= pair_count) return;
    flags[i] = uint(i == 0u || pairs[i].x != pairs[i - 1u].x);
}
