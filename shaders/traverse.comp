#version 460
// Triangle grids: rays through the grid, one thread per ray (voxelizer/trigrid/queries.py).
// Query 0 finds the first hit (the least t, then the least triangle index), query 1 any hit
// (occlusion: it stops at the first one it finds). Levels 2 walks a two-level grid: the top
// cells, and inside each the leaves it was cut into (cells.comp, subgrid.comp). Both are
// push constants: one module (the shipped SPIR-V stays small), so a one-level walk binds
// stand-ins for the leaves' buffers.
//
// Rays come in grid space (origin and direction as the host maps them, float32): a ray's
// parameter t is the same in world and grid space. The direction is first scaled by a
// power of two so that its largest component lies in [1/2, 1) (exactly; t is scaled back
// exactly), so that no product below overflows or underflows however long it was given.
//
// Traversal (Amanatides and Woo's 3D-DDA): from the cell where the ray enters the grid, or
// where it is at t_min, cell by cell along the ray, each cell's triangles tested; the walk
// stops once the best hit so far lies no farther than the cell's exit (any triangle hit
// nearer lies in a cell already walked: cells list every triangle that touches their
// closed box). Each boundary's t is computed from the cell's index, not accumulated.
//
// The ray-triangle test is Woop, Benthin and Wald's watertight test (JCGT 2013) without its
// divisions: the corners are taken relative to the origin and sheared along the
// direction's largest axis kz, each sheared coordinate multiplied through by d[kz]
// (x' = A[kx] d[kz] - d[kx] A[kz]), so that U, V, W are the edge functions times d[kz]^2.
// Every corner is the grid's fixed-point corner (X / 2^16, exact in float32: see
// voxelizer/trigrid/grid.py), so a corner shared by two triangles is sheared to the same
// two floats in both, and an edge's function is the same float with opposite signs seen
// from its two triangles (a - b and b - a round to opposites). Each is a difference of two
// rounded products, and rounding is monotone, so its sign is the exact sign for the
// sheared corners, or 0. The tie rule: 0 counts as on the edge, for both triangles, so a ray
// through a shared edge or vertex hits at least one of the triangles around it (a ray within
// rounding of a mesh's outer edge may hit it); a ray in a triangle's plane (U + V + W = 0)
// misses it. Then t = (U A[kz] + V B[kz] + W C[kz]) / ((U + V + W) d[kz]) and the
// barycentrics u = V / (U + V + W), v = W / (U + V + W) (the hit is (1 - u - v) A + u B + v C,
// A, B, C as the face lists them). Every operation up to the division is marked precise (no
// fused multiply-add), so voxelizer/trigrid/reference.py repeats it bit for bit in numpy.
//
// Loop budget: on a CPU device (llvmpipe's guard of 65,535 loop iterations per invocation:
// tiles.glsl) the host passes a trip_budget: a ray that would make more steps and tests in
// all stops and reports triangle -2, and the host finishes it on the CPU.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = WG_SIZE) in;  // before the includes: they read gl_WorkGroupSize
#include "common.glsl"
#include "triangle.glsl"

struct Hit {
    float t;       // +inf: no hit
    int triangle;  // -1: no hit; -2: not finished (the loop budget)
    float u;
    float v;
};

layout(std430, binding = 0) restrict readonly buffer Records { TriangleRecord records[]; };
layout(std430, binding = 1) restrict readonly buffer CellEnds { uint cell_ends[]; };
layout(std430, binding = 2) restrict readonly buffer TriangleIds { uint triangle_ids[]; };
layout(std430, binding = 3) restrict readonly buffer Origins { float origins[]; };     // 3 per ray
layout(std430, binding = 4) restrict readonly buffer Directions { float directions[]; };  // 3 per ray
layout(std430, binding = 5) restrict writeonly buffer Hits { Hit hits[]; };
layout(std430, binding = 6) restrict readonly buffer Resolutions { uvec4 resolutions[]; };
layout(std430, binding = 7) restrict readonly buffer LeafBase { uint leaf_base[]; };
layout(std430, binding = 8) restrict readonly buffer LeafEnds { uint leaf_ends[]; };
layout(std430, binding = 9) restrict readonly buffer LeafIds { uint leaf_ids[]; };

layout(push_constant) uniform Params {
    uint ray_count;
    int nx;
    int ny;
    int nz;
    float t_min;  // the hits counted: t_min <= t <= t_max (world units, as given)
    float t_max;
    uint query;        // 0: first hit, 1: any hit
    uint levels;       // 1 or 2
    uint trip_budget;  // steps and tests a ray may make (llvmpipe's loop budget)
};

#define INF uintBitsToFloat(0x7F800000u)
const float UNIT = 1.0 / float(1 << FIXED_BITS);

struct Ray {
    vec3 o;
    vec3 d;      // scaled: the largest component in [1/2, 1)
    ivec3 k;     // kx, ky, kz
    vec3 inverse;  // 1 / d where d != 0 (the walk's boundaries: no division a step)
    int exponent;  // d was scaled by 2^-exponent: t = t' 2^-exponent
    float t_lo;    // t_min and t_max for the scaled direction
    float t_hi;
};

uint trips = 0u;
bool done = false;  // the best hit is final (or, for query 1, a hit was found)
Hit best = Hit(INF, -1, 0.0, 0.0);
// The last four triangles tested (a triangle spans a few neighbouring cells: the walk meets
// it again at once), which are not tested again: the result is the same.
uvec4 recent = uvec4(0xFFFFFFFFu);  // the last four, newest first

bool tested_recently(uint id) {
    if (any(equal(recent, uvec4(id)))) return true;
    recent = uvec4(id, recent.xyz);
    return false;
}

void test_triangle(Ray r, uint id) {
    TriangleRecord record = records[id];
    precise vec3 a = vec3(record.a.xyz) * UNIT - r.o;
    precise vec3 b = vec3(record.b.xyz) * UNIT - r.o;
    precise vec3 c = vec3(record.c.xyz) * UNIT - r.o;
    float dx = r.d[r.k.x], dy = r.d[r.k.y], dz = r.d[r.k.z];
    precise float ax = a[r.k.x] * dz - dx * a[r.k.z];
    precise float ay = a[r.k.y] * dz - dy * a[r.k.z];
    precise float bx = b[r.k.x] * dz - dx * b[r.k.z];
    precise float by = b[r.k.y] * dz - dy * b[r.k.z];
    precise float cx = c[r.k.x] * dz - dx * c[r.k.z];
    precise float cy = c[r.k.y] * dz - dy * c[r.k.z];
    precise float u = cx * by - cy * bx;
    precise float v = ax * cy - ay * cx;
    precise float w = bx * ay - by * ax;
    if ((u < 0.0 || v < 0.0 || w < 0.0) && (u > 0.0 || v > 0.0 || w > 0.0)) return;
    precise float det = u + v + w;
    if (det == 0.0) return;
    precise float along = u * a[r.k.z] + v * b[r.k.z] + w * c[r.k.z];
    precise float scaled_det = det * dz;
    float t = along / scaled_det;
    if (!(t >= r.t_lo && t <= r.t_hi)) return;
    if (t < best.t || (t == best.t && int(id) < best.triangle)) {
        best = Hit(t, int(id), v / det, w / det);
        done = done || query == 1u;
    }
}

// Tests the triangles of slots [first, end) of a cell's list.
void test_cell(Ray r, uint first, uint end) {
    for (uint slot = first; slot < end && !done; ++slot) {
        if (++trips > trip_budget) return;
        uint id = levels == 2u ? leaf_ids[slot] : triangle_ids[slot];
        if (!tested_recently(id)) test_triangle(r, id);
    }
}

// The 3D-DDA over a box of `count` cells of `size` (grid units) from `corner`: the cell the
// walk is in, its steps, and the t where the ray leaves the cell along each axis (+inf
// along an axis the ray does not move on), each computed from the cell's index.
struct Walk {
    vec3 corner;
    vec3 size;
    ivec3 count;
    ivec3 cell;
    ivec3 step;
    vec3 exits;
};

float boundary_t(Ray r, Walk w, int axis) {
    float side = w.corner[axis] + float(w.cell[axis] + int(w.step[axis] > 0)) * w.size[axis];
    return w.step[axis] == 0 ? INF : (side - r.o[axis]) * r.inverse[axis];
}

Walk start_walk(Ray r, vec3 corner, vec3 size, ivec3 count, float t_enter) {
    Walk w;
    w.corner = corner;
    w.size = size;
    w.count = count;
    vec3 start = ((r.o + t_enter * r.d) - corner) / size;
    w.cell = clamp(ivec3(floor(start)), ivec3(0), count - 1);
    w.step = ivec3(sign(r.d));
    [[unroll]] for (int axis = 0; axis < 3; ++axis) w.exits[axis] = boundary_t(r, w, axis);
    return w;
}

float leave_t(Walk w) {
    return min(w.exits.x, min(w.exits.y, w.exits.z));
}

// Steps into the next cell along the ray; false where that leaves the box.
bool step_walk(Ray r, inout Walk w) {
    vec3 t = w.exits;
    int axis = (t.x <= t.y && t.x <= t.z) ? 0 : (t.y <= t.z ? 1 : 2);
    w.cell[axis] += w.step[axis];
    if (w.cell[axis] < 0 || w.cell[axis] >= w.count[axis]) return false;
    w.exits[axis] = boundary_t(r, w, axis);
    return true;
}

uint cell_key(ivec3 cell, ivec3 shape) {
    return (uint(cell.x) * uint(shape.y) + uint(cell.y)) * uint(shape.z) + uint(cell.z);
}

// The leaves of top cell `top` (key `key`) that the ray crosses between t_enter and t_exit.
void walk_leaves(Ray r, ivec3 top, uint key, float t_enter, float t_exit) {
    ivec3 scale = ivec3(resolutions[key].xyz);
    if (scale.x == 0) return;  // an empty top cell
    uint base = leaf_base[key];
    Walk w = start_walk(r, vec3(top), 1.0 / vec3(scale), scale, t_enter);
    while (!done) {
        if (++trips > trip_budget) return;
        uint leaf = base + cell_key(w.cell, scale);
        test_cell(r, leaf == 0u ? 0u : leaf_ends[leaf - 1u], leaf_ends[leaf]);
        float leave = leave_t(w);
        if (best.t <= leave) done = true;
        if (done || leave >= t_exit || !step_walk(r, w)) return;
    }
}

// The cells (top cells) the ray crosses between t0 and t1.
void walk_grid(Ray r, float t0, float t1) {
    ivec3 shape = ivec3(nx, ny, nz);
    Walk w = start_walk(r, vec3(0.0), vec3(1.0), shape, t0);
    float t_enter = t0;
    while (!done) {
        if (++trips > trip_budget) return;
        float leave = min(leave_t(w), t1);
        uint key = cell_key(w.cell, shape);
        if (levels == 2u) {
            walk_leaves(r, w.cell, key, t_enter, leave);
        } else {
            test_cell(r, key == 0u ? 0u : cell_ends[key - 1u], cell_ends[key]);
        }
        if (best.t <= leave) done = true;
        if (done || leave >= t1 || !step_walk(r, w)) return;
        t_enter = leave;
    }
}

Ray make_ray(vec3 o, vec3 d) {
    Ray r;
    r.o = o;
    float largest = max(abs(d.x), max(abs(d.y), abs(d.z)));
    frexp(largest, r.exponent);
    r.d = ldexp(d, ivec3(-r.exponent));
    r.inverse = vec3(1.0) / mix(r.d, vec3(1.0), equal(r.d, vec3(0.0)));
    r.t_lo = ldexp(t_min, r.exponent);
    r.t_hi = ldexp(t_max, r.exponent);
    vec3 m = abs(r.d);
    int kz = (m.x >= m.y && m.x >= m.z) ? 0 : (m.y >= m.z ? 1 : 2);
    int kx = kz == 2 ? 0 : kz + 1;
    r.k = ivec3(kx, kx == 2 ? 0 : kx + 1, kz);
    return r;
}

void trace(uint index) {
    vec3 o = vec3(origins[3u * index], origins[3u * index + 1u], origins[3u * index + 2u]);
    vec3 d = vec3(directions[3u * index], directions[3u * index + 1u],
                  directions[3u * index + 2u]);
    if (d == vec3(0.0)) return;
    Ray r = make_ray(o, d);
    // The part of the ray inside the grid's box [0, n], within [t_lo, t_hi].
    vec3 n = vec3(nx, ny, nz);
    float t0 = r.t_lo, t1 = r.t_hi;
    [[unroll]] for (int axis = 0; axis < 3; ++axis) {
        if (r.d[axis] == 0.0) {
            if (r.o[axis] < 0.0 || r.o[axis] > n[axis]) t0 = INF;
        } else {
            float near = (0.0 - r.o[axis]) / r.d[axis];
            float far = (n[axis] - r.o[axis]) / r.d[axis];
            t0 = max(t0, min(near, far));
            t1 = min(t1, max(near, far));
        }
    }
    if (!(t0 <= t1)) return;
    walk_grid(r, t0, t1);
    if (trips > trip_budget) {
        best = Hit(INF, -2, 0.0, 0.0);
    } else if (best.triangle >= 0) {
        best.t = ldexp(best.t, -r.exponent);
    }
}

void main() {
    uint index = flat_invocation_id();
    if (index >= ray_count) return;
    trace(index);
    hits[index] = best;
}
