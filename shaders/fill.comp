#version 460
// Pass 7, bit-flip fill, in two stages.
//
// FILL_STAGE 0, flips: one workgroup per non-empty tile, one thread per voxel column. Each
// crossing flips one bit, at the first voxel whose centre lies above it. A thread owns its
// column's words: no atomics. Columns of up to REGISTER_WORDS words (512 voxels) collect
// their flips in registers and touch memory once at the end; deeper ones flip in memory. A
// dispatch handles at most PAIRS_PER_ROUND pairs of every tile (pairs [first + round *
// PAIRS_PER_ROUND, ...)); the host runs as many rounds as the largest tile can need, so no
// invocation loops past llvmpipe's 65,535-iteration guard (tiles.glsl). With `finish` (one
// round, and no other part of the slab flips bits) the thread also turns its column into
// parity, so stage 1 is not needed.
//
// SHARED_RECORDS 1 (subgroups of at least 8 lanes with ballot): pairs go in batches of 8;
// lane j of each subgroup loads the record of pair j and broadcasts it to the others. Every
// lane needs every record of its tile, and this loads each once per subgroup instead of once
// per lane (on lavapipe each memory instruction is a loop over the SIMD lanes).
//
// MARK_CROSSINGS 1 (fill_mode="winding", flips stage only): bits are set (OR) instead of
// flipped, so bit k marks that some crossing lies between the centres of voxels k - 1 and k,
// even where two crossings cancel out (winding_columns.comp cuts columns there).
//
// SIGNED_CROSSINGS 1 (fill_mode="winding", flips stage only, after winding_columns.comp has
// cut the columns into segments at the marks, which the grid still holds): each crossing
// adds its sign (-1 for a triangle facing up, +1 facing down: triangle.glsl's c.w) to
// crossings[] of the segment that starts at it (the first segment for crossings at or below
// the box's lowest voxel; none above the box); winding_columns.comp then sums them up each
// column, so that every segment gets s, the signed count of the crossings below it.
//
// FILL_STAGE 1, parity: the same workgroups (or, with all_tiles, one per tile of the window,
// when several batches of triangles flipped bits in different tiles); each thread turns its
// column's flips into parity with a prefix XOR, so voxel k is set iff an odd number of
// crossings lie below its centre.
//
// Grid layout: common.glsl, column_base.
#extension GL_GOOGLE_include_directive : require
#if SHARED_RECORDS
#extension GL_KHR_shader_subgroup_ballot : require
#endif
layout(local_size_x = 1 << (2 * TILE_SHIFT)) in;  // a tile's columns, x fastest
#include "common.glsl"
#include "triangle.glsl"
#include "exact.glsl"

layout(std430, binding = 0) readonly buffer Records { TriangleRecord records[]; };
layout(std430, binding = 1) readonly buffer Pairs { uvec2 pairs[]; };
layout(std430, binding = 2) readonly buffer Tiles { Tile tiles[]; };
layout(std430, binding = 3) readonly buffer FillDispatch {
    uvec3 group_count;
    uint tile_count;
};
layout(std430, binding = 4) buffer Grid { uint grid[]; };
#ifndef SIGNED_CROSSINGS
#define SIGNED_CROSSINGS 0
#endif
#if SIGNED_CROSSINGS
layout(std430, binding = 5) readonly buffer Offsets { uint offsets[]; };  // winding_columns
layout(std430, binding = 6) buffer Crossings { int crossings[]; };  // per slot
#endif

layout(push_constant) uniform Params {
    Window window;
    uint fill_round;
    uint all_tiles;  // parity: the workgroup index is the tile key, not an index into tiles
    uint finish;     // flips: also compute the parity (see above)
#if SIGNED_CROSSINGS
    ColumnBox box;
#endif
};

// Pairs per loop iteration. PAIRS_PER_ROUND comes from the host: a multiple of PAIR_BATCH,
// at most 2^17, so a round makes at most 32,768 iterations.
#define PAIR_BATCH (SHARED_RECORDS != 0 ? 8u : 4u)
#define REGISTER_WORDS 16

ivec2 tile_column(uint key) {
    uint lane = gl_LocalInvocationID.x;
    return key_tile(window, key) * TILE_SIDE + ivec2(lane & (TILE_SIDE - 1), lane >> TILE_SHIFT);
}

// Word q of a column's flips turned into parity: voxel k is set iff an odd number of flips
// lie at or below it. carry holds the parity of the words below.
uint parity_word(uint bits, inout uint carry, uint q) {
    bits ^= bits << 1;
    bits ^= bits << 2;
    bits ^= bits << 4;
    bits ^= bits << 8;
    bits ^= bits << 16;
    bits ^= carry;
    carry = 0u - (bits >> 31);
    uint valid = uint(window.nz) - 32u * q;  // bits of this word inside the grid
    return valid >= 32u ? bits : bits & ((1u << valid) - 1u);
}

// The record of pair j of the batch that starts at `start` (pairs past the end repeat the
// last one). `mine` is what this lane loaded for the batch (SHARED_RECORDS).
TriangleRecord batch_record(TriangleRecord mine, uint start, uint j, uint end) {
#if SHARED_RECORDS
    return TriangleRecord(subgroupBroadcast(mine.a, j), subgroupBroadcast(mine.b, j),
                          subgroupBroadcast(mine.c, j));
#else
    return records[pairs[min(start + j, end - 1u)].y];
#endif
}

TriangleRecord lane_record(uint start, uint end) {
#if SHARED_RECORDS
    return records[pairs[min(start + min(gl_SubgroupInvocationID, PAIR_BATCH - 1u), end - 1u)].y];
#else
    return TriangleRecord(ivec4(0), ivec4(0), ivec4(0));
#endif
}

// Voxel index of the crossing of the triangle with the column, or n when it flips nothing.
int crossing(TriangleRecord r, ivec2 column, int n) {
    Coverage w = cover(r.a.xyz, r.b.xyz, r.c.xyz, column);
#if BRANCHLESS
    int k = first_voxel_above(w, r.a.xyz, r.b.xyz, r.c.xyz, n);
    return select_int(n, k, w.covered);
#else
    return w.covered ? first_voxel_above(w, r.a.xyz, r.b.xyz, r.c.xyz, n) : n;
#endif
}

#if FILL_STAGE == 0 && SIGNED_CROSSINGS
// The segment of the column whose slots start at `group` that starts at voxel k.
uint segment_slot(uint group, uint base, int k) {
    uint rank = 0u;
    for (int q = (box.k_lo + 1) >> 5; q <= k >> 5 && k > box.k_lo; ++q) {
        rank += bitCount(grid[base + uint(q)] & word_range_mask(q, box.k_lo + 1, k + 1));
    }
    return (group + rank) * uint(TILE_COLUMNS) + gl_LocalInvocationID.x;
}

void main() {
    uint tile_index = flat_group_id();
    if (tile_index >= tile_count) return;
    Tile tile = tiles[tile_index];
    uint first = tile.first + fill_round * PAIRS_PER_ROUND;
    if (first >= tile.end) return;
    uint end = min(tile.end, first + PAIRS_PER_ROUND);
    ivec2 column = tile_column(tile.key);
    uint base = column_base(window, column);
    // the tile's index among the slab's tiles (a part's window may start at a later row)
    uint tiles_per_row = uint(window.nx) >> TILE_SHIFT;
    uint slab_tile = uint(column.x >> TILE_SHIFT)
                   + uint((column.y - window.buffer_row) >> TILE_SHIFT) * tiles_per_row;
    uint group = offsets[slab_tile];
    bool inside = column_in_box(box, column);
    int n = window.nz;
    for (uint start = first; start < end; start += PAIR_BATCH) {
        TriangleRecord mine = lane_record(start, end);
        [[unroll]] for (uint j = 0u; j < PAIR_BATCH; ++j) {
            TriangleRecord r = batch_record(mine, start, j, end);
            int k = crossing(r, column, n);
            if (inside && start + j < end && k < box.k_hi) {
                crossings[segment_slot(group, base, k)] += r.c.w == 2 ? 1 : -1;
            }
        }
    }
}
#elif FILL_STAGE == 0
#if MARK_CROSSINGS
#define FLIP |=
#else
#define FLIP ^=
#endif

void main() {
    uint tile_index = flat_group_id();
    if (tile_index >= tile_count) return;
    Tile tile = tiles[tile_index];
    uint first = tile.first + fill_round * PAIRS_PER_ROUND;
    if (first >= tile.end) return;
    uint end = min(tile.end, first + PAIRS_PER_ROUND);
    ivec2 column = tile_column(tile.key);
    uint base = column_base(window, column);
    int n = window.nz;
    uint words = column_words(n);

    bool in_registers = words <= REGISTER_WORDS;
    uint flips[REGISTER_WORDS];
    [[unroll]] for (uint q = 0u; q < REGISTER_WORDS; ++q) flips[q] = 0u;
    for (uint start = first; start < end; start += PAIR_BATCH) {
        TriangleRecord mine = lane_record(start, end);
        [[unroll]] for (uint j = 0u; j < PAIR_BATCH; ++j) {
            int k = crossing(batch_record(mine, start, j, end), column, n);
            k = select_int(n, k, start + j < end);
#if BRANCHLESS
            uint bit = uint(k < n) << (k & 31);
            if (in_registers) {
                [[unroll]] for (uint q = 0u; q < REGISTER_WORDS; ++q) {
                    flips[q] FLIP uint(q == uint(k) >> 5) * bit;
                }
            } else {
                grid[base + uint(min(k, n - 1) >> 5)] FLIP bit;
            }
#else
            if (k < n) {
                if (in_registers) {
                    flips[k >> 5] FLIP 1u << (k & 31);
                } else {
                    grid[base + uint(k >> 5)] FLIP 1u << (k & 31);
                }
            }
#endif
        }
    }
    if (in_registers) {
        uint carry = 0u;
        [[unroll]] for (uint q = 0u; q < REGISTER_WORDS; ++q) {
            if (q < words) {
                if (finish != 0u) {
                    grid[base + q] = parity_word(flips[q], carry, q);
                } else {
                    grid[base + q] FLIP flips[q];
                }
            }
        }
    } else if (finish != 0u) {
        uint carry = 0u;
        for (uint q = 0u; q < words; ++q) grid[base + q] = parity_word(grid[base + q], carry, q);
    }
}
#else
void main() {
    uint tile_index = flat_group_id();
    if (all_tiles == 0u && tile_index >= tile_count) return;
    ivec2 column = tile_column(all_tiles != 0u ? tile_index : tiles[tile_index].key);
    if (column.y >= window.row_hi) return;  // past the window in a folded dispatch
    uint base = column_base(window, column);
    uint carry = 0u;
    for (uint q = 0u; q < column_words(window.nz); ++q) {
        grid[base + q] = parity_word(grid[base + q], carry, q);
    }
}
#endif
