#version 460
// SVO pass 2, compaction: every stored node and brick at its place in the output arrays
// (docs/svo-format.md), each place read from the scanned counts (svo.glsl, count_start),
// then the arrays copied to host-visible memory, all without the host in between.
//
// WRITE_STAGE 0, nodes: one thread per node of levels 0 .. L - 2 writes its stored children
//   (a group node also its leaves, with the leaf positions for stage 1); the threads of the
//   level-0 nodes also write the stored roots. Thread 0 writes the totals the host reads
//   (level offsets, brick count, each cube's state) and the indirect dispatches of stages 1
//   and 2.
// WRITE_STAGE 1, bricks: one thread per stored leaf reads the words of its 8 x 8 columns
//   that hold a mixed brick and writes those bricks.
// WRITE_STAGE 2, download: the nodes and bricks, as many as the counts say, copied one
//   uvec4 per thread into the host-visible arrays.
// Nothing is written past an array's capacity; the host sees the totals, grows the arrays
// and runs these stages again (svo_build.py).
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"
#include "svo.glsl"

layout(std430, binding = 0) readonly buffer Counts { uint counts[]; };  // scanned
#if WRITE_STAGE == 0
layout(std430, binding = 1) readonly buffer Masks { uint masks[]; };
layout(std430, binding = 2) writeonly buffer Nodes { uvec2 nodes[]; };
layout(std430, binding = 3) writeonly buffer Leaves { uint leaves[]; };  // packed leaf positions
layout(std430, binding = 4) writeonly buffer Totals { uint totals[]; };  // host-visible
layout(std430, binding = 5) writeonly buffer BrickDispatch { uvec3 brick_groups; };
layout(std430, binding = 6) writeonly buffer DownloadDispatch { uvec3 download_groups; };
#elif WRITE_STAGE == 1
layout(std430, binding = 1) readonly buffer Grid { uvec4 grid[]; };
layout(std430, binding = 2) readonly buffer Nodes { uvec2 nodes[]; };
layout(std430, binding = 3) readonly buffer Leaves { uint leaves[]; };
layout(std430, binding = 4) writeonly buffer Bricks { uvec2 bricks[]; };
#else
layout(std430, binding = 2) readonly buffer Nodes { uvec4 node_quads[]; };
layout(std430, binding = 4) readonly buffer Bricks { uvec4 brick_quads[]; };
layout(std430, binding = 5) writeonly buffer HostNodes { uvec4 host_node_quads[]; };
layout(std430, binding = 6) writeonly buffer HostBricks { uvec4 host_brick_quads[]; };
#endif

layout(push_constant) uniform Params {
    BrickSource source;
    uint node_capacity;   // entries the nodes (and leaves) arrays hold
    uint brick_capacity;  // entries the bricks array holds
    uint max_groups_x;    // the device's maxComputeWorkGroupCount[0], capped at 65,535
};

uint node_count() {
    return counts[group_start(source)];
}

uint brick_count() {
    return counts[count_end(source)] - node_count();
}

// Index of the first leaf node, the start of level L - 1.
uint leaf_start() {
    return source.cube_levels >= 2u ? counts[count_start(source, source.cube_levels - 2u)] : 0u;
}

#if WRITE_STAGE == 0
uvec3 groups_for(uint threads) {
    uint total = (threads + WG_SIZE - 1u) / WG_SIZE;
    return uvec3(max(1u, min(total, max_groups_x)), (total + max_groups_x - 1u) / max_groups_x, 1u);
}

void write_totals() {
    uint levels = source.cube_levels;
    totals[0] = 0u;
    for (uint level = 0u; level + 1u < levels; ++level) totals[level + 1u] = counts[count_start(source, level)];
    totals[levels] = node_count();
    totals[levels + 1u] = brick_count();
    uint stored_nodes = min(node_count(), node_capacity);
    uint stored_bricks = min(brick_count(), brick_capacity);
    brick_groups = groups_for(stored_nodes - min(leaf_start(), stored_nodes));
    download_groups = groups_for((stored_nodes + 1u) / 2u + (stored_bricks + 1u) / 2u);
}

void write_node(uint index, uint mask, uint first_child) {
    if (index < node_capacity) nodes[index] = uvec2(mask, first_child);
}

void write_leaf(uint index, uint mask, uint first_brick, uvec3 leaf) {
    write_node(index, mask, first_brick);
    if (index < node_capacity) leaves[index - leaf_start()] = pack_leaf(leaf);
}

void main() {
    uint id = flat_invocation_id();
    uint leaf_level_ = leaf_level(source);
    if (id == 0u) write_totals();
    if (id < cube_count(source)) {  // the level-0 node `id`: stored if counted in R
        uint mask = masks[id];
        totals[source.cube_levels + 2u + id] = mask == 0u ? 0u : (mask_full(mask) ? 1u : 2u);
        if (whole_octree(source) || mask_mixed(mask)) {
            if (leaf_level_ == 0u) {
                uint first_brick = counts[group_start(source) + id] - node_count();
                write_leaf(counts[id], mask, first_brick, forest_node(source, 0u, id));
            } else {
                write_node(counts[id], mask, counts[count_start(source, 0u) + id]);
            }
        }
    }
    // The node `id` of levels 0 .. L - 2 (each level starts on a whole uvec4: skip the gaps).
    uint level = 0u, start = 0u;
    for (; level + 1u < source.cube_levels; ++level) {
        uint size = level_size(source, level);
        if (id < start + size) break;
        start += round_to_quad(size);
    }
    if (level + 1u >= source.cube_levels || id < start) return;
    uint code = id - start;
    uint mask = masks[id];
    uint mixed = mask & 0xFFu;
    if (mixed == 0u) return;
    uint first = counts[count_start(source, level) + code];
    uint children = mask_start(source, level + 1u) + 8u * code;
    if (level + 1u < leaf_level_) {
        uint child_counts = count_start(source, level + 1u) + 8u * code;
        CPU_LOOP for (uint c = 0u; c < 8u; ++c) {
            if ((mixed >> c & 1u) != 0u) {
                write_node(first + child_rank(mixed, c), masks[children + c], counts[child_counts + c]);
            }
        }
    } else {  // a group node: its children are leaves, whose children are bricks
        uint first_brick = counts[group_start(source) + code] - node_count();
        uvec3 corner = 2u * forest_node(source, level, code);
        CPU_LOOP for (uint c = 0u; c < 8u; ++c) {
            uint leaf_mask = masks[children + c];
            if ((mixed >> c & 1u) != 0u) {
                uvec3 leaf = corner + uvec3(c & 1u, (c >> 1) & 1u, c >> 2);
                write_leaf(first + child_rank(mixed, c), leaf_mask, first_brick, leaf);
            }
            first_brick += bitCount(leaf_mask & 0xFFu);
        }
    }
}
#elif WRITE_STAGE == 1
// Word `word` of column (x, row), row a grid row; 0 outside the grid.
uint grid_word(uint x, uint row, uint word) {
    uint words = grid_column_words(source);
    if (x >= source.nx || row >= source.ny || word >= words) return 0u;
    uint index = ((row - source.buffer_row) * source.nx + x) * words + word;
    return grid[index >> 2][index & 3u];
}

void main() {
    uint k = flat_invocation_id();
    uint first_leaf = leaf_start();
    if (k >= min(node_count(), node_capacity) - min(first_leaf, node_capacity)) return;
    uvec2 node = nodes[first_leaf + k];
    uint mixed = node.x & 0xFFu;
    uvec3 voxel = unpack_leaf(leaves[k]) * 8u + uvec3(0u, forest_row(source), 0u);
    uint word = voxel.z >> 5, shift = voxel.z & 31u;
    for (uint quadrant = 0u; quadrant < 4u; ++quadrant) {  // the 2 x 2 brick columns
        uint octants = (mixed >> quadrant) & 0x11u;  // child quadrant (z = 0) and quadrant + 4
        if (octants == 0u) continue;
        uint x = voxel.x + 4u * (quadrant & 1u), row = voxel.y + 4u * (quadrant >> 1);
#if CPU_DEVICE
        // the two bricks (z = 0, 1) column by column: one load in a loop, no array of words
        uvec2 brick[2] = uvec2[2](uvec2(0u), uvec2(0u));
        GPU_UNROLL for (uint c = 0u; c < 16u; ++c) {
            uint column_word = grid_word(x + (c & 3u), row + (c >> 2), word);
            brick[0] |= brick_column_bits(column_word >> shift, c);
            brick[1] |= brick_column_bits(column_word >> (shift + 4u), c);
        }
#else
        uint words[16];
        [[unroll]] for (uint c = 0u; c < 16u; ++c) words[c] = grid_word(x + (c & 3u), row + (c >> 2), word);
#endif
        [[unroll]] for (uint z = 0u; z < 2u; ++z) {
            uint c = quadrant + 4u * z;
            uint index = node.y + child_rank(mixed, c);
#if CPU_DEVICE
            if ((mixed >> c & 1u) != 0u && index < brick_capacity) bricks[index] = brick[z];
#else
            if ((mixed >> c & 1u) != 0u && index < brick_capacity) bricks[index] = brick_bits(words, shift + 4u * z);
#endif
        }
    }
}
#else
void main() {
    uint quad = flat_invocation_id();
    uint node_end = (min(node_count(), node_capacity) + 1u) / 2u;  // quads of stored nodes
    uint brick_end = (min(brick_count(), brick_capacity) + 1u) / 2u;
    if (quad < node_end) {
        host_node_quads[quad] = node_quads[quad];
    } else if (quad - node_end < brick_end) {
        host_brick_quads[quad - node_end] = brick_quads[quad - node_end];
    }
}
#endif
