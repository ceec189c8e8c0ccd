#version 460
// Pass 2 (and the compaction's slot numbering): exclusive prefix sum of uints, in place.
//
// Multi-level and work-efficient: SCAN_ADD == 0 scans each block of SCAN_BLOCK values in
// shared memory and writes the block's total to block_sums; the host scans block_sums the
// same way (recursively, until one block remains, whose total is the grand total), then
// SCAN_ADD == 1 adds each block's scanned offset back to its values.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"

#define ITEMS_PER_THREAD SCAN_ITEMS  // from the host (passes.py), like WG_SIZE
#define SCAN_BLOCK (WG_SIZE * ITEMS_PER_THREAD)

layout(std430, binding = 0) buffer Values { uint values[]; };
layout(std430, binding = 1) buffer BlockSums { uint block_sums[]; };

layout(push_constant) uniform Params {
    uint count;
};

#if SCAN_ADD == 0
shared uint thread_totals[WG_SIZE];

void main() {
    uint block = flat_group_id();
    uint tid = gl_LocalInvocationID.x;
    uint base = block * SCAN_BLOCK + tid * ITEMS_PER_THREAD;

    uint items[ITEMS_PER_THREAD];
    uint running = 0u;
    [[unroll]] for (uint q = 0u; q < ITEMS_PER_THREAD; ++q) {
        uint index = base + q;
        items[q] = running;
        running += index < count ? values[index] : 0u;
    }

    // Inclusive scan of the per-thread totals (Hillis-Steele over WG_SIZE entries).
    thread_totals[tid] = running;
    barrier();
    for (uint stride = 1u; stride < WG_SIZE; stride <<= 1) {
        uint add = tid >= stride ? thread_totals[tid - stride] : 0u;
        barrier();
        thread_totals[tid] += add;
        barrier();
    }
    uint before = tid > 0u ? thread_totals[tid - 1u] : 0u;

    [[unroll]] for (uint q = 0u; q < ITEMS_PER_THREAD; ++q) {
        uint index = base + q;
        if (index < count) values[index] = items[q] + before;
    }
    if (tid == WG_SIZE - 1u) block_sums[block] = thread_totals[tid];
}
#else
void main() {
    uint block = flat_group_id();
    uint offset = block_sums[block];
    uint base = block * SCAN_BLOCK + gl_LocalInvocationID.x;
    [[unroll]] for (uint q = 0u; q < ITEMS_PER_THREAD; ++q) {
        uint index = base + q * WG_SIZE;
        if (index < count) values[index] += offset;
    }
}
#endif
