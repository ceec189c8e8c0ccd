"""The one way this package writes a file, so that every writer refuses and fails alike, and
no failure leaves half a file behind.

A writer's bytes go to a temporary file beside the target (the same folder, so the same
filesystem), which is flushed and synced, then renamed onto the target in one step: a full
disk, an error or a Ctrl-C part way leaves the target as it was (absent, or the old file)
and no temporary. An existing file is refused unless overwriting is asked for, and every
OSError becomes an OutputError.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..errors import OutputError
from ..interrupts import interrupts_deferred
from .files import os_error_text

# Errors of os.link that mean "this filesystem has no hard links", not "cannot write".
_NO_HARD_LINKS = {errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOSYS, errno.EOPNOTSUPP}


@dataclass(frozen=True)
class _Staged:
    """A complete, synced temporary file waiting to become `target`; `identity` (device,
    inode) tells the target it became from any other file of that name."""

    temp: Path
    target: Path
    overwrite: bool
    identity: tuple[int, int]


# The outputs of the innermost all_or_nothing() block of this thread or task, if any.
_batch: ContextVar[list[_Staged] | None] = ContextVar("voxelizer_output_batch", default=None)


@contextmanager
def open_output(path: str | os.PathLike, overwrite: bool = False) -> Iterator[BinaryIO]:
    """A binary file to write `path` through; the target appears only when the block ends
    without an exception (OutputError for an existing file unless overwrite, or any OSError).

    Without overwrite the target is created exclusively when the temporary is committed, so a
    file that appears meanwhile is refused as well, never replaced.
    """
    path = Path(path)
    if not overwrite and os.path.lexists(path):  # refuse before writing anything
        raise OutputError.file_exists(path)
    temp: Path | None = None
    handed_off = False
    try:
        # A Ctrl-C held until the temporary exists and the cleanup below knows it: raised
        # between the two, it left an empty temporary behind.
        with interrupts_deferred():
            temp = _create_temp(path)
        with open(temp, "wb") as fh:
            try:
                yield fh
            except BaseException:
                # Drop the unwritten buffer quietly: a flush failing on a full disk must not
                # replace the error (or Ctrl-C) that stopped the writer.
                with suppress(OSError):
                    fh.close()
                raise
            fh.flush()
            os.fsync(fh.fileno())
            written = os.fstat(fh.fileno())
        staged = _Staged(temp, path, overwrite, (written.st_dev, written.st_ino))
        batch = _batch.get()
        if batch is None:
            _commit(staged)
        else:
            batch.append(staged)
        handed_off = True
    except OSError as exc:
        raise _cannot_write(path, exc) from exc
    finally:
        if temp is not None and not handed_off:
            _remove_quietly(temp)


@contextmanager
def all_or_nothing() -> Iterator[None]:
    """The files open_output writes inside the block appear together when it ends, or none
    of them does: a failure (or Ctrl-C) while writing a later one leaves the earlier ones'
    targets untouched, and a refusal while committing removes those already committed."""
    staged: list[_Staged] = []
    token = _batch.set(staged)
    # Exclusive creations first: they are the commits a file appearing meanwhile can refuse.
    # A file to be replaced is kept under a temporary name (a second hard link) until all
    # are committed, so that a failure or a Ctrl-C at any point (while writing, between the
    # block and the commits, between a rename and the next, or while one is synced) can put
    # every target back as it was and remove every temporary.
    ordered = staged
    backups: dict[Path, Path] = {}
    try:
        try:
            yield
        finally:
            _batch.reset(token)
        ordered = sorted(staged, key=lambda item: item.overwrite)
        for item in ordered:
            if item.overwrite:
                _keep_older(item.target, backups)
        for item in ordered:
            _commit(item)
    except BaseException:
        with interrupts_deferred():  # a second Ctrl-C waits for the roll-back
            _roll_back(ordered, backups)
        raise
    try:
        for backup in backups.values():
            _remove_quietly(backup)
    finally:  # a Ctrl-C now: every file is in place; the cleanup ends before it goes on
        for backup in backups.values():
            _remove_quietly(backup)


def _keep_older(target: Path, backups: dict[Path, Path]) -> None:
    """Record a temporary name for the file at `target`, if there is one: a hard link to it,
    or, where the filesystem has none, the file itself renamed (put back by _roll_back)."""
    if not os.path.lexists(target):
        return
    backup = target.with_name(_temp_name(target, _token()))
    backups[target] = backup  # first: a Ctrl-C right after the link still finds it
    try:
        os.link(target, backup, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINKS:
            raise _cannot_write(target, exc) from exc
        os.replace(target, backup)


def _roll_back(ordered: list[_Staged], backups: dict[Path, Path]) -> None:
    """Undo the commits of an all_or_nothing block: every target as it was before (the older
    file back, or no file), whatever was committed; the temporaries removed."""
    for item in ordered:
        backup = backups.get(item.target)
        if backup is not None and os.path.lexists(backup):
            with suppress(OSError):
                os.replace(backup, item.target)
        elif _is_file(item.target, item.identity):
            _remove_quietly(item.target)
        _remove_quietly(item.temp)
    for backup in backups.values():
        _remove_quietly(backup)


def _is_file(path: Path, identity: tuple[int, int]) -> bool:
    """Whether `path` names the file of this (device, inode): one this process committed."""
    try:
        found = os.lstat(path)
    except OSError:
        return False
    return (found.st_dev, found.st_ino) == identity


def check_output_path(path: str | os.PathLike, overwrite: bool = False) -> None:
    """OutputError unless `path` can be written: its folder exists and takes new files, and
    it is no folder itself nor (without overwrite) an existing file. Nothing is left behind;
    for callers that check their outputs before long work."""
    path = Path(path)
    folder = path.parent
    # os.path's tests, not Path's: those raise for a name too long for the filesystem.
    if not os.path.isdir(folder):
        try:
            os.stat(folder)
            reason = f"{folder} is not a folder"
        except FileNotFoundError:
            reason = f"no such folder: {folder}"
        except OSError as exc:  # a symlink loop, a name too long
            reason = f"{folder}: {os_error_text(exc)}"
        raise OutputError(f"{path}: cannot write ({reason})", path=path)
    if os.path.isdir(path):
        raise OutputError(f"{path}: cannot write (it is a folder)", path=path)
    if not overwrite and os.path.lexists(path):
        raise OutputError.file_exists(path)
    with interrupts_deferred():  # a Ctrl-C between the two left the probe behind
        _remove_quietly(_create_temp(path))


def _token() -> str:
    """Eight random hex digits, as secrets.token_hex(4) makes them (os.urandom), without
    importing secrets, whose random and hmac modules no batch needs."""
    return os.urandom(4).hex()


def _temp_name(target: Path, token: str) -> str:
    return f".{target.name[:64]}.{token}.tmp"


_TEMPORARY = re.compile(r"\.(.{1,64})\.[0-9a-f]{8}\.tmp", re.DOTALL)


def remove_stale_temporaries(targets: Iterable[str | os.PathLike]) -> int:
    """remove_temporaries for many targets, each folder read once (a batch's outputs share
    a few folders, which may hold hundreds of thousands of files); how many there were."""
    names: dict[str, set[str]] = {}
    for target in targets:
        folder, name = os.path.split(os.fspath(target))
        names.setdefault(folder or ".", set()).add(name[:64])
    removed = 0
    for folder, owned in names.items():
        try:
            entries = [entry.name for entry in os.scandir(folder)]
        except OSError:
            continue
        for entry in entries:
            match = _TEMPORARY.fullmatch(entry)
            if match is not None and match.group(1) in owned:
                _remove_quietly(Path(folder) / entry)
                removed += 1
    return removed


def remove_temporaries(target: str | os.PathLike) -> int:
    """Remove the temporaries of `target` that a killed writer left (a SIGKILL runs no
    cleanup); how many there were. Only for a caller that knows no one else is writing
    `target` now (a batch whose worker died on it)."""
    target = Path(target)
    pattern = re.compile(re.escape(_temp_name(target, "TOKEN")).replace("TOKEN", "[0-9a-f]{8}"))
    try:
        names = [entry.name for entry in os.scandir(target.parent)]
    except OSError:
        return 0
    stale = [name for name in names if pattern.fullmatch(name)]
    for name in stale:
        _remove_quietly(target.parent / name)
    return len(stale)


def _create_temp(target: Path) -> Path:
    """A new, empty file beside `target` with a name no one else uses (the umask applies);
    OutputError if the folder takes no new file."""
    for _ in range(100):
        temp = target.with_name(_temp_name(target, _token()))
        try:
            os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        except OSError as exc:
            raise _cannot_write(target, exc) from exc
        return temp
    raise OutputError(f"{target}: cannot write (no free temporary name)", path=target)


def _commit(staged: _Staged) -> None:
    """Put the complete temporary in place of the target: a replacement with overwrite, else
    an exclusive creation that refuses a target which exists by now."""
    temp, target = staged.temp, staged.target
    try:
        if staged.overwrite:
            _keep_permissions(target, temp)
            os.replace(temp, target)
        else:
            _create_exclusively(temp, target)
    except FileExistsError:
        raise OutputError.file_exists(target) from None
    except OSError as exc:
        raise _cannot_write(target, exc) from exc
    if not _folder_syncs_deferred.get():
        _sync_folder(target.parent)


# Set inside folder_syncs_deferred (a batch's writes): the folder of a committed file is left
# for the batch to sync once at its end (sync_folders), not once per file.
_folder_syncs_deferred: ContextVar[bool] = ContextVar("folder_syncs_deferred", default=False)


@contextmanager
def folder_syncs_deferred() -> Iterator[None]:
    """Inside, a committed file's folder is not synced: a batch writing thousands of files
    into a few folders syncs each of them once, at its end (sync_folders), which two GPUs'
    batch measured faster than a sync per file (docs/benchmarks.md, "Datasets"). The file's
    data is still synced before its rename: a crash before the batch's end can lose a new
    file's name, never leave part of a file."""
    token = _folder_syncs_deferred.set(True)
    try:
        yield
    finally:
        _folder_syncs_deferred.reset(token)


def sync_folders(folders: Iterable[Path]) -> None:
    """Make the renames into each of `folders` durable, once each, where the platform allows
    (a folder that does not exist is passed over)."""
    for folder in dict.fromkeys(folders):
        _sync_folder(folder)


def _create_exclusively(temp: Path, target: Path) -> None:
    """Link the temporary to the target (which fails if the target exists), then drop the
    temporary's name. Without hard links: claim the name with an exclusive empty file, then
    rename the temporary over that claim."""
    try:
        os.link(temp, target)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINKS:
            raise
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        os.replace(temp, target)
        return
    os.unlink(temp)


def _keep_permissions(target: Path, temp: Path) -> None:
    """A replaced file keeps its mode, as it did when writers truncated it in place."""
    with suppress(OSError):  # no target yet, or one we may not read: the temp's mode stays
        os.chmod(temp, os.stat(target).st_mode & 0o7777)


def _sync_folder(folder: Path) -> None:
    """Make the rename durable where the platform allows syncing a folder."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass  # some filesystems and platforms cannot sync a folder; the rename stands
    finally:
        os.close(descriptor)


def _remove_quietly(path: Path) -> None:
    with suppress(OSError):  # already gone: nothing more to clean up
        os.unlink(path)


def _cannot_write(path: Path, exc: OSError) -> OutputError:
    return OutputError(f"{path}: cannot write ({os_error_text(exc)})", path=path)
