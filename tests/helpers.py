"""What the tests share: where the models are, running the command, reference voxels and their
comparison, random soups and mesh measures, small octrees, written files read back. One copy
here, so that a fix reaches every test.

Test modules import from here (never from conftest.py or from another test module); the
analytic shape builders are in tests/shapes.py.
"""

from __future__ import annotations

import io
import signal
import struct
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import voxelizer
from voxelizer import SVO
from voxelizer.cli import main
from voxelizer.gpu.loader import load_vulkan
from voxelizer.grid import DenseGrid
from voxelizer.io import load_mesh
from voxelizer.mesh import Mesh
from voxelizer.placement import GridPlacement, shape_text
from voxelizer.reference import voxelize_reference

# The Stanford and other shared meshes sit beside the project in a development checkout.
# The first line of a child Python that a test interrupts with SIGINT. Python installs its
# KeyboardInterrupt handler only if SIGINT is not ignored when it starts, and a launcher that
# ignores SIGINT (nohup, a script's background job, some CI runners) hands that on to every
# process it starts: the child sets the handler itself, so the test passes under any launcher.
RESTORE_SIGINT = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
SHARED_MODELS = Path(__file__).resolve().parents[1].parent / "shared" / "models"
PROJECT_MODELS = Path(__file__).resolve().parents[1] / "models"


def shared_model(name: str) -> Path:
    """A shared model's path; a missing one fails loudly instead of skipping tests."""
    path = SHARED_MODELS / name
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: the tests need ../shared/models beside the project"
        )
    return path


def model_path(name: str) -> Path:
    """A model by file name: the project's generated models first, then the shared ones."""
    local = PROJECT_MODELS / name
    return local if local.is_file() else shared_model(name)


@cache
def load_model(name: str) -> Mesh:
    """The loaded mesh, once per test run (a Mesh caches its checks too)."""
    return load_mesh(model_path(name))


@lru_cache(maxsize=16)
def reference_grid(
    name: str, grid: int | tuple[int, int, int], fill_mode: str = "parity"
) -> DenseGrid:
    """The CPU reference of a model, kept for the tests that compare several variants to it.

    Callers must not modify the returned grid's array."""
    return voxelize_reference(load_model(name), grid, fill_mode)


# --- comparing voxels -------------------------------------------------------------------------


def wrong_voxels(got: np.ndarray, expected: np.ndarray) -> tuple[int, int]:
    """(extra, missing): voxels set only in `got`, and only in `expected`."""
    extra = int(np.count_nonzero(got & ~expected))
    missing = int(np.count_nonzero(expected & ~got))
    return extra, missing


def assert_same_voxels(got: np.ndarray, expected: np.ndarray) -> None:
    """Equal bit for bit; a failure says how many voxels are extra and missing."""
    assert got.shape == expected.shape, f"shape {got.shape} != {expected.shape}"
    extra, missing = wrong_voxels(got, expected)
    assert extra == 0 and missing == 0, f"{extra} extra and {missing} missing voxels"


def assert_same_svo(got, expected) -> None:
    """The three SVO arrays are equal: a split or reordered run built the same tree."""
    assert got.level_offsets.tolist() == expected.level_offsets.tolist()
    assert np.array_equal(got.nodes, expected.nodes)
    assert np.array_equal(got.bricks, expected.bricks)


# --- meshes -----------------------------------------------------------------------------------


def random_soup(
    rng: np.random.Generator, n: int, vertices: int, triangles: int, step: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Grid-space float32 vertices in [0, n] and random (possibly open, overlapping or
    degenerate) triangles. With `step`, vertices lie on the 1/step lattice: many land
    exactly on column centres and edges, where the tie rules decide."""
    g = (
        rng.uniform(0, n, (vertices, 3))
        if step is None
        else rng.integers(0, step * n + 1, (vertices, 3)) / step
    )
    return g.astype(np.float32), rng.integers(0, vertices, (triangles, 3))


def signed_volume(vertices: np.ndarray, faces: np.ndarray) -> float:
    """Volume of a closed mesh from its triangles (positive for outward winding)."""
    a, b, c = (vertices[faces[:, i]] for i in range(3))
    return float(np.einsum("ij,ij->", a, np.cross(b, c))) / 6.0


def edge_uses(faces: np.ndarray) -> np.ndarray:
    """How many faces use each undirected edge (all 2 for a closed manifold mesh)."""
    edges = np.sort(np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]]), axis=1)
    return np.unique(edges, axis=0, return_counts=True)[1]


# --- the command line -------------------------------------------------------------------------


def run_cli(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    """`voxelize ARGS` in this process: (exit status, stdout, stderr)."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def cli_usage_error(capsys: pytest.CaptureFixture[str], *args: object) -> str:
    """stderr of `voxelize ARGS`, which must stop with a usage error (status 2, no traceback)."""
    with pytest.raises(SystemExit) as caught:
        main([str(a) for a in args])
    stderr = capsys.readouterr().err
    assert caught.value.code == 2, stderr
    assert "Traceback" not in stderr
    return stderr


def assert_one_line_error(code: int, stdout: str, stderr: str, message: str) -> None:
    """A refused run: status 1, nothing on stdout, one `voxelize: error:` line naming `message`."""
    assert code == 1 and stdout == "", stderr
    assert stderr.startswith("voxelize: error:") and message in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr


# What voxelizer.load gives for each extension, and how such a file starts.
READ_BACK = {".svo": (SVO, b"VOXSVO\r\n"), ".npz": (DenseGrid, b"PK\x03\x04")}


def read_back(path: Path) -> SVO | DenseGrid:
    """A .svo or .npz file that a test had written, loaded again after checking that it is
    there and starts as its format does."""
    kind, magic = READ_BACK[path.suffix]
    assert path.is_file() and path.read_bytes()[: len(magic)] == magic, path
    result = voxelizer.load(path)
    assert isinstance(result, kind), type(result)
    return result


class FakeTerminal(io.StringIO):
    """A stream that says it is (or is not) a terminal, to see the progress line."""

    def __init__(self, tty: bool = True):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


# --- the quick run ----------------------------------------------------------------------------


def quick_diagonal(rows: Sequence[tuple], columns: Sequence[object]) -> list:
    """Every (*row, column) for pytest.mark.parametrize, all but a diagonal marked slow: the
    quick run (-m "not slow") takes every row and every column at least once (row r with
    column r mod len(columns), column c with row c mod len(rows)), the full run every pair."""
    return [
        pytest.param(*row, column)
        if c == r % len(columns) or r == c % len(rows)
        else pytest.param(*row, column, marks=pytest.mark.slow)
        for r, row in enumerate(rows)
        for c, column in enumerate(columns)
    ]


# --- the validation layer -------------------------------------------------------------------


@contextmanager
def new_messages(*, keep: bool = True) -> Iterator[list[str]]:
    """The validation-layer messages reported inside the block (filled in when it ends).

    With keep=False they are removed from the shared log, for tests that provoke them on
    purpose and must not fail the per-test check."""
    from voxelizer.gpu.device import Instance

    log = Instance.shared().messages
    before = len(log)
    found: list[str] = []
    try:
        yield found
    finally:
        found.extend(log[before:])
        if not keep:
            del log[before:]


# --- voxel grids and octrees -------------------------------------------------------------------

# Grid shapes the CPU-side tests run on: cubes and boxes, each side a multiple of 4 from 8.
SHAPES = [(16, 8, 12), (8, 8, 8), (40, 12, 8), (8, 36, 20), (12, 12, 68), (28, 8, 8)]


def placed(voxels: np.ndarray, origin=(0.0, 0.0, 0.0), h: float = 1.0) -> SVO:
    """The octree of a bool (nx, ny, nz) array, its grid corner at `origin`, voxels of side h."""
    return SVO.from_dense(voxels, GridPlacement(voxels.shape, np.array(origin, float), h))


def noisy_blobs(shape, seed: int, count: int = 6) -> np.ndarray:
    """Unions of random boxes (full nodes and mixed bricks), plus noise, of any shape."""
    rng = np.random.default_rng(seed)
    voxels = rng.random(shape) < 0.05
    for _ in range(count):
        lo = rng.integers(0, shape, 3)
        hi = lo + rng.integers(1, max(shape), 3)
        voxels[lo[0] : hi[0], lo[1] : hi[1], lo[2] : hi[2]] = True
    return voxels


def svo_cases() -> Iterator[tuple[str, np.ndarray]]:
    """(name, voxels) of every shape in SHAPES (blobs and noise), plus a full and an empty grid."""
    rng = np.random.default_rng(11)
    for shape in SHAPES:
        yield f"blobs{shape_text(shape)}", noisy_blobs(shape, sum(shape))
        yield f"noise{shape_text(shape)}", rng.random(shape) < 0.3
    yield "full16x8x12", np.ones((16, 8, 12), bool)
    yield "empty8x40x12", np.zeros((8, 40, 12), bool)


# --- MagicaVoxel files, parsed back ------------------------------------------------------------
def read_vox(path) -> dict:
    """The chunks of a .vox file, parsed back: models, scene nodes, palette."""
    data = path.read_bytes()
    assert data[:4] == b"VOX " and struct.unpack_from("<i", data, 4)[0] == 150
    assert data[8:12] == b"MAIN" and struct.unpack_from("<ii", data, 12) == (0, len(data) - 20)
    chunks, at = [], 20
    while at < len(data):
        size, children = struct.unpack_from("<ii", data, at + 4)
        assert children == 0
        chunks.append((data[at : at + 4], data[at + 12 : at + 12 + size]))
        at += 12 + size
    assert at == len(data)

    def read_dict(content, at):
        (count,), at, items = struct.unpack_from("<i", content, at), at + 4, {}
        for _ in range(count):
            pair = []
            for _ in range(2):
                (length,) = struct.unpack_from("<i", content, at)
                pair.append(content[at + 4 : at + 4 + length].decode())
                at += 4 + length
            items[pair[0]] = pair[1]
        return items, at

    out = {"models": [], "nodes": {}, "palette": None}
    for name, content in chunks:
        if name == b"SIZE":
            out["models"].append([struct.unpack("<3i", content), None])
        elif name == b"XYZI":
            (count,) = struct.unpack_from("<i", content)
            assert len(content) == 4 + 4 * count
            out["models"][-1][1] = np.frombuffer(content, np.uint8, 4 * count, 4).reshape(-1, 4)
        elif name in (b"nTRN", b"nGRP", b"nSHP"):
            (node,) = struct.unpack_from("<i", content)
            attributes, at = read_dict(content, 4)
            assert attributes == {}
            if name == b"nTRN":
                child, reserved, _layer, frames = struct.unpack_from("<4i", content, at)
                assert reserved == -1 and frames == 1
                frame, at = read_dict(content, at + 16)
                out["nodes"][node] = ("T", child, frame)
            elif name == b"nGRP":
                (count,) = struct.unpack_from("<i", content, at)
                out["nodes"][node] = ("G", struct.unpack_from(f"<{count}i", content, at + 4))
                at += 4 + 4 * count
            else:
                models, model = struct.unpack_from("<2i", content, at)
                assert models == 1
                _, at = read_dict(content, at + 8)
                out["nodes"][node] = ("S", model)
            assert at == len(content)
        else:
            assert name == b"RGBA" and len(content) == 1024
            out["palette"] = np.frombuffer(content, np.uint8).reshape(256, 4)
    return out


def vox_voxels(parsed: dict, n: int) -> np.ndarray:
    """Voxels placed as the scene graph says: root transform -> group -> transform -> shape;
    a file of one model and no scene graph has the model at 0."""
    if not parsed["nodes"]:
        ((size, xyzi),) = parsed["models"]
        assert (xyzi[:, :3] < size).all() and (xyzi[:, 3] == 1).all()
        voxels = np.zeros((n, n, n), bool)
        voxels[tuple(xyzi[:, :3].T.astype(int))] = True
        return voxels
    kind, group, frame = parsed["nodes"][0]
    assert kind == "T" and frame == {}
    kind, children = parsed["nodes"][group]
    assert kind == "G"
    voxels = np.zeros((n, n, n), bool)
    for child in children:
        kind, shape, frame = parsed["nodes"][child]
        assert kind == "T"
        kind, model = parsed["nodes"][shape]
        assert kind == "S"
        size, xyzi = parsed["models"][model]
        assert max(size) <= 256 and all(s % 2 == 0 for s in size)
        assert (xyzi[:, :3] < size).all() and (xyzi[:, 3] == 1).all()
        low = np.array([int(t) for t in frame["_t"].split()]) - np.array(size) // 2
        cells = low + xyzi[:, :3].astype(int)
        assert not voxels[tuple(cells.T)].any()
        voxels[tuple(cells.T)] = True
    return voxels


# --- time ------------------------------------------------------------------------------------


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise TimeoutError in the test if the body runs longer (a reader that hangs)."""

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def assert_loads_or_names_the_file(path: Path, data: bytes) -> str:
    """`data` written to `path` loads as a mesh with triangles, or raises MeshError in one line
    that starts with the path, within 2 s. The error's text ("" for a mesh that loaded)."""
    path.write_bytes(data)
    with time_limit(2.0):
        try:
            mesh = load_mesh(path)
        except voxelizer.MeshError as exc:
            text = str(exc)
            assert text.startswith(str(path)) and "\n" not in text, text
            return text
    assert isinstance(mesh, Mesh) and mesh.triangle_count > 0
    return ""


def gpu_time_reads(sequence, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sequence's submission count at each read of its timestamps from the device, from
    now on (gpu.commands.GpuTimes reads them when first looked at)."""
    reads: list[int] = []
    timings = sequence._timings

    def counted(labels):  # type: ignore[no-untyped-def]
        reads.append(sequence.submissions)
        return timings(labels)

    monkeypatch.setattr(sequence, "_timings", counted)
    return reads


def fail_once(monkeypatch: pytest.MonkeyPatch, name: str, error: type[Exception]) -> list[int]:
    """The `vulkan` module's function `name` raises `error` at its next call from this
    thread, then works again (a fault injected where every caller of it goes through);
    returns this thread's calls. Other threads (a Voxelizer's kernel builds in the
    background, which submit and wait too) call it unharmed: the fault falls in the call
    under test, however slow the machine."""
    vulkan = load_vulkan()
    real = getattr(vulkan, name)
    calls: list[int] = []
    tested = threading.get_ident()

    def failing(*args):  # type: ignore[no-untyped-def]
        if threading.get_ident() != tested:
            return real(*args)
        calls.append(1)
        if len(calls) == 1:
            raise error()
        return real(*args)

    monkeypatch.setattr(vulkan, name, failing)
    return calls


def in_order(results: Iterable[Any]) -> list[Any]:
    """A batch's results in the inputs' order (they come as they complete)."""
    return sorted(results, key=lambda result: result.index)
