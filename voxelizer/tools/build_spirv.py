"""Build the SPIR-V shipped in the package: `python -m voxelizer.tools.build_spirv` (needs
glslang: pip install -e '.[dev]').

Every module the package can request, enumerated from the kernel declarations: each family of
kernels (the passes, the SVO build, the face gather, the winding fill, the scan) with every
set of shared defines its builder uses (each variant, each subgroup configuration a device
can have), each kernel adding its own defines (and a cpu_shaped kernel CPU_DEVICE 0 and 1: GPU and CPU devices). Identical
modules (defines that a source never reads) are stored once, named by their SHA-256;
voxelizer/spirv/manifest.json maps each (source, defines) to its file with the digests
gpu/compiler.py checks at run time. Run it again after editing or merging any shader;
`--check` compares the shipped files with a fresh build instead of writing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..choices import VARIANTS
from ..gpu import scan
from ..gpu.compiler import (
    GLSLANG_FLAGS,
    MANIFEST,
    MANIFEST_FORMAT,
    define_key,
    find_glslang,
    run_glslang,
    shader_dir,
    shipped_dir,
    source_digest,
)
from ..gpu.kernels import COMMON_DEFINES, Kernel, cpu_choices, subgroup_choices
from ..pipeline import kernels
from ..pipeline.kernels import pass_defines
from ..pipeline.winding import winding_defines
from ..trigrid import kernels as trigrid_kernels


@dataclass(frozen=True)
class Family:
    """Kernels built together, and every set of shared defines their builder passes."""

    name: str
    kernels: tuple[Kernel, ...]
    shared: tuple[Mapping[str, int], ...]


def families() -> tuple[Family, ...]:
    subgroups = subgroup_choices()
    return (
        Family(
            "passes",  # kernels.PassPipelines, surface_pass.SurfacePipelines
            kernels.PASS_KERNELS,
            tuple(pass_defines(variant, groups) for variant in VARIANTS for groups in subgroups),
        ),
        Family(
            "sparse",  # the binning kernels and sparse_pass.SparsePipelines, coarser lattice
            (*kernels.SPARSE_BINNING_KERNELS, *kernels.SPARSE_KERNELS),
            tuple(
                pass_defines(variant, groups, shift)
                for variant in kernels.SPARSE_VARIANTS
                for groups in subgroups
                for shift in kernels.LATTICE_SHIFTS
            ),
        ),
        Family("svo", kernels.SVO_KERNELS, (dict(COMMON_DEFINES),)),  # svo_build.SVOPipelines
        # face_ids.FaceGather
        Family("faces", kernels.FACE_GATHER_KERNELS, (dict(COMMON_DEFINES),)),
        Family(
            "winding", kernels.WINDING_KERNELS, (winding_defines(),)
        ),  # winding.WindingPipelines
        Family(
            "trigrid",  # trigrid.build.GridEngine
            trigrid_kernels.TRIGRID_KERNELS,
            tuple(trigrid_kernels.trigrid_defines(b) for b in trigrid_kernels.BRANCHLESS_CHOICES),
        ),
        Family(
            "scan",  # gpu.scan.Scan
            (scan.SCAN_BLOCKS, scan.ADD_BLOCK_OFFSETS),
            tuple(scan.scan_defines(groups) for groups in subgroups),
        ),
    )


def requested_modules() -> list[tuple[str, dict[str, int]]]:
    """(source, full defines) of every module the package can request, each once, sorted:
    a cpu_shaped kernel's both with CPU_DEVICE 0 and 1. A shared set that clashes with a
    kernel's own defines (INDEXED=1 for the soup setup) is a build the host never makes."""
    found: dict[tuple[str, str], dict[str, int]] = {}
    for family in families():
        for kernel in family.kernels:
            for shared in family.shared:
                if all(shared.get(name, value) == value for name, value in kernel.defines.items()):
                    for cpu in cpu_choices() if kernel.cpu_shaped else [{}]:
                        defines = kernel.compile_defines({**shared, **cpu})
                        found[kernel.source, define_key(defines)] = defines
    return [(source, found[source, key]) for source, key in sorted(found)]


def compiler_version(compiler: str) -> str:
    """glslang's version line (recorded in the manifest: its output is reproducible for one
    version, so tests/gpu/test_spirv.py compares bytes only with that version)."""
    result = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60)
    return result.stdout.strip().splitlines()[0] if result.stdout.strip() else "unknown"


@dataclass(frozen=True)
class Build:
    """A fresh build: the manifest and the module bytes by file name."""

    manifest: dict
    files: dict[str, bytes]


def read_defines(directory: Path, source: str, defines: Mapping[str, int]) -> tuple:
    """The defines that shaders/<source>.comp or a .glsl it may include names at all: the
    others cannot change what the preprocessor passes on, so builds that agree on these give
    the same module (glslang writes no define into it)."""
    text = "\n".join(
        (directory / name).read_text(encoding="utf-8")
        for name in [f"{source}.comp", *sorted(os.listdir(directory))]
        if name == f"{source}.comp" or name.endswith(".glsl")
    )
    return tuple(sorted((k, v) for k, v in defines.items() if re.search(rf"\b{k}\b", text)))


def build(jobs: int | None = None) -> Build:
    """Compile every requested module from shaders/ with glslang: once per source and the
    defines it reads, with the full defines of the first request of each group."""
    directory = shader_dir()
    requests = requested_modules()
    compiler = find_glslang()
    digests = {source: source_digest(directory, source) for source in {s for s, _ in requests}}
    groups: dict[tuple, tuple[str, dict[str, int]]] = {}
    for source, defines in requests:
        groups.setdefault((source, read_defines(directory, source, defines)), (source, defines))
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        compiled = dict(
            zip(groups, pool.map(lambda request: run_glslang(directory, *request), groups.values()))
        )
    modules = [compiled[source, read_defines(directory, source, d)] for source, d in requests]
    files: dict[str, bytes] = {}
    entries = []
    for (source, defines), spirv in zip(requests, modules):
        sha = hashlib.sha256(spirv).hexdigest()
        name = f"{source}-{sha[:16]}.spv"
        files[name] = spirv
        entries.append(
            {
                "source": source,
                "defines": defines,
                "file": name,
                "size": len(spirv),
                "sha256": sha,
                "glsl_sha256": digests[source],
            }
        )
    manifest = {
        "format": MANIFEST_FORMAT,
        "compiler": compiler_version(compiler),
        "flags": list(GLSLANG_FLAGS),
        "modules": entries,
    }
    return Build(manifest, files)


def write(result: Build, folder: Path) -> None:
    """Replace the shipped modules in `folder` by `result` (the manifest last)."""
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.spv"):
        if stale.name not in result.files:
            stale.unlink()
    for name, spirv in result.files.items():
        path = folder / name
        if not path.is_file() or path.read_bytes() != spirv:
            path.write_bytes(spirv)
    (folder / MANIFEST).write_text(manifest_text(result.manifest), encoding="utf-8")


def manifest_text(manifest: dict) -> str:
    """The manifest as JSON with one module per line (short, and diffs read well)."""
    head = {key: value for key, value in manifest.items() if key != "modules"}
    lines = [json.dumps(module, sort_keys=True) for module in manifest["modules"]]
    body = ",\n  ".join(lines)
    return json.dumps(head, sort_keys=True)[:-1] + f', "modules": [\n  {body}\n]}}\n'


def differences(result: Build, folder: Path) -> list[str]:
    """How the modules shipped in `folder` differ from a fresh build (empty: none)."""
    found = []
    try:
        shipped = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [f"cannot read {folder / MANIFEST}: {exc}"]
    if shipped != result.manifest:
        found.append(f"{folder / MANIFEST} differs from a fresh build")
    present = {path.name for path in folder.glob("*.spv")}
    for name in sorted(present - result.files.keys()):
        found.append(f"{name} is not part of the build")
    for name, spirv in sorted(result.files.items()):
        path = folder / name
        if name not in present:
            found.append(f"{name} is missing")
        elif path.read_bytes() != spirv:
            found.append(f"{name} differs from a fresh build")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m voxelizer.tools.build_spirv", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", type=Path, default=shipped_dir(), help="default: %(default)s")
    parser.add_argument(
        "--check", action="store_true", help="compare with a fresh build; write nothing"
    )
    parser.add_argument("--jobs", type=int, default=None, help="glslang runs at once")
    args = parser.parse_args(argv)
    result = build(args.jobs)
    total = sum(len(spirv) for spirv in result.files.values())
    summary = (
        f"{len(result.manifest['modules'])} modules, {len(result.files)} distinct, "
        f"{total:,} bytes ({result.manifest['compiler']})"
    )
    if args.check:
        found = differences(result, args.out)
        for line in found:
            print(f"build_spirv: {line}", file=sys.stderr)
        if found:
            print(f"build_spirv: run python -m voxelizer.tools.build_spirv to update {args.out}")
            return 1
        print(f"{args.out}: up to date, {summary}")
        return 0
    write(result, args.out)
    print(f"{args.out}: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
