// Shared by the SVO passes: Morton codes, node states, and bricks read from the dense grid.
// The layout they build is docs/svo-format.md.

#define STATE_EMPTY 0u
#define STATE_FULL 1u
#define STATE_MIXED 2u

// Every third bit of a Morton code, gathered: the inverse of spreading x to bits 0, 3, 6, ...
uint morton_compact(uint code) {
    code &= 0x09249249u;
    code = (code ^ (code >> 2)) & 0x030C30C3u;
    code = (code ^ (code >> 4)) & 0x0300F00Fu;
    code = (code ^ (code >> 8)) & 0xFF0000FFu;
    code = (code ^ (code >> 16)) & 0x000003FFu;
    return code;
}

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

uvec3 morton_decode(uint code) {
    return uvec3(morton_compact(code), morton_compact(code >> 1), morton_compact(code >> 2));
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

uvec3 forest_brick(BrickSource source, uint code) {
    uint cube = code >> (3u * source.cube_levels);
    uint inside = code & ((1u << (3u * source.cube_levels)) - 1u);
    uvec3 cube_position = uvec3(cube % source.cubes_per_row, source.cube_y,
                                cube / source.cubes_per_row);
    return (cube_position << source.cube_levels) + morton_decode(inside);
}

// The 64 voxels of brick (x, y, z) as (bits 0-31, bits 32-63); bit x + 4y + 16z of the brick
// is voxel (4 brick.x + x, 4 brick.y + y, 4 brick.z + z). Bricks past the grid are empty.
uvec2 brick_bits(BrickSource source, uvec3 brick) {
    uvec2 bits = uvec2(0u);
    if (any(greaterThanEqual(brick * 4u, uvec3(source.nx, source.ny, source.nz)))) return bits;
    uint column_words = (source.nz + 31u) >> 5;
    uint word_in_column = (brick.z * 4u) >> 5;
    uint shift = (brick.z * 4u) & 31u;
    [[unroll]] for (uint y = 0u; y < 4u; ++y) {
        [[unroll]] for (uint x = 0u; x < 4u; ++x) {
            uint column = (brick.y * 4u + y - source.buffer_row) * source.nx + brick.x * 4u + x;
            uint nibble = (grid[column * column_words + word_in_column] >> shift) & 0xFu;
            uint at = x + 4u * y;  // bit of z = 0; z adds 16 per step
            bits.x |= ((nibble & 1u) << at) | (((nibble >> 1) & 1u) << (at + 16u));
            bits.y |= (((nibble >> 2) & 1u) << at) | (((nibble >> 3) & 1u) << (at + 16u));
        }
    }
    return bits;
}
