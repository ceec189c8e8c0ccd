"""The one way this package opens a file for writing, so that every writer refuses and fails
alike: an existing file only when overwriting is asked for, every OSError as an OutputError."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from ..errors import OutputError


@contextmanager
def open_output(path: str | os.PathLike, overwrite: bool = False) -> Iterator[BinaryIO]:
    """A binary file opened for writing; an existing file only with overwrite (else OutputError).

    Without overwrite the file is created exclusively ("xb"), so a file that appears between
    a check and the write is refused as well.
    """
    path = Path(path)
    try:
        with open(path, "wb" if overwrite else "xb") as fh:
            yield fh
    except FileExistsError:
        raise OutputError.file_exists(path) from None
    except OSError as exc:
        raise OutputError(f"{path}: cannot write ({exc.strerror or exc})", path=path) from exc
