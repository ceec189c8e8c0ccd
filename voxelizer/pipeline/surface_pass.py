"""The surface pass (shaders/surface.comp) after the conservative binning: passes 1 and 3 with
CONSERVATIVE 1, whose setup counts the pairs of each tile key and whose emission writes each
pair at its tile's cursor, so that the pairs come out grouped by tile (no pass 4); then each
workgroup takes SURFACE_GROUP_PAIRS of them, tests their columns and ORs the touched voxels
into the grid (with `face_ids`, lowering each voxel's smallest marking triangle index).
"""

from __future__ import annotations

from ..choices import is_indexed
from ..gpu.buffers import Binding, Buffer, BufferPool
from ..gpu.commands import Sequence, workgroups
from ..gpu.device import Device
from ..gpu.kernels import WG_SIZE, Kernel, subgroup_defines
from ..gpu.pipelines import ComputePipeline
from . import kernels
from .binning import Counted
from .kernels import pass_defines
from .layout import NO_FACE, PAIR_BYTES


class SurfacePipelines:
    """What surface voxelization adds to a variant's passes: the conservative binning (setup
    and emission with CONSERVATIVE 1) and the surface pass of one kind, built once; the pass
    with face ids on first use."""

    def __init__(self, device: Device, variant: str, surface: str):
        self.variant, self.surface = variant, surface  # checked by the caller's Options
        self._device = device
        self._defines = pass_defines(variant, subgroup_defines(device))
        self._thin = surface == "thin"
        self.setup = self._build(
            kernels.SETUP_INDEXED_CONSERVATIVE
            if is_indexed(variant)
            else kernels.SETUP_SOUP_CONSERVATIVE
        )
        self.emit = self._build(kernels.EMIT_CONSERVATIVE)
        self.mark = self._build(
            kernels.SURFACE_THIN if self._thin else kernels.SURFACE_CONSERVATIVE
        )
        self._faces: ComputePipeline | None = None

    def _build(self, kernel: Kernel) -> ComputePipeline:
        return ComputePipeline(self._device, kernel, self._defines)

    @property
    def with_faces(self) -> ComputePipeline:
        """The pass with face ids."""
        if self._faces is None:
            self._faces = self._build(
                kernels.SURFACE_THIN_FACES if self._thin else kernels.SURFACE_CONSERVATIVE_FACES
            )
        return self._faces

    def destroy(self) -> None:
        for pipeline in (self.setup, self.emit, self.mark, *([self._faces] if self._faces else [])):
            pipeline.destroy()
        self._faces = None


class SurfacePass:
    """Records the second half of a surface part (conservative emission, then the surface
    pass) into the shared command sequence; its buffers are the pool's."""

    def __init__(self, pipelines: SurfacePipelines, pool: BufferPool, sequence: Sequence):
        self.pipelines, self.pool, self.sequence = pipelines, pool, sequence

    @property
    def setup(self) -> ComputePipeline:
        """The conservative binning's setup, which record_count takes in place of the
        variant's."""
        return self.pipelines.setup

    def record(
        self,
        counted: Counted,
        pair_count: int,
        grid: Binding,
        *,
        grid_columns: tuple[int, int],
        face_ids: Binding | None,
        clear_ids: Binding | None,
    ) -> None:
        """Record the counted part's emission, which writes the pairs grouped by tile (at the
        per-key cursors the count left), then the surface pass over them, SURFACE_GROUP_PAIRS
        per workgroup; with `clear_ids`, the face ids set to NO_FACE first."""
        sequence, window = self.sequence, counted.window
        if clear_ids is not None:
            sequence.fill(clear_ids.buffer, NO_FACE, clear_ids.size)
        if not pair_count:
            if clear_ids is not None:
                sequence.barrier()
            return
        pairs = self.pool.binding("grouped_pairs", pair_count * PAIR_BYTES)
        sequence.barrier()
        sequence.dispatch(
            self.pipelines.emit,
            {"records": counted.records, "tile_cursors": counted.offsets, "pairs": pairs},
            {"triangle_count": counted.triangles, "window": window, "fixed_error": 0},
            workgroups(counted.triangles, WG_SIZE),
        )
        sequence.barrier()
        sequence.mark("emit")
        bindings: dict[str, Binding | Buffer] = {
            "records": counted.records,
            "pairs": pairs,
            "grid": grid,
        }
        kernel = self.pipelines.mark
        if face_ids is not None:
            bindings["face_ids"] = face_ids
            kernel = self.pipelines.with_faces
        push = {
            "window": window,
            "grid_nx": grid_columns[0],
            "grid_ny": grid_columns[1],
            "pair_count": pair_count,
            "triangle_offset": counted.batch[0],
        }
        sequence.dispatch(
            kernel, bindings, push, workgroups(pair_count, kernels.SURFACE_GROUP_PAIRS)
        )
        sequence.barrier()
        sequence.mark("surface")
