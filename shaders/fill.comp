#version 460
// Pass 7, bit-flip fill, in two stages.
//
// FILL_STAGE 0, flips: one workgroup per non-empty tile, one thread per voxel column. Each
// crossing flips one bit, at the first voxel whose centre lies above it. A thread owns its
// column's words: no atomics. A dispatch handles at most PAIRS_PER_ROUND pairs of every tile
// (pairs [first + round * PAIRS_PER_ROUND, ...)); the host runs as many rounds as the largest
// tile can need, so no invocation loops past llvmpipe's 65,535-iteration guard (tiles.glsl).
//
// FILL_STAGE 1, parity: the same workgroups (or, with all_tiles, one per tile of the window,
// when several batches of triangles flipped bits in different tiles); each thread turns its
// column's flips into parity with a prefix XOR, so voxel k is set iff an odd number of
// crossings lie below its centre.
//
// Grid layout: common.glsl, column_base.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 1 << TILE_SHIFT, local_size_y = 1 << TILE_SHIFT) in;  // a tile's columns
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

layout(push_constant) uniform Params {
    Window window;
    uint fill_round;
    uint all_tiles;  // parity: the workgroup index is the tile key, not an index into tiles
};

#define UNROLL 4u  // PAIRS_PER_ROUND comes from the host: a multiple of UNROLL, at most 2^17

ivec2 tile_column(uint key) {
    return key_tile(window, key) * TILE_SIDE + ivec2(gl_LocalInvocationID.xy);
}

#if FILL_STAGE == 0
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

    // UNROLL pairs per loop iteration: at most PAIRS_PER_ROUND / UNROLL <= 32,768 iterations.
    for (uint start = first; start < end; start += UNROLL) {
        [[unroll]] for (uint q = 0u; q < UNROLL; ++q) {
#if BRANCHLESS
            uint p = min(start + q, end - 1u);  // past the end: re-read the last pair, flip nothing
            TriangleRecord r = records[pairs[p].y];
            Coverage w = cover(r.a.xyz, r.b.xyz, r.c.xyz, column);
            int k = first_voxel_above(w, r.a.xyz, r.b.xyz, r.c.xyz, n);
            bool flips = start + q < end && w.covered && k < n;
            grid[base + uint(min(k, n - 1) >> 5)] ^= uint(flips) << (k & 31);
#else
            if (start + q < end) {
                TriangleRecord r = records[pairs[start + q].y];
                Coverage w = cover(r.a.xyz, r.b.xyz, r.c.xyz, column);
                if (w.covered) {
                    int k = first_voxel_above(w, r.a.xyz, r.b.xyz, r.c.xyz, n);
                    if (k < n) grid[base + uint(k >> 5)] ^= 1u << (k & 31);
                }
            }
#endif
        }
    }
}
#else
void main() {
    uint tile_index = flat_group_id();
    if (all_tiles == 0u && tile_index >= tile_count) return;
    ivec2 column = tile_column(all_tiles != 0u ? tile_index : tiles[tile_index].key);
    if (column.y >= window.row_hi) return;  // past the window in a folded dispatch
    uint base = column_base(window, column);
    uint n = uint(window.nz);
    uint carry = 0u;
    for (uint q = 0u; q < column_words(window.nz); ++q) {
        uint bits = grid[base + q];
        bits ^= bits << 1;
        bits ^= bits << 2;
        bits ^= bits << 4;
        bits ^= bits << 8;
        bits ^= bits << 16;
        bits ^= carry;
        carry = 0u - (bits >> 31);
        uint valid = n - 32u * q;  // bits of this word inside the grid
        grid[base + q] = valid >= 32u ? bits : bits & ((1u << valid) - 1u);
    }
}
#endif
