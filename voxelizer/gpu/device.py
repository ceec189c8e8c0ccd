"""Vulkan instance and device: pick a physical device, open one compute queue.

Device choice: a discrete GPU first, then integrated, virtual, CPU (lavapipe), then the rest;
`VOXELIZER_DEVICE` or the `device` argument picks one by index (as `voxelize --list-devices`
prints) or by a case-insensitive substring of its name.

`VOXELIZER_VALIDATION=1` enables the Khronos validation layer; every message it reports is
kept in `Device.validation_messages` (the test suite fails on any).

Where the device has VK_KHR_push_descriptor (lavapipe and the desktop GPU drivers do), it is
enabled: a dispatch then pushes its buffers into the command buffer instead of allocating and
writing a descriptor set (gpu/commands.py). `VOXELIZER_PUSH_DESCRIPTORS=0` turns that off
(descriptor sets, as on a device without it).

Vulkan objects belong to the process that created them: a forked child cannot use the
parent's (the driver's threads did not come along, so waits hang) and must not destroy them.
After a fork the child forgets the shared instance, and objects of the parent refuse to close
there; the child creates its own.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any

from ..errors import DeviceError
from ..log import get_logger
from .loader import vk

_log = get_logger(__name__)
VALIDATION_LAYER = "VK_LAYER_KHRONOS_validation"
PUSH_DESCRIPTOR_EXTENSION = "VK_KHR_push_descriptor"


def _device_types() -> list[tuple[int, str]]:
    """(VkPhysicalDeviceType, name) in order of preference; read from the module when needed,
    since importing it needs the Vulkan loader."""
    return [
        (vk.VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, "discrete GPU"),
        (vk.VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU, "integrated GPU"),
        (vk.VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU, "virtual GPU"),
        (vk.VK_PHYSICAL_DEVICE_TYPE_CPU, "CPU"),
    ]


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    kind: str
    driver_version: int
    api_version: str

    def __str__(self) -> str:
        return f"[{self.index}] {self.name} ({self.kind}, Vulkan {self.api_version})"


def validation_requested() -> bool:
    return os.environ.get("VOXELIZER_VALIDATION", "") not in ("", "0")


def push_descriptors_allowed() -> bool:
    return os.environ.get("VOXELIZER_PUSH_DESCRIPTORS", "") != "0"


class Instance:
    """The Vulkan instance, created once per process and shared by every Device."""

    _shared: Instance | None = None
    _lock = threading.Lock()
    # A device of a driver not known to survive fork was opened in this process (or in the
    # one it was forked from): a forked child must not touch Vulkan (see _forget_after_fork).
    fork_unsafe = False

    @classmethod
    def shared(cls) -> Instance:
        with cls._lock:
            return cls._shared_locked()

    @classmethod
    def _shared_locked(cls) -> Instance:
        if cls._shared is None:
            if _forked_from_vulkan and cls.fork_unsafe:
                raise DeviceError(
                    "this process was forked from one that used a Vulkan driver that does not "
                    "survive fork (opening a device here can fail or hang in the driver): start "
                    "the workers with 'spawn' or 'forkserver' (a DataLoader: "
                    "multiprocessing_context='spawn')"
                )
            cls._shared = cls(validation_requested())
            atexit.register(cls._shared.close)  # runs after the Voxelizers' handlers
        return cls._shared

    @classmethod
    def hold(cls) -> Instance:
        """The shared instance, counted as in use by a device from before it is opened until
        release(): close() leaves it alone meanwhile, so the exit of a process that is still
        opening a device on another thread does not destroy the instance under that thread."""
        with cls._lock:
            instance = cls._shared_locked()
            if instance.handle is None:
                raise DeviceError("the Vulkan instance is closed (the process is exiting)")
            instance.open_devices += 1
            return instance

    def release(self) -> None:
        with Instance._lock:
            self.open_devices -= 1

    def __init__(self, validation: bool):
        self.validation = validation
        self.pid = os.getpid()
        self.messages: list[str] = []
        self.open_devices = 0
        layers, extensions = [], []
        if validation:
            available = {layer.layerName for layer in vk.vkEnumerateInstanceLayerProperties()}
            if VALIDATION_LAYER not in available:
                raise DeviceError(
                    f"VOXELIZER_VALIDATION is set but {VALIDATION_LAYER} is not installed "
                    "(Debian: apt-get install vulkan-validationlayers)"
                )
            layers = [VALIDATION_LAYER]
            extensions = [vk.VK_EXT_DEBUG_UTILS_EXTENSION_NAME]
        app = vk.VkApplicationInfo(
            pApplicationName="voxelizer",
            applicationVersion=1,
            pEngineName="voxelizer",
            engineVersion=1,
            apiVersion=vk.VK_MAKE_VERSION(1, 2, 0),
        )
        info = vk.VkInstanceCreateInfo(
            pApplicationInfo=app,
            enabledLayerCount=len(layers),
            ppEnabledLayerNames=layers or None,
            enabledExtensionCount=len(extensions),
            ppEnabledExtensionNames=extensions or None,
        )
        try:
            self.handle = vk.vkCreateInstance(info, None)
        except vk.VkError as exc:
            raise DeviceError(
                f"cannot create a Vulkan instance ({type(exc).__name__}); "
                "is a Vulkan driver installed?"
            ) from exc
        # The validation layer's messenger, and what it holds (kept alive as long as it).
        self._messenger: Any = None
        self._callback: Any = None
        self._messenger_info: Any = None
        if validation:
            self._callback, self._messenger_info, self._messenger = self._new_messenger()

    def _new_messenger(self) -> tuple[Any, Any, Any]:
        """(the Python callable, the create info, the messenger) of a messenger that keeps
        and prints every warning and error the validation layer reports."""

        def on_message(severity: int, types: int, data: Any, user_data: Any) -> int:
            text = vk.ffi.string(data.pMessage).decode(errors="replace")
            self.messages.append(text)
            print(f"vulkan validation: {text}", file=sys.stderr)
            return vk.VK_FALSE

        create = vk.vkGetInstanceProcAddr(self.handle, "vkCreateDebugUtilsMessengerEXT")
        info = vk.VkDebugUtilsMessengerCreateInfoEXT(
            messageSeverity=vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT
            | vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
            messageType=vk.VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT
            | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT
            | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
            pfnUserCallback=on_message,
        )
        return on_message, info, create(self.handle, info, None)

    def close(self) -> None:
        """Destroy the instance (after every Device); the layer reports leaks on the way."""
        with Instance._lock:
            if self.handle is None or self.open_devices or self.pid != os.getpid():
                return  # a Device open or opening, or the parent's instance after a fork
            if self._messenger is not None:
                destroy = vk.vkGetInstanceProcAddr(self.handle, "vkDestroyDebugUtilsMessengerEXT")
                destroy(self.handle, self._messenger, None)
                self._messenger = None
            vk.vkDestroyInstance(self.handle, None)
            self.handle = None

    def physical_devices(self) -> list:
        return list(vk.vkEnumeratePhysicalDevices(self.handle))


def _describe(index: int, physical: Any) -> DeviceInfo:
    props = vk.vkGetPhysicalDeviceProperties(physical)
    api = props.apiVersion
    return DeviceInfo(
        index=index,
        name=props.deviceName,
        kind=dict(_device_types()).get(props.deviceType, "other"),
        driver_version=props.driverVersion,
        api_version=f"{vk.VK_VERSION_MAJOR(api)}.{vk.VK_VERSION_MINOR(api)}.{vk.VK_VERSION_PATCH(api)}",
    )


def list_devices() -> list[DeviceInfo]:
    """Every Vulkan physical device, in the loader's order (the index `device=` takes)."""
    return [_describe(i, pd) for i, pd in enumerate(Instance.shared().physical_devices())]


def _choose(physicals: list, selector: str | int | None) -> int:
    if not physicals:
        raise DeviceError(
            "no Vulkan device found (on Debian without a GPU: "
            "apt-get install libvulkan1 mesa-vulkan-drivers)"
        )
    infos = [_describe(i, pd) for i, pd in enumerate(physicals)]
    if selector is None or selector == "":
        types = [vk.vkGetPhysicalDeviceProperties(pd).deviceType for pd in physicals]
        rank = {device_type: order for order, (device_type, _) in enumerate(_device_types())}
        return min(range(len(physicals)), key=lambda i: (rank.get(types[i], 9), i))
    text = str(selector).strip()
    if text.isdigit():
        index = int(text)
        if index < len(physicals):
            return index
        raise DeviceError(
            f"no Vulkan device with index {index} (there are {len(physicals)}; "
            "see voxelize --list-devices)"
        )
    matches = [info.index for info in infos if text.lower() in info.name.lower()]
    if not matches:
        names = ", ".join(info.name for info in infos)
        raise DeviceError(f"no Vulkan device matches {text!r} (available: {names})")
    return matches[0]


def _survives_fork(physical: Any) -> bool:
    """Whether the device's driver is one of Mesa's: in a process forked after it was used,
    they open a device again (lavapipe, tested); NVIDIA's refused (driver 580, H100) or hung
    there, as CUDA refuses a forked child. Other drivers are not known to, so count as not."""
    driver = vk.VkPhysicalDeviceDriverProperties()
    vk.vkGetPhysicalDeviceProperties2(physical, vk.VkPhysicalDeviceProperties2(pNext=driver))
    mesa = {
        getattr(vk, name)
        for name in dir(vk)
        if name.startswith("VK_DRIVER_ID_MESA_") or name == "VK_DRIVER_ID_INTEL_OPEN_SOURCE_MESA"
    }
    return int(driver.driverID) in mesa


def _subgroup_support(physical: Any) -> tuple[int, int]:
    """(subgroup size, the VK_SUBGROUP_FEATURE_* bits compute shaders may use)."""
    subgroup = vk.VkPhysicalDeviceSubgroupProperties()
    vk.vkGetPhysicalDeviceProperties2(physical, vk.VkPhysicalDeviceProperties2(pNext=subgroup))
    in_compute = subgroup.supportedStages & vk.VK_SHADER_STAGE_COMPUTE_BIT
    return int(subgroup.subgroupSize), int(subgroup.supportedOperations) if in_compute else 0


def _chosen_physical(instance: Instance, selector: str | int | None) -> tuple[Any, DeviceInfo]:
    """The physical device `selector` names (None: $VOXELIZER_DEVICE, else the preferred
    kind) and its description; the choice and why go to the log."""
    why = f"device={selector!r}"
    if selector is None:
        selector = os.environ.get("VOXELIZER_DEVICE") or None
        why = f"$VOXELIZER_DEVICE={selector!r}"
    physicals = instance.physical_devices()
    index = _choose(physicals, selector)
    info = _describe(index, physicals[index])
    if selector is None or selector == "":
        why = f"preference (discrete, integrated, virtual GPU, CPU) of {len(physicals)}"
    _log.info("device: %s, chosen by %s", info, why)
    return physicals[index], info


def _compute_queue_family(physical: Any, name: str) -> tuple[int, int]:
    """(the first queue family with compute, its timestamps' valid bits); DeviceError for a
    device without shaderInt64 (the exact predicates need it) or without compute."""
    features = vk.vkGetPhysicalDeviceFeatures(physical)
    if not features.shaderInt64:
        raise DeviceError(f"{name} lacks shaderInt64, which the exact predicates need")
    families = vk.vkGetPhysicalDeviceQueueFamilyProperties(physical)
    compute = [i for i, f in enumerate(families) if f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT]
    if not compute:
        raise DeviceError(f"{name} has no compute queue")
    return compute[0], int(families[compute[0]].timestampValidBits)


def _create_device(physical: Any, name: str, queue_family: int, extensions: list[str]) -> Any:
    """A logical device with one queue of `queue_family`, shaderInt64 and `extensions`."""
    priorities = vk.ffi.new("float[]", [1.0])
    queue_info = vk.VkDeviceQueueCreateInfo(
        queueFamilyIndex=queue_family, queueCount=1, pQueuePriorities=priorities
    )
    enabled = vk.VkPhysicalDeviceFeatures(shaderInt64=vk.VK_TRUE)
    info = vk.VkDeviceCreateInfo(
        queueCreateInfoCount=1,
        pQueueCreateInfos=[queue_info],
        pEnabledFeatures=enabled,
        enabledExtensionCount=len(extensions),
        ppEnabledExtensionNames=extensions or None,
    )
    try:
        return vk.vkCreateDevice(physical, info, None)
    except vk.VkError as exc:
        raise DeviceError(f"cannot open {name} ({type(exc).__name__})") from exc


def _push_descriptor_function(handle: Any) -> Any:
    """vkCmdPushDescriptorSetKHR of the device as a plain cffi function, or None."""
    name = b"vkCmdPushDescriptorSetKHR"
    address = vk.lib.vkGetDeviceProcAddr(handle, name)
    if address == vk.ffi.NULL:
        return None
    return vk.ffi.cast(f"PFN_{name.decode()}", address)


class Device:
    """One logical device with one compute queue; owns nothing else."""

    def __init__(self, selector: str | int | None = None):
        self.instance = Instance.hold()
        self.pid = os.getpid()
        self.queue_may_be_busy = False  # set by a submit until its wait returns (see settle)
        self.handle: Any = None
        self._closed = True  # until the device is open
        self._largest_heap: int | None = None  # found when first asked (largest_heap)
        try:
            self.physical, self.info = _chosen_physical(self.instance, selector)
            # One of Mesa's drivers (lavapipe, RADV, ...): they survive a fork, and keep what
            # they compile in a shader cache on disk (first_dispatches.SecondCompiler).
            self.mesa_driver = _survives_fork(self.physical)
            if not self.mesa_driver:
                Instance.fork_unsafe = True
            self.properties: Any = vk.vkGetPhysicalDeviceProperties(self.physical)
            self.limits: Any = self.properties.limits
            self.memory_properties: Any = vk.vkGetPhysicalDeviceMemoryProperties(self.physical)
            self.queue_family, self.timestamp_bits = _compute_queue_family(
                self.physical, self.info.name
            )
            extensions = [PUSH_DESCRIPTOR_EXTENSION] if self._has_push_descriptors() else []
            self.handle = _create_device(
                self.physical, self.info.name, self.queue_family, extensions
            )
            self.queue: Any = vk.vkGetDeviceQueue(self.handle, self.queue_family, 0)
            # Held for every submission to the queue and every wait for it to be idle, which
            # Vulkan requires to be one at a time: the caller's sequence and the first
            # dispatches of a CPU device (first_dispatches.FirstDispatches) submit from two
            # threads.
            self.queue_lock = threading.Lock()
            # vkCmdPushDescriptorSetKHR as a plain cffi function, or None: descriptor sets.
            self.push_descriptor_function: Any = (
                _push_descriptor_function(self.handle) if extensions else None
            )
            self.max_groups_x = min(int(self.limits.maxComputeWorkGroupCount[0]), 65535)
            self.max_groups_y = int(self.limits.maxComputeWorkGroupCount[1])
            self.max_storage_range = int(self.limits.maxStorageBufferRange)
            self.timestamp_period_ns = float(self.limits.timestampPeriod)
            self.subgroup_size, self.subgroup_features = _subgroup_support(self.physical)
        except BaseException:  # an error or a Ctrl-C: nothing left open, the instance let go
            if self.handle is not None:
                vk.vkDestroyDevice(self.handle, None)
            self.instance.release()
            raise
        self._closed = False

    def _has_push_descriptors(self) -> bool:
        """Whether to enable VK_KHR_push_descriptor: the device has it and it is not turned
        off. (It pushes as many buffers as a kernel binds: maxPushDescriptors is at least 32
        by the extension's rules, and a descriptor pool of gpu/commands.py holds 8 per set.)"""
        if not push_descriptors_allowed():
            return False
        names = {
            extension.extensionName
            for extension in vk.vkEnumerateDeviceExtensionProperties(self.physical, None)
        }
        return PUSH_DESCRIPTOR_EXTENSION in names

    @property
    def push_descriptors(self) -> bool:
        """Whether dispatches push their buffers (VK_KHR_push_descriptor) rather than bind
        descriptor sets; descriptor-set layouts are made for one or the other."""
        return self.push_descriptor_function is not None

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def validation_messages(self) -> list[str]:
        return self.instance.messages

    @property
    def is_cpu(self) -> bool:
        """Whether the device is of type CPU (lavapipe): its driver compiles each kernel for
        the host, at the kernel's first dispatch (gpu.kernels.cpu_defines)."""
        return self.info.kind == "CPU"

    def has_subgroup(self, feature: int) -> bool:
        """Whether compute shaders may use a VK_SUBGROUP_FEATURE_* class of operations."""
        return bool(self.subgroup_features & feature)

    def memory_type(self, type_bits: int, required: int, preferred: int = 0) -> int:
        """Index of a memory type allowed by type_bits with the required flags (preferred first)."""
        props = self.memory_properties
        candidates = [
            i
            for i in range(props.memoryTypeCount)
            if type_bits & (1 << i) and props.memoryTypes[i].propertyFlags & required == required
        ]
        if not candidates:
            raise DeviceError(f"{self.name}: no memory type with flags {required:#x}")
        best = [
            i for i in candidates if props.memoryTypes[i].propertyFlags & preferred == preferred
        ]
        return (best or candidates)[0]

    def heap_size(self, type_bits: int, host_visible: bool) -> int:
        """Bytes of the largest heap behind the memory types a buffer could use."""
        flags = (
            vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT
            if host_visible
            else vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
        )
        props = self.memory_properties
        sizes = [
            props.memoryHeaps[props.memoryTypes[i].heapIndex].size
            for i in range(props.memoryTypeCount)
            if type_bits & (1 << i) and props.memoryTypes[i].propertyFlags & flags
        ]
        return max(sizes, default=0)

    def largest_heap(self) -> int:
        """Bytes of the largest device-local memory heap (on a CPU device: host memory);
        found once (every call's plan asks)."""
        if self._largest_heap is None:
            props = self.memory_properties
            sizes = [
                props.memoryHeaps[i].size
                for i in range(props.memoryHeapCount)
                if props.memoryHeaps[i].flags & vk.VK_MEMORY_HEAP_DEVICE_LOCAL_BIT
            ]
            self._largest_heap = int(max(sizes, default=0))
        return self._largest_heap

    def check_open(self) -> None:
        """DeviceError once closed: a Vulkan call on a destroyed device ends the process."""
        if self._closed:
            raise DeviceError("this device is closed")

    def wait_idle(self) -> None:
        self.check_open()
        with self.queue_lock:
            vk.vkDeviceWaitIdle(self.handle)

    def settle(self) -> None:
        """Wait for work that an interrupted submit may have left on the queue (Ctrl-C between
        submit and wait), so that nothing the GPU still uses is reset, rewritten or destroyed.
        A flag check when nothing was interrupted."""
        self.check_open()
        if self.queue_may_be_busy:
            with self.queue_lock:
                vk.vkQueueWaitIdle(self.queue)
            self.queue_may_be_busy = False

    def close(self) -> None:
        if self.pid != os.getpid():
            self._closed = True  # the parent's device, inherited by fork: not ours to destroy
        if not self._closed:
            self._closed = True
            with self.queue_lock:
                vk.vkDeviceWaitIdle(self.handle)
            vk.vkDestroyDevice(self.handle, None)
            self.instance.release()


_forked_from_vulkan = False  # this process was forked from one holding a Vulkan instance


def vulkan_instance_exists() -> bool:
    """Whether this process holds a Vulkan instance (then a driver may have threads and state
    that a fork would copy half-way: reading processes are started by exec instead)."""
    return Instance._shared is not None


def _forget_after_fork() -> None:
    """In a forked child: drop the parent's instance without a Vulkan call (it cannot be used
    here), and replace the lock another thread may have held at the fork. Whether the child
    may create its own depends on the parent's driver (Instance.fork_unsafe)."""
    global _forked_from_vulkan
    _forked_from_vulkan = _forked_from_vulkan or Instance._shared is not None
    Instance._shared = None
    Instance._lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
