"""Tests for app.schemes._crockford: the shared 128-bit Crockford base32 codec and the column-wise batch helpers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.errors import InvalidIdError
from app.schemes import _crockford, _text
from app.schemes._crockford import ULID, WIJI, decode, encode

VALUES = st.integers(min_value=0, max_value=_crockford.VALUE_MAX)
WIJI_VALUES = st.integers(min_value=0, max_value=(1 << 126) - 1)  # first character 0 or 1


# --- single values ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "00000000000000000000000000"),
        (1, "00000000000000000000000001"),
        (31, "0000000000000000000000000Z"),
        (32, "00000000000000000000000010"),
        (_crockford.VALUE_MAX, "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"),
        (1 << 125, "10000000000000000000000000"),
        # HLC-ULID vector (docs/schemes/hlc-ulid.md) and Wiji vectors (errata-corrected).
        (0x017FC21C5E7A0000000AAAA111111111, "01FZ11RQKT000002NAM48H248H"),
        (0x00000000000000000010000000000000, "00000000000000040000000000"),
        (0x0006524DE00000002A1ABCDEF0123450, "000S94VR000002M6NWVVR14D2G"),
    ],
)
def test_encode_decode_vectors(value: int, text: str) -> None:
    assert encode(value) == text
    assert decode(text, ULID) == value
    assert decode(text.lower(), ULID) == value
    if value < 1 << 126:
        assert decode(text, WIJI) == value


@pytest.mark.parametrize(
    ("dialect", "text", "same_as"),
    [
        (ULID, "O1FZ11RQKTOOOOO2NAM48H248H", "01FZ11RQKT000002NAM48H248H"),
        (ULID, "0iFZiiRQKT000002NAM48H248H", "01FZ11RQKT000002NAM48H248H"),
        (ULID, "0LFZllRQKT000002NAM48H248H", "01FZ11RQKT000002NAM48H248H"),
        (ULID, "01fz11rqkt000002nam48h248h", "01FZ11RQKT000002NAM48H248H"),
        (WIJI, "000S94VR000002M6NWVVR14D2G", "000S94VR000002M6NWVVR14D2G"),
        (WIJI, "oooS94uR0000o2M6NWuVRi4D2G", "000S94VR000002M6NWVVR14D2G"),
        (WIJI, "000S94UR000002M6NWUVRL4D2G", "000S94VR000002M6NWVVR14D2G"),
    ],
)
def test_decode_substitutions(dialect: _crockford.Dialect, text: str, same_as: str) -> None:
    assert decode(text, dialect) == decode(same_as, dialect)


@pytest.mark.parametrize(
    ("dialect", "text", "fragment"),
    [
        (ULID, "", "must be exactly 26 characters long, got 0"),
        (ULID, "0" * 25, "must be exactly 26 characters long, got 25"),
        (ULID, "0" * 27, "must be exactly 26 characters long, got 27"),
        (ULID, "0" * 25 + "U", "got 'U' at position 25"),
        (ULID, "0" * 25 + "u", "Crockford base32 alphabet"),
        (ULID, "0" * 12 + "!" + "0" * 13, "got '!' at position 12"),
        (ULID, "0" * 12 + " " + "0" * 13, "got ' ' at position 12"),
        (ULID, "0" * 12 + "-" + "0" * 13, "got '-' at position 12"),
        (ULID, "\u0661" + "0" * 25, "got '\u0661' at position 0"),  # Arabic-Indic digit one
        (ULID, "0" * 25 + "\u0130", "at position 25"),  # dotted capital I is not I
        (ULID, "8" + "0" * 25, "ULID overflow: the first character must be 0..7"),
        (ULID, "Z" + "0" * 25, "got 'Z'"),
        (WIJI, "2" + "0" * 25, "Wiji base32 must start with 0 or 1"),
        (WIJI, "7" + "Z" * 25, "must start with 0 or 1"),
        (WIJI, "0" * 25 + "*", "Wiji base32 must use the Crockford base32 alphabet"),
        (WIJI, "0" * 26 + "\n", "got 27"),
    ],
)
def test_decode_rejects(dialect: _crockford.Dialect, text: str, fragment: str) -> None:
    with pytest.raises(InvalidIdError) as excinfo:
        decode(text, dialect)
    assert fragment in str(excinfo.value)


@pytest.mark.parametrize("value", [-1, 1 << 128])
def test_encode_rejects_out_of_range(value: int) -> None:
    with pytest.raises(ValueError, match="128-bit value"):
        encode(value)


@given(VALUES)
def test_round_trip_ulid(value: int) -> None:
    text = encode(value)
    assert len(text) == _crockford.ENCODED_LEN
    assert set(text) <= set(_crockford.ALPHABET)
    assert decode(text, ULID) == value
    assert decode(text.lower(), ULID) == value


@given(WIJI_VALUES)
def test_round_trip_wiji(value: int) -> None:
    assert decode(encode(value), WIJI) == value


@given(VALUES, VALUES)
def test_text_order_is_value_order(a: int, b: int) -> None:
    assert (encode(a) < encode(b)) == (a < b)


@given(VALUES)
def test_top_chars_encode_exactly_the_top_48_bits(value: int) -> None:
    low_80_bits = (1 << 80) - 1
    assert encode(value)[: _crockford.TOP_CHARS] == encode(value & ~low_80_bits)[: _crockford.TOP_CHARS]
    assert encode(value)[_crockford.TOP_CHARS :] == encode(value & low_80_bits)[_crockford.TOP_CHARS :]


# --- batch helpers ----------------------------------------------------------------------------------------------------


@st.composite
def table_specs(draw: st.DrawFn) -> tuple[int, int, int, int, int]:
    """(base, shift, first, chars, index_bits) with base zero where v << shift lands and v << shift inside 128 bits."""
    index_bits = draw(st.sampled_from([16, 18]))
    chars = draw(st.integers(1, 4))
    first = draw(st.integers(0, _crockford.ENCODED_LEN - chars))
    shift = draw(st.integers(0, _crockford.VALUE_BITS - index_bits))
    base = draw(VALUES) & ~(((1 << index_bits) - 1) << shift)
    return base, shift, first, chars, index_bits


@settings(max_examples=60, deadline=None)
@given(table_specs(), st.lists(st.integers(0, (1 << 18) - 1), min_size=1, max_size=20), st.integers(0, 255))
def test_column_table_matches_encode(spec: tuple[int, int, int, int, int], probes: list[int], pad: int) -> None:
    base, shift, first, chars, index_bits = spec
    table = _crockford.column_table(base, shift, first, chars, pad=pad, index_bits=index_bits)
    assert table.shape == (1 << index_bits,) and table.dtype == np.dtype("<u4")
    for v in probes:
        v &= (1 << index_bits) - 1
        expected = encode(base | v << shift)[first : first + chars].encode() + bytes([pad]) * (4 - chars)
        assert table[v : v + 1].tobytes() == expected


def test_column_table_is_cached_by_the_window_only() -> None:
    # Characters 11..14 cover bits 74..55: bits outside them do not make a new table.
    a = _crockford.column_table(0b101 << 72, 56, 11, 4)
    b = _crockford.column_table(0b101 << 72 | 1 << 100 | 12345, 56, 11, 4)
    assert a is b
    with pytest.raises(ValueError, match="not 1..4 of the 26 characters"):
        _crockford.column_table(0, 0, 23, 4)


def test_hex4_table() -> None:
    table = _text.hex4_table()
    for v in (0, 1, 0xABCD, 0xFFFF, 0x0F0F):
        assert table[v : v + 1].tobytes() == f"{v:04x}".encode()


def test_text_rows_repeats_rows_part_after_part() -> None:
    rows = _text.text_rows([(b"abc\n", 3), (b"xyz\n", 0), (b"def\n", 5)], key="test-rows")
    assert rows.shape == (8, 4)
    assert rows.tobytes() == b"abc\n" * 3 + b"def\n" * 5
    one = _text.text_rows([(b"0123456789\n", 1)], key="test-rows")
    assert one.tobytes() == b"0123456789\n"
    with pytest.raises(ValueError, match="every row must be 4 bytes long"):
        _text.text_rows([(b"abc\n", 1), (b"abcd\n", 1)], key="test-rows")


@given(st.integers(1, 3000), st.binary(min_size=1, max_size=40))
def test_text_rows_any_count(count: int, row: bytes) -> None:
    assert _text.text_rows([(row, count)], key="test-rows").tobytes() == row * count


@pytest.mark.parametrize(
    "parts",
    [
        [(b"abc\n", 3), (b"xyz\n", 0), (b"def\n", 5)],  # the largest part last: it fills, the first overwrites
        [(b"abc\n", 5000), (b"def\n", 3000), (b"ghi\n", 1)],  # a part large enough for memcpy doubling
        [(b"0123456789\n", 1)],
    ],
)
def test_fresh_rows_repeats_rows_part_after_part_in_a_bytearray(parts: list[tuple[bytes, int]]) -> None:
    buffer, rows = _text.fresh_rows(parts)
    assert isinstance(buffer, bytearray) and buffer == b"".join(row * count for row, count in parts)
    assert rows.shape == (sum(count for _, count in parts), len(parts[0][0]))
    rows[0, 0] = ord("!")  # the rows are the buffer's bytes
    assert buffer[0] == ord("!")
    with pytest.raises(ValueError, match="every row must be 4 bytes long"):
        _text.fresh_rows([(b"abc\n", 1), (b"abcd\n", 1)])


def test_char_view_writes_four_characters_per_row() -> None:
    rows = _text.text_rows([(b"..........\n", 3)], key="test-rows")
    view = _text.char_view(rows, 5)
    view[...] = np.frombuffer(b"ABCDEFGHIJKL", dtype="<u4")
    assert rows.tobytes() == b".....ABCD.\n.....EFGH.\n.....IJKL.\n"
    _text.char_view(rows, 0, "<u2")[1] = np.frombuffer(b"xy", dtype="<u2")[0]
    assert rows.tobytes()[11:13] == b"xy"
    with pytest.raises(ValueError, match="overruns"):
        _text.char_view(rows, 8)


def test_scratch_is_reused_and_grows() -> None:
    a = _text.scratch("test-scratch", 10, np.intp)
    b = _text.scratch("test-scratch", 20, np.intp)
    assert a.shape == (10,) and b.shape == (20,)
    assert np.shares_memory(a, b)
    big = _text.scratch("test-scratch", 1 << 17, np.intp)
    assert big.shape == (1 << 17,)
    assert _text.scratch("test-scratch", 5, np.uint8).dtype == np.uint8


def test_scratch_does_not_keep_huge_arrays() -> None:
    size = _text.SCRATCH_KEPT_BYTES_MAX // 8 + 1
    a = _text.scratch("test-huge", size, np.intp)
    b = _text.scratch("test-huge", size, np.intp)
    assert a.shape == (size,) and not np.shares_memory(a, b)
