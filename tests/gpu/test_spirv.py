"""The SPIR-V shipped in voxelizer/spirv/: built from the current GLSL, byte for byte what
glslang makes of it, exactly the modules the kernels can request; checked before any driver
sees it, so damaged files and cache entries are one-line ShaderErrors or a recompile, and a
Voxelizer works again afterwards."""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import pkgutil
import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

import voxelizer.gpu
import voxelizer.pipeline
from voxelizer import ShaderError, Voxelizer
from voxelizer.choices import SORTS, VARIANTS
from voxelizer.gpu import compiler, pipelines
from voxelizer.gpu.kernels import SUBGROUP_FLAGS, Kernel, subgroup_defines
from voxelizer.io import load_mesh
from voxelizer.log import LOGGER_NAME
from voxelizer.mesh import Mesh
from voxelizer.reference.surface import voxelize_surface_reference
from voxelizer.tools import build_spirv

from ..helpers import (
    assert_one_line_error,
    assert_same_voxels,
    load_model,
    model_path,
    reference_grid,
    run_cli,
)

MODEL = "gear.ply"  # one of the project's models
GRID = 16


def gear() -> Path:
    return model_path(MODEL)


def shipped_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "spirv"
    shutil.copytree(compiler.shipped_dir(), folder)
    return folder


def shaders_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "shaders"
    shutil.copytree(compiler.shader_dir(), folder)
    return folder


def no_glslang(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """As on a user's machine: no GLSL compiler anywhere."""
    monkeypatch.setenv("VOXELIZER_GLSLANG", str(tmp_path / "no-such-glslangValidator"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))
    assert compiler.glslang_or_none() is None


def assert_exact(vox: Voxelizer) -> None:
    grid = vox.voxelize_dense(gear(), GRID)
    assert_same_voxels(grid.to_numpy(), reference_grid(MODEL, GRID).to_numpy())


def manifest() -> dict:
    return json.loads((compiler.shipped_dir() / compiler.MANIFEST).read_text())


# -- what is shipped ---------------------------------------------------------------------------


def test_the_manifest_covers_exactly_the_modules_the_kernels_can_request() -> None:
    requested = {(s, compiler.define_key(d)) for s, d in build_spirv.requested_modules()}
    listed = [(m["source"], compiler.define_key(m["defines"])) for m in manifest()["modules"]]
    assert len(listed) == len(set(listed)), "a module is listed twice"
    assert set(listed) == requested
    # Every variant and every subgroup configuration, for the passes and the scan.
    for variant, variant_defines in VARIANTS.items():
        for bits in ((0, 0), (0, 1), (1, 0), (1, 1)):
            wanted = {**variant_defines, **dict(zip(SUBGROUP_FLAGS, bits))}
            fills = [d for s, d in build_spirv.requested_modules() if s == "fill"]
            assert any(wanted.items() <= d.items() for d in fills), (variant, bits)


def test_every_kernel_the_package_declares_is_in_a_family() -> None:
    """A kernel declared outside the families would never be shipped: found by walking
    every module of voxelizer.gpu and voxelizer.pipeline."""
    declared: dict[int, str] = {}
    for package in (voxelizer.gpu, voxelizer.pipeline):
        for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                if isinstance(value, Kernel):
                    declared[id(value)] = f"{info.name}.{name}"
    in_families = {id(k) for family in build_spirv.families() for k in family.kernels}
    assert len(declared) >= 20
    missing = sorted(name for key, name in declared.items() if key not in in_families)
    assert not missing, f"kernels no family builds: {missing}"


def test_the_device_asks_for_one_of_the_shipped_subgroup_configurations(gpu: Voxelizer) -> None:
    assert tuple(subgroup_defines(gpu.device)) == SUBGROUP_FLAGS


def test_the_shipped_modules_come_from_the_current_glsl() -> None:
    """Fast (no compiler): a shader edited without rerunning the build step fails here."""
    stale = sorted(
        {
            m["source"]
            for m in manifest()["modules"]
            if m["glsl_sha256"] != compiler.source_digest(compiler.shader_dir(), m["source"])
        }
    )
    assert not stale, f"run python -m voxelizer.tools.build_spirv: {stale} changed since the build"


def test_the_shipped_files_match_the_manifest_and_stay_small() -> None:
    folder = compiler.shipped_dir()
    entries = manifest()["modules"]
    files = {m["file"] for m in entries}
    assert {p.name for p in folder.glob("*.spv")} == files, "a file is missing or left over"
    for entry in entries:
        spirv = (folder / entry["file"]).read_bytes()
        assert len(spirv) == entry["size"]
        assert hashlib.sha256(spirv).hexdigest() == entry["sha256"]
        assert compiler.check_spirv(spirv) is None
    total = sum(p.stat().st_size for p in folder.iterdir())
    # 2.05 MiB with the exact near-tie path of the solid fill (shaders/fine.glsl, about 28 kB
    # in each of the 14 distinct fill modules and 5 kB in setup and emit); 2.45 MiB with the
    # CPU shapes of the fill and SVO kernels (10 more modules, CPU_DEVICE in common.glsl)
    assert total < 2.6 * 1024 * 1024, f"{total:,} bytes shipped"


@pytest.mark.slow
def test_a_fresh_build_gives_the_shipped_bytes() -> None:
    """glslang's output depends on its version only (not on paths or the order of builds),
    so with the version that built the manifest every module must come out byte-equal."""
    fresh = build_spirv.build()
    assert fresh.manifest["compiler"] == manifest()["compiler"], (
        "glslang differs from the one that built voxelizer/spirv "
        "(pip install -e '.[dev]' installs the pinned one)"
    )
    assert build_spirv.differences(fresh, compiler.shipped_dir()) == []


def test_one_build_per_distinct_source_text_gives_what_every_define_set_gives() -> None:
    """build() compiles each source once per set of the defines its GLSL names; the full
    defines of another member of the group give the same bytes (checked on the group with
    most members: the variant and subgroup defines that emit.comp never reads)."""
    directory = compiler.shader_dir()
    emits = [d for s, d in build_spirv.requested_modules() if s == "emit"]
    groups: dict[tuple, list[dict[str, int]]] = {}
    for defines in emits:
        groups.setdefault(build_spirv.read_defines(directory, "emit", defines), []).append(defines)
    members = max(groups.values(), key=len)
    assert len(members) >= 2
    first, last = members[0], members[-1]
    assert compiler.run_glslang(directory, "emit", first) == compiler.run_glslang(
        directory, "emit", last
    )


# -- what a run uses ---------------------------------------------------------------------------


def test_every_module_a_job_requests_is_shipped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Every variant, sort, result kind, fill mode and surface kind on a Voxelizer of its own, with no
    compiler: each module comes from the package, and each is one build_spirv lists."""
    no_glslang(monkeypatch, tmp_path)
    requests: list[tuple[str, str]] = []
    original = pipelines.spirv_module

    def spy(source: str, defines: Mapping[str, int]) -> bytes:
        requests.append((source, compiler.define_key(defines)))
        return original(source, defines)

    monkeypatch.setattr(pipelines, "spirv_module", spy)
    expected = reference_grid(MODEL, GRID).to_numpy()
    with Voxelizer() as vox:
        for variant in VARIANTS:
            for sort in SORTS:
                svo = vox.voxelize(gear(), GRID, variant=variant, sort=sort)
                assert_same_voxels(svo.to_numpy(), expected)
        assert_same_voxels(vox.voxelize_dense(gear(), GRID).to_numpy(), expected)
        for fill_mode in ("vote", "union", "winding"):
            vox.voxelize(gear(), GRID, fill_mode=fill_mode)
        opened = load_mesh(gear())
        opened = Mesh(opened.vertices, opened.faces[8:])  # boundary edges: the curtain kernel
        rounds = vox.voxelize(opened, GRID, fill_mode="winding").stats.counts["winding_rounds"]
        assert rounds >= 3  # runs halved too (winding_bisect)
        for surface in ("conservative", "thin"):
            marked = vox.voxelize_dense(
                gear(), GRID, mode="surface", surface=surface, attributes=["face"]
            )
            want = voxelize_surface_reference(load_model(MODEL), GRID, "surface", surface)
            assert_same_voxels(marked.to_numpy(), want.to_numpy())
            with_ids = vox.voxelize(
                gear(), GRID, mode="surface", surface=surface, attributes=["face"]
            )
            assert_same_voxels(with_ids.to_numpy(), want.to_numpy())
        both = vox.voxelize(gear(), GRID, mode="both")
        assert_same_voxels(
            both.to_numpy(), voxelize_surface_reference(load_model(MODEL), GRID, "both").to_numpy()
        )
        # The sparse path: a grid over 8192 along x (long and thin, so that it is quick on a
        # CPU device; a cube of 16384 asks for the same modules), the gear 14 voxels across.
        box = load_mesh(gear()).bounds
        sides = np.array([16384, 16, 16])
        extent = sides * (box[1] - box[0]).max() / 14
        corner = box.mean(axis=0) - extent / 2
        large = vox.voxelize(gear(), tuple(sides), bounds=[corner, corner + extent])
        assert large.stats.counts["surface_cubes"] > 0
        for levels in (1, 2):  # triangle grids: the cells, the leaves, rays and boxes
            grid = vox.triangle_grid(gear(), levels=levels)
            assert (grid.intersect([[0.6, 0, 100.0]], [[0, 0, -1]])[1] >= 0).all()
            assert grid.any_hit([[0.6, 0, 100.0]], [[0, 0, -1]]).all()
            assert len(grid.triangles_in_box(*load_mesh(gear()).bounds)) == grid.triangle_count
    shipped = {(s, compiler.define_key(d)) for s, d in build_spirv.requested_modules()}
    assert set(requests) <= shipped
    sources = {source for source, _ in requests}
    assert sources == {s for s, _ in shipped}, "some kernel source was never used"


def test_a_normal_run_reads_shipped_modules_and_no_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME), Voxelizer() as vox:
        assert_exact(vox)
    shader = [r.getMessage() for r in caplog.records if r.getMessage().startswith("shader")]
    assert shader and all(m.startswith("shader: shipped ") for m in shader), shader
    assert all(str(compiler.shipped_dir()) in m for m in shader)
    assert not (tmp_path / "cache" / "voxelizer").exists()


def test_an_environment_variable_forces_compiling_from_source(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv(compiler.FORCE_COMPILE_VARIABLE, "1")
    defines = next(d for s, d in build_spirv.requested_modules() if s == "scan")
    shipped = original_shipped("scan", defines)
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
        assert compiler.spirv_module("scan", defines) == shipped
    (miss,) = [r.getMessage() for r in caplog.records if "shader cache: miss" in r.getMessage()]
    assert str(tmp_path) in miss


def original_shipped(source: str, defines: Mapping[str, int]) -> bytes:
    entry = compiler.read_manifest(compiler.shipped_dir()).modules[
        source, compiler.define_key(defines)
    ]
    return (compiler.shipped_dir() / entry.file).read_bytes()


# -- faults ------------------------------------------------------------------------------------


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "bit flip":
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes([data[middle] ^ 0x10]) + data[middle + 1 :])
    elif how == "no magic":
        path.write_bytes(b"\0\0\0\0" + data[4:])
    elif how == "missing":
        path.unlink()
    else:
        raise AssertionError(how)


@pytest.mark.parametrize("how", ["truncated", "bit flip", "no magic", "missing"])
def test_a_damaged_shipped_module_is_a_one_line_shader_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, how: str
) -> None:
    damaged = shipped_copy(tmp_path)
    for path in damaged.glob("*.spv"):
        _damage(path, how)
    monkeypatch.setattr(compiler, "shipped_dir", lambda: damaged)
    with Voxelizer() as vox:
        with pytest.raises(ShaderError) as caught:
            vox.voxelize(gear(), GRID)
        message = str(caught.value)
        assert "shipped SPIR-V" in message and str(damaged) in message, message
        assert "reinstall voxelizer" in message and len(message.splitlines()) == 1
        monkeypatch.undo()  # the package's own files again: the same Voxelizer works
        assert_exact(vox)


def test_a_damaged_manifest_is_a_one_line_shader_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    damaged = shipped_copy(tmp_path)
    (damaged / compiler.MANIFEST).write_text('{"format": 1, "modules": [{"source": ')
    monkeypatch.setattr(compiler, "shipped_dir", lambda: damaged)
    with Voxelizer() as vox:
        with pytest.raises(ShaderError, match="cannot read the shipped SPIR-V manifest") as caught:
            vox.voxelize(gear(), GRID)
        assert len(str(caught.value).splitlines()) == 1
        monkeypatch.undo()
        assert_exact(vox)


def test_the_command_line_reports_a_damaged_module_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from voxelizer.api import close_shared

    damaged = shipped_copy(tmp_path)
    for path in damaged.glob("*.spv"):
        _damage(path, "bit flip")
    close_shared()  # the command's shared Voxelizer builds its kernels anew
    monkeypatch.setattr(compiler, "shipped_dir", lambda: damaged)
    try:
        code, stdout, stderr = run_cli(capsys, gear(), "--grid", GRID, "-o", tmp_path / "x.svo")
        assert_one_line_error(code, stdout, stderr, "is damaged (SHA-256 differs")
        assert not (tmp_path / "x.svo").exists()
    finally:
        close_shared()


def _edit_scan_shader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A developer's checkout: scan.comp edited (a comment: the same kernel), the rest as
    shipped."""
    shaders = shaders_copy(tmp_path)
    with (shaders / "scan.comp").open("a") as file:
        file.write("\n// edited\n")
    monkeypatch.setattr(compiler, "shader_dir", lambda: shaders)
    return shaders


def test_edited_glsl_without_a_compiler_asks_for_the_build_step(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _edit_scan_shader(tmp_path, monkeypatch)
    with Voxelizer() as vox:
        with monkeypatch.context() as without:
            no_glslang(without, tmp_path)
            with pytest.raises(ShaderError) as caught:
                vox.voxelize(gear(), GRID)
        message = str(caught.value)
        assert "shaders/scan.comp" in message and "python -m voxelizer.tools.build_spirv" in message
        assert len(message.splitlines()) == 1
        assert_exact(vox)  # with the compiler back: compiled from the edited source


def test_edited_glsl_is_compiled_and_a_damaged_cache_entry_compiled_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    _edit_scan_shader(tmp_path, monkeypatch)
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME), Voxelizer() as vox:
        assert_exact(vox)
    entries = sorted((cache / "voxelizer" / "spirv").glob("scan-*.bin"))
    assert len(entries) == 2, entries  # the scan's two kernels, nothing else
    messages = [r.getMessage() for r in caplog.records]
    assert any("scan.comp or a .glsl it may include changed" in m for m in messages)
    assert sum(m.startswith("shader cache: compiled and stored") for m in messages) == 2
    good = {path: path.read_bytes() for path in entries}
    for path, data in good.items():
        middle = len(data) // 3
        path.write_bytes(data[:middle] + bytes([data[middle] ^ 1]) + data[middle + 1 :])
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME), Voxelizer() as vox:
        assert_exact(vox)
    messages = [r.getMessage() for r in caplog.records]
    assert sum(m.startswith("shader cache: damaged entry") for m in messages) == 2
    assert {path: path.read_bytes() for path in entries} == good  # replaced by good ones


def test_the_cache_key_needs_no_process(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The compiler is identified by its file (path, size, modification time), so a newer
    glslang gets new cache entries without `glslangValidator --version`."""
    fake = tmp_path / "glslangValidator"
    fake.write_text("#!/bin/sh\nexit 1\n")
    before = compiler.compiler_identity(str(fake))
    fake.write_text("#!/bin/sh\nexit 2\n")
    assert compiler.compiler_identity(str(fake)) != before  # same size, newer file
    assert compiler.compiler_identity(str(fake)).startswith(str(fake.resolve()))


def test_glslang_errors_and_bad_output_are_shader_errors(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    shaders = _edit_scan_shader(tmp_path, monkeypatch)
    (shaders / "scan.comp").write_text("#version 460\nvoid main() { nonsense; }\n")
    defines = next(d for s, d in build_spirv.requested_modules() if s == "scan")
    with pytest.raises(ShaderError, match=r"scan\.comp did not compile"):
        compiler.run_glslang(shaders, "scan", defines)
    writes_garbage = tmp_path / "fake-glslang"
    writes_garbage.write_text('#!/bin/sh\nfor last; do :; done\nprintf "junk" > "$last"\n')
    writes_garbage.chmod(0o755)
    monkeypatch.setenv("VOXELIZER_GLSLANG", str(writes_garbage))
    with pytest.raises(ShaderError, match="wrote a bad module"):
        compiler.run_glslang(compiler.shader_dir(), "scan", defines)


def test_the_build_step_writes_and_checks_a_folder(tmp_path: Path) -> None:
    """write() then differences() round-trip (the shipped files stand for a fresh build);
    a missing and an extra file are reported."""
    shipped = compiler.shipped_dir()
    as_built = build_spirv.Build(
        manifest(), {p.name: p.read_bytes() for p in shipped.glob("*.spv")}
    )
    folder = tmp_path / "out"
    build_spirv.write(as_built, folder)
    assert build_spirv.differences(as_built, folder) == []
    assert (folder / compiler.MANIFEST).read_bytes() == (shipped / compiler.MANIFEST).read_bytes()
    first = sorted(folder.glob("*.spv"))[0]
    first.unlink()
    (folder / "extra.spv").write_bytes(b"x")
    assert build_spirv.differences(as_built, folder) == [
        "extra.spv is not part of the build",
        f"{first.name} is missing",
    ]
