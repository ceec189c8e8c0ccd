// Shared by every pass: extensions, dispatch folding, the tile geometry.
//
// Every .comp declares its workgroup size before including this file: the helpers below
// read gl_WorkGroupSize, which is (1, 1, 1) until the declaration.
//
// Host-provided defines: WG_SIZE (threads per 1-D workgroup) and TILE_SHIFT (log2 of the
// tile side in columns) for every kernel (voxelizer/gpu/kernels.py, COMMON_DEFINES); for the
// passes also FIXED_BITS (fractional bits of grid coordinates), BRANCHLESS and INDEXED (the
// shader variant, 0 or 1) (voxelizer/pipeline/passes.py, pass_defines).
//
// CPU_DEVICE (the passes and the SVO build; voxelizer/gpu/kernels.py, cpu_defines) is 1 on a
// device of type CPU, such as Mesa's lavapipe. Its driver compiles a kernel for the host's
// SIMD units at the kernel's first dispatch (LLVM, in every new process until the driver's
// shader cache holds it), and that time grows with the code the kernel unrolls and inlines,
// while unrolling gains a CPU little. So some kernels take other shapes there: loops kept as
// loops and code for GPUs' registers and latency left out, each shape computing the same
// values. GPU_UNROLL is [[unroll]] on a GPU and a loop on a CPU; CPU_LOOP leaves the choice
// to a GPU's compiler and keeps the loop on a CPU. Every loop so kept stays within
// llvmpipe's loop budget (tiles.glsl).

#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_control_flow_attributes : require

#ifndef CPU_DEVICE
#define CPU_DEVICE 0
#endif
#if CPU_DEVICE
#define GPU_UNROLL [[dont_unroll]]
#define CPU_LOOP [[dont_unroll]]
#else
#define GPU_UNROLL [[unroll]]
#define CPU_LOOP
#endif

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

// The part of the grid one run of the passes works on: columns (i, j) with 0 <= i < nx and
// row_lo <= j < row_hi (whole tile rows), nz voxels deep, whose bits live in a grid buffer
// that starts at column row buffer_row (slab by slab when the grid is larger than a buffer).
// Tile keys count tiles inside the window: tx + (ty - row_lo / TILE_SIDE) * (nx / TILE_SIDE).
struct Window {
    int nx;
    int nz;
    int row_lo;
    int row_hi;
    int buffer_row;
};

// fill_mode="winding": the voxels whose centres lie inside the surface's bounding box,
// columns i_lo <= i < i_hi, j_lo <= j < j_hi, voxels k_lo <= k < k_hi (pipeline/winding.py).
struct ColumnBox {
    int i_lo;
    int i_hi;
    int j_lo;
    int j_hi;
    int k_lo;
    int k_hi;
};

bool column_in_box(ColumnBox box, ivec2 column) {
    return column.x >= box.i_lo && column.x < box.i_hi && column.y >= box.j_lo
        && column.y < box.j_hi && box.k_lo < box.k_hi;
}

// Bits of word q of a column for voxels [lo, hi).
uint word_range_mask(int q, int lo, int hi) {
    int a = clamp(lo - 32 * q, 0, 32), b = clamp(hi - 32 * q, 0, 32);
    uint below_b = b >= 32 ? 0xFFFFFFFFu : (1u << b) - 1u;
    uint below_a = a >= 32 ? 0xFFFFFFFFu : (1u << a) - 1u;
    return below_b & ~below_a;
}

uint tile_key(Window w, ivec2 tile) {
    return uint(tile.x + (tile.y - (w.row_lo >> TILE_SHIFT)) * (w.nx >> TILE_SHIFT));
}

ivec2 key_tile(Window w, uint key) {
    uint tiles_per_row = uint(w.nx) >> TILE_SHIFT;
    return ivec2(key % tiles_per_row, key / tiles_per_row + uint(w.row_lo >> TILE_SHIFT));
}

// Column `lane` (0 to TILE_COLUMNS - 1, x fastest) of the tile with that key.
ivec2 tile_lane_column(Window w, uint key, uint lane) {
    return key_tile(w, key) * TILE_SIDE + ivec2(lane & (TILE_SIDE - 1), lane >> TILE_SHIFT);
}

// 32-bit words per voxel column, and where column (i, j) starts in the grid buffer:
// COLUMN_WORDS consecutive uints, voxel k in bit k % 32 of word k / 32; bits past nz stay 0.
uint column_words(int nz) {
    return (uint(nz) + 31u) >> 5;
}

uint column_base(Window w, ivec2 column) {
    return (uint(column.y - w.buffer_row) * uint(w.nx) + uint(column.x)) * column_words(w.nz);
}
