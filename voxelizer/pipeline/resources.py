"""What a Pipeline keeps on its device from job to job: the buffer pool, the command sequence,
and the kernels built so far, each family on its first use.
"""

from __future__ import annotations

import threading

from ..gpu.buffers import BufferPool
from ..gpu.commands import Sequence
from ..gpu.device import Device
from ..gpu.first_dispatches import build_in_background
from ..gpu.scan import Scan
from ..interrupts import interrupts_deferred
from .face_ids import FaceGather
from .kernels import PassPipelines
from .replay import PartReplays
from .sparse_pass import SparsePipelines
from .surface_pass import SurfacePipelines
from .svo_build import SVOPipelines
from .winding import WindingPipelines


class Resources:
    """The device's buffers (`pool`), its command sequence (`sequence`) and its kernels: the
    passes per variant, the surface passes per variant and kind, the scan, the SVO build,
    the face gather, the winding kernels and the sparse grid's (per variant and lattice),
    built on first use and reused. It owns them
    all, and the threads that build kernels ahead (`prepare`), and frees them in close()."""

    def __init__(self, device: Device):
        self.device = device
        self.pool = BufferPool(device)
        self.sequence = Sequence(device, self.pool)
        # The one-submission part recorded last on the sequence, replayed for the next mesh.
        self.replays = PartReplays(device)
        self._passes: dict[tuple[str, int], PassPipelines] = {}
        self._sparse: dict[tuple[str, int], SparsePipelines] = {}
        self._surfaces: dict[tuple[str, str], SurfacePipelines] = {}
        self._scan: Scan | None = None
        self._svo: SVOPipelines | None = None
        self._face_gather: FaceGather | None = None
        self._winding: WindingPipelines | None = None
        self._builders: list[threading.Thread] = []  # prepare's threads, joined by close
        self._prepared: set[tuple[str, str, bool]] = set()  # prepare's, found all built
        self._building: dict[tuple[str, str, bool], threading.Thread] = {}  # prepare's, by kind

    def passes(self, variant: str, shift: int = 0) -> PassPipelines:
        """The pass kernels of `variant` on the lattice of placement.lattice_shift `shift`."""
        if (variant, shift) not in self._passes:
            self._passes[variant, shift] = PassPipelines(self.device, variant, shift)
        return self._passes[variant, shift]

    def sparse(self, variant: str, shift: int) -> SparsePipelines:
        if (variant, shift) not in self._sparse:
            self._sparse[variant, shift] = SparsePipelines(self.device, variant, shift)
        return self._sparse[variant, shift]

    def surface(self, variant: str, kind: str) -> SurfacePipelines:
        if (variant, kind) not in self._surfaces:
            self._surfaces[variant, kind] = SurfacePipelines(self.device, variant, kind)
        return self._surfaces[variant, kind]

    def scan(self) -> Scan:
        if self._scan is None:
            self._scan = Scan(self.device)
        return self._scan

    def svo(self) -> SVOPipelines:
        if self._svo is None:
            self._svo = SVOPipelines(self.device)
        return self._svo

    def face_gather(self) -> FaceGather:
        if self._face_gather is None:
            self._face_gather = FaceGather(self.device)
        return self._face_gather

    def winding(self) -> WindingPipelines:
        if self._winding is None:
            self._winding = WindingPipelines(self.device)
        return self._winding

    def prepare(self, variant: str, sort: str, svo: bool) -> threading.Thread | None:
        """Start building the kernels a parity job of this kind dispatches, in the order it
        dispatches them, on a background thread (on a CPU device each also gets its first
        dispatch there, which compiles it: first_dispatches.FirstDispatches): the caller reads and
        checks the mesh meanwhile. Those built already cost nothing; a job needing others
        builds them. A kind found all built is not looked at again, nor one a thread still
        builds. The thread building them (None where they are built)."""
        kind = (variant, sort, svo)
        if kind in self._prepared:
            return None
        building = self._building.get(kind)
        if building is not None and building.is_alive():
            return building
        passes = self.passes(variant)
        scan = self.scan()
        wanted = [passes.setup, scan.scan_blocks, scan.add_offsets]
        if sort == "counting":  # one submission: the pair count sizes the later dispatches
            wanted += [passes.pair_dispatch, passes.emit, passes.count_pairs]
            wanted += [passes.scatter_pairs, passes.mark_counts, passes.compact_counts]
        else:
            wanted += [passes.emit, passes.sort_blocks, passes.sort_step, passes.sort_merge]
            wanted += [passes.mark, passes.compact]
        wanted.append(passes.fill_flips)
        if svo:
            tree = self.svo()
            wanted += [tree.classify_grid, tree.classify_nodes]
            wanted += [tree.write_nodes, tree.write_bricks, tree.download]
        self._builders = [thread for thread in self._builders if thread.is_alive()]
        # A Ctrl-C between the thread's start and its recording here would leave it unjoined
        # by close, building and submitting on a device being destroyed.
        with interrupts_deferred():
            thread = build_in_background(wanted)
            if thread is not None:
                self._builders.append(thread)
                self._building[kind] = thread
            else:
                self._prepared.add(kind)
        return thread

    def close(self) -> None:
        """Wait for the background builds and the device, then free every kernel and buffer
        (the device stays open)."""
        for thread in self._builders:
            thread.join()
        self._builders.clear()
        self._building.clear()
        self._prepared.clear()
        self.device.wait_idle()
        for kernels in self._passes.values():
            kernels.destroy()
        self._passes.clear()
        for sparse in self._sparse.values():
            sparse.destroy()
        self._sparse.clear()
        for surface in self._surfaces.values():
            surface.destroy()
        self._surfaces.clear()
        for primitive in (self._scan, self._svo, self._face_gather, self._winding):
            if primitive is not None:
                primitive.destroy()
        self._scan = None
        self._svo = None
        self._face_gather = None
        self._winding = None
        self.sequence.destroy()
        self.pool.destroy()
