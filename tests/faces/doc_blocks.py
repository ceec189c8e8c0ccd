"""The code blocks of the Markdown pages (README.md, docs/**/*.md), and the script that runs
one page's blocks: ```python blocks in order in one namespace, ```bash blocks with bash
(-e, pipefail) in the environment the page started with (a reader's shell does not see what
a python block put in os.environ: ray.init's RAY_AUTH_MODE, say), all in the working
directory the caller gives (tests/faces/test_docs.py makes one
holding `models/` and `shared/`). ```text and the other languages are not run.

Run as a script: `python tests/faces/doc_blocks.py PAGE.md [NAME]`; it exits 1 at the first block that
fails, naming the page and the block's first line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

RUN = ("python", "bash")  # the languages whose blocks run
# The languages a block may name: a fence without one, or with another spelling of these
# (py, sh, shell, console), would silently not run.
KNOWN = (*RUN, "text", "json", "toml", "yaml", "glsl", "diff")
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def code_blocks(page: Path) -> list[Block]:
    """The fenced blocks of a Markdown page, in order (fences of ``` or ~~~, indented by up
    to three spaces, as CommonMark reads them)."""
    blocks: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        language = opening["info"].strip().split(" ")[0].lower()
        body: list[str] = []
        end = index + 1
        while end < len(lines):
            closing = _FENCE.match(lines[end])
            if (
                closing
                and closing["fence"][0] == fence[0]
                and len(closing["fence"]) >= len(fence)
                and not closing["info"].strip()
            ):
                break
            body.append(lines[end][indent:] if lines[end][:indent].isspace() else lines[end])
            end += 1
        blocks.append(Block(page, index + 1, language, "\n".join(body) + "\n"))
        index = end + 1
    return blocks


def run_page(page: Path, name: str) -> int:
    """Run the page's python and bash blocks in the current directory: 0, or 1 after printing
    where the first failing block starts and why. Tracebacks give the page's own line
    numbers, under `name`."""
    namespace: dict[str, object] = {"__name__": "__main__"}
    shell_environment = dict(os.environ)
    for block in code_blocks(page):
        block = Block(Path(name), block.line, block.language, block.code)
        if block.language == "python":
            try:
                # padded, so that a traceback's line numbers are the page's
                exec(compile("\n" * block.line + block.code, name, "exec"), namespace)
            except BaseException:  # a failing block, whatever it raised, names its place
                print(f"{block.where}: the python block failed:", file=sys.stderr)
                traceback.print_exc()
                return 1
        elif block.language == "bash":
            command = ["bash", "-e", "-o", "pipefail", "-c", block.code]
            done = subprocess.run(command, env=shell_environment)
            if done.returncode != 0:
                print(f"{block.where}: the bash block exited {done.returncode}", file=sys.stderr)
                return 1
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(run_page(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else sys.argv[1]))
