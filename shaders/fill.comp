#version 460
// Pass 7, bit-flip fill: one workgroup per non-empty tile, one thread per voxel column.
//
// Each crossing flips one bit, at the first voxel whose centre lies above it; afterwards a
// prefix XOR along the column turns flips into parity, so voxel k is set iff an odd number
// of crossings lie below its centre. A thread owns its column's words: no atomics.
//
// Grid layout: column (i, j) is COLUMN_WORDS = ceil(N / 32) consecutive uints starting at
// word (j * N + i) * COLUMN_WORDS; voxel k is bit k % 32 of word k / 32. Bits past N stay 0.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 1 << TILE_SHIFT, local_size_y = 1 << TILE_SHIFT) in;  // one thread per column of a tile
#include "common.glsl"
#include "triangle.glsl"
#include "exact.glsl"

struct Tile {
    uint key;
    uint first;
    uint end;
    uint pad;
};

layout(std430, binding = 0) readonly buffer Records { TriangleRecord records[]; };
layout(std430, binding = 1) readonly buffer Pairs { uvec2 pairs[]; };
layout(std430, binding = 2) readonly buffer Tiles { Tile tiles[]; };
layout(std430, binding = 3) readonly buffer FillDispatch {
    uvec3 group_count;
    uint tile_count;
};
layout(std430, binding = 4) buffer Grid { uint grid[]; };

layout(push_constant) uniform Params {
    int n;
};

shared TriangleRecord batch[TILE_COLUMNS];

void main() {
    uint tile_index = flat_group_id();
    if (tile_index >= tile_count) return;
    Tile tile = tiles[tile_index];
    uint tiles_per_row = uint(n) >> TILE_SHIFT;
    ivec2 column = ivec2(tile.key % tiles_per_row, tile.key / tiles_per_row) * TILE_SIDE
                 + ivec2(gl_LocalInvocationID.xy);
    uint column_words = (uint(n) + 31u) >> 5;
    uint base = (uint(column.y) * uint(n) + uint(column.x)) * column_words;

    // The workgroup loads the tile's triangles TILE_COLUMNS at a time into shared memory, one
    // per thread; every thread then tests all of them against its column. (This also keeps
    // each invocation's loop count far below llvmpipe's 65,535-iteration guard: see tiles.glsl.)
    uint local_index = gl_LocalInvocationIndex;
    for (uint start = tile.first; start < tile.end; start += TILE_COLUMNS) {
        if (start + local_index < tile.end) batch[local_index] = records[pairs[start + local_index].y];
        barrier();
        uint batch_size = min(uint(TILE_COLUMNS), tile.end - start);
        [[unroll]] for (uint q = 0u; q < TILE_COLUMNS; ++q) {
            TriangleRecord r = batch[q];
            Coverage w = cover(r.a.xyz, r.b.xyz, r.c.xyz, column);
#if BRANCHLESS
            int k = first_voxel_above(w, r.a.xyz, r.b.xyz, r.c.xyz, n);
            bool flips = q < batch_size && w.covered && k < n;
            grid[base + uint(min(k, n - 1) >> 5)] ^= uint(flips) << (k & 31);
#else
            if (q < batch_size && w.covered) {
                int k = first_voxel_above(w, r.a.xyz, r.b.xyz, r.c.xyz, n);
                if (k < n) grid[base + uint(k >> 5)] ^= 1u << (k & 31);
            }
#endif
        }
        barrier();
    }

    uint carry = 0u;
    for (uint q = 0u; q < column_words; ++q) {
        uint bits = grid[base + q];
        bits ^= bits << 1;
        bits ^= bits << 2;
        bits ^= bits << 4;
        bits ^= bits << 8;
        bits ^= bits << 16;
        bits ^= carry;
        carry = 0u - (bits >> 31);
        uint valid = uint(n) - 32u * q;  // bits of this word inside the grid
        grid[base + q] = valid >= 32u ? bits : bits & ((1u << valid) - 1u);
    }
}
