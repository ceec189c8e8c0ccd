"""First dispatches: on a CPU device (lavapipe) the driver compiles a kernel at its first
dispatch, so the kernels a call will need are built on a thread of their own and each gets
an empty dispatch as soon as it is built (`build_in_background`, `FirstDispatches`), the
compiles shared with a second device while the driver's shader cache is cold
(`SecondCompiler`). The host reads and checks the mesh meanwhile.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from contextlib import suppress
from typing import Any

from ..errors import VoxelizerError
from ..log import get_logger
from .buffers import Buffer
from .commands import DescriptorWrites, check_result
from .device import Device
from .loader import vk
from .pipelines import ComputePipeline

_log = get_logger(__name__)


class FirstDispatches:
    """Pipelines dispatched once with no workgroups, each as soon as it is built. On a CPU
    device (lavapipe) the driver compiles a kernel at its first dispatch, on its queue's
    thread (LLVM, a few milliseconds to a few hundred per kernel until its shader cache holds
    them), so these dispatches get the compiles going while the host reads the mesh and
    builds the next pipelines, instead of inside the call's first submission. Each is a
    submission of its own with its own fence, without a wait: the queue runs them in order,
    before any later submission. `finish` waits for them all and frees what they used. Used
    by one thread."""

    BUFFER_BYTES = 256  # bound to every binding: no workgroup reads it
    MAX_BINDINGS = 16  # per kernel, for the descriptor pool of a device without push descriptors

    def __init__(self, device: Device, count: int):
        self.device = device
        handle = device.handle
        self._command_pool = self._descriptor_pool = None
        self._command_buffers: list[Any] = []
        self._fences: list[Any] = []
        self._buffer: Buffer | None = None
        self._submitted = 0  # command buffers and fences used (each once)
        self._done = 0  # of those, the first ones known to have run
        self._first_submitted = 0.0  # perf_counter at the first submission
        try:
            pool_info = vk.VkCommandPoolCreateInfo(queueFamilyIndex=device.queue_family)
            self._command_pool = vk.vkCreateCommandPool(handle, pool_info, None)
            alloc = vk.VkCommandBufferAllocateInfo(
                commandPool=self._command_pool,
                level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                commandBufferCount=count,
            )
            self._command_buffers = list(vk.vkAllocateCommandBuffers(handle, alloc))
            for _ in range(count):
                self._fences.append(vk.vkCreateFence(handle, vk.VkFenceCreateInfo(), None))
            self._buffer = Buffer(device, self.BUFFER_BYTES, name="first_dispatches")
            if device.push_descriptor_function is None:
                size = vk.VkDescriptorPoolSize(
                    type=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                    descriptorCount=count * self.MAX_BINDINGS,
                )
                info = vk.VkDescriptorPoolCreateInfo(
                    maxSets=count, poolSizeCount=1, pPoolSizes=[size]
                )
                self._descriptor_pool = vk.vkCreateDescriptorPool(handle, info, None)
        except BaseException:
            self.finish()
            raise

    def dispatch(self, pipeline: ComputePipeline) -> None:
        """Record and submit the pipeline's dispatch of no workgroups (its buffers all bound
        to one small buffer, its push constants zero); nothing once `count` are submitted."""
        if self._submitted == len(self._command_buffers) or self._buffer is None:
            return
        lib, ffi, device = vk.lib, vk.ffi, self.device
        command_buffer = self._command_buffers[self._submitted]
        begin = vk.VkCommandBufferBeginInfo(flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT)
        vk.vkBeginCommandBuffer(command_buffer, begin)
        compute = vk.VK_PIPELINE_BIND_POINT_COMPUTE
        lib.vkCmdBindPipeline(command_buffer, compute, pipeline.handle)
        writes = DescriptorWrites(pipeline)
        for index in range(writes.count):
            writes.infos[index].buffer = self._buffer.handle
            writes.infos[index].range = self._buffer.size
        if device.push_descriptor_function is not None:
            device.push_descriptor_function(
                command_buffer, compute, pipeline.layout, 0, writes.count, writes.writes
            )
        else:
            layouts = ffi.new("VkDescriptorSetLayout[]", [pipeline.set_layout])
            info = ffi.new("VkDescriptorSetAllocateInfo *")
            info.sType = vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO
            info.descriptorPool, info.descriptorSetCount, info.pSetLayouts = (
                self._descriptor_pool,
                1,
                layouts,
            )
            descriptor_set = ffi.new("VkDescriptorSet[]", 1)
            check_result(lib.vkAllocateDescriptorSets(device.handle, info, descriptor_set))
            for index in range(writes.count):
                writes.writes[index].dstSet = descriptor_set[0]
            lib.vkUpdateDescriptorSets(device.handle, writes.count, writes.writes, 0, ffi.NULL)
            lib.vkCmdBindDescriptorSets(
                command_buffer, compute, pipeline.layout, 0, 1, descriptor_set, 0, ffi.NULL
            )
        if pipeline.push_constant_size:
            zeros = ffi.new("char[]", pipeline.push_constant_size)
            stage = vk.VK_SHADER_STAGE_COMPUTE_BIT
            lib.vkCmdPushConstants(
                command_buffer, pipeline.layout, stage, 0, pipeline.push_constant_size, zeros
            )
        lib.vkCmdDispatch(command_buffer, 0, 0, 0)
        vk.vkEndCommandBuffer(command_buffer)
        # The Vulkan function itself: this thread's submissions are not a call's (the wrapper
        # is what tests/gpu/test_process_safety.py counts and interrupts).
        submit = ffi.new("VkSubmitInfo *")
        submit.sType = vk.VK_STRUCTURE_TYPE_SUBMIT_INFO
        buffers = ffi.new("VkCommandBuffer[]", [command_buffer])
        submit.commandBufferCount, submit.pCommandBuffers = 1, buffers
        with device.queue_lock:
            check_result(lib.vkQueueSubmit(device.queue, 1, submit, self._fences[self._submitted]))
        if self._submitted == 0:
            self._first_submitted = time.perf_counter()
        self._submitted += 1
        pipeline.first_dispatch_due(False)

    def in_flight(self) -> int:
        """Dispatches submitted that the queue has not run yet."""
        handle = self.device.handle
        while self._done < self._submitted:
            if vk.lib.vkGetFenceStatus(handle, self._fences[self._done]) == vk.VK_NOT_READY:
                break
            self._done += 1
        return self._submitted - self._done

    def first_compiles(self, seconds: float) -> bool:
        """Whether the first dispatch is still running `seconds` after its submission: the
        driver compiles its kernel rather than loading it from its cache (waits that long
        at most)."""
        if self._submitted == 0:
            return False
        while True:
            running = self.in_flight() == self._submitted
            if not running or time.perf_counter() - self._first_submitted >= seconds:
                return running
            time.sleep(0.001)

    def wait(self, count: int | None = None) -> None:
        """Wait until the queue has run the first `count` dispatches (all submitted so far)."""
        count = self._submitted if count is None else min(count, self._submitted)
        if count > self._done:
            fences = vk.ffi.new("VkFence[]", self._fences[self._done : count])
            check_result(
                vk.lib.vkWaitForFences(
                    self.device.handle, count - self._done, fences, vk.VK_TRUE, 2**64 - 1
                )
            )
            self._done = count

    def finish(self) -> None:
        """Wait until the queue has run every dispatch submitted, then free everything."""
        handle = self.device.handle
        try:
            self.wait()
        finally:
            self._submitted = self._done = len(self._command_buffers)  # no more
            if self._descriptor_pool is not None:
                vk.vkDestroyDescriptorPool(handle, self._descriptor_pool, None)
            if self._command_pool is not None:  # (its command buffers go with it)
                vk.vkDestroyCommandPool(handle, self._command_pool, None)
            for fence in self._fences:
                vk.vkDestroyFence(handle, fence, None)
            if self._buffer is not None:
                self._buffer.destroy()
            self._command_pool = self._descriptor_pool = self._buffer = None
            self._fences = []


def build_in_background(pipelines: Iterable[ComputePipeline]) -> threading.Thread | None:
    """Build those of `pipelines` not built yet, in order, on a thread of their own (the
    driver works outside the GIL); on a CPU device give each its first dispatch as soon as
    it is built (FirstDispatches), the compiles shared with a second device while the
    driver's cache is cold (SecondCompiler). A dispatch that needs a pipeline waits for it;
    an error stops the thread and is raised again by the dispatch that needs that pipeline.
    Join the thread before the device or the pipelines are destroyed."""
    waiting = [pipeline for pipeline in pipelines if not pipeline.built]
    if not waiting:
        return None
    if waiting[0].device.is_cpu:
        for pipeline in waiting:
            pipeline.first_dispatch_due(True)
    # Not a daemon: the interpreter waits for it before the exit handlers destroy the device.
    thread = threading.Thread(target=_build_all, args=(waiting,), name="voxelizer-pipelines")
    try:
        thread.start()
    except BaseException:
        for pipeline in waiting:
            pipeline.first_dispatch_due(False)
        raise
    return thread


def _build_all(pipelines: list[ComputePipeline]) -> None:
    try:
        _build_and_dispatch(pipelines)
    finally:  # whatever happened: the call's dispatches wait no longer
        for pipeline in pipelines:
            pipeline.first_dispatch_due(False)


def _build_and_dispatch(pipelines: list[ComputePipeline]) -> None:
    device = pipelines[0].device
    first: FirstDispatches | None = None
    if device.is_cpu:
        with suppress(vk.VkError, VoxelizerError):  # then they compile at the call's dispatches
            first = FirstDispatches(device, len(pipelines))
    if first is None:
        for pipeline in pipelines:
            try:
                pipeline.build()
            except Exception:  # ShaderError, or destroyed meanwhile: the dispatch reports it
                return
        return
    second: SecondCompiler | None = None
    try:
        for pipeline in pipelines[:2]:  # the queue compiles these while the rest is decided
            pipeline.build()
            first.dispatch(pipeline)
        if len(pipelines) > 3 and SecondCompiler.worth_it(first):
            second = SecondCompiler.open(device, len(pipelines) - 2)
        if second is None:
            for pipeline in pipelines[2:]:
                pipeline.build()
                first.dispatch(pipeline)
        else:
            second.share(first, pipelines[2:])
    except (vk.VkError, VoxelizerError):  # a pipeline that cannot be built (ShaderError, or
        pass  # destroyed meanwhile): the dispatch that needs it reports it; the rest compile there
    finally:
        if second is not None:
            second.close()
        first.finish()


# A first dispatch still running this long after its submission compiles its kernel: a
# kernel the driver's shader cache holds loads well within it on lavapipe, and a compile
# takes several times as long (docs/benchmarks.md, "Figures behind the code").
COLD_COMPILE_S = 0.01
CACHE_OFF_VARIABLES = ("MESA_SHADER_CACHE_DISABLE", "MESA_GLSL_CACHE_DISABLE")
QUEUED = 2  # first dispatches kept submitted per device: one compiling, one next
POLL_S = 0.001  # while both devices have QUEUED and no pipeline is left to build
# The work of compiling a kernel, to hand out the longest first: its SPIR-V's bytes and
# this many more (on lavapipe a kernel's compile has a fixed part besides one in proportion
# to its SPIR-V: docs/benchmarks.md, "Figures behind the code").
COMPILE_BYTES_PER_KERNEL = 4096


def compile_work(pipeline: ComputePipeline) -> int:
    return pipeline.module_size + COMPILE_BYTES_PER_KERNEL


class SecondCompiler:
    """A second device of the same driver that compiles some of a call's kernels while the
    first device compiles the others, each on its own queue's thread. Mesa's drivers keep
    what they compile in a shader cache on disk, keyed by the shader, so once this device
    has compiled a kernel, the first device's first dispatch of it loads it from there (a
    millisecond). Used on a CPU device with Mesa's driver, its cache on and the first kernel
    found missing from it, and two cores or more; closed as soon as its compiles are done.
    Where the cache does not keep them after all, the first device compiles them too, as it
    would have without this one."""

    def __init__(self, device: Device, first: FirstDispatches):
        self.device = device
        self.first = first
        self.pipelines: list[ComputePipeline] = []  # twins of the first device's

    @staticmethod
    def worth_it(first: FirstDispatches) -> bool:
        """Whether the driver compiles the first of the dispatches `first` submitted (its
        shader cache is cold) and a second device can compile alongside."""
        device = first.device
        if not device.mesa_driver or _cores() < 2:
            return False
        if any(os.environ.get(name, "").lower() not in ("", "0", "false", "no")
               for name in CACHE_OFF_VARIABLES):  # fmt: skip
            return False
        return first.first_compiles(COLD_COMPILE_S)

    @classmethod
    def open(cls, like: Device, count: int) -> SecondCompiler | None:
        """A second device like `like`, for up to `count` first dispatches (None, with
        nothing left open, where it cannot be opened)."""
        _log.info("compiling on a second device too: the driver's shader cache is cold")
        try:
            device = Device(like.info.index)
        except (vk.VkError, VoxelizerError):
            return None
        try:
            return cls(device, FirstDispatches(device, count))
        except (vk.VkError, VoxelizerError):
            device.close()
            return None

    def share(self, main: FirstDispatches, pipelines: list[ComputePipeline]) -> None:
        """Give `pipelines` their first dispatches on `main`'s device, each compiled there or
        here: whichever device has fewer than QUEUED in flight takes the longest left (as
        compile_work judges). One compiled here gets its first dispatch on `main`'s device
        once it is done here, and then loads from the driver's cache."""
        waiting = sorted(pipelines, key=compile_work, reverse=True)  # the longest first
        here: list[ComputePipeline] = []  # compiled here, in order; then loaded there
        loaded = 0
        while waiting or loaded < len(here):
            if waiting and main.in_flight() < QUEUED:
                pipeline = waiting.pop(0)
                pipeline.build()
                main.dispatch(pipeline)
            elif waiting and self.first.in_flight() < QUEUED:
                pipeline = waiting.pop(0)
                twin = ComputePipeline(self.device, pipeline.kernel, pipeline.defines)
                self.pipelines.append(twin)
                twin.build()
                self.first.dispatch(twin)
                here.append(pipeline)
            elif loaded < len(here) and self.first.in_flight() <= len(here) - loaded - 1:
                here[loaded].build()
                main.dispatch(here[loaded])
                loaded += 1
            elif not self._build_ahead(waiting, here[loaded:]):
                time.sleep(POLL_S)

    @staticmethod
    def _build_ahead(waiting: list[ComputePipeline], later: list[ComputePipeline]) -> bool:
        """Build one of the first device's pipelines that will be needed (while both queues
        are busy); whether there was one."""
        for pipeline in [*later, *waiting[:1]]:
            if not pipeline.built:
                pipeline.build()
                return True
        return False

    def close(self) -> None:
        """Wait for this device's compiles, then destroy everything on it and close it."""
        try:
            self.first.finish()
            for twin in self.pipelines:
                twin.destroy()
            self.pipelines.clear()
        finally:
            self.device.close()


def _cores() -> int:
    """CPU cores this process may run on."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1
