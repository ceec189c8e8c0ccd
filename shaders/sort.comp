#version 460
// Pass 4, bitonic sort of the (tile key, triangle) pairs by key, ascending. The pair count
// is padded to a power of two with key 0xFFFFFFFF, so padding sorts to the end.
//
// The classic network: for every block size k = 2, 4, ..., count and every distance
// j = k/2, ..., 1, element i is compared with i ^ j and the pair ordered ascending when
// (i & k) == 0, descending otherwise. Steps with j < 2*WG_SIZE touch only elements inside
// one block of 2*WG_SIZE values, so they run in shared memory, many steps per dispatch:
//   SORT_MODE 0: sort every block completely (all k <= 2*WG_SIZE);
//   SORT_MODE 1: one global step (k, j) with j >= 2*WG_SIZE;
//   SORT_MODE 2: finish block size k in shared memory: all j < 2*WG_SIZE.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"

#define LOCAL_BLOCK (2 * WG_SIZE)

layout(std430, binding = 0) buffer Pairs { uvec2 pairs[]; };

layout(push_constant) uniform Params {
    uint k;  // block size of the merge stage
    uint j;  // compare distance (SORT_MODE 1)
};

void order(inout uvec2 lo, inout uvec2 hi, bool ascending) {
    bool swap = (lo.x > hi.x) == ascending && lo.x != hi.x;
#if BRANCHLESS
    uvec2 first = mix(lo, hi, bvec2(swap));
    hi = mix(hi, lo, bvec2(swap));
    lo = first;
#else
    if (swap) {
        uvec2 t = lo;
        lo = hi;
        hi = t;
    }
#endif
}

#if SORT_MODE == 1
void main() {
    uint t = flat_invocation_id();
    uint i = ((t & ~(j - 1u)) << 1) | (t & (j - 1u));  // element i has bit j clear
    uvec2 lo = pairs[i];
    uvec2 hi = pairs[i | j];
    order(lo, hi, (i & k) == 0u);
    pairs[i] = lo;
    pairs[i | j] = hi;
}
#else
shared uvec2 block_pairs[LOCAL_BLOCK];

void local_steps(uint block_base, uint stage, uint first_distance) {
    uint tid = gl_LocalInvocationID.x;
    for (uint d = first_distance; d > 0u; d >>= 1) {
        uint i = ((tid & ~(d - 1u)) << 1) | (tid & (d - 1u));
        uvec2 lo = block_pairs[i];
        uvec2 hi = block_pairs[i | d];
        order(lo, hi, ((block_base + i) & stage) == 0u);
        block_pairs[i] = lo;
        block_pairs[i | d] = hi;
        barrier();
    }
}

void main() {
    uint block_base = flat_group_id() * LOCAL_BLOCK;
    uint tid = gl_LocalInvocationID.x;
    block_pairs[tid] = pairs[block_base + tid];
    block_pairs[tid + WG_SIZE] = pairs[block_base + tid + WG_SIZE];
    barrier();
#if SORT_MODE == 0
    for (uint stage = 2u; stage <= LOCAL_BLOCK; stage <<= 1) {
        local_steps(block_base, stage, stage >> 1);
    }
#else
    local_steps(block_base, k, WG_SIZE);
#endif
    pairs[block_base + tid] = block_pairs[tid];
    pairs[block_base + tid + WG_SIZE] = block_pairs[tid + WG_SIZE];
}
#endif
