"""Column-wise text of 128-bit IDs whose top 48 bits are a millisecond timestamp: UUIDv7, ULID and TypeID batches.

The three standard 128-bit schemes share one shape: a 48-bit Unix-ms timestamp on top (constant over a run of IDs
issued in the same millisecond) and 80 low bits that vary per ID::

    127                       80 79            64 63                                                  0
    +---------------------------+----------------+-----------------------------------------------------+
    | timestamp_ms (48, per run)|  hi16 (column) |                  lo64 (column)                      |
    +---------------------------+----------------+-----------------------------------------------------+

A batch hands its varying bits over as two uint64 columns (``hi16``: bits 79..64, ``lo64``: bits 63..0) and its
runs as ``(high48_value, count)`` pairs (``high48_value`` = the 128-bit value with the low 80 bits zero). The text
of every ID then starts as a copy of its run's template row (the timestamp characters, separators, newline) and
the varying characters are laid down column-wise, one table lookup and one 4-byte write per group of characters:

* hex forms (``uuid`` 8-4-4-4-12, ``hex`` 32 digits): the low 80 bits are 20 hex digits = 5 chunks of 16 bits,
  each looked up in :func:`app.schemes._text.hex4_table`;
* base32 (Crockford, 26 characters; the top 48 bits + 2 pad bits are characters 0..9): characters 10..25 are
  character 10 (bits 79..75) and five groups of 3 characters (15 bits each: 74..60, 59..45, 44..30, 29..15,
  14..0), each looked up in a 32768-entry table whose 4th byte is a newline (overwritten by the next group, and
  the row's newline after the last).

Groups are written left to right, so each 4-byte write's spill is overwritten by the next one.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from app.schemes import _crockford, _text

LOW_BITS = 80
"""Bits that vary per ID (below the 48-bit timestamp)."""
HI_BITS = 16
"""Bits 79..64, the ``hi16`` column."""
CHUNK_BITS = 16
CHUNK_MASK = (1 << CHUNK_BITS) - 1
HEX_CHUNK_DIGITS = 4
HEX_LEN = 32
UUID_LEN = 36
UUID_SEPARATOR_POSITIONS = (8, 13, 18, 23)
UUID_CHUNK_COLUMNS = (14, 19, 24, 28, 32)
"""Columns of the low 80 bits' five 4-digit chunks in the 8-4-4-4-12 form (hex digits 12..31)."""
HEX_CHUNK_COLUMNS = (12, 16, 20, 24, 28)
"""The same chunks in the 32-digit form."""

BASE32_LEN = _crockford.ENCODED_LEN  # 26
BASE32_FIRST_VARYING_CHAR = 10
"""Characters 0..9 carry the 2 pad bits and the 48-bit timestamp; 10..25 the low 80 bits."""
TRIPLE_BITS = 3 * _crockford.CHAR_BITS  # 15
TRIPLE_MASK = (1 << TRIPLE_BITS) - 1
TRIPLE_COLUMNS = (11, 14, 17, 20, 23)
"""First characters of the five 3-character groups after character 10."""
TRIPLE_SHIFTS = (60, 45, 30, 15, 0)
"""Lowest bit (in the 128-bit value) of each 3-character group."""
LO64_BITS = 64
HEAD_CHAR_SHIFT = 75 - LO64_BITS  # character 10 = bits 79..75 = hi16 >> 11
HEAD_CHAR_SHIFT_IN_TRIPLE = 2 * _crockford.CHAR_BITS  # the first character of a triple entry is its top 5 bits
FIRST_TRIPLE_HI_BITS = 11
"""The first group (bits 74..60) takes hi16's low 11 bits and lo64's top 4."""
FIRST_TRIPLE_LO_SHIFT = 60

_ASCII_UPPER_A, _ASCII_UPPER_Z, _ASCII_CASE_OFFSET = ord("A"), ord("Z"), ord("a") - ord("A")


@functools.lru_cache(maxsize=4)
def base32_triples(lowercase: bool = False, pad: int = _text.NEWLINE) -> npt.NDArray[np.uint32]:
    """The 3 Crockford characters of every 15-bit value, then ``pad`` (a newline, or a JSON member's closing
    quote): ``(32768,)`` ``<u4``, byte j = char j."""
    table = _crockford.column_table(0, 0, BASE32_LEN - 3, 3, pad=pad, index_bits=TRIPLE_BITS)
    if not lowercase:
        return table
    chars = table.view(np.uint8).copy()
    upper = (chars >= _ASCII_UPPER_A) & (chars <= _ASCII_UPPER_Z)
    chars[upper] += _ASCII_CASE_OFFSET
    chars.flags.writeable = False
    return chars.view("<u4")


def _lookup(rows: npt.NDArray[np.uint8], column: int, table: npt.NDArray[np.uint32], index: npt.NDArray[Any]) -> None:
    """Write ``table[index]`` (one ``<u4`` per row) into ``rows`` at byte ``column``."""
    looked_up = _text.scratch("columns-chars", rows.shape[0], "<u4")
    np.take(table, index.view(np.int64), out=looked_up, mode="wrap")
    _text.char_view(rows, column)[...] = looked_up


def write_hex_chunks(
    rows: npt.NDArray[np.uint8], columns: Sequence[int], hi16: npt.NDArray[Any], lo64: npt.NDArray[Any]
) -> None:
    """Lay the 20 lowercase hex digits of the low 80 bits down as 5 chunks of 4 at ``columns`` (see the module)."""
    hex4 = _text.hex4_table()
    index = _text.scratch("columns-index", rows.shape[0], np.uint64)
    np.bitwise_and(hi16, CHUNK_MASK, out=index)
    _lookup(rows, columns[0], hex4, index)
    for column, shift in zip(columns[1:], (48, 32, 16, 0)):
        np.right_shift(lo64, np.uint64(shift), out=index)
        np.bitwise_and(index, np.uint64(CHUNK_MASK), out=index)
        _lookup(rows, column, hex4, index)


def write_base32_low80(
    rows: npt.NDArray[np.uint8],
    text_column: int,
    hi16: npt.NDArray[Any],
    lo64: npt.NDArray[Any],
    lowercase: bool = False,
) -> None:
    """Lay characters 10..25 of the 26-character Crockford text down, the text starting at ``text_column``.

    The row must hold at least one byte after the text (its newline): the last write covers characters 23..25
    and that byte, which it sets to a newline.
    """
    table = base32_triples(lowercase)
    index = _text.scratch("columns-index", rows.shape[0], np.uint64)
    other = _text.scratch("columns-other", rows.shape[0], np.uint64)
    np.right_shift(hi16, np.uint64(HEAD_CHAR_SHIFT), out=index)
    np.left_shift(index, np.uint64(HEAD_CHAR_SHIFT_IN_TRIPLE), out=index)
    _lookup(rows, text_column + BASE32_FIRST_VARYING_CHAR, table, index)
    # Bits 74..60: hi16's low 11 bits, then lo64's top 4.
    np.bitwise_and(hi16, np.uint64((1 << FIRST_TRIPLE_HI_BITS) - 1), out=index)
    np.left_shift(index, np.uint64(LO64_BITS - FIRST_TRIPLE_LO_SHIFT), out=index)
    np.right_shift(lo64, np.uint64(FIRST_TRIPLE_LO_SHIFT), out=other)
    np.bitwise_or(index, other, out=index)
    _lookup(rows, text_column + TRIPLE_COLUMNS[0], table, index)
    for column, shift in zip(TRIPLE_COLUMNS[1:], TRIPLE_SHIFTS[1:]):
        np.right_shift(lo64, np.uint64(shift), out=index)
        np.bitwise_and(index, np.uint64(TRIPLE_MASK), out=index)
        _lookup(rows, text_column + column, table, index)


def template_rows(templates: Sequence[tuple[bytes, int]], key: str = "columns-rows") -> npt.NDArray[np.uint8]:
    """Rows of text: each ``(row, count)`` repeated ``count`` times (see :func:`app.schemes._text.text_rows`)."""
    return _text.text_rows([(row, count) for row, count in templates if count], key)
