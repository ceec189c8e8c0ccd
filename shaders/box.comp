#version 460
// Triangle grids: the triangles that touch a box (voxelizer/trigrid/queries.py), exactly:
// the closed triangle (fixed-point corners, as the grid holds them) against the closed box
// [lo, hi] (fixed point too: the host rounds its corners as it rounds the vertices),
// decided by the separating-axis test on 13 axes in integers (box_touched).
//
// One module for the three stages (the shipped SPIR-V stays small: tests/test_spirv.py); the
// push constant `stage` chooses, and every stage binds every buffer.
//   stage 0: one workgroup per cell the box touches (the cells first + [0, count)),
//     its threads sharing the cell's triangles; a triangle that touches the box sets its
//     bit in Flags (cleared by the host). A triangle in several cells is tested in each
//     until one sets its bit.
//   stage 1: one thread per word of Flags: its bits counted into WordCounts, which the
//     host scans.
//   stage 2: one thread per word: the indices of its bits written to Found from its
//     scanned count on, so the triangles come out in increasing order, each once.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"
#include "triangle.glsl"
#include "exact.glsl"
#include "touch.glsl"
#include "surface.glsl"

layout(std430, binding = 0) restrict readonly buffer Records { TriangleRecord records[]; };
layout(std430, binding = 1) restrict readonly buffer CellEnds { uint cell_ends[]; };
layout(std430, binding = 2) restrict readonly buffer TriangleIds { uint triangle_ids[]; };
layout(std430, binding = 3) restrict buffer Flags { uint flags[]; };
layout(std430, binding = 4) restrict buffer WordCounts { uint word_counts[]; };
layout(std430, binding = 5) restrict writeonly buffer Found { uint found[]; };

layout(push_constant) uniform Params {
    int lo_x;  // the box, fixed point
    int lo_y;
    int lo_z;
    int hi_x;
    int hi_y;
    int hi_z;
    int first_x;  // the first cell it touches
    int first_y;
    int first_z;
    int count_x;  // cells it touches along each axis
    int count_y;
    int count_z;
    int nx;  // the grid's cells
    int ny;
    int nz;
    uint word_count;  // words of Flags
    uint stage;
};

// The projections of the closed triangle and the closed box [lo, hi] onto the axis
// e_axis x edge overlap (coordinates in [0, 2^29]: every value below 2^61).
bool edge_axis_overlaps(ivec3 a, ivec3 b, ivec3 c, ivec3 edge, int axis, ivec3 lo, ivec3 size) {
    ivec3 d = axis == 0 ? ivec3(0, -edge.z, edge.y)
                        : (axis == 1 ? ivec3(edge.z, 0, -edge.x) : ivec3(-edge.y, edge.x, 0));
    ivec3 pa = a - lo, pb = b - lo, pc = c - lo;
    int64_t qa = mul_wide(d.x, pa.x) + mul_wide(d.y, pa.y) + mul_wide(d.z, pa.z);
    int64_t qb = mul_wide(d.x, pb.x) + mul_wide(d.y, pb.y) + mul_wide(d.z, pb.z);
    int64_t qc = mul_wide(d.x, pc.x) + mul_wide(d.y, pc.y) + mul_wide(d.z, pc.z);
    int64_t box_min = mul_wide(min(d.x, 0), size.x) + mul_wide(min(d.y, 0), size.y)
                      + mul_wide(min(d.z, 0), size.z);
    int64_t box_max = mul_wide(max(d.x, 0), size.x) + mul_wide(max(d.y, 0), size.y)
                      + mul_wide(max(d.z, 0), size.z);
    return min(qa, min(qb, qc)) <= box_max && max(qa, max(qb, qc)) >= box_min;
}

// True iff the closed triangle a, b, c meets the closed box [lo, hi] (fixed point).
bool box_touched(ivec3 a, ivec3 b, ivec3 c, ivec3 lo, ivec3 hi) {
    if (any(greaterThan(min(min(a, b), c), hi)) || any(lessThan(max(max(a, b), c), lo))) {
        return false;
    }
    ivec3 size = hi - lo;
    ivec3 edges[3] = ivec3[3](b - a, c - b, a - c);
    for (int e = 0; e < 3; ++e) {
        for (int axis = 0; axis < 3; ++axis) {
            if (!edge_axis_overlaps(a, b, c, edges[e], axis, lo, size)) return false;
        }
    }
    // The normal N: the box's N-projection must reach N . a from both sides.
    i64vec3 normal = cross64(b - a, c - a);
    if (all(equal(normal, i64vec3(0)))) return true;
    ivec3 least = lo + size * ivec3(lessThan(normal, i64vec3(0)));
    ivec3 most = lo + size * ivec3(greaterThan(normal, i64vec3(0)));
    Wide below = Wide(0l, 0l);  // N . (least - a) <= 0
    add_product(below, -normal.x, least.x - a.x);
    add_product(below, -normal.y, least.y - a.y);
    add_product(below, -normal.z, least.z - a.z);
    Wide above = Wide(0l, 0l);  // N . (most - a) >= 0
    add_product(above, normal.x, most.x - a.x);
    add_product(above, normal.y, most.y - a.y);
    add_product(above, normal.z, most.z - a.z);
    return below.hi >= 0 && above.hi >= 0;
}

void test_cell_triangles() {
    uint group = flat_group_id();
    uvec3 count = uvec3(count_x, count_y, count_z);
    if (group >= count.x * count.y * count.z) return;
    ivec3 cell = ivec3(first_x, first_y, first_z)
                 + ivec3(group / (count.y * count.z), (group / count.z) % count.y, group % count.z);
    uint key = (uint(cell.x) * uint(ny) + uint(cell.y)) * uint(nz) + uint(cell.z);
    uint end = cell_ends[key];
    ivec3 lo = ivec3(lo_x, lo_y, lo_z), hi = ivec3(hi_x, hi_y, hi_z);
    for (uint slot = (key == 0u ? 0u : cell_ends[key - 1u]) + gl_LocalInvocationID.x; slot < end;
         slot += WG_SIZE) {
        uint t = triangle_ids[slot];
        uint bit = 1u << (t & 31u);
        if ((flags[t >> 5] & bit) != 0u) continue;
        TriangleRecord r = records[t];
        if (box_touched(r.a.xyz, r.b.xyz, r.c.xyz, lo, hi)) atomicOr(flags[t >> 5], bit);
    }
}

void main() {
    if (stage == 0u) {
        test_cell_triangles();
        return;
    }
    uint word = flat_invocation_id();
    if (word >= word_count) return;
    if (stage == 1u) {
        word_counts[word] = uint(bitCount(flags[word]));
        return;
    }
    uint bits = flags[word];
    uint slot = word_counts[word];
    while (bits != 0u) {
        int low = findLSB(bits);
        found[slot++] = word * 32u + uint(low);
        bits &= bits - 1u;
    }
}
