#version 460
// fill_mode="winding", before the segments: a bound on c (winding.glsl) over each whole
// column of the box, from the boundary edges alone. -phi_- / 2 pi <= c <= phi_+ / 2 pi on
// the column (winding.glsl); where both are below 0.49, s (an integer) decides every segment
// of the column: solid iff s >= 1. Such a column is decided here, and in an unflagged tile
// winding_columns.comp writes its voxels at once, with no segment to list: most columns of
// an open mesh, and every column of a closed one (no edge: c = 0).
// First the bound of the whole tile (tile_azimuth_bound, from its centre), then, where that
// is too weak, the column's own (azimuth_bound). BOUND_LANES lanes per column: the tile's
// lanes split the edges for the tile's bound, a column's lanes for its own, every part added
// in a fixed order.
// bounds[16 tile + column in tile] = (phi_+, phi_-) / 2 pi, rounded up; undecided where
// either is 0.49 or more. Only columns of the box are written.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = BOUND_GROUP) in;  // whole tiles: BOUND_LANES * TILE_COLUMNS divides it
#include "common.glsl"
#include "exact.glsl"
#include "winding.glsl"

layout(std430, binding = 0) readonly buffer Edges { ivec4 edges[]; };  // (x0, m), (x1, 0)
layout(std430, binding = 1) writeonly buffer Bounds { vec2 bounds[]; };

layout(push_constant) uniform Params {
    Window window;
    ColumnBox box;
    uint edge_count;
};

#define TILE_LANES (BOUND_LANES * TILE_COLUMNS)
// The tile bound's parts: the tile's lane t sums the edges e = t (mod TILE_LANES); every
// lane of the tile adds the parts up in the same order.
shared vec2 tile_parts[gl_WorkGroupSize.x];
// The column bound's parts: the column's lane p sums the edges e = p (mod BOUND_LANES).
shared vec2 column_parts[gl_WorkGroupSize.x];

// 1 / 2 pi rounded up (0.1591549431 < 0.15915500), times the sums' rounding: n terms of
// one sign, summed in m parts and added, are within (n + m) 2^-24 of their sum.
float column_bound(float sum, float count) {
    return sum * (1.0 + (count + float(TILE_LANES) + 8.0) / 8388608.0) * 0.15915500;
}

void main() {
    uint lane = gl_LocalInvocationID.x;
    uint index = flat_invocation_id();
    uint tile = index / uint(TILE_LANES), local = index % uint(TILE_LANES);
    uint in_tile = local / uint(BOUND_LANES), part = local % uint(BOUND_LANES);
    int rows = window.row_hi - window.row_lo;
    uint tiles = uint(window.nx >> TILE_SHIFT) * uint(rows >> TILE_SHIFT);
    bool real = tile < tiles;  // not past the window (the last group)
    ivec2 origin = key_tile(window, tile) * TILE_SIDE;
    ivec2 column = tile_lane_column(window, tile, in_tile);
    bool in_box = real && column_in_box(box, column);
    // any column of the tile in the box (the tile's corners against the box)
    bool tile_in_box = real && box.k_lo < box.k_hi
        && origin.x < box.i_hi && origin.x + TILE_SIDE > box.i_lo
        && origin.y < box.j_hi && origin.y + TILE_SIDE > box.j_lo;
    float count = float(edge_count);
    vec2 sums = vec2(0.0);
    if (tile_in_box) {
        ivec2 centre = (origin << FIXED_BITS) + ((TILE_SIDE / 2) << FIXED_BITS);
        // the columns' centres are within (TILE_SIDE - 1) / sqrt(2) voxels of it
        float radius = float((TILE_SIDE - 1) << FIXED_BITS) * 0.70711;
        for (uint e = local; e < edge_count; e += uint(TILE_LANES)) {
            sums += tile_azimuth_bound(edges[2u * e], edges[2u * e + 1u], centre, radius);
        }
    }
    tile_parts[lane] = sums;
    barrier();
    sums = vec2(0.0);
    for (uint q = lane - local; q < lane - local + uint(TILE_LANES); ++q) sums += tile_parts[q];
    float above = column_bound(sums.x, count), below = column_bound(sums.y, count);
    bool tile_decided = max(above, below) < 0.49;
    sums = vec2(0.0);
    if (in_box && !tile_decided) {
        ivec3 p = ivec3(column_centre(column), 0);  // azimuth_bound reads x and y only
        for (uint e = part; e < edge_count; e += uint(BOUND_LANES)) {
            sums += azimuth_bound(edges[2u * e], edges[2u * e + 1u], p);
        }
    }
    column_parts[lane] = sums;
    barrier();
    if (!tile_decided) {
        sums = vec2(0.0);
        for (uint q = lane - part; q < lane - part + uint(BOUND_LANES); ++q) sums += column_parts[q];
        above = column_bound(sums.x, count);
        below = column_bound(sums.y, count);
    }
    if (in_box && part == 0u) bounds[tile * uint(TILE_COLUMNS) + in_tile] = vec2(above, below);
}
