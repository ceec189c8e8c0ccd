"""Reading a voxelization back, chosen by extension: .svo gives an SVO; .npz, .vti, .binvox
and .vox give a DenseGrid."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ..errors import FormatError
from ..grid import DenseGrid
from ..svo import SVO
from .binvox_file import read_binvox
from .npz_file import read_npz
from .svo_file import read_svo
from .vox_file import read_vox
from .vti_file import read_vti

READERS: dict[str, Callable[[str | os.PathLike], SVO | DenseGrid]] = {
    ".svo": read_svo,
    ".npz": read_npz,
    ".vti": read_vti,
    ".binvox": read_binvox,
    ".vox": read_vox,
}
INPUT_FORMATS = tuple(READERS)


def load(path: str | os.PathLike) -> SVO | DenseGrid:
    """The voxelization in a file this package wrote: .svo -> SVO; .npz, .vti, .binvox,
    .vox -> DenseGrid. All but .vox keep the placement (.vox: origin 0, voxel size 1).

    Meshes (.ply, .obj, .glb) are not read back: FormatError says so, as it does for a file
    that cannot be read or breaks its format.
    """
    suffix = Path(path).suffix.lower()
    if suffix not in READERS:
        raise FormatError(
            f"{path}: cannot load {suffix or 'files without an extension'}: "
            f"voxelizer.load reads {', '.join(INPUT_FORMATS)}"
        )
    return READERS[suffix](path)
