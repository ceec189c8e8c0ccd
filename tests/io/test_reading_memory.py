"""keep_freed_memory: a reading process's arrays reuse the memory of the last file's instead
of starting as fresh pages (each one a page fault, zeroed by the kernel)."""

from __future__ import annotations

import subprocess
import sys

# Page faults of arrays of 8-20 MiB written one after the other (each freed before the next,
# as a file's are before the next file's) after one of 24 MiB, in a fresh process; with
# keep_freed_memory first (argv[1] == "keep") or without.
PROGRAM = """
import resource, sys
import numpy as np
from voxelizer.parallel import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
np.ones(3 << 20)  # 24 MiB
before = faults()
for mib in (8, 12, 16, 20):
    np.ones(mib << 17)  # freed at once
print(kept, faults() - before)
"""


def page_faults(mode: str) -> tuple[str, int]:
    output = subprocess.run(
        [sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, check=True
    ).stdout.split()
    return output[0], int(output[1])


def test_a_reading_process_reuses_freed_memory_without_page_faults():
    kept, faults = page_faults("keep")
    if not sys.platform.startswith("linux"):  # (glibc's allocator only: elsewhere untouched)
        assert kept == "False"
        return
    assert kept == "True"
    assert faults < 200
    _, default_faults = page_faults("default")
    assert default_faults > 1000  # (what it saves: pages of 4 KiB faulted in as the heap grows)
