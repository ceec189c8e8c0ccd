#version 460
// Surface pass (mode "surface", and "both" after the fill), over the pairs of the conservative
// binning (setup.comp and emit.comp with CONSERVATIVE 1) grouped by tile key: workgroup g
// takes GROUP_PAIRS consecutive pairs from g * GROUP_PAIRS on. They lie in one tile or a few
// neighbouring ones, and a tile with many pairs is shared among many workgroups: every
// workgroup has the same bounded work, whatever the mesh crowds into one tile. Two steps:
//  1. For every candidate (pair, column of its tile): does the triangle's xy-projection touch
//     the column's closed square (touch.glsl)? Those that do go to a queue in shared memory.
//  2. The threads share out the queue. For each item, exactly, the contiguous range of voxels
//     [k0, k1] of the column that the triangle marks, ORed into the grid word by word (atomics:
//     workgroups meet in the same columns), and with FACE_IDS each voxel's id lowered to the
//     triangle's index (triangle_offset + batch index): the smallest index of the triangles that
//     mark it (0xFFFFFFFF, i.e. -1 as int32: none). OR and min do not depend on the order.
//
// Conservative (THIN 0): voxel k is marked iff the closed triangle (a segment or a point when
// degenerate) meets the closed cube [i, i+1] x [j, j+1] x [k, k+1]. Separating axes: the
// column's square in xy decides whether the column is touched at all (step 1); the cube's
// z-extent, the three edges crossed with the x and y axes (the yz- and xz-projections) and the
// triangle's normal each bound k from one side or both, and the range is what all bounds
// leave. The axes e_z x d and the normal of a vertical triangle lie in the xy-plane: the
// square's test covers them.
//
// Thin (THIN 1, 6-separating): for a triangle with normal N != 0 and dominant axis c (the
// largest |N_c|; ties to z, then y), the voxel whose centre line along c the closed triangle's
// projection along c covers, at floor(crossing) along c (the last voxel for a crossing on the
// grid's far face). A degenerate triangle (N = 0) marks its conservative voxels. A voxel so
// marked holds a point of the triangle, so its column's square is touched: step 1 filters
// the thin surface's candidates too.
//
// The ranges are exact integer decisions (shaders/surface.glsl).
//
// Loop trips per invocation (llvmpipe's budget, tiles.glsl): CANDIDATES_PER_THREAD in step 1,
// at most as many items in step 2, each with at most column_words(nz) + 1 words (and nz
// voxels with FACE_IDS): below 4 * (8,192 + 257) for the deepest column of 8,192 voxels.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = GROUP_THREADS) in;
#include "common.glsl"
#include "triangle.glsl"
#include "exact.glsl"
#include "touch.glsl"
#include "surface.glsl"

layout(std430, binding = 0) restrict readonly buffer Records { TriangleRecord records[]; };
layout(std430, binding = 1) restrict readonly buffer Pairs { uvec2 pairs[]; };  // grouped by tile
layout(std430, binding = 4) restrict buffer Grid { uint grid[]; };
#if FACE_IDS
layout(std430, binding = 5) restrict buffer FaceIds { uint face_ids[]; };  // nz per column, as Grid's bits
#endif

layout(push_constant) uniform Params {
    Window window;
    // The grid's columns along x and y: thin crossings on its far faces (x = grid_nx, y =
    // grid_ny) mark its last column or row; the columns beyond, the padding up to whole
    // tiles (window.nx, the rows of the last tile row), are never marked.
    int grid_nx;
    int grid_ny;
    uint pair_count;       // pairs of the part
    uint triangle_offset;  // mesh index of the batch's triangle 0 (FACE_IDS)
};

#define CANDIDATES (GROUP_PAIRS * TILE_COLUMNS)
#define CANDIDATES_PER_THREAD (CANDIDATES / GROUP_THREADS)

shared uint queue[CANDIDATES];  // step 1's touched candidates: pair slot * TILE_COLUMNS + lane
shared uint queued;

// The voxels of a touched column that the triangle marks.
ivec2 marked_range(TriangleRecord r, ivec2 column) {
#if THIN
    return thin_range(r.a.xyz, r.b.xyz, r.c.xyz, column, ivec3(grid_nx, grid_ny, window.nz));
#else
    return touched_column_range(r.a.xyz, r.b.xyz, r.c.xyz, column, window.nz);
#endif
}

void mark(ivec2 range, ivec2 column, uint triangle) {
    uint base = column_base(window, column);
    for (int word = range.x >> 5; word <= range.y >> 5 && range.x <= range.y; ++word) {
        atomicOr(grid[base + uint(word)], word_range_mask(word, range.x, range.y + 1));
    }
#if FACE_IDS
    uint face = triangle_offset + triangle;
    uint id_base = (uint(column.y - window.buffer_row) * uint(window.nx) + uint(column.x))
                   * uint(window.nz);
    for (int k = range.x; k <= range.y; ++k) {
        atomicMin(face_ids[id_base + uint(k)], face);
    }
#endif
}

void main() {
    uint first = flat_group_id() * GROUP_PAIRS;
    if (gl_LocalInvocationID.x == 0u) queued = 0u;
    barrier();
    // Step 1: TILE_COLUMNS consecutive threads test one pair's columns.
    for (uint step = 0u; step < CANDIDATES_PER_THREAD; ++step) {
        uint candidate = step * GROUP_THREADS + gl_LocalInvocationID.x;
        uint index = first + candidate / TILE_COLUMNS;
        if (index < pair_count) {
            uvec2 pair = pairs[index];
            TriangleRecord r = records[pair.y];
            ivec2 column = tile_lane_column(window, pair.x, candidate % TILE_COLUMNS);
            bool in_grid = column.x < grid_nx && column.y < grid_ny;
            if (in_grid && square_touched(r.a.xyz, r.b.xyz, r.c.xyz, column << FIXED_BITS, ONE)) {
                queue[atomicAdd(queued, 1u)] = candidate;
            }
        }
    }
    barrier();
    // Step 2: the queue, shared out.
    uint items = queued;
    for (uint item = gl_LocalInvocationID.x; item < items; item += GROUP_THREADS) {
        uint candidate = queue[item];
        uvec2 pair = pairs[first + candidate / TILE_COLUMNS];
        ivec2 column = tile_lane_column(window, pair.x, candidate % TILE_COLUMNS);
        mark(marked_range(records[pair.y], column), column, pair.y);
    }
}
