"""Vulkan functions called through cffi directly, where the host cost of a call matters.

The `vulkan` package's wrapper of a function converts every argument in Python on every call
(its `_callApi`): a few microseconds a call, paid twice a submission (the submit and the
wait). A `VulkanCall` calls the cffi function itself, with arguments the caller keeps alive
(cdata made once), and raises for a VkResult as the wrapper does.

Whoever replaces the wrapper in the `vulkan` module (a fault injected by a test, a call
traced) still sees every call: while the module's function is not the wrapper the package
defined, the call goes through the replacement, with the same arguments.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from .loader import load_vulkan

# Where the `vulkan` package defines its wrappers: the package itself only re-exports them,
# and a replacement is set on the package.
_WRAPPERS_MODULE = "vulkan._vulkan"


class VulkanCall:
    """One Vulkan function: `call(*args)` raises the `vulkan` module's exception for a
    VkResult other than VK_SUCCESS; `raw` is the cffi function (its VkResult returned)."""

    __slots__ = ("_module", "_wrapper", "name", "raw")

    def __init__(self, name: str):
        module = load_vulkan()
        self.name = name
        self.raw: Callable[..., int] = getattr(module.lib, name)
        self._module = module
        self._wrapper = getattr(importlib.import_module(_WRAPPERS_MODULE), name)

    @property
    def replaced(self) -> Callable[..., Any] | None:
        """The function set in the wrapper's place in the `vulkan` module, if any."""
        function = getattr(self._module, self.name)
        return None if function is self._wrapper else function

    def __call__(self, *args: Any) -> None:
        function = getattr(self._module, self.name)
        if function is not self._wrapper:
            function(*args)
            return
        result = self.raw(*args)
        if result != 0:  # VK_SUCCESS
            raise self._module.exception_codes[result]
