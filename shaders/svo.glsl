// Shared by the SVO passes: Morton codes, node states, and bricks read from the dense grid.
// The layout they build is docs/svo-format.md.

#define STATE_EMPTY 0u
#define STATE_FULL 1u
#define STATE_MIXED 2u

// Bit b of x moved to bit 3b: one axis of a Morton code (x < 1024).
uint morton_spread(uint x) {
    x &= 0x000003FFu;
    x = (x | (x << 16)) & 0xFF0000FFu;
    x = (x | (x << 8)) & 0x0300F00Fu;
    x = (x | (x << 4)) & 0x030C30C3u;
    x = (x | (x << 2)) & 0x09249249u;
    return x;
}

uint morton_encode(uvec3 position) {
    return morton_spread(position.x) | (morton_spread(position.y) << 1)
         | (morton_spread(position.z) << 2);
}

// Where bricks come from: the grid buffer of one slab of column rows, and the forest of cubes
// the slab is cut into. A cube is 2^cube_levels bricks per side; the slab's cubes have index
// c = cx + cubes_per_row * cz (all at cube row cube_y), and a brick's code in the forest is
// c * 8^cube_levels + its Morton code inside the cube. One cube spanning the grid is the
// whole octree; several are merged on the host (voxelizer/svo_merge.py).
struct BrickSource {
    uint cube_levels;
    uint cubes_per_row;
    uint cube_y;
    uint buffer_row;  // first column row held by the grid buffer
    uint nx;
    uint ny;
    uint nz;
};

// Bricks are read in runs: up to 8 bricks along z that share one 32-bit word of each of
// their 16 columns, so one pass over 16 words classifies (or writes) all of them. Runs are
// numbered cube by cube, then x fastest, then y, then z.
struct BrickRun {
    uint first_code;  // forest code of the run's cube's first brick
    uvec3 local;      // the run's first brick inside its cube
    uvec3 brick;      // the same in the grid
    uint bricks;      // bricks in the run
};

BrickRun brick_run(BrickSource source, uint run) {
    uint side = 1u << source.cube_levels;  // bricks per cube side
    BrickRun r;
    r.bricks = min(8u, side);
    uint runs_per_cube = side * side * side / r.bricks;
    uint cube = run / runs_per_cube;
    uint in_cube = run % runs_per_cube;
    r.local = uvec3(in_cube % side, (in_cube / side) % side, in_cube / (side * side) * r.bricks);
    uvec3 cube_position = uvec3(cube % source.cubes_per_row, source.cube_y,
                                cube / source.cubes_per_row);
    r.brick = (cube_position << source.cube_levels) + r.local;
    r.first_code = cube << (3u * source.cube_levels);
    return r;
}

// The run's word of each of its 16 columns (x + 4y), all zero past the grid.
void read_run_words(BrickSource source, BrickRun r, out uint words[16]) {
    bool inside = all(lessThan(r.brick * 4u, uvec3(source.nx, source.ny, source.nz)));
    uint column_words = (source.nz + 31u) >> 5;
    uint word = (r.brick.z * 4u) >> 5;
    [[unroll]] for (uint c = 0u; c < 16u; ++c) {
        uint column = (r.brick.y * 4u + (c >> 2) - source.buffer_row) * source.nx
                    + r.brick.x * 4u + (c & 3u);
        words[c] = inside ? grid[column * column_words + word] : 0u;
    }
}

// Brick q of the run: its state and its 64 voxels as (bits 0-31, bits 32-63), where bit
// x + 4y + 16z of the brick is voxel (4 brick.x + x, 4 brick.y + y, 4 brick.z + z).
uint run_brick_state(uint words[16], uint shift) {
    uint any_bits = 0u, all_bits = 0xFu;
    [[unroll]] for (uint c = 0u; c < 16u; ++c) {
        uint nibble = (words[c] >> shift) & 0xFu;
        any_bits |= nibble;
        all_bits &= nibble;
    }
    return any_bits == 0u ? STATE_EMPTY : (all_bits == 0xFu ? STATE_FULL : STATE_MIXED);
}

uvec2 run_brick_bits(uint words[16], uint shift) {
    uvec2 bits = uvec2(0u);
    [[unroll]] for (uint c = 0u; c < 16u; ++c) {
        uint nibble = (words[c] >> shift) & 0xFu;  // z = 0..3 of column c
        bits.x |= ((nibble & 1u) << c) | (((nibble >> 1) & 1u) << (c + 16u));
        bits.y |= (((nibble >> 2) & 1u) << c) | (((nibble >> 3) & 1u) << (c + 16u));
    }
    return bits;
}

uint run_brick_shift(BrickRun r, uint q) {
    return ((r.brick.z + q) * 4u) & 31u;
}

uint run_brick_code(BrickRun r, uint q) {
    return r.first_code + morton_encode(r.local + uvec3(0u, 0u, q));
}
