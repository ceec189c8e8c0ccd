#version 460
// SVO pass 1, bottom-up classification: the state (empty, full, mixed) of every brick, then
// of every node of each level from its eight children. Indexed by forest code at each level
// (svo.glsl: the cube, then the Morton code inside it); also writes the "stored" flag (mixed)
// that the scan turns into storage positions, and per run of bricks a mask of its mixed
// bricks, so that the compaction reads the grid only for runs that store a brick.
//   CLASSIFY_BRICKS 1: one thread per run of up to 8 bricks along z that share one word of
//     each of their 16 columns: the OR and AND of those 16 words say which of the bricks are
//     empty (no bit in the nibble of the OR) and full (all bits in the nibble of the AND);
//   CLASSIFY_BRICKS 0: one thread per node of one level, from the next level's states.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Grid { uint grid[]; };
layout(std430, binding = 1) readonly buffer ChildStates { uvec4 child_states[]; };  // 8 per node
layout(std430, binding = 2) writeonly buffer States { uint states[]; };
layout(std430, binding = 3) writeonly buffer Stored { uint stored[]; };
#if CLASSIFY_BRICKS
layout(std430, binding = 4) writeonly buffer RunMixed { uint run_mixed[]; };  // per run
#endif

#include "svo.glsl"

layout(push_constant) uniform Params {
    BrickSource source;
    uint count;  // entries at this level: cubes * (side in the cube)^3; bricks: runs of them
};

void write_state(uint code, uint state) {
    states[code] = state;
    stored[code] = uint(state == STATE_MIXED);
}

#if CLASSIFY_BRICKS
void main() {
    uint index = flat_invocation_id();
    if (index >= count) return;
    BrickRun run = brick_run(source, index);
    uint words[16];
    read_run_words(source, run, words);
    uint mixed = 0u;
    for (uint q = 0u; q < run.bricks; ++q) {
        uint state = run_brick_state(words, run_brick_shift(run, q));
        write_state(run_brick_code(run, q), state);
        mixed |= uint(state == STATE_MIXED) << q;
    }
    run_mixed[index] = mixed;
}
#else
void main() {
    uint code = flat_invocation_id();
    if (code >= count) return;
    uvec4 low = child_states[2u * code], high = child_states[2u * code + 1u];
    bool empty = all(equal(low, uvec4(STATE_EMPTY))) && all(equal(high, uvec4(STATE_EMPTY)));
    bool full = all(equal(low, uvec4(STATE_FULL))) && all(equal(high, uvec4(STATE_FULL)));
    write_state(code, empty ? STATE_EMPTY : (full ? STATE_FULL : STATE_MIXED));
}
#endif
