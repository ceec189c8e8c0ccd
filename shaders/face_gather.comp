#version 460
// Face ids for the SVO: the voxels of a slab's face-id grid (shaders/surface.comp, FACE_IDS)
// that hold an id, gathered as (voxel, id) pairs, so that only they come back to the host.
// One thread per column (nz consecutive ids, columns x fastest, then rows).
//
// GATHER_STAGE 0: counts[c] = the voxels of column c that hold an id.
// GATHER_STAGE 1: after the exclusive scan of the counts, column c writes its voxels'
// (c * nz + k, id) from offset counts[c] on, in increasing k: the pairs come out in the
// grid's order, whatever the device.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"

#define NO_FACE 0xFFFFFFFFu

layout(std430, binding = 0) readonly buffer FaceIds { uint face_ids[]; };
#if GATHER_STAGE == 0
layout(std430, binding = 1) writeonly buffer Counts { uint counts[]; };
#else
layout(std430, binding = 1) readonly buffer Counts { uint counts[]; };
layout(std430, binding = 2) writeonly buffer Marked { uvec2 marked[]; };
#endif

layout(push_constant) uniform Params {
    uint columns;  // nx * rows of the slab
    uint nz;       // ids per column (nz <= 8192: well under llvmpipe's loop guard)
};

void main() {
    uint column = flat_invocation_id();
    if (column >= columns) return;
    uint base = column * nz;
#if GATHER_STAGE == 0
    uint count = 0u;
    for (uint k = 0u; k < nz; ++k) {
        count += uint(face_ids[base + k] != NO_FACE);
    }
    counts[column] = count;
#else
    uint at = counts[column];
    for (uint k = 0u; k < nz; ++k) {
        uint id = face_ids[base + k];
        if (id != NO_FACE) {
            marked[at] = uvec2(base + k, id);
            ++at;
        }
    }
#endif
}
