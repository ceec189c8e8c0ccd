// One pair's crossing with one column, shared by the fills that flip bits at crossings
// (fill.comp, sparse_fill.comp): the records a workgroup's lanes share, the fixed-point fast
// path, and the near ties decided on the fine corners.
//
// The includer declares, before including this: the buffers `records` (TriangleRecord) and
// `pairs` (uvec2: tile key, triangle), `fine` (int64, 3 per vertex) and `indices` (uint, 3 per
// triangle), the push constant `fixed_error`, and BROADCAST_RECORDS (subgroup broadcasts of
// the batch's records, on a GPU with SHARED_RECORDS); and it includes common.glsl,
// triangle.glsl, exact.glsl and fine.glsl first.

// Pairs per loop iteration, unrolled. PAIRS_PER_ROUND comes from the host: a multiple of
// PAIR_BATCH, at most 2^15, so a round makes at most 2^15 / PAIR_BATCH iterations of the pair
// loop, and at most 2^15 more going over the pairs again for near ties (one per pair): at
// most 49,152 (PAIR_BATCH 2), under llvmpipe's guard (tiles.glsl). Nothing done per pair may
// loop (the signed fill's count_ranks loops once per round, at most MAX_COLUMN_WORDS trips).
// A CPU device (CPU_DEVICE) takes 2 pairs per iteration, which its compiler unrolls into a
// quarter of the code of 8 and which run as fast there, and flips every column in memory (a
// thread's words stay in its core's cache): no register words, whose unrolled updates and
// writes took most of the kernel's compile time.
#if CPU_DEVICE
#define PAIR_BATCH 2u
#else
#define PAIR_BATCH (BROADCAST_RECORDS != 0 ? 8u : 4u)
#endif

// The record of pair j of the batch that starts at `start` (pairs past the end repeat the
// last one). `mine` is what this lane loaded for the batch (BROADCAST_RECORDS).
TriangleRecord batch_record(TriangleRecord mine, uint start, uint j, uint end) {
#if BROADCAST_RECORDS
    return TriangleRecord(subgroupBroadcast(mine.a, j), subgroupBroadcast(mine.b, j),
                          subgroupBroadcast(mine.c, j));
#else
    return records[pairs[min(start + j, end - 1u)].y];
#endif
}

TriangleRecord lane_record(uint start, uint end) {
#if BROADCAST_RECORDS
    return records[pairs[min(start + min(gl_SubgroupInvocationID, PAIR_BATCH - 1u), end - 1u)].y];
#else
    return TriangleRecord(ivec4(0), ivec4(0), ivec4(0));
#endif
}

// A triangle's crossing with the column: k, the first voxel whose centre lies above it (n:
// none), and step, the change of the winding number across it (0: no crossing).
struct Crossing {
    int k;
    int step;
};

i64vec3 fine_corner(uint t, uint corner) {
    uint base = 3u * indices[3u * t + corner];
    return i64vec3(fine[base], fine[base + 1u], fine[base + 2u]);
}

// The crossing of the fine triangle (fine.glsl), where the fixed-point record provably
// decides it (exact.glsl: SURE_OUT, or SURE_IN with no voxel centre near the crossing; `sure`
// true); otherwise none, and `sure` false: a near tie, for near_tie_crossing.
Crossing fast_crossing(TriangleRecord r, ivec2 column, int n, out bool sure) {
    Coverage w = cover(r.a.xyz, r.b.xyz, r.c.xyz, column);
    int64_t delta = int64_t(fixed_error);
    int coverage = fine_coverage(w, r.a.xyz, r.b.xyz, r.c.xyz, column, delta);
    bool inside = coverage == SURE_IN;
#if BRANCHLESS
    int k = first_voxel_above(w, r.a.xyz, r.b.xyz, r.c.xyz, n);
    sure = coverage == SURE_OUT || (inside && depth_certain(w, r.a.xyz, r.b.xyz, r.c.xyz, delta));
    bool counts = inside && sure;
    return Crossing(select_int(n, k, counts), select_int(0, r.c.w, counts));
#else
    sure = coverage == SURE_OUT;
    if (inside) {
        sure = depth_certain(w, r.a.xyz, r.b.xyz, r.c.xyz, delta);
        if (sure) return Crossing(first_voxel_above(w, r.a.xyz, r.b.xyz, r.c.xyz, n), r.c.w);
    }
    return Crossing(n, 0);
#endif
}

// A near tie, decided on the fine corners of pair `pair`'s triangle. It is rare, and far too
// long to run for every pair or to sit in the pair loop (llvmpipe then keeps the loop's
// state in memory), so every variant counts its near ties in the pair loop and, where there
// are any, goes over the pairs once more to decide them (near_tie).
Crossing near_tie_crossing(uint pair, ivec2 column, int n) {
    uint t = pairs[pair].y;
    ivec2 exact = fine_crossing(fine_corner(t, 0u), fine_corner(t, 1u), fine_corner(t, 2u), column, n);
    return Crossing(exact.x, exact.y);
}

// Whether pair `pair` is a near tie for the column (its record read per lane: no subgroup
// operation, as only some lanes of a tile go over the pairs again).
bool near_tie(uint pair, ivec2 column, int n) {
    bool sure;
    fast_crossing(records[pairs[pair].y], column, n, sure);
    return !sure;
}
