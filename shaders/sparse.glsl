// The sparse grid of the large voxelizations (voxelizer/pipeline/cubes.py, CubeSpace): the
// grid is cut into cubes of 32^3 voxels, and only the cubes that a crossing of the surface
// may reach (the surface cubes) hold words. One slab of cube rows at a time:
//
//   * cube_bits, one bit per cube of the slab: stack (cx, cy) = the cubes of one column of
//     cubes, cz along z; its bits are stack_words consecutive words, cz in bit cz % 32 of
//     word cz / 32; the stacks follow each other x fastest, then the slab's cube rows;
//   * word_slots, the exclusive scan of the words' set bits: a surface cube's slot (its
//     place among the slab's surface cubes, stack by stack, upwards in a stack) is its
//     word's entry plus the set bits below it in the word;
//   * cubes, the surface cubes' words, in batches of A x A cubes (A = 2^batch_shift). A batch
//     is laid out as the grid of one slab of 32 rows, 32 A columns wide and 32 A voxels deep
//     (common.glsl, column_base), cube c = u + A v of the batch at columns 32 u .. 32 u + 31
//     and voxels 32 v .. 32 v + 31 of them: the SVO build reads a batch as a forest of A x A
//     cubes (svo.glsl) as it is. One uint per column of a cube: voxel z in bit z % 32.
//
// Bits of cubes beyond the grid (x >= nx, y >= ny, z >= nz) stay 0.

#define CUBE_SHIFT 5
#define CUBE_SIDE (1 << CUBE_SHIFT)
#define CUBE_COLUMNS (CUBE_SIDE * CUBE_SIDE)

struct CubeSpace {
    int nx;
    int ny;
    int nz;
    int cube_row;     // the slab's first cube row (y / 32)
    int cube_rows;    // cube rows in the slab
    int cubes_x;      // cubes along x: ceil(nx / 32)
    int cubes_z;      // cubes along z: ceil(nz / 32)
    int stack_words;  // words of a stack's bits: ceil(cubes_z / 32)
    uint batch_shift; // log2 A
};

// The stack of column (i, j) of the slab.
uint stack_of(CubeSpace s, ivec2 column) {
    return uint((column.y >> CUBE_SHIFT) - s.cube_row) * uint(s.cubes_x)
         + uint(column.x >> CUBE_SHIFT);
}

// The word of cube_bits that holds cube cz of a stack.
uint stack_word(CubeSpace s, uint stack, int cz) {
    return stack * uint(s.stack_words) + uint(cz >> 5);
}

// The word of column (x, y) (inside its cube, 0 to 31 each) of the cube at `slot`, in
// batches of 2^batch_shift x 2^batch_shift cubes (above).
uint cube_address(uint slot, uint batch_shift, uvec2 inside) {
    uint per_batch = 2u * batch_shift;
    uint batch = slot >> per_batch;
    uint c = slot & ((1u << per_batch) - 1u);
    uint u = c & ((1u << batch_shift) - 1u), v = c >> batch_shift;
    uint column = (inside.y << (CUBE_SHIFT + batch_shift)) + (u << CUBE_SHIFT) + inside.x;
    return (batch << (per_batch + 2u * CUBE_SHIFT)) + (column << batch_shift) + v;
}

// Voxel k is set iff an odd number of the flips at or below it are: the prefix XOR of a word.
uint prefix_xor(uint bits) {
    bits ^= bits << 1;
    bits ^= bits << 2;
    bits ^= bits << 4;
    bits ^= bits << 8;
    bits ^= bits << 16;
    return bits;
}
