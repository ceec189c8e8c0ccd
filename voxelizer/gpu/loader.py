"""The `vulkan` package, imported on first use rather than with voxelizer.

Importing `vulkan` loads the Vulkan loader library and raises OSError where it is missing, so
importing it with the package would break everything that needs no device (`--help`,
`--version`, reading `.svo` files, the CPU reference). `vk` stands for the module: the first
attribute read imports it, and a missing library becomes a `DeviceError` that says what to
install.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ..errors import DeviceError

VULKAN_LIBRARY = "libvulkan.so.1"
INSTALL_HINT = "Debian: apt-get install libvulkan1 mesa-vulkan-drivers"


def load_vulkan() -> ModuleType:
    """The `vulkan` module, imported now if it is not yet (a DeviceError without the loader)."""
    try:
        import vulkan
    except OSError as exc:
        raise DeviceError(
            f"cannot load the Vulkan loader {VULKAN_LIBRARY}, which every GPU call needs "
            f"({INSTALL_HINT})"
        ) from exc
    return vulkan


class _LazyVulkan:
    """Attribute reads go to the `vulkan` module, imported by the first of them."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        return getattr(load_vulkan(), name)


vk: Any = _LazyVulkan()
