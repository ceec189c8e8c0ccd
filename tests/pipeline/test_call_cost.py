"""What a replayed call costs the host, counted rather than timed: the Vulkan functions and
the Python functions that a batch's device thread runs per mesh (voxelize_checked on meshes
its reading processes prepared, as voxelizer.batch.worker calls it), once the stream's first
mesh has recorded the submission the others replay. Every result is compared with the CPU
reference, so a cut in the host's work that changed a voxel fails here too."""

from __future__ import annotations

import sys
import warnings
from collections import Counter
from dataclasses import fields, replace
from typing import Any

import numpy as np
import pytest
import trimesh

from voxelizer import Voxelizer
from voxelizer.api import voxelize_checked
from voxelizer.batch.readers import prepared_mesh
from voxelizer.mesh import Mesh, checked_mesh
from voxelizer.options import Options
from voxelizer.pipeline.binning import Counted
from voxelizer.reference import voxelize_reference

from ..helpers import assert_same_voxels

N = 32
# Python functions a replayed call of the stream below runs (sys.setprofile's "call" events,
# generators' resumptions included): 281 now, 339 before its calls were
# cut (per-call padding rows, buffer sizes, slab windows, forests, dataclasses.replace, ...).
MAX_PYTHON_CALLS = 300
# Vulkan functions of a replay that waits blocking: reset the fence, submit, wait, and read
# the timestamps of the result before, which is still held (as a batch's writers hold theirs),
# before the submission overwrites them. (A GPU's wait may poll the fence first,
# vkGetFenceStatus, not counted, and then need no vkWaitForFences.)
REPLAY_VULKAN_CALLS = {
    "vkGetQueryPoolResults": 1, "vkResetFences": 1, "vkQueueSubmit": 1, "vkWaitForFences": 1,
}  # fmt: skip


def _sphere(radius: float, centre: tuple[float, float, float]) -> Mesh:
    sphere = trimesh.creation.icosphere(subdivisions=3, radius=radius)
    return checked_mesh(np.asarray(sphere.vertices) + centre, np.asarray(sphere.faces), "sphere")


class _CountingLib:
    """The `vulkan` module's cffi library with every vk* function counted by name."""

    def __init__(self, real: Any, counted: Counter[str]):
        self._real, self._counted = real, counted

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._real, name)
        if not (name.startswith("vk") and callable(value)):
            return value
        counted = self._counted

        def call(*args: Any) -> Any:
            counted[name] += 1
            return value(*args)

        return call


def test_a_replayed_call_stays_within_its_vulkan_and_python_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Meshes of one size in a stream: after the first, each replays with one submit and
    wait (no command recorded), and runs at most MAX_PYTHON_CALLS Python functions."""
    import vulkan
    import vulkan._vulkan as wrapped

    vulkan_calls: Counter[str] = Counter()
    counting = _CountingLib(wrapped.lib, vulkan_calls)
    monkeypatch.setattr(vulkan, "lib", counting)  # (before the Voxelizer: it keeps the library)
    centres = [(0.0, 0.0, 0.0), (0.3, -0.2, 0.1), (-0.1, 0.25, -0.3)]
    with Voxelizer() as voxelizer:
        options = Options.create(N)
        options = replace(options, variant=voxelizer.likely_variant(options.variant))
        meshes = [prepared_mesh(_sphere(1.0, c), options, make_soup=True) for c in centres]
        python_calls = []
        results = [voxelize_checked(voxelizer, meshes[0], options, dense=False, count_voxels=False)]
        while (building := voxelizer.prepare(options)) is not None:  # (then found all built)
            building.join()
        counted = [0]

        def profile(frame: Any, event: str, arg: Any) -> None:
            if event == "call" and frame.f_code.co_filename != __file__:  # (not the counting's)
                counted[0] += 1

        for mesh in meshes[1:]:
            vulkan_calls.clear()
            counted[0] = 0
            sys.setprofile(profile)
            try:
                svo = voxelize_checked(voxelizer, mesh, options, dense=False, count_voxels=False)
            finally:
                sys.setprofile(None)
            python_calls.append(counted[0])
            results.append(svo)
            assert svo.stats.counts.get("replayed") == 1
            polled = vulkan_calls.pop("vkGetFenceStatus", 0)
            if polled:  # (signalled while polled: no blocking wait)
                vulkan_calls["vkWaitForFences"] = max(vulkan_calls["vkWaitForFences"], 1)
            assert vulkan_calls == REPLAY_VULKAN_CALLS
    assert max(python_calls) <= MAX_PYTHON_CALLS, python_calls
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for mesh, svo in zip(meshes, results):
            assert_same_voxels(svo.to_numpy(), voxelize_reference(mesh, N).to_numpy())


def test_a_replayed_part_is_the_recorded_one_with_its_batch_and_upload_time():
    """Counted.replayed, made field by field for speed, equals dataclasses.replace: a field
    added to Counted and not passed on there fails here."""
    recorded = Counted(**{f.name: object() for f in fields(Counted)})
    batch, upload_ms = (4, 9), 1.5
    replayed = recorded.replayed(batch, upload_ms)
    expected = replace(recorded, batch=batch, upload_ms=upload_ms)
    assert all(getattr(replayed, f.name) is getattr(expected, f.name) for f in fields(Counted))
