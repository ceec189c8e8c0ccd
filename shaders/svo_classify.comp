#version 460
// SVO pass 1, bottom-up classification: the state (empty, full, mixed) of every brick, then
// of every node of each level from its eight children. Indexed by forest code at each level
// (svo.glsl: the cube, then the Morton code inside it); also writes the "stored" flag (mixed)
// that the scan turns into storage positions.
//   CLASSIFY_BRICKS 1: one thread per run of up to 8 bricks along z that share one word of
//     each of their 16 columns: the OR and AND of those 16 words say which of the bricks are
//     empty (no bit in the nibble of the OR) and full (all bits in the nibble of the AND);
//   CLASSIFY_BRICKS 0: one thread per node of one level, from the next level's states.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Grid { uint grid[]; };
layout(std430, binding = 1) readonly buffer ChildStates { uint child_states[]; };
layout(std430, binding = 2) writeonly buffer States { uint states[]; };
layout(std430, binding = 3) writeonly buffer Stored { uint stored[]; };

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
    uint run = flat_invocation_id();
    if (run >= count) return;
    uint side = 1u << source.cube_levels;  // bricks per cube side
    uint run_length = min(8u, side);
    uint runs_per_column = side / run_length;
    uint cube = run / (side * side * runs_per_column);
    uint in_cube = run % (side * side * runs_per_column);
    uvec3 local = uvec3(in_cube % side, (in_cube / side) % side,
                        in_cube / (side * side) * run_length);
    uvec3 cube_position = uvec3(cube % source.cubes_per_row, source.cube_y,
                                cube / source.cubes_per_row);
    uvec3 brick = (cube_position << source.cube_levels) + local;  // the run's first brick
    uint any_bits = 0u, all_bits = 0xFFFFFFFFu;
    if (brick.x * 4u < source.nx && brick.y * 4u < source.ny && brick.z * 4u < source.nz) {
        uint column_words = (source.nz + 31u) >> 5;
        uint word = (brick.z * 4u) >> 5;
        [[unroll]] for (uint y = 0u; y < 4u; ++y) {
            [[unroll]] for (uint x = 0u; x < 4u; ++x) {
                uint column = (brick.y * 4u + y - source.buffer_row) * source.nx + brick.x * 4u + x;
                uint bits = grid[column * column_words + word];
                any_bits |= bits;
                all_bits &= bits;
            }
        }
    } else {
        all_bits = 0u;  // past the grid: empty
    }
    uint first_code = cube << (3u * source.cube_levels);
    for (uint q = 0u; q < run_length; ++q) {
        uint shift = ((brick.z + q) * 4u) & 31u;
        uint state = ((any_bits >> shift) & 0xFu) == 0u ? STATE_EMPTY
                   : (((all_bits >> shift) & 0xFu) == 0xFu ? STATE_FULL : STATE_MIXED);
        write_state(first_code + morton_encode(local + uvec3(0u, 0u, q)), state);
    }
}
#else
void main() {
    uint code = flat_invocation_id();
    if (code >= count) return;
    uint empty = 0u, full = 0u;
    [[unroll]] for (uint c = 0u; c < 8u; ++c) {
        uint child = child_states[8u * code + c];
        empty += uint(child == STATE_EMPTY);
        full += uint(child == STATE_FULL);
    }
    write_state(code, empty == 8u ? STATE_EMPTY : (full == 8u ? STATE_FULL : STATE_MIXED));
}
#endif
