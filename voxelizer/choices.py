"""The words a user chooses from: variants, sorts, fill modes, modes and surface kinds, with
their defaults. Everything that checks, lists or decodes a choice takes it from here (Options,
the command line, the pipeline, the shader build); nothing here imports the package.

The default variant, "auto", becomes a real variant in one place: `variant_candidates`.
"""

from __future__ import annotations

# The shader variants: the same GLSL sources compiled with two defines, BRANCHLESS
# (arithmetic selection instead of data-dependent branches) and INDEXED (a vertex buffer and
# an index buffer instead of a triangle soup).
VARIANTS = {
    "naive": {"BRANCHLESS": 0, "INDEXED": 0},
    "branchless": {"BRANCHLESS": 1, "INDEXED": 0},
    "indexed": {"BRANCHLESS": 0, "INDEXED": 1},
    "combined": {"BRANCHLESS": 1, "INDEXED": 1},
}
# The default, "auto", runs the first of variant_candidates whose plan fits the budget.
AUTO_VARIANT = "auto"
INDEXED_CHOICE = "combined"
SOUP_CHOICE = "branchless"
VARIANT_CHOICES = (AUTO_VARIANT, *VARIANTS)
DEFAULT_VARIANT = AUTO_VARIANT

# Pass 4 groups the pairs by tile: "bitonic" is the sort of the original design, "counting"
# a histogram over the tile keys with a scatter (no sorting network, far fewer dispatches).
SORTS = ("counting", "bitonic")
DEFAULT_SORT = "counting"

# How the crossings of a column become a solid (pipeline/fills/ has one strategy for each).
FILL_MODES = ("parity", "vote", "union", "winding")
DEFAULT_FILL_MODE = "parity"
# "auto": parity where the parity fill finds every column closed and no part overlapping,
# else winding (voxelizer.api resolves it per mesh, from the parity run's column counts).
AUTO_FILL = "auto"
FILL_CHOICES = (*FILL_MODES, AUTO_FILL)

MODES = ("solid", "surface", "both")  # "both": the solid united with the conservative surface
DEFAULT_MODE = "solid"
SURFACES = ("conservative", "thin")  # the surface kinds of mode "surface" (shaders/surface.comp)
DEFAULT_SURFACE = "conservative"


def is_indexed(variant: str) -> bool:
    """Whether `variant` (one of VARIANTS) uploads vertices and indices, not a soup."""
    return bool(VARIANTS[variant]["INDEXED"])


# What "auto" tries on a GPU: the indexed variant first (it uploads the vertices and indices
# as they are, with no host gather of a triangle soup for a new mesh to pay, and its passes
# take the same time there: docs/benchmarks.md), then the soup variant where the budget
# cannot hold the whole vertex buffer. On a CPU device (lavapipe) the soup variant alone:
# there the indexed setup's gathers cost more than the host's gather saves.
AUTO_ON_GPU = (INDEXED_CHOICE, SOUP_CHOICE)
AUTO_ON_CPU = (SOUP_CHOICE,)


def variant_candidates(variant: str, cpu_device: bool) -> tuple[str, ...]:
    """The variants a call given `variant` tries, in order, until one's plan fits the budget:
    the variant itself, or what "auto" tries on the device."""
    if variant != AUTO_VARIANT:
        return (variant,)
    return AUTO_ON_CPU if cpu_device else AUTO_ON_GPU


def uploads_soup(variant: str) -> bool:
    """Whether `variant` uploads a triangle soup (not known for "auto" before its device
    resolves it: Voxelizer.likely_variant)."""
    return variant in VARIANTS and not is_indexed(variant)
