#version 460
// fill_mode="winding", per tile: COLUMN_TILES tiles of the window per workgroup (more
// threads per workgroup than one tile's columns keep the GPU busier), one thread per column.
//
// The grid holds crossing marks (fill.comp with MARK_CROSSINGS): bit k is set iff some
// triangle crosses the column between the centres of voxels k - 1 and k. s (the signed
// crossings below a centre, winding.glsl) changes only there, so between two marks it is
// one integer: such a run of voxels is a segment. Only voxels whose centre, nudged by
// (+e, +e^2, -E), lies inside the surface's bounding box can be solid (the rule,
// reference_winding.py): columns i_lo <= i < i_hi, j_lo <= j < j_hi, voxels
// k_lo <= k < k_hi. Segments are the runs of that range between marks.
//
// Slots: a tile with at most m segments per column gets m groups of TILE_COLUMNS slots, from
// group offsets[tile]; slot (group, lane) holds the r-th segment of the lane's column (r =
// group - offsets[tile]), or nothing. So neighbouring slots are the r-th segments of
// neighbouring columns: mostly close, as winding_evaluate.comp's groups like them.
//
// s of a segment: the marking fill (MARK_CROSSINGS) also left in `signs` the step of the
// crossing at each mark (bit set: +1, clear: -1), and flagged in tile_flags (entry 1 +
// tile) the tiles where two crossings share a mark. In an unflagged tile each mark is one
// crossing, so s of a segment is the sum of the steps at the marks at or below its first
// voxel. A flagged tile's crossings are added by the signed fill (SIGNED_CROSSINGS).
//
// COLUMNS_STAGE 0, count: m of the tile into offsets[tile] (the host clears them, scans them).
// COLUMNS_STAGE 1, emit: every slot's segment as the first run of winding_decide.comp,
//   (i | j << 16, begin | end << 16, slot, the slot of the column's first segment), or ~0;
//   and into crossings[] of every slot, s from the signs (0 in a flagged tile).
// COLUMNS_STAGE 2, sum, flagged tiles only: crossings[] holds each segment's share of s
//   (fill.comp with SIGNED_CROSSINGS); the running sum up the column makes it s.
//
// Grid layout: common.glsl, column_base.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = COLUMN_TILES << (2 * TILE_SHIFT)) in;  // tiles' columns, x fastest
#include "common.glsl"

layout(std430, binding = 0) buffer Grid { uint grid[]; };
#if COLUMNS_STAGE == 0
layout(std430, binding = 1) buffer Offsets { uint offsets[]; };
#else
layout(std430, binding = 1) readonly buffer Offsets { uint offsets[]; };  // scanned
#endif
#if COLUMNS_STAGE == 1
layout(std430, binding = 2) writeonly buffer Runs { uvec4 runs[]; };
layout(std430, binding = 3) writeonly buffer Crossings { int crossings[]; };
layout(std430, binding = 4) readonly buffer Signs { uint signs[]; };
#elif COLUMNS_STAGE == 2
layout(std430, binding = 2) buffer Crossings { int crossings[]; };
#endif
#if COLUMNS_STAGE != 0
layout(std430, binding = 5) readonly buffer TileFlags { uint tile_flags[]; };
#endif

layout(push_constant) uniform Params {
    Window window;
    ColumnBox box;
};

#define NO_POINT 0xFFFFFFFFu

// The thread's column within its tile.
uint tile_lane() {
    return gl_LocalInvocationID.x % uint(TILE_COLUMNS);
}

uint slot(uint group) {
    return group * uint(TILE_COLUMNS) + tile_lane();
}

#if COLUMNS_STAGE == 0
shared uint most[COLUMN_TILES];
#endif

#if COLUMNS_STAGE == 1
void emit(uint group, uint ij, int begin, int end, uint column_slot, int s) {
    runs[slot(group)] = uvec4(ij, uint(begin) | (uint(end) << 16), slot(group), column_slot);
    crossings[slot(group)] = s;
}

void emit_nothing(uint group) {
    runs[slot(group)] = uvec4(NO_POINT);
    crossings[slot(group)] = 0;
}

// The steps of the marks of `marks` (one crossing each) summed: +1 where the sign is set.
int steps(uint marks, uint rising) {
    return 2 * bitCount(marks & rising) - bitCount(marks);
}
#endif

void main() {
    uint in_group = gl_LocalInvocationID.x / uint(TILE_COLUMNS);
    uint tile_index = flat_group_id() * uint(COLUMN_TILES) + in_group;
    int rows = window.row_hi - window.row_lo;
    uint tiles = uint(window.nx >> TILE_SHIFT) * uint(rows >> TILE_SHIFT);
    bool real = tile_index < tiles;  // not past the window (the last group, or folded)
    uint lane = tile_lane();
    ivec2 column = key_tile(window, tile_index) * TILE_SIDE
                 + ivec2(lane & (TILE_SIDE - 1), lane >> TILE_SHIFT);
    uint base = column_base(window, column);
    bool inside_box = real && column_in_box(box, column);
    int first_word = (box.k_lo + 1) >> 5, last_word = (box.k_hi - 1) >> 5;
#if COLUMNS_STAGE == 0
    uint count = 0u;
    if (inside_box) {
        count = 1u;
        for (int q = first_word; q <= last_word; ++q) {
            count += bitCount(grid[base + uint(q)] & word_range_mask(q, box.k_lo + 1, box.k_hi));
        }
    }
    if (lane == 0u) most[in_group] = 0u;
    barrier();
    atomicMax(most[in_group], count);
    barrier();
    if (lane == 0u && real) offsets[tile_index] = most[in_group];
#elif COLUMNS_STAGE == 1
    if (!real) return;
    uint group = offsets[tile_index], groups_end = offsets[tile_index + 1u];
    if (inside_box) {
        uint ij = uint(column.x) | (uint(column.y) << 16);
        bool signed_marks = tile_flags[1u + tile_index] == 0u;  // else s comes in the sum
        int s = 0;  // of the marks at or below the voxel the segment starts at
        for (int q = 0; signed_marks && q <= box.k_lo >> 5; ++q) {
            uint below = grid[base + uint(q)] & word_range_mask(q, 0, box.k_lo + 1);
            s += steps(below, signs[base + uint(q)]);
        }
        int begin = box.k_lo;
        for (int q = first_word; q <= last_word; ++q) {
            uint marks = grid[base + uint(q)] & word_range_mask(q, box.k_lo + 1, box.k_hi);
            uint rising = signed_marks && marks != 0u ? signs[base + uint(q)] : 0u;
            while (marks != 0u) {
                uint mark = marks & (0u - marks);
                int k = 32 * q + findLSB(marks);
                marks &= marks - 1u;
                emit(group, ij, begin, k, slot(offsets[tile_index]), s);
                s += signed_marks ? steps(mark, rising) : 0;
                group += 1u;
                begin = k;
            }
        }
        emit(group, ij, begin, box.k_hi, slot(offsets[tile_index]), s);
        group += 1u;
    }
    for (; group < groups_end; ++group) emit_nothing(group);
#else
    if (!real || tile_flags[1u + tile_index] == 0u) return;  // s came from the signs
    uint group = offsets[tile_index], groups_end = offsets[tile_index + 1u];
    int s = 0;
    for (; group < groups_end; ++group) {
        s += crossings[slot(group)];
        crossings[slot(group)] = s;
    }
#endif
}
