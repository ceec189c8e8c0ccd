#version 460
// Pass 6, compaction: the list of non-empty tiles, built on the GPU from the scanned flags.
// After the bitonic sort (one thread per pair) the first pair of a tile records where the
// tile's pairs start and the last pair where they end; after the counting sort
// (FROM_HISTOGRAM 1, one thread per tile key) the histogram and its scan say both. The last
// thread also writes the tile count and the fill's indirect dispatch size.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"
#include "triangle.glsl"

#if FROM_HISTOGRAM
layout(std430, binding = 0) readonly buffer Counts { uint counts[]; };  // pairs per tile key
layout(std430, binding = 4) readonly buffer Starts { uint starts[]; };  // their exclusive scan
#else
layout(std430, binding = 0) readonly buffer Pairs { uvec2 pairs[]; };
#endif
layout(std430, binding = 1) readonly buffer Slots { uint slots[]; };  // exclusive scan of the flags
layout(std430, binding = 2) writeonly buffer Tiles { Tile tiles[]; };
layout(std430, binding = 3) writeonly buffer FillDispatch {
    uvec3 group_count;  // VkDispatchIndirectCommand for the fill
    uint tile_count;
};

layout(push_constant) uniform Params {
    uint count;         // pairs, or tile keys
    uint max_groups_x;  // the device's maxComputeWorkGroupCount[0], capped at 65,535
};

void write_dispatch(uint total) {
    uint rows = (total + max_groups_x - 1u) / max_groups_x;
    group_count = uvec3(min(total, max_groups_x), rows, 1u);
    tile_count = total;
}

void main() {
    uint i = flat_invocation_id();
    if (i >= count) return;
#if FROM_HISTOGRAM
    bool occupied = counts[i] != 0u;
    if (occupied) {
        tiles[slots[i]] = Tile(i, starts[i], starts[i] + counts[i], 0u);
    }
    if (i + 1u == count) write_dispatch(slots[i] + uint(occupied));
#else
    uint key = pairs[i].x;
    bool first = i == 0u || pairs[i - 1u].x != key;
    bool last = i + 1u == count || pairs[i + 1u].x != key;
    uint slot = slots[i] + uint(first) - 1u;  // this tile's index in the compacted list
    if (first) {
        tiles[slot].key = key;
        tiles[slot].first = i;
    }
    if (last) {
        tiles[slot].end = i + 1u;
    }
    if (i + 1u == count) write_dispatch(slot + 1u);
#endif
}
