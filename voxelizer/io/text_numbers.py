"""Whitespace-separated decimal numbers parsed in whole-array operations, with exactly the
values of numpy's text parser (np.loadtxt), faster, and without holding the GIL: np.loadtxt
holds it for a whole file, so loader threads could not read meshes side by side; here every
step is a numpy operation, on blocks of words that stay in the cache, spread over the
host's cores for large files.

Each word is read from the 8 or 16 bytes of the text that end with it, as 64-bit integers,
one digit per byte; eight digits become a number in three multiply-and-shift steps done on
all words at once. A word of the forms `[+-]digits` (an integer of up to 8 bytes) or
`[+-]digits[.digits]` (a float of up to 16 bytes whose digits, without the dot, make an
integer of at most 2^53) is exact this way: that integer and the power of ten are exact
doubles, and one IEEE division rounds their quotient correctly, as the text parser's
strtod does. Every other word (an exponent, more digits, anything malformed) is read by
np.loadtxt, so that the values and the failures stay np.loadtxt's own."""

from __future__ import annotations

import io

import numpy as np

from ..parallel import map_row_chunks

_FLOAT_BYTES = b"0123456789+-.eE \t\n"  # any other byte: the caller's general parser decides
_INTEGER_BYTES = b"0123456789+- \t\n"
_BLOCK = 16384  # words per block: its arrays stay in the cache
_PARALLEL_WORDS = 1 << 15  # words per thread, at least, for a file to be split over threads
_EXACT_INTEGER = 1 << 53  # doubles hold every integer up to here
_POWERS_OF_TEN = np.array([float(10**power) for power in range(17)])  # all exact


def _bytes(value: int) -> np.ndarray:
    """`value` in every byte of a uint64 (an array, so that its arithmetic wraps silently)."""
    return np.array(value * 0x0101010101010101, np.uint64)


_ALL = np.array(0xFFFFFFFFFFFFFFFF, np.uint64)
_ZEROS_TEXT = _bytes(0x30)
_BELOW_TEN = _bytes(0x76)  # digit values 0..9 plus this stay below 0x80 in their byte
_HIGH_BITS = _bytes(0x80)
_LOW7 = _bytes(0x7F)
_DOT_BYTE = np.uint64(ord(".") ^ 0x30)  # a dot once the text is XORed with '0'
_DOT = _bytes(ord(".") ^ 0x30)
_U8, _U7, _U56 = np.uint64(8), np.uint64(7), np.uint64(56)


def _zero_bytes(words: np.ndarray) -> np.ndarray:
    """0x80 in each byte of `words` that is zero, 0 in the others (exact: no carries)."""
    return ~(((words & _LOW7) + _LOW7) | words | _LOW7)


def _eight_digits(values: np.ndarray) -> np.ndarray:
    """The number written by 8 digit values (0..9, one per byte, the first byte the most
    significant): two digits, then four, then eight, each step one multiply and shift."""
    values = (values * np.uint64(10) + (values >> _U8)) & np.uint64(0x00FF00FF00FF00FF)
    values = (values * np.uint64(100) + (values >> np.uint64(16))) & np.uint64(0x0000FFFF0000FFFF)
    return (values * np.uint64(10000) + (values >> np.uint64(32))) & np.uint64(0xFFFFFFFF)


def _first_byte(word: np.ndarray, position: np.ndarray) -> np.ndarray:
    return (word >> (position * _U8)) & np.uint64(0xFF)


def _without_sign(
    word: np.ndarray, first: np.ndarray, position: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(word with its sign byte at `position` cleared, negative, signed) for words whose
    first byte is `first` (as text)."""
    negative = first == ord("-")
    signed = negative | (first == ord("+"))
    sign_byte = np.uint64(0xFF) << (position * _U8)
    return word & ~(sign_byte * signed), negative, signed


def _integers(
    windows: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(values, exact) of integer words: exact where a word is `[+-]digits` in 8 bytes."""
    lengths = ends - starts
    position = (np.uint64(8) - np.minimum(lengths, 8).astype(np.uint64)) % np.uint64(8)
    word = windows[ends + 8] & (_ALL << (position * _U8))  # the word's last 8 bytes
    digits, negative, signed = _without_sign(
        word ^ (_ZEROS_TEXT & (_ALL << (position * _U8))), _first_byte(word, position), position
    )
    exact = (lengths <= 8) & (lengths > signed) & (((digits + _BELOW_TEN) & _HIGH_BITS) == 0)
    magnitude = _eight_digits(digits).astype(np.int64)
    return np.where(negative, -magnitude, magnitude), exact


def _floats(
    windows: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(values, exact) of decimal words: exact where a word is `[+-]digits[.digits]` in 16
    bytes, its digits at most 2^53 as one integer."""
    lengths = np.minimum(ends - starts, 16).astype(np.uint64)
    # The 16 bytes before each word's end: `high` holds the last 8, `low` the 8 before.
    # `start` is where the word begins in its word of 64 bits (`in_low`: in `low`).
    in_low = lengths > 8
    start = (np.uint64(16) - lengths) % np.uint64(8)
    low_keep = np.where(in_low, _ALL << (start * _U8), 0).astype(np.uint64)
    high_keep = np.where(in_low, _ALL, _ALL << (start * _U8)).astype(np.uint64)
    low, high = windows[ends] & low_keep, windows[ends + 8] & high_keep
    first = np.where(in_low, _first_byte(low, start), _first_byte(high, start))
    low ^= _ZEROS_TEXT & low_keep  # digits become their values
    high ^= _ZEROS_TEXT & high_keep
    low_cleared, negative, signed = _without_sign(low, first, start)
    high_cleared, _, _ = _without_sign(high, first, start)
    low = np.where(in_low, low_cleared, low)
    high = np.where(in_low, high, high_cleared)
    # the dot: found, then cleared, so that every byte left is a digit value
    dot_low, dot_high = _zero_bytes(low ^ _DOT), _zero_bytes(high ^ _DOT)
    dots = np.bitwise_count(dot_low) + np.bitwise_count(dot_high)
    low ^= (dot_low >> _U7) * _DOT_BYTE
    high ^= (dot_high >> _U7) * _DOT_BYTE
    exact = (ends - starts <= 16) & (dots <= 1) & (lengths > signed + dots)
    exact &= (((low + _BELOW_TEN) | (high + _BELOW_TEN)) & _HIGH_BITS) == 0
    # The digits before the dot move one byte on, into its place: then all of them are one
    # integer. `before_*`: the bytes before the dot (none without a dot).
    has_dot = (dots == 1).astype(np.uint64) * _ALL
    before_low = ((dot_low >> _U7) - np.uint64(1)) & has_dot  # all of low: the dot is in high
    before_high = np.where(dot_low != 0, 0, (dot_high >> _U7) - np.uint64(1)).astype(np.uint64)
    before_high &= has_dot
    moved_low, moved_high = low & before_low, high & before_high
    low = (low & ~before_low) | (moved_low << _U8)
    high = (high & ~before_high) | (moved_high << _U8) | (moved_low >> _U56)
    mantissa = _eight_digits(low) * np.uint64(100_000_000) + _eight_digits(high)
    exact &= mantissa <= np.uint64(_EXACT_INTEGER)
    dot_position = (np.bitwise_count(before_low) + np.bitwise_count(before_high)) // 8
    fraction_digits = np.where(dots == 1, 15 - dot_position.astype(np.int64), 0)
    magnitudes = mantissa.astype(np.float64) / _POWERS_OF_TEN[fraction_digits]
    return np.where(negative, -magnitudes, magnitudes), exact


def words_of(text: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Where each word (bytes between blanks, any byte up to a space) of `text` starts and
    where it ends (exclusive)."""
    blank = np.frombuffer(text, np.uint8) <= ord(" ")
    edges = np.flatnonzero(np.diff(blank, prepend=True, append=True))
    return edges[0::2], edges[1::2]


def parse_words(
    text: bytes, starts: np.ndarray, ends: np.ndarray, dtype: type
) -> np.ndarray | None:
    """The numbers (int64 or float64 `dtype`) of the words text[starts[i]:ends[i]] as
    np.loadtxt reads them, or None where it would refuse one. Every byte of `text` must be
    among _INTEGER_BYTES or _FLOAT_BYTES."""
    integer = np.issubdtype(dtype, np.integer)
    padded = bytes(16) + text + bytes(16)
    windows = np.ndarray((len(padded) - 7,), "<u8", padded, 0, (1,))  # 8 bytes from each
    values = np.empty(len(starts), np.int64 if integer else np.float64)
    exact = np.empty(len(starts), bool)
    parse = _integers if integer else _floats

    def blocks(first: int, stop: int) -> None:
        for start in range(first, stop, _BLOCK):
            block = slice(start, min(start + _BLOCK, stop))
            values[block], exact[block] = parse(windows, starts[block], ends[block])

    map_row_chunks(len(starts), blocks, min_rows=_PARALLEL_WORDS)
    others = np.flatnonzero(~exact)
    if len(others):
        view = memoryview(text)
        words = b"\n".join(
            view[a:b] for a, b in zip(starts[others].tolist(), ends[others].tolist())
        )
        try:
            values[others] = np.loadtxt(io.BytesIO(words), dtype=dtype, comments=None, ndmin=1)
        except (ValueError, OverflowError):
            return None
    return values


def fast_numbers(payload: bytes, dtype: type) -> np.ndarray | None:
    """What parse_numbers gives (every number of the text in order, lines ignored), for the
    usual text; None where the general parser must decide."""
    integer = np.issubdtype(dtype, np.integer)
    if dtype not in (np.int64, np.float64):
        return None
    if payload.translate(None, _INTEGER_BYTES if integer else _FLOAT_BYTES):
        return None
    starts, ends = words_of(payload)
    if not integer and payload.count(b"e") + payload.count(b"E") > len(starts) // 8:
        return None
    return parse_words(payload, starts, ends, dtype)


def _lines_of_equal_words(
    starts: np.ndarray, ends: np.ndarray, line_ends: np.ndarray, count: int
) -> bool:
    """Whether line i holds words count*i .. count*i + count - 1 (and so all of them)."""
    firsts, lasts = starts[::count], ends[count - 1 :: count]
    return bool((lasts <= line_ends).all() and (firsts[1:] > line_ends[:-1]).all())


def fast_table(payload: bytes, dtype: type, columns: int | None) -> np.ndarray | None:
    """What parse_table gives, for the usual text (int64 or float64 numbers without
    exponents, every line `columns` numbers or more, or all lines the same count), or None
    where the general parser must decide (other bytes, blank or short lines, ragged rows,
    a word it would refuse)."""
    integer = np.issubdtype(dtype, np.integer)
    if dtype not in (np.int64, np.float64) or not payload.endswith(b"\n"):
        return None
    if payload.translate(None, _INTEGER_BYTES if integer else _FLOAT_BYTES):
        return None
    starts, ends = words_of(payload)
    if not integer and payload.count(b"e") + payload.count(b"E") > len(starts) // 8:
        return None  # mostly exponents: np.loadtxt at once is faster than word by word
    line_ends = np.flatnonzero(np.frombuffer(payload, np.uint8) == ord("\n"))
    lines = len(line_ends)
    per_line = len(starts) // max(lines, 1)
    if (
        lines
        and per_line * lines == len(starts)
        and _lines_of_equal_words(starts, ends, line_ends, per_line)
    ):
        counts = np.full(lines, per_line)
        words_before = np.arange(1, lines + 1) * per_line
    else:  # lines of different lengths, or blank ones
        words_before = np.searchsorted(starts, line_ends)
        counts = np.diff(words_before, prepend=0)
    if lines == 0 or counts.min() == 0:
        return None
    width = int(counts[0]) if columns is None else columns
    if (counts < width).any() or (columns is None and (counts != width).any()):
        return None
    if (counts != width).any():  # the first `columns` words of lines that have more
        firsts = ((words_before - counts)[:, None] + np.arange(width)).reshape(-1)
        starts, ends = starts[firsts], ends[firsts]
    values = parse_words(payload, starts, ends, dtype)
    return None if values is None else values.reshape(len(counts), width)
