"""The three-view image of a voxelization: three shaded orthographic views side by side.

Left to right: seen from +z (front), from +x (side) and from +y (top), with y up in the
first two. Each pixel is one voxel column, shaded by the first solid voxel along it: a
diffuse light from the upper left on normals taken from the smoothed depth map, darker
with depth. All views share one scale (set by the grid's longest side), so a non-cubic grid
keeps its proportions; shorter views are centred vertically. Pure numpy and a minimal PNG
encoder (zlib + struct).

Part of the data model (no files): notebooks show it through `_repr_png_` of DenseGrid and
SVO, and voxelizer.io.preview writes it to a file.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

# Per view: the axis looked along (from its + side), then the image's right and up
# directions as (axis, sign).
View = tuple[int, tuple[int, int], tuple[int, int]]
VIEWS: tuple[View, ...] = ((2, (0, 1), (1, 1)), (0, (2, -1), (1, 1)), (1, (0, 1), (2, -1)))
LIGHT = np.array([-0.45, 0.55, 0.70]) / np.linalg.norm([-0.45, 0.55, 0.70])
COLOUR = np.array([0.58, 0.68, 0.86])
BACKGROUND = 255
GAP = 8  # pixels between views
# The grid's longest side is scaled up to at least, or down to at most, this many pixels.
PANEL = (256, 512)


def render_views(voxels: np.ndarray) -> np.ndarray:
    """uint8 (H, W, 3) image of the three views of a bool [i, j, k] grid."""
    longest = max(voxels.shape)
    panels = [_resize(_shade(*_first_hits(voxels, view)), longest) for view in VIEWS]
    height = max(panel.shape[0] for panel in panels)
    gap = np.full((height, GAP, 3), BACKGROUND, np.uint8)
    row = [gap]
    for panel in panels:
        above = (height - panel.shape[0]) // 2
        below = height - panel.shape[0] - above
        row += [np.pad(panel, ((above, below), (0, 0), (0, 0)), constant_values=BACKGROUND), gap]
    border = np.full((GAP, sum(part.shape[1] for part in row), 3), BACKGROUND, np.uint8)
    return np.concatenate([border, np.concatenate(row, axis=1), border])


def _first_hits(voxels: np.ndarray, view: View) -> tuple[np.ndarray, np.ndarray, int]:
    """(hit mask, depth of the first solid voxel, depth range) in image rows and columns."""
    along, (right, right_sign), (up, up_sign) = view
    grid = voxels.transpose(up, right, along)[::-up_sign, ::right_sign, ::-1]
    hit = grid.any(axis=2)
    return hit, np.argmax(grid, axis=2).astype(np.float64), grid.shape[2]


def _shade(hit: np.ndarray, depth: np.ndarray, extent: int) -> np.ndarray:
    weight, smooth = hit.astype(np.float64), np.where(hit, depth, 0.0)
    for _ in range(2):  # 5x5 tent filter over the hit pixels: softens the voxel steps
        weight, smooth = _blur(weight), _blur(smooth)
    smooth /= np.maximum(weight, 1e-9)
    d_row, d_col = _slope(smooth, hit, 0), _slope(smooth, hit, 1)
    normal = np.stack([d_col, -d_row, np.ones_like(depth)], axis=-1)  # x right, y up, z to us
    normal /= np.linalg.norm(normal, axis=-1, keepdims=True)
    light = 0.25 + 0.75 * np.clip(normal @ LIGHT, 0.0, 1.0)
    light *= 1.0 - 0.45 * depth / max(extent, 1)
    return np.where(hit[..., None], light[..., None] * COLOUR * 255.0, float(BACKGROUND))


def _blur(image: np.ndarray) -> np.ndarray:
    """3x3 box sum (zero outside)."""
    padded = np.pad(image, 1)
    rows = padded[:-2] + padded[1:-1] + padded[2:]
    return rows[:, :-2] + rows[:, 1:-1] + rows[:, 2:]


def _slope(depth: np.ndarray, hit: np.ndarray, axis: int) -> np.ndarray:
    """Depth change per pixel along an axis, from the neighbours that are hit, clipped so
    that occlusion steps read as steep rather than as spikes."""
    total, used = np.zeros_like(depth), np.zeros_like(depth)
    for shift in (1, -1):
        other = np.roll(depth, -shift, axis=axis)
        ok = hit & np.roll(hit, -shift, axis=axis)
        edge = [slice(None)] * 2
        edge[axis] = slice(-1, None) if shift == 1 else slice(0, 1)
        ok[tuple(edge)] = False  # np.roll wraps around
        total += np.where(ok, (other - depth) * shift, 0.0)
        used += ok
    return np.clip(total / np.maximum(used, 1), -3.0, 3.0)


def _resize(rgb: np.ndarray, longest: int) -> np.ndarray:
    """uint8 image, scaled by the factor that brings `longest` pixels up to PANEL[0]
    (nearest neighbour) or down to PANEL[1] (block means)."""
    if longest < PANEL[0]:
        f = -(-PANEL[0] // longest)
        rgb = rgb.repeat(f, axis=0).repeat(f, axis=1)
    elif longest > PANEL[1]:
        f = -(-longest // PANEL[1])
        rows, cols = (-(-side // f) * f for side in rgb.shape[:2])
        padded = np.pad(
            rgb,
            ((0, rows - rgb.shape[0]), (0, cols - rgb.shape[1]), (0, 0)),
            constant_values=BACKGROUND,
        )
        rgb = padded.reshape(rows // f, f, cols // f, f, 3).mean(axis=(1, 3))
    return rgb.round().astype(np.uint8)


def encode_png(image: np.ndarray) -> bytes:
    """8-bit RGB PNG bytes of a uint8 (H, W, 3) image (filter 0 on every row).

    Written here rather than with Pillow or imageio: this one PNG kind is three chunks of
    zlib and struct from the standard library, not worth a dependency on every install."""
    height, width = image.shape[:2]
    pixels = np.ascontiguousarray(image, np.uint8).reshape(height, 3 * width)
    rows = np.concatenate([np.zeros((height, 1), np.uint8), pixels], axis=1)

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6))
        + chunk(b"IEND", b"")
    )
