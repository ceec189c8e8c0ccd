"""Recording and submitting work: one command buffer, barriers between steps, timestamps.

A `Sequence` is reused for every voxelization a Voxelizer runs: `begin()`, record steps,
`submit()` (waits), read results, and `begin()` again. A recording begun with
`begin(reusable=True)` can be submitted again as it is by `replay()`, until the next
`begin()`: for work whose buffers, sizes and push constants are the same as last time, no
command is recorded again. `keep()` takes such a recording off the sequence as a
`Recording`, replayed by `replay(recording)` for as long as the caller keeps it (the
sequence records on a fresh command buffer meanwhile), so that several stay ready at once;
`release(recording)` hands it back. `submissions` counts what went to the queue.

A call records a few dozen commands, so recording is kept cheap on the host: the commands
go straight to the Vulkan functions (cffi, none of the wrapper's per-call argument
conversion), the descriptor writes of each
pipeline are built once and only their buffers change, a dispatch pushes its buffers into
the command buffer (VK_KHR_push_descriptor, where the device has it; otherwise it gets a
descriptor set from the sequence's pool, which is reset at every `begin()`), a pipeline
already bound is not bound again, and a barrier with nothing recorded since the one before
it in the same recording is left out.

A submission is cheap on the host too, as a small build submits and waits in a fraction of a
millisecond: the submit and the wait call the Vulkan functions themselves (gpu/vulkan_calls.py:
a fault injected into the `vulkan` module's wrapper still reaches them), with structs made
once per sequence. The wait polls the fence for up to `wait_spin_s` before it blocks in
vkWaitForFences, as a driver's blocking wait may wake the host well after the GPU is done,
but only while the waiting thread is the process's only one (SPIN_ONLY_ALONE): each poll
gives up the GIL and takes it back, so beside other Python threads (a batch's readers and
writers) the poll spends the thread's CPU and hands the GIL to them at every turn, where a
blocking wait gives it up once. A CPU device (lavapipe) never polls, as the host's cores run
the work. A Vulkan error of the
submit or the wait (a lost device, no memory) is a `DeviceError`.

A submit interrupted before its wait returns (Ctrl-C, any exception) leaves the work on the
queue: the device's `queue_may_be_busy` says so, and `begin()` and every destroy wait for the
queue first (`Device.settle`), so nothing the GPU still uses is reset or freed.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing

from ..errors import DeviceError
from ..interrupts import interrupts_deferred
from .buffers import STAGING, Binding, Buffer, BufferPool
from .device import Device
from .gpu_times import GpuTimes
from .loader import vk
from .pipelines import ComputePipeline
from .vulkan_calls import VulkanCall

__all__ = [
    "Binding", "DescriptorWrites", "GpuTimes", "Recording", "Sequence", "check_result",
    "workgroups",
]  # fmt: skip

_SETS_PER_POOL = 64
_MAX_TIMESTAMPS = 128
# How long a wait polls the fence before it blocks, on a device that is not the host's CPU
# (docs/benchmarks.md, "Submissions": the round trip on an H200 with and without the poll).
WAIT_SPIN_S = 0.0005
# Whether the wait polls only while the process runs no other thread (see the module's text):
# yes, as the batch command ran faster so on an H200 (docs/benchmarks.md, "Several
# recordings kept"), although beside synthetic busy threads polling gave more calls a second.
SPIN_ONLY_ALONE = True
_FOREVER = 2**64 - 1  # a wait's timeout: none


def workgroups(items: int, per_group: int) -> int:
    """Workgroups of `per_group` invocations (or items) that cover `items`."""
    return -(-items // per_group)


class Recording:
    """A reusable recording kept off its sequence (`Sequence.keep`): its command buffer, its
    timestamps' labels, and the descriptor pools its sets came from (on a device without
    push descriptors), until `Sequence.release`."""

    __slots__ = ("command_buffer", "descriptor_pools", "labels", "released")

    def __init__(self, command_buffer: Any, labels: tuple[str, ...], descriptor_pools: list):
        self.command_buffer = command_buffer
        self.labels = labels
        self.descriptor_pools = descriptor_pools
        self.released = False


@dataclass(frozen=True)
class SubmitCalls:
    """What every begin() and submit() of a sequence hands Vulkan, made once per sequence: the
    structs the calls read (kept alive here; begin() sets `begin_info.flags`, a replay points
    `command_buffers[0]` at a kept recording's), the Vulkan functions a submission calls, and
    the array a submission's timestamps are read into (GpuTimes)."""

    begin_info: Any  # VkCommandBufferBeginInfo *
    command_buffers: Any  # VkCommandBuffer[1], which submit_info points at
    submit_info: Any  # VkSubmitInfo *
    fences: Any  # VkFence[1]: the sequence's fence
    ticks: Any  # uint64_t[_MAX_TIMESTAMPS]
    queue_submit: VulkanCall
    wait_for_fences: VulkanCall
    reset_fences: VulkanCall
    fence_status: VulkanCall
    not_ready: int  # VK_NOT_READY, which the wait's poll compares with (looked up once)

    @classmethod
    def of(cls, command_buffer: Any, fence: Any) -> SubmitCalls:
        ffi = vk.ffi
        begin_info = ffi.new("VkCommandBufferBeginInfo *")
        begin_info.sType = vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO
        begin_info.flags = vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT
        command_buffers = ffi.new("VkCommandBuffer[]", [command_buffer])
        submit_info = ffi.new("VkSubmitInfo *")
        submit_info.sType = vk.VK_STRUCTURE_TYPE_SUBMIT_INFO
        submit_info.commandBufferCount = 1
        submit_info.pCommandBuffers = command_buffers
        return cls(
            begin_info=begin_info,
            command_buffers=command_buffers,
            submit_info=submit_info,
            fences=ffi.new("VkFence[]", [fence]),
            ticks=ffi.new("uint64_t[]", _MAX_TIMESTAMPS),
            queue_submit=VulkanCall("vkQueueSubmit"),
            wait_for_fences=VulkanCall("vkWaitForFences"),
            reset_fences=VulkanCall("vkResetFences"),
            fence_status=VulkanCall("vkGetFenceStatus"),
            not_ready=vk.VK_NOT_READY,
        )


class Sequence:
    def __init__(self, device: Device, pool: BufferPool):
        self.device = device
        self.pool = pool
        handle = device.handle
        self.command_pool = self.fence = self.query_pool = None
        self._descriptor_pools: list = []
        self._kept: list[Recording] = []  # recordings kept off the sequence, not released
        self._spare_buffers: list[Any] = []  # command buffers of released recordings
        self._unread: weakref.ref[GpuTimes] | None = None  # the last submission's, if unread
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
        self.submissions = 0  # submits and replays so far
        self._reusable = False  # the recording was begun reusable
        self._replayable = False  # a reusable recording has been submitted, not begun since
        # The Vulkan functions themselves: the commands below return nothing to check, and
        # the ones that return a VkResult are checked here as the wrapper checks them.
        self._lib, self._ffi = vk.lib, vk.ffi
        self._writes: dict[ComputePipeline, DescriptorWrites] = {}
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
        self._calls = SubmitCalls.of(self.command_buffer, self.fence)
        # How long a wait polls the fence before it blocks (never on a CPU device), and
        # whether only while the waiting thread is the process's only one
        self.wait_spin_s = 0.0 if self.device.is_cpu else WAIT_SPIN_S
        self.spin_only_alone = SPIN_ONLY_ALONE
        self._submitted_labels: tuple[str, ...] = ()  # the labels of the recording submitted
        self._times_lock = threading.Lock()  # (GpuTimes reads the timestamps under it)
        self._barrier_stages = (
            vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | vk.VK_PIPELINE_STAGE_TRANSFER_BIT
        )
        self._barrier_later = (
            self._barrier_stages
            | vk.VK_PIPELINE_STAGE_DRAW_INDIRECT_BIT
            | vk.VK_PIPELINE_STAGE_HOST_BIT
        )
        # The one barrier every step uses, built once: a sequence records dozens per call.
        self._memory_barrier = _memory_barrier()

    # -- recording ---------------------------------------------------------------------------

    def begin(self, reusable: bool = False) -> None:
        """Start a recording; `reusable`: it may be replayed after its submit."""
        handle, lib = self.device.handle, self._lib
        self.device.settle()  # an interrupted submit's work may still use the command buffer
        self._replayable = False
        self._reusable = reusable
        self._calls.begin_info.flags = (
            0 if reusable else vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT
        )
        check_result(lib.vkResetCommandBuffer(self.command_buffer, 0))
        for pool in self._descriptor_pools:
            check_result(lib.vkResetDescriptorPool(handle, pool, 0))
        self._pool_index, self._sets_left = 0, 0
        check_result(lib.vkBeginCommandBuffer(self.command_buffer, self._calls.begin_info))
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
        self.copy(self.stage(target, data), target, data.nbytes)

    def stage(self, target: Buffer, data: np.ndarray) -> Buffer:
        """Write host data into the staging buffer that `upload` copies into `target` from,
        recording nothing: for a replayed recording that uploads (write_once's rule)."""
        data = np.ascontiguousarray(data)
        staging = self.pool.get(f"upload:{target.name}", data.nbytes, STAGING, host_visible=True)
        staging.write_once(data)
        return staging

    def upload_made(
        self,
        target: Buffer,
        shape: tuple[int, ...],
        dtype: numpy.typing.DTypeLike,
        sources: tuple[np.ndarray, ...],
        part: Hashable,
        make: Callable[[np.ndarray], None],
    ) -> bool:
        """Record a copy into `target` from a staging buffer of `shape` and `dtype`, filled by
        make(view) now (data computed on the host goes there directly, with no array of its
        own in between), unless it holds what make would write already: what it last made from these very read-only
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
            writes = self._writes[pipeline] = DescriptorWrites(pipeline)
        infos = writes.infos
        for index, name in enumerate(writes.names):
            bound = bindings[name]
            info = infos[index]
            if isinstance(bound, Buffer):
                info.buffer, info.offset, info.range = bound.handle, 0, bound.size
            else:
                size, offset = bound.size, bound.offset
                info.buffer, info.offset = bound.buffer.handle, offset
                rest = bound.buffer.size - offset
                info.range = rest if size is None else max(4, (size + 3) // 4 * 4)
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
        check_result(self._lib.vkAllocateDescriptorSets(handle, self._set_info, self._new_set))
        return self._new_set[0]

    # -- submission --------------------------------------------------------------------------

    def submit(self) -> Mapping[str, float]:
        """Submit, wait, and return GPU milliseconds per label (summed when a label repeats),
        read from the device when first looked at (`GpuTimes`)."""
        check_result(self._lib.vkEndCommandBuffer(self.command_buffer))
        self._submitted_labels = tuple(self._labels)
        times = self._run()
        self._replayable = self._reusable
        return times

    @property
    def replayable(self) -> bool:
        """Whether `replay()` may run: the last recording was begun reusable and submitted."""
        return self._replayable

    def replay(self, recording: Recording | None = None) -> Mapping[str, float]:
        """Submit the last recording again as it is (see `replayable`), or a kept one, and
        wait: the buffers it names must be alive still, and hold what its steps expect."""
        if recording is None:
            if not self._replayable:
                raise RuntimeError("no reusable recording to replay")
            self.device.settle()  # (an interrupted replay's work may still use the buffer)
            return self._run()
        if recording.released:
            raise RuntimeError("a released recording cannot be replayed")
        self.device.settle()
        self._calls.command_buffers[0] = recording.command_buffer
        labels, self._submitted_labels = self._submitted_labels, recording.labels
        try:
            return self._run()
        finally:
            self._calls.command_buffers[0] = self.command_buffer
            self._submitted_labels = labels

    def keep(self) -> Recording:
        """The reusable recording just submitted (see `replayable`), taken off the sequence to
        be replayed later by `replay(recording)`; the next `begin()` records on another
        command buffer. The caller releases it (`release`) when done with it."""
        if not self._replayable:
            raise RuntimeError("no reusable recording to keep")
        with interrupts_deferred():  # (the kept one listed, the fresh one in use, or neither)
            if not self._spare_buffers:
                alloc = vk.VkCommandBufferAllocateInfo(
                    commandPool=self.command_pool,
                    level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                    commandBufferCount=1,
                )
                self._spare_buffers.append(
                    vk.vkAllocateCommandBuffers(self.device.handle, alloc)[0]
                )
            pools: list = []
            if self.device.push_descriptor_function is None:  # its sets: in the pools used
                pools = self._descriptor_pools[: self._pool_index]
                del self._descriptor_pools[: self._pool_index]
                self._pool_index, self._sets_left = 0, 0
            kept = Recording(self.command_buffer, self._submitted_labels, pools)
            self._kept.append(kept)
            self.command_buffer = self._spare_buffers.pop()
            self._calls.command_buffers[0] = self.command_buffer
        self._replayable = False
        return kept

    def release(self, recording: Recording) -> None:
        """Hand a kept recording back: its command buffer and descriptor pools serve later
        recordings (reset when next begun)."""
        if recording.released:
            return
        self.device.settle()  # (the queue may still run it)
        recording.released = True
        self._kept.remove(recording)
        self._spare_buffers.append(recording.command_buffer)
        for pool in recording.descriptor_pools:
            check_result(self._lib.vkResetDescriptorPool(self.device.handle, pool, 0))
        self._descriptor_pools.extend(recording.descriptor_pools)
        recording.descriptor_pools = []

    def _run(self) -> Mapping[str, float]:
        """Submit the ended command buffer, wait, and return its timestamps, unread."""
        device, calls = self.device, self._calls
        try:
            self._keep_times()  # (the submission overwrites the last one's timestamps)
            calls.reset_fences(device.handle, 1, calls.fences)
            # Set before the submit: an interrupt just after it must still find the flag set.
            device.queue_may_be_busy = True
            # (the Ctrl-C test of tests/gpu/test_process_safety.py interrupts right after it)
            with device.queue_lock:
                calls.queue_submit(device.queue, 1, calls.submit_info, self.fence)
            self.submissions += 1
            self._wait_for_fence()
        except vk.VkError as exc:
            # A failed wait may leave the submission running: wait for the queue before the
            # error goes up (at once where the device is lost), so that whatever runs next
            # finds nothing of it pending.
            with device.queue_lock:
                drained = self._lib.vkQueueWaitIdle(device.queue) == 0  # VK_SUCCESS
            if drained:
                device.queue_may_be_busy = False
            raise DeviceError(f"{device.name}: {_failure(exc)}") from exc
        device.queue_may_be_busy = False
        if len(self._submitted_labels) < 2 or device.timestamp_bits == 0:
            return {}
        labels = self._submitted_labels
        times = GpuTimes(
            lambda: self._timings(labels),
            self._times_lock,
            labels,
            bits=device.timestamp_bits,
            period_ns=device.timestamp_period_ns,
        )
        self._unread = weakref.ref(times)
        return times

    def _wait_for_fence(self) -> None:
        """Wait for the fence: polled for up to `wait_spin_s` first (where `spin_only_alone`,
        only while no other thread runs), then blocking. Where the wait's functions are
        replaced (a fault injected), straight through them."""
        handle, spin, calls = self.device.handle, self.wait_spin_s, self._calls
        if (
            spin > 0
            and not (self.spin_only_alone and threading.active_count() > 1)
            and calls.fence_status.replaced is None
            and calls.wait_for_fences.replaced is None
        ):
            status, fence, not_ready = calls.fence_status.raw, self.fence, calls.not_ready
            clock = time.perf_counter
            deadline = clock() + spin
            while True:
                result = status(handle, fence)
                if result == 0:  # VK_SUCCESS: signalled
                    return
                if result != not_ready:
                    check_result(result)  # (a lost device)
                if clock() >= deadline:
                    break
        calls.wait_for_fences(handle, 1, calls.fences, 1, _FOREVER)  # (waitAll: VK_TRUE)

    def _keep_times(self) -> None:
        """Read the last submission's timestamps into its GpuTimes, if that is still held
        and unread, before they are overwritten or destroyed."""
        unread, self._unread = self._unread, None
        times = None if unread is None else unread()
        if times is not None:
            times.fetch()

    def _timings(self, labels: tuple[str, ...]) -> bytes:
        """The raw timestamps of the last submission (one uint64 per label), read from the
        device: GpuTimes turns them into milliseconds when they are looked at. Its fence
        has signalled, so they are there: asked without the wait flag first (which costs a
        CPU device, lavapipe, a wait of its own for every read), with it if not."""
        count, handle, pool = len(labels), self.device.handle, self.query_pool
        ticks = self._calls.ticks
        flags = vk.VK_QUERY_RESULT_64_BIT
        result = self._lib.vkGetQueryPoolResults(handle, pool, 0, count, count * 8, ticks, 8, flags)
        if result == self._calls.not_ready:
            flags |= vk.VK_QUERY_RESULT_WAIT_BIT
            result = self._lib.vkGetQueryPoolResults(
                handle, pool, 0, count, count * 8, ticks, 8, flags
            )
        check_result(result)
        return self._ffi.buffer(ticks, count * 8)[:]

    def destroy(self) -> None:
        """Destroy what this sequence created (all of it, or what a failed start left)."""
        handle = self.device.handle
        self.device.settle()
        if self.query_pool is not None:
            self._keep_times()
        for kept in self._kept:  # (their command buffers go with the command pool)
            kept.released = True
            self._descriptor_pools.extend(kept.descriptor_pools)
            kept.descriptor_pools = []
        self._kept.clear()
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


def _memory_barrier() -> Any:
    """A VkMemoryBarrier[1] from every shader and transfer access to every later access,
    indirect arguments and host reads included."""
    barriers = vk.ffi.new("VkMemoryBarrier[]", 1)
    access = (
        vk.VK_ACCESS_SHADER_READ_BIT
        | vk.VK_ACCESS_SHADER_WRITE_BIT
        | vk.VK_ACCESS_TRANSFER_READ_BIT
        | vk.VK_ACCESS_TRANSFER_WRITE_BIT
    )
    barrier = barriers[0]
    barrier.sType = vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER
    barrier.srcAccessMask = access
    barrier.dstAccessMask = (
        access | vk.VK_ACCESS_INDIRECT_COMMAND_READ_BIT | vk.VK_ACCESS_HOST_READ_BIT
    )
    return barriers


def _failure(exc: Exception) -> str:
    """What a Vulkan error of a submission or its wait says, in words."""
    if isinstance(exc, (vk.VkErrorOutOfDeviceMemory, vk.VkErrorOutOfHostMemory)):
        return f"out of memory running the submitted work ({type(exc).__name__})"
    if isinstance(exc, vk.VkErrorDeviceLost):
        return "the device was lost running the submitted work (VkErrorDeviceLost)"
    return f"the submitted work failed ({type(exc).__name__})"


def check_result(result: int) -> None:
    """Raise the `vulkan` module's exception for a VkResult that is not VK_SUCCESS, as its
    wrappers do (a VkError subclass; VK_TIMEOUT and other non-errors as theirs, too)."""
    if result != 0:  # VK_SUCCESS
        raise vk.exception_codes[result]


class DescriptorWrites:
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
