#version 460
// Pass 2 (and the compaction's slot numbering): exclusive prefix sum of uints, in place.
//
// Multi-level and work-efficient: SCAN_ADD == 0 scans each block of SCAN_BLOCK values and
// writes the block's total to block_sums; the host scans block_sums the same way
// (recursively, until one block remains, whose total is the grand total), then SCAN_ADD == 1
// adds each block's scanned offset back to its values.
//
// Values move four at a time (uvec4): the host binds the buffer rounded up to 16 bytes, and
// the values past `count` in the last quad are written back unchanged. On lavapipe every
// memory instruction costs a loop over the SIMD lanes, so a quad costs what one value does.
//
// SUBGROUP_SCAN 1 (the device has subgroup arithmetic in compute): each subgroup scans its
// threads' totals with subgroupInclusiveAdd and one thread scans the subgroup totals: two
// barriers. SUBGROUP_SCAN 0: a Hillis-Steele scan over the threads in shared memory.
#extension GL_GOOGLE_include_directive : require
#if SUBGROUP_SCAN
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"

#define ITEMS_PER_THREAD SCAN_ITEMS  // from the host (gpu/scan.py), like WG_SIZE; a multiple of 4
#define QUADS_PER_THREAD (ITEMS_PER_THREAD / 4)
#define SCAN_BLOCK (WG_SIZE * ITEMS_PER_THREAD)

layout(std430, binding = 0) buffer Values { uvec4 quads[]; };
layout(std430, binding = 1) buffer BlockSums { uint block_sums[]; };

layout(push_constant) uniform Params {
    uint count;
};

// Keeps the values past `count` as they were, so padding is never disturbed.
uvec4 inside(uint first_index, uvec4 new_values, uvec4 old_values) {
    bvec4 valid = lessThan(uvec4(first_index) + uvec4(0u, 1u, 2u, 3u), uvec4(count));
    return mix(old_values, new_values, valid);
}

#if SCAN_ADD == 0
shared uint partials[WG_SIZE];

#if SUBGROUP_SCAN
// A thread's place in the block: subgroups in order, lanes in order inside them, so the
// subgroup scan runs over consecutive values whatever the hardware's thread numbering.
uint thread_slot() {
    return gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
}

uint inclusive_over_threads(uint value) {
    uint inclusive = subgroupInclusiveAdd(value);
    if (gl_SubgroupInvocationID == gl_SubgroupSize - 1u) partials[gl_SubgroupID] = inclusive;
    barrier();
    if (gl_LocalInvocationID.x == 0u) {
        uint sum = 0u;
        for (uint s = 0u; s < gl_NumSubgroups; ++s) {
            uint total = partials[s];
            partials[s] = sum;
            sum += total;
        }
    }
    barrier();
    return partials[gl_SubgroupID] + inclusive;
}
#else
uint thread_slot() {
    return gl_LocalInvocationID.x;
}

uint inclusive_over_threads(uint value) {
    uint tid = gl_LocalInvocationID.x;
    partials[tid] = value;
    barrier();
    for (uint stride = 1u; stride < WG_SIZE; stride <<= 1) {
        uint add = tid >= stride ? partials[tid - stride] : 0u;
        barrier();
        partials[tid] += add;
        barrier();
    }
    return partials[tid];
}
#endif

void main() {
    uint block = flat_group_id();
    uint slot = thread_slot();
    uint first = block * SCAN_BLOCK + slot * ITEMS_PER_THREAD;
    uint quad_count = (count + 3u) >> 2;

    uvec4 values[QUADS_PER_THREAD];
    uvec4 scanned[QUADS_PER_THREAD];
    uint running = 0u;
    [[unroll]] for (uint q = 0u; q < QUADS_PER_THREAD; ++q) {
        uint quad = (first >> 2) + q;
        values[q] = quad < quad_count ? quads[quad] : uvec4(0u);
        uvec4 v = inside(first + 4u * q, values[q], uvec4(0u));
        scanned[q] = uvec4(running, running + v.x, running + v.x + v.y, running + v.x + v.y + v.z);
        running += v.x + v.y + v.z + v.w;
    }

    uint inclusive = inclusive_over_threads(running);
    uint before = inclusive - running;

    [[unroll]] for (uint q = 0u; q < QUADS_PER_THREAD; ++q) {
        uint quad = (first >> 2) + q;
        if (quad < quad_count) quads[quad] = inside(first + 4u * q, scanned[q] + before, values[q]);
    }
    if (slot == WG_SIZE - 1u) block_sums[block] = inclusive;
}
#else
void main() {
    uint block = flat_group_id();
    uint offset = block_sums[block];
    uint quad_count = (count + 3u) >> 2;
    GPU_UNROLL for (uint q = 0u; q < QUADS_PER_THREAD; ++q) {
        uint quad = block * (SCAN_BLOCK / 4u) + q * WG_SIZE + gl_LocalInvocationID.x;
        if (quad < quad_count) {
            uvec4 values = quads[quad];
            quads[quad] = inside(quad * 4u, values + offset, values);
        }
    }
}
#endif
