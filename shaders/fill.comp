#version 460
// Pass 7, bit-flip fill, in two stages.
//
// FILL_STAGE 0, flips: one workgroup per non-empty tile, one thread per voxel column. Each
// crossing flips one bit, at the first voxel whose centre lies above it. A thread owns its
// column's words. Columns of up to REGISTER_WORDS words (512 voxels) collect their flips in
// registers and touch memory once at the end; deeper ones, and every column on a CPU device
// (CPU_DEVICE, below), flip in memory. A GPU flips there with an atomic XOR although no other
// thread shares the word: its result is not waited for, where a load and a store would wait
// for the load at every crossing (the marks' OR stays plain: not faster). A CPU device flips
// with a plain XOR (the atomic measured 10-25% slower on lavapipe). A
// dispatch handles at most PAIRS_PER_ROUND pairs of every tile (pairs [first + round *
// PAIRS_PER_ROUND, ...)); the host records fill_rounds rounds, enough for the largest tile it
// expects, so no invocation loops past llvmpipe's 65,535-iteration guard (tiles.glsl); rounds
// after the first are dispatched only as far as some tile asks for them (round_dispatch). A tile
// with more pairs than the recorded rounds take flips nothing and is counted in
// unfinished_tiles (the host then runs the part again with enough rounds). With `finish` (no
// other part of the slab flips bits) the round that takes a tile's last pairs also turns its
// columns into parity and counts them (below), so stage 1 is not needed.
//
// SHARED_RECORDS 1 (subgroups of at least 8 lanes with ballot), on a GPU: pairs go in batches
// of 8; lane j of each subgroup loads the record of pair j and broadcasts it to the others.
// Every lane needs every record of its tile, and this loads each once per subgroup instead of
// once per lane. A CPU device (CPU_DEVICE) does not: its compiler sees that every lane loads
// the same record and loads it once, and the broadcasts only add code to compile.
//
// MARK_CROSSINGS 1 (fill_mode="winding", flips stage only, never finishing): bits are set
// (OR) instead of flipped, so bit k marks that some crossing lies between the centres of
// voxels k - 1 and k, even where two crossings cancel out (winding_columns.comp cuts columns
// there); no column sums are kept. The same bit of `signs` (a plane laid out as the grid, not
// cleared: only marked bits are ever read) gets the crossing's step (triangle.glsl's c.w):
// set for +1 (a triangle facing down), clear for -1. That is the gap's whole share of s
// where one crossing marks it, as nearly always; where a second crossing lands on a gap
// already marked (in this dispatch or an earlier part, round or batch of the slab), one bit
// cannot hold their sum, and the thread flags its tile in tile_flags (entry 1 + the tile's
// index in the slab; entry 0 counts the tiles flagged). Exactly: a thread owns its column's
// words, so in memory it tests each mark's bit before it sets it, and in registers it counts
// the marks it makes and compares them with the bits they set, and tests those bits against
// memory when it writes them. A mark without a step (none is expected) flags its tile too.
// winding_columns.comp reads s of every unflagged tile's segments off the signs.
//
// SIGNED_CROSSINGS 1 (fill_mode="winding", flips stage only, after winding_columns.comp has
// cut the columns into segments at the marks, which the grid still holds), for the tiles
// the marking fill flagged only (the others' workgroups return at once): each crossing
// adds its step (triangle.glsl's c.w: -1 for a triangle facing up, +1 facing down) to
// crossings[] of the segment that starts at it (the first segment for crossings at or below
// the box's lowest voxel; none above the box); winding_columns.comp then sums them up each
// column, so that every segment gets s, the signed count of the crossings below it.
//
// FILL_STAGE 1, parity: one workgroup per tile of the window, after several parts (batches
// of triangles, halves of the window) flipped bits in it; each thread turns its column's
// flips into parity with a prefix XOR, so voxel k is set iff an odd number of crossings lie
// below its centre, and counts the column.
//
// Column counts, a by-product for the mesh check (the API warns from them). Along a column,
// each crossing changes the winding number by its step, +1 where the surface faces down (the
// column enters it) and -1 where it faces up (TriangleRecord, c.w); w(k), the winding number
// at voxel centre k, is the sum of the steps of the crossings below it. Per column the fill
// sums, over every crossing of a covering triangle (those above the top voxel centre too),
//   balance = sum of step                 (the winding number above the mesh),
//   moment  = sum of step * (nz - kfirst) (= the sum of w(k) over the column's voxels).
// A column is open where balance != 0: the surface does not close around it, and parity
// cannot be trusted there. A balanced column counts as an overlap where moment differs from
// its number of solid (odd parity) voxels. Where w is 0 or 1 at every centre the two are
// equal (w(k) is then its own parity), so a closed, consistently oriented surface never
// counts; where w reaches 2 or more (nested or overlapping parts) or -1 or less (a part
// inside out) somewhere, moment - solid = sum of (w(k) - (w(k) mod 2)) is not 0 unless both
// happen in the same column and cancel exactly. Columns that span several dispatches keep
// their two sums in column_sums (32-bit, wrapping: equal sums stay equal) until the
// dispatch that finishes them. Each verdict is one atomic add, only for a column that counts.
//
// Grid layout: common.glsl, column_base.
#extension GL_GOOGLE_include_directive : require
#if SHARED_RECORDS && !(defined(CPU_DEVICE) && CPU_DEVICE)
#define BROADCAST_RECORDS 1
#extension GL_KHR_shader_subgroup_ballot : require
#else
#define BROADCAST_RECORDS 0
#endif
layout(local_size_x = 1 << (2 * TILE_SHIFT)) in;  // a tile's columns, x fastest
#include "common.glsl"
#include "triangle.glsl"
#include "exact.glsl"
#include "fine.glsl"

layout(std430, binding = 0) readonly buffer Records { TriangleRecord records[]; };
layout(std430, binding = 1) readonly buffer Pairs { uvec2 pairs[]; };
layout(std430, binding = 2) readonly buffer Tiles { Tile tiles[]; };
layout(std430, binding = 3) readonly buffer FillDispatch {
    uvec3 group_count;
    uint tile_count;
};
layout(std430, binding = 4) buffer Grid { uint grid[]; };
#ifndef SIGNED_CROSSINGS
#define SIGNED_CROSSINGS 0
#endif
#ifndef MARK_CROSSINGS
#define MARK_CROSSINGS 0
#endif
#if SIGNED_CROSSINGS || MARK_CROSSINGS
layout(std430, binding = 11) buffer TileFlags { uint tile_flags[]; };  // count, then per tile
#endif
#if MARK_CROSSINGS
layout(std430, binding = 10) buffer Signs { uint signs[]; };  // per mark: its step is +1
#endif
#if SIGNED_CROSSINGS
layout(std430, binding = 5) readonly buffer Offsets { uint offsets[]; };  // winding_columns
layout(std430, binding = 6) buffer Crossings { int crossings[]; };  // per slot
#else
layout(std430, binding = 5) buffer ColumnCounts {  // cleared by the host per slab
    uint open_columns;
    uint overlap_columns;
    uint unfinished_tiles;
    uint unused;
};
// (balance, moment) of every column of the grid buffer, for columns that span dispatches.
layout(std430, binding = 6) buffer ColumnSums { uvec2 column_sums[]; };
#endif

// The fine coordinates of every vertex of the mesh (fine.glsl), 3 per vertex, and the batch's
// triangles as vertex indices, 3 per triangle (the indexed variants' own index buffer; the
// soup variants upload it for this alone): read only for the near ties the fixed-point record
// cannot decide (exact.glsl).
layout(std430, binding = 7) readonly buffer FineVertices { int64_t fine[]; };
layout(std430, binding = 8) readonly buffer Indices { uint indices[]; };

layout(push_constant) uniform Params {
    Window window;
    uint fill_round;
    uint fill_rounds;  // rounds the host recorded (flips)
    uint finish;       // flips: also compute the parity and the counts (see above)
    uint fixed_error;  // delta of exact.glsl: the records' distance from the fine corners
#if SIGNED_CROSSINGS
    ColumnBox box;
#endif
};

#if FILL_STAGE == 0
// The dispatch arguments of rounds 1, 2, ... (entry r for round r; the host clears them): a
// round whose tiles have more pairs after it asks for the next round over every tile (the
// same group count as round 0), so the rounds past the largest tile's dispatch no workgroup.
layout(std430, binding = 9) buffer RoundDispatch { uvec4 round_dispatch[]; };

void request_next_round(uint end, uint tile_end) {
    if (end < tile_end && fill_round + 1u < fill_rounds && gl_LocalInvocationID.x == 0u) {
        round_dispatch[fill_round + 1u] = uvec4(group_count, 0u);
    }
}

// The index of a column's tile among the slab's tiles (a part's window may start at a later
// row): winding_columns.comp's, for tile_flags and the segments' offsets.
uint slab_tile(ivec2 column) {
    uint tiles_per_row = uint(window.nx) >> TILE_SHIFT;
    return uint(column.x >> TILE_SHIFT)
         + uint((column.y - window.buffer_row) >> TILE_SHIFT) * tiles_per_row;
}
#endif

#include "crossing.glsl"

#define REGISTER_WORDS 16

ivec2 tile_column(uint key) {
    return tile_lane_column(window, key, gl_LocalInvocationID.x);
}

// Index of column (i, j) in the grid buffer's column order (column_base without the words).
uint column_index(ivec2 column) {
    return uint(column.y - window.buffer_row) * uint(window.nx) + uint(column.x);
}

// Word q of a column's flips turned into parity: voxel k is set iff an odd number of flips
// lie at or below it. carry holds the parity of the words below.
uint parity_word(uint bits, inout uint carry, uint q) {
    bits ^= bits << 1;
    bits ^= bits << 2;
    bits ^= bits << 4;
    bits ^= bits << 8;
    bits ^= bits << 16;
    bits ^= carry;
    carry = 0u - (bits >> 31);
    uint valid = uint(window.nz) - 32u * q;  // bits of this word inside the grid
    return valid >= 32u ? bits : bits & ((1u << valid) - 1u);
}

#if !SIGNED_CROSSINGS
// The verdict on one finished column (see above): at most one atomic, where it counts.
void count_column(uint balance, uint moment, uint solid) {
    if (balance != 0u) {
        atomicAdd(open_columns, 1u);
    } else if (moment != solid) {
        atomicAdd(overlap_columns, 1u);
    }
}
#endif

#if FILL_STAGE == 0 && SIGNED_CROSSINGS
// A crossing's segment is its rank among the column's marks in the box: those of its own
// word up to it, and those of the words below, which each round counts once per word before
// the pair loop (count_ranks), not once per crossing: a loop over the words below for every
// crossing would make up to a trip per word per pair, past llvmpipe's guard with many pairs
// (the guard then ended the invocation's loops, crossings were lost, and which depended on
// the pairs' order within the tile: whole layers wrong, not the same from run to run). The
// counts of the marks below each word of the box's range (MAX_COLUMN_WORDS words at most:
// the deepest grid) are 16-bit (at most one mark per voxel, MAX_COLUMN_WORDS * 32 < 2^16),
// two per entry, in shared memory, entries of neighbouring columns next to each other; each
// thread reads only its own column's, so no barrier is needed.
#define RANK_ENTRIES ((MAX_COLUMN_WORDS + 1) / 2)
shared uint mark_ranks[RANK_ENTRIES * TILE_COLUMNS];

// Word q's entry in mark_ranks (its 16-bit half: q's parity within the box's range).
uint rank_entry(int q) {
    uint word = uint(q - ((box.k_lo + 1) >> 5));
    return (word >> 1) * uint(TILE_COLUMNS) + gl_LocalInvocationID.x;
}

uint rank_shift(int q) {
    return 16u * (uint(q - ((box.k_lo + 1) >> 5)) & 1u);
}

// The marks of the column (voxels k_lo + 1 .. k_hi - 1) in the words below each word of that
// range, into mark_ranks. A column inside the box only.
void count_ranks(uint base) {
    uint below = 0u;
    for (int q = (box.k_lo + 1) >> 5; q <= (box.k_hi - 1) >> 5; ++q) {
        uint entry = rank_entry(q);
        mark_ranks[entry] = rank_shift(q) == 0u ? below : mark_ranks[entry] | (below << 16);
        below += bitCount(grid[base + uint(q)] & word_range_mask(q, box.k_lo + 1, box.k_hi));
    }
}

// The segment of the column whose slots start at `group` that starts at voxel k (< k_hi):
// the marks in voxels k_lo + 1 .. k (the first segment for k <= k_lo). No loop.
uint segment_slot(uint group, uint base, int k) {
    uint rank = 0u;
    if (k > box.k_lo) {
        int q = k >> 5;
        rank = ((mark_ranks[rank_entry(q)] >> rank_shift(q)) & 0xFFFFu)
             + bitCount(grid[base + uint(q)] & word_range_mask(q, box.k_lo + 1, k + 1));
    }
    return (group + rank) * uint(TILE_COLUMNS) + gl_LocalInvocationID.x;
}

void main() {
    uint tile_index = flat_group_id();
    if (tile_index >= tile_count) return;
    Tile tile = tiles[tile_index];
    uint first = tile.first + fill_round * PAIRS_PER_ROUND;
    if (first >= tile.end) return;
    ivec2 column = tile_column(tile.key);
    uint tile_in_slab = slab_tile(column);
    if (tile_flags[1u + tile_in_slab] == 0u) return;  // its segments' s came from the signs
    uint end = min(tile.end, first + PAIRS_PER_ROUND);
    request_next_round(end, tile.end);
    uint base = column_base(window, column);
    uint group = offsets[tile_in_slab];
    bool inside = column_in_box(box, column);
    if (inside) count_ranks(base);
    int n = window.nz;
    uint near_ties = 0u;
    for (uint start = first; start < end; start += PAIR_BATCH) {
        TriangleRecord mine = lane_record(start, end);
        [[unroll]] for (uint j = 0u; j < PAIR_BATCH; ++j) {
            bool sure;
            Crossing x = fast_crossing(batch_record(mine, start, j, end), column, n, sure);
            near_ties += uint(!sure && start + j < end);
            if (inside && start + j < end && x.k < box.k_hi) {
                crossings[segment_slot(group, base, x.k)] += x.step;
            }
        }
    }
    for (uint pair = first; near_ties != 0u && pair < end; ++pair) {
        if (near_tie(pair, column, n)) {
            --near_ties;
            Crossing x = near_tie_crossing(pair, column, n);
            if (inside && x.k < box.k_hi) crossings[segment_slot(group, base, x.k)] += x.step;
        }
    }
}
#elif FILL_STAGE == 0
#if MARK_CROSSINGS
#define FLIP |=
#define FLIP_MEMORY(index, bits, step) mark_in_memory(index, bits, step)
#define SIGN_IN_REGISTERS(k, bits, step) sign_in_registers(k, bits, step)
#elif CPU_DEVICE
#define FLIP ^=
#define FLIP_MEMORY(index, bits, step) grid[index] ^= bits
#define SIGN_IN_REGISTERS(k, bits, step)
#else
#define FLIP ^=
#define FLIP_MEMORY(index, bits, step) atomicXor(grid[index], bits)
#define SIGN_IN_REGISTERS(k, bits, step)
#endif

#if MARK_CROSSINGS
// What the marking fill keeps besides its marks (MARK_CROSSINGS, above), per thread: the
// signs of the marks it holds in registers, how many marks it made there, and whether two
// crossings of its column met in one gap (or a mark has no step).
uint rising[REGISTER_WORDS];
uint marks_made = 0u;
bool shared_gap = false;

// A crossing's mark `bit` (0: none) in grid word `index`, with its sign, after the test of
// the mark already there. Only where there is a mark (a branch in every variant): on a CPU
// device, only the lanes with a crossing then touch memory. The signs of a word without
// marks are not read (none of them counts).
void mark_in_memory(uint index, uint bit, int step) {
    if (bit == 0u) return;
    uint marks = grid[index];
    shared_gap = shared_gap || (marks & bit) != 0u || step == 0;
    grid[index] = marks | bit;
    uint up = uint(step > 0) * bit;
    signs[index] = marks == 0u ? up : (signs[index] & ~bit) | up;
}

// The sign of a crossing whose mark `bit` (0: none) goes to the register word of voxel k.
void sign_in_registers(int k, uint bit, int step) {
    marks_made += uint(bit != 0u);
    shared_gap = shared_gap || (bit != 0u && step == 0);
    uint up = uint(step > 0) * bit;
#if BRANCHLESS
    [[unroll]] for (uint q = 0u; q < REGISTER_WORDS; ++q) rising[q] |= uint(q == uint(k) >> 5) * up;
#else
    rising[k >> 5] |= up;
#endif
}

// The end of a marking thread: its register words' marks and signs into memory (with the
// tests of the header; the signs of a word without earlier marks are written, not read),
// and its tile flagged where two crossings met in a gap.
void store_marks(ivec2 column, uint base, uint words, bool in_registers,
                 uint flips[REGISTER_WORDS]) {
    if (in_registers) {
        uint bits_set = 0u;
        [[unroll]] for (uint q = 0u; q < REGISTER_WORDS; ++q) {
            if (q < words) {
                uint marks = grid[base + q];
                shared_gap = shared_gap || (marks & flips[q]) != 0u;
                bits_set += uint(bitCount(flips[q]));
                grid[base + q] = marks | flips[q];
                if (flips[q] != 0u) {
                    signs[base + q] = marks == 0u ? rising[q]
                                                  : (signs[base + q] & ~flips[q]) | rising[q];
                }
            }
        }
        shared_gap = shared_gap || bits_set != marks_made;
    }
    if (shared_gap && atomicOr(tile_flags[1u + slab_tile(column)], 1u) == 0u) {
        atomicAdd(tile_flags[0], 1u);
    }
}
#endif

// One crossing into the column's flips (registers or the grid) and its sums (k == n, step
// == 0: none).
void add_crossing(Crossing x, int n, bool in_registers, uint base, inout uint flips[REGISTER_WORDS],
                  inout int balance, inout int moment) {
    int k = x.k;
    balance += x.step;
    moment += x.step * (n - k);
#if BRANCHLESS
    uint bit = uint(k < n) << (k & 31);
    if (in_registers) {
        [[unroll]] for (uint q = 0u; q < REGISTER_WORDS; ++q) {
            flips[q] FLIP uint(q == uint(k) >> 5) * bit;
        }
        SIGN_IN_REGISTERS(k, bit, x.step);
    } else {
        FLIP_MEMORY(base + uint(min(k, n - 1) >> 5), bit, x.step);
    }
#else
    if (k < n) {
        if (in_registers) {
            flips[k >> 5] FLIP 1u << (k & 31);
            SIGN_IN_REGISTERS(k, 1u << (k & 31), x.step);
        } else {
            FLIP_MEMORY(base + uint(k >> 5), 1u << (k & 31), x.step);
        }
    }
#endif
}

void main() {
    uint tile_index = flat_group_id();
    if (tile_index >= tile_count) return;
    Tile tile = tiles[tile_index];
    if ((tile.end - tile.first - 1u) / PAIRS_PER_ROUND >= fill_rounds) {  // too many pairs
        if (fill_round == 0u && gl_LocalInvocationID.x == 0u) atomicAdd(unfinished_tiles, 1u);
        return;
    }
    uint first = tile.first + fill_round * PAIRS_PER_ROUND;
    if (first >= tile.end) return;
    uint end = min(tile.end, first + PAIRS_PER_ROUND);
    request_next_round(end, tile.end);
    bool finishing = finish != 0u && end == tile.end;  // this round takes the tile's last pairs
    bool continued = first != tile.first;              // earlier rounds flipped bits too
    ivec2 column = tile_column(tile.key);
    uint base = column_base(window, column);
    int n = window.nz;
    uint words = column_words(n);

#if CPU_DEVICE
    bool in_registers = false;
#else
    bool in_registers = words <= REGISTER_WORDS;
#endif
    uint flips[REGISTER_WORDS];
    [[unroll]] for (uint q = 0u; q < REGISTER_WORDS; ++q) flips[q] = 0u;
#if MARK_CROSSINGS
    [[unroll]] for (uint q = 0u; q < REGISTER_WORDS; ++q) rising[q] = 0u;
#endif
    int balance = 0, moment = 0;
    uint near_ties = 0u;
    for (uint start = first; start < end; start += PAIR_BATCH) {
        TriangleRecord mine = lane_record(start, end);
        [[unroll]] for (uint j = 0u; j < PAIR_BATCH; ++j) {
            bool sure;
            Crossing x = fast_crossing(batch_record(mine, start, j, end), column, n, sure);
            bool real = start + j < end;
            near_ties += uint(!sure && real);
            x = Crossing(select_int(n, x.k, real), select_int(0, x.step, real));
            add_crossing(x, n, in_registers, base, flips, balance, moment);
        }
    }
    for (uint pair = first; near_ties != 0u && pair < end; ++pair) {
        if (near_tie(pair, column, n)) {
            --near_ties;
            add_crossing(near_tie_crossing(pair, column, n), n, in_registers, base, flips,
                         balance, moment);
        }
    }
    uvec2 sums = uvec2(balance, moment);
    uint index = column_index(column);
    if (!finishing) {
#if MARK_CROSSINGS
        store_marks(column, base, words, in_registers, flips);
#else
        if (in_registers) {
            [[unroll]] for (uint q = 0u; q < REGISTER_WORDS; ++q) {
                if (q < words) grid[base + q] FLIP flips[q];
            }
        }
        // Without finish the host cleared column_sums for the slab, and other parts add to
        // them; with it, a tile's first round starts them.
        bool earlier = continued || finish == 0u;
        if (finish != 0u || any(notEqual(sums, uvec2(0u)))) {
            column_sums[index] = earlier ? column_sums[index] + sums : sums;
        }
#endif
        return;
    }
    if (continued) sums += column_sums[index];
    uint carry = 0u, solid = 0u;
    if (in_registers) {
        [[unroll]] for (uint q = 0u; q < REGISTER_WORDS; ++q) {
            if (q < words) {
                uint word = parity_word(continued ? grid[base + q] ^ flips[q] : flips[q], carry, q);
                grid[base + q] = word;
                solid += uint(bitCount(word));
            }
        }
    } else {
        for (uint q = 0u; q < words; ++q) {
            uint word = parity_word(grid[base + q], carry, q);
            grid[base + q] = word;
            solid += uint(bitCount(word));
        }
    }
    count_column(sums.x, sums.y, solid);
}
#else
void main() {
    ivec2 column = tile_column(flat_group_id());
    if (column.y >= window.row_hi) return;  // past the window in a folded dispatch
    uint base = column_base(window, column);
    uint carry = 0u, solid = 0u;
    for (uint q = 0u; q < column_words(window.nz); ++q) {
        uint word = parity_word(grid[base + q], carry, q);
        grid[base + q] = word;
        solid += uint(bitCount(word));
    }
    uvec2 sums = column_sums[column_index(column)];
    count_column(sums.x, sums.y, solid);
}
#endif
