"""Compute pipelines: a declared kernel (gpu/kernels.py) compiled and built on a device."""

from __future__ import annotations

from collections.abc import Mapping

from .compiler import compile_shader
from .device import Device
from .kernels import Kernel
from .loader import vk


class ComputePipeline:
    """A kernel built on a device: its SPIR-V module, a descriptor-set layout with one storage
    buffer per declared binding, and its push-constant range. `shared_defines` are those of
    the kernel's family (work-group size, variant, device paths); the kernel adds its own."""

    def __init__(self, device: Device, kernel: Kernel, shared_defines: Mapping[str, int]):
        self.device = device
        self.kernel = kernel
        self.name = kernel.label
        self.bindings = kernel.bindings  # buffer name -> binding slot
        self.push_constant_size = push_constant_size = kernel.push_size
        spirv = compile_shader(kernel.source, kernel.compile_defines(shared_defines))
        handle = device.handle
        # Every create-info below stays bound to a local until its call returns: cffi frees
        # nested temporaries early otherwise.
        module_info = vk.VkShaderModuleCreateInfo(codeSize=len(spirv), pCode=spirv)
        self.module = vk.vkCreateShaderModule(handle, module_info, None)

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
            bindingCount=len(layout_bindings), pBindings=layout_bindings
        )
        self.set_layout = vk.vkCreateDescriptorSetLayout(handle, set_info, None)

        push_range = vk.VkPushConstantRange(
            stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT, offset=0, size=push_constant_size
        )
        layout_info = vk.VkPipelineLayoutCreateInfo(
            setLayoutCount=1,
            pSetLayouts=[self.set_layout],
            pushConstantRangeCount=1 if push_constant_size else 0,
            pPushConstantRanges=[push_range] if push_constant_size else None,
        )
        self.layout = vk.vkCreatePipelineLayout(handle, layout_info, None)

        stage = vk.VkPipelineShaderStageCreateInfo(
            stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=self.module, pName="main"
        )
        pipeline_info = vk.VkComputePipelineCreateInfo(stage=stage, layout=self.layout)
        self.handle = vk.vkCreateComputePipelines(handle, None, 1, [pipeline_info], None)[0]

    def destroy(self) -> None:
        if self.handle is not None:
            self.device.settle()
            device = self.device.handle
            vk.vkDestroyPipeline(device, self.handle, None)
            vk.vkDestroyPipelineLayout(device, self.layout, None)
            vk.vkDestroyDescriptorSetLayout(device, self.set_layout, None)
            vk.vkDestroyShaderModule(device, self.module, None)
            self.handle = None
