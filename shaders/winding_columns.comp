#version 460
// fill_mode="winding", per tile: one workgroup per tile of the window, one thread per column,
// which owns its column's words (no atomics on the grid).
//
// The grid holds crossing marks (fill.comp with MARK_CROSSINGS): bit k is set iff some
// triangle crosses the column between the centres of voxels k - 1 and k. w jumps only where
// the column crosses the surface, so between two marks it is continuous: such a run of
// voxels is a segment. Only voxels whose centre, nudged by (+e, +e^2, -E), lies inside the
// mesh's bounding box can be solid (outside it, in a mesh without stacked sheets, every ray
// from the centre crosses the surface at most once per direction, so |w| <= 1/2): columns
// i_lo <= i < i_hi, j_lo <= j < j_hi, voxels k_lo <= k < k_hi. Segments are the runs of that
// range between marks.
//
// Slots: a tile with at most m segments per column gets m groups of TILE_COLUMNS slots, from
// group offsets[tile]; slot (group, lane) holds the r-th segment of the lane's column (r =
// group - offsets[tile]), or nothing. So the 16 points a group evaluates together
// (winding_evaluate.comp) are the r-th segments of neighbouring columns: mostly close.
//
// COLUMNS_STAGE 0, count: m of the tile into offsets[tile] (the host clears them, scans them).
// COLUMNS_STAGE 1, emit: every slot's segment (i | j << 16, begin | end << 16), or ~0, and its
//   point: the segment's middle voxel (the farthest from the crossings that bound it).
// COLUMNS_STAGE 2, write: the column's result bits replace its marks. A segment is solid iff
//   w > 1/2 at its point, unless winding_refine.comp evaluated it voxel by voxel (refined 1
//   and refine_offsets[slot + 1] > refine_offsets[slot]).
//
// Grid layout: common.glsl, column_base.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 1 << (2 * TILE_SHIFT)) in;  // a tile's columns, x fastest
#include "common.glsl"

struct ColumnBox {
    int i_lo;
    int i_hi;
    int j_lo;
    int j_hi;
    int k_lo;
    int k_hi;
};

layout(std430, binding = 0) buffer Grid { uint grid[]; };
#if COLUMNS_STAGE == 0
layout(std430, binding = 1) buffer Offsets { uint offsets[]; };
#else
layout(std430, binding = 1) readonly buffer Offsets { uint offsets[]; };  // scanned
#endif
#if COLUMNS_STAGE == 1
layout(std430, binding = 2) writeonly buffer Segments { uvec2 segments[]; };
layout(std430, binding = 3) writeonly buffer Points { uvec2 points[]; };
#elif COLUMNS_STAGE == 2
layout(std430, binding = 2) readonly buffer Segments { uvec2 segments[]; };
layout(std430, binding = 3) readonly buffer Values { float values[]; };
layout(std430, binding = 4) readonly buffer RefineOffsets { uint refine_offsets[]; };
layout(std430, binding = 5) readonly buffer RefineValues { float refine_values[]; };
#endif

layout(push_constant) uniform Params {
    Window window;
    ColumnBox box;
    uint refined;  // write: whether winding_refine.comp ran (refine_offsets are valid)
};

#define NO_POINT 0xFFFFFFFFu

// Bits of word q for voxels [lo, hi).
uint range_mask(int q, int lo, int hi) {
    int a = clamp(lo - 32 * q, 0, 32), b = clamp(hi - 32 * q, 0, 32);
    uint below_b = b >= 32 ? 0xFFFFFFFFu : (1u << b) - 1u;
    uint below_a = a >= 32 ? 0xFFFFFFFFu : (1u << a) - 1u;
    return below_b & ~below_a;
}

uint slot(uint group) {
    return group * uint(TILE_COLUMNS) + gl_LocalInvocationID.x;
}

#if COLUMNS_STAGE == 0
shared uint most;
#endif

#if COLUMNS_STAGE == 1
void emit(uint group, uint ij, int begin, int end) {
    segments[slot(group)] = uvec2(ij, uint(begin) | (uint(end) << 16));
    points[slot(group)] = uvec2(ij, uint((begin + end - 1) >> 1));
}

void emit_nothing(uint group) {
    segments[slot(group)] = uvec2(NO_POINT);
    points[slot(group)] = uvec2(NO_POINT);
}
#endif

#if COLUMNS_STAGE == 2
// The bits of voxels [lo, hi) of word q that the segment of the column's `group` makes solid.
uint segment_bits(uint group, int q, int lo, int hi) {
    uint at = slot(group);
    if (refined != 0u && refine_offsets[at + 1u] > refine_offsets[at]) {
        int begin = int(segments[at].y & 0xFFFFu);
        uint bits = 0u;
        for (int k = lo; k < hi; ++k) {
            bool solid = refine_values[refine_offsets[at] + uint(k - begin)] > 0.5;
            bits |= uint(solid) << (k & 31);
        }
        return bits;
    }
    return values[at] > 0.5 ? range_mask(q, lo, hi) : 0u;
}
#endif

void main() {
    uint tile_index = flat_group_id();
    int rows = window.row_hi - window.row_lo;
    uint tiles = uint(window.nx >> TILE_SHIFT) * uint(rows >> TILE_SHIFT);
    if (tile_index >= tiles) return;  // past the window in a folded dispatch
    uint lane = gl_LocalInvocationID.x;
    ivec2 column = key_tile(window, tile_index) * TILE_SIDE
                 + ivec2(lane & (TILE_SIDE - 1), lane >> TILE_SHIFT);
    uint base = column_base(window, column);
    bool inside_box = column.x >= box.i_lo && column.x < box.i_hi && column.y >= box.j_lo
                   && column.y < box.j_hi && box.k_lo < box.k_hi;
    int first_word = (box.k_lo + 1) >> 5, last_word = (box.k_hi - 1) >> 5;
#if COLUMNS_STAGE == 0
    uint count = 0u;
    if (inside_box) {
        count = 1u;
        for (int q = first_word; q <= last_word; ++q) {
            count += bitCount(grid[base + uint(q)] & range_mask(q, box.k_lo + 1, box.k_hi));
        }
    }
    if (lane == 0u) most = 0u;
    barrier();
    atomicMax(most, count);
    barrier();
    if (lane == 0u) offsets[tile_index] = most;
#elif COLUMNS_STAGE == 1
    uint group = offsets[tile_index], groups_end = offsets[tile_index + 1u];
    if (inside_box) {
        uint ij = uint(column.x) | (uint(column.y) << 16);
        int begin = box.k_lo;
        for (int q = first_word; q <= last_word; ++q) {
            uint marks = grid[base + uint(q)] & range_mask(q, box.k_lo + 1, box.k_hi);
            while (marks != 0u) {
                int k = 32 * q + findLSB(marks);
                marks &= marks - 1u;
                emit(group, ij, begin, k);
                group += 1u;
                begin = k;
            }
        }
        emit(group, ij, begin, box.k_hi);
        group += 1u;
    }
    for (; group < groups_end; ++group) emit_nothing(group);
#else
    uint group = offsets[tile_index];
    for (uint q = 0u; q < column_words(window.nz); ++q) {
        int lo = max(box.k_lo, 32 * int(q)), hi = min(box.k_hi, 32 * int(q) + 32);
        uint bits = 0u;
        if (inside_box && lo < hi) {
            uint marks = grid[base + q] & range_mask(int(q), max(box.k_lo + 1, lo), hi);
            int run = lo;
            while (true) {
                int next = marks != 0u ? 32 * int(q) + findLSB(marks) : hi;
                bits |= segment_bits(group, int(q), run, next);
                if (marks == 0u) break;
                marks &= marks - 1u;
                group += 1u;
                run = next;
            }
        }
        grid[base + q] = bits;
    }
#endif
}
