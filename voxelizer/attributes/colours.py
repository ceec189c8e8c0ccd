"""Voxel colours: a surface voxel takes the colour of its face at the point of the face
nearest to the voxel's centre; every other set voxel the colour of the nearest surface voxel
along its column (+z), or one fill colour.

A face's colour at a point, by its source (voxelizer.attributes.appearance):
- TEXTURE: the texture's pixel at the point's UV (the corners' UVs weighted by the point's
  barycentric weights), picked as trimesh's `uv_to_color` picks it (the nearest pixel to
  (u (W - 1), (1 - v) (H - 1)), rounded half to even), times the material's tint
  (component by component, /255, rounded: glTF's base colour factor; white for an OBJ
  material, whose texture is taken alone);
- VERTEX: the corners' colours weighted by the same weights, rounded;
- FACE: the face's colour; MATERIAL: its material's colour (the default grey without one).
A texture that cannot be read, or a face whose corner UVs leave [0, 1], takes the
material's colour, and the caller warns (voxelizer.errors.ColorWarning) with the problems
surface_colors reports.
"""

from __future__ import annotations

import numpy as np

from ..mesh import Mesh
from ..placement import GridPlacement
from .appearance import DEFAULT_COLOR, FACE, TEXTURE, VERTEX
from .closest import closest_weights

CHUNK_VOXELS = 1 << 22  # voxels of the grid whose column colours are found at once
Color = tuple[int, int, int, int]


def surface_colors(
    mesh: Mesh, placement: GridPlacement, voxels: np.ndarray, face_ids: np.ndarray
) -> tuple[np.ndarray, list[str]]:
    """RGBA uint8 (M, 4) of voxels (M, 3) [i, j, k] marked by faces `face_ids` (M,), and
    what kept faces from their colours (ColorWarning's messages)."""
    appearance = mesh.appearance
    count = len(face_ids)
    if appearance is None:
        return np.tile(np.array(DEFAULT_COLOR, np.uint8), (count, 1)), []
    problems = list(appearance.problems)
    out = appearance.material_colors()[face_ids]
    sources = appearance.sources[face_ids]
    needs_point = (sources == TEXTURE) | (sources == VERTEX)
    weights = np.zeros((count, 3))
    if needs_point.any():
        rows = np.flatnonzero(needs_point)
        corners = mesh.vertices[mesh.faces[face_ids[rows]]]  # (R, 3 corners, 3)
        points = placement.voxel_centres(voxels[rows])
        weights[rows] = closest_weights(points, corners[:, 0], corners[:, 1], corners[:, 2])
    rows = np.flatnonzero(sources == VERTEX)
    if len(rows):
        assert appearance.vertex_colors is not None  # (Appearance checks its arrays)
        corner_colors = appearance.vertex_colors[mesh.faces[face_ids[rows]]].astype(np.float64)
        mixed = np.einsum("rc,rck->rk", weights[rows], corner_colors)
        out[rows] = np.floor(np.clip(mixed, 0.0, 255.0) + 0.5)
    rows = np.flatnonzero(sources == FACE)
    if len(rows):
        assert appearance.face_colors is not None
        out[rows] = appearance.face_colors[face_ids[rows]]
    rows = np.flatnonzero(sources == TEXTURE)
    if len(rows):
        problems += _textured(out, rows, face_ids[rows], weights[rows], mesh)
    return out, problems


def _textured(
    out: np.ndarray, rows: np.ndarray, face_ids: np.ndarray, weights: np.ndarray, mesh: Mesh
) -> list[str]:
    """out[rows] = the texture colour at the weighted UVs, times the material's tint, for
    faces whose texture can be read and whose corner UVs lie in [0, 1]; what kept the
    others from it."""
    appearance = mesh.appearance
    assert appearance is not None and appearance.corner_uvs is not None
    corner_uvs = appearance.corner_uvs[face_ids]  # (R, 3, 2)
    outside = ((corner_uvs < 0.0) | (corner_uvs > 1.0)).any(axis=(1, 2))
    problems = []
    if outside.any():
        faces = len(np.unique(face_ids[outside]))
        problems.append(
            f"{faces:,} textured {'face has' if faces == 1 else 'faces have'} texture "
            f"coordinates outside [0, 1] ({int(outside.sum()):,} surface voxels): they take "
            "their material's colour"
        )
    uvs = np.einsum("rc,rck->rk", weights, corner_uvs)
    materials = appearance.face_materials[face_ids]
    for material in np.unique(materials[~outside]).tolist():
        texture = appearance.materials[material].texture
        pixels = None if texture is None else texture.pixels()
        if pixels is None:  # the material colour stays
            if texture is not None and texture.problem not in problems:
                problems.append(texture.problem)
            continue
        picked = np.flatnonzero((materials == material) & ~outside)
        sampled = sample_texture(pixels, uvs[picked]).astype(np.float64)
        tint = appearance.texture_tints()[material].astype(np.float64)
        out[rows[picked]] = np.floor(sampled * tint / 255.0 + 0.5)
    return problems


def sample_texture(pixels: np.ndarray, uvs: np.ndarray) -> np.ndarray:
    """RGBA uint8 (N, 4) of an (H, W, 4) image at UVs (N, 2), picked as trimesh's
    trimesh.visual.color.uv_to_color picks them (v up, the nearest pixel)."""
    height, width = pixels.shape[:2]
    x = (uvs[:, 0] * (width - 1)) % width
    y = ((1.0 - uvs[:, 1]) * (height - 1)) % height
    rows = y.round().astype(np.int64) % height
    columns = x.round().astype(np.int64) % width
    return pixels[rows, columns]


def filled_colors(
    voxels: np.ndarray, marked: np.ndarray, marked_colors: np.ndarray, fill: Color | None
) -> np.ndarray:
    """RGBA uint8 (nx, ny, nz, 4) of the set voxels of bool `voxels`, 0 elsewhere: a marked
    voxel (M, 3) its colour (M, 4); any other, with `fill` None, the colour of the marked
    voxel nearest along its column (the lower one of two at the same distance; the default
    grey in a column without one), else `fill`.

    Voxels and marks are numbered in C order, (i ny + j) nz + k, so that a column is a run
    of numbers: a set voxel's nearest marks are the two around its number (found by binary
    search among the sorted marks' numbers), if they lie in its column. The set voxels go a
    slab of x at a time; the work follows them, not the grid."""
    nx, ny, nz = voxels.shape
    out = np.zeros((nx, ny, nz, 4), np.uint8)
    numbers = (marked[:, 0] * ny + marked[:, 1]) * nz + marked[:, 2]
    order = np.argsort(numbers, kind="stable")
    numbers = numbers[order]
    table = np.vstack([marked_colors[order], [fill if fill is not None else DEFAULT_COLOR]])
    last = len(numbers)  # the table's last row: fill, or the default grey
    flat = out.reshape(-1, 4)
    step = max(1, CHUNK_VOXELS // max(1, ny * nz))
    for low in range(0, nx, step):
        high = min(nx, low + step)
        voxel = np.flatnonzero(voxels[low:high]) + low * ny * nz
        at = np.searchsorted(numbers, voxel)  # the first mark at or after each voxel
        after = np.minimum(at, last - 1)
        if fill is not None or last == 0:
            exact = (at < last) & (numbers[after] == voxel) if last else np.zeros(len(at), bool)
            flat[voxel] = table[np.where(exact, at, last)]
            continue
        before = np.maximum(at - 1, 0)
        column = voxel // nz
        far = np.int64(2 * nz)
        to_after = np.where(
            (at < last) & (numbers[after] // nz == column), numbers[after] - voxel, far
        )
        to_before = np.where(
            (at > 0) & (numbers[before] // nz == column), voxel - numbers[before], far
        )
        pick = np.where(to_before <= to_after, before, after)
        flat[voxel] = table[np.where(np.minimum(to_before, to_after) < far, pick, last)]
    return out


def parse_color(value: object) -> Color | None:
    """A fill colour as RGBA: None or "nearest" (the nearest surface voxel's colour), a
    "#RRGGBB" or "#RRGGBBAA" string (the "#" optional), or three or four integers from 0 to
    255; ValueError otherwise."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "nearest"):
        return None
    if isinstance(value, str):
        digits = value.strip().removeprefix("#")
        if len(digits) in (6, 8) and all(c in "0123456789abcdefABCDEF" for c in digits):
            channels = [int(digits[at : at + 2], 16) for at in range(0, len(digits), 2)]
            return _rgba(channels)
        raise ValueError(f"colour {value!r}: write RRGGBB or RRGGBBAA in hexadecimal, or nearest")
    try:
        channels = [int(c) for c in value]  # type: ignore[attr-defined]
        exact = all(int(c) == c for c in value)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        raise ValueError(f"colour {value!r}: give three or four integers from 0 to 255") from None
    if not exact or len(channels) not in (3, 4) or not all(0 <= c <= 255 for c in channels):
        raise ValueError(f"colour {value!r}: give three or four integers from 0 to 255")
    return _rgba(channels)


def _rgba(channels: list[int]) -> Color:
    r, g, b, a = [*channels, 255][:4]
    return r, g, b, a
