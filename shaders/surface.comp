#version 460
// Surface pass (mode "surface", and "both" after the fill): one workgroup per tile of the
// conservative binning (setup.comp and emit.comp with CONSERVATIVE 1), one thread per voxel
// column. For every pair of its tile the thread computes, exactly, the contiguous range of
// voxels [k0, k1] of its column that the triangle marks, and ORs it into the column word by
// word: a thread owns its column.
//
// THIN 0, conservative: voxel k is marked iff the closed triangle (a segment or a point when
// degenerate) meets the closed cube [i, i+1] x [j, j+1] x [k, k+1]. Separating axes: the
// column's square in xy decides whether the column is touched at all (touch.glsl); the cube's
// z-extent, the three edges crossed with the x and y axes (the yz- and xz-projections) and
// the triangle's normal each bound k from one side or both, and the range is what all bounds
// leave. The axes e_z x d and the normal of a vertical triangle lie in the xy-plane: the
// square's test covers them.
//
// THIN 1, thin (6-separating): for a triangle with normal N != 0 and dominant axis c (the
// largest |N_c|; ties to z, then y), the voxel whose centre line along c the closed triangle's
// projection along c covers, at floor(crossing) along c (the last voxel for a crossing on the
// grid's far face). A degenerate triangle (N = 0) marks its conservative voxels.
//
// The ranges are exact integer decisions (shaders/surface.glsl).
//
// CHUNKED 0, the pass: one dispatch; each pair is visited once and its range goes straight
// into the words of the thread's own column in the grid (plain read-modify-write): a loop over
// the words of the triangle's z-extent (1 or 2 for most triangles), the same trip count in the
// whole tile. llvmpipe's guard (tiles.glsl): a tile of at most ONE_PASS_PAIRS pairs, and the
// word (and voxel) loops of an invocation share INNER_BUDGET trips beyond the first of each
// (pipeline/kernels.py sums it up). A tile with more pairs, or a pair that would overrun the budget, is
// left out: the pass then copies its dispatch into FallbackDispatch (zero groups otherwise).
//
// CHUNKED 1, the fallback, indirect on FallbackDispatch: every tile again (ORing and lowering
// again changes nothing done), in rounds of at most PAIRS_PER_ROUND pairs and chunks of
// CHUNK_VOXELS voxels of every column, held in registers (workgroup z: round * chunks + chunk;
// rounds of a tile meet in the same words: atomics). A pair whose z-extent misses the chunk
// costs two comparisons. Lavapipe-sized loops whatever the tile.
//
// FACE_IDS 1: the thread also lowers, per voxel it marks, face_ids to the triangle's index
// (triangle_offset + batch index): the smallest index of the triangles that mark it
// (0xFFFFFFFF, i.e. -1 as int32: none). One pass loops over the voxels of the triangle's
// z-extent; chunks are 32 voxels. Several parts of a slab lower the same ids.
//
// TILES_PER_GROUP (the pass; 1 in the fallback): tiles per workgroup, one after the other in
// the tile list, so that a subgroup of 32 holds two tiles' columns; the host dispatches the
// same groups as for one tile each, and those past the last tile end at once. Each thread
// loads the records of its tile's pairs itself (SHARED_RECORDS is not read: a subgroup may
// span tiles).
#extension GL_GOOGLE_include_directive : require
#if CHUNKED  // the fallback, rarely run, is one module for every variant and device path
#undef BRANCHLESS
#define BRANCHLESS 0
#endif
#if CHUNKED
#define TILES_PER_GROUP 1
#endif
layout(local_size_x = TILES_PER_GROUP << (2 * TILE_SHIFT)) in;  // tiles' columns, x fastest
#include "common.glsl"
#include "triangle.glsl"
#include "exact.glsl"
#include "touch.glsl"
#include "surface.glsl"

layout(std430, binding = 0) restrict readonly buffer Records { TriangleRecord records[]; };
layout(std430, binding = 1) restrict readonly buffer Pairs { uvec2 pairs[]; };
layout(std430, binding = 2) restrict readonly buffer Tiles { Tile tiles[]; };
layout(std430, binding = 3) readonly buffer FillDispatch {
    uvec3 group_count;
    uint tile_count;
};
layout(std430, binding = 4) restrict buffer Grid { uint grid[]; };
#if FACE_IDS
layout(std430, binding = 5) restrict buffer FaceIds { uint face_ids[]; };  // nz per column, as Grid's bits
#endif
#if !CHUNKED
layout(std430, binding = 6) buffer FallbackDispatch {  // zeros unless a pass left pairs out
    uvec3 fallback_group_count;
    uint fallback_tile_count;
};
#endif

layout(push_constant) uniform Params {
    Window window;
    int ny;                // rows of the whole grid (thin: crossings on y = ny mark row ny - 1)
    uint fallback_rounds;  // rounds of PAIRS_PER_ROUND pairs the fallback takes a tile in
    uint triangle_offset;  // mesh index of the batch's triangle 0 (FACE_IDS)
};

#define PAIR_BATCH 4u
#define CHUNK_WORDS (CHUNK_VOXELS / 32)  // CHUNK_VOXELS from the host
#define NO_FACE 0xFFFFFFFFu

// -- the pass ---------------------------------------------------------------------------------

// Bits base - 31 ... of the range [range.x, range.y] that fall in the word of voxels [base, base + 32).
uint range_mask(ivec2 range, int base) {
    int low = clamp(range.x - base, 0, 32), high = clamp(range.y + 1 - base, 0, 32);
    uint through = high >= 32 ? 0xFFFFFFFFu : (1u << high) - 1u;
    uint before = low >= 32 ? 0xFFFFFFFFu : (1u << low) - 1u;
    return through & ~before;
}

ivec2 tile_column(uint key) {
    uint lane = gl_LocalInvocationID.x % TILE_COLUMNS;
    return key_tile(window, key) * TILE_SIDE + ivec2(lane & (TILE_SIDE - 1), lane >> TILE_SHIFT);
}

// The voxels [k0, k1] whose closed cubes the triangle's z-extent touches, on the whole column
// (every range below lies inside: thin marks floor(crossing), or the last voxel).
ivec2 z_extent(TriangleRecord r) {
    int z_low = min(min(r.a.z, r.b.z), r.c.z), z_high = max(max(r.a.z, r.b.z), r.c.z);
    return ivec2(max(((z_low + (ONE - 1)) >> FIXED_BITS) - 1, 0),
                 min(z_high >> FIXED_BITS, window.nz - 1));
}

// The voxels of the column that the pair's triangle marks within the chunk [low, high].
ivec2 marked_range(TriangleRecord r, ivec2 column, int low, int high) {
    ivec2 extent = z_extent(r);
    if (extent.y < low || extent.x > high) {
        return EMPTY;  // the triangle's z-extent misses the chunk: no cube of it is touched
    }
#if THIN
    ivec2 range = thin_range(r.a.xyz, r.b.xyz, r.c.xyz, column, ivec3(window.nx, ny, window.nz));
#else
    ivec2 range = conservative_range(r.a.xyz, r.b.xyz, r.c.xyz, column, window.nz);
#endif
    return ivec2(max(range.x, low), min(range.y, high));
}

#if CHUNKED
uint words[CHUNK_WORDS];  // the chunk's voxels of the thread's column
#if FACE_IDS
uint ids[CHUNK_VOXELS];
#endif
#else
int budget = INNER_BUDGET;  // word (and voxel) loop iterations left to the invocation
bool left_out = false;      // a tile or pair past the limits: the fallback redoes every tile
#endif

// Marks what one pair's triangle marks in the thread's column (within the chunk [low, high]).
// `valid`: a real pair of the round (else nothing, but the same loops for every thread).
void mark_pair(TriangleRecord r, uint triangle, bool valid, ivec2 column, int low, int high) {
    ivec2 range = valid ? marked_range(r, column, low, high) : EMPTY;
#if CHUNKED
    [[unroll]] for (int q = 0; q < CHUNK_WORDS; ++q) {
        words[q] |= range_mask(range, low + 32 * q);
    }
#if FACE_IDS
    uint face = triangle_offset + triangle;
    [[unroll]] for (int v = 0; v < CHUNK_VOXELS; ++v) {
        bool marked = low + v >= range.x && low + v <= range.y;
        ids[v] = marked ? min(ids[v], face) : ids[v];
    }
#endif
#else
    // The loops run over the triangle's z-extent: the same trip counts in the whole tile.
    ivec2 extent = z_extent(r);
    int first_word = extent.x >> 5;
    int steps = valid && extent.x <= extent.y ? (extent.y >> 5) - first_word + 1 : 0;
#if FACE_IDS
    int voxels = steps > 0 ? extent.y - extent.x + 1 : 0;
#else
    int voxels = 0;
#endif
    if (steps + voxels > budget) {
        left_out = true;
        return;
    }
    budget -= steps + voxels;
    uint base = column_base(window, column);
    for (int word = first_word; word < first_word + steps; ++word) {
        uint mask = range_mask(range, word << 5);
        if (mask != 0u) grid[base + uint(word)] |= mask;
    }
#if FACE_IDS
    uint face = triangle_offset + triangle;
    uint id_base = (uint(column.y - window.buffer_row) * uint(window.nx) + uint(column.x))
                   * uint(window.nz);
    for (int k = extent.x; k < extent.x + voxels; ++k) {
        if (k >= range.x && k <= range.y) {
            face_ids[id_base + uint(k)] = min(face_ids[id_base + uint(k)], face);
        }
    }
#endif
#endif
}

void main() {
    uint tile_index = flat_group_id() * TILES_PER_GROUP + gl_LocalInvocationID.x / TILE_COLUMNS;
    if (tile_index >= tile_count) return;
    Tile tile = tiles[tile_index];
#if CHUNKED
    uint chunks = (uint(window.nz) + CHUNK_VOXELS - 1u) / CHUNK_VOXELS;
    uint chunk = gl_WorkGroupID.z % chunks, fill_round = gl_WorkGroupID.z / chunks;
    uint first = tile.first + fill_round * PAIRS_PER_ROUND;
    if (first >= tile.end) return;
    uint end = min(tile.end, first + PAIRS_PER_ROUND);
    int low = int(chunk) * CHUNK_VOXELS;
    int high = min(low + CHUNK_VOXELS, window.nz) - 1;
    [[unroll]] for (int q = 0; q < CHUNK_WORDS; ++q) words[q] = 0u;
#if FACE_IDS
    [[unroll]] for (int v = 0; v < CHUNK_VOXELS; ++v) ids[v] = NO_FACE;
#endif
#else
    uint first = tile.first, end = tile.end;
    if (end - first > ONE_PASS_PAIRS) {  // the fallback takes the tile
        left_out = true;
        end = first;
    }
    int low = 0, high = window.nz - 1;
#endif
    ivec2 column = tile_column(tile.key);
    for (uint start = first; start < end; start += PAIR_BATCH) {
        uint triangles[PAIR_BATCH];  // the batch's loads first, then its marks
        [[unroll]] for (uint j = 0u; j < PAIR_BATCH; ++j) {
            triangles[j] = pairs[min(start + j, end - 1u)].y;
        }
        [[unroll]] for (uint j = 0u; j < PAIR_BATCH; ++j) {
            mark_pair(records[triangles[j]], triangles[j], start + j < end, column, low, high);
        }
    }

#if CHUNKED
    // Rounds of one tile run side by side in this dispatch: atomics where they meet.
    uint base = column_base(window, column);
    uint column_word = uint(low) >> 5;
    [[unroll]] for (int q = 0; q < CHUNK_WORDS; ++q) {
        if (words[q] != 0u) atomicOr(grid[base + column_word + uint(q)], words[q]);
    }
#if FACE_IDS
    uint id_base = (uint(column.y - window.buffer_row) * uint(window.nx) + uint(column.x))
                   * uint(window.nz) + uint(low);
    [[unroll]] for (int v = 0; v < CHUNK_VOXELS; ++v) {
        if (ids[v] != NO_FACE) atomicMin(face_ids[id_base + v], ids[v]);
    }
#endif
#else
    if (left_out) {  // every thread that left a pair out writes the same values
        uint chunks = (uint(window.nz) + CHUNK_VOXELS - 1u) / CHUNK_VOXELS;
        fallback_group_count = uvec3(group_count.xy, fallback_rounds * chunks);
        fallback_tile_count = tile_count;
    }
#endif
}
