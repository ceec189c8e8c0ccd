"""Buffers: device-local storage for the passes, host-visible staging for transfers."""

from __future__ import annotations

import enum
import math
import time
import weakref
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np
import numpy.typing

from ..errors import DeviceError
from ..interrupts import interrupts_deferred
from ..parallel import copy_rows
from .device import Device
from .loader import vk


class Usage(enum.Enum):
    """What a buffer is for; its VkBufferUsageFlags are read from the Vulkan module when the
    buffer is created (importing that module needs the Vulkan loader)."""

    STORAGE = "storage"  # read and written by shaders, copied from and to
    INDIRECT = "indirect"  # storage that also holds the arguments of an indirect dispatch
    STAGING = "staging"  # host-visible memory that transfers copy from and to

    def flags(self) -> int:
        transfer = vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
        if self is Usage.STAGING:
            return transfer
        storage = vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | transfer
        if self is Usage.INDIRECT:
            return storage | vk.VK_BUFFER_USAGE_INDIRECT_BUFFER_BIT
        return storage


STORAGE, INDIRECT, STAGING = Usage.STORAGE, Usage.INDIRECT, Usage.STAGING


class Buffer:
    """A VkBuffer with its own memory. Device-local unless `host_visible` (staging)."""

    def __init__(
        self,
        device: Device,
        size: int,
        usage: Usage = STORAGE,
        host_visible: bool = False,
        name: str = "",
    ):
        self.device = device
        self.size = max(16, -(-int(size) // 16) * 16)  # whole 16-byte units: any dtype views it
        self.name = name
        self.host_visible = host_visible
        info = vk.VkBufferCreateInfo(
            size=self.size, usage=usage.flags(), sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE
        )
        try:
            self.handle = vk.vkCreateBuffer(device.handle, info, None)
        except (vk.VkErrorOutOfDeviceMemory, vk.VkErrorOutOfHostMemory) as exc:
            raise DeviceError(
                f"{device.name}: cannot create {name or 'a buffer'} of "
                f"{self.size:,} bytes (out of memory)"
            ) from exc
        needs = vk.vkGetBufferMemoryRequirements(device.handle, self.handle)
        heap = device.heap_size(needs.memoryTypeBits, host_visible)
        if needs.size > heap:
            vk.vkDestroyBuffer(device.handle, self.handle, None)
            raise DeviceError(
                f"{device.name}: {name or 'a buffer'} needs {needs.size:,} bytes, "
                f"more than its memory heap holds ({heap:,})"
            )
        if host_visible:
            # Cached memory makes downloads fast where the device offers it.
            host = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
            memory_type = device.memory_type(
                needs.memoryTypeBits, host, vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT
            )
        else:
            memory_type = device.memory_type(
                needs.memoryTypeBits, vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
            )
        alloc = vk.VkMemoryAllocateInfo(allocationSize=needs.size, memoryTypeIndex=memory_type)
        try:
            self.memory = vk.vkAllocateMemory(device.handle, alloc, None)
        except (vk.VkErrorOutOfDeviceMemory, vk.VkErrorOutOfHostMemory) as exc:
            vk.vkDestroyBuffer(device.handle, self.handle, None)
            raise DeviceError(
                f"{device.name}: out of memory allocating {self.size:,} bytes"
                f" for {name or 'a buffer'}"
            ) from exc
        vk.vkBindBufferMemory(device.handle, self.handle, self.memory, 0)
        self._mapped: memoryview | None = None
        # What the contents were last made from (write_once, holds): read-only arrays, weakly
        # referenced, and the part of them written.
        self._holds: tuple[tuple[weakref.ref[np.ndarray], ...], Hashable] | None = None

    def mapped(self) -> memoryview:
        """The whole buffer as writable host memory (staging buffers only)."""
        if not self.host_visible:
            raise ValueError("only host-visible buffers can be mapped")
        if self._mapped is None:
            with interrupts_deferred():  # kept before a Ctrl-C unwinds: mapped twice otherwise
                self._mapped = vk.vkMapMemory(self.device.handle, self.memory, 0, self.size, 0)
        return self._mapped

    def view(self, dtype: numpy.typing.DTypeLike, shape: tuple[int, ...]) -> np.ndarray:
        """The start of the mapped memory as a writable array of `shape` (host-visible buffers
        only): for data made straight into it, with forget() and made_from() around."""
        mapped = self._mapped if self._mapped is not None else self.mapped()
        return np.frombuffer(mapped, dtype, math.prod(shape)).reshape(shape)

    def write_once(self, data: np.ndarray) -> None:
        """write(data), unless the last write was of this very array and it is read-only (a
        per-mesh cache's: host-visible buffers a shader reads as they are, rewritten only
        when the data changes)."""
        if not self.holds((data,)):
            self.write(data)
            self.made_from((data,))

    def holds(self, sources: tuple[np.ndarray, ...], part: Hashable = None) -> bool:
        """Whether the contents are still what was made from these very arrays (and `part`
        of them) when `made_from` was last called with them: only read-only arrays count (a
        per-mesh cache's, which nobody changes), and any write since forgets them."""
        held = self._holds
        if held is None or held[1] != part or len(held[0]) != len(sources):
            return False
        for ref, array in zip(held[0], sources):  # (a loop: asked several times a call)
            if ref() is not array or array.flags.writeable:
                return False
        return True

    def made_from(self, sources: tuple[np.ndarray, ...], part: Hashable = None) -> None:
        """Note that the contents were just made from `sources` (`part` of them), for `holds`;
        writable sources are not noted (they may change)."""
        refs = []
        for array in sources:
            if array.flags.writeable:
                self._holds = None
                return
            refs.append(weakref.ref(array))
        self._holds = (tuple(refs), part)

    def forget(self) -> None:
        """The contents are about to change by other means than write: `holds` says no."""
        self._holds = None

    def write(self, data: np.ndarray) -> None:
        self._holds = None
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        if raw.size < 1 << 16:
            self.mapped()[: raw.size] = raw.tobytes()
            return
        target = np.frombuffer(self.mapped(), np.uint8, count=raw.size)
        copy_rows(target, raw, min_rows=1 << 22)  # 4 MiB or more per thread

    def read(self, dtype: numpy.typing.DTypeLike, count: int | None = None) -> np.ndarray:
        """A copy of the buffer's contents as a numpy array (a few words, several times a
        call: no dtype object is made where the count is given)."""
        if count is None:
            count = self.size // np.dtype(dtype).itemsize
        mapped = self._mapped if self._mapped is not None else self.mapped()
        return np.frombuffer(mapped, dtype, count).copy()

    def destroy(self) -> None:
        """Free the buffer once the GPU is done with it. Each step forgets its handle before
        the call, so a destroy interrupted half way never frees anything twice."""
        self.device.settle()
        if self._mapped is not None:
            self._mapped = None
            vk.vkUnmapMemory(self.device.handle, self.memory)
        handle, self.handle = self.handle, None
        if handle is not None:
            vk.vkDestroyBuffer(self.device.handle, handle, None)
        memory, self.memory = self.memory, None
        if memory is not None:
            vk.vkFreeMemory(self.device.handle, memory, None)


@dataclass(frozen=True)
class Binding:
    """A buffer range bound at one binding of a pipeline's descriptor set."""

    buffer: Buffer
    size: int | None = None  # bytes from `offset`; None binds the rest of the buffer
    # bytes into the buffer; a multiple of the device's storage offset alignment (256 or
    # less on every Vulkan device: callers pass multiples of 4 KiB)
    offset: int = 0


class BufferPool:
    """Grow-only named buffers reused across voxelizations, so repeated calls allocate nothing."""

    def __init__(self, device: Device):
        self.device = device
        self._buffers: dict[str, Buffer] = {}
        # Host milliseconds spent growing buffers so far (freeing the old, allocating and
        # mapping the new): the first-call cost that a repeated call does not pay.
        self.growth_ms = 0.0
        # Counts every buffer the pool has created or destroyed: unchanged, every buffer
        # it handed out is still alive (what a replayed recording needs).
        self.generation = 0
        # sizes() of each kind, as of the generation they were taken at (a stream of calls
        # that grows nothing asks again and again).
        self._sizes: dict[bool, tuple[int, dict[str, int]]] = {}

    def get(
        self, name: str, size: int, usage: Usage = STORAGE, host_visible: bool = False
    ) -> Buffer:
        size = -(-size // 16) * 16  # whole uvec4s: shaders may read and write a last partial quad
        buffer = self._buffers.get(name)
        if buffer is not None and buffer.handle is not None and buffer.size >= size:
            return buffer  # (no handle: a growth was interrupted after the destroy below)
        started = time.perf_counter()
        self.generation += 1
        if buffer is not None:
            buffer.destroy()
        # Grow geometrically so a slowly growing workload does not reallocate every call.
        grown = size if buffer is None else max(size, min(buffer.size * 3 // 2, size * 2))
        with interrupts_deferred():  # in the pool (which destroys it) before a Ctrl-C unwinds
            self._buffers[name] = Buffer(self.device, grown, usage, host_visible, name)
        if host_visible:
            self._buffers[name].mapped()  # (kept mapped: counted as part of the growth)
        self.growth_ms += (time.perf_counter() - started) * 1e3
        return self._buffers[name]

    def capacity(self, name: str) -> int:
        """Bytes the named buffer holds now (0 if there is none): what a caller can use
        without the pool allocating."""
        buffer = self._buffers.get(name)
        return buffer.size if buffer is not None and buffer.handle is not None else 0

    def binding(self, name: str, size: int, usage: Usage = STORAGE) -> Binding:
        """The first `size` bytes of the named buffer (grown if needed), ready to bind: the
        descriptor covers what the pass uses, not what the buffer grew to."""
        return Binding(self.get(name, size, usage), size)

    def sizes(self, host_visible: bool) -> dict[str, int]:
        """Bytes of every buffer held now (all of them are held at once: this is the peak), a
        dict of the caller's own."""
        taken = self._sizes.get(host_visible)
        if taken is None or taken[0] != self.generation:
            sizes = {
                name: buffer.size
                for name, buffer in self._buffers.items()
                if buffer.host_visible == host_visible
            }
            taken = self._sizes[host_visible] = (self.generation, sizes)
        return dict(taken[1])

    def destroy(self) -> None:
        self.generation += 1
        for buffer in self._buffers.values():
            buffer.destroy()
        self._buffers.clear()
