#version 460
// Triangle grids: which cells each triangle touches, counted and then written, grouped by
// cell (voxelizer/trigrid/build.py). The conservative binning of surfaces (setup.comp and
// emit.comp with CONSERVATIVE 1) made three-dimensional: a cell stands for a tile, and the
// cells a triangle touches are exactly those --mode surface marks for it (below).
//
// One module for every step; a push constant chooses (the shipped SPIR-V stays small:
// tests/test_spirv.py), so every step binds every buffer (the host binds a stand-in where
// a step reads none):
//   stage 0 (count): every touched cell's entry of CellEnds counts the triangle; the host
//     scans CellEnds into each cell's first slot.
//   stage 1 (emit): every touched cell takes the next slot of its entry (counting it up)
//     and writes the triangle's index there (with emit_cells, also the cell's key, for a
//     second level). Afterwards each entry holds its cell's end: cell c's triangles are
//     slots [ends[c - 1], ends[c]), grouped by cell, in no particular order within a cell.
//     The host records it in the count's submission, before it knows the total: where the
//     references do not fit the `capacity` it gave TriangleIds (or the 64-bit total has a
//     high word), the emission does nothing, CellEnds keep each cell's first slot, and the
//     host runs the emission again with the ids it sizes from the total read back.
//
// The items are the triangles (level 1: a uniform grid, whose cells are keyed
// (i * ny + j) * nz + k) or the references of a built top level (level 2: the triangle
// TopIds[j] in top cell TopCells[j], whose leaves are that cell cut Resolutions[cell] times
// along each axis, keyed from LeafBase[cell] on in the same order).
//
// Load balance (after Costa, Pereira and Jorge 2024): an item whose columns (below)
// number at most small_columns is done by one thread (over_units 0), which marks at most 4
// cells per column. A larger one is cut into units of chunk_columns columns: the items'
// count writes each item's unit count to Units, the host scans them, and over_units 1 runs
// one thread per unit (finding its item by a binary search of the scanned counts), so that
// a triangle that spans thousands of cells is spread over many threads instead of
// stalling its workgroup. Every pass over units reads their total from UnitTotal (the
// scan's) and is dispatched indirectly (pair_dispatch.comp sizes it).
//
// The count of level 1 over the triangles is also their setup: it reads the grid-space
// corners (float32, through Indices), converts them to fixed point as the surface does
// (triangle.glsl, to_fixed) and keeps them as given in Records for the other steps and the
// queries. Every count also adds to Totals, a 64-bit total (low word, high word) of the
// references, summed per workgroup first: the emission and the host check it against the
// triangle ids' capacity (the scan of CellEnds is 32 bits).
//
// Loop trips per invocation (llvmpipe's budget, tiles.glsl): at most small_columns or
// chunk_columns columns (at most 4096: voxelizer/trigrid/build.py), each with at most 4
// cells, and a binary search of at most 32 steps.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"
#include "triangle.glsl"
#include "exact.glsl"
#include "touch.glsl"
#include "surface.glsl"

// -- a triangle on a lattice of cells --------------------------------------------------------
//
// The cells whose closed boxes a triangle touches, decided exactly by the conservative
// surface's test (touch.glsl, surface.glsl), column by column.
//
// The lattice is the grid's cells, or the leaves of a top cell of a two-level grid: the
// grid's cells cut `scale` times along each axis. Its cell boxes are those of the grid
// scaled by `scale`, so the triangle's fixed-point corners scale exactly (X * scale, each
// within [0, 2^29] while a lattice has at most 8192 cells a side, the bound exact.glsl and
// surface.glsl rely on) and the decisions are those on the grid, scaled.
//
// Columns run along the triangle's thinnest axis: that of its normal's largest component
// (ties to z, then y), or, where the normal is zero (a segment or a point), that of its
// bounding box's shortest side (ties to z, then y). The other two axes' slopes are then at
// most 1, so the triangle's part over a closed column square spans at most 2 cells of
// height: a column holds at most 4 touched cells, and the work of a triangle grows with its
// columns. The axes are turned cyclically (x, y, z), (y, z, x) or (z, x, y) so that this
// axis comes last, as surface.glsl expects, and the corners ordered counter-clockwise in the
// new xy (as setup.comp orders them for the surface).

struct Placed {
    ivec3 a;      // the corners, scaled and turned, counter-clockwise in xy
    ivec3 b;
    ivec3 c;
    ivec3 axes;   // the lattice axis of each turned axis
    ivec3 lo;     // the cells the item may mark, turned, inclusive (a top cell's leaves)
    ivec3 hi;
    ivec2 first;  // the columns whose closed squares the triangle's bounding box touches,
    ivec2 last;   // inside [lo.xy, hi.xy] (first > last where none)
    ivec3 size;   // cells of the whole lattice, turned
};

ivec3 turned(ivec3 v, ivec3 axes) {
    return ivec3(v[axes.x], v[axes.y], v[axes.z]);
}

ivec3 unturned(ivec3 v, ivec3 axes) {
    ivec3 r;
    r[axes.x] = v.x;
    r[axes.y] = v.y;
    r[axes.z] = v.z;
    return r;
}

// The axis the columns run along (see above).
int column_axis(ivec3 a, ivec3 b, ivec3 c) {
    i64vec3 n = abs(cross64(b - a, c - a));
    if (n.x != 0l || n.y != 0l || n.z != 0l) {
        return (n.z >= n.x && n.z >= n.y) ? 2 : (n.y >= n.x ? 1 : 0);
    }
    ivec3 side = max(max(a, b), c) - min(min(a, b), c);
    return (side.z <= side.x && side.z <= side.y) ? 2 : (side.y <= side.x ? 1 : 0);
}

// The triangle with fixed-point corners a, b, c (grid units) on the lattice of `scale`
// cells per grid cell, `size` cells in all, where only cells in [lo, hi] count.
Placed place(ivec3 a, ivec3 b, ivec3 c, ivec3 scale, ivec3 size, ivec3 lo, ivec3 hi) {
    a *= scale;
    b *= scale;
    c *= scale;
    int axis = column_axis(a, b, c);
    Placed p;
    p.axes = axis == 2 ? ivec3(0, 1, 2) : (axis == 0 ? ivec3(1, 2, 0) : ivec3(2, 0, 1));
    p.a = turned(a, p.axes);
    p.b = turned(b, p.axes);
    p.c = turned(c, p.axes);
    if (edge_function(p.a.xy, p.b.xy, p.c.xy) < 0) {
        ivec3 swap = p.b;
        p.b = p.c;
        p.c = swap;
    }
    p.lo = turned(lo, p.axes);
    p.hi = turned(hi, p.axes);
    p.size = turned(size, p.axes);
    touched_rectangle(p.a, p.b, p.c, p.lo.xy, p.hi.xy, p.first, p.last);
    return p;
}

// Columns of the rectangle [first, last] (0 where it is empty).
uint rectangle_area(Placed p) {
    ivec2 side = max(p.last - p.first + 1, 0);
    return uint(side.x) * uint(side.y);
}

// Column n of the rectangle, row by row.
ivec2 rectangle_column(Placed p, uint n) {
    uint width = uint(p.last.x - p.first.x + 1);
    return p.first + ivec2(n % width, n / width);
}

// The cells of column `column` (turned) that the triangle touches, within [lo.z, hi.z]
// (empty when x > y): none unless its closed square is touched.
ivec2 touched_cells(Placed p, ivec2 column) {
    if (!square_touched(p.a, p.b, p.c, column << FIXED_BITS, ONE)) return EMPTY;
    ivec2 range = touched_column_range(p.a, p.b, p.c, column, p.size.z);
    return ivec2(max(range.x, p.lo.z), min(range.y, p.hi.z));
}

layout(std430, binding = 0) restrict readonly buffer Vertices { float vertices[]; };  // 3 per vertex
layout(std430, binding = 1) restrict readonly buffer Indices { uint indices[]; };     // 3 per triangle
layout(std430, binding = 2) restrict buffer Records { TriangleRecord records[]; };
layout(std430, binding = 3) restrict buffer CellEnds { uint cell_ends[]; };  // counts, cursors, ends
layout(std430, binding = 4) restrict buffer Units { uint units[]; };  // per item, then scanned
layout(std430, binding = 5) restrict buffer Totals { uint totals[]; };  // (low, high), cleared
layout(std430, binding = 6) restrict readonly buffer UnitTotal { uint unit_total; };
layout(std430, binding = 7) restrict writeonly buffer TriangleIds { uint triangle_ids[]; };
layout(std430, binding = 8) restrict writeonly buffer ReferenceCells { uint reference_cells[]; };
layout(std430, binding = 9) restrict readonly buffer TopIds { uint top_ids[]; };
layout(std430, binding = 10) restrict readonly buffer TopCells { uint top_cells[]; };
layout(std430, binding = 11) restrict readonly buffer Resolutions { uvec4 resolutions[]; };
layout(std430, binding = 12) restrict readonly buffer LeafBase { uint leaf_base[]; };

layout(push_constant) uniform Params {
    uint item_count;
    int nx;  // the grid's cells (level 2: the top level's)
    int ny;
    int nz;
    uint small_columns;  // items with at most this many columns are done by one thread
    uint chunk_columns;  // columns per unit of a larger item
    uint stage;          // 0: count, 1: emit
    uint over_units;     // 0: one thread per item, 1: one per unit
    uint emit_cells;     // 1: the emission also writes each reference's cell
    uint level;          // 1: the grid's triangles, 2: a top level's references
    uint capacity;       // emit: the references TriangleIds (and ReferenceCells) hold
};

// Where an item's cells go: keys base + ((l.x * dims.y + l.y) * dims.z + l.z), l = cell - lo.
struct Target {
    uint base;
    ivec3 lo;
    ivec3 dims;
};

vec3 corner(uint t, uint k) {
    uint v = indices[3u * t + k];
    return vec3(vertices[3u * v], vertices[3u * v + 1u], vertices[3u * v + 2u]);
}

// The item's triangle on its lattice, where its cells go, and the triangle's index.
Placed placed_item(uint item, out Target target, out uint triangle) {
    ivec3 shape = ivec3(nx, ny, nz);
    if (level == 1u) {
        triangle = item;
        ivec3 a, b, c;
        if (stage == 0u && over_units == 0u) {  // the setup
            a = to_fixed(corner(item, 0u));
            b = to_fixed(corner(item, 1u));
            c = to_fixed(corner(item, 2u));
            records[item] = TriangleRecord(ivec4(a, 0), ivec4(b, 0), ivec4(c, 0));
        } else {
            TriangleRecord r = records[item];
            a = r.a.xyz;
            b = r.b.xyz;
            c = r.c.xyz;
        }
        target = Target(0u, ivec3(0), shape);
        return place(a, b, c, ivec3(1), shape, ivec3(0), shape - 1);
    }
    triangle = top_ids[item];
    uint key = top_cells[item];
    ivec3 top = ivec3(int(key / uint(ny * nz)), int((key / uint(nz)) % uint(ny)),
                      int(key % uint(nz)));
    ivec3 scale = ivec3(resolutions[key].xyz);
    TriangleRecord r = records[triangle];
    target = Target(leaf_base[key], top * scale, scale);
    return place(r.a.xyz, r.b.xyz, r.c.xyz, scale, shape * scale, top * scale,
                 top * scale + scale - 1);
}

uint cell_key(Target target, ivec3 cell) {
    uvec3 l = uvec3(cell - target.lo);
    return target.base + (l.x * uint(target.dims.y) + l.y) * uint(target.dims.z) + l.z;
}

// Counts or writes one touched cell.
void mark(Target target, uint triangle, ivec3 cell) {
    uint key = cell_key(target, cell);
    uint slot = atomicAdd(cell_ends[key], 1u);
    if (stage == 1u) {
        triangle_ids[slot] = triangle;
        if (emit_cells != 0u) reference_cells[slot] = key;
    }
}

// The cells of the lattice whose closed boxes the triangle's bounding box touches: first
// to last along each axis (turned).
void box_cells(Placed p, out ivec3 first, out ivec3 last) {
    ivec3 low = min(min(p.a, p.b), p.c), high = max(max(p.a, p.b), p.c);
    first = max(((low + (ONE - 1)) >> FIXED_BITS) - 1, ivec3(0));
    last = min(high >> FIXED_BITS, p.size - 1);
}

// Whether the closed triangle's projection along `axis` (turned) touches the closed square
// of cell (u, v) of the other two axes, taken cyclically after it.
bool projection_touches(Placed p, int axis, ivec2 cell) {
    ivec2 corner = cell << FIXED_BITS;
    if (axis == 2) return square_touched(p.a, p.b, p.c, corner, ONE);
    if (axis == 0) return square_touched(p.a.yzx, p.b.yzx, p.c.yzx, corner, ONE);
    return square_touched(p.a.zxy, p.b.zxy, p.c.zxy, corner, ONE);
}

// The cells of a triangle whose bounding box touches few: returns false where it leaves
// them to the columns (visit), else marks them and sets `marked`. Where the box touches
// one cell along some axis, every point of the triangle lies within that cell's range along
// it, so the triangle touches a cell of that layer iff its projection touches the cell's
// square (touch.glsl): one test per cell, taken where the layer has at most small_columns
// cells. Where the box touches at most two cells in all, the triangle touches both, and no
// test is needed (along the axis of two, the box's ends are corners of the triangle on
// both sides of the cells' common plane or on it, so the triangle meets that plane inside
// the one cell the box spans along the other axes); the projection's tests agree.
bool few_cells(Placed p, Target target, uint triangle, out uint marked) {
    marked = 0u;
    ivec3 first, last;
    box_cells(p, first, last);
    ivec3 span = last - first + 1;
    int axis = span.z == 1 ? 2 : (span.x == 1 ? 0 : (span.y == 1 ? 1 : -1));
    if (axis < 0) return false;
    bool all_touched = span.x * span.y * span.z <= 2;
    if (!all_touched && uint(span.x * span.y * span.z) > small_columns) return false;
    // (the item's own cells only: those of a top cell, for a second level)
    first = max(first, p.lo);
    last = min(last, p.hi);
    int u = axis == 2 ? 0 : (axis == 0 ? 1 : 2), v = axis == 2 ? 1 : (axis == 0 ? 2 : 0);
    for (int i = first[u]; i <= last[u]; ++i) {
        for (int j = first[v]; j <= last[v]; ++j) {
            if (all_touched || projection_touches(p, axis, ivec2(i, j))) {
                ivec3 cell;
                cell[axis] = first[axis];
                cell[u] = i;
                cell[v] = j;
                mark(target, triangle, unturned(cell, p.axes));
                ++marked;
            }
        }
    }
    return true;
}

// Counts or writes the touched cells of columns [from, to) of the rectangle; returns how
// many there were.
uint visit(Placed p, Target target, uint triangle, uint from, uint to) {
    uint marked = 0u;
    for (uint n = from; n < to; ++n) {
        ivec2 column = rectangle_column(p, n);
        ivec2 range = touched_cells(p, column);
        for (int k = range.x; k <= range.y; ++k) {
            mark(target, triangle, unturned(ivec3(column, k), p.axes));
        }
        marked += uint(max(range.y - range.x + 1, 0));
    }
    return marked;
}

// The item unit u belongs to: the last item whose first unit is at most u (units[0] = 0).
uint unit_item(uint u) {
    uint lo = 0u, hi = item_count - 1u;
    while (lo < hi) {
        uint middle = (lo + hi + 1u) >> 1;
        if (units[middle] <= u) {
            lo = middle;
        } else {
            hi = middle - 1u;
        }
    }
    return lo;
}

uint run_unit(uint u) {
    if (u >= unit_total) return 0u;
    uint item = unit_item(u);
    Target target;
    uint triangle;
    Placed p = placed_item(item, target, triangle);
    uint first = (u - units[item]) * chunk_columns;
    return visit(p, target, triangle, first, min(first + chunk_columns, rectangle_area(p)));
}

uint run_item(uint item) {
    if (item >= item_count) return 0u;
    Target target;
    uint triangle;
    Placed p = placed_item(item, target, triangle);
    uint marked;
    if (few_cells(p, target, triangle, marked)) {
        if (stage == 0u) units[item] = 0u;
        return marked;
    }
    uint area = rectangle_area(p);
    bool alone = area <= small_columns;
    if (stage == 0u) units[item] = alone ? 0u : (area + chunk_columns - 1u) / chunk_columns;
    return alone ? visit(p, target, triangle, 0u, area) : 0u;
}

shared uint group_marks;

void main() {
    if (gl_LocalInvocationID.x == 0u) group_marks = 0u;
    barrier();
    uint index = flat_invocation_id();
    // (the count's totals, read alike by every thread: the emission is all or nothing)
    bool fits = stage == 0u || (totals[1] == 0u && totals[0] <= capacity);
    uint marked = !fits ? 0u : (over_units != 0u ? run_unit(index) : run_item(index));
    if (stage == 0u && marked != 0u) atomicAdd(group_marks, marked);
    barrier();
    if (gl_LocalInvocationID.x == 0u && group_marks != 0u) {
        uint before = atomicAdd(totals[0], group_marks);
        if (before + group_marks < before) atomicAdd(totals[1], 1u);  // the low word wrapped
    }
}
