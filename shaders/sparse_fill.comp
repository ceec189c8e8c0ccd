#version 460
// The bit-flip fill of the sparse grid (sparse.glsl): fill.comp's flips, into the surface
// cubes instead of whole columns. One workgroup per non-empty tile, one thread per voxel
// column; each crossing of a pair's triangle flips one bit, at the first voxel whose centre
// lies above it, in the word of its column in the cube that holds that voxel (the marking of
// sparse_cubes.comp made it a surface cube; a crossing that finds none is counted in
// lost_crossings, which the host treats as an internal error). A thread owns its column's
// words: a GPU flips with an atomic XOR (its result is not waited for), a CPU device
// (CPU_DEVICE) with a plain one, as fill.comp does. Parity comes after every part of the
// slab has flipped (sparse_cubes.comp, SPARSE_STAGE 2).
//
// Rounds as in fill.comp: a dispatch takes at most PAIRS_PER_ROUND pairs of every tile, pairs
// [first + fill_round * PAIRS_PER_ROUND, ...); round 0 records the largest tile's pair count
// (largest_tile), from which the host knows how many rounds the part needs.
#extension GL_GOOGLE_include_directive : require
#if SHARED_RECORDS && !(defined(CPU_DEVICE) && CPU_DEVICE)
#define BROADCAST_RECORDS 1
#extension GL_KHR_shader_subgroup_ballot : require
#else
#define BROADCAST_RECORDS 0
#endif
layout(local_size_x = 1 << (2 * TILE_SHIFT)) in;  // a tile's columns, x fastest
#include "common.glsl"
#include "triangle.glsl"
#include "exact.glsl"
#include "fine.glsl"
#include "sparse.glsl"

layout(std430, binding = 0) readonly buffer Records { TriangleRecord records[]; };
layout(std430, binding = 1) readonly buffer Pairs { uvec2 pairs[]; };
layout(std430, binding = 2) readonly buffer Tiles { Tile tiles[]; };
layout(std430, binding = 3) readonly buffer FillDispatch {
    uvec3 group_count;
    uint tile_count;
};
layout(std430, binding = 4) buffer Cubes { uint cubes[]; };
layout(std430, binding = 5) readonly buffer CubeBits { uint cube_bits[]; };
layout(std430, binding = 6) readonly buffer WordSlots { uint word_slots[]; };
// The fine coordinates and the batch's vertex indices, for the near ties (fill.comp).
layout(std430, binding = 7) readonly buffer FineVertices { int64_t fine[]; };
layout(std430, binding = 8) readonly buffer Indices { uint indices[]; };
layout(std430, binding = 9) buffer FillState {  // cleared by the host per part
    uint largest_tile;    // pairs of the part's largest tile (round 0)
    uint lost_crossings;  // crossings outside every surface cube (none, by the marking)
};

layout(push_constant) uniform Params {
    Window window;
    CubeSpace space;
    uint fill_round;
    uint fixed_error;  // delta of exact.glsl
};

#include "crossing.glsl"

// The column's word in the cube that holds voxel k, looked up once per cube the column's
// crossings reach in a row (`cube`, `address`: the last one found; -1: none yet).
struct CubeCursor {
    int cube;
    uint address;
    uint stack;
    uvec2 inside;
};

void flip(inout CubeCursor at, int k, int n) {
    if (k >= n) return;  // above every voxel centre: no flip
    int cz = k >> CUBE_SHIFT;
    if (cz != at.cube) {
        uint word = stack_word(space, at.stack, cz);
        uint bit = 1u << (cz & 31);
        uint bits = cube_bits[word];
        if ((bits & bit) == 0u) {
            atomicAdd(lost_crossings, 1u);
            return;
        }
        at.cube = cz;
        at.address = cube_address(word_slots[word] + bitCount(bits & (bit - 1u)),
                                  space.batch_shift, at.inside);
    }
#if CPU_DEVICE
    cubes[at.address] ^= 1u << (k & 31);
#else
    atomicXor(cubes[at.address], 1u << (k & 31));
#endif
}

void main() {
    uint tile_index = flat_group_id();
    if (tile_index >= tile_count) return;
    Tile tile = tiles[tile_index];
    if (fill_round == 0u && gl_LocalInvocationID.x == 0u) {
        atomicMax(largest_tile, tile.end - tile.first);
    }
    uint first = tile.first + fill_round * PAIRS_PER_ROUND;
    if (first >= tile.end) return;
    uint end = min(tile.end, first + PAIRS_PER_ROUND);
    ivec2 column = tile_lane_column(window, tile.key, gl_LocalInvocationID.x);
    CubeCursor at = CubeCursor(-1, 0u, stack_of(space, column), uvec2(column) & uint(CUBE_SIDE - 1));
    int n = window.nz;
    uint near_ties = 0u;
    for (uint start = first; start < end; start += PAIR_BATCH) {
        TriangleRecord mine = lane_record(start, end);
        [[unroll]] for (uint j = 0u; j < PAIR_BATCH; ++j) {
            bool sure;
            Crossing x = fast_crossing(batch_record(mine, start, j, end), column, n, sure);
            bool real = start + j < end;
            near_ties += uint(!sure && real);
            if (real) flip(at, x.k, n);
        }
    }
    for (uint pair = first; near_ties != 0u && pair < end; ++pair) {
        if (near_tie(pair, column, n)) {
            --near_ties;
            flip(at, near_tie_crossing(pair, column, n).k, n);
        }
    }
}
