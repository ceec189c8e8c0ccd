"""Reading a voxelization back, chosen by extension: .svo gives an SVO; .npz, .vti, .binvox
and .vox give a DenseGrid."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import FormatError
from .files import as_path

if TYPE_CHECKING:
    from ..grid import DenseGrid
    from ..svo import SVO

# suffix -> (module of voxelizer.io, its reader): a format's module is imported when a file of
# it is read, so that `import voxelizer` (and the command) pays for no format it does not use.
READERS: dict[str, tuple[str, str]] = {
    ".svo": (".svo_file", "read_svo"),
    ".npz": (".npz_file", "read_npz"),
    ".vti": (".vti_file", "read_vti"),
    ".binvox": (".binvox_file", "read_binvox"),
    ".vox": (".vox_file", "read_vox"),
}
INPUT_FORMATS = tuple(READERS)


def load(path: str | os.PathLike, *, mmap: bool = False) -> SVO | DenseGrid:
    """The voxelization in a file this package wrote: .svo -> SVO; .npz, .vti, .binvox,
    .vox -> DenseGrid. All but .vox keep the placement (.vox: origin 0, voxel size 1).
    mmap=True (.svo): the octree stays in the file, mapped read-only, and is read as it is
    used (count(), to_numpy(box=...)): files larger than memory.

    Meshes (.ply, .obj, .glb) are not read back: FormatError says so, as it does for a file
    that cannot be read or breaks its format.
    """
    path = as_path(path, "voxelizer.load")
    suffix = path.suffix.lower()
    if suffix not in READERS:
        raise FormatError(
            f"{path}: cannot load {suffix or 'files without an extension'}: "
            f"voxelizer.load reads {', '.join(INPUT_FORMATS)}"
        )
    if mmap and suffix != ".svo":
        raise FormatError(f"{path}: mmap=True reads .svo files, not {suffix}")
    if mmap:
        from .svo_file import read_svo

        return read_svo(path, mmap=True)
    module, name = READERS[suffix]
    reader: Callable[[str | os.PathLike], SVO | DenseGrid]
    reader = getattr(importlib.import_module(module, __package__), name)
    return reader(path)
