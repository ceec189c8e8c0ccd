"""The one-submission part recorded once and replayed for the next mesh.

A slab that is one part goes to the GPU in one submission (passes.py, `_count_and_fill`).
What that submission records depends on the mesh only through its triangle count (the
buffers' sizes, the setup's workgroups, the scan's levels, push constants), its vertex count
(the indexed variants' vertex copy) and its fixed_error (a push constant of the setup, the
emission and the fill). So the mesh is staged at capacities instead (Geometry.stage_padded):
its triangles, then padding triangles that make no pair and no crossing, up to a triangle
capacity (a power of two), and the submission is recorded for the capacities, reusable.
The next mesh that fits the same capacities, with the same fixed_error, grid and outputs,
is staged the same way and the recording is submitted again as it is (Sequence.replay): no
command is recorded, and the host's work per mesh is the staging copy, one submit and one
wait. The results are the same bits: the padding adds nothing, every size the GPU needs it
computes from the count (shaders/pair_dispatch.comp), and the read-backs are read as far as
the GPU's counts say.

A replay is valid only while everything it names is as recorded: the key (kernels, sort,
window, grid buffer, outputs, fixed_error, capacities) and every buffer of the pool (its
generation). Each recording is kept on a command buffer of its own (Sequence.keep), up to
KEPT_RECORDINGS of them, the least recently used released first: meshes of several sizes
taking turns (a capacity each), or a dense and an SVO result, each replay their own. A mesh
takes the smallest kept capacities it fits. Anything else records afresh, and that
recording is kept too. Where the pairs overflow the
recorded pair capacity, the part goes on as the general path does, as after a recording.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..gpu.buffers import Buffer, BufferPool
from ..gpu.commands import Recording, Sequence
from ..gpu.device import Device
from .binning import Counted
from .geometry import PaddingRows
from .svo_build import RecordedSVO

# A mesh replays a recording only while its capacity is at most this many times the mesh's
# triangle count: the padding costs setup, scan and emission threads that do nothing, cheap
# on a GPU, CPU time on a CPU device (lavapipe). There a capacity is the count rounded up
# to 4 significant bits (at most 1/8 of padding: meshes of the same size replay, others
# record); on a GPU, to a power of two.
PADDING_LIMIT_GPU = 32.0
PADDING_LIMIT_CPU = 1.125
CPU_CAPACITY_BITS = 4
# Recordings kept at once (their command buffers; the buffers they name are the pool's).
KEPT_RECORDINGS = 8
MIN_TRIANGLE_CAPACITY = 256


@dataclass(frozen=True)
class PartReads:
    """The staging buffers the one submission copies its results into: the pair total, the
    wrap flag, the fill's tile arguments, the column counts, the grid's bits (a dense
    result) and the SVO conversion recorded after the fill (an SVO)."""

    total: Buffer
    wrap: Buffer
    tiles: Buffer
    counts: Buffer
    grid: Buffer | None
    svo: RecordedSVO | None


@dataclass
class PartRecording:
    """A reusable one-submission part kept off the sequence (Sequence.keep): what it was
    recorded for (the key's `fixed` part, and its capacities: (triangles, vertices)), the
    pool's generation that says every buffer it names is alive, and what it left for the
    host."""

    fixed: tuple[object, ...]
    capacities: tuple[int, int]
    generation: int
    recording: Recording
    counted: Counted
    capacity: int  # the pairs the recording made room for
    reads: PartReads
    # The reads as a replay hands them on: its SVO conversion takes no host time to record.
    replayed_reads: PartReads = field(init=False)
    used: int = 0  # when it was last recorded or replayed (PartReplays' count of uses)

    def __post_init__(self) -> None:
        svo = self.reads.svo
        recorded = None if svo is None else replace(svo, record_ms=0.0)
        self.replayed_reads = replace(self.reads, svo=recorded)


Kept = dict[tuple[int, int], PartRecording]  # the recordings of one `fixed`, by capacities


class PartReplays:
    """A Resources' reusable recordings of the one-submission part (up to KEPT_RECORDINGS,
    each on a command buffer of its own, the least recently used released first: meshes of
    several sizes, grids or outputs taking turns each replay theirs), by the key's `fixed`
    part (hashable: what it names by identity or by value) and then by capacities; the
    capacities a mesh is staged at, and the padding rows of the staging buffers."""

    def __init__(self, device: Device):
        self.padding_limit = PADDING_LIMIT_CPU if device.is_cpu else PADDING_LIMIT_GPU
        self._bits = CPU_CAPACITY_BITS if device.is_cpu else 1
        self.padding = PaddingRows()
        self._kept: dict[tuple[object, ...], Kept] = {}
        self._uses = 0

    def kept(self, fixed: tuple[object, ...]) -> Kept:
        """The recordings kept for `fixed` (the key less its capacities), by capacities."""
        return self._kept.get(fixed) or {}

    def capacities(self, kept: Kept, triangles: int, vertices: int) -> tuple[int, int]:
        """(triangles, vertices) to stage a mesh at: the smallest of the `kept` recordings'
        that the mesh fits, else the counts rounded up (a power of two on a GPU; the
        vertices' one more than the mesh's: the padding's own)."""
        for triangle_capacity, vertex_capacity in sorted(kept):
            if self._fits(triangles, triangle_capacity) and self._fits(
                vertices + 1, vertex_capacity
            ):
                return triangle_capacity, vertex_capacity
        return (
            _rounded(max(triangles, MIN_TRIANGLE_CAPACITY), self._bits),
            _rounded(vertices + 1, self._bits),
        )

    def find(
        self, kept: Kept, capacities: tuple[int, int], pool: BufferPool
    ) -> PartRecording | None:
        """The recording of `kept` to replay at `capacities`, if it is still valid."""
        recording = kept.get(capacities)
        if recording is None or recording.generation != pool.generation:
            return None
        self._uses += 1
        recording.used = self._uses
        return recording

    def keep(self, recording: PartRecording, sequence: Sequence) -> None:
        """Keep a recording: it replaces one of the same key, and the least recently used
        goes past KEPT_RECORDINGS (released to `sequence`), as do those whose buffers are
        gone (another pool generation)."""
        self._uses += 1
        recording.used = self._uses
        everything = [old for kept in self._kept.values() for old in kept.values()]
        everything.sort(key=lambda old: old.used, reverse=True)
        self._kept = {recording.fixed: {recording.capacities: recording}}
        for old in everything:
            kept = self._kept.setdefault(old.fixed, {})
            if (
                old.generation != recording.generation
                or old.capacities in kept
                or sum(map(len, self._kept.values())) >= KEPT_RECORDINGS
            ):
                sequence.release(old.recording)
            else:
                kept[old.capacities] = old
        self._kept = {fixed: kept for fixed, kept in self._kept.items() if kept}

    def _fits(self, count: int, capacity: int) -> bool:
        return count <= capacity <= self.padding_limit * max(count, MIN_TRIANGLE_CAPACITY)


def _rounded(count: int, bits: int) -> int:
    """`count` rounded up to `bits` significant bits (1: a power of two)."""
    step = 1 << max(count.bit_length() - bits, 0)
    return -(-count // step) * step
