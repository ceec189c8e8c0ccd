#version 460
// SVO pass 1, bottom-up classification: the masks (svo.glsl) of every node of the forest, and
// the counts whose scan places every stored node and brick (svo.glsl, count_start).
//
// CLASSIFY_STAGE 0, from the grid: one workgroup per block of 16 x 16 columns and one chunk
// of chunk_words words (32 per word: up to 1024 voxels) of each: 2 x 2 leaf nodes across, the
// group nodes above them. The grid is the one large thing the SVO build reads, so it is read once and
// coalesced: consecutive threads load consecutive uvec4s of a column's chunk (each column's
// words are contiguous), and a thread ORs and ANDs the 4 rows of a brick row in registers.
// Shared memory then combines the 4 columns of each brick (any voxel set, all set), the 8
// bricks of each leaf (its masks) and the 8 leaves of each group node (its masks and its
// mixed bricks). Bricks themselves are not stored: each is 2 bits here, and svo_write.comp
// reads the grid again only under the leaves that hold a mixed brick. The blocks cover every
// column and word of the grid, and the padding they reach reads as empty; where the forest
// extends further, the host has cleared the masks and counts first.
//
// CLASSIFY_STAGE 1, the levels above: one thread per node, from its 8 children's masks (one
// 32-byte run). A dispatch does one level, or (one workgroup) every level from level_high
// down to level_low, with a barrier between levels.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"
#include "svo.glsl"

#if CLASSIFY_STAGE == 0
layout(std430, binding = 0) readonly buffer Grid { uvec4 grid[]; };
layout(std430, binding = 1) writeonly buffer Masks { uint masks[]; };
#else
layout(std430, binding = 1) coherent buffer Masks { uint masks[]; };
#endif
layout(std430, binding = 2) writeonly buffer Counts { uint counts[]; };

layout(push_constant) uniform Params {
    BrickSource source;
#if CLASSIFY_STAGE == 0
    uint chunk_words;    // words of each column per workgroup: a multiple of 4, or 1 or 2 (small grids)
    uint blocks_across;  // blocks along x, and chunks along z, that hold grid voxels (the host
    uint chunks;         // clears the masks and counts of the rest of the forest)
#else
    uint level_high;
    uint level_low;
#endif
};

// The node's own outputs besides its masks: its mixed children (C), and whether a level-0
// node is stored (R: always for the root of the whole octree).
void write_counts(uint level, uint code, uint mask) {
    if (level < leaf_level(source)) counts[count_start(source, level) + code] = bitCount(mask & 0xFFu);
    if (level == 0u) counts[code] = uint(whole_octree(source) || mask_mixed(mask));
}

#if CLASSIFY_STAGE == 0
#define BLOCK 16u               // columns per side of a block
#define MAX_CHUNK 32u           // words per column and chunk
#define MAX_QUADS (MAX_CHUNK / 4u)
#if 4 * 16 * 8 > 2 * WG_SIZE
#error "each thread loads at most two items of a block's rows"
#endif

shared uvec4 rows_any[4][BLOCK][MAX_QUADS];  // per brick row, column and quad: OR of 4 rows
shared uvec4 rows_all[4][BLOCK][MAX_QUADS];  // ... and AND
shared uint bricks[4][4][MAX_CHUNK];         // per brick column and word: 8 bricks, any | all << 8
shared uint leaves[16u * MAX_CHUNK];         // leaf masks, 8 per group node (octant order)

// Words word .. word + 3 of column (x, y) (y in the forest's rows), 0 outside the grid, the
// forest or the chunk (or when `wanted` is false). Columns that are whole uvec4s take one
// load, issued whatever the bounds (an address inside the buffer) so that a thread's loads
// all leave before the first returns; other columns are read word by word.
uvec4 read_quad(bool wanted, uint x, uint y, uint word, uint chunk_end) {
    uint row = forest_row(source) + y;
    bool inside = wanted && x < source.nx && row < source.ny && y < forest_rows(source);
    uint words = grid_column_words(source);
    uint base = ((row - source.buffer_row) * source.nx + x) * words;
    if ((words & 3u) == 0u) {
        inside = inside && word < words;
        uvec4 quad = grid[inside ? (base + word) >> 2 : 0u];
        return inside ? quad : uvec4(0u);
    }
    uvec4 quad = uvec4(0u);
    if (!inside) return quad;
    GPU_UNROLL for (uint i = 0u; i < 4u; ++i) {
        uint w = word + i;
        if (w < min(words, chunk_end)) quad[i] = grid[(base + w) >> 2][(base + w) & 3u];
    }
    return quad;
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint side = 1u << source.cube_levels;  // bricks per cube side
    uint group = flat_group_id();
    uint chunk = group % chunks;
    uvec2 block = uvec2((group / chunks) % blocks_across, group / (chunks * blocks_across));
    uint x0 = block.x * BLOCK, y0 = block.y * BLOCK, word0 = chunk * chunk_words;
    uint chunk_end = word0 + chunk_words;
    uint quads = (chunk_words + 3u) >> 2;

    // Rows: item -> (brick row, column, quad), quad fastest, so a warp reads whole chunks of
    // columns; each thread takes two items and issues all eight loads before using one (on a
    // GPU; a CPU device, whose loads wait in order anyway, combines each as it comes).
    uint items = 4u * BLOCK * quads;
#if CPU_DEVICE
    GPU_UNROLL for (uint k = 0u; k < 2u; ++k) {
        uint item = tid + k * WG_SIZE;
        if (item >= items) break;
        uint q = item % quads, column = (item / quads) % BLOCK, brick_row = item / (quads * BLOCK);
        uvec4 any_row = uvec4(0u), all_rows = uvec4(~0u);
        GPU_UNROLL for (uint r = 0u; r < 4u; ++r) {
            uvec4 quad = read_quad(true, x0 + column, y0 + 4u * brick_row + r, word0 + 4u * q,
                                   chunk_end);
            any_row |= quad;
            all_rows &= quad;
        }
        rows_any[brick_row][column][q] = any_row;
        rows_all[brick_row][column][q] = all_rows;
    }
#else
    uvec4 loaded[2][4];
    [[unroll]] for (uint k = 0u; k < 2u; ++k) {
        uint item = tid + k * WG_SIZE;
        uint q = item % quads, column = (item / quads) % BLOCK, brick_row = item / (quads * BLOCK);
        [[unroll]] for (uint r = 0u; r < 4u; ++r) {
            loaded[k][r] = read_quad(item < items, x0 + column, y0 + 4u * brick_row + r,
                                     word0 + 4u * q, chunk_end);
        }
    }
    [[unroll]] for (uint k = 0u; k < 2u; ++k) {
        uint item = tid + k * WG_SIZE;
        if (item >= items) continue;
        uint q = item % quads, column = (item / quads) % BLOCK, brick_row = item / (quads * BLOCK);
        rows_any[brick_row][column][q] = loaded[k][0] | loaded[k][1] | loaded[k][2] | loaded[k][3];
        rows_all[brick_row][column][q] = loaded[k][0] & loaded[k][1] & loaded[k][2] & loaded[k][3];
    }
#endif
    barrier();

    // Bricks: 4 columns of a brick column; word w holds 8 bricks along z (a nibble each).
    for (uint item = tid; item < 16u * chunk_words; item += WG_SIZE) {
        uint w = item % chunk_words, bx = (item / chunk_words) & 3u, by = item / (4u * chunk_words);
        uint any_voxel = 0u, all_voxels = ~0u;
        GPU_UNROLL for (uint c = 0u; c < 4u; ++c) {
            any_voxel |= rows_any[by][4u * bx + c][w >> 2][w & 3u];
            all_voxels &= rows_all[by][4u * bx + c][w >> 2][w & 3u];
        }
        uint any_bits = 0u, all_bits = 0u;
        [[unroll]] for (uint b = 0u; b < 8u; ++b) {
            any_bits |= uint(((any_voxel >> (4u * b)) & 0xFu) != 0u) << b;
            all_bits |= uint(((all_voxels >> (4u * b)) & 0xFu) == 0xFu) << b;
        }
        bricks[by][bx][w] = any_bits | (all_bits << 8);
    }
    barrier();

    // Leaves: 2 x 2 across, 4 per word along z; numbered in group order (octant + 8 * group).
    uint leaf_level_ = leaf_level(source);
    uint leaves_per_side = side * source.cubes_per_row >> 1;  // leaves across the forest
    for (uint item = tid; item < 16u * chunk_words; item += WG_SIZE) {
        uint octant = item & 7u, group_z = item >> 3;
        uvec3 corner = uvec3(octant & 1u, (octant >> 1) & 1u, octant >> 2);
        uint leaf_z = 2u * group_z + corner.z;  // in this chunk
        uint mask = 0u;
        GPU_UNROLL for (uint c = 0u; c < 8u; ++c) {
            uint bits = bricks[2u * corner.y + ((c >> 1) & 1u)][2u * corner.x + (c & 1u)][leaf_z >> 2];
            uint b = 2u * (leaf_z & 3u) + (c >> 2);
            uint any_voxel = (bits >> b) & 1u, all_voxels = (bits >> (8u + b)) & 1u;
            mask |= ((any_voxel & ~all_voxels) << c) | (all_voxels << (8u + c));
        }
        leaves[item] = mask;
        uvec3 leaf = uvec3(2u * block.x + corner.x, 2u * block.y + corner.y,
                           4u * word0 + leaf_z);
        if (leaf.x < leaves_per_side && leaf.y < (side >> 1) && leaf.z < leaves_per_side) {
            uint code = forest_code(source, leaf_level_, leaf);
            masks[mask_start(source, leaf_level_) + code] = mask;
            write_counts(leaf_level_, code, mask);
            if (source.cube_levels == 1u) counts[group_start(source) + code] = bitCount(mask & 0xFFu);
        }
    }
    if (source.cube_levels == 1u) return;  // no group nodes: every leaf is a cube root
    barrier();

    // Group nodes: 8 leaves each, 2 per word along z.
    uint level = group_level(source);
    for (uint group_z = tid; group_z < 2u * chunk_words; group_z += WG_SIZE) {
        uvec3 node = uvec3(block.x, block.y, 2u * word0 + group_z);
        if (node.z >= (leaves_per_side >> 1)) continue;
        uint mask = 0u, mixed_bricks = 0u;
        GPU_UNROLL for (uint c = 0u; c < 8u; ++c) {
            uint leaf_mask = leaves[8u * group_z + c];
            mask |= child_bits(leaf_mask, c);
            mixed_bricks += bitCount(leaf_mask & 0xFFu);
        }
        uint code = forest_code(source, level, node);
        masks[mask_start(source, level) + code] = mask;
        write_counts(level, code, mask);
        counts[group_start(source) + code] = mixed_bricks;
    }
}
#else
void main() {
    uint threads = gl_NumWorkGroups.x * gl_NumWorkGroups.y * WG_SIZE;
    for (uint level = level_high;; --level) {
        uint children = mask_start(source, level + 1u), start = mask_start(source, level);
        for (uint code = flat_invocation_id(); code < level_size(source, level); code += threads) {
            uint mask = 0u;
            GPU_UNROLL for (uint c = 0u; c < 8u; ++c) mask |= child_bits(masks[children + 8u * code + c], c);
            masks[start + code] = mask;
            write_counts(level, code, mask);
        }
        if (level == level_low) break;
        memoryBarrierBuffer();
        barrier();
    }
}
#endif
