#version 460
// Face ids for the SVO: the voxels of a slab's face-id grid (shaders/surface.comp, FACE_IDS)
// that hold an id, gathered as (voxel, id) pairs, so that only they come back to the host.
// Thread t owns ids [t * GATHER_ITEMS, (t + 1) * GATHER_ITEMS) of the grid (GATHER_ITEMS, a
// host define, is a multiple of 4 that divides the grid's size: nx and nz are multiples of
// 4), read as whole uvec4s. No barrier, no loop the unroll does not remove.
//
// GATHER_STAGE 0: counts[t] = the ids thread t's voxels hold.
// GATHER_STAGE 1: after the exclusive scan of the counts, thread t writes its pairs
// (index in the grid, id) from offset counts[t] on, in increasing index: the pairs come out
// in the grid's order on every device.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"

#define NO_FACE 0xFFFFFFFFu
#define GATHER_QUADS (GATHER_ITEMS / 4)

layout(std430, binding = 0) readonly buffer FaceIds { uvec4 face_quads[]; };
#if GATHER_STAGE == 0
layout(std430, binding = 1) writeonly buffer Counts { uint counts[]; };
#else
layout(std430, binding = 1) readonly buffer Counts { uint counts[]; };
layout(std430, binding = 2) writeonly buffer Marked { uvec2 marked[]; };
#endif

layout(push_constant) uniform Params {
    uint threads;  // ids in the slab's grid / GATHER_ITEMS
};

void main() {
    uint thread = flat_invocation_id();
    if (thread >= threads) return;
    uint first_quad = thread * GATHER_QUADS;
#if GATHER_STAGE == 0
    uint count = 0u;
    [[unroll]] for (uint q = 0u; q < GATHER_QUADS; ++q) {
        uvec4 held = uvec4(notEqual(face_quads[first_quad + q], uvec4(NO_FACE)));
        count += held.x + held.y + held.z + held.w;
    }
    counts[thread] = count;
#else
    uint at = counts[thread];
    [[unroll]] for (uint q = 0u; q < GATHER_QUADS; ++q) {
        uvec4 ids = face_quads[first_quad + q];
        [[unroll]] for (uint lane = 0u; lane < 4u; ++lane) {
            if (ids[lane] != NO_FACE) {
                marked[at] = uvec2((first_quad + q) * 4u + lane, ids[lane]);
                ++at;
            }
        }
    }
#endif
}
