"""The whole-array number parser of the text mesh readers (voxelizer/io/text_numbers.py)
against np.loadtxt, the parser it stands in for: the same values bit for bit (signed zeros,
the last digit's rounding, 2^53 and beyond, long words), the same refusals, and its own
words read by it (not silently all handed back to np.loadtxt). OBJ, ASCII STL and ASCII
PLY files of every layout read the same with it as without it."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from voxelizer import load_mesh, parallel
from voxelizer.io import mesh_parsing, text_numbers
from voxelizer.io.text_numbers import (
    decimal_words,
    fast_numbers,
    fast_table,
    fixed_point_words,
    integer_words,
    parse_words,
    unsigned_words,
    words_of,
)

from .test_mesh_readers import (
    cube_of_quads,
    obj_in_pieces,
    obj_text,
    obj_variants,
    ply_variants,
    prism,
    stl_variants,
    suzanne,
)

FLOAT_WORD = re.compile(rb"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\Z")  # what strtod takes
INTEGER_WORD = re.compile(rb"[+-]?\d+\Z")


def loadtxt_table(payload: bytes, dtype: type, columns: int | None = None) -> np.ndarray | None:
    usecols = None if columns is None else range(columns)
    try:
        return np.loadtxt(io.BytesIO(payload), dtype=dtype, usecols=usecols, comments=None, ndmin=2)
    except ValueError:
        return None


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.view("u8"), b.view("u8"))


def exact_words(text: bytes, integer: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(words' values, which words the fast path read itself, the words)."""
    starts, ends = words_of(text)
    padded = bytes(16) + text + bytes(16)
    windows = np.ndarray((len(padded) - 7,), "<u8", padded, 0, (1,))
    parse = integer_words if integer else decimal_words
    characters = np.frombuffer(padded, np.uint8, len(text), 16)
    values, exact = parse(characters, windows, starts, ends)
    return values, exact, np.array([text[a:b] for a, b in zip(starts, ends)], object)


@pytest.mark.parametrize(
    "style", ["%.8f", "%.6f", "%f", "%.1f", "%.0f", "%.15g", "%.17g", "%g", "%.4e", "repr"]
)
def test_printf_styles_parse_as_loadtxt_parses_them(style):
    rng = np.random.default_rng(3)
    values = rng.normal(size=(4000, 3)) * 10.0 ** rng.integers(-7, 9, size=(4000, 1))
    values[:10] = [[0.0, -0.0, 1.0], [-1e-9, 2**53, -(2**53) - 2]] * 5
    write = repr if style == "repr" else (lambda v: style % v)
    payload = "".join(" " + " ".join(write(float(v)) for v in row) + "\n" for row in values)
    table = fast_table(payload.encode(), np.float64, None)
    expected = loadtxt_table(payload.encode(), np.float64)
    if payload.count("e") > values.size // 8:  # mostly exponents: np.loadtxt reads them
        assert table is None
        return
    assert table is not None and expected is not None
    assert same_bits(table, expected)
    assert same_bits(fast_table(payload.encode(), np.float64, 2), expected[:, :2])


def test_the_usual_words_are_read_by_the_fast_path():
    """Fixed decimals and indices of up to 8 bytes do not fall back to np.loadtxt."""
    rng = np.random.default_rng(4)
    floats = " ".join(f"{v:.8f}" for v in rng.normal(size=3000) * 100).encode() + b"\n"
    _, exact, _ = exact_words(floats, integer=False)
    assert exact.all()
    integers = " ".join(str(v) for v in rng.integers(-(10**7), 10**8, 3000)).encode() + b"\n"
    _, exact, _ = exact_words(integers, integer=True)
    assert exact.all()


@pytest.mark.parametrize("integer", [False, True])
def test_random_words_are_exact_or_handed_back(integer):
    """Words of digits, signs, dots and exponent letters in any order: every word the fast
    path reads is a number with the value strtod gives it (its sign too), and every plain
    short number is read by it."""
    rng = np.random.default_rng(5)
    alphabet = np.frombuffer(b"0123456789" * 4 + (b"+-" if integer else b"+-.eE.."), np.uint8)
    words = [bytes(rng.choice(alphabet, rng.integers(1, 19))) for _ in range(30000)]
    values, exact, found = exact_words(b" ".join(words) + b"\n", integer)
    assert list(found) == words
    plain = re.compile(rb"[+-]?\d+\Z" if integer else rb"[+-]?(\d+\.?\d*|\.\d+)\Z")
    for word, value, read in zip(words, values.tolist(), exact.tolist()):
        if read:
            if integer:
                assert INTEGER_WORD.match(word) and int(word) == value, word
            else:
                assert FLOAT_WORD.match(word), word
                assert float(word) == value and np.signbit(float(word)) == np.signbit(value)
        elif plain.match(word) and len(word) <= (8 if integer else 16):
            digits = int(word.lstrip(b"+-").replace(b".", b""))
            assert not integer and digits > 2**53, word  # only inexact mantissas go back
    assert exact.sum() > len(words) // 10


@pytest.mark.parametrize(
    "payload",
    [
        b" +5 -3 007\n",
        b" -0.0 +.5 5.\n",
        b"1.e5 .5e1 5.\n",
        b"9007199254740993 1 1\n",  # above 2^53: rounded by strtod
        b"9007199254740992. 0.9007199254740993 -900719925474099.3\n",
        b"12345678901234567 1 2\n",
        b"99999999999999999999 1 2\n",
        b"0.00000000000000001 1 2\n",
        b"-9223372036854775808 1 2\n",
        b" 1\t2  3 \n",
        b"1 2 3 1-2\n4 5 6 7\n",  # the words after the first columns are not read
    ],
)
@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_edge_words_parse_as_loadtxt_parses_them(payload, dtype):
    for columns in (None, 3, 2):
        expected = loadtxt_table(payload, dtype, columns)
        table = fast_table(payload, dtype, columns)
        if table is not None:  # None: the caller asks np.loadtxt
            assert expected is not None and same_bits(table, expected), (payload, columns)


@pytest.mark.parametrize(
    "payload",
    [b"--1 2 3\n", b"1-2 3 4\n", b". 1 2\n", b"- 1 2\n", b"1.2.3 1 2\n", b"1e 2 3\n", b"+ 1 2\n"],
)
@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_malformed_words_are_refused(payload, dtype):
    assert loadtxt_table(payload, dtype) is None
    assert fast_table(payload, dtype, None) is None
    starts, ends = words_of(payload)
    if not payload.translate(
        None, b"0123456789+- \n" if dtype is np.int64 else b"0123456789+-.eE \n"
    ):
        assert parse_words(payload, starts, ends, dtype) is None


def test_ragged_blank_and_other_lines_are_left_to_loadtxt():
    for payload in (b"1 2 3\n4 5\n", b"1 2 3\n\n4 5 6\n", b"1 2 nan\n", b"1 2 3\r\n", b"0x1 2 3\n"):
        assert fast_table(payload, np.float64, None) is None
    assert fast_table(b"1 2 3\n", np.int32, None) is None  # only int64 and float64


@cache
def large_table() -> tuple[bytes, np.ndarray, np.ndarray]:
    """100,000 rows of 3 numbers with long and short lines: the bytes, np.loadtxt's table of
    them and np.loadtxt's numbers of them in one row (made once for every thread count)."""
    rng = np.random.default_rng(6)
    values = np.round(rng.normal(size=(100_000, 3)) * 1000, 6)
    lines = [f"{x:.6f} {y:.6f} {z:.6f}" for x, y, z in values.tolist()]
    lines[::997] = [line + " " * 5000 + "1.5" for line in lines[::997]]  # long lines
    payload = ("\n".join(lines) + "\n").encode()
    expected = loadtxt_table(payload, np.float64, 3)
    every_number = np.loadtxt(io.BytesIO(payload.replace(b"\n", b" ")), comments=None, ndmin=1)
    return payload, expected, every_number


@pytest.mark.parametrize("threads", [2, 8, 13])
def test_a_large_table_split_over_threads_is_whole(threads):
    """Split at line starts into as many pieces as there are threads (however many cores
    this machine has), with long and short lines, every line once and in order."""
    payload, expected, every_number = large_table()
    parallel.use_threads(threads)
    try:
        assert same_bits(fast_table(payload, np.float64, 3), expected)
        assert same_bits(fast_numbers(payload, np.float64), every_number)
    finally:
        parallel.use_threads(None)


# --- files: the readers with and without the fast path --------------------------------------


def read_both_ways(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mesh of `path` is the same when all its numbers go to np.loadtxt, and the fast
    path read at least one of its tables."""
    used = []

    def spy(parse: Callable[..., np.ndarray | None]) -> Callable[..., np.ndarray | None]:
        def parse_and_count(*args: object) -> np.ndarray | None:
            values = parse(*args)
            used.append(values is not None)
            return values

        return parse_and_count

    monkeypatch.setattr(mesh_parsing, "fast_table", spy(fast_table))
    monkeypatch.setattr(mesh_parsing, "fast_numbers", spy(fast_numbers))
    fast = load_mesh(path)
    monkeypatch.setattr(mesh_parsing, "fast_table", lambda *args: None)
    monkeypatch.setattr(mesh_parsing, "fast_numbers", lambda *args: None)
    slow = load_mesh(path)
    assert same_bits(fast.vertices, slow.vertices) and same_bits(fast.faces, slow.faces)
    assert any(used), path.name


def fixed_decimals_obj(corner: str = "{v}", negative: bool = False) -> bytes:
    """obj_text with coordinates in fixed decimals (as most exporters write them)."""
    vertices, faces = suzanne()
    text = obj_text(vertices, faces, corner, negative)
    return re.sub(rb"-?\d+\.\d+(e-?\d+)?", lambda m: b"%.6f" % float(m[0]), text)


@cache
def obj_files() -> dict[str, bytes]:
    """The OBJ files, by name (made once: each test reads one)."""
    files = {name: data for name, (data, _) in obj_variants().items()}
    vertices, faces = suzanne()
    cube, quads = cube_of_quads()
    polygon_vertices, polygons = prism()
    files["fixed"] = fixed_decimals_obj()
    files["fixed v/vt/vn"] = fixed_decimals_obj("{v}/{t}/{n}")
    files["fixed negative v//vn"] = fixed_decimals_obj("{v}//{n}", negative=True)
    files["fixed quads"] = obj_text(cube, quads)
    files["fixed polygons v/vt"] = obj_text(polygon_vertices, polygons, "{v}/{t}")
    files["comments"] = (
        fixed_decimals_obj()
        .replace(b"\nf ", b"\n# a face\nf ", 5)
        .replace(b"\nv ", b"\nv 0.5 0.25 0.125 # a comment\nv ", 3)
    )
    files["pieces, negative"] = obj_in_pieces(vertices, faces, negative=True)
    return files


@pytest.mark.parametrize("name", list(obj_files()))
def test_obj_files_read_the_same_without_the_fast_path(tmp_path, monkeypatch, name):
    path = tmp_path / "model.obj"
    path.write_bytes(obj_files()[name])
    read_both_ways(path, monkeypatch)


@pytest.mark.parametrize("variant", [name for name in stl_variants() if "ascii" in name])
def test_ascii_stl_reads_the_same_without_the_fast_path(tmp_path, monkeypatch, variant):
    path = tmp_path / "model.stl"
    path.write_bytes(stl_variants()[variant])
    read_both_ways(path, monkeypatch)


@pytest.mark.parametrize("variant", [name for name in ply_variants() if "ascii" in name])
def test_ascii_ply_reads_the_same_without_the_fast_path(tmp_path, monkeypatch, variant):
    path = tmp_path / "model.ply"
    path.write_bytes(ply_variants()[variant])
    read_both_ways(path, monkeypatch)


def test_numbers_of_a_text_parse_as_loadtxt_parses_them():
    rng = np.random.default_rng(7)
    text = "".join(
        f"{v:.5f}\n" if i % 7 else f"{int(v)} {v:.3f}\n"
        for i, v in enumerate(rng.normal(size=5000) * 1000)
    ).encode()
    expected = np.loadtxt(io.BytesIO(text.replace(b"\n", b" ")), comments=None, ndmin=1)
    assert same_bits(fast_numbers(text, np.float64), expected)
    assert fast_numbers(text + b"nan\n", np.float64) is None
    assert fast_numbers(b"1 2 x\n", np.int64) is None


def test_words_of_digits_parse_as_with_signs_allowed():
    """unsigned_words (a text without signs) gives integer_words' values and exactness, for
    words of 1 to 12 digits, leading zeros, and words at the text's two ends."""
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 13, 3000)
    words = [bytes(rng.integers(48, 58, n).astype(np.uint8)) for n in lengths]
    words[:3] = [b"0", b"00000007", b"99999999"]
    text = b" ".join(words[:1500]) + b"\n" + b"\t".join(words[1500:])
    starts, ends = words_of(text)
    padded = bytes(16) + text + bytes(16)
    windows = np.ndarray((len(padded) - 7,), "<u8", padded, 0, (1,))
    characters = np.frombuffer(padded, np.uint8, len(text), 16)
    values, exact = unsigned_words(characters, windows, starts, ends)
    expected, expected_exact = integer_words(characters, windows, starts, ends)
    assert np.array_equal(exact, expected_exact) and exact.sum() > 1000
    assert np.array_equal(values[exact], expected[exact])
    assert np.array_equal(values[exact], [int(w) for w, e in zip(words, exact) if e])


def windows_of(text: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(characters, windows, starts, ends) of a text, as parse_words makes them."""
    starts, ends = words_of(text)
    padded = bytes(16) + text + bytes(16)
    windows = np.ndarray((len(padded) - 7,), "<u8", padded, 0, (1,))
    return np.frombuffer(padded, np.uint8, len(text), 16), windows, starts, ends


@pytest.mark.parametrize("places", range(1, 9))
def test_fixed_point_words_are_decimal_words(places):
    """Words of `places` digits after the dot: every word fixed_point_words reads has the
    value strtod gives it, bit for bit (its sign, -0.0, mantissas about 2^53), every one of
    1 to 8 digits before the dot and a mantissa up to 2^53 is read by it, and any other
    (another count of places, no dot, no digit before the dot, a stray sign or dot, 9
    digits before it) is handed back."""
    rng = np.random.default_rng(places)
    whole = [bytes(rng.integers(48, 58, n).astype(np.uint8)) for n in rng.integers(0, 10, 6000)]
    tail = [bytes(rng.integers(48, 58, places).astype(np.uint8)) for _ in whole]
    signs = rng.choice([b"", b"-", b"+"], len(whole))
    dots = rng.choice([b".", b"", b"-"], len(whole), p=[0.8, 0.1, 0.1])  # or none
    words = [sign + w + dot + t for sign, w, dot, t in zip(signs, whole, dots, tail)]
    words[:8] = [b"-0." + b"0" * places, b"0." + b"0" * places, b"9007199." + b"2" * places]
    words[3:8] = [b"1." + b"0" * (places + 1), b"1" + b"0" * places, b"+-1." + b"5" * places]
    words[6:8] = [b"1.." + b"5" * places, b"-." + b"5" * places]
    text = b" ".join(words[:3000]) + b"\n" + b"\t".join(words[3000:]) + b"\n"
    characters, windows, starts, ends = windows_of(text)
    values, exact = fixed_point_words(characters, windows, starts, ends, places)
    general, general_exact = decimal_words(characters, windows, starts, ends)
    for word, value, read in zip(words, values.tolist(), exact.tolist()):
        head, dot, fraction = word.lstrip(b"+-").partition(b".")
        usual = (
            FLOAT_WORD.match(word) is not None
            and dot == b"."
            and 1 <= len(head) <= 8
            and len(fraction) == places
            and int(head + fraction) <= 2**53
        )
        assert read == usual, word
        if read:
            assert float(word) == value and np.signbit(float(word)) == np.signbit(value), word
    assert same_bits(values[exact & general_exact], general[exact & general_exact])
    assert exact.sum() > len(words) // 2


def test_a_text_of_fixed_places_then_others_parses_as_loadtxt_parses_it(monkeypatch):
    """parse_words reads blocks of words of the first word's places by fixed_point_words
    until a block has another word, then every block as before: the values stay np.loadtxt's
    whichever way each block went (blocks of 64 words here)."""
    monkeypatch.setattr(text_numbers, "_BLOCK", 64)
    taken = []

    def spy(*args: object) -> tuple[np.ndarray, np.ndarray]:
        found = fixed_point_words(*args)  # type: ignore[arg-type]
        taken.append(bool(found[1].all()))
        return found

    monkeypatch.setattr(text_numbers, "fixed_point_words", spy)
    rng = np.random.default_rng(11)
    values = rng.normal(size=1000) * 10.0 ** rng.integers(-3, 7, 1000)
    words = [f"{v:.6f}" for v in values[:500]] + [f"{v:.4f}" for v in values[500:600]]
    words += [f"{v:.6f}" for v in values[600:]] + ["1e3", "-0.000000", "7"]
    text = " ".join(words).encode() + b"\n"
    starts, ends = words_of(text)
    parsed = parse_words(text, starts, ends, np.float64)
    expected = np.loadtxt(io.BytesIO(text), comments=None, ndmin=1)
    assert parsed is not None and same_bits(parsed, expected)
    assert taken == [True] * 7 + [False]  # 7 blocks of .6f, then one with a .4f word


@pytest.mark.parametrize("layout", ["runs", "scattered"])
def test_payloads_are_their_lines_with_the_keyword_blanked(layout):
    """TextLines.payload, of lines in a few runs (joined, then blanked) or scattered among
    others (picked by a mask): each picked line as written, its keyword (after any indent)
    replaced by spaces, in order, ending in a newline; U+0085 and U+00A0 bytes as spaces."""
    rng = np.random.default_rng(len(layout))
    kinds = [b"v 1 2 3", b"\tv 0.5 1e3 -2\r", b"   v\t4 5 6", b"f 1 2 3", b"# v 1", b""]
    kinds += [b"vn 0 0 1", b"v 7 8\xa09", b"v"]
    if layout == "runs":  # long runs of v lines between a few others
        picks = np.repeat(rng.integers(0, len(kinds), 12), rng.integers(1, 400, 12))
    else:
        picks = rng.integers(0, len(kinds), 3000)
    text = b"\n".join(kinds[i] for i in picks)  # no newline at the end
    lines = mesh_parsing.TextLines(text)
    picked = lines.with_keyword(b"v")
    expected = b""
    for line in text.split(b"\n"):
        words = line.lstrip(b" \t")
        if words[:1] == b"v" and words[1:2] in (b"", b" ", b"\t", b"\r"):
            at = len(line) - len(words)
            expected += line[:at] + b" " + line[at + 1 :] + b"\n"
    payload = lines.payload(picked, 1)
    assert payload == expected.replace(b"\xa0", b" ")
    runs = np.count_nonzero(np.diff(picked) != 1) + 1
    assert (runs < 16) == (layout == "runs")  # the path the test means to take
