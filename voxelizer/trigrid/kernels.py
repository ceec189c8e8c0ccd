"""The kernels of triangle grids, declared once (gpu/kernels.py says how; tests/test_kernels.py
checks each against its GLSL): the cell passes of the build (shaders/cells.comp), the
resolution of a two-level grid's top cells (shaders/subgrid.comp), and the queries
(shaders/traverse.comp, shaders/box.comp). The scan is gpu/scan.py's, and the indirect
dispatches over units are sized by the passes' pair_dispatch kernel.

Every kernel here is built with trigrid_defines: the common defines, FIXED_BITS and
BRANCHLESS (the exact tests of touch.glsl and surface.glsl take the variant's shape: both
give the same cells).
"""

from __future__ import annotations

from ..gpu.kernels import COMMON_DEFINES, Kernel
from ..pipeline.kernels import PAIR_DISPATCH
from ..placement import FIXED_BITS

# Which variants of the exact tests the kernels are built with (both give the same cells).
BRANCHLESS_CHOICES = (1, 0)


def trigrid_defines(branchless: int) -> dict[str, int]:
    """What every triangle-grid kernel is compiled with besides its own defines."""
    return {**COMMON_DEFINES, "FIXED_BITS": FIXED_BITS, "BRANCHLESS": branchless}


# -- the build: count, then emit, over items (one thread each) or units (cells.comp) ----------

_CELLS_PUSH = (
    ("item_count", "uint"),
    ("nx", "int"),
    ("ny", "int"),
    ("nz", "int"),
    ("small_columns", "uint"),
    ("chunk_columns", "uint"),
)
_UNITS = {"units": 4, "unit_total": 6}
_LEVEL_TWO = {"top_ids": 9, "top_cells": 10, "resolutions": 11, "leaf_base": 12}


def _cells(level: int, emit: bool, units: bool, emit_cells: bool = False) -> Kernel:
    bindings: dict[str, int] = {"records": 2, "cell_ends": 3}
    if level == 1 and not emit and not units:
        bindings.update(vertices=0, indices=1)
    if units:
        bindings.update(_UNITS)
    elif not emit:
        bindings["units"] = 4
    if emit:
        bindings["triangle_ids"] = 7
        if emit_cells:
            bindings["reference_cells"] = 8
    else:
        bindings["totals"] = 5
    if level == 2:
        bindings.update(_LEVEL_TWO)
    defines = {
        "LEVEL": level,
        "CELL_STAGE": int(emit),
        "OVER_UNITS": int(units),
        "EMIT_CELLS": int(emit_cells),
    }
    return Kernel("cells", bindings, _CELLS_PUSH, defines)


# The uniform grid (and a two-level grid's top level): its triangles, then their units.
COUNT_TRIANGLES = _cells(level=1, emit=False, units=False)
COUNT_TRIANGLE_UNITS = _cells(level=1, emit=False, units=True)
EMIT_TRIANGLES = _cells(level=1, emit=True, units=False)
EMIT_TRIANGLE_UNITS = _cells(level=1, emit=True, units=True)
# A top level, whose references also keep their cells (the second level's items).
EMIT_TOP = _cells(level=1, emit=True, units=False, emit_cells=True)
EMIT_TOP_UNITS = _cells(level=1, emit=True, units=True, emit_cells=True)
# The leaves: the top level's references, then their units.
COUNT_LEAVES = _cells(level=2, emit=False, units=False)
COUNT_LEAF_UNITS = _cells(level=2, emit=False, units=True)
EMIT_LEAVES = _cells(level=2, emit=True, units=False)
EMIT_LEAF_UNITS = _cells(level=2, emit=True, units=True)

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

BUILD_KERNELS = (
    COUNT_TRIANGLES,
    COUNT_TRIANGLE_UNITS,
    EMIT_TRIANGLES,
    EMIT_TRIANGLE_UNITS,
    EMIT_TOP,
    EMIT_TOP_UNITS,
    COUNT_LEAVES,
    COUNT_LEAF_UNITS,
    EMIT_LEAVES,
    EMIT_LEAF_UNITS,
    RESOLVE_TOP,
)

# -- the queries: rays (traverse.comp: first hit or any hit, over one level or two), boxes -----

_TRAVERSE_BINDINGS = {
    "records": 0,
    "cell_ends": 1,
    "triangle_ids": 2,
    "origins": 3,
    "directions": 4,
    "hits": 5,
}
_TRAVERSE_LEAVES = {"resolutions": 6, "leaf_base": 7, "leaf_ends": 8, "leaf_ids": 9}
_TRAVERSE_PUSH = (
    ("ray_count", "uint"),
    ("nx", "int"),
    ("ny", "int"),
    ("nz", "int"),
    ("t_min", "float"),
    ("t_max", "float"),
)


def _traverse(any_hit: bool, levels: int) -> Kernel:
    bindings = {**_TRAVERSE_BINDINGS, **(_TRAVERSE_LEAVES if levels == 2 else {})}
    defines = {"QUERY": int(any_hit), "LEVELS": levels}
    # cpu_shaped: llvmpipe's loop budget bounds a ray's walk (traverse.comp, TRIP_BUDGET)
    return Kernel("traverse", bindings, _TRAVERSE_PUSH, defines, cpu_shaped=True)


FIRST_HIT = _traverse(any_hit=False, levels=1)
ANY_HIT = _traverse(any_hit=True, levels=1)
FIRST_HIT_LEAVES = _traverse(any_hit=False, levels=2)
ANY_HIT_LEAVES = _traverse(any_hit=True, levels=2)

_BOX_PUSH = tuple(
    (f"{what}_{axis}", "int") for what in ("lo", "hi", "first", "count") for axis in "xyz"
) + (("nx", "int"), ("ny", "int"), ("nz", "int"), ("word_count", "uint"))
BOX_TEST = Kernel(
    "box",
    {"records": 0, "cell_ends": 1, "triangle_ids": 2, "flags": 3},
    _BOX_PUSH,
    {"BOX_STAGE": 0},
)
BOX_COUNT = Kernel("box", {"flags": 3, "word_counts": 4}, _BOX_PUSH, {"BOX_STAGE": 1})
BOX_LIST = Kernel("box", {"flags": 3, "word_counts": 4, "found": 5}, _BOX_PUSH, {"BOX_STAGE": 2})

QUERY_KERNELS = (
    FIRST_HIT,
    ANY_HIT,
    FIRST_HIT_LEAVES,
    ANY_HIT_LEAVES,
    BOX_TEST,
    BOX_COUNT,
    BOX_LIST,
)

# Every kernel of the family, with the passes' dispatch sizing (pair_dispatch.comp, which
# reads no define of the variant) built with the family's defines.
TRIGRID_KERNELS = (*BUILD_KERNELS, *QUERY_KERNELS, PAIR_DISPATCH)
