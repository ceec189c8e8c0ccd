"""Opening the files the readers read: regular files only, each refusal one typed line.

A reader that opened whatever a path names could block for ever on a FIFO (open waits for a
writer), or read /dev/zero until the host runs out of memory. Here the path is opened without
blocking, the open descriptor is checked (no window between a check and the open), and only
then is anything read. A file read whole is checked against the host memory available first.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from ..budget import check_host_fits
from ..errors import ArgumentError, VoxelizerError

# What a path that is not a regular file names, in the words of `ls -l`'s first letter.
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def as_path(value: object, what: str) -> Path:
    """`value` (a str or an os.PathLike) as a Path, or ArgumentError saying what `what`
    takes: never a TypeError from deep inside pathlib."""
    if isinstance(value, (str, os.PathLike)):
        path = Path(value)
        if str(path) and "\0" not in str(path):
            return path
        raise ArgumentError(f"{what}: not a usable path: {str(value)!r}")
    raise ArgumentError(
        f"{what} takes a path (a str or a pathlib.Path), not {type(value).__name__}"
    )


def resolved(path: str | os.PathLike) -> Path:
    """The absolute path with its symlinks resolved, or, where a symlink loop or a name too
    long stops that, the absolute path as written (Path.resolve raises for those): for
    telling whether two paths name one file, never for opening one."""
    try:
        return Path(path).resolve()
    except (RuntimeError, OSError):
        return Path(os.path.abspath(path))


def os_error_text(exc: OSError) -> str:
    """An OSError in a few words, without the path (the message names it once, first)."""
    if exc.errno == errno.ELOOP:
        return "a symlink loop, or too many symlinks on the way"
    if exc.errno == errno.ENAMETOOLONG:
        return "the name is too long for the filesystem"
    return exc.strerror or str(exc) or type(exc).__name__


def open_regular(
    path: str | os.PathLike,
    error: type[VoxelizerError],
    missing: str = "cannot read (no such file)",
) -> BinaryIO:
    """`path` opened for binary reading if it is a regular file (symlinks followed);
    error(...) naming the path otherwise: missing (`missing` says it), a folder, a FIFO, a
    device, a symlink loop, a name too long, unreadable. A FIFO is refused without waiting
    for a writer."""
    path = Path(path)
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{path}: {missing}") from None
    except OSError as exc:
        raise error(f"{path}: cannot read ({os_error_text(exc)})") from None
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "a special file")
            raise error(f"{path}: not a file ({kind})")
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_regular(path: str | os.PathLike, error: type[VoxelizerError]) -> bytes:
    """The bytes of the regular file `path`, read whole once the host is seen to have the
    memory for them (MemoryBudgetError otherwise); error(...) as open_regular refuses, or
    for a read that fails."""
    with open_regular(path, error) as file:
        try:
            size = os.fstat(file.fileno()).st_size
            check_host_fits(size, f"{path}: reading the file")
            return file.read()
        except OSError as exc:
            raise error(f"{path}: cannot read ({os_error_text(exc)})") from None
