"""fill_mode="vote": parity along the six axis directions; a voxel is kept where at least
four agree."""

from __future__ import annotations

import numpy as np

from ...grid import pack_columns
from ...placement import COLUMN_AXIS_ORDERS, FINE_BITS, Shape
from ..slabs import build_svo
from ..svo_build import Forest, OctreeArrays
from .base import Fill, FillCall
from .parity import parity

VOTES_NEEDED = 4  # of six ray directions
COLUMN_COUNTS = ("open_columns", "overlap_columns")  # the fill's mesh check (shaders/fill.comp)


class Vote(Fill):
    """Counting crossings from the other end of a column (the mesh mirrored along it) gives a
    different answer exactly where a ray passes through a hole, so the six rays out of a
    voxel near a hole mostly outvote the few that leak. Each direction's grid is whole (the
    votes are summed on the host), so the SVO is built from the whole grid of votes."""

    def dense(self, call: FillCall) -> np.ndarray:
        return vote(call)

    def svo(self, call: FillCall) -> OctreeArrays:
        words = pack_columns(vote(call))
        grid = call.resources.pool.binding("grid", len(words) * 4)
        forest = Forest.whole_grid(call.job.shape)
        return build_svo(call.resources, forest, grid, call.stats, words).octree()


def vote(call: FillCall) -> np.ndarray:
    """bool[i, j, k]: the voxels at least VOTES_NEEDED of the six directions find solid. The
    counts are those of the first direction, except the column counts, summed over the
    three axes (a mirrored run crosses the same columns); the times are summed over all
    six."""
    job, stats = call.job, call.stats
    votes = np.zeros(job.shape, np.uint8)
    first = True
    for order in COLUMN_AXIS_ORDERS:
        for mirrored in (False, True):
            vertices = job.vertices[:, order]  # a copy
            fine = job.fine_vertices()[:, order]
            shape: Shape = (job.shape[order[0]], job.shape[order[1]], job.shape[order[2]])
            if mirrored:
                vertices[:, 2] = np.float32(shape[2]) - vertices[:, 2]
                fine[:, 2] = (shape[2] << FINE_BITS) - fine[:, 2]  # exact
            run = call if first else call.with_fresh_stats()
            solid = parity(
                run, dense=True, vertices=vertices, fine=fine, shape=shape, whole_only=True
            ).to_numpy()
            votes += (solid[:, :, ::-1] if mirrored else solid).transpose(np.argsort(order))
            if not first:
                stats.add_times_of(run.stats)
                if not mirrored:
                    stats.count(**{name: run.stats.counts.get(name, 0) for name in COLUMN_COUNTS})
            first = False
    return votes >= VOTES_NEEDED
