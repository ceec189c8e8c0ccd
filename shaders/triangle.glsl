// Records passed between passes: the per-triangle record (written by triangle setup, read
// by pair emission and the fill) and the tile record (written by compaction, read by the fill).
//
// Fixed-point grid coordinates: X = roundEven(g * 2^FIXED_BITS) of the float32 grid-space
// position g in [0, N]. The multiplication by a power of two is exact in float32 and
// roundEven is exact, so the integer is a function of the float32 input alone, identical on
// every device and in the CPU reference. With N <= 8192 and FIXED_BITS = 16 (N <= 65,536 and
// FIXED_BITS = 13 for the larger grids) every coordinate lies in [0, 2^29], which the bounds
// in exact.glsl rely on; column indices below 65,536 fit pack_column's 16 bits.
//
// These records are the solid's fast path: its decisions are defined on the fine corners
// (fine.glsl), which the fill reads for near ties (exact.glsl, fixed_error).
//
// Layout (std430, 48 bytes): the three vertices ordered so that the xy-projection is
// counter-clockwise (twice its area D >= 0; D == 0 is binned only where the fine corners
// differ, as they may have area); w of a and b packs the inclusive bounding box of the column
// centres the fine triangle may cover (i | j << 16); c.w is 0 for a triangle that cannot
// cover a column (an empty rectangle, or D == 0 with fine corners equal to these), else the
// change of the winding number across it going up the column: +1 where the triangle as given
// faces down (clockwise in xy, the column enters the surface), -1 where it faces up (the
// fill's column counts and fill_mode="winding" sum these steps; for near ties the fill takes
// the fine triangle's own).

struct TriangleRecord {
    ivec4 a;
    ivec4 b;
    ivec4 c;
};

// A non-empty tile: its key and the range of its pairs in the grouped pair list.
struct Tile {
    uint key;    // tx + ty * (N / TILE_SIDE)
    uint first;  // index of its first pair
    uint end;    // one past its last pair
    uint pad;
};

ivec3 to_fixed(vec3 g) {
    return ivec3(roundEven(g * float(1 << FIXED_BITS)));
}

uint pack_column(ivec2 ij) {
    return uint(ij.x) | (uint(ij.y) << 16);
}

ivec2 unpack_column(int packed) {
    return ivec2(packed & 0xFFFF, (packed >> 16) & 0xFFFF);
}
