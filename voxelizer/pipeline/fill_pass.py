"""Pass 7, the bit-flip fill, over a part's pairs grouped by tile (a `Binned`), into a slab's
grid (shaders/fill.comp): each pair flips the bits above its crossing in its column, exactly;
the slab's only part also takes the parity and the column counts of the mesh check, and after
several parts one more dispatch does that over every tile (`record_parity`).

fill_mode="winding" runs it twice per slab: marking every crossing with its sign (`marks`),
then, where two crossings share a mark, adding each crossing's sign to its segment (`signed`),
over the same grouped pairs where the slab was one part (`record_signed_again`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..gpu.buffers import INDIRECT, Binding, Buffer, BufferPool
from ..gpu.commands import Sequence, workgroups
from ..gpu.pipelines import ComputePipeline
from .binning import Binned
from .kernels import FILL_PAIRS_PER_ROUND, PassPipelines
from .layout import CrossingMarks, SignedCrossings, Window, column_sums_bytes

Bindings = dict[str, Binding | Buffer]


@dataclass(frozen=True)
class RecordedFill:
    """A part's fill as recorded: its window, the bindings of its grouped pairs (None: no
    pairs), its dispatch arguments and rounds."""

    window: Window
    bindings: Bindings | None
    fill_args: Buffer | None
    rounds: int


class SlabGrid:
    """One slab's grid and what the fill keeps beside it for the slab's parts: the column
    counts and sums (the pool's), the winding marks' tile flags. It remembers whether the
    next submission clears the grid and the counts first (the first one, and one that runs
    a part again), and whether the sums are zeroed for the parts that add to them."""

    def __init__(
        self,
        pool: BufferPool,
        sequence: Sequence,
        window: Window,
        grid: Binding,
        *,
        clear: bool = True,
        marks: CrossingMarks | None = None,
    ):
        self.pool, self.sequence = pool, sequence
        self.window, self.grid, self.marks = window, grid, marks
        self._clear = clear
        self._sums_cleared = False

    def clear_again(self) -> None:
        """The next submission clears the grid again (a part whose fill ran runs again)."""
        self._clear = True

    def cleared(self) -> None:
        """A replayed submission cleared the grid and the counts (record_clear's commands)."""
        self._clear = False

    def record_clear(self) -> None:
        """At the start of a submission: clear the grid and the column counts, if due."""
        if not self._clear:
            return
        self.sequence.fill(self.grid.buffer, 0, self.grid.size)
        self.sequence.fill(self.column_counts(), 0)
        if self.marks is not None:
            flags = self.marks.tile_flags
            self.sequence.fill(flags.buffer, 0, flags.size)
        self.sequence.barrier()
        self._clear = False

    def column_counts(self) -> Buffer:
        return self.pool.get("column_counts", 16)

    def column_sums(self, needed: bool) -> Binding:
        """The per-column sums of the fill (zeroed once per slab), or a stand-in when the
        dispatch never touches them."""
        if not needed:
            return self.pool.binding("unused", 16)
        sums = self.pool.binding("column_sums", column_sums_bytes(self.window.nx, self.window.rows))
        if not self._sums_cleared:
            self.sequence.fill(sums.buffer, 0, sums.size)
            self.sequence.barrier()
            self._sums_cleared = True
        return sums

    def record_results(self, download: bool) -> tuple[Buffer, Buffer | None]:
        """At the end of the slab's last submission: copy back its column counts, and its
        grid with `download`."""
        counts = self.sequence.download(self.column_counts(), 16)
        if not download:
            return counts, None
        bits = self.sequence.download(self.grid.buffer, self.window.grid_bytes)
        self.sequence.mark("download")
        return counts, bits


class FillPass:
    """Records pass 7 of one mesh's parts into the shared command sequence; its buffers are
    the pool's (the rounds' dispatch arguments) and the slab's (SlabGrid)."""

    def __init__(
        self, pipelines: PassPipelines, pool: BufferPool, sequence: Sequence, fixed_error: int
    ):
        self.pipelines, self.pool, self.sequence = pipelines, pool, sequence
        self.fixed_error = fixed_error

    def record(
        self,
        binned: Binned,
        slab: SlabGrid,
        *,
        finish: bool,
        marks: CrossingMarks | None = None,
        signed: SignedCrossings | None = None,
    ) -> RecordedFill:
        """Record the fill of a binned part into the slab's grid: its flips, with `finish`
        (the slab's only part) the parity and the column counts too. `marks` and `signed`:
        the fills of fill_mode="winding", never finishing. A part binned for a capacity
        (`sized_on_device`) takes one round: a tile with more pairs is reported unfinished."""
        pipelines, counted = self.pipelines, binned.counted
        rounds = (
            1 if binned.sized_on_device else workgroups(binned.pair_count, FILL_PAIRS_PER_ROUND)
        )
        bindings: Bindings = {
            "records": counted.records,
            "pairs": binned.pairs,
            "tiles": binned.tiles,
            "fill_dispatch": binned.fill_args,
            "grid": slab.grid,
        }
        fine, indices = counted.uploaded.fine, counted.uploaded.indices
        assert fine is not None and indices is not None  # (uploaded for the fill: exact)
        bindings.update(fine_vertices=fine, indices=indices)
        flips = pipelines.fill_flips
        extra: dict[str, object] = {}
        if signed is not None:  # fill_mode="winding": signs into segments, no column counts
            flips, extra = pipelines.fill_signed, {"box": signed.box}
            bindings.update(
                offsets=signed.offsets, crossings=signed.crossings, tile_flags=signed.tile_flags
            )
        else:  # the marks of fill_mode="winding" leave the column sums alone
            if marks is not None:
                flips = pipelines.fill_marks
                bindings.update(signs=marks.signs, tile_flags=marks.tile_flags)
            bindings["column_counts"] = slab.column_counts()
            bindings["column_sums"] = slab.column_sums(
                needed=marks is None and (not finish or rounds > 1)
            )
        window = counted.window
        self._record_rounds(
            flips, bindings, window, binned.fill_args, rounds=rounds, finish=finish, extra=extra
        )
        return RecordedFill(
            window=window, bindings=bindings, fill_args=binned.fill_args, rounds=rounds
        )

    def record_signed_again(self, kept: RecordedFill, signed: SignedCrossings) -> None:
        """The signed fill of fill_mode="winding" over the pairs the marking fill of the same
        slab grouped (its only part): no binning again."""
        if kept.bindings is None or kept.fill_args is None:
            return
        bindings = {
            name: binding
            for name, binding in kept.bindings.items()
            if name not in ("column_counts", "column_sums", "signs")
        }
        bindings.update(
            offsets=signed.offsets, crossings=signed.crossings, tile_flags=signed.tile_flags
        )
        self._record_rounds(
            self.pipelines.fill_signed, bindings, kept.window, kept.fill_args,
            rounds=kept.rounds, finish=False, extra={"box": signed.box},
        )  # fmt: skip

    def record_parity(self, slab: SlabGrid) -> None:
        """Parity and column counts over every tile of the slab, after several parts flipped
        bits."""
        unused = self.pool.binding("unused", 16)
        window = slab.window
        self.sequence.dispatch(
            self.pipelines.fill_parity,
            {
                "records": unused,
                "pairs": unused,
                "tiles": unused,
                "fill_dispatch": unused,
                "grid": slab.grid,
                "column_counts": slab.column_counts(),
                "column_sums": slab.column_sums(needed=True),
                "fine_vertices": unused,
                "indices": unused,
            },
            {"window": window, "fill_round": 0, "fill_rounds": 1, "finish": 0, "fixed_error": 0},
            window.tiles,
        )
        self.sequence.barrier()
        self.sequence.mark("fill")

    def _record_rounds(
        self,
        flips: ComputePipeline,
        bindings: Bindings,
        window: Window,
        fill_args: Buffer,
        *,
        rounds: int,
        finish: bool,
        extra: Mapping[str, object],
    ) -> None:
        """The fill's rounds over the grouped pairs in `bindings`."""
        sequence = self.sequence
        later_rounds = self._round_dispatch(rounds)
        bindings["round_dispatch"] = later_rounds
        for fill_round in range(rounds):
            sequence.dispatch_indirect(
                flips,
                bindings,
                {"window": window, "fill_round": fill_round, "fill_rounds": rounds,
                 "finish": int(finish), "fixed_error": self.fixed_error, **extra},
                fill_args if fill_round == 0 else later_rounds.buffer,
                offset=0 if fill_round == 0 else fill_round * 16,
            )  # fmt: skip
            sequence.barrier()
        sequence.mark("fill")

    def _round_dispatch(self, rounds: int) -> Binding:
        """The dispatch arguments of fill rounds 1 .. rounds - 1, cleared (no workgroups):
        a round's tiles ask for the next (shaders/fill.comp), so a part whose largest tile
        takes fewer rounds than its total of pairs dispatches nothing for the rest."""
        if rounds == 1:
            return self.pool.binding("unused", 16)  # never written: no next round
        arguments = self.pool.get("fill_round_args", rounds * 16, INDIRECT)
        self.sequence.fill(arguments, 0, rounds * 16)
        self.sequence.barrier()
        return Binding(arguments, rounds * 16)
