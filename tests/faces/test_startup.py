"""What a process pays before it voxelizes: `import voxelizer`, `voxelize --help` and
`--version` import neither trimesh, scipy, vulkan nor ray, and a voxelization starts no
subprocess (no compiler run, no version query) and writes no cache of voxelizer's own.
Each case runs in a fresh interpreter, since this one has imported everything already."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..helpers import PROJECT_MODELS

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("trimesh", "scipy", "vulkan", "ray")
_BOX_VERTICES = "0 0 0\n1 0 0\n1 1 0\n0 1 0\n0 0 1\n1 0 1\n1 1 1\n0 1 1\n"
_BOX_FACES = [(0, 2, 1), (0, 3, 2), (4, 5, 6), (4, 6, 7), (0, 1, 5), (0, 5, 4)]
_BOX_FACES += [(1, 2, 6), (1, 6, 5), (2, 3, 7), (2, 7, 6), (3, 0, 4), (3, 4, 7)]
BOX_FILES = {
    "ply": (
        "ply\nformat ascii 1.0\nelement vertex 8\nproperty float x\nproperty float y\n"
        "property float z\nelement face 12\nproperty list uchar int vertex_indices\nend_header\n"
        + _BOX_VERTICES
        + "".join(f"3 {a} {b} {c}\n" for a, b, c in _BOX_FACES)
    ).encode(),
    "obj": (
        "".join(f"v {row}\n" for row in _BOX_VERTICES.splitlines())
        + "".join(f"f {a + 1} {b + 1} {c + 1}\n" for a, b, c in _BOX_FACES)
    ).encode(),
    "off": (
        "OFF\n8 12 0\n" + _BOX_VERTICES + "".join(f"3 {a} {b} {c}\n" for a, b, c in _BOX_FACES)
    ).encode(),
}
_CORNERS = [row.split() for row in _BOX_VERTICES.splitlines()]
BOX_FILES["stl"] = (
    "solid box\n"
    + "".join(
        "facet normal 0 0 0\nouter loop\n"
        + "".join(f"vertex {' '.join(_CORNERS[i])}\n" for i in face)
        + "endloop\nendfacet\n"
        for face in _BOX_FACES
    )
    + "endsolid box\n"
).encode()
"""Small files of a closed box (12 triangles) in every format these tests read."""

REPORT_HEAVY = f"""
import json, sys
print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}} & {set(HEAVY)!r})))
"""


def _python(code: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,  # this checkout's voxelizer
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def _heavy(result: subprocess.CompletedProcess[str]) -> list[str]:
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_import_voxelizer_imports_no_heavy_package(tmp_path: Path) -> None:
    result = _python("import voxelizer\n" + REPORT_HEAVY, tmp_path)
    assert _heavy(result) == []


@pytest.mark.parametrize("extension", ["ply", "stl", "obj"])
def test_reading_ply_stl_and_obj_imports_no_heavy_package(tmp_path: Path, extension: str) -> None:
    """PLY, STL and OBJ have native readers: the command line's usual path needs no trimesh."""
    path = tmp_path / f"box.{extension}"
    path.write_bytes(BOX_FILES[extension])
    code = f"import voxelizer\nprint(len(voxelizer.load_mesh({str(path)!r}).faces))\n"
    result = _python(code + REPORT_HEAVY, tmp_path)
    assert result.stdout.splitlines()[0] == "12"
    assert _heavy(result) == []


def test_the_heavy_packages_are_there_to_be_imported(tmp_path: Path) -> None:
    """The checks above can fail: a format of trimesh's own (OFF) does import trimesh."""
    path = tmp_path / "box.off"
    path.write_bytes(BOX_FILES["off"])
    code = f"import voxelizer\nvoxelizer.load_mesh({str(path)!r})\n"
    assert "trimesh" in _heavy(_python(code + REPORT_HEAVY, tmp_path))


# Modules only some runs use: each format's reader and writer, the converters to other
# libraries, the voxels' surface mesh.
ON_USE = (
    "voxelizer.io.binvox_file",
    "voxelizer.io.vox_file",
    "voxelizer.io.vox_writer",
    "voxelizer.io.vti_file",
    "voxelizer.io.svo_file",
    "voxelizer.io.npz_file",
    "voxelizer.io.mesh_writer",
    "voxelizer.convert",
    "voxelizer.surface",
    "fractions",
    # the triangle grids, the store of --format zarr, the preview and slice writers (and
    # the renderer), the worker processes of several devices
    "voxelizer.trigrid",
    "voxelizer.io.zarr_store",
    "voxelizer.io.preview",
    "voxelizer.io.slices",
    "voxelizer.render",
    "voxelizer.batch.pool",
    "voxelizer.batch.worker_processes",
    "multiprocessing",
)


def test_the_command_imports_the_formats_it_uses_only(tmp_path: Path) -> None:
    """`import voxelizer.cli` imports no format's module, no converter; writing .npz files
    imports the .npz module and no other format's."""
    report = "import sys, json\nprint(json.dumps(sorted(set(ON_USE) & set(sys.modules))))\n"
    setup = f"ON_USE = {ON_USE!r}\n"
    imported = _python(setup + "import voxelizer.cli\n" + report, tmp_path)
    assert json.loads(imported.stdout.strip().splitlines()[-1]) == []
    path = tmp_path / "box.ply"
    path.write_bytes(BOX_FILES["ply"])
    batch = (
        "from voxelizer.cli import main\n"
        f"assert main([{str(path)!r}, '--out-dir', {str(tmp_path / 'out')!r}, '--format', "
        "'npz', '--grid', '8', '--quiet']) == 0\n"
    )
    written = _python(setup + batch + report, tmp_path)
    assert json.loads(written.stdout.strip().splitlines()[-1]) == ["voxelizer.io.npz_file"]


BATCH_MACHINERY = (
    "voxelizer.batch.engine",
    "voxelizer.batch.worker",
    "voxelizer.batch.pool",
    "voxelizer.batch.worker_processes",
    "voxelizer.batch.readers",
    "voxelizer.batch.ray",
)


def test_one_mesh_imports_no_batch_machinery(tmp_path: Path) -> None:
    """`import voxelizer`, `import voxelizer.cli` and a single voxelization by the command
    import none of the batch's engine, workers, processes or reading helpers; a batch does."""
    report = (
        "import sys, json\n"
        f"print(json.dumps(sorted(set({BATCH_MACHINERY!r}) & set(sys.modules))))\n"
    )
    path = tmp_path / "box.ply"
    path.write_bytes(BOX_FILES["ply"])
    single = (
        "import voxelizer, voxelizer.cli\n"
        f"assert voxelizer.cli.main([{str(path)!r}, '--grid', '8', '--quiet']) == 0\n"
    )
    assert json.loads(_python(single + report, tmp_path).stdout.splitlines()[-1]) == []
    batch = (
        "import voxelizer\n"
        f"assert all(r.ok for r in voxelizer.voxelize_many([{str(path)!r}], grid=8))\n"
    )
    imported = json.loads(_python(batch + report, tmp_path).stdout.splitlines()[-1])
    assert "voxelizer.batch.engine" in imported and "voxelizer.batch.ray" not in imported


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_import_no_heavy_package(tmp_path: Path, flag: str) -> None:
    code = (
        f"""
from voxelizer.cli import main
try:
    main([{flag!r}])
except SystemExit as exit:
    assert exit.code == 0, exit.code
"""
        + REPORT_HEAVY
    )
    result = _python(code, tmp_path)
    assert _heavy(result) == []
    assert "voxelize" in result.stdout


def test_a_voxelization_starts_no_process_and_writes_no_cache(tmp_path: Path) -> None:
    code = f"""
import subprocess
import voxelizer

def refuse(*args, **kwargs):
    raise AssertionError(f"a subprocess was started: {{args}}")

subprocess.Popen.__init__ = refuse
svo = voxelizer.voxelize({str(PROJECT_MODELS / "gear.ply")!r}, 16)
print(svo.count())
"""
    cache = tmp_path / "cache"
    result = _python(code, tmp_path, XDG_CACHE_HOME=str(cache))
    assert int(result.stdout.split()[-1]) > 0
    assert not (cache / "voxelizer").exists()


def test_the_command_on_ply_stl_and_obj_imports_neither_trimesh_nor_scipy(tmp_path: Path) -> None:
    runs = []
    for extension in ("ply", "stl", "obj"):
        path = tmp_path / f"box.{extension}"
        path.write_bytes(BOX_FILES[extension])
        runs.append(
            [str(path), "--grid", "16", "-o", str(tmp_path / f"{extension}.svo"), "--quiet"]
        )
    code = (
        f"""
from voxelizer.cli import main
for args in {runs!r}:
    try:
        main(args)
    except SystemExit as exit:
        assert exit.code in (0, None), exit.code
"""
        + REPORT_HEAVY
    )
    result = _python(code, tmp_path)
    assert all((tmp_path / f"{ext}.svo").stat().st_size > 0 for ext in ("ply", "stl", "obj"))
    assert _heavy(result) == ["vulkan"]


# What only the device's work needs: the API's Voxelizer, the pipeline and its kernels'
# compiler, the attributes' passes, the batch's worker, and the Vulkan binding.
DEVICE_MODULES = (
    "voxelizer.api",
    "voxelizer.api_runs",
    "voxelizer.pipeline.runner",
    "voxelizer.pipeline.passes",
    "voxelizer.pipeline.fills",
    "voxelizer.gpu.commands",
    "voxelizer.gpu.compiler",
    "voxelizer.attributes.run",
    "voxelizer.batch.worker",
    "vulkan",
)
REPORT_DEVICE_MODULES = f"""
import json, sys
print(json.dumps(sorted(set({DEVICE_MODULES!r}) & set(sys.modules))))
"""


def test_import_voxelizer_imports_the_errors_and_the_vocabulary_only(tmp_path: Path) -> None:
    """`import voxelizer` imports neither numpy nor the device's modules: every other name
    comes on first use."""
    code = "import sys, voxelizer\nprint('numpy' in sys.modules)\n" + REPORT_DEVICE_MODULES
    result = _python(code, tmp_path)
    assert result.stdout.splitlines()[0] == "False"
    assert json.loads(result.stdout.splitlines()[-1]) == []


def test_import_voxelizer_cli_imports_none_of_the_devices_modules(tmp_path: Path) -> None:
    result = _python("import voxelizer.cli\n" + REPORT_DEVICE_MODULES, tmp_path)
    assert json.loads(result.stdout.splitlines()[-1]) == []


def test_every_public_name_is_there_on_first_use(tmp_path: Path) -> None:
    """Each name of voxelizer.__all__ resolves in a fresh process (and `import *` takes them
    all); the function mesh_warnings stays the package's name once its module is imported;
    a subpackage the package used to import resolves too."""
    code = """
import voxelizer
missing = [name for name in voxelizer.__all__ if getattr(voxelizer, name, None) is None]
namespace = {}
exec("from voxelizer import *", namespace)
import voxelizer.api
print(missing, sorted(set(voxelizer.__all__) - set(namespace)),
      callable(voxelizer.mesh_warnings), voxelizer.io.load is voxelizer.load,
      voxelizer.Voxelizer is voxelizer.api.Voxelizer)
"""
    result = _python(code, tmp_path)
    assert result.stdout.split() == ["[]", "[]", "True", "True", "True"]


def test_the_checks_can_fail(tmp_path: Path) -> None:
    """The reports above name what is imported: the API's name imports the device's modules."""
    code = "import voxelizer\nvoxelizer.Voxelizer\n" + REPORT_DEVICE_MODULES
    imported = json.loads(_python(code, tmp_path).stdout.splitlines()[-1])
    assert set(imported) >= {"voxelizer.api", "voxelizer.pipeline.runner", "voxelizer.gpu.commands"}
