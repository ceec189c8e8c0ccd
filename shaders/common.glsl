// Shared by every pass: extensions, dispatch folding, the tile geometry.
//
// Every .comp declares its workgroup size before including this file: the helpers below
// read gl_WorkGroupSize, which is (1, 1, 1) until the declaration.
//
// Host-provided defines (voxelizer/shaders.py): WG_SIZE (threads per 1-D workgroup),
// TILE_SHIFT (log2 of the tile side in columns), FIXED_BITS (fractional bits of grid
// coordinates), BRANCHLESS and INDEXED (the shader variant, 0 or 1).

#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_control_flow_attributes : require

#define TILE_SIDE (1 << TILE_SHIFT)
#define TILE_COLUMNS (TILE_SIDE * TILE_SIDE)

// Dispatches larger than the device's 65,535 workgroups per dimension are folded into 2-D
// by the host; every 1-D pass recovers its linear workgroup index here.
uint flat_group_id() {
    return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
}

uint flat_invocation_id() {
    return flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
}

// Selection without a data-dependent branch, for the branchless variant; the naive variant
// writes the same choices as if/else. Both compute identical values.
int select_int(int if_false, int if_true, bool condition) {
    return if_false + (if_true - if_false) * int(condition);
}
