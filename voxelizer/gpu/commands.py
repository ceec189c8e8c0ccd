"""Recording and submitting work: one command buffer, barriers between steps, timestamps.

A `Sequence` is reused for every voxelization a Voxelizer runs: `begin()`, record steps,
`submit()` (waits), read results, and `begin()` again. A call records a few dozen commands,
so recording is kept cheap on the host: the commands go straight to the Vulkan functions
(cffi, none of the wrapper's per-call argument conversion), the descriptor writes of each
pipeline are built once and only their buffers change, a dispatch pushes its buffers into
the command buffer (VK_KHR_push_descriptor, where the device has it; otherwise it gets a
descriptor set from the sequence's pool, which is reset at every `begin()`), a pipeline
already bound is not bound again, and a barrier with nothing recorded since the one before
it in the same recording is left out.

A submit interrupted before its wait returns (Ctrl-C, any exception) leaves the work on the
queue: the device's `queue_may_be_busy` says so, and `begin()` and every destroy wait for the
queue first (`Device.settle`), so nothing the GPU still uses is reset or freed.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from contextlib import suppress
from typing import Any

import numpy as np
import numpy.typing

from ..errors import VoxelizerError
from ..log import get_logger
from .buffers import STAGING, Binding, Buffer, BufferPool
from .device import Device
from .interrupts import interrupts_deferred
from .loader import vk
from .pipelines import ComputePipeline

__all__ = [
    "Binding",
    "FirstDispatches",
    "SecondCompiler",
    "Sequence",
    "build_in_background",
    "workgroups",
]

_log = get_logger(__name__)
_SETS_PER_POOL = 64
_MAX_TIMESTAMPS = 128


def workgroups(items: int, per_group: int) -> int:
    """Workgroups of `per_group` invocations (or items) that cover `items`."""
    return -(-items // per_group)


class Sequence:
    def __init__(self, device: Device, pool: BufferPool):
        self.device = device
        self.pool = pool
        handle = device.handle
        self.command_pool = self.fence = self.query_pool = None
        self._descriptor_pools: list = []
        try:
            # All or none: a Ctrl-C (held until the block ends) or an error part way destroys
            # what was created, instead of leaving it to be reported when the device goes.
            with interrupts_deferred():
                pool_info = vk.VkCommandPoolCreateInfo(
                    flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                    queueFamilyIndex=device.queue_family,
                )
                self.command_pool = vk.vkCreateCommandPool(handle, pool_info, None)
                alloc = vk.VkCommandBufferAllocateInfo(
                    commandPool=self.command_pool,
                    level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                    commandBufferCount=1,
                )
                self.command_buffer = vk.vkAllocateCommandBuffers(handle, alloc)[0]
                self.fence = vk.vkCreateFence(handle, vk.VkFenceCreateInfo(), None)
                query_info = vk.VkQueryPoolCreateInfo(
                    queryType=vk.VK_QUERY_TYPE_TIMESTAMP, queryCount=_MAX_TIMESTAMPS
                )
                self.query_pool = vk.vkCreateQueryPool(handle, query_info, None)
        except BaseException:
            self.destroy()
            raise
        self._pool_index = 0
        self._sets_left = 0
        self._labels: list[str] = []
        # The Vulkan functions themselves: the commands below return nothing to check, and
        # the ones that return a VkResult are checked here as the wrapper checks them.
        self._lib, self._ffi = vk.lib, vk.ffi
        self._writes: dict[ComputePipeline, _DescriptorWrites] = {}
        self._bound: ComputePipeline | None = None  # the pipeline bound last, in this recording
        # Whether a command may have written since the last barrier: set at begin() too, as
        # a barrier's first scope takes in the earlier submissions.
        self._unfenced = True
        self._copy_region = vk.ffi.new("VkBufferCopy[]", 1)
        self._set_info = vk.ffi.new("VkDescriptorSetAllocateInfo *")
        self._set_info.sType = vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO
        self._set_info.descriptorSetCount = 1
        self._set_layouts = vk.ffi.new("VkDescriptorSetLayout[]", 1)
        self._set_info.pSetLayouts = self._set_layouts
        self._new_set = vk.ffi.new("VkDescriptorSet[]", 1)
        self._compute = vk.VK_PIPELINE_BIND_POINT_COMPUTE
        self._compute_stage = vk.VK_SHADER_STAGE_COMPUTE_BIT
        # The structs of every begin() and submit(), the same each time.
        self._begin_info = vk.ffi.new("VkCommandBufferBeginInfo *")
        self._begin_info.sType = vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO
        self._begin_info.flags = vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT
        self._command_buffers = vk.ffi.new("VkCommandBuffer[]", [self.command_buffer])
        self._submit_info = vk.ffi.new("VkSubmitInfo *")
        self._submit_info.sType = vk.VK_STRUCTURE_TYPE_SUBMIT_INFO
        self._submit_info.commandBufferCount = 1
        self._submit_info.pCommandBuffers = self._command_buffers
        self._fences = vk.ffi.new("VkFence[]", [self.fence])
        self._barrier_stages = (
            vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | vk.VK_PIPELINE_STAGE_TRANSFER_BIT
        )
        self._barrier_later = (
            self._barrier_stages
            | vk.VK_PIPELINE_STAGE_DRAW_INDIRECT_BIT
            | vk.VK_PIPELINE_STAGE_HOST_BIT
        )
        # The one barrier every step uses, built once: a sequence records dozens per call.
        self._memory_barrier = vk.ffi.new("VkMemoryBarrier[]", 1)
        access = (
            vk.VK_ACCESS_SHADER_READ_BIT
            | vk.VK_ACCESS_SHADER_WRITE_BIT
            | vk.VK_ACCESS_TRANSFER_READ_BIT
            | vk.VK_ACCESS_TRANSFER_WRITE_BIT
        )
        barrier = self._memory_barrier[0]
        barrier.sType = vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER
        barrier.srcAccessMask = access
        barrier.dstAccessMask = (
            access | vk.VK_ACCESS_INDIRECT_COMMAND_READ_BIT | vk.VK_ACCESS_HOST_READ_BIT
        )

    # -- recording ---------------------------------------------------------------------------

    def begin(self) -> None:
        handle, lib = self.device.handle, self._lib
        self.device.settle()  # an interrupted submit's work may still use the command buffer
        _check(lib.vkResetCommandBuffer(self.command_buffer, 0))
        for pool in self._descriptor_pools:
            _check(lib.vkResetDescriptorPool(handle, pool, 0))
        self._pool_index, self._sets_left = 0, 0
        _check(lib.vkBeginCommandBuffer(self.command_buffer, self._begin_info))
        lib.vkCmdResetQueryPool(self.command_buffer, self.query_pool, 0, _MAX_TIMESTAMPS)
        self._labels = []
        self._bound = None
        self._unfenced = True

    def mark(self, label: str) -> None:
        """Timestamp: the GPU time between two marks is charged to the later mark's label."""
        if len(self._labels) < _MAX_TIMESTAMPS:
            self._lib.vkCmdWriteTimestamp(
                self.command_buffer,
                vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT,
                self.query_pool,
                len(self._labels),
            )
            self._labels.append(label)

    def barrier(self) -> None:
        """Make every earlier write visible to every later read (compute, transfer, indirect,
        host). Nothing recorded since the last barrier of this recording: nothing to wait for,
        no barrier."""
        if not self._unfenced:
            return
        self._lib.vkCmdPipelineBarrier(
            self.command_buffer,
            self._barrier_stages,
            self._barrier_later,
            0,
            1,
            self._memory_barrier,
            0,
            self._ffi.NULL,
            0,
            self._ffi.NULL,
        )
        self._unfenced = False

    def fill(self, buffer: Buffer, value: int, size: int | None = None, offset: int = 0) -> None:
        """Set `size` bytes from `offset` (default: the rest of the buffer) to the 32-bit `value`."""
        size = buffer.size - offset if size is None else size
        if size > 0:
            self._lib.vkCmdFillBuffer(
                self.command_buffer, buffer.handle, offset, size // 4 * 4, value
            )
            self._unfenced = True

    def copy(self, source: Buffer, target: Buffer, size: int, target_offset: int = 0) -> None:
        region = self._copy_region[0]  # read by the call: one struct serves every copy
        region.srcOffset, region.dstOffset, region.size = 0, target_offset, size
        self._lib.vkCmdCopyBuffer(
            self.command_buffer, source.handle, target.handle, 1, self._copy_region
        )
        self._unfenced = True

    def upload(self, target: Buffer, data: np.ndarray) -> None:
        """Copy host data into a device-local buffer through a staging buffer. A read-only
        array (a per-mesh cache's) that the staging buffer holds already is not copied there
        again: only the device copy is recorded."""
        data = np.ascontiguousarray(data)
        staging = self.pool.get(f"upload:{target.name}", data.nbytes, STAGING, host_visible=True)
        staging.write_once(data)
        self.copy(staging, target, data.nbytes)

    def upload_view(
        self, target: Buffer, shape: tuple[int, ...], dtype: numpy.typing.DTypeLike = np.float32
    ) -> np.ndarray:
        """Record a copy into `target` from a staging buffer, and return that staging memory
        as an array for the caller to fill before submit(): data computed on the host goes
        there directly, with no array of its own in between."""
        staging, view = self._staging_view(target, shape, dtype)
        staging.forget()
        return view

    def upload_made(
        self,
        target: Buffer,
        shape: tuple[int, ...],
        dtype: numpy.typing.DTypeLike,
        sources: tuple[np.ndarray, ...],
        part: Hashable,
        make: Callable[[np.ndarray], None],
    ) -> bool:
        """upload_view, with the staging memory filled by make(view) now, unless it holds
        what make would write already: what it last made from these very read-only
        `sources` (their `part`), as for a repeated call on the same mesh and grid. Returns
        whether make ran."""
        staging, view = self._staging_view(target, shape, dtype)
        if staging.holds(sources, part):
            return False
        staging.forget()  # (make may be interrupted half way)
        make(view)
        staging.made_from(sources, part)
        return True

    def _staging_view(
        self, target: Buffer, shape: tuple[int, ...], dtype: numpy.typing.DTypeLike
    ) -> tuple[Buffer, np.ndarray]:
        """The staging buffer of `target` as an array of `shape`, its copy into `target`
        recorded."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape)) * dtype.itemsize
        staging = self.pool.get(f"upload:{target.name}", nbytes, STAGING, host_visible=True)
        self.copy(staging, target, nbytes)
        view = np.frombuffer(staging.mapped(), dtype, count=nbytes // dtype.itemsize)
        return staging, view.reshape(shape)

    def download(self, source: Buffer, size: int) -> Buffer:
        """Record a copy of `size` bytes into a staging buffer; read it after submit()."""
        staging = self.pool.get(f"download:{source.name}", size, STAGING, host_visible=True)
        self.copy(source, staging, size)
        return staging

    def dispatch(
        self,
        pipeline: ComputePipeline,
        bindings: Mapping[str, Binding | Buffer],
        push: Mapping[str, object],
        groups: int,
    ) -> None:
        """Run `groups` workgroups, folded into 2-D when past the per-dimension limit. The
        buffers and push values are named as the pipeline's kernel declares them."""
        push_bytes = pipeline.kernel.pack(push)
        pipeline.kernel.check_bindings(bindings)
        if groups <= 0:
            return
        x = min(groups, self.device.max_groups_x)
        y = -(-groups // x)
        if y > self.device.max_groups_y:
            raise ValueError(f"dispatch of {groups} workgroups exceeds the device's limits")
        self._bind(pipeline, bindings, push_bytes)
        self._lib.vkCmdDispatch(self.command_buffer, x, y, 1)
        self._unfenced = True

    def dispatch_indirect(
        self,
        pipeline: ComputePipeline,
        bindings: Mapping[str, Binding | Buffer],
        push: Mapping[str, object],
        arguments: Buffer,
        offset: int = 0,
    ) -> None:
        """Run as many workgroups as the VkDispatchIndirectCommand at `offset` of `arguments`
        says (written by an earlier dispatch: the host need not know the size)."""
        push_bytes = pipeline.kernel.pack(push)
        pipeline.kernel.check_bindings(bindings)
        self._bind(pipeline, bindings, push_bytes)
        self._lib.vkCmdDispatchIndirect(self.command_buffer, arguments.handle, offset)
        self._unfenced = True

    def _bind(
        self, pipeline: ComputePipeline, bindings: Mapping[str, Binding | Buffer], push: bytes
    ) -> None:
        """Bind the pipeline (unless bound already), its buffers and its push constants."""
        lib, cmd = self._lib, self.command_buffer
        if self._bound is not pipeline:
            pipeline.wait_for_first_dispatch()  # (a CPU device's: the compile comes first)
            lib.vkCmdBindPipeline(cmd, self._compute, pipeline.handle)
            self._bound = pipeline
        writes = self._writes.get(pipeline)
        if writes is None:
            writes = self._writes[pipeline] = _DescriptorWrites(pipeline)
        infos = writes.infos
        for index, name in enumerate(writes.names):
            bound = bindings[name]
            info = infos[index]
            if isinstance(bound, Buffer):
                info.buffer, info.range = bound.handle, bound.size
            else:
                size = bound.size
                info.buffer = bound.buffer.handle
                info.range = bound.buffer.size if size is None else max(4, (size + 3) // 4 * 4)
        push_descriptors = self.device.push_descriptor_function
        if push_descriptors is not None:
            push_descriptors(cmd, self._compute, pipeline.layout, 0, writes.count, writes.writes)
        else:
            descriptor_set = self._allocate_set(pipeline)
            for index in range(writes.count):
                writes.writes[index].dstSet = descriptor_set
            lib.vkUpdateDescriptorSets(
                self.device.handle, writes.count, writes.writes, 0, self._ffi.NULL
            )
            lib.vkCmdBindDescriptorSets(
                cmd, self._compute, pipeline.layout, 0, 1, self._new_set, 0, self._ffi.NULL
            )
        if push:
            lib.vkCmdPushConstants(
                cmd,
                pipeline.layout,
                self._compute_stage,
                0,
                len(push),
                self._ffi.from_buffer(push),
            )

    def _allocate_set(self, pipeline: ComputePipeline) -> Any:
        """A descriptor set for the pipeline from the sequence's pools (also left in
        `_new_set`), on devices without push descriptors."""
        handle = self.device.handle
        if self._sets_left == 0:
            if self._pool_index == len(self._descriptor_pools):
                size = vk.VkDescriptorPoolSize(
                    type=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptorCount=_SETS_PER_POOL * 8
                )
                info = vk.VkDescriptorPoolCreateInfo(
                    maxSets=_SETS_PER_POOL, poolSizeCount=1, pPoolSizes=[size]
                )
                with interrupts_deferred():  # listed (and so destroyed) before a Ctrl-C
                    self._descriptor_pools.append(vk.vkCreateDescriptorPool(handle, info, None))
            self._set_info.descriptorPool = self._descriptor_pools[self._pool_index]
            self._pool_index += 1
            self._sets_left = _SETS_PER_POOL
        self._sets_left -= 1
        self._set_layouts[0] = pipeline.set_layout
        _check(self._lib.vkAllocateDescriptorSets(handle, self._set_info, self._new_set))
        return self._new_set[0]

    # -- submission --------------------------------------------------------------------------

    def submit(self) -> dict[str, float]:
        """Submit, wait, and return GPU milliseconds per label (summed when a label repeats)."""
        lib = self._lib
        _check(lib.vkEndCommandBuffer(self.command_buffer))
        _check(lib.vkResetFences(self.device.handle, 1, self._fences))
        # Set before the submit: an interrupt just after it must still find the flag set.
        self.device.queue_may_be_busy = True
        # The submit and the wait through the wrapper (one call each per submission; the
        # Ctrl-C test of tests/gpu/test_process_safety.py interrupts right after the submit).
        with self.device.queue_lock:
            vk.vkQueueSubmit(self.device.queue, 1, self._submit_info, self.fence)
        vk.vkWaitForFences(self.device.handle, 1, [self.fence], vk.VK_TRUE, 2**64 - 1)
        self.device.queue_may_be_busy = False
        return self._timings()

    def _timings(self) -> dict[str, float]:
        count = len(self._labels)
        if count < 2 or self.device.timestamp_bits == 0:
            return {}
        data = self._ffi.new("uint64_t[]", count)
        _check(
            self._lib.vkGetQueryPoolResults(
                self.device.handle,
                self.query_pool,
                0,
                count,
                count * 8,
                data,
                8,
                vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT,
            )
        )
        mask = (1 << self.device.timestamp_bits) - 1 if self.device.timestamp_bits < 64 else -1
        ticks = [data[i] & mask for i in range(count)]
        times: dict[str, float] = {}
        for i in range(1, count):
            elapsed = ((ticks[i] - ticks[i - 1]) & mask) * self.device.timestamp_period_ns / 1e6
            times[self._labels[i]] = times.get(self._labels[i], 0.0) + elapsed
        return times

    def destroy(self) -> None:
        """Destroy what this sequence created (all of it, or what a failed start left)."""
        handle = self.device.handle
        self.device.settle()
        for pool in self._descriptor_pools:
            vk.vkDestroyDescriptorPool(handle, pool, None)
        self._descriptor_pools.clear()
        if self.query_pool is not None:
            vk.vkDestroyQueryPool(handle, self.query_pool, None)
        if self.fence is not None:
            vk.vkDestroyFence(handle, self.fence, None)
        if self.command_pool is not None:  # (its command buffer goes with it)
            vk.vkDestroyCommandPool(handle, self.command_pool, None)
        self.command_pool = self.fence = self.query_pool = None


def _check(result: int) -> None:
    """Raise the `vulkan` module's exception for a VkResult that is not VK_SUCCESS, as its
    wrappers do (a VkError subclass; VK_TIMEOUT and other non-errors as theirs, too)."""
    if result != 0:  # VK_SUCCESS
        raise vk.exception_codes[result]


class _DescriptorWrites:
    """A pipeline's descriptor writes, one storage buffer per declared binding, built once:
    a dispatch sets only each buffer's handle and range (in `infos`)."""

    def __init__(self, pipeline: ComputePipeline):
        ffi = vk.ffi
        self.names = tuple(pipeline.bindings)
        self.count = len(self.names)
        self.infos = ffi.new("VkDescriptorBufferInfo[]", self.count)
        self.writes = ffi.new("VkWriteDescriptorSet[]", self.count)
        for index, name in enumerate(self.names):
            self.infos[index].offset = 0
            write = self.writes[index]
            write.sType = vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET
            write.dstBinding = pipeline.bindings[name]
            write.descriptorCount = 1
            write.descriptorType = vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
            write.pBufferInfo = self.infos + index


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

    @property
    def submitted(self) -> int:
        return self._submitted

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
        writes = _DescriptorWrites(pipeline)
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
            _check(lib.vkAllocateDescriptorSets(device.handle, info, descriptor_set))
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
            _check(lib.vkQueueSubmit(device.queue, 1, submit, self._fences[self._submitted]))
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
            _check(
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


# A first dispatch still running this long after its submission compiles its kernel (a
# kernel the driver's shader cache holds loads in 1-3 ms on lavapipe; the first kernel of a
# call, triangle setup, compiles in 50-70 ms there on a 2-core host).
COLD_COMPILE_S = 0.01
CACHE_OFF_VARIABLES = ("MESA_SHADER_CACHE_DISABLE", "MESA_GLSL_CACHE_DISABLE")
QUEUED = 2  # first dispatches kept submitted per device: one compiling, one next
POLL_S = 0.001  # while both devices have QUEUED and no pipeline is left to build
# The work of compiling a kernel, to hand out the longest first: its SPIR-V's bytes and
# this many more (on lavapipe a kernel takes about 10 ms plus 2 ms per kB of SPIR-V).
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
