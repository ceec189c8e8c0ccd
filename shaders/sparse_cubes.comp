#version 460
// The sparse grid's cubes (sparse.glsl), around the flips of sparse_fill.comp:
//
// SPARSE_STAGE 0, mark: one thread per (tile, triangle) pair of a part, after the binning
//   (binning.py). The crossings of the triangle with the tile's columns flip voxels within a
//   range of heights, bounded below from the record (flip_range); the cubes of the tile's
//   stack that hold that range are marked surface cubes. Where the grid's depth is not a
//   multiple of 32, the stack's top cube is marked too, so that a run of solid voxels never
//   reaches past nz without a cube that masks it (below).
// SPARSE_STAGE 1, words: one thread per word of cube_bits, its set bits, which the host
//   scans into word_slots (gpu/scan.py): every surface cube then has its slot.
// SPARSE_STAGE 2, parity: one workgroup per stack, a thread per 4 of its 1024 columns, up
//   the stack's surface cubes in order: each column's flips become parity (voxel k is set iff
//   an odd number of the column's crossings lie below its centre), carrying the parity
//   from the cube below. The voxels between two surface cubes of a stack (a gap) are no
//   crossing's: each column keeps there the parity it leaves the cube below with. For the
//   gap above each cube the workgroup counts its columns that carry 1 (gap_counts: 1024 is
//   full, 0 empty, anything else a gap the host has replicated, stage 3), and writes where
//   the slot's cube is (cube_list).
// SPARSE_STAGE 3, replicate: one workgroup per replica job (source slot, replica slot): the
//   replica is the source's top layer repeated through the cube, the voxels of every cube of
//   the gap above the source where its columns differ (an open surface's).
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"
#include "triangle.glsl"
#include "exact.glsl"
#include "sparse.glsl"

#define COLUMNS_PER_THREAD (CUBE_COLUMNS / WG_SIZE)
#if COLUMNS_PER_THREAD * WG_SIZE != CUBE_COLUMNS
#error "a workgroup's threads take a cube's columns in equal shares"
#endif

#if SPARSE_STAGE == 0
layout(std430, binding = 0) readonly buffer Records { TriangleRecord records[]; };
layout(std430, binding = 1) readonly buffer Pairs { uvec2 pairs[]; };
#endif
#if SPARSE_STAGE <= 2
layout(std430, binding = 2) buffer CubeBits { uint cube_bits[]; };
#endif
#if SPARSE_STAGE == 1 || SPARSE_STAGE == 2
layout(std430, binding = 3) buffer WordSlots { uint word_slots[]; };
#endif
#if SPARSE_STAGE >= 2
layout(std430, binding = 4) buffer Cubes { uint cubes[]; };
#endif
#if SPARSE_STAGE == 2
layout(std430, binding = 5) writeonly buffer GapCounts { uint gap_counts[]; };
layout(std430, binding = 6) writeonly buffer CubeList { uvec2 cube_list[]; };  // (stack, cz)
#endif
#if SPARSE_STAGE == 3
layout(std430, binding = 7) writeonly buffer Replicas { uint replicas[]; };
layout(std430, binding = 8) readonly buffer Jobs { uvec2 jobs[]; };  // (source, replica) slots
#endif

layout(push_constant) uniform Params {
#if SPARSE_STAGE == 0
    Window window;
#endif
    CubeSpace space;
#if SPARSE_STAGE == 0
    uint pair_count;
    uint fixed_error;  // delta of exact.glsl
#elif SPARSE_STAGE == 1
    uint word_count;
#elif SPARSE_STAGE == 3
    uint replica_shift;  // the replicas' batches: 2^replica_shift cubes a side
    uint job_count;
#endif
};

#if SPARSE_STAGE == 0
// [lo, hi]: the voxels a crossing of the fine triangle (within fixed_error of the record's,
// exact.glsl) with a column of the tile can flip (k = floor(z* + 1/2), the first voxel whose
// centre lies above the crossing), widened by one voxel each way. The crossing height z*
// lies within the triangle's heights (fixed corners, +- delta), and at a column centre P
// the fine triangle covers, within spread = delta (1 + (|Nx| + |Ny|) / Nz) of the record's
// plane (exact.glsl, "Depth"); the plane's heights over the tile's covered columns lie
// between those at the corners of the columns' rectangle (the tile's inside the triangle's
// column box). Float32 adds a relative 2^-18 of the terms, and one voxel covers the rest.
ivec2 flip_range(TriangleRecord r, ivec2 tile) {
    ivec3 a = r.a.xyz, b = r.b.xyz, c = r.c.xyz;
    ivec2 lo = max(unpack_column(r.a.w), tile << TILE_SHIFT);
    ivec2 hi = min(unpack_column(r.b.w), (tile << TILE_SHIFT) + (TILE_SIDE - 1));
    int delta = int(fixed_error);
    float z_lo = float(min(min(a.z, b.z), c.z) - delta);
    float z_hi = float(max(max(a.z, b.z), c.z) + delta);
    i64vec3 u = i64vec3(b - a), v = i64vec3(c - a);
    int64_t nx = u.y * v.z - u.z * v.y, ny = u.z * v.x - u.x * v.z;
    int64_t nz = u.x * v.y - u.y * v.x;
    if (nz > 0l) {
        float fx = float(nx) / float(nz), fy = float(ny) / float(nz);
        vec2 near = vec2(column_centre(lo) - a.xy), far = vec2(column_centre(hi) - a.xy);
        float x0 = fx * near.x, x1 = fx * far.x, y0 = fy * near.y, y1 = fy * far.y;
        float low = float(a.z) - max(x0, x1) - max(y0, y1);
        float high = float(a.z) - min(x0, x1) - min(y0, y1);
        float size = abs(float(a.z)) + max(abs(x0), abs(x1)) + max(abs(y0), abs(y1));
        float spread = float(delta) * (1.0 + abs(fx) + abs(fy));
        float margin = size * (1.0 / 262144.0) + 1.01 * spread;
        z_lo = max(z_lo, low - margin);
        z_hi = min(z_hi, high + margin);
    }
    const float one = float(1 << FIXED_BITS);
    int k_lo = int(floor(z_lo / one + 0.5)) - 1, k_hi = int(floor(z_hi / one + 0.5)) + 1;
    return ivec2(max(k_lo, 0), min(k_hi, window.nz - 1));
}

// Cubes first .. last of a stack marked.
void mark_cubes(uint stack, int first, int last) {
    for (int q = first >> 5; q <= (last >> 5); ++q) {
        atomicOr(cube_bits[stack_word(space, stack, 32 * q)], word_range_mask(q, first, last + 1));
    }
}

void main() {
    uint i = flat_invocation_id();
    if (i >= pair_count) return;
    uvec2 pair = pairs[i];
    ivec2 tile = key_tile(window, pair.x);
    uint stack = stack_of(space, tile << TILE_SHIFT);
    ivec2 range = flip_range(records[pair.y], tile);
    if (range.x <= range.y) mark_cubes(stack, range.x >> CUBE_SHIFT, range.y >> CUBE_SHIFT);
    if ((space.nz & (CUBE_SIDE - 1)) != 0) mark_cubes(stack, space.cubes_z - 1, space.cubes_z - 1);
}
#elif SPARSE_STAGE == 1
void main() {
    uint w = flat_invocation_id();
    if (w < word_count) word_slots[w] = bitCount(cube_bits[w]);
}
#elif SPARSE_STAGE == 2
shared uint carried;

void main() {
    uint stack = flat_group_id();
    if (stack >= uint(space.cubes_x * space.cube_rows)) return;
    uint tid = gl_LocalInvocationID.x;
    uint carry[COLUMNS_PER_THREAD];
    [[unroll]] for (uint r = 0u; r < COLUMNS_PER_THREAD; ++r) carry[r] = 0u;
    int top_cube = space.cubes_z - 1, top_bits = space.nz & (CUBE_SIDE - 1);
    for (int q = 0; q < space.stack_words; ++q) {
        uint word = stack_word(space, stack, 32 * q);
        uint bits = cube_bits[word];
        uint slot = word_slots[word];
        while (bits != 0u) {  // the same for every thread: barriers below are uniform
            int cz = 32 * q + findLSB(bits);
            bits &= bits - 1u;
            uint ones = 0u;
            [[unroll]] for (uint r = 0u; r < COLUMNS_PER_THREAD; ++r) {
                uint c = tid + WG_SIZE * r;
                uint address = cube_address(slot, space.batch_shift, uvec2(c & 31u, c >> 5));
                uint parity = prefix_xor(cubes[address]) ^ (0u - carry[r]);
                if (cz == top_cube && top_bits != 0) parity &= (1u << top_bits) - 1u;
                cubes[address] = parity;
                carry[r] = parity >> 31;
                ones += carry[r];
            }
            if (tid == 0u) carried = 0u;
            barrier();
            atomicAdd(carried, ones);
            barrier();
            if (tid == 0u) {
                gap_counts[slot] = carried;
                cube_list[slot] = uvec2(stack, uint(cz));
            }
            ++slot;
        }
    }
}
#else
void main() {
    uint job_index = flat_group_id();
    if (job_index >= job_count) return;
    uvec2 job = jobs[job_index];
    [[unroll]] for (uint r = 0u; r < COLUMNS_PER_THREAD; ++r) {
        uint c = gl_LocalInvocationID.x + WG_SIZE * r;
        uvec2 inside = uvec2(c & 31u, c >> 5);
        uint top = cubes[cube_address(job.x, space.batch_shift, inside)] >> 31;
        replicas[cube_address(job.y, replica_shift, inside)] = 0u - top;
    }
}
#endif
