"""Colours as a palette of at most N entries (MagicaVoxel's 255): exact when there are no
more colours than entries, else quantised by median cut.

Median cut, over the distinct RGBA colours weighted by how many voxels have each: start
with one box of all of them; while there are fewer boxes than entries and a box holds two
colours or more, split the box whose colours spread widest along one channel (the first
such box on a tie) at the weighted median along that channel, so that both halves hold a
colour; every voxel then takes its box's mean colour (weighted by voxels, rounded). The
result is deterministic and depends only on the colours and their counts.
"""

from __future__ import annotations

import numpy as np


def palette_of(colors: np.ndarray, entries: int = 255) -> tuple[np.ndarray, np.ndarray, bool]:
    """(palette (K, 4) uint8, K <= entries; index (N,) into it of each of colors (N, 4)
    uint8; exact: whether every colour is its own entry)."""
    if len(colors) == 0:
        return np.zeros((0, 4), np.uint8), np.zeros(0, np.int64), True
    unique, index, counts = np.unique(
        np.ascontiguousarray(colors, np.uint8).view(np.uint32).reshape(-1),
        return_inverse=True,
        return_counts=True,
    )
    distinct = unique.view(np.uint8).reshape(-1, 4)
    index = index.reshape(-1)
    if len(distinct) <= entries:
        return distinct.copy(), index, True
    box_of_colour = median_cut(distinct, counts, entries)
    palette = np.zeros((box_of_colour.max() + 1, 4), np.uint8)
    weights = counts.astype(np.float64)
    for box in range(len(palette)):
        members = box_of_colour == box
        mean = (distinct[members] * weights[members, None]).sum(axis=0) / weights[members].sum()
        palette[box] = np.floor(mean + 0.5)
    return palette, box_of_colour[index], False


def median_cut(colors: np.ndarray, counts: np.ndarray, boxes: int) -> np.ndarray:
    """The box (0 .. boxes - 1) of each distinct colour (K, 4) weighted by counts (K,)."""
    groups = [np.arange(len(colors))]
    while len(groups) < boxes:
        spreads = [
            (colors[group].max(axis=0).astype(int) - colors[group].min(axis=0)).max()
            if len(group) > 1
            else -1
            for group in groups
        ]
        widest = int(np.argmax(spreads))
        if spreads[widest] <= 0:
            break
        group = groups[widest]
        values = colors[group]
        channel = int(np.argmax(values.max(axis=0).astype(int) - values.min(axis=0)))
        order = np.argsort(values[:, channel], kind="stable")
        group = group[order]
        cumulative = np.cumsum(counts[group])
        cut = int(np.searchsorted(cumulative, cumulative[-1] / 2.0))
        cut = min(max(cut + 1, 1), len(group) - 1)  # both halves hold a colour
        groups[widest : widest + 1] = [group[:cut], group[cut:]]
    box = np.empty(len(colors), np.int64)
    for number, group in enumerate(groups):
        box[group] = number
    return box
