#version 460
// SVO pass 1, bottom-up classification: the state (empty, full, mixed) of every brick, then
// of every node of each level from its eight children. Indexed by Morton code at each level;
// also writes the "stored" flag (mixed) that the scan turns into storage positions.
//   CLASSIFY_BRICKS 1: one thread per brick, read from the dense grid;
//   CLASSIFY_BRICKS 0: one thread per node of one level, from the next level's states.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Grid { uint grid[]; };
layout(std430, binding = 1) readonly buffer ChildStates { uint child_states[]; };
layout(std430, binding = 2) writeonly buffer States { uint states[]; };
layout(std430, binding = 3) writeonly buffer Stored { uint stored[]; };

layout(push_constant) uniform Params {
    uint count;  // entries at this level: (side)^3
    uint n;      // grid resolution
};

#include "svo.glsl"

void main() {
    uint code = flat_invocation_id();
    if (code >= count) return;
#if CLASSIFY_BRICKS
    uint state = brick_state(brick_bits(morton_decode(code), n));
#else
    uint empty = 0u, full = 0u;
    [[unroll]] for (uint c = 0u; c < 8u; ++c) {
        uint child = child_states[8u * code + c];
        empty += uint(child == STATE_EMPTY);
        full += uint(child == STATE_FULL);
    }
    uint state = empty == 8u ? STATE_EMPTY : (full == 8u ? STATE_FULL : STATE_MIXED);
#endif
    states[code] = state;
    stored[code] = uint(state == STATE_MIXED);
}
