// Shared by the SVO passes: node masks, Morton codes, the forest's layout in the buffers, and
// bricks read from the dense grid. The layout they build is docs/svo-format.md.
//
// Every node (and the classification's view of a brick) is summed up by one uint, the same
// as word 0 of a stored node: bits 0-7 its mixed children, bits 8-15 its full children. A
// node is empty when the uint is 0, full when its full mask is 0xFF, mixed otherwise.

bool mask_full(uint mask) {
    return (mask >> 8) == 0xFFu;
}

bool mask_mixed(uint mask) {
    return mask != 0u && !mask_full(mask);
}

// Child c's contribution to its parent's masks.
uint child_bits(uint child_mask, uint c) {
    return (uint(mask_mixed(child_mask)) | (uint(mask_full(child_mask)) << 8)) << c;
}

// How many of the stored children come before child c.
uint child_rank(uint mask, uint c) {
    return bitCount(mask & ((1u << c) - 1u));
}

// Bit b of x moved to bit 3b: one axis of a Morton code (x < 1024), and back.
uint morton_spread(uint x) {
    x &= 0x000003FFu;
    x = (x | (x << 16)) & 0xFF0000FFu;
    x = (x | (x << 8)) & 0x0300F00Fu;
    x = (x | (x << 4)) & 0x030C30C3u;
    x = (x | (x << 2)) & 0x09249249u;
    return x;
}

uint morton_compact(uint x) {
    x &= 0x09249249u;
    x = (x | (x >> 2)) & 0x030C30C3u;
    x = (x | (x >> 4)) & 0x0300F00Fu;
    x = (x | (x >> 8)) & 0xFF0000FFu;
    x = (x | (x >> 16)) & 0x000003FFu;
    return x;
}

uint morton_encode(uvec3 position) {
    return morton_spread(position.x) | (morton_spread(position.y) << 1)
         | (morton_spread(position.z) << 2);
}

uvec3 morton_decode(uint code) {
    return uvec3(morton_compact(code), morton_compact(code >> 1), morton_compact(code >> 2));
}

// Where the voxels come from and which octree they make: the grid buffer of one slab of
// column rows, and the forest of cubes the slab is cut into. A cube is 2^cube_levels bricks
// per side, all at cube row cube_y; cube c = cx + cubes_per_row * cz. One cube spanning the
// grid (cubes_per_row 1) is the whole octree; several are merged on the host
// (voxelizer/pipeline/merge.py).
struct BrickSource {
    uint cube_levels;    // L: internal levels inside a cube; level L - 1 holds the leaf nodes
    uint cubes_per_row;
    uint cube_y;
    uint buffer_row;     // first column row held by the grid buffer
    uint nx;
    uint ny;
    uint nz;
};

// Levels and codes. Level l of the forest has cubes * 8^l nodes; node (x, y, z) of level l
// (x, z across the whole forest, y inside its cube row) has the code
// cube * 8^l + its Morton code inside the cube, so each node's children are codes 8m..8m+7.
// The leaf nodes (level L - 1) have bricks as children; their parents (level L - 2) are the
// "group" nodes, 8 leaves each. With L = 1 the leaves are the cube roots and each is its own
// group.
uint cube_count(BrickSource s) {
    return s.cubes_per_row * s.cubes_per_row;
}

bool whole_octree(BrickSource s) {
    return s.cubes_per_row == 1u;
}

uint leaf_level(BrickSource s) {
    return s.cube_levels - 1u;
}

uint group_level(BrickSource s) {
    return s.cube_levels >= 2u ? s.cube_levels - 2u : 0u;
}

uint level_size(BrickSource s, uint level) {
    return cube_count(s) << (3u * level);
}

uint round_to_quad(uint count) {
    return (count + 3u) & ~3u;
}

// The masks buffer holds every level, root first, each starting on a whole uvec4.
uint mask_start(BrickSource s, uint level) {
    uint start = 0u;
    for (uint l = 0u; l < level; ++l) start += round_to_quad(level_size(s, l));
    return start;
}

// The counts buffer, scanned in place as one array (the host reads its totals, svo_build.py):
//   R    at 0: 1 per level-0 node that is stored (the root of the whole octree always; a
//        forest's mixed cube roots);
//   C_l  at count_start(l), l = 0 .. L - 2: per node of level l, its mixed children;
//   B    at group_start: per group node, the mixed bricks of its 8 leaves (per leaf if L = 1);
//   one 0 at count_end.
// The exclusive scan E of that array is every index the output needs: a node of level
// l <= L - 2 has its first child at nodes[E(C_l)], a stored level-0 node sits at nodes[E(R)],
// E at the start of C_l is the first node of level l + 1 and E at group_start is the node
// count, so E(B) - node count is where a group's first brick goes.
uint count_start(BrickSource s, uint level) {
    return round_to_quad(cube_count(s)) + mask_start(s, level);
}

uint group_start(BrickSource s) {
    return count_start(s, leaf_level(s));
}

uint count_end(BrickSource s) {
    return group_start(s) + level_size(s, group_level(s));
}

uint forest_code(BrickSource s, uint level, uvec3 node) {
    uint cube = (node.x >> level) + s.cubes_per_row * (node.z >> level);
    uint inside = (1u << level) - 1u;
    return (cube << (3u * level)) | morton_encode(uvec3(node.x & inside, node.y, node.z & inside));
}

uvec3 forest_node(BrickSource s, uint level, uint code) {
    uint cube = code >> (3u * level);
    uvec3 inside = morton_decode(code & ((1u << (3u * level)) - 1u));
    return uvec3(((cube % s.cubes_per_row) << level) + inside.x, inside.y,
                 ((cube / s.cubes_per_row) << level) + inside.z);
}

// A leaf node's position in 10 bits per axis (a leaf is 8 voxels: at most 1024 per side).
uint pack_leaf(uvec3 leaf) {
    return leaf.x | (leaf.y << 10) | (leaf.z << 20);
}

uvec3 unpack_leaf(uint packed) {
    return uvec3(packed & 0x3FFu, (packed >> 10) & 0x3FFu, packed >> 20);
}

// The grid: column (x, y) holds column_words(nz) consecutive uints, voxel z in bit z % 32 of
// word z / 32; columns of one row follow each other (common.glsl, column_base).
uint grid_column_words(BrickSource s) {
    return (s.nz + 31u) >> 5;
}

// First voxel row of the forest's cube row; the forest's rows in voxels.
uint forest_row(BrickSource s) {
    return s.cube_y << (s.cube_levels + 2u);
}

uint forest_rows(BrickSource s) {
    return 4u << s.cube_levels;
}

#if CPU_DEVICE
// Column c's part of brick_bits (below): bits 0-3 of `nibble` (voxels z = 0..3).
uvec2 brick_column_bits(uint nibble, uint c) {
    return uvec2((nibble & 1u) << c | ((nibble >> 1) & 1u) << (c + 16u),
                 ((nibble >> 2) & 1u) << c | ((nibble >> 3) & 1u) << (c + 16u));
}
#endif

// The 64 voxels of one brick from the words of its 16 columns (x + 4y): bits (0-31, 32-63),
// bit x + 4y + 16z of the brick is voxel z of column (x, y) at bit `shift` + z of its word.
uvec2 brick_bits(uint words[16], uint shift) {
    uvec2 bits = uvec2(0u);
    [[unroll]] for (uint c = 0u; c < 16u; ++c) {
        uint nibble = (words[c] >> shift) & 0xFu;  // z = 0..3 of column c
        bits.x |= ((nibble & 1u) << c) | (((nibble >> 1) & 1u) << (c + 16u));
        bits.y |= (((nibble >> 2) & 1u) << c) | (((nibble >> 3) & 1u) << (c + 16u));
    }
    return bits;
}
