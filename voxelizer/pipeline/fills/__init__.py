"""The fill modes, one strategy each (a `Fill`), behind one registry, FILLS: how the
crossings the passes find become a solid. The surface modes wrap a fill (`Surface`).

A new fill mode is a file here with its Fill subclass, and its line in FILLS.
"""

from __future__ import annotations

from ...errors import GridError
from ...placement import FINE_LATTICE_MAX, shape_text
from ..job import Job
from .base import Fill, FillCall
from .parity import Parity
from .surface import Surface
from .union import Union
from .vote import Vote
from .winding import Winding

FILLS: dict[str, Fill] = {
    "parity": Parity(),
    "vote": Vote(),
    "union": Union(),
    "winding": Winding(),
}


def fill_for(job: Job) -> Fill:
    """The strategy of the job: its fill mode's (mode "solid"), or the surface's. A grid over
    FINE_LATTICE_MAX a side takes the sparse path, which is the parity fill's alone."""
    if job.sparse_grid and (job.mode != "solid" or job.fill_mode != "parity"):
        raise GridError(
            f"a {shape_text(job.shape)} grid (over {FINE_LATTICE_MAX} a side) is voxelized "
            f"with mode 'solid' and fill_mode 'parity' only, not mode {job.mode!r} with "
            f"fill_mode {job.fill_mode!r}"
        )
    if job.mode == "solid":
        return FILLS[job.fill_mode]
    return surface_for(job)


def surface_for(job: Job) -> Surface:
    """The surface of mode "surface" alone, or of mode "both" around the job's fill."""
    return Surface(FILLS[job.fill_mode] if job.mode == "both" else None)


__all__ = ["FILLS", "Fill", "FillCall", "Surface", "fill_for", "surface_for"]
