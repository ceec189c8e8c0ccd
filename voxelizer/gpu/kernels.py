"""Kernel declarations: the interface of each compute shader, written once, in Python.

A `Kernel` names a shader source (shaders/<source>.comp), the storage buffers it binds
(name -> binding slot), its push-constant fields in order, the defines that select its
variant, and whether its GLSL takes another shape on a CPU device (`cpu_shaped`). The host
derives the descriptor-set layout and the push-constant size from it, packs push values by
name, and checks every dispatch's buffers by name, so no slot number or byte count is typed
at a call site. tests/gpu/test_kernels.py checks every declaration against its preprocessed
GLSL, for every define combination the host compiles.

Names mirror the GLSL: a binding is the buffer block's name in snake_case (`buffer TileCounts`
-> "tile_counts"), a push field is the member's name and a field's type the GLSL type name.
"""

from __future__ import annotations

import dataclasses
import itertools
import struct
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from .device import Device
from .loader import vk

# Every shader includes shaders/common.glsl, which reads these two defines.
WG_SIZE = 256  # threads per 1-D workgroup
TILE_SHIFT = 2  # tiles of 4 x 4 columns
COMMON_DEFINES: Mapping[str, int] = MappingProxyType({"WG_SIZE": WG_SIZE, "TILE_SHIFT": TILE_SHIFT})

# GLSL scalar types a push constant may hold -> their struct format (all 4 bytes, std430
# alignment 4, so the fields of a push block follow each other without padding).
SCALAR_FORMATS: Mapping[str, str] = MappingProxyType({"uint": "I", "int": "i", "float": "f"})


# The keys of subgroup_defines: each a device path that is on (1) or off (0).
SUBGROUP_FLAGS = ("SUBGROUP_SCAN", "SHARED_RECORDS")


def subgroup_choices() -> list[dict[str, int]]:
    """Every value subgroup_defines can return, for builds that must serve any device."""
    return [
        dict(zip(SUBGROUP_FLAGS, bits))
        for bits in itertools.product((0, 1), repeat=len(SUBGROUP_FLAGS))
    ]


def subgroup_defines(device: Device) -> dict[str, int]:
    """The subgroup paths a device can take (shaders/scan.comp, shaders/fill.comp)."""
    return {
        "SUBGROUP_SCAN": int(device.has_subgroup(vk.VK_SUBGROUP_FEATURE_ARITHMETIC_BIT)),
        "SHARED_RECORDS": int(
            device.has_subgroup(vk.VK_SUBGROUP_FEATURE_BALLOT_BIT) and device.subgroup_size >= 8
        ),
    }


def cpu_defines(device: Device) -> dict[str, int]:
    """CPU_DEVICE, 1 on a device of type CPU (lavapipe), for the kernels declared cpu_shaped:
    such a driver compiles each kernel on the host at its first dispatch, and they take shapes
    that compile to less code there (shaders/common.glsl)."""
    return {"CPU_DEVICE": int(device.is_cpu)}


def cpu_choices() -> list[dict[str, int]]:
    """Every value cpu_defines can return, for builds that must serve any device."""
    return [{"CPU_DEVICE": 0}, {"CPU_DEVICE": 1}]


@dataclasses.dataclass(frozen=True)
class Struct:
    """A GLSL struct of scalars inside a push-constant block, e.g. Window (common.glsl).

    Its value at a dispatch is a mapping of every member's name to a number, or a dataclass
    whose fields are exactly the members (so a host type that mirrors the struct is passed
    as is)."""

    name: str
    fields: tuple[tuple[str, str], ...]  # (member, GLSL scalar type), in declaration order

    def __post_init__(self) -> None:
        _check_fields(self.name, self.fields, allow_structs=False)

    def values(self, value: object) -> list[int | float]:
        """The members' values in declaration order; any missing or extra name is an error."""
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        if not isinstance(value, Mapping):
            raise TypeError(f"{self.name}: expected a mapping or a dataclass, not {value!r}")
        names = [name for name, _ in self.fields]
        if value.keys() != set(names):
            raise ValueError(_mismatch(f"struct {self.name}", "members", value.keys(), names))
        return [value[name] for name in names]


FieldType = str | Struct  # a GLSL scalar type name, or a struct of them


class Kernel:
    """One compute shader as the host sees it: source, bindings, push constants, defines."""

    def __init__(
        self,
        source: str,
        bindings: Mapping[str, int],
        push: tuple[tuple[str, FieldType], ...] = (),
        defines: Mapping[str, int] | None = None,
        cpu_shaped: bool = False,
    ):
        self.source = source
        # Compiled with the device's CPU_DEVICE too (cpu_defines): its GLSL has a CPU shape.
        self.cpu_shaped = cpu_shaped
        self.bindings: Mapping[str, int] = MappingProxyType(dict(bindings))
        self.push = tuple(push)
        self.defines: Mapping[str, int] = MappingProxyType(dict(defines or {}))
        if len(set(self.bindings.values())) != len(self.bindings):
            raise ValueError(f"{self.label}: two buffers share a binding slot")
        _check_fields(self.label, self.push, allow_structs=True)
        self._push_names = frozenset(name for name, _ in self.push)
        formats = "".join(
            "".join(SCALAR_FORMATS[t] for _, t in kind.fields)
            if isinstance(kind, Struct)
            else SCALAR_FORMATS[kind]
            for _, kind in self.push
        )
        self._packer = struct.Struct("<" + formats)

    @property
    def label(self) -> str:
        """The source and its own defines, e.g. "setup(INDEXED=1)": names the pipeline."""
        if not self.defines:
            return self.source
        return f"{self.source}({', '.join(f'{k}={v}' for k, v in self.defines.items())})"

    def __repr__(self) -> str:
        return f"Kernel({self.label})"

    @property
    def push_size(self) -> int:
        """Bytes of the push-constant block."""
        return self._packer.size

    def compile_defines(self, shared: Mapping[str, int]) -> dict[str, int]:
        """Every define the source is compiled with: `shared` (the family's: work-group size,
        variant, device paths) plus the kernel's own. A clash is an error, so a declaration
        made for one variant (INDEXED=0) is never compiled as another."""
        for name, value in self.defines.items():
            if shared.get(name, value) != value:
                raise ValueError(f"{self.label}: built with {name}={shared[name]}")
        return {**shared, **self.defines}

    def pack(self, values: Mapping[str, object]) -> bytes:
        """The push-constant bytes of the named values; a missing or extra name is an error."""
        if values.keys() != self._push_names:
            names = [name for name, _ in self.push]
            raise ValueError(_mismatch(self.label, "push constants", values.keys(), names))
        flat: list = []
        for name, kind in self.push:
            if isinstance(kind, Struct):
                flat += kind.values(values[name])
            else:
                flat.append(values[name])
        return self._packer.pack(*flat)

    def check_bindings(self, names: Mapping[str, object]) -> None:
        """Raise unless `names` are exactly the declared buffers."""
        if names.keys() != self.bindings.keys():
            raise ValueError(_mismatch(self.label, "bindings", names.keys(), self.bindings))


def _check_fields(owner: str, fields: tuple, allow_structs: bool) -> None:
    seen: set[str] = set()
    for name, kind in fields:
        if name in seen:
            raise ValueError(f"{owner}: field {name!r} declared twice")
        seen.add(name)
        if not (kind in SCALAR_FORMATS or (allow_structs and isinstance(kind, Struct))):
            raise ValueError(f"{owner}: field {name!r} has unsupported type {kind!r}")


def _mismatch(owner: str, what: str, given: Iterable[str], declared: Iterable[str]) -> str:
    missing = [name for name in declared if name not in given]
    extra = sorted(name for name in given if name not in declared)
    return f"{owner}: {what} missing {missing}, unexpected {extra}"
