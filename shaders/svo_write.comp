#version 460
// SVO pass 2, compaction: every stored node or brick goes to its place in the output arrays,
// given by the exclusive scan of the stored flags of its level (docs/svo-format.md).
//   WRITE_BRICKS 0: one thread per node of one level; writes the masks and first_child;
//   WRITE_BRICKS 1: one thread per run of bricks (svo.glsl); writes the 64 bits of each
//     mixed brick.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Grid { uint grid[]; };
layout(std430, binding = 1) readonly buffer States { uint states[]; };        // this level
layout(std430, binding = 2) readonly buffer Positions { uint positions[]; };  // scanned flags, this level
layout(std430, binding = 3) readonly buffer ChildStates { uvec4 child_states[]; };  // 8 per node
layout(std430, binding = 4) readonly buffer ChildPositions { uint child_positions[]; };
layout(std430, binding = 5) writeonly buffer Output { uvec2 entries[]; };    // nodes or bricks
#if WRITE_BRICKS
layout(std430, binding = 6) readonly buffer RunMixed { uint run_mixed[]; };   // svo_classify
#endif

#include "svo.glsl"

layout(push_constant) uniform Params {
    BrickSource source;
    uint count;         // entries at this level; bricks: runs of them
    uint level_start;   // index of this level's first node in the nodes array
    uint child_start;   // index of the next level's first node (0 for bricks)
    uint is_root;       // the root is stored whatever its state (one cube spanning the grid)
};

void main() {
#if WRITE_BRICKS
    uint index = flat_invocation_id();
    if (index >= count) return;
    uint mixed = run_mixed[index];
    if (mixed == 0u) return;  // most runs: nothing stored, no grid read
    BrickRun run = brick_run(source, index);
    uint words[16];
    read_run_words(source, run, words);
    for (uint q = 0u; q < run.bricks; ++q) {
        if ((mixed >> q & 1u) != 0u) {
            entries[positions[run_brick_code(run, q)]] = run_brick_bits(words, run_brick_shift(run, q));
        }
    }
#else
    uint code = flat_invocation_id();
    if (code >= count) return;
    if (states[code] != STATE_MIXED && is_root == 0u) return;
    uint mixed_mask = 0u, full_mask = 0u;
    [[unroll]] for (uint half_ = 0u; half_ < 2u; ++half_) {
        uvec4 children = child_states[2u * code + half_];
        [[unroll]] for (uint c = 0u; c < 4u; ++c) {
            mixed_mask |= uint(children[c] == STATE_MIXED) << (4u * half_ + c);
            full_mask |= uint(children[c] == STATE_FULL) << (4u * half_ + c);
        }
    }
    uint index = is_root != 0u ? 0u : level_start + positions[code];
    entries[index] = uvec2(mixed_mask | (full_mask << 8), child_start + child_positions[8u * code]);
#endif
}
