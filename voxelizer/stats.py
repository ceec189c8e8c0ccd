"""Stats: what one voxelization cost and did, typed, with one JSON form (`to_dict`).

The pipeline fills one `Stats` per run: the passes and the SVO build add GPU milliseconds
(Vulkan timestamps) and host milliseconds by label, and counts of the workload; the API adds
the host steps before the pipeline (load, placement). The CLI formats it (`--stats`) and
writes `to_dict()` (`--stats-json`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class MemoryStats:
    """Buffers held at the end of the run, by name; all of them are held at once."""

    budget_bytes: int = 0
    device_buffers: dict[str, int] = field(default_factory=dict)
    staging_buffers: dict[str, int] = field(default_factory=dict)

    @property
    def device_peak_bytes(self) -> int:
        return sum(self.device_buffers.values())

    @property
    def staging_peak_bytes(self) -> int:
        return sum(self.staging_buffers.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "budget_bytes": self.budget_bytes,
            "device_buffers": dict(self.device_buffers),
            "staging_buffers": dict(self.staging_buffers),
            "device_peak_bytes": self.device_peak_bytes,
            "staging_peak_bytes": self.staging_peak_bytes,
        }


# The set voxels of each mode, as a result's text names them.
VOXEL_NOUNS = {"solid": "solid voxels", "surface": "surface voxels", "both": "voxels"}


@dataclass
class Stats:
    """GPU ms per pass, host ms per step, workload counts and memory of one voxelization."""

    device: str = ""
    variant: str = ""
    sort: str = ""
    fill_mode: str = ""
    shape: tuple[int, int, int] = (0, 0, 0)
    mode: str = ""  # "solid", "surface" or "both"
    surface: str = ""  # "conservative" or "thin" with mode "surface", else ""
    host_ms: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    memory: MemoryStats = field(default_factory=MemoryStats)
    _gpu_ms: dict[str, float] = field(default_factory=dict, repr=False)
    # GPU times added and not looked at yet (a submission's, read from the device on demand)
    _unread: list[Mapping[str, float]] = field(default_factory=list, repr=False, compare=False)

    @property
    def gpu_ms(self) -> dict[str, float]:
        """GPU milliseconds by label (Vulkan timestamps, read when first asked for)."""
        if self._unread:
            unread, self._unread = self._unread, []
            for times in unread:
                _accumulate(self._gpu_ms, times)
        return self._gpu_ms

    @gpu_ms.setter
    def gpu_ms(self, times: dict[str, float]) -> None:
        self._unread = []
        self._gpu_ms = times

    def voxel_noun(self) -> str:
        """What a result's set voxels are, for its text: "solid voxels" where no mode is
        recorded (a result built from an array)."""
        return VOXEL_NOUNS.get(self.mode, "solid voxels")

    def add_gpu(self, times: Mapping[str, float]) -> None:
        """Add GPU milliseconds by label (a label seen again is summed). A mapping that is not
        a dict (a submission's `GpuTimes`) is kept as it is until `gpu_ms` is read, so that
        times nobody looks at are never read from the device."""
        if isinstance(times, dict):
            _accumulate(self.gpu_ms, times)
        else:
            self._unread.append(times)

    def add_host(self, times: dict[str, float] | None = None, **steps: float) -> None:
        """Add host milliseconds by label, as a dict or as keywords."""
        if times:
            _accumulate(self.host_ms, times)
        _accumulate(self.host_ms, steps)

    def count(self, **counts: int) -> None:
        """Add to workload counts (summed over slabs, parts and batches)."""
        _accumulate(self.counts, counts)

    def count_max(self, **counts: int) -> None:
        """Keep the largest value seen (sizes rather than totals)."""
        for label, value in counts.items():
            self.counts[label] = max(self.counts.get(label, 0), value)

    def add_times_of(self, other: Stats) -> None:
        """Sum another run's times into this one (the runs of fill_mode="vote")."""
        self.add_gpu(other.gpu_ms)
        self.add_host(other.host_ms)

    @property
    def gpu_total_ms(self) -> float:
        return sum(self.gpu_ms.values())

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types, the form `--stats-json` writes."""
        return {
            "device": self.device,
            "variant": self.variant,
            "sort": self.sort,
            "fill_mode": self.fill_mode,
            "mode": self.mode,
            "surface": self.surface,
            "shape": list(self.shape),
            "gpu_ms": dict(self.gpu_ms),
            "host_ms": dict(self.host_ms),
            "counts": dict(self.counts),
            "memory": self.memory.to_dict(),
        }


def _accumulate(total: dict[str, Any], values: Mapping[str, Any]) -> None:
    for label, value in values.items():
        total[label] = total.get(label, 0) + value
