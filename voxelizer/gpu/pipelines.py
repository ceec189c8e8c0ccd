"""Compute pipelines: a declared kernel (gpu/kernels.py) built on a device when first used.

A driver does its heavy work in vkCreateComputePipelines (a GPU driver compiles the SPIR-V
there; lavapipe translates it there and compiles it for the CPU at the kernel's first
dispatch, first_dispatches.FirstDispatches), and a job uses only some of a family's kernels (one of the
two sorts, the soup or the indexed setup), so the Vulkan objects are made when first needed,
not with the family: at the first dispatch, or before it on a background thread
(first_dispatches.build_in_background) while the host reads and checks the mesh.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ShaderError, VoxelizerError
from ..interrupts import interrupts_deferred
from .compiler import spirv_module
from .device import Device
from .kernels import Kernel, cpu_defines
from .loader import vk


@dataclass(frozen=True)
class _Objects:
    module: Any
    set_layout: Any
    layout: Any
    pipeline: Any


class ComputePipeline:
    """A kernel on a device: its SPIR-V module, a descriptor-set layout with one storage
    buffer per declared binding, its push-constant range and the pipeline, made on first use
    (`handle`, `layout`, `set_layout`). `shared_defines` are those of the kernel's family
    (work-group size, variant, device paths); the kernel adds its own, and the device's
    CPU_DEVICE where it is declared cpu_shaped."""

    def __init__(self, device: Device, kernel: Kernel, shared_defines: Mapping[str, int]):
        self.device = device
        self.kernel = kernel
        self.name = kernel.label
        self.bindings = kernel.bindings  # buffer name -> binding slot
        self.push_constant_size = kernel.push_size
        if kernel.cpu_shaped:
            shared_defines = {**shared_defines, **cpu_defines(device)}
        self.defines = kernel.compile_defines(shared_defines)  # a clash is an error now
        self._objects: _Objects | None = None
        self._destroyed = False
        self._lock = threading.Lock()
        # Clear while a background thread is to give the pipeline its first dispatch
        # (first_dispatches.FirstDispatches): a call's dispatch waits for it to be submitted first.
        self._no_first_dispatch_due = threading.Event()
        self._no_first_dispatch_due.set()

    @property
    def built(self) -> bool:
        """Whether the Vulkan objects exist (the kernel has been dispatched)."""
        return self._objects is not None

    @property
    def module_size(self) -> int:
        """Bytes of the kernel's SPIR-V (0 where there is none to read): what the driver
        compiles, and about in proportion to the time it takes."""
        try:
            return len(spirv_module(self.kernel.source, self.defines))
        except ShaderError:
            return 0

    @property
    def handle(self) -> Any:
        return self._built().pipeline

    @property
    def layout(self) -> Any:
        return self._built().layout

    @property
    def set_layout(self) -> Any:
        return self._built().set_layout

    def first_dispatch_due(self, due: bool) -> None:
        """Whether a background thread is to submit this pipeline's first dispatch."""
        if due:
            self._no_first_dispatch_due.clear()
        else:
            self._no_first_dispatch_due.set()

    def wait_for_first_dispatch(self) -> None:
        """Wait until no background thread is still to submit this pipeline's first dispatch,
        so that a call's dispatch comes after it on the queue (and after its compile)."""
        self._no_first_dispatch_due.wait()

    def build(self) -> None:
        """Make the Vulkan objects now, if not yet (a ShaderError if the module is bad)."""
        self._built()

    def _built(self) -> _Objects:
        objects = self._objects
        if objects is None:
            with self._lock:
                if self._destroyed:
                    raise VoxelizerError(f"pipeline {self.name} used after it was destroyed")
                if self._objects is None:
                    with interrupts_deferred():  # stored before a Ctrl-C unwinds
                        self._objects = self._create()
                objects = self._objects
        return objects

    def _create(self) -> _Objects:
        spirv = spirv_module(self.kernel.source, self.defines)
        handle = self.device.handle
        made: list[tuple[Any, Any]] = []  # (destroy function, object), undone on failure
        try:
            # Every create-info below stays bound to a local until its call returns: cffi
            # frees nested temporaries early otherwise.
            module_info = vk.VkShaderModuleCreateInfo(codeSize=len(spirv), pCode=spirv)
            module = vk.vkCreateShaderModule(handle, module_info, None)
            made.append((vk.vkDestroyShaderModule, module))

            layout_bindings = [
                vk.VkDescriptorSetLayoutBinding(
                    binding=b,
                    descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                    descriptorCount=1,
                    stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT,
                )
                for b in sorted(self.bindings.values())
            ]
            set_info = vk.VkDescriptorSetLayoutCreateInfo(
                flags=vk.VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR
                if self.device.push_descriptors
                else 0,
                bindingCount=len(layout_bindings),
                pBindings=layout_bindings,
            )
            set_layout = vk.vkCreateDescriptorSetLayout(handle, set_info, None)
            made.append((vk.vkDestroyDescriptorSetLayout, set_layout))

            size = self.push_constant_size
            push_range = vk.VkPushConstantRange(
                stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT, offset=0, size=size
            )
            layout_info = vk.VkPipelineLayoutCreateInfo(
                setLayoutCount=1,
                pSetLayouts=[set_layout],
                pushConstantRangeCount=1 if size else 0,
                pPushConstantRanges=[push_range] if size else None,
            )
            layout = vk.vkCreatePipelineLayout(handle, layout_info, None)
            made.append((vk.vkDestroyPipelineLayout, layout))

            stage = vk.VkPipelineShaderStageCreateInfo(
                stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=module, pName="main"
            )
            pipeline_info = vk.VkComputePipelineCreateInfo(stage=stage, layout=layout)
            pipeline = vk.vkCreateComputePipelines(handle, None, 1, [pipeline_info], None)[0]
        except BaseException as exc:  # an error or an interrupt: leave nothing behind
            for destroy, thing in reversed(made):
                destroy(handle, thing, None)
            if isinstance(exc, vk.VkError):
                raise ShaderError(
                    f"{self.device.name} cannot build {self.name} ({type(exc).__name__})"
                ) from exc
            raise
        return _Objects(module, set_layout, layout, pipeline)

    def destroy(self) -> None:
        with self._lock:
            self._destroyed = True
            objects, self._objects = self._objects, None
        if objects is not None:
            self.device.settle()
            device = self.device.handle
            vk.vkDestroyPipeline(device, objects.pipeline, None)
            vk.vkDestroyPipelineLayout(device, objects.layout, None)
            vk.vkDestroyDescriptorSetLayout(device, objects.set_layout, None)
            vk.vkDestroyShaderModule(device, objects.module, None)
