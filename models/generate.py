"""Write the generated test meshes next to this file: closed, watertight, outward-oriented.

    python models/generate.py

The output is deterministic (no randomness, binary little-endian PLY; the painted gear as
OBJ, MTL and PNG text and bytes), so the files can be regenerated and compared byte for byte.
"""

from __future__ import annotations

import colorsys
import struct
import zlib
from pathlib import Path

import numpy as np
import trimesh

HERE = Path(__file__).resolve().parent
Mesh = tuple[np.ndarray, np.ndarray]  # (vertices, faces)


def tube_faces(rings: int, sides: int) -> np.ndarray:
    """Quads between consecutive rings of a closed tube (ring r, side s -> r*sides + s)."""
    r = np.arange(rings)[:, None]
    s = np.arange(sides)[None, :]
    a = r * sides + s
    b = r * sides + (s + 1) % sides
    c = ((r + 1) % rings) * sides + (s + 1) % sides
    d = ((r + 1) % rings) * sides + s
    quads = np.stack([a, b, c, d], axis=-1).reshape(-1, 4)
    return np.concatenate([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]])


def torus_knot(p: int = 3, q: int = 2, rings: int = 288, sides: int = 12) -> Mesh:
    """A tube around a (p, q) torus knot: thin, self-wrapping, many nearly parallel walls."""
    big, small, tube = 1.0, 0.45, 0.16
    phi = np.linspace(0.0, 2.0 * np.pi, rings, endpoint=False)
    rho = big + small * np.cos(q * phi)
    centre = np.stack([rho * np.cos(p * phi), rho * np.sin(p * phi), small * np.sin(q * phi)], axis=1)
    tangent = np.roll(centre, -1, axis=0) - np.roll(centre, 1, axis=0)
    tangent /= np.linalg.norm(tangent, axis=1, keepdims=True)
    # Frame from the direction away from the torus core circle: periodic, so the tube closes.
    core = np.stack([big * np.cos(p * phi), big * np.sin(p * phi), np.zeros_like(phi)], axis=1)
    normal = centre - core
    normal -= (normal * tangent).sum(axis=1, keepdims=True) * tangent
    normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    binormal = np.cross(tangent, normal)
    theta = np.linspace(0.0, 2.0 * np.pi, sides, endpoint=False)
    ring = np.cos(theta)[None, :, None] * normal[:, None] + np.sin(theta)[None, :, None] * binormal[:, None]
    vertices = (centre[:, None] + tube * ring).reshape(-1, 3)
    return vertices, tube_faces(rings, sides)


def hollow_sphere(outer: float = 1.0, inner: float = 0.6, subdivisions: int = 4) -> Mesh:
    """Two nested spheres, the inner one turned inside out: a solid shell with an empty core."""
    ball = trimesh.creation.icosphere(subdivisions=subdivisions)
    v, f = np.asarray(ball.vertices), np.asarray(ball.faces, dtype=np.int64)
    vertices = np.concatenate([v * outer, v * inner])
    faces = np.concatenate([f, f[:, ::-1] + len(v)])
    return vertices, faces


def gear(teeth: int = 16, height: float = 0.25, hole: float = 0.25) -> Mesh:
    """An extruded spur gear with a bore: sharp vertical walls, flat caps, a through hole."""
    tip, root = 1.0, 0.82
    # Each tooth: root land, rising flank, tip land, falling flank (fractions of the pitch).
    marks = np.array([0.0, 0.2, 0.35, 0.65, 0.8, 1.0])
    radii = np.array([root, root, tip, tip, root, root])
    steps = 3  # points per segment, so the bore stays round
    frac = np.concatenate([np.linspace(a, b, steps, endpoint=False) for a, b in zip(marks[:-1], marks[1:])])
    angle = 2.0 * np.pi * (np.arange(teeth)[:, None] + frac[None, :]).ravel() / teeth
    outer_r = np.tile(np.interp(frac, marks, radii), teeth)
    m = len(angle)
    # The profile is star-shaped around the axis, so pairing outer and bore points at equal
    # angles gives non-overlapping quads for the caps.
    outer = np.stack([outer_r * np.cos(angle), outer_r * np.sin(angle)], axis=1)
    bore = np.stack([hole * np.cos(angle), hole * np.sin(angle)], axis=1)
    ring = np.concatenate([outer, bore])  # outer 0..m-1, bore m..2m-1
    below = np.column_stack([ring, np.full(2 * m, -height / 2)])
    above = np.column_stack([ring, np.full(2 * m, height / 2)])
    vertices = np.concatenate([below, above])
    o = np.arange(m)
    o1 = (o + 1) % m
    b, b1 = o + m, o1 + m
    top = 2 * m  # offset of the upper layer
    quads = [
        np.stack([o, o1, b1, b], axis=1) + top,  # top cap, seen from +z: counter-clockwise
        np.stack([o, b, b1, o1], axis=1),  # bottom cap, reversed
        np.stack([o, o1, o1 + top, o + top], axis=1),  # outer wall, facing out
        np.stack([b, b + top, b1 + top, b1], axis=1),  # bore wall, facing the axis
    ]
    quads = np.concatenate(quads)
    faces = np.concatenate([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]])
    return vertices, faces


MESHES = {
    "torus_knot.ply": torus_knot,
    "hollow_sphere.ply": hollow_sphere,
    "gear.ply": gear,
}


def build(name: str) -> trimesh.Trimesh:
    """Build one mesh and refuse to return it unless it is closed and consistently wound."""
    vertices, faces = MESHES[name]()
    mesh = trimesh.Trimesh(vertices=vertices, faces=faces, process=False)
    if not (mesh.is_watertight and mesh.is_winding_consistent):
        raise RuntimeError(f"{name}: not watertight or not consistently wound")
    if mesh.volume <= 0:
        raise RuntimeError(f"{name}: faces point inwards (volume {mesh.volume})")
    return mesh


WHEEL = 64  # pixels per side of the painted gear's texture


def colour_wheel() -> np.ndarray:
    """RGB uint8 (WHEEL, WHEEL, 3): hue by angle around the centre, lighter towards it."""
    y, x = (np.mgrid[0:WHEEL, 0:WHEEL] + 0.5) / WHEEL * 2.0 - 1.0
    hue = (np.arctan2(-y, x) / (2.0 * np.pi)) % 1.0
    light = 0.35 + 0.25 * np.clip(1.0 - np.hypot(x, y), 0.0, 1.0)
    rgb = [colorsys.hls_to_rgb(h, l, 0.85) for h, l in zip(hue.ravel(), light.ravel())]
    return np.round(np.array(rgb) * 255).astype(np.uint8).reshape(WHEEL, WHEEL, 3)


def png(image: np.ndarray) -> bytes:
    """RGB PNG bytes (filter 0 rows), written without an image library."""
    rows = np.concatenate([np.zeros((len(image), 1), np.uint8), image.reshape(len(image), -1)], 1)

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    header = struct.pack(">IIBBBBB", image.shape[1], image.shape[0], 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows.tobytes(), 9)) + chunk(b"IEND", b"")


def painted_gear() -> None:
    """painted_gear.obj (+ .mtl, .png): two parts for the colours and labels examples. The
    gear (group "gear") is painted from above with a colour wheel (texture coordinates from
    x and y), the axle through its bore (group "axle") is a grey box (a plain Kd)."""
    gear_mesh = build("gear.ply")
    v = np.asarray(gear_mesh.vertices)
    uv = (v[:, :2] + 1.0) / 2.0 * 0.96 + 0.02  # inside [0, 1]: the wheel seen from above
    axle = trimesh.creation.box(bounds=[[-0.15, -0.15, -0.3], [0.15, 0.15, 0.3]])
    lines = ["# painted gear: written by models/generate.py", "mtllib painted_gear.mtl", "g gear", "usemtl paint"]
    lines += [f"v {x:.6f} {y:.6f} {z:.6f}" for x, y, z in v.tolist()]
    lines += [f"vt {a:.6f} {b:.6f}" for a, b in uv.tolist()]
    lines += [f"f {a}/{a} {b}/{b} {c}/{c}" for a, b, c in (np.asarray(gear_mesh.faces) + 1).tolist()]
    lines += ["g axle", "usemtl steel"]
    lines += [f"v {x:.6f} {y:.6f} {z:.6f}" for x, y, z in np.asarray(axle.vertices).tolist()]
    lines += [f"f {a} {b} {c}" for a, b, c in (np.asarray(axle.faces) + 1 + len(v)).tolist()]
    (HERE / "painted_gear.obj").write_text("\n".join(lines) + "\n")
    (HERE / "painted_gear.mtl").write_text(
        "newmtl paint\nKd 0.8 0.8 0.8\nmap_Kd painted_gear.png\n\nnewmtl steel\nKd 0.55 0.57 0.62\n"
    )
    (HERE / "painted_gear.png").write_bytes(png(colour_wheel()))
    print(f"painted_gear.obj: {len(gear_mesh.faces) + len(axle.faces)} triangles in 2 groups")


def main() -> None:
    for name in MESHES:
        mesh = build(name)
        data = mesh.export(file_type="ply", encoding="binary")
        (HERE / name).write_bytes(data)
        print(f"{name}: {len(mesh.faces)} triangles, volume {mesh.volume:.4f}, {len(data)} bytes")
    painted_gear()


if __name__ == "__main__":
    main()
