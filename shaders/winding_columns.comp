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
// Decided columns: where winding_bound.comp bounded c within 0.49 of 0 on a whole column,
// a voxel is solid iff s >= 1 there. In an unflagged tile (s known from the signs) such a
// column lists no segment: its voxels are written here, in place of its marks.
//
// COLUMNS_STAGE 0, count: m of the tile into offsets[tile] (the host clears them, scans
//   them), counting no segment of a decided column of an unflagged tile.
// COLUMNS_STAGE 1, emit: every slot's segment as the first run of winding_decide.comp,
//   (i | j << 16, begin | end << 16, slot, the slot of the column's first segment), or ~0;
//   and into crossings[] of every slot, s from the signs (0 in a flagged tile). Then each
//   column's words are written: a decided column's voxels, zeros elsewhere (the grid the
//   decisions fill), except in a flagged tile with segments, whose marks the signed fill
//   reads.
// COLUMNS_STAGE 2, sum, flagged tiles only: crossings[] holds each segment's share of s
//   (fill.comp with SIGNED_CROSSINGS); the running sum up the column makes it s. The tile's
//   words are then cleared.
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
layout(std430, binding = 5) readonly buffer TileFlags { uint tile_flags[]; };
#if COLUMNS_STAGE != 2
// winding_bound.comp's (phi_+, phi_-) / 2 pi per column of the window's tiles
layout(std430, binding = 6) readonly buffer Bounds { vec2 bounds[]; };
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

#if COLUMNS_STAGE != 2
// Whether s alone decides the column (winding_bound.comp), in a tile whose s the signs give.
bool decided_column(uint tile_index, bool inside_box) {
    if (!inside_box || tile_flags[1u + tile_index] != 0u) return false;
    vec2 bound = bounds[tile_index * uint(TILE_COLUMNS) + tile_lane()];
    return max(bound.x, bound.y) < 0.49;
}
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

// The words a column's thread stages per step (STAGED_WORDS per column), which the tile's
// threads then store together, a column's words at a time: each thread storing its own
// column's words one by one writes a sliver of many memory lines at once, several times
// slower than whole lines.
#define STAGED_WORDS 16
#define GROUP_COLUMNS (COLUMN_TILES * TILE_COLUMNS)
shared uint staged[GROUP_COLUMNS * STAGED_WORDS];
shared bool column_written[GROUP_COLUMNS];

// Words [from, from + STAGED_WORDS) of a decided column (solid where s >= 1, s summed from
// the signs up the column, in the box only) into staged[]; s carries from the words below.
void stage_decided(uint base, int from, int words, inout int s) {
    for (int q = from; q < from + STAGED_WORDS; ++q) {
        uint box_bits = q < words ? word_range_mask(q, box.k_lo, box.k_hi) : 0u;
        uint marks = box_bits == 0u ? 0u
                   : grid[base + uint(q)] & word_range_mask(q, box.k_lo + 1, box.k_hi);
        uint rising = marks != 0u ? signs[base + uint(q)] : 0u;
        uint solid = 0u, piece = 0u;  // bits from `piece` up to the next mark have s
        while (marks != 0u) {
            uint at = uint(findLSB(marks));
            if (s >= 1) solid |= word_range_mask(0, int(piece), int(at));
            s += (rising >> at & 1u) != 0u ? 1 : -1;
            piece = at;
            marks &= marks - 1u;
        }
        if (s >= 1) solid |= word_range_mask(0, int(piece), 32);
        staged[gl_LocalInvocationID.x * STAGED_WORDS + uint(q - from)] = solid & box_bits;
    }
}

// Every column's words of the tile rewritten where column_written says (a decided column's
// voxels, zeros for the others), STAGED_WORDS per column at a time, the tile's threads
// storing one column's staged words together. Called by the whole workgroup (barriers),
// after every read of the marks but stage_decided's.
void write_columns(uint tile_index, bool decided, uint base, int s) {
    int words = int(column_words(window.nz));
    uint lane = tile_lane(), first = gl_LocalInvocationID.x - lane;  // the tile's first thread
    for (int from = 0; from < words; from += STAGED_WORDS) {
        uint mine = gl_LocalInvocationID.x * STAGED_WORDS;
        if (decided) {
            stage_decided(base, from, words, s);
        } else {
            for (uint w = 0u; w < uint(STAGED_WORDS); ++w) staged[mine + w] = 0u;
        }
        barrier();
        for (uint c = 0u; c < uint(TILE_COLUMNS); ++c) {
            // lanes take words: the column's [from, from + STAGED_WORDS), TILE_COLUMNS at a time
            ivec2 other = tile_lane_column(window, tile_index, c);
            uint other_base = column_base(window, other);
            for (uint w = lane; w < uint(STAGED_WORDS); w += uint(TILE_COLUMNS)) {
                int q = from + int(w);
                if (column_written[first + c] && q < words) {
                    grid[other_base + uint(q)] = staged[(first + c) * STAGED_WORDS + w];
                }
            }
        }
        barrier();
    }
}
#endif

// Every word of a column cleared (a flagged tile's, after the signed fill read its marks).
void clear_column(uint base) {
    int words = int(column_words(window.nz));
    for (int q = 0; q < words; ++q) grid[base + uint(q)] = 0u;
}

void main() {
    uint in_group = gl_LocalInvocationID.x / uint(TILE_COLUMNS);
    uint tile_index = flat_group_id() * uint(COLUMN_TILES) + in_group;
    int rows = window.row_hi - window.row_lo;
    uint tiles = uint(window.nx >> TILE_SHIFT) * uint(rows >> TILE_SHIFT);
    bool real = tile_index < tiles;  // not past the window (the last group, or folded)
    uint lane = tile_lane();
    ivec2 column = tile_lane_column(window, tile_index, lane);
    uint base = column_base(window, column);
    bool inside_box = real && column_in_box(box, column);
    int first_word = (box.k_lo + 1) >> 5, last_word = (box.k_hi - 1) >> 5;
#if COLUMNS_STAGE == 0
    uint count = 0u;
    if (inside_box && !decided_column(tile_index, inside_box)) {
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
    // a tile past the window (the last group, or folded) only takes part in the barriers
    uint group_start = real ? offsets[tile_index] : 0u, group = group_start;
    uint groups_end = real ? offsets[tile_index + 1u] : 0u;
    bool flagged = real && tile_flags[1u + tile_index] != 0u;
    bool decided = decided_column(tile_index, inside_box);
    // of the marks at or below the voxel a segment (or the decided column's box) starts at
    int s = 0;
    for (int q = 0; !flagged && inside_box && q <= box.k_lo >> 5; ++q) {
        uint below = grid[base + uint(q)] & word_range_mask(q, 0, box.k_lo + 1);
        s += steps(below, signs[base + uint(q)]);
    }
    if (inside_box && !decided) {  // its segments listed
        uint ij = uint(column.x) | (uint(column.y) << 16);
        bool signed_marks = !flagged;  // else s comes in the sum
        int begin = box.k_lo;
        for (int q = first_word; q <= last_word; ++q) {
            uint marks = grid[base + uint(q)] & word_range_mask(q, box.k_lo + 1, box.k_hi);
            uint rising = signed_marks && marks != 0u ? signs[base + uint(q)] : 0u;
            while (marks != 0u) {
                uint mark = marks & (0u - marks);
                int k = 32 * q + findLSB(marks);
                marks &= marks - 1u;
                emit(group, ij, begin, k, slot(group_start), s);
                s += signed_marks ? steps(mark, rising) : 0;
                group += 1u;
                begin = k;
            }
        }
        emit(group, ij, begin, box.k_hi, slot(group_start), s);
        group += 1u;
    }
    for (; group < groups_end; ++group) emit_nothing(group);
    // a flagged tile with segments keeps its marks for the signed fill (the sum clears them)
    column_written[gl_LocalInvocationID.x] = real && !(flagged && groups_end > group_start);
    barrier();  // every segment's marks read
    write_columns(tile_index, decided, base, s);
#else
    if (!real || tile_flags[1u + tile_index] == 0u) return;  // s came from the signs
    uint group = offsets[tile_index], groups_end = offsets[tile_index + 1u];
    int s = 0;
    for (; group < groups_end; ++group) {
        s += crossings[slot(group)];
        crossings[slot(group)] = s;
    }
    clear_column(base);
#endif
}
