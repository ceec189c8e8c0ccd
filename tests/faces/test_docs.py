"""What a user copies runs: every ```python and ```bash block of README.md and docs/**/*.md
(one test per page: its python blocks in order in one namespace, its bash blocks with the
venv's commands on PATH, in a fresh directory holding `models/` and a `shared/` link to the
shared models), every script in examples/ and the example notebook, all with the validation
layer on. A failure names the page and the line of the block (tests/faces/doc_blocks.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..helpers import PROJECT_MODELS, SHARED_MODELS
from .doc_blocks import KNOWN, RUN, code_blocks

ROOT = PROJECT_MODELS.parent
RUNNER = Path(__file__).with_name("doc_blocks.py")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
NOTEBOOKS = sorted((ROOT / "examples").glob("*.ipynb"))
RUNNABLE = [page for page in PAGES if any(b.language in RUN for b in code_blocks(page))]
LIMIT_S = 600  # per page, script or notebook: each takes seconds on lavapipe


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _environment() -> dict[str, str]:
    """This venv's commands first on PATH (`voxelize`, `python`), the validation layer on."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["VOXELIZER_VALIDATION"] = "1"
    return env


def _assert_clean(done: subprocess.CompletedProcess[str], what: str) -> None:
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{what} failed (exit {done.returncode}):\n{output}"
    assert "vulkan validation:" not in output, f"{what}: the validation layer reported:\n{output}"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """Where a page's blocks run: a copy of the bundled models and a link to the shared ones."""
    shutil.copytree(PROJECT_MODELS, tmp_path / "models")
    (tmp_path / "shared").symlink_to(SHARED_MODELS, target_is_directory=True)
    return tmp_path


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_blocks_name_a_language_that_is_run_or_plainly_not(page: Path) -> None:
    """A block without a language, or with another spelling of one that runs (py, sh,
    console), would silently not run: each names python, bash, or one of the kinds that are
    not programs (text, json, ...)."""
    unknown = [
        f"{b.line}: {b.language or '(none)'}" for b in code_blocks(page) if b.language not in KNOWN
    ]
    assert not unknown, f"{_name(page)}: blocks of no known language at lines {unknown}"


@pytest.mark.parametrize("page", RUNNABLE, ids=_name)
def test_python_blocks_are_python(page: Path) -> None:
    for block in code_blocks(page):
        if block.language == "python":
            compile("\n" * block.line + block.code, _name(page), "exec")


@pytest.mark.slow
@pytest.mark.parametrize("page", RUNNABLE, ids=_name)
def test_page_runs(page: Path, workdir: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(page), _name(page)],
        cwd=workdir, env=_environment(), capture_output=True, text=True, timeout=LIMIT_S,
    )  # fmt: skip
    _assert_clean(done, _name(page))


def test_a_page_runs_in_a_process_of_its_own_and_its_shell_keeps_its_environment(
    tmp_path: Path,
) -> None:
    """What a page's python blocks put in os.environ (ray.init leaves RAY_AUTH_MODE=token
    there) stays in that page's process: the test process, and with it the pages and tests
    that come later, never sees it; nor do the page's own bash blocks, which stand for the
    reader's shell."""
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nimport os\nos.environ['VOXELIZER_DOCS_PROBE'] = 'set'\n```\n\n"
        "```python\nassert os.environ['VOXELIZER_DOCS_PROBE'] == 'set'\n```\n\n"
        '```bash\ntest -z "${VOXELIZER_DOCS_PROBE-}"\n```\n'
    )
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(page), "page.md"],
        cwd=tmp_path, env=_environment(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    _assert_clean(done, "page.md")
    assert "VOXELIZER_DOCS_PROBE" not in os.environ


def test_there_is_an_example_per_recipe_and_a_notebook() -> None:
    assert len(EXAMPLES) >= 5, [_name(p) for p in EXAMPLES]
    assert len(NOTEBOOKS) >= 1
    for script in EXAMPLES:
        text = script.read_text()
        assert text.startswith('"""'), f"{_name(script)}: say what it shows in a docstring"
        assert 'if __name__ == "__main__":' in text, _name(script)


@pytest.mark.slow
@pytest.mark.parametrize("script", EXAMPLES, ids=_name)
def test_example_runs(script: Path, tmp_path: Path) -> None:
    """From the project root, as the README says, without arguments: it writes under a new
    temporary folder (TMPDIR: this test's own)."""
    env = {**_environment(), "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=LIMIT_S,
    )  # fmt: skip
    _assert_clean(done, _name(script))


def test_notebooks_are_stored_without_outputs() -> None:
    """What runs is what is stored: no stale outputs in the repository."""
    for notebook in NOTEBOOKS:
        cells = json.loads(notebook.read_text())["cells"]
        stored = [i for i, c in enumerate(cells) if c.get("outputs") or c.get("execution_count")]
        assert not stored, f"{_name(notebook)}: cells {stored} hold outputs"


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=_name)
def test_notebook_runs(notebook: Path, tmp_path: Path) -> None:
    """Executed by a real Jupyter kernel (ipykernel, through nbclient), from the project root;
    it writes under a temporary directory of its own."""
    script = f"""
import nbformat
from nbclient import NotebookClient
notebook = nbformat.read({str(notebook)!r}, as_version=4)
NotebookClient(notebook, timeout={LIMIT_S}, kernel_name="python3",
               resources={{"metadata": {{"path": {str(ROOT)!r}}}}}).execute()
nbformat.write(notebook, {str(tmp_path / "executed.ipynb")!r})
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path, env=_environment(), capture_output=True, text=True, timeout=LIMIT_S,
    )  # fmt: skip
    _assert_clean(done, _name(notebook))
    executed = json.loads((tmp_path / "executed.ipynb").read_text())
    for cell in executed["cells"]:
        for output in cell.get("outputs", []):
            text = "".join(output.get("text", ""))
            assert "vulkan validation:" not in text, text
