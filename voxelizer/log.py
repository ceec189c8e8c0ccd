"""The package's logger, `voxelizer`: what a run decided and why, for whoever asks.

Modules log to children of it (`get_logger(__name__)`), so one level or handler set on
`logging.getLogger("voxelizer")` covers them all. As a library should, it has only a
NullHandler: nothing is printed unless the application configures logging (or runs
`voxelize --verbose`, which uses `stderr_logging`). INFO: the device chosen, the memory plan,
each shader module (shipped, or compiled from edited GLSL through the cache); DEBUG: the GPU
time per pass of each call.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

LOGGER_NAME = "voxelizer"

logger = logging.getLogger(LOGGER_NAME)
logger.addHandler(logging.NullHandler())


def get_logger(module: str) -> logging.Logger:
    """The logger of a module of the package: a child of `voxelizer`, whose records reach
    the handlers set on it (importing this module is what puts the NullHandler there)."""
    return logging.getLogger(module)


def verbosity_level(verbosity: int) -> int:
    """The logging level of `-v` counted `verbosity` times: 1 INFO, 2 or more DEBUG."""
    return logging.DEBUG if verbosity >= 2 else logging.INFO


@contextmanager
def stderr_logging(verbosity: int, prefix: str) -> Iterator[None]:
    """While open, the package's records at `verbosity_level(verbosity)` and above go to
    stderr, one line each after `prefix`; verbosity 0 changes nothing. The logger's level
    and handlers are restored afterwards, so repeated calls (tests) do not pile up."""
    if verbosity <= 0:
        yield
        return
    handler = logging.StreamHandler(sys.stderr)  # the stderr of now: tests replace it
    handler.setFormatter(logging.Formatter(prefix + "%(message)s"))
    saved_level = logger.level
    logger.setLevel(verbosity_level(verbosity))
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved_level)
