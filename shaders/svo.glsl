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

uvec3 morton_decode(uint code) {
    return uvec3(morton_compact(code), morton_compact(code >> 1), morton_compact(code >> 2));
}

// The 64 voxels of brick (x, y, z) as (bits 0-31, bits 32-63); bit x + 4y + 16z of the brick
// is voxel (4 brick.x + x, 4 brick.y + y, 4 brick.z + z). Bricks past the grid are empty.
uvec2 brick_bits(uvec3 brick, uint n) {
    uvec2 bits = uvec2(0u);
    if (any(greaterThanEqual(brick * 4u, uvec3(n)))) return bits;
    uint column_words = (n + 31u) >> 5;
    uint word_in_column = (brick.z * 4u) >> 5;
    uint shift = (brick.z * 4u) & 31u;
    [[unroll]] for (uint y = 0u; y < 4u; ++y) {
        [[unroll]] for (uint x = 0u; x < 4u; ++x) {
            uint column = (brick.y * 4u + y) * n + brick.x * 4u + x;
            uint nibble = (grid[column * column_words + word_in_column] >> shift) & 0xFu;
            uint at = x + 4u * y;  // bit of z = 0; z adds 16 per step
            bits.x |= ((nibble & 1u) << at) | (((nibble >> 1) & 1u) << (at + 16u));
            bits.y |= (((nibble >> 2) & 1u) << at) | (((nibble >> 3) & 1u) << (at + 16u));
        }
    }
    return bits;
}

uint brick_state(uvec2 bits) {
    if (bits == uvec2(0u)) return STATE_EMPTY;
    if (bits == uvec2(0xFFFFFFFFu)) return STATE_FULL;
    return STATE_MIXED;
}
