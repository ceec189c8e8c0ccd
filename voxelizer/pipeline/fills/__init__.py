"""The fill modes, one strategy each (a `Fill`), behind one registry, FILLS: how the
crossings the passes find become a solid. The surface modes wrap a fill (`Surface`).

A new fill mode is a file here with its Fill subclass, and its line in FILLS.
"""

from __future__ import annotations

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
    """The strategy of the job: its fill mode's (mode "solid"), or the surface's."""
    if job.mode == "solid":
        return FILLS[job.fill_mode]
    return surface_for(job)


def surface_for(job: Job) -> Surface:
    """The surface of mode "surface" alone, or of mode "both" around the job's fill."""
    return Surface(FILLS[job.fill_mode] if job.mode == "both" else None)


__all__ = ["FILLS", "Fill", "FillCall", "Surface", "fill_for", "surface_for"]
