"""The kernels of triangle grids, declared once (gpu/kernels.py says how; tests/test_kernels.py
checks each against its GLSL): the cells of the build (shaders/cells.comp), the resolution
of a two-level grid's top cells (shaders/subgrid.comp), and the queries (shaders/
traverse.comp, shaders/box.comp). The scan is gpu/scan.py's, and the indirect dispatches
over units are sized by the passes' pair_dispatch kernel.

Each source is one module: its steps are chosen by push constants, not defines (the
shipped SPIR-V stays small: tests/test_spirv.py), so each step binds every buffer its
kernel declares (build.py and queries.py bind a stand-in where a step reads none). They are
built with trigrid_defines: the common defines, FIXED_BITS and BRANCHLESS 1 (the exact
tests of touch.glsl and surface.glsl take the branchless shape; the naive one gives the
same cells, and tests/test_triangle_grid.py builds with it too, compiled from the GLSL).
"""

from __future__ import annotations

from ..gpu.kernels import COMMON_DEFINES, Kernel
from ..pipeline.kernels import PAIR_DISPATCH
from ..placement import FIXED_BITS

# The variant of the exact tests shipped (BRANCHLESS): the family's only build.
BRANCHLESS_CHOICES = (1,)


def trigrid_defines(branchless: int = 1) -> dict[str, int]:
    """What every triangle-grid kernel is compiled with besides its own defines."""
    return {**COMMON_DEFINES, "FIXED_BITS": FIXED_BITS, "BRANCHLESS": branchless}


# -- the build: count, then emit, over items (one thread each) or units (cells.comp) ----------

CELLS = Kernel(
    "cells",
    {
        "vertices": 0,
        "indices": 1,
        "records": 2,
        "cell_ends": 3,
        "units": 4,
        "totals": 5,
        "unit_total": 6,
        "triangle_ids": 7,
        "reference_cells": 8,
        "top_ids": 9,
        "top_cells": 10,
        "resolutions": 11,
        "leaf_base": 12,
    },
    (
        ("item_count", "uint"),
        ("nx", "int"),
        ("ny", "int"),
        ("nz", "int"),
        ("small_columns", "uint"),
        ("chunk_columns", "uint"),
        ("stage", "uint"),
        ("over_units", "uint"),
        ("emit_cells", "uint"),
        ("level", "uint"),
        ("capacity", "uint"),
    ),
)

RESOLVE_TOP = Kernel(
    "subgrid",
    {"cell_ends": 0, "resolutions": 1, "leaf_counts": 2, "totals": 3},
    (
        ("cell_count", "uint"),
        ("density", "float"),
        ("side_x", "float"),
        ("side_y", "float"),
        ("side_z", "float"),
        ("limit_x", "int"),
        ("limit_y", "int"),
        ("limit_z", "int"),
    ),
)

# -- the queries: rays (traverse.comp: first hit or any hit, over one level or two), boxes -----

TRAVERSE = Kernel(
    "traverse",
    {
        "records": 0,
        "cell_ends": 1,
        "triangle_ids": 2,
        "origins": 3,
        "directions": 4,
        "hits": 5,
        "resolutions": 6,
        "leaf_base": 7,
        "leaf_ends": 8,
        "leaf_ids": 9,
    },
    (
        ("ray_count", "uint"),
        ("nx", "int"),
        ("ny", "int"),
        ("nz", "int"),
        ("t_min", "float"),
        ("t_max", "float"),
        ("query", "uint"),
        ("levels", "uint"),
        ("trip_budget", "uint"),
    ),
)
# A ray's steps and tests on a CPU device: within llvmpipe's 65,535 loop iterations per
# invocation with room for the rest of the walk (traverse.comp).
CPU_TRIP_BUDGET = 60_000
NO_TRIP_BUDGET = 0xFFFFFFFF

BOX = Kernel(
    "box",
    {"records": 0, "cell_ends": 1, "triangle_ids": 2, "flags": 3, "word_counts": 4, "found": 5},
    tuple((f"{what}_{axis}", "int") for what in ("lo", "hi", "first", "count") for axis in "xyz")
    + (("nx", "int"), ("ny", "int"), ("nz", "int"), ("word_count", "uint"), ("stage", "uint")),
)

# Every kernel of the family, with the passes' dispatch sizing (pair_dispatch.comp, which
# reads no define of the variant) built with the family's defines.
TRIGRID_KERNELS = (CELLS, RESOLVE_TOP, TRAVERSE, BOX, PAIR_DISPATCH)
