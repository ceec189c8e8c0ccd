"""Output files of a voxelization, chosen by extension: .svo, .binvox, .vox, .npz, .ply, .obj,
.glb. Every writer takes a DenseGrid or an SVO (anything Placed).

Every writer refuses to replace an existing file unless asked (OutputError with `exists`
set) and reports any OSError as an OutputError (see voxelizer.io.output).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..errors import OutputError
from ..placement import Placed, shape_text
from ..surface import voxel_surface
from .npz_file import write_npz
from .output import open_output
from .svo_file import write_svo

VOX_MODEL_SIDE = 256  # MagicaVoxel stores at most 256 voxels per side in one model


def save(result: Placed, path: str | os.PathLike, *, overwrite: bool = False) -> None:
    """Write a DenseGrid or an SVO in the format its extension names (OUTPUT_FORMATS)."""
    suffix = Path(path).suffix.lower()
    if suffix not in WRITERS:
        raise OutputError(
            f"cannot write {suffix or 'files without an extension'}: "
            f"use {', '.join(OUTPUT_FORMATS)}",
            path=path,
        )
    WRITERS[suffix](result, path, overwrite)


def write_binvox(result: Placed, path: str | os.PathLike, overwrite: bool = False) -> None:
    """binvox 1: voxel (i, j, k) is the binvox voxel (x, y, z) = (i, j, k).

    binvox puts voxel centres at translate + scale * (index + 1/2) / dim, so translate is the
    grid origin and scale is N * h. Data: y fastest, then z, then x, as (value, count) byte
    pairs with runs of at most 255. Cubic grids only: binvox has one scale for the whole grid,
    which readers divide by each side (trimesh 4 cannot even load other shapes).
    """
    nx, ny, nz = result.shape
    if not nx == ny == nz:
        raise OutputError(
            f"{path}: .binvox holds cubic grids only, not {shape_text(result.shape)} "
            "(use .svo, .npz or .vox)",
            path=path,
        )
    n = nx
    flat = result.to_numpy().transpose(0, 2, 1).ravel()
    origin = np.asarray(result.placement.origin, np.float64)
    header = (
        f"#binvox 1\ndim {n} {n} {n}\n"
        f"translate {float(origin[0])!r} {float(origin[1])!r} {float(origin[2])!r}\n"
        f"scale {float(n * result.voxel_size)!r}\ndata\n"
    )
    runs = _binvox_runs(flat)
    with open_output(path, overwrite) as fh:
        fh.write(header.encode("ascii"))
        fh.write(runs.tobytes())


def _binvox_runs(flat: np.ndarray) -> np.ndarray:
    """Run-length pairs (value, count <= 255) of a flat bool array, as uint8 (2 * runs,)."""
    starts = np.concatenate([[0], np.flatnonzero(flat[1:] != flat[:-1]) + 1])
    lengths = np.diff(np.concatenate([starts, [len(flat)]]))
    pieces = (lengths + 254) // 255  # a run longer than 255 becomes several pairs
    values = np.repeat(flat[starts], pieces)
    counts = np.full(int(pieces.sum()), 255, np.int64)
    last = np.cumsum(pieces) - 1
    counts[last] = lengths - 255 * (pieces - 1)
    return np.stack([values.astype(np.uint8), counts.astype(np.uint8)], axis=1).ravel()


def write_vox(result: Placed, path: str | os.PathLike, overwrite: bool = False) -> None:
    """MagicaVoxel .vox (version 150): voxel (i, j, k) is MagicaVoxel voxel (x, y, z) = (i, j, k).

    A model holds at most 256 voxels per side, so the grid is cut into 256^3 tiles; each
    non-empty tile is one SIZE/XYZI model placed by its own transform node (nTRN -> nSHP),
    all under one group (nTRN -> nGRP), at translation tile corner + size/2 (tile sides are
    even, so the centre is exact). An empty grid still has one empty model. Every voxel has
    colour 1; the RGBA palette makes it light grey. World placement (origin, h) is not stored.
    """
    tiles = _vox_tiles(result.to_numpy())
    models = [
        _chunk(b"SIZE", struct.pack("<3i", *size))
        + _chunk(
            b"XYZI",
            struct.pack("<i", len(xyz))
            + np.concatenate([xyz, np.ones((len(xyz), 1), np.uint8)], axis=1).tobytes(),
        )
        for size, xyz, _ in tiles
    ]
    # Scene graph: transform 0 -> group 1 -> transform 2+2m -> shape 3+2m -> model m.
    children = [2 + 2 * m for m in range(len(tiles))]
    scene = [
        _chunk(b"nTRN", _node_transform(0, 1, layer=-1, translation=None)),
        _chunk(b"nGRP", struct.pack(f"<3i{len(children)}i", 1, 0, len(children), *children)),
    ]
    for m, (_, _, centre) in enumerate(tiles):
        scene.append(
            _chunk(b"nTRN", _node_transform(2 + 2 * m, 3 + 2 * m, layer=0, translation=centre))
        )
        scene.append(_chunk(b"nSHP", struct.pack("<5i", 3 + 2 * m, 0, 1, m, 0)))
    palette = np.full((256, 4), 255, np.uint8)
    palette[:, :3] = np.arange(256, dtype=np.uint8)[:, None]  # entry c is colour index c + 1
    palette[0, :3] = 200  # colour index 1, the one every voxel uses
    body = b"".join(models) + b"".join(scene) + _chunk(b"RGBA", palette.tobytes())
    with open_output(path, overwrite) as fh:
        fh.write(b"VOX " + struct.pack("<i", 150))
        fh.write(b"MAIN" + struct.pack("<ii", 0, len(body)) + body)


def _vox_tiles(dense: np.ndarray) -> list[tuple[tuple[int, ...], np.ndarray, np.ndarray]]:
    """(size, uint8 (M, 3) voxels, centre) of every non-empty tile of up to 256^3 voxels; at
    least one tile."""
    tiles = []
    for corner in np.ndindex(*(-(-side // VOX_MODEL_SIDE) for side in dense.shape)):
        low = np.array(corner) * VOX_MODEL_SIDE
        tile = dense[tuple(slice(a, a + VOX_MODEL_SIDE) for a in low)]
        if tile.any() or (corner == (0, 0, 0) and not dense.any()):
            tiles.append(
                (tile.shape, np.argwhere(tile).astype(np.uint8), low + np.array(tile.shape) // 2)
            )
    return tiles


def _chunk(name: bytes, content: bytes) -> bytes:
    """A RIFF-style .vox chunk without children: id, content size, 0, content."""
    return name + struct.pack("<ii", len(content), 0) + content


def _vox_dict(items: dict[str, str]) -> bytes:
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


def write_mesh(result: Placed, path: str | os.PathLike, overwrite: bool = False) -> None:
    """The outer faces of the voxels (as SVO.to_mesh()) as PLY, OBJ or GLB, by extension."""
    surface = voxel_surface(result.to_numpy(), result.placement.origin, result.voxel_size)
    data = surface.export(file_type=Path(path).suffix.lower()[1:])
    assert not isinstance(data, dict)  # PLY, OBJ and GLB export as text or bytes
    with open_output(path, overwrite) as fh:
        fh.write(data.encode() if isinstance(data, str) else data)


WRITERS: dict[str, Callable[[Placed, str | os.PathLike, bool], None]] = {
    ".svo": write_svo,
    ".binvox": write_binvox,
    ".vox": write_vox,
    ".npz": write_npz,
    ".ply": write_mesh,
    ".obj": write_mesh,
    ".glb": write_mesh,
}
OUTPUT_FORMATS = tuple(WRITERS)
