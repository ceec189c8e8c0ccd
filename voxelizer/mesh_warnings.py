"""The warnings a voxelization's counts call for (open surfaces, overlapping parts, thin or
empty results), as data: `mesh_warnings`, which the API warns with and a batch records."""

from __future__ import annotations

from collections.abc import Mapping

from .choices import AUTO_FILL
from .errors import ArgumentError, OpenMeshWarning, OverlapWarning


def mesh_warnings(counts: dict[str, int], fill_mode: str, mode: str = "solid") -> list[Warning]:
    """The warnings a call with these counts gives: where the fill's column counts say that
    parity may not mean "inside": columns whose crossings do not balance (an open surface),
    or else, in parity and vote modes, columns through overlapping, nested or inside-out
    parts. (The grid contains the whole mesh, `bounds` too, so no column is open because the
    grid cuts the surface.) The winding fill is meant for open meshes and counts no columns.
    In mode "solid", where the counts hold the solid's count: a ThinResultWarning where the
    result is empty or thin (voxelizer.thin). As data, for callers that voxelize with
    warn=False (the warnings module's catching is not thread-safe)."""
    if not isinstance(counts, Mapping):
        raise ArgumentError(f"counts must be a mapping (stats.counts), not {type(counts).__name__}")
    from .thin import thin_warning  # (numpy and the model: not for `import voxelizer`)

    found: list[Warning] = []
    thin = thin_warning(counts, mode, fill_mode)
    if thin is not None:
        found.append(thin)
    if fill_mode in ("winding", AUTO_FILL):  # (auto: parity only where no column counted)
        return found
    open_columns = counts.get("open_columns", 0)
    if open_columns:
        advice = {
            "vote": "voting between six ray directions decides the voxels near the gaps "
            "(counted along +z); fill_mode='winding' fills what the surface nearly encloses",
            "union": "its open parts are filled together by the parity rule and added to the "
            "union of its closed parts; fill_mode='winding' fills what the surface nearly "
            "encloses",
        }.get(
            fill_mode,
            "voxels there follow the parity rule but may not be what you want; "
            "fill_mode='winding' fills what the surface nearly encloses (fill_mode='auto' "
            "picks it for such meshes only)",
        )
        found.append(
            OpenMeshWarning(
                f"the mesh is not closed: {open_columns:,} "
                f"{'column crosses' if open_columns == 1 else 'columns cross'} its surface an "
                f"odd number of times or more often inwards than outwards: {advice}"
            )
        )
    # Where the surface is open, windings near the holes say little about overlaps: one
    # warning, the open one. Union fills overlapping parts as meant.
    overlap_columns = 0 if open_columns else counts.get("overlap_columns", 0)
    if overlap_columns and fill_mode in ("parity", "vote"):
        along = " (along x, y and z)" if fill_mode == "vote" else ""
        found.append(
            OverlapWarning(
                f"the mesh has overlapping, nested or inside-out parts: {overlap_columns:,} "
                f"{'column passes' if overlap_columns == 1 else 'columns pass'}{along} where "
                "it winds around a voxel centre other than 0 or 1 times; parity fills such "
                "parts by their exclusive or (an overlap comes out empty); fill_mode='winding' "
                "or fill_mode='union' fills their union (fill_mode='auto' picks winding for "
                "such meshes only)"
            )
        )
    return found
