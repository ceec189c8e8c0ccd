#version 460
// Pass 4, the counting-sort alternative to the bitonic sort: pairs grouped by tile key with a
// histogram over all (N/4)^2 tiles. Order within a tile is arbitrary, which the fill does not
// see (each crossing flips a bit; XOR does not care about order).
//   COUNT_MODE 0: histogram, counts[key] += 1 for every pair;
//   COUNT_MODE 1: scatter, every pair to cursor[key]++ (cursor starts as the scanned counts).
// The pair count is read from the device (the tile-count scan's total): the host may record
// these passes before it knows the count (pair_dispatch.comp sizes their dispatch then).
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Pairs { uvec2 pairs[]; };
layout(std430, binding = 1) buffer Counters { uint counters[]; };  // counts, or cursors
layout(std430, binding = 2) writeonly buffer Grouped { uvec2 grouped[]; };

layout(std430, binding = 3) readonly buffer PairTotal { uint pair_count; };  // the scan's total

void main() {
    uint i = flat_invocation_id();
    if (i >= pair_count) return;
    uvec2 pair = pairs[i];
#if COUNT_MODE == 0
    atomicAdd(counters[pair.x], 1u);
#else
    grouped[atomicAdd(counters[pair.x], 1u)] = pair;
#endif
}
