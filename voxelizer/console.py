"""The command's standard streams and lines, as command-line tools are expected to treat them.

* A reader that goes away (`voxelize ... | head -1`) ends the command quietly, with the status
  of a process that SIGPIPE ended (141): no traceback, no message.
* Any other failure to write stdout (`> /dev/full`, or stdout closed with `>&-`) is one
  error line on stderr and status 1.
* A standard stream that was closed when the command started is opened on /dev/null first,
  so that no file the command opens later takes its number (a library writing to "stderr"
  would write into it); a closed stdout stays unwritable, so that its output is not lost
  without a word.
* Every line the command prints is one line: a newline, a carriage return or a terminal
  escape in a file name is shown escaped, never written as it is.
"""

from __future__ import annotations

import errno
import io
import os
import re
import signal
import sys
from typing import TextIO

from .errors import OutputError
from .interrupts import Terminated

SIGPIPE_STATUS = 128 + 13  # what a shell reports for a process that SIGPIPE ended

# C0 controls but the tab, DEL, C1 controls; and lone surrogates (bytes of a file name that
# are not UTF-8, as Python decodes them), which a strict stream cannot encode.
_UNPRINTABLE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\ud800-\udfff]")


def error_line(message: str) -> None:
    """The command's one error line on stderr."""
    print(f"voxelize: error: {one_line(message)}", file=sys.stderr)


def interrupted_status(interrupt: KeyboardInterrupt) -> int:
    """The line and status of a run that a Ctrl-C (130) or a SIGTERM (143) ended: the same
    cleanup for both, every output written whole or not at all."""
    if isinstance(interrupt, Terminated):
        print("voxelize: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    print("voxelize: interrupted", file=sys.stderr)
    return 130


def one_line(text: str) -> str:
    """`text` with what would break or take over the line escaped as Python writes it in a
    string (a newline as \\n, an escape as \\x1b); a byte of a name that is not UTF-8 as
    \\xNN."""

    def escaped(match: re.Match[str]) -> str:
        char = match.group()
        if "\udc80" <= char <= "\udcff":
            return f"\\x{ord(char) - 0xDC00:02x}"
        return repr(char)[1:-1] if ord(char) < 0xD800 else f"\\u{ord(char):04x}"

    return _UNPRINTABLE.sub(escaped, text)


class GuardedStream(io.TextIOBase):
    """A standard stream for the command (`fd` 1 or 2). Writes go to the real stream. When
    they fail the stream is marked `broken` and later writes are dropped. On stdout, a
    reader gone away points file descriptor 1 at /dev/null (so that Python's last flush
    says nothing) and raises BrokenPipeError, which ends the command quietly, and any other
    failure is an OutputError (one error line). On stderr every failure is dropped quietly:
    there is nowhere left to report it."""

    def __init__(self, stream: TextIO, fd: int, closed_at_start: bool = False):
        self._stream = stream
        self._fd = fd
        self._closed_at_start = closed_at_start
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                self._stream.write(text)
            except OSError as exc:
                self._failed(exc)
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except OSError as exc:
                self._failed(exc)

    def isatty(self) -> bool:
        return not self.broken and self._stream.isatty()

    def fileno(self) -> int:
        return self._fd

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._stream.encoding

    def _failed(self, exc: OSError) -> None:
        self.broken = True  # whatever comes next would fail the same way
        # What is still buffered goes nowhere, so that the interpreter's last flush at exit
        # succeeds (it would print its own "Exception ignored" lines).
        _point_at_null(self._fd, os.O_WRONLY)
        if self._fd == 2:
            return
        if exc.errno == errno.EPIPE:
            raise BrokenPipeError(exc.errno, "stdout: the reader went away") from None
        reason = "it is closed" if self._closed_at_start else (exc.strerror or str(exc))
        raise OutputError(f"stdout: cannot write ({reason})") from None


def guard_streams() -> GuardedStream:
    """Open closed standard streams on /dev/null (stdout read-only, so that writing it
    fails) and put GuardedStreams in place of sys.stdout and sys.stderr; returns stdout's."""
    closed = {fd: not _is_open(fd) for fd in (0, 1, 2)}
    for fd, mode in ((0, os.O_RDONLY), (1, os.O_RDONLY), (2, os.O_WRONLY)):
        if closed[fd]:
            _point_at_null(fd, mode)
    streams: dict[int, TextIO] = {}
    for fd, stream in ((1, sys.stdout), (2, sys.stderr)):
        if stream is None or closed[fd]:  # Python leaves a stream closed at start as None
            stream = open(fd, "w", closefd=False)  # noqa: SIM115  # the process's own
        streams[fd] = stream
    stdout = GuardedStream(streams[1], 1, closed_at_start=closed[1])
    sys.stdout, sys.stderr = stdout, GuardedStream(streams[2], 2)
    return stdout


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _point_at_null(fd: int, mode: int) -> None:
    """Make file descriptor `fd` /dev/null (opened with `mode`)."""
    null = os.open(os.devnull, mode)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)
