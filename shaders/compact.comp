#version 460
// Pass 6, compaction: the list of non-empty tiles, built on the GPU from the scanned flags.
// The first pair of a tile records where the tile's pairs start, the last pair where they
// end; the last thread also writes the tile count and the fill's indirect dispatch size.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"

struct Tile {
    uint key;    // tx + ty * (N / TILE_SIDE)
    uint first;  // index of its first pair
    uint end;    // one past its last pair
    uint pad;
};

layout(std430, binding = 0) readonly buffer Pairs { uvec2 pairs[]; };
layout(std430, binding = 1) readonly buffer Slots { uint slots[]; };  // exclusive scan of the flags
layout(std430, binding = 2) writeonly buffer Tiles { Tile tiles[]; };
layout(std430, binding = 3) writeonly buffer FillDispatch {
    uvec3 group_count;  // VkDispatchIndirectCommand for the fill
    uint tile_count;
};

layout(push_constant) uniform Params {
    uint pair_count;
    uint max_groups_x;  // the device's maxComputeWorkGroupCount[0], capped at 65,535
};

void main() {
    uint i = flat_invocation_id();
    if (i >= pair_count) return;
    uint key = pairs[i].x;
    bool first = i == 0u || pairs[i - 1u].x != key;
    bool last = i + 1u == pair_count || pairs[i + 1u].x != key;
    uint slot = slots[i] + uint(first) - 1u;  // this tile's index in the compacted list
    if (first) {
        tiles[slot].key = key;
        tiles[slot].first = i;
    }
    if (last) {
        tiles[slot].end = i + 1u;
    }
    if (i + 1u == pair_count) {
        uint count = slot + 1u;
        uint rows = (count + max_groups_x - 1u) / max_groups_x;
        group_count = uvec3(min(count, max_groups_x), rows, 1u);
        tile_count = count;
    }
}
