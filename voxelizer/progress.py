"""Progress of long voxelizations: what the pipeline reports (`Progress`), and a line on the
terminal that shows it, for voxelizations long enough to make people wonder."""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from .console import one_line

# Progress of long jobs: (stage, done, total), e.g. ("slabs", 3, 8); the CLI draws it.
Progress = Callable[[str, int, int], None]


class TerminalProgress:
    """A callable (stage, done, total) that keeps one line up to date on a terminal.

    It draws nothing unless the stream is a terminal and `quiet` is off, and nothing before
    the job has run `delay` seconds: short jobs stay silent and piped output stays clean.
    Redraws come at most every `interval` seconds (and whenever the stage changes or ends),
    each one a carriage return and the new text. close() blanks the line, so that whatever is
    printed next starts on a clean line.

    Written here rather than with tqdm or rich: one line redrawn with a carriage return is a
    few dozen lines, and the library should not pull a dependency in for the CLI's sake.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        quiet: bool = False,
        delay: float = 1.0,
        interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        columns: int | None = None,
    ):
        self._stream = sys.stderr if stream is None else stream
        self._enabled = not quiet and _is_terminal(self._stream)
        self._clock = clock
        self._delay, self._interval = delay, interval
        self._start = clock()
        if columns is None:
            columns = shutil.get_terminal_size(fallback=(80, 24)).columns
        self._columns = max(columns - 1, 10)  # a line as wide as the terminal would wrap
        self._lock = threading.Lock()
        self._shown = 0  # characters of the line on screen now
        self._last: tuple[str, float] | None = None  # stage and time of the last redraw
        self._closed = False

    @property
    def enabled(self) -> bool:
        """Whether this display may draw at all (a terminal, not quiet)."""
        return self._enabled

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self._enabled:
            return
        with self._lock:
            now = self._clock()
            if self._closed or now - self._start < self._delay:
                return
            if (
                self._last is not None
                and self._last[0] == stage
                and done < total
                and now - self._last[1] < self._interval
            ):
                return
            self._draw(_line(stage, done, total)[: self._columns])
            self._last = (stage, now)

    def write_above(self, text: str) -> None:
        """Print `text` as a line of its own on the stream, above the progress line: the
        line is blanked first and redrawn by the next update (a batch's errors, warnings).
        A newline or a terminal escape in it (a file name's) is shown escaped (one_line)."""
        with self._lock:
            if self._shown:
                self._stream.write("\r" + " " * self._shown + "\r")
                self._shown = 0
                self._last = None
            self._stream.write(one_line(text) + "\n")
            self._stream.flush()

    def close(self) -> None:
        """Blank the line if one was drawn; later calls draw nothing."""
        with self._lock:
            if self._shown:
                self._stream.write("\r" + " " * self._shown + "\r")
                self._stream.flush()
            self._shown = 0
            self._closed = True

    def __enter__(self) -> TerminalProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _draw(self, text: str) -> None:
        self._stream.write("\r" + text + " " * max(0, self._shown - len(text)))
        self._stream.flush()
        self._shown = len(text)


def _line(stage: str, done: int, total: int) -> str:
    if total > 0:
        return f"{stage}: {100 * done // total:3d}% ({done:,}/{total:,})"
    return f"{stage}: {done:,}"


def _is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
