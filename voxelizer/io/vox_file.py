"""Reading MagicaVoxel .vox files back (the writer is voxelizer.io.vox_writer).

Two layouts: a single model (SIZE and XYZI chunks, no scene graph, as the writer makes for a
grid of at most 256 per side), whose voxel (x, y, z) is voxel (i, j, k); and a scene graph
(nTRN -> nGRP -> nTRN -> nSHP -> model, as the writer places the tiles of a larger grid),
where each model's voxels are moved by the translations above it, a model's centre (its
corner + size // 2) landing on the translation. Every stored voxel is solid, whatever its
colour. Rotated models are refused.

.vox keeps no world placement: the grid comes back with origin (0, 0, 0) and voxel size 1,
in MagicaVoxel's axes (a file written with up_axis="y" comes back with MagicaVoxel's z up).
Its shape is the models' extent rounded up to a
multiple of 4 (at least 8); scene positions below 0 are shifted up to 0. A tiled grid can
come back with another shape and the same voxels: smaller where its outer tiles held no
voxels (and were not written), a few voxels larger where its equal tiles overhang it.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..budget import check_host_fits
from ..errors import FormatError, GridError, MemoryBudgetError
from ..grid import DenseGrid
from ..placement import MIN_RESOLUTION, GridPlacement, check_shape, shape_text
from .files import read_regular

MODEL_SIDE = 256  # MagicaVoxel's largest model side
MAX_DEPTH = 64  # scene graph levels followed before the file is taken as cyclic
MAX_TRANSLATION = 1 << 30  # a node's translation: far beyond any grid, and no overflow
MAX_OVERLAP = 8  # placed voxels per voxel of the grid: models may overlap, not pile up


@dataclass
class Scene:
    """What the reader keeps of a .vox file: models and scene nodes."""

    # (size, voxels' (M, 3) positions in the model; None until its XYZI chunk is read)
    models: list[tuple[tuple[int, int, int], np.ndarray | None]] = field(default_factory=list)
    # node id -> ("T", child, translation) | ("G", children) | ("S", model ids)
    nodes: dict[int, tuple] = field(default_factory=dict)


def read_vox(path: str | os.PathLike) -> DenseGrid:
    """The DenseGrid of a .vox file (origin 0, voxel size 1); FormatError names the file and
    what is wrong."""
    path = Path(path)
    data = read_regular(path, FormatError)
    try:
        scene = _chunks(data)
        placed = _place(scene)
        return _grid(placed)
    except FormatError as exc:
        raise FormatError(f"{path}: {exc}") from None
    except MemoryBudgetError as exc:
        raise MemoryBudgetError(f"{path}: {exc}") from None


class _Reader:
    """Bounds-checked little-endian reads from one chunk's content."""

    def __init__(self, data: bytes, what: str):
        self.data, self.at, self.what = data, 0, what

    def ints(self, count: int) -> tuple[int, ...]:
        if count < 0 or self.at + 4 * count > len(self.data):
            raise FormatError(f"truncated {self.what} chunk")
        values = struct.unpack_from(f"<{count}i", self.data, self.at)
        self.at += 4 * count
        return values

    def text(self) -> str:
        (length,) = self.ints(1)
        if length < 0 or self.at + length > len(self.data):
            raise FormatError(f"truncated {self.what} chunk")
        value = self.data[self.at : self.at + length].decode("utf-8", "replace")
        self.at += length
        return value

    def dict(self) -> dict[str, str]:
        (count,) = self.ints(1)
        if count < 0 or count > len(self.data):
            raise FormatError(f"bad dictionary in a {self.what} chunk")
        return {self.text(): self.text() for _ in range(count)}


def _chunks(data: bytes) -> Scene:
    """The models and scene nodes of the file, every size checked against the file's."""
    if len(data) < 20 or data[:4] != b"VOX ":
        raise FormatError("not a MagicaVoxel file (no 'VOX ' at the start)")
    name, content, children = struct.unpack_from("<4sii", data, 8)
    if name != b"MAIN" or content < 0 or children < 0 or 20 + content + children > len(data):
        raise FormatError("no MAIN chunk, or one longer than the file")
    scene, at, end = Scene(), 20 + content, 20 + content + children
    while at < end:
        if at + 12 > end:
            raise FormatError("truncated chunk header")
        name, content, children = struct.unpack_from("<4sii", data, at)
        if content < 0 or children < 0 or at + 12 + content + children > end:
            raise FormatError(f"chunk {name!r} is longer than the file")
        _chunk(scene, name, data[at + 12 : at + 12 + content])
        at += 12 + content + children
    if not scene.models:
        raise FormatError("no model (SIZE and XYZI chunks)")
    if any(xyz is None for _, xyz in scene.models):
        raise FormatError("a SIZE chunk without its XYZI chunk")
    return scene


def _chunk(scene: Scene, name: bytes, content: bytes) -> None:
    """Take one chunk into the scene; chunks other than models and nodes are skipped."""
    reader = _Reader(content, name.decode("ascii", "replace"))
    if name == b"SIZE":
        size = reader.ints(3)
        if not all(1 <= side <= MODEL_SIDE for side in size):
            raise FormatError(f"model size {size}: each side must be 1 to {MODEL_SIDE}")
        scene.models.append(((size[0], size[1], size[2]), None))
    elif name == b"XYZI":
        (count,) = reader.ints(1)
        if not scene.models or scene.models[-1][1] is not None:
            raise FormatError("an XYZI chunk without its SIZE chunk")
        if count < 0 or 4 + 4 * count != len(content):
            raise FormatError(f"XYZI chunk of {len(content)} bytes does not hold {count} voxels")
        xyz = np.frombuffer(content, np.uint8, 4 * count, 4).reshape(-1, 4)[:, :3]
        size = scene.models[-1][0]
        if (xyz >= np.array(size)).any():
            raise FormatError(f"a voxel lies outside its model of size {size}")
        scene.models[-1] = (size, xyz)
    elif name in (b"nTRN", b"nGRP", b"nSHP"):
        (node,) = reader.ints(1)
        reader.dict()  # node attributes (name, hidden): nothing the voxels depend on
        if name == b"nTRN":
            child, _, _, frames = reader.ints(4)
            frame = reader.dict() if frames > 0 else {}
            if frame.get("_r", "4") not in ("4",):  # 4: the identity rotation
                raise FormatError(f"node {node}: rotated models are not supported")
            try:
                translation = [int(v) for v in frame.get("_t", "0 0 0").split()]
            except ValueError:
                translation = []
            if len(translation) != 3 or any(abs(v) > MAX_TRANSLATION for v in translation):
                raise FormatError(
                    f"node {node}: bad translation {frame.get('_t')!r} (three integers "
                    f"of at most {MAX_TRANSLATION} in size)"
                )
            scene.nodes[node] = ("T", child, np.array(translation, np.int64))
        elif name == b"nGRP":
            (count,) = reader.ints(1)
            scene.nodes[node] = ("G", reader.ints(count))
        else:
            (count,) = reader.ints(1)
            models = []
            for _ in range(count):
                models.append(reader.ints(1)[0])
                reader.dict()  # model attributes (animation frame)
            scene.nodes[node] = ("S", models[:1])  # the first frame


def _place(scene: Scene) -> list[tuple[np.ndarray, tuple[int, int, int], np.ndarray]]:
    """(corner, size, voxels) of each model as the scene graph places it (one model and no
    scene graph: at 0)."""
    models = [(size, xyz) for size, xyz in scene.models if xyz is not None]
    if not scene.nodes:
        if len(models) != 1:
            raise FormatError(f"{len(models)} models and no scene graph to place them")
        return [(np.zeros(3, np.int64), *models[0])]
    placed: list[tuple[np.ndarray, tuple[int, int, int], np.ndarray]] = []
    visited: set[int] = set()

    def visit(node: int, offset: np.ndarray, depth: int) -> None:
        # A tree: a node reached twice would place its subtree twice, and a few hundred bytes
        # of groups that each name the next one twice place 2^40 models.
        if depth > MAX_DEPTH or node not in scene.nodes:
            raise FormatError(f"scene graph: node {node} is missing or the graph is cyclic")
        if node in visited:
            raise FormatError(f"scene graph: node {node} is reached twice (not a tree)")
        visited.add(node)
        kind, *rest = scene.nodes[node]
        if kind == "T":
            visit(rest[0], offset + rest[1], depth + 1)
        elif kind == "G":
            for child in rest[0]:
                visit(child, offset, depth + 1)
        else:
            for model in rest[0]:
                if not 0 <= model < len(models):
                    raise FormatError(f"scene graph: shape node {node} names no model {model}")
                size, xyz = models[model]
                placed.append((offset - np.array(size) // 2, size, xyz))

    visit(0, np.zeros(3, np.int64), 0)
    return placed


def _grid(placed: list[tuple[np.ndarray, tuple[int, int, int], np.ndarray]]) -> DenseGrid:
    """The placed models on one grid from (0, 0, 0) (positions below 0 shifted up): its shape
    covers every model, checked before the grid is allocated."""
    if not placed:
        raise FormatError("the scene graph places no model")
    low = np.minimum(np.min([corner for corner, _, _ in placed], axis=0), 0)
    high = np.max([corner + np.array(size) for corner, size, _ in placed], axis=0) - low
    sides = [max(MIN_RESOLUTION, -(-int(n) // 4) * 4) for n in high]
    try:
        shape = check_shape(sides)
    except GridError as exc:
        raise FormatError(f"the models span {'x'.join(map(str, high))} voxels: {exc}") from None
    cells = math.prod(shape)
    placed_voxels = sum(len(xyz) for _, _, xyz in placed)
    if placed_voxels > MAX_OVERLAP * cells:  # one model placed again and again
        raise FormatError(
            f"the scene graph places {placed_voxels:,} voxels on a grid of {cells:,} "
            f"({shape_text(shape)})"
        )
    check_host_fits(cells, f"the {shape_text(shape)} grid")
    voxels = np.zeros(shape, bool)
    for corner, _, xyz in placed:
        voxels[tuple((corner - low + xyz.astype(np.int64)).T)] = True
    return DenseGrid(voxels, GridPlacement(shape, np.zeros(3), 1.0))
