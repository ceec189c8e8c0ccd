"""The sparse grid of the large voxelizations, as the GPU lays it out (shaders/sparse.glsl): cubes
of 32^3 voxels, of which only those a crossing of the surface may reach (the surface cubes)
hold words, one slab of cube rows at a time. `CubeSpace` mirrors the GLSL struct that the
sparse kernels take as a push constant, with the byte sizes of what a slab holds.

A slab's surface cubes have slots: stack by stack (a stack is the cubes of one column of
cubes, x fastest, then the slab's cube rows), upwards within a stack. Their words sit in
batches of A x A cubes, each laid out as the grid of a slab of 32 rows, 32 A columns wide and
32 A voxels deep, so that the SVO build reads a batch as a forest of A x A cubes.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..placement import Shape
from .layout import Window

CUBE_SHIFT = 5
CUBE_SIDE = 1 << CUBE_SHIFT
CUBE_COLUMNS = CUBE_SIDE * CUBE_SIDE
CUBE_BYTES = CUBE_COLUMNS * CUBE_SIDE // 8  # one uint per column
CUBE_VOXELS = CUBE_SIDE**3
# A batch is at most 256 x 256 cubes: the SVO build packs leaf positions in 10 bits a side
# (shaders/svo.glsl, pack_leaf), and 32 * 256 / 8 = 1024 leaves.
MAX_BATCH_SHIFT = 8
MIN_BATCH_SHIFT = 1  # a forest of several cubes (svo_build.Forest.whole is one cube)
GAP_BYTES = 4 + 8  # per slot: the gap count above it and its place (stack, cz)


def cubes_along(side: int) -> int:
    return -(-side // CUBE_SIDE)


@dataclass(frozen=True)
class CubeSpace:
    """One slab of a grid of `shape` cut into cubes: cube rows [cube_row, cube_row +
    cube_rows), the batches 2^batch_shift cubes a side. The fields are the GLSL struct's
    (shaders/sparse.glsl), in its order."""

    nx: int
    ny: int
    nz: int
    cube_row: int
    cube_rows: int
    cubes_x: int
    cubes_z: int
    stack_words: int
    batch_shift: int

    @staticmethod
    def of(
        shape: Shape, cube_row: int, cube_rows: int, batch_shift: int = MIN_BATCH_SHIFT
    ) -> CubeSpace:
        nx, ny, nz = shape
        cubes_z = cubes_along(nz)
        return CubeSpace(
            nx=nx, ny=ny, nz=nz, cube_row=cube_row, cube_rows=cube_rows,
            cubes_x=cubes_along(nx), cubes_z=cubes_z, stack_words=-(-cubes_z // 32),
            batch_shift=batch_shift,
        )  # fmt: skip

    def with_batches(self, batch_shift: int) -> CubeSpace:
        return CubeSpace.of((self.nx, self.ny, self.nz), self.cube_row, self.cube_rows, batch_shift)

    @property
    def stacks(self) -> int:
        return self.cubes_x * self.cube_rows

    @property
    def words(self) -> int:
        """Words of the slab's cube bits (and of their scan)."""
        return self.stacks * self.stack_words

    @property
    def window(self) -> Window:
        """The slab's rows of the grid, as the passes take them."""
        row_lo = self.cube_row * CUBE_SIDE
        row_hi = min((self.cube_row + self.cube_rows) * CUBE_SIDE, self.ny)
        return Window(nx=self.nx, nz=self.nz, row_lo=row_lo, row_hi=row_hi, buffer_row=row_lo)

    @property
    def batch_cubes(self) -> int:
        return 1 << (2 * self.batch_shift)

    def batches(self, slots: int) -> int:
        return max(1, -(-slots // self.batch_cubes))

    def cube_bytes(self, slots: int) -> int:
        """Bytes of the words of `slots` surface cubes, in whole batches."""
        return self.batches(slots) * self.batch_cubes * CUBE_BYTES


def batch_shift_for(slots: int) -> int:
    """The smallest batch side (a power of two, MIN_BATCH_SHIFT to MAX_BATCH_SHIFT) whose
    A x A cubes hold `slots` in one batch, where one can."""
    shift = MIN_BATCH_SHIFT
    while shift < MAX_BATCH_SHIFT and (1 << (2 * shift)) < slots:
        shift += 1
    return shift


def cube_address(slot: int, batch_shift: int, x: int, y: int) -> int:
    """Index of the word of column (x, y) (inside its cube) of the cube at `slot`
    (shaders/sparse.glsl, cube_address)."""
    per_batch = 2 * batch_shift
    batch, c = slot >> per_batch, slot & ((1 << per_batch) - 1)
    u, v = c & ((1 << batch_shift) - 1), c >> batch_shift
    column = (y << (CUBE_SHIFT + batch_shift)) + (u << CUBE_SHIFT) + x
    return (batch << (per_batch + 2 * CUBE_SHIFT)) + (column << batch_shift) + v
