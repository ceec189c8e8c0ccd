"""Whitespace-separated decimal numbers parsed in whole-array operations, with exactly the
values of numpy's text parser (np.loadtxt), about as fast on one core, but on all of them
for a large text and without holding the GIL: np.loadtxt holds it for a whole table, which
stops every other thread (in a batch, the one that drives the device); here every step is a
numpy call on a block of words that stays in the cache.

Each word is read from the 8 or 16 bytes of the text that end with it, as 64-bit integers,
one digit per byte; eight digits become a number in three multiply-and-shift steps done on
all words at once. A word of the forms `[+-]digits` (an integer of up to 8 digits) or
`[+-]digits[.digits]` (a decimal of up to 16 bytes after its sign whose digits, without
the dot, make an integer of at most 2^53) is exact this way: that integer and the power of
ten are exact doubles, and one IEEE division rounds their quotient correctly, as the text
parser's strtod does. Every other word (an exponent, more digits, anything malformed) is read by
np.loadtxt, so that the values and the failures stay np.loadtxt's own."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from ..parallel import map_row_chunks

_FLOAT_BYTES = b"0123456789+-.eE \t\n"  # any other byte: the caller's general parser decides
_INTEGER_BYTES = b"0123456789+- \t\n"
_BLOCK = 16384  # words per block: its arrays stay in the cache
_PARALLEL_BYTES = 1 << 18  # bytes of text per thread, at least, for it to be split
_EXACT_INTEGER = 1 << 53  # doubles hold every integer up to here
T = TypeVar("T")
_POWERS_OF_TEN = np.array([float(10**power) for power in range(17)])  # all exact


def _bytes(value: int) -> np.ndarray:
    """`value` in every byte of a uint64 (an array, so that its arithmetic wraps silently)."""
    return np.array(value * 0x0101010101010101, np.uint64)


_ALL = np.array(0xFFFFFFFFFFFFFFFF, np.uint64)
_ZEROS_TEXT = _bytes(0x30)
_BELOW_TEN = _bytes(0x76)  # digit values 0..9 plus this stay below 0x80 in their byte
_HIGH_BITS = _bytes(0x80)
_DOT_BYTE = np.uint64(ord(".") ^ 0x30)  # a dot once the text is XORed with '0'
_BYTE = np.uint64(0xFF)
_ONES = _bytes(1)
_U4, _U8, _U56 = np.uint64(4), np.uint64(8), np.uint64(56)
_TWO_DIGITS = np.uint64(10 << 8 | 1)  # each byte's digit times 10 plus the next one's
_FOUR_DIGITS = np.uint64(100 << 16 | 1)
_EIGHT_DIGITS = np.uint64(10000 << 32 | 1)


def _eight_digits(values: np.ndarray) -> np.ndarray:
    """The number written by 8 digit values (0..9, one per byte, the first byte the most
    significant): two digits, then four, then eight, each step one multiply (the number
    times 10, 100 or 10000 beside itself), shift and mask, done in place: `values` (a
    temporary of the caller's) is overwritten with the numbers."""
    values *= _TWO_DIGITS
    values >>= _U8
    values &= np.uint64(0x00FF00FF00FF00FF)
    values *= _FOUR_DIGITS
    values >>= np.uint64(16)
    values &= np.uint64(0x0000FFFF0000FFFF)
    values *= _EIGHT_DIGITS
    values >>= np.uint64(32)
    return values


def _unsigned(text: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(where each word's digits start, negative): a leading sign is stepped over."""
    first = text[starts]
    negative = first == ord("-")
    return starts + (negative | (first == ord("+"))), negative


def integer_words(
    text: np.ndarray, windows: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(values, exact) of integer words: exact where a word is `[+-]digits`, the digits in
    8 bytes."""
    starts, negative = _unsigned(text, starts)
    lengths = ends - starts
    keep = _ALL << (np.uint64(8) - np.minimum(lengths, 8).astype(np.uint64)) * _U8
    digits = (windows[ends + 8] & keep) ^ (_ZEROS_TEXT & keep)  # the last 8 bytes, as values
    exact = (lengths >= 1) & (lengths <= 8) & (((digits + _BELOW_TEN) & _HIGH_BITS) == 0)
    magnitude = _eight_digits(digits).astype(np.int64)
    return np.where(negative, -magnitude, magnitude), exact


_KEEP_LAST = np.array(
    [0] + [(0xFFFFFFFFFFFFFFFF << (8 * (8 - count))) & 0xFFFFFFFFFFFFFFFF for count in range(1, 9)],
    np.uint64,
)  # by count: the bytes of a window that hold its last `count` bytes
_KEEP_LAST_DIGITS = _KEEP_LAST & _bytes(0x0F)  # of those bytes, the low 4 bits


def unsigned_words(
    text: np.ndarray, windows: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """integer_words of words that are digits only (a text without signs): the same values,
    in half the steps (no sign to step over, no byte to check)."""
    lengths = ends - starts
    digits = windows[ends + 8]
    digits &= _KEEP_LAST_DIGITS[np.minimum(lengths, 8)]  # a digit's low 4 bits: its value
    return _eight_digits(digits).view(np.int64), lengths <= 8


def decimal_words(
    text: np.ndarray, windows: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(values, exact) of decimal words: exact where a word is `[+-]digits[.digits]`, in
    16 bytes after its sign, its digits at most 2^53 as one integer."""
    starts, negative = _unsigned(text, starts)
    lengths = np.minimum(ends - starts, 16).astype(np.uint64)
    # The 16 bytes before each word's end: `high` holds the last 8, `low` the 8 before
    # (none of them for a word of up to 8 bytes: a shift by 64 bits or more leaves 0).
    low_keep = _ALL << (np.uint64(16) - lengths) * _U8
    high_keep = _ALL << (np.uint64(8) - np.minimum(lengths, np.uint64(8))) * _U8
    low = (windows[ends] & low_keep) ^ (_ZEROS_TEXT & low_keep)  # digits become values
    high = (windows[ends + 8] & high_keep) ^ (_ZEROS_TEXT & high_keep)
    # Of the bytes allowed, only a dot, a sign and an exponent letter have bit 4 set once
    # XORed with '0'; XORing that byte with a dot's value leaves 0 only for a dot.
    dot_low, dot_high = (low >> _U4) & _ONES, (high >> _U4) & _ONES  # 1 in such bytes
    dots = np.bitwise_count(dot_low) + np.bitwise_count(dot_high)
    low ^= dot_low * _DOT_BYTE
    high ^= dot_high * _DOT_BYTE
    exact = (ends - starts <= 16) & (dots <= 1) & (lengths > dots)
    exact &= ((low & dot_low * _BYTE) | (high & dot_high * _BYTE)) == 0
    exact &= (((low + _BELOW_TEN) | (high + _BELOW_TEN)) & _HIGH_BITS) == 0
    # The digits before the dot move one byte on, into its place: then all of them are one
    # integer. `before_*`: the bytes before the dot (none without a dot).
    has_dot = (dots == 1).astype(np.uint64) * _ALL
    before_low = (dot_low - np.uint64(1)) & has_dot  # all of low when the dot is in high
    before_high = np.where(dot_low != 0, 0, dot_high - np.uint64(1)).astype(np.uint64)
    before_high &= has_dot
    moved_low = low & before_low
    low = (low & ~before_low) | (moved_low << _U8)
    high = (high & ~before_high) | ((high & before_high) << _U8) | (moved_low >> _U56)
    mantissa = _eight_digits(low) * np.uint64(100_000_000) + _eight_digits(high)
    exact &= mantissa <= np.uint64(_EXACT_INTEGER)
    dot_position = (np.bitwise_count(before_low) + np.bitwise_count(before_high)) // 8
    fraction_digits = np.where(dots == 1, 15 - dot_position.astype(np.int64), 0)
    magnitudes = mantissa.astype(np.float64) / _POWERS_OF_TEN[fraction_digits]
    return np.where(negative, -magnitudes, magnitudes), exact


def fixed_point_words(
    text: np.ndarray, windows: np.ndarray, starts: np.ndarray, ends: np.ndarray, places: int
) -> tuple[np.ndarray, np.ndarray]:
    """decimal_words of words written with `places` (1 to 8) digits after the dot, as a
    program writes its numbers (`%.8f`): exact where a word is `[+-]digits.digits` of 1 to 8
    digits before the dot and `places` after, the digits at most 2^53 as one integer. The
    same values as decimal_words (the same integer over the same power of ten) in half its
    steps: the dot's place is known, so each part is one window."""
    starts, negative = _unsigned(text, starts)
    dots = ends - (places + 1)  # where each word's dot must be
    np.maximum(dots, starts, out=dots)
    whole = dots - starts  # digits before the dot
    fraction = windows[ends + 8]
    fraction ^= _ZEROS_TEXT  # digits become their values
    fraction &= _KEEP_LAST[places]
    integer = windows[dots + 8]
    integer ^= _ZEROS_TEXT
    integer &= _KEEP_LAST[np.minimum(whole, 8)]
    exact = text[dots] == ord(".")
    exact &= (whole >= 1) & (whole <= 8)
    not_digits = fraction + _BELOW_TEN
    not_digits |= integer + _BELOW_TEN
    not_digits &= _HIGH_BITS
    exact &= not_digits == 0
    mantissa = _eight_digits(integer)
    mantissa *= np.uint64(10**places)
    mantissa += _eight_digits(fraction)
    exact &= mantissa <= np.uint64(_EXACT_INTEGER)
    values = mantissa.astype(np.float64)
    values /= _POWERS_OF_TEN[places]
    np.negative(values, out=values, where=negative)
    return values, exact


def _fraction_digits(text: bytes, start: int, end: int) -> int:
    """The digits after the dot of the word text[start:end] when there are 1 to 8 (what
    fixed_point_words reads), else 0."""
    dot = text.rfind(b".", int(start), int(end))
    places = int(end) - dot - 1
    return places if dot >= 0 and 1 <= places <= 8 else 0


def words_of(text: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Where each word (bytes between blanks, any byte up to a space) of `text` starts and
    where it ends (exclusive)."""
    blank = np.frombuffer(text, np.uint8) <= ord(" ")
    edges = np.flatnonzero(blank[1:] != blank[:-1]) + 1  # where a word starts or ends
    if len(blank) and not blank[0]:
        edges = np.concatenate(([0], edges))
    if len(blank) and not blank[-1]:
        edges = np.concatenate((edges, [len(blank)]))
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
    characters = np.frombuffer(padded, np.uint8, len(text), 16)
    values = np.empty(len(starts), np.int64 if integer else np.float64)
    exact = np.empty(len(starts), bool)
    parse = integer_words if integer else decimal_words
    if integer and b"-" not in text and b"+" not in text:  # digits and blanks only
        parse = unsigned_words

    places = 0 if integer or not len(starts) else _fraction_digits(text, starts[0], ends[0])
    for first in range(0, len(starts), _BLOCK):
        block = slice(first, first + _BLOCK)
        if places:  # every word as the first, until a block has one that is not
            fixed = fixed_point_words(characters, windows, starts[block], ends[block], places)
            if fixed[1].all():
                values[block], exact[block] = fixed
                continue
            places = 0
        values[block], exact[block] = parse(characters, windows, starts[block], ends[block])
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


def _in_pieces(payload: bytes, parse: Callable[[bytes], T | None]) -> list[T] | None:
    """parse() of pieces of whole lines of `payload`, on the host's cores for a large text
    (every step but the first check releases the GIL); None if any piece gives None."""

    def line_start(at: int) -> int:
        return at if at in (0, len(payload)) else payload.rfind(b"\n", 0, at) + 1

    def piece(start: int, stop: int) -> tuple[bool, T | None]:
        """(parsed, what it gives): a piece without a whole line gives nothing."""
        start, stop = line_start(start), line_start(stop)
        if stop <= start:
            return True, None
        found = parse(payload[start:stop])
        return found is not None, found

    pieces = map_row_chunks(len(payload), piece, min_rows=_PARALLEL_BYTES)
    if not all(parsed for parsed, _ in pieces):
        return None
    return [found for _, found in pieces if found is not None]


def fast_numbers(payload: bytes, dtype: type) -> np.ndarray | None:
    """What parse_numbers gives (every number of the text in order, lines ignored), for the
    usual text; None where the general parser must decide."""
    if dtype not in (np.int64, np.float64):
        return None
    pieces = _in_pieces(payload, lambda piece: _numbers(piece, dtype))
    return None if pieces is None else np.concatenate(pieces)


def _numbers(payload: bytes, dtype: type) -> np.ndarray | None:
    integer = np.issubdtype(dtype, np.integer)
    if payload.translate(None, _INTEGER_BYTES if integer else _FLOAT_BYTES):
        return None
    starts, ends = words_of(payload)
    if not integer and _mostly_exponents(payload, len(starts)):
        return None
    return parse_words(payload, starts, ends, dtype)


def _mostly_exponents(payload: bytes, words: int) -> bool:
    """Whether more than one word in 8 has an exponent (counted only where the text has an
    exponent letter at all: the search for one is a fast scan, counting is not)."""
    if b"e" not in payload and b"E" not in payload:
        return False
    return payload.count(b"e") + payload.count(b"E") > words // 8


def _lines_of_equal_words(text: bytes, ends: np.ndarray, lines: int, count: int) -> bool:
    """Whether each of the `lines` lines of `text` holds `count` words: the newline follows
    word count*i + count - 1 at once, for every line."""
    last_words = ends[count - 1 :: count]
    return len(last_words) == lines and bool(
        (np.frombuffer(text, np.uint8)[last_words] == ord("\n")).all()
    )


def fast_table(payload: bytes, dtype: type, columns: int | None) -> np.ndarray | None:
    """What parse_table gives, for the usual text (int64 or float64 numbers without
    exponents, every line `columns` numbers or more, or all lines the same count), or None
    where the general parser must decide (other bytes, blank or short lines, ragged rows,
    a word it would refuse)."""
    if dtype not in (np.int64, np.float64) or not payload.endswith(b"\n"):
        return None
    pieces = _in_pieces(payload, lambda piece: _table(piece, dtype, columns))
    if not pieces or len({table.shape[1] for table in pieces}) != 1:
        return None
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


def _table(payload: bytes, dtype: type, columns: int | None) -> np.ndarray | None:
    """fast_table of whole lines."""
    integer = np.issubdtype(dtype, np.integer)
    if payload.translate(None, _INTEGER_BYTES if integer else _FLOAT_BYTES):
        return None
    starts, ends = words_of(payload)
    if not integer and _mostly_exponents(payload, len(starts)):
        return None  # np.loadtxt at once is faster than word by word
    lines = int(np.count_nonzero(np.frombuffer(payload, np.uint8) == ord("\n")))  # 5x bytes.count
    per_line = len(starts) // max(lines, 1)
    if (
        per_line
        and per_line * lines == len(starts)
        and _lines_of_equal_words(payload, ends, lines, per_line)
    ):
        counts = np.full(lines, per_line)
        words_before = np.arange(1, lines + 1) * per_line
    else:  # lines of different lengths, blank ones, blanks before a newline
        line_ends = np.flatnonzero(np.frombuffer(payload, np.uint8) == ord("\n"))
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
