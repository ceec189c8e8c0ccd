// fill_mode="winding": deciding a run of voxels of one column from bounds of w on it
// (winding_decide.comp, winding_bisect.comp). A run lies inside one segment, so s is one
// integer on all of it, and c is a sum of terms each monotonic in the height (winding.glsl):
// with g the growing terms and o the others, evaluated at a height L at or below the run's
// lowest voxel and H at or above its highest, every voxel of the run has
//
//     s - g(H) - o(L) <= w <= s - g(L) - o(H),
//
// each side within the sum of the two rounding bounds (the curtain's z).
// The includer declares grid[], next[], next_curtain[], next_count and the push constant
// window.

#define NO_POINT 0xFFFFFFFFu
#define UNDECIDED -1

// 1: w > 1/2 on the whole run, 0: w <= 1/2 on it, UNDECIDED: the bounds straddle 1/2.
int verdict(float s, vec4 low, vec4 high) {
    float error = low.z + high.z;
    if (s - high.x - low.y - error > 0.5) return 1;
    if (s - low.x - high.y + error <= 0.5) return 0;
    return UNDECIDED;
}

// The run's voxels into the grid (cleared by the host). A word wholly inside the run is
// this invocation's alone (the runs of a column are disjoint): stored; the run's end words
// may hold another run's voxels too: ORed.
void fill_run(uint ij, int begin, int end) {
    uint base = column_base(window, ivec2(ij & 0xFFFFu, ij >> 16));
    int first = begin >> 5, last = (end - 1) >> 5;
    atomicOr(grid[base + uint(first)], word_range_mask(first, begin, end));
    for (int q = first + 1; q < last; ++q) grid[base + uint(q)] = 0xFFFFFFFFu;
    if (last > first) atomicOr(grid[base + uint(last)], word_range_mask(last, begin, end));
}

// A voxel whose own c was evaluated: decided by w = s - g - o there (so only that rounding
// can differ from the exact rule).
void decide_voxel(uvec4 run, int k, float s, vec4 at) {
    if (s - (at.x + at.y) > 0.5) fill_run(run.x, k, k + 1);
}

// An undecided run [begin, end) on to the next round, with c at L and H (its middle's sum
// cleared for the next evaluation), and `how` (winding_bisect.comp: how to split it).
void defer_run(uvec4 run, int begin, int end, vec4 low, vec4 high, uint how) {
    uint slot = atomicAdd(next_count, 1u);
    next[slot] = uvec4(run.x, uint(begin) | (uint(end) << 16), run.z, how);
    next_curtain[3u * slot] = low;
    next_curtain[3u * slot + 1u] = vec4(0.0);
    next_curtain[3u * slot + 2u] = high;
}
