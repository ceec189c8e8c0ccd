"""Writing MagicaVoxel .vox (version 150) so that simple readers open it too (the reader is
voxelizer.io.vox_file).

A grid of at most 256 voxels per side is one plain model: SIZE, XYZI, RGBA and nothing else,
the layout every .vox reader understands (readers without the scene graph, py-vox-io among
them, stop at its chunks). Only a grid that must be cut into several models gets the scene
graph that places them.

Axes: MagicaVoxel's z is up. `up_axis="z"` (the default) keeps the grid's own axes: voxel
(i, j, k) is MagicaVoxel voxel (x, y, z) = (i, j, k). `up_axis="y"`, for a mesh whose up is
+y, turns the grid by +90 degrees about x: MagicaVoxel (x, y, z) = (i, nz - 1 - k, j), so
our +x stays +x, our +y (up) becomes +z and our +z becomes -y. A rotation, not a mirror: a
right-handed model stays right-handed. The model's size is then (nx, nz, ny).

Colours: a result with colours (colors=True) gets them as the palette. At most 255 distinct
colours are written exactly (palette entry c is colour index c + 1, in the order of their
RGBA values); more are quantised to 255 by median cut (voxelizer.attributes.palette). A
result without colours has every voxel at index 1, light grey.
"""

from __future__ import annotations

import os
import struct

import numpy as np

from ..attributes.palette import palette_of
from ..errors import OutputError
from ..placement import Placed
from .output import open_output
from .writers import check_output_shape

VOX_MODEL_SIDE = 256  # MagicaVoxel stores at most 256 voxels per side in one model
UP_AXES = ("z", "y")  # the grid axis that becomes MagicaVoxel's up (+z)


def to_vox_axes(voxels: np.ndarray, up_axis: str = "z") -> np.ndarray:
    """The bool [i, j, k] array as MagicaVoxel's [x, y, z] for this up axis (a view)."""
    check_up_axis(up_axis)
    return voxels if up_axis == "z" else voxels.transpose(0, 2, 1)[:, ::-1, :]


def check_up_axis(up_axis: str) -> str:
    """The up axis if it is one of UP_AXES; OutputError otherwise (before any file is made)."""
    if up_axis not in UP_AXES:
        raise OutputError(f"up axis must be {' or '.join(UP_AXES)}, not {up_axis!r}")
    return up_axis


def vox_tile_size(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """The one model size of a tiled grid: each side cut into the fewest equal tiles of at
    most 256, each an even number of voxels (so that a model's centre is exact)."""
    tiles = [-(-side // VOX_MODEL_SIDE) for side in shape]
    x, y, z = (2 * -(-side // (2 * count)) for side, count in zip(shape, tiles))
    return x, y, z


def write_vox(
    result: Placed, path: str | os.PathLike, overwrite: bool = False, *, up_axis: str = "z"
) -> None:
    """MagicaVoxel .vox: one plain model when every side fits in 256 voxels, else tiles.

    Tiled: every side is cut into equal tiles (vox_tile_size) and each non-empty tile is one
    model, placed by its own transform node (root nTRN -> nGRP -> nTRN -> nSHP -> model) at
    translation tile corner + size / 2, MagicaVoxel's model centre. As all models have one
    size, readers that place a model by its translation alone, taking it as the corner
    (midvoxio), put the tiles right too. An empty grid is one empty model. The colours are
    the result's (see the module), else every voxel has colour index 1 (light grey); the
    world placement (origin, h) is not stored.
    """
    check_output_shape(path, result.shape, result.voxel_size)
    indices, palette = _colour_indices(result)
    voxels = to_vox_axes(indices, check_up_axis(up_axis))
    if max(voxels.shape) <= VOX_MODEL_SIDE:
        body = _model(voxels.shape, voxels)
    else:
        body = _tiles(voxels)
    body += _chunk(b"RGBA", palette.tobytes())
    with open_output(path, overwrite) as fh:
        fh.write(b"VOX " + struct.pack("<i", 150))
        fh.write(b"MAIN" + struct.pack("<ii", 0, len(body)) + body)


def _colour_indices(result: Placed) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 [i, j, k] colour index of every voxel, 0 where empty; the RGBA chunk's 256
    entries)."""
    voxels = result.to_numpy()
    indices = voxels.astype(np.uint8)  # index 1: the default grey
    if "color" not in result.attributes:
        return indices, _palette()
    colors = result.to_numpy("color")[voxels]
    entries, index, _ = palette_of(colors, VOX_MODEL_SIDE - 1)
    indices[voxels] = index + 1
    palette = np.zeros((256, 4), np.uint8)
    palette[: len(entries)] = entries
    return indices, palette


def _tiles(voxels: np.ndarray) -> bytes:
    """The models of the non-empty tiles, then the scene graph that places them:
    transform 0 -> group 1 -> transform 2 + 2m -> shape 3 + 2m -> model m."""
    size = np.array(vox_tile_size(voxels.shape))
    models, centres = [], []
    for corner in np.ndindex(*(-(-np.array(voxels.shape) // size))):
        low = np.array(corner) * size
        tile = voxels[tuple(slice(a, a + s) for a, s in zip(low, size))]
        if tile.any():
            models.append(_model(size, tile))
            centres.append(low + size // 2)
    if not models:  # an empty grid: one empty model
        models.append(_model(size, np.zeros((1, 1, 1), np.uint8)))
        centres.append(size // 2)
    children = [2 + 2 * m for m in range(len(models))]
    scene = [
        _chunk(b"nTRN", _node_transform(0, 1, layer=-1, translation=None)),
        _chunk(b"nGRP", struct.pack(f"<3i{len(children)}i", 1, 0, len(children), *children)),
    ]
    for m, centre in enumerate(centres):
        scene.append(
            _chunk(b"nTRN", _node_transform(2 + 2 * m, 3 + 2 * m, layer=0, translation=centre))
        )
        scene.append(_chunk(b"nSHP", struct.pack("<5i", 3 + 2 * m, 0, 1, m, 0)))
    return b"".join(models) + b"".join(scene)


def _model(size: tuple[int, ...] | np.ndarray, indices: np.ndarray) -> bytes:
    """SIZE and XYZI chunks of one model: the voxels of uint8 colour `indices` (0: empty),
    an array within `size` (a tile at the grid's edge may be smaller)."""
    xyz = np.argwhere(indices)
    xyzi = np.empty((len(xyz), 4), np.uint8)
    xyzi[:, :3] = xyz
    xyzi[:, 3] = indices[tuple(xyz.T)]
    return _chunk(b"SIZE", struct.pack("<3i", *(int(side) for side in size))) + _chunk(
        b"XYZI", struct.pack("<i", len(xyz)) + xyzi.tobytes()
    )


def _palette() -> np.ndarray:
    """RGBA (256, 4): entry c is colour index c + 1; index 1, every voxel's, is light grey."""
    palette = np.full((256, 4), 255, np.uint8)
    palette[:, :3] = np.arange(256, dtype=np.uint8)[:, None]
    palette[0, :3] = 200
    return palette


def _chunk(name: bytes, content: bytes) -> bytes:
    """A RIFF-style .vox chunk without children: id, content size, 0, content."""
    return name + struct.pack("<ii", len(content), 0) + content


def _vox_dict(items: dict[str, str]) -> bytes:
    """A .vox DICT: the count, then each key and value as length and bytes."""
    out = struct.pack("<i", len(items))
    for key, value in items.items():
        for text in (key.encode(), value.encode()):
            out += struct.pack("<i", len(text)) + text
    return out


def _node_transform(node: int, child: int, layer: int, translation: np.ndarray | None) -> bytes:
    """nTRN content: node id, no attributes, child, reserved -1, layer, one frame."""
    frame = {} if translation is None else {"_t": " ".join(str(int(t)) for t in translation)}
    return (
        struct.pack("<i", node)
        + _vox_dict({})
        + struct.pack("<iiii", child, -1, layer, 1)
        + _vox_dict(frame)
    )
