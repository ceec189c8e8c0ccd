"""The progress line of the command line (voxelizer/progress.py): when it shows, what it says,
and that it leaves the terminal clean."""

from __future__ import annotations

import io

import pytest

from voxelizer.progress import TerminalProgress

from ..helpers import FakeTerminal


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_line():
    stream, clock = FakeTerminal(), FakeClock()
    progress = TerminalProgress(stream, clock=clock, columns=80)
    assert progress.enabled
    progress("fill", 1, 10)
    clock.now += 0.9
    progress("fill", 2, 10)
    assert stream.getvalue() == ""  # nothing during the first second
    clock.now += 0.2
    progress("fill", 3, 10)
    assert stream.getvalue() == "\rfill:  30% (3/10)"
    clock.now += 0.05
    progress("fill", 4, 10)  # too soon after the last redraw
    progress("svo", 0, 5_000)  # but a new stage redraws at once, over the longer old line
    assert stream.getvalue() == "\rfill:  30% (3/10)\rsvo:   0% (0/5,000)"
    clock.now += 0.01
    progress("svo", 5_000, 5_000)  # and so does the end of a stage
    progress("read", 7, 0)  # no total known
    assert stream.getvalue().endswith("\rsvo: 100% (5,000/5,000)\rread: 7" + " " * 16)
    progress.close()
    assert stream.getvalue().endswith("\r" + " " * 7 + "\r")  # blank what is written
    end = stream.getvalue()
    clock.now += 5
    progress("fill", 9, 10)
    progress.close()
    assert stream.getvalue() == end  # nothing after close, and close only clears once


def test_progress_line_is_cut_to_the_terminal():
    stream, clock = FakeTerminal(), FakeClock()
    progress = TerminalProgress(stream, clock=clock, columns=12, delay=0.0)
    progress("a long stage name", 1, 2)
    assert stream.getvalue() == "\ra long stag"


@pytest.mark.parametrize("tty, quiet", [(False, False), (True, True), (False, True)])
def test_progress_is_silent_off_a_terminal_or_when_quiet(tty, quiet):
    stream, clock = FakeTerminal(tty), FakeClock()
    with TerminalProgress(stream, quiet=quiet, clock=clock) as progress:
        assert not progress.enabled
        for step in range(5):
            clock.now += 1
            progress("fill", step, 4)
    assert stream.getvalue() == ""


def test_progress_close_without_a_line_writes_nothing():
    stream = FakeTerminal()
    TerminalProgress(stream).close()
    assert stream.getvalue() == ""
    assert not TerminalProgress(io.StringIO()).enabled  # no isatty to ask: not a terminal
