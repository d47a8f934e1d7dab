"""SIQ batches: column-wise (numpy) encoding of did, hex and decimal forms, and the SIQ generator.

Imports :mod:`app.schemes.siq.codec` (layout and text forms); :mod:`app.schemes.siq.scheme` (settings and
``SCHEME``) imports this module and builds the generator.
"""

from __future__ import annotations

import base64
import functools
import threading
import time
import zlib
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from app.errors import InvalidOptionError
from app.schemes import _text
from app.schemes._text import NEWLINE
from app.schemes.base import (
    SMALL_BATCH,
    Batch,
    Clock,
    Generator,
    GeneratorStats,
    Run,
    scalar_lines,
)
from app.schemes.siq.codec import (
    BASE32_ALPHABET,
    BASE32_CHAR_BITS,
    BYTE_BITS,
    CRC_FIELD_BYTES,
    DID_DROPPED_CHARS,
    DID_LEN,
    DID_PAIRS,
    DID_PREFIX,
    DID_PREFIX_LEN,
    HEX_DIGIT_BITS,
    HEX_LEN,
    LOW_BITS,
    PACKED_BITS,
    PACKED_BYTES,
    QUALIFIERS,
    SHARD_MAX,
    TEXT,
    TICK_BITS,
    TICK_MAX,
    TICK_SHIFT,
    _pack_prefix,
    domain_hash,
    encode_hex,
    encode_low,
    ns_from_tick,
    qualifier_width,
    tick_from_ns,
)

# --- batch encoding: lookup tables (built once, lazily) -----------------------------------------------------------

WORD_BYTES = 8
"""Text is written 8 bytes at a time: one little-endian uint64 per row and (unaligned) column offset."""
CRC_BITS = 32
_CHAR_MASK = (1 << BASE32_CHAR_BITS) - 1
_THREE_CHAR_BITS = 3 * BASE32_CHAR_BITS  # 15
_THREE_CHAR_MASK = (1 << _THREE_CHAR_BITS) - 1
_HEX_DIGIT_MASK = (1 << HEX_DIGIT_BITS) - 1
_LOW_HEX_DIGITS = LOW_BITS // HEX_DIGIT_BITS  # 4
_DEC4 = 10_000
_DEC4_DIGITS = 4


@functools.cache
def crc32_position_table() -> npt.NDArray[np.uint32]:
    """(14, 256) uint32: the CRC-32 contribution of byte value b at position i of a 14-byte message.

    CRC-32 is affine over GF(2): for messages of equal length ``crc(m) = crc(base) ^ XOR_i T[i, m[i] ^ base[i]]``,
    with ``T[i, b] = crc32(one-hot(i, b)) ^ crc32(zeros)`` (zlib.crc32 over one-hot messages).
    """
    zeros = bytes(PACKED_BYTES)
    crc_zeros = zlib.crc32(zeros)
    table = np.empty((PACKED_BYTES, 1 << BYTE_BITS), dtype=np.uint32)
    for position in range(PACKED_BYTES):
        message = bytearray(zeros)
        for byte in range(1 << BYTE_BITS):
            message[position] = byte
            table[position, byte] = zlib.crc32(message) ^ crc_zeros
    return table


def crc32_rows(rows: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint32]:
    """zlib CRC-32 of every row of an (n, 14) uint8 array, column-wise with :func:`crc32_position_table`."""
    table = crc32_position_table()
    crc = np.full(rows.shape[0], zlib.crc32(bytes(PACKED_BYTES)), dtype=np.uint32)
    for position in range(PACKED_BYTES):
        crc ^= table[position].take(rows[:, position])
    return crc


@functools.cache
def _crc_low_table() -> npt.NDArray[np.uint32]:
    """(65536,) uint32: the CRC-32 contribution of every value of the serial field (packed bytes 12 and 13)."""
    table = crc32_position_table()
    high, low = table[PACKED_BYTES - 2], table[PACKED_BYTES - 1]
    low_table: npt.NDArray[np.uint32] = (high[:, None] ^ low[None, :]).ravel()
    return low_table


def _crc_index_word(crc: Any) -> Any:
    """The did form's checksum word (bytes 8..15: k3..k10) in index form, one 5-bit base32 value per byte, of the
    CRC-32 ``crc`` (a Python int or a uint64 array): k3 = CRC bits 31..28 (its top bit is the CRC field's last
    always-zero bit), k4..k8 = bits 27..3, k9 = bits 2..0 in its top 3 bits; k9's low 2 bits and k10 (tick bits) are
    left 0. The map is linear over GF(2): ``index(a ^ b) = index(a) ^ index(b)``."""
    word = crc >> _DID_K3_SHIFT + 2 * BASE32_CHAR_BITS
    for char in range(1, _DID_K9_BYTE):
        word |= (crc >> (_DID_K3_SHIFT + BASE32_CHAR_BITS * (2 - char)) & _CHAR_MASK) << BYTE_BITS * char
    return word | (crc & (1 << _DID_K9_CRC_BITS) - 1) << (BYTE_BITS * _DID_K9_BYTE + _DID_K9_TICK_BITS)


@functools.cache
def _crc_index_counter(code: int) -> npt.NDArray[np.uint64]:
    """(2**(16-w),) uint64, read-only: :func:`_crc_index_word` of the serial field's CRC-32 contribution for every
    counter of qualifier ``code`` (a segment's checksum words in index form are its prefix's xor a slice of this)."""
    crc = _crc_low_table().take(_serial_fields(code)).astype(np.uint64)
    table: npt.NDArray[np.uint64] = _crc_index_word(crc)
    table.flags.writeable = False
    return table


@functools.lru_cache(maxsize=64)
def _did_tail_counter(code: int, domain_hash: int) -> npt.NDArray[np.uint64]:
    """(2**(16-w),) uint64: the did form's last word (k25..k31 and the newline) for every counter of qualifier
    ``code`` under ``domain_hash`` (k25..k27 and part of k28 are the domain hash's low bits)."""
    block = base64.b32encode(bytes(CRC_FIELD_BYTES) + _pack_prefix(0, 0, domain_hash).to_bytes(PACKED_BYTES, "big"))
    const = _word(block.lower()[_DID_TAIL_BLOCK_START : _DID_TAIL_BLOCK_START + _TAIL_CONST_BYTES])
    table: npt.NDArray[np.uint64] = _did_tail(domain_hash & _NIBBLE_MASK).take(_serial_fields(code))
    table |= np.uint64(const)
    table.flags.writeable = False
    return table


@functools.cache
def _alphabet() -> npt.NDArray[np.uint64]:
    return np.frombuffer(BASE32_ALPHABET, dtype=np.uint8).astype(np.uint64)


@functools.cache
def _three_chars(byte_offset: int) -> npt.NDArray[np.uint64]:
    """(32768,) uint64: the three base32 characters of a 15-bit value at bytes offset..offset+2 (little-endian)."""
    values = np.arange(1 << _THREE_CHAR_BITS, dtype=np.uint64)
    alphabet = _alphabet()
    word = np.zeros(1 << _THREE_CHAR_BITS, dtype=np.uint64)
    for char in range(3):
        index = (values >> np.uint64(BASE32_CHAR_BITS * (2 - char))) & np.uint64(_CHAR_MASK)
        word |= alphabet.take(index) << np.uint64(BYTE_BITS * (byte_offset + char))
    return word


@functools.cache
def _did_tail(nibble: int) -> npt.NDArray[np.uint64]:
    """(65536,) uint64 indexed by the serial field: bytes 3..7 = characters k28..k31 and the newline.

    k28 joins the domain hash's low ``nibble`` with serial bit 15; k29..k31 are serial bits 14..0.
    """
    values = np.arange(1 << LOW_BITS, dtype=np.uint64)
    k28 = _alphabet().take((values >> np.uint64(LOW_BITS - 1)) | np.uint64(nibble << 1))
    k29 = _three_chars(_TAIL_K29_BYTE).take(values & np.uint64(_THREE_CHAR_MASK))
    return k28 << np.uint64(BYTE_BITS * _TAIL_K28_BYTE) | k29 | np.uint64(NEWLINE << (BYTE_BITS * (WORD_BYTES - 1)))


@functools.cache
def _hex_tail() -> npt.NDArray[np.uint64]:
    """(65536,) uint64 indexed by the serial field: bytes 3..6 = its 4 lowercase hex digits, byte 7 = newline."""
    values = np.arange(1 << LOW_BITS, dtype=np.uint64)
    digits = np.frombuffer(_text.HEX_LOWER, dtype=np.uint8).astype(np.uint64)
    word = np.full(1 << LOW_BITS, NEWLINE << (BYTE_BITS * (WORD_BYTES - 1)), dtype=np.uint64)
    for digit in range(_LOW_HEX_DIGITS):
        nibble = (values >> np.uint64(HEX_DIGIT_BITS * (_LOW_HEX_DIGITS - 1 - digit))) & np.uint64(_HEX_DIGIT_MASK)
        word |= digits.take(nibble) << np.uint64(BYTE_BITS * (_TAIL_CONST_BYTES + digit))
    return word


@functools.cache
def _dec4() -> npt.NDArray[np.uint64]:
    """(10000,) uint64: bytes 0..3 = the 4 zero-padded decimal digits of 0..9999."""
    text = "".join(f"{value:04d}" for value in range(_DEC4)).encode("ascii")
    return np.frombuffer(text, dtype="<u4").astype(np.uint64)


@functools.cache
def _serial_fields(code: int) -> npt.NDArray[np.intp]:
    """(2**(16-w),) intp, read-only: the serial field ``counter << w | suffix`` of every counter of ``code``."""
    width = qualifier_width(code)
    table = np.arange(1 << (LOW_BITS - width), dtype=np.intp) << width | (code & ((1 << width) - 1))
    table.flags.writeable = False
    return table


def _words_at(out: npt.NDArray[np.uint8], column: int) -> npt.NDArray[np.uint64]:
    """The writable (rows,) ``<u8`` view of ``out[:, column:column + 8]`` (see :func:`_put_words`)."""
    view: npt.NDArray[np.uint64] = out[:, column : column + WORD_BYTES].view("<u8")[:, 0]
    return view


def _put_words(out: npt.NDArray[np.uint8], column: int, words: Any) -> None:
    """Write 8 bytes per row at ``out[:, column:column + 8]`` from uint64 ``words`` (little-endian byte order)."""
    out[:, column : column + WORD_BYTES].view("<u8")[:, 0] = words


def _word(data: bytes) -> int:
    """Up to 8 bytes as the little-endian integer that :func:`_put_words` writes back as those bytes."""
    return int.from_bytes(data, "little")


# Text layouts (columns of one row; every row ends with a newline):
#   did (38): 0..7 "did:siq:" | 8..10 k3..k5 = CRC bits 31..18 | 11..13 k6..k8 = CRC bits 17..3 |
#             14 k9 = CRC bits 2..0 + tick bits 55..54 | 15..32 k10..k27 = tick, shard, domain hash (one per tick) |
#             33 k28 = domain hash bits 3..0 + serial bit 15 | 34..36 k29..k31 = serial bits 14..0 | 37 newline
#   hex (29): 0..23 tick, shard, domain hash (one per tick) | 24..27 serial | 28 newline
# (k = the base32 character's index in the 32-character block; k0..k2 are the dropped "aaa".)
_DID_CRC_WORD = DID_PREFIX_LEN  # 8: k3..k9 and k10
_DID_K3_CRC_BITS = BASE32_CHAR_BITS - 1
"""k3's top bit is the CRC field's last always-zero bit; its other 4 bits are CRC bits 31..28."""
_DID_K3_SHIFT = CRC_BITS - (_DID_K3_CRC_BITS + 2 * BASE32_CHAR_BITS)  # 18: k3..k5 hold CRC bits 31..18
_DID_K9_BYTE = 6
_DID_K10_BYTE = 7
_DID_K9_CRC_BITS = 3
_DID_K9_TICK_BITS = BASE32_CHAR_BITS - _DID_K9_CRC_BITS
_DID_CONST = _DID_CRC_WORD + WORD_BYTES  # 16: k11.. up to the tail word
_DID_TAIL_WORD = DID_LEN + 1 - WORD_BYTES  # 30: k25..k27 (domain hash) + k28..k31 + newline
_DID_CONST_LEN = _DID_TAIL_WORD - _DID_CONST  # 14: k11..k24 (tick, shard, domain hash), one per segment
_DID_TAIL_BLOCK_START = _DID_TAIL_WORD - DID_PREFIX_LEN + DID_DROPPED_CHARS  # k25
_NIBBLE_MASK = 0xF
_TAIL_CONST_BYTES = 3
"""Tail words (did, hex) begin with 3 constant characters (domain hash), then the serial's characters."""
_TAIL_K28_BYTE = _TAIL_CONST_BYTES
_TAIL_K29_BYTE = _TAIL_K28_BYTE + 1
_HEX_TAIL_WORD = HEX_LEN + 1 - WORD_BYTES  # 21
_DECIMAL_LOW = 10**12
"""Decimal batches split each value as ``high * 10**12 + low``; high is fixed per tick, low fits a uint64."""
_DECIMAL_LOW_DIGITS = 12
_DECIMAL_MID_BYTE = 5
"""The second word of the 12 low digits starts at digit 5: digits 5..11 and the newline."""


_DID_CONST_SHIFT = PACKED_BITS - (BASE32_CHAR_BITS * _DID_TAIL_BLOCK_START - BYTE_BITS * CRC_FIELD_BYTES)  # 35
"""k10..k24 are the 75 packed bits above this one (block bits 50..124 from the top; the CRC field is the first 48)."""
_PAIR_BITS = 2 * BASE32_CHAR_BITS
_PAIR_MASK = (1 << _PAIR_BITS) - 1
_PAIR_WORDS = tuple(_word(pair.encode("ascii")) for pair in DID_PAIRS)
"""The two characters of every 10-bit value as a little-endian int (bytes 0, 1)."""
_PAIR_TEXT_BITS = 2 * BYTE_BITS
"""Bits of one pair's text (two characters) in a little-endian int."""
_BYTE_MASK = (1 << BYTE_BITS) - 1
"""The low 8 bits: one byte of the CRC."""
_K9_TICK_SHIFT = TICK_SHIFT + TICK_BITS - _DID_K9_TICK_BITS  # 110: packed bits 111..110 = tick bits 55..54
_K10_SHIFT = _K9_TICK_SHIFT - BASE32_CHAR_BITS  # 105: packed bits 109..105 = tick bits 53..49

# SWAR base32: per byte, an index 0..31 becomes its character: + 0x66 sets bit 7 exactly for 26..31; the character
# is index + 97 ('a'..'z') below 26 and index + 24 ('2'..'7') from 26, i.e. (index + 0x66) - 5 - 73 * bit 7.
_BYTES_ONES = 0x0101010101010101
_SWAR_ADD = 0x66 * _BYTES_ONES
_SWAR_HIGH_SHIFT = BYTE_BITS - 1
_SWAR_LOW_STEP = ord("a") - (ord("2") - 26)  # 73
_SWAR_SUB = (0x66 - ord("a")) * _BYTES_ONES  # 5 per byte


@functools.cache
def _crc_byte_index_words() -> tuple[tuple[int, ...], ...]:
    """(4, 256) ints: :func:`_crc_index_word` of each value of each CRC-32 byte (byte 0 = bits 31..24), so that
    a CRC's index word is the xor of four lookups."""
    return tuple(
        tuple(_crc_index_word(byte << BYTE_BITS * (3 - position)) for byte in range(1 << BYTE_BITS))
        for position in range(CRC_BITS // BYTE_BITS)
    )


def _pairs_text(bits: int, top: int, count: int) -> int:
    """The characters of ``count`` 10-bit pairs of ``bits`` (pair i = bits ``10 i + 9 .. 10 i``), from pair ``top``
    down, as a little-endian int: pair ``top`` in bytes 0..1, the next in bytes 2..3, and so on."""
    word = 0
    for position in range(count):
        word |= _PAIR_WORDS[bits >> (top - position) * _PAIR_BITS & _PAIR_MASK] << _PAIR_TEXT_BITS * position
    return word


class _SegmentWords:
    """A batch's per-segment constants of the did form, from each segment's packed prefix (tick, shard, domain
    hash; serial field 0): :meth:`index` (its checksum word in index form: :func:`_crc_index_word` of the prefix's
    CRC-32, with k9's tick bits 55..54 and k10 = tick bits 53..49), :meth:`tick_word` (k13..k20, when the rows keep
    k11, k12 and k21..k24) and :meth:`const` (k11..k18 and k17..k24, when they do not). k21..k24 (shard and domain
    hash bits) are fixed for the batch; the characters of tick bits 48..9 are recomputed only when they change."""

    def __init__(self, prefix: int) -> None:
        bits = prefix >> _DID_CONST_SHIFT
        self.low = _pairs_text(bits, 1, 2) << 2 * _PAIR_TEXT_BITS
        self.head_bits = self.tick_bits = -1
        self.head = self.tick_head = 0
        self.crc_bytes = _crc_byte_index_words()

    def index(self, prefix: int) -> int:
        crc = zlib.crc32(prefix.to_bytes(PACKED_BYTES, "big"))
        b0, b1, b2, b3 = self.crc_bytes
        return (
            b0[crc >> 3 * BYTE_BITS]
            ^ b1[crc >> 2 * BYTE_BITS & _BYTE_MASK]
            ^ b2[crc >> BYTE_BITS & _BYTE_MASK]
            ^ b3[crc & _BYTE_MASK]
            | (prefix >> _K9_TICK_SHIFT) << (BYTE_BITS * _DID_K9_BYTE)
            | (prefix >> _K10_SHIFT & _CHAR_MASK) << (BYTE_BITS * _DID_K10_BYTE)
        )

    def const(self, prefix: int) -> tuple[int, int]:
        """The text of k11..k18 and of k17..k24 (columns 16 and 22)."""
        bits = prefix >> _DID_CONST_SHIFT
        if bits >> 3 * _PAIR_BITS != self.head_bits:
            self.head_bits = bits >> 3 * _PAIR_BITS
            self.head = _pairs_text(bits, 6, 4)
        return self.head, _pairs_text(bits, 3, 2) | self.low

    def tick_word(self, prefix: int) -> int:
        """The text of k13..k20 (column 18): the characters between :func:`_did_fixed`'s two, set by the tick
        (k19, k20: tick bits 8..0 and the shard's top bit; k13..k18: tick bits 38..9, recomputed only when they
        change)."""
        bits = prefix >> _DID_CONST_SHIFT
        if bits >> 3 * _PAIR_BITS != self.tick_bits:
            self.tick_bits = bits >> 3 * _PAIR_BITS
            self.tick_head = _pairs_text(bits, 5, 3)
        return self.tick_head | _PAIR_WORDS[bits >> 2 * _PAIR_BITS & _PAIR_MASK] << 3 * _PAIR_TEXT_BITS


_DID_K11, _DID_K13, _DID_K21 = 11, 13, 21
"""Indexes of did characters in the 32-character base32 block: k11 is at column :data:`_DID_CONST`."""
_DID_FIXED_TICK_SHIFT = CRC_FIELD_BYTES * BYTE_BITS + TICK_BITS - _DID_K13 * BASE32_CHAR_BITS  # 39
"""k11, k12 are tick bits 48..39: fixed for 2**39 ticks (97 days), so :func:`_did_rows` keeps them in its rows."""


def _did_fixed(prefix: int) -> tuple[int, int]:
    """The did characters of a packed prefix that :func:`_did_rows` keeps in its rows: k11, k12 (tick bits 48..39,
    columns 16..17) and k21..k24 (shard and domain hash bits, columns 26..29), as little-endian ints."""
    bits = prefix >> _DID_CONST_SHIFT
    low = _pairs_text(bits, 1, 2)
    return _PAIR_WORDS[bits >> 6 * _PAIR_BITS & _PAIR_MASK], low


class _DidRows(threading.local):
    """This thread's reused did rows and the fixed characters (:func:`_did_fixed`) they hold, None if unknown."""

    def __init__(self) -> None:
        self.array: npt.NDArray[np.uint8] | None = None
        self.fixed: tuple[int, int] | None = None


_did_rows_state = _DidRows()
_DID_FIXED_HIGH = _DID_CONST  # 16: k11, k12
_DID_FIXED_LOW = _DID_CONST + (_DID_K21 - _DID_K11)  # 26: k21..k24
_DID_TICK_WORD = _DID_CONST + (_DID_K13 - _DID_K11)  # 18: k13..k20


def _did_rows(count: int, fixed: tuple[int, int] | None) -> npt.NDArray[np.uint8]:
    """A ``(count, 38)`` uint8 array for did rows: ``did:siq:`` in columns 0..7 and, with ``fixed`` (from
    :func:`_did_fixed`), k11, k12 in columns 16..17 and k21..k24 in 26..29; the rest is undefined. Reused by this
    thread up to :data:`SCRATCH_ROWS` rows (the fixed columns are rewritten only when ``fixed`` changes); valid until
    the next call on this thread (callers copy out)."""
    state = _did_rows_state
    array = state.array if count <= SCRATCH_ROWS else None
    known = state.fixed
    if array is None:
        array = np.empty((max(count, SCRATCH_ROWS), DID_LEN + 1), dtype=np.uint8)
        array[:, :DID_PREFIX_LEN] = np.frombuffer(DID_PREFIX.encode("ascii"), dtype=np.uint8)
        known = None
        if count <= SCRATCH_ROWS:
            state.array = array
    if fixed is not None and fixed != known:
        array[:, _DID_FIXED_HIGH : _DID_FIXED_HIGH + 2].view("<u2")[:, 0] = fixed[0]
        array[:, _DID_FIXED_LOW : _DID_FIXED_LOW + 4].view("<u4")[:, 0] = fixed[1]
    if array is state.array:
        state.fixed = fixed  # None: the caller writes columns 16..29 itself
    return array[:count]


SCRATCH_ROWS = _text.LEAD_ROWS_KEPT
"""Largest batch encoded in the reused per-thread array; larger ones get a fresh array."""
CHUNK_ROWS = 8192
"""Rows encoded per pass: keeps numpy's temporaries (8 bytes per row) small enough to be reused, not page-faulted."""
DID_CHUNK_ROWS = 16384
"""Rows per pass of the did form, whose columns are per-thread scratch arrays (no temporaries): larger passes
cost fewer numpy calls; at 16,384 rows its four 8-byte columns (512 KiB) stay in L2."""


class SiqBatch(Batch):
    """SIQs issued together for one shard, domain and qualifier: runs ("segments") of consecutive counters, one per
    tick. Encoding is column-wise: the tick, shard and domain hash columns are computed once per segment; the
    checksum and serial columns come from lookup tables indexed by the 16-bit serial field (CRC-32 being affine,
    ``crc(id) = crc(segment prefix) ^ T[serial]``).
    """

    def __init__(self, shard: int, domain_hash: int, code: int, segments: list[Run], width: int | None = None) -> None:
        """``segments``: (tick, first counter, count) runs in issue order; ``code``: the qualifier code, ``width``
        its suffix width when the caller knows it (checked from ``code`` otherwise)."""
        self.shard = shard
        self.domain_hash = domain_hash
        self.code = code
        self.width = qualifier_width(code) if width is None else width
        self.segments = segments
        self.count = segments[0][2] if len(segments) == 1 else sum(run[2] for run in segments)

    # -- slow path -------------------------------------------------------------------------------------------------
    def values(self) -> list[int]:
        width = self.width
        constant = _pack_prefix(0, self.shard, self.domain_hash) | self.code & ((1 << width) - 1)
        return [
            tick << TICK_SHIFT | constant | counter << width
            for tick, first, count in self.segments
            for counter in range(first, first + count)
        ]

    @property
    def high_water(self) -> int:
        return self.segments[-1][0] if self.segments else -1

    # -- hot path --------------------------------------------------------------------------------------------------
    def encode(self, fmt: str) -> bytes:
        if self.count <= SMALL_BATCH:  # per-ID formatting beats the column-wise encoder's fixed cost
            return scalar_lines(TEXT.format, self.values(), fmt)
        fmt = TEXT.resolve(fmt)
        if not self.count:
            return b""
        if fmt == "did":
            return self._encode_did()
        if fmt == "hex":
            width = HEX_LEN
        else:
            high_len = self._decimal_high_len()
            if high_len is None:
                return self._encode_decimal_slow()
            width = high_len + _DECIMAL_LOW_DIGITS
        out = _text.lead_rows(f"siq-{fmt}", self.count, width + 1)
        row = 0
        for chunk in self._chunks():
            rows = out[row : row + chunk.count]
            if fmt == "hex":
                chunk._fill_hex(rows)
            else:
                chunk._fill_decimal(rows, width - _DECIMAL_LOW_DIGITS)
            row += chunk.count
        return out.tobytes()

    def _encode_did(self) -> bytes:
        """The did form: rows from :func:`_did_rows`, whose fixed columns (k11, k12, k21..k24) hold this batch's
        characters unless its segments differ there (tick bits 48..39), then :meth:`_fill_did` per pass."""
        first = _pack_prefix(self.segments[0][0], self.shard, self.domain_hash)
        same = len({tick >> _DID_FIXED_TICK_SHIFT for tick, _first, _count in self.segments}) == 1
        out = _did_rows(self.count, _did_fixed(first) if same else None)
        row = 0
        for chunk in self._chunks(DID_CHUNK_ROWS):
            chunk._fill_did(out[row : row + chunk.count], fixed=same)
            row += chunk.count
        return out.tobytes()

    def _chunks(self, rows: int = CHUNK_ROWS) -> list[SiqBatch]:
        """This batch cut into batches of at most ``rows`` IDs (splitting segments where needed)."""
        if self.count <= rows:
            return [self]
        chunks: list[SiqBatch] = []
        segments: list[Run] = []
        room = rows
        for tick, first, count in self.segments:
            while count:
                taken = min(count, room)
                segments.append(Run(tick, first, taken))
                first, count, room = first + taken, count - taken, room - taken
                if not room:
                    chunks.append(SiqBatch(self.shard, self.domain_hash, self.code, segments, self.width))
                    segments, room = [], rows
        if segments:
            chunks.append(SiqBatch(self.shard, self.domain_hash, self.code, segments, self.width))
        return chunks

    def _prefixes(self) -> list[int]:
        """The packed value with serial field 0 of every segment."""
        return [_pack_prefix(tick, self.shard, self.domain_hash) for tick, _first, _count in self.segments]

    def _low(self) -> npt.NDArray[np.intp]:
        """(count,) intp: the 16-bit serial field of every ID (intp: numpy's fast index type for ``take``).

        Read-only: a single segment's column is a view of a shared table.
        """
        table = _serial_fields(self.code)
        parts = [table[first : first + count] for _tick, first, count in self.segments]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _per_row(self, per_segment: list[int], dtype: type[np.integer[Any]]) -> Any:
        """A per-segment value for every row: a scalar for one segment, else a repeated (count,) column."""
        if len(self.segments) == 1:
            return dtype(per_segment[0])
        return np.repeat(np.array(per_segment, dtype=dtype), [count for *_, count in self.segments])

    def _put_text(self, out: npt.NDArray[np.uint8], column: int, per_segment: list[bytes]) -> None:
        """Write each segment's constant text (equal lengths, >= 8 bytes) at ``column``, 8 bytes at a time."""
        length = len(per_segment[0])
        for offset in [*range(0, length - WORD_BYTES, WORD_BYTES), length - WORD_BYTES]:
            words = [_word(text[offset : offset + WORD_BYTES]) for text in per_segment]
            if len(words) == 1:
                _put_words(out, column + offset, np.full(self.count, words[0], dtype=np.uint64))
            else:
                _put_words(out, column + offset, self._per_row(words, np.uint64))

    def _fill_did(self, out: npt.NDArray[np.uint8], *, fixed: bool) -> None:
        """Write every row of the did form after the ``did:siq:`` prefix (already in ``out``).

        Per segment: its checksum words in index form (the prefix's xor a slice of the qualifier's per-counter
        table, CRC-32 being affine), its tail word (a slice of the per-counter tail table) and its constant
        characters: with ``fixed`` (the rows already hold k11, k12 and k21..k24: :func:`_did_rows`) only k13..k20,
        one 8-byte fill, else k11..k24, two; then, for the whole pass, the index bytes become base32 characters in
        six uint64 operations (SWAR, no table) and one strided write per column.
        """
        count = self.count
        word = cast("npt.NDArray[np.uint64]", _text.scratch("siq-word", count, np.uint64))
        high = cast("npt.NDArray[np.uint64]", _text.scratch("siq-other", count, np.uint64))
        index_table = _crc_index_counter(self.code)
        tail_table = _did_tail_counter(self.code, self.domain_hash)
        tail = _words_at(out, _DID_TAIL_WORD)
        const_head = cast("npt.NDArray[np.uint64]", _text.scratch("siq-const-head", count, np.uint64))
        const_tail = cast("npt.NDArray[np.uint64]", _text.scratch("siq-const-tail", count, np.uint64))
        prefixes = self._prefixes()
        words = _SegmentWords(prefixes[0])
        start = 0
        for (_tick, first, run), prefix in zip(self.segments, prefixes):
            end = start + run
            np.bitwise_xor(index_table[first : first + run], words.index(prefix), out=word[start:end])
            tail[start:end] = tail_table[first : first + run]
            # contiguous fills, then one strided write each (a scalar written straight into a strided column
            # takes numpy's slow broadcast loop)
            if fixed:
                const_head[start:end] = words.tick_word(prefix)
            else:
                const_head[start:end], const_tail[start:end] = words.const(prefix)
            start = end
        if fixed:
            _words_at(out, _DID_TICK_WORD)[...] = const_head
        else:
            _words_at(out, _DID_CONST)[...] = const_head
            _words_at(out, _DID_CONST + _DID_CONST_LEN - WORD_BYTES)[...] = const_tail
        np.add(word, _SWAR_ADD, out=word)
        np.right_shift(word, _SWAR_HIGH_SHIFT, out=high)
        np.bitwise_and(high, _BYTES_ONES, out=high)
        np.multiply(high, _SWAR_LOW_STEP, out=high)
        np.add(high, _SWAR_SUB, out=high)
        np.subtract(word, high, out=word)
        _words_at(out, _DID_CRC_WORD)[...] = word

    def _fill_hex(self, out: npt.NDArray[np.uint8]) -> None:
        """Write every row of the hex form: tick, shard and domain hash digits per segment, then the serial's."""
        texts = [encode_hex(prefix).encode("ascii") for prefix in self._prefixes()]
        tail_word = _hex_tail().take(self._low())
        tail_word |= np.uint64(_word(texts[0][_HEX_TAIL_WORD : _HEX_TAIL_WORD + _TAIL_CONST_BYTES]))
        self._put_text(out, 0, [text[:_HEX_TAIL_WORD] for text in texts])
        _put_words(out, _HEX_TAIL_WORD, tail_word)

    def _decimal_high_len(self) -> int | None:
        """Digits above the low 12 when every ID has the same number (at least 8) and no segment carries across
        10**12 (all real IDs but ~1e-7 of segments); None sends the batch to ``"\\n".join(map(str, ...))``."""
        lengths = set()
        for prefix, (_tick, first, count) in zip(self._prefixes(), self.segments):
            high, low = divmod(prefix, _DECIMAL_LOW)
            if low + encode_low(first + count - 1, self.code) >= _DECIMAL_LOW:
                return None
            lengths.add(len(str(high)))
        high_len = lengths.pop()
        return high_len if not lengths and high_len >= WORD_BYTES else None

    def _fill_decimal(self, out: npt.NDArray[np.uint8], high_len: int) -> None:
        """Write every row of the decimal form: ``high_len`` digits per segment, then 12 zero-padded low digits."""
        highs: list[bytes] = []
        lows: list[int] = []
        for prefix in self._prefixes():
            high, low = divmod(prefix, _DECIMAL_LOW)
            highs.append(str(high).encode("ascii"))
            lows.append(low)
        low_column = self._low() + self._per_row(lows, np.intp)
        # four-digit groups; floor division by a scalar is fast in numpy, np.divmod is not
        top = low_column // (_DEC4 * _DEC4)
        rest = low_column - top * (_DEC4 * _DEC4)
        middle = rest // _DEC4
        bottom = rest - middle * _DEC4
        dec4 = _dec4()
        middle_digits = dec4.take(middle)
        first_word = dec4.take(top)
        first_word |= middle_digits << np.uint64(_DEC4_DIGITS * BYTE_BITS)
        second_word = middle_digits >> np.uint64((_DECIMAL_MID_BYTE - _DEC4_DIGITS) * BYTE_BITS)
        second_word |= dec4.take(bottom) << np.uint64((2 * _DEC4_DIGITS - _DECIMAL_MID_BYTE) * BYTE_BITS)
        second_word |= np.uint64(NEWLINE << (BYTE_BITS * (WORD_BYTES - 1)))
        self._put_text(out, 0, highs)
        _put_words(out, high_len, first_word)
        _put_words(out, high_len + _DECIMAL_MID_BYTE, second_word)

    def _encode_decimal_slow(self) -> bytes:
        return ("\n".join(map(str, self.values())) + "\n").encode("ascii")


# --- generator ----------------------------------------------------------------------------------------------------

SPIN_BUDGET_NS = 50_000
"""Most real time one :meth:`SiqGenerator.generate` call spends waiting for the clock to reach the next tick."""


class SiqGenerator(Generator):
    """Issues SIQs for one shard and domain (docs/schemes/siq.md "Generation", with the "Errata" fixed).

    One counter per qualifier, each remembering the tick it counts in; one shared last tick, updated after every
    ID. An ID is issued at tick ``t = max(now, last tick, floor + 1)``: a qualifier whose counter belongs to an
    older tick restarts at 0, one that already counts in ``t`` continues (so a clock that steps back keeps the last
    tick and continues the counter). IDs of different qualifiers differ in their suffix, so a tick may be shared;
    one qualifier's (tick, counter) pairs strictly increase, so no ID ever repeats. When a counter runs out (2**(16-w)
    per tick) the generator needs the clock in a later tick: it spins up to 50 µs of real time in total when that
    is close, otherwise it returns a partial batch and :meth:`wait_ns` says how long to wait.

    ``shard``: 0..255; ``domain``: ASCII domain name (``''``/``'0'`` -> hash 0); ``clock``: ns since the epoch;
    ``floor``: high-water mark in ticks (1/65536 s), -1 for none. Raises ValueError naming the rule broken.
    Clock rollbacks are counted when the clock reads below its highest earlier reading; issue
    ticks running ahead of the clock (a floor above it, or counters outpacing ticks) are not rollbacks.
    """

    def __init__(self, shard: int, domain: str, *, clock: Clock = time.time_ns, floor: int = -1) -> None:
        if isinstance(shard, bool) or not isinstance(shard, int) or not 0 <= shard <= SHARD_MAX:
            raise ValueError(f"shard must be an integer in 0..{SHARD_MAX}, got {shard!r}")
        if not isinstance(domain, str):
            raise ValueError(f"SIQ domain must be a string, got {type(domain).__name__}")
        if not -1 <= floor < TICK_MAX:
            raise ValueError(f"floor must be in -1..{TICK_MAX - 1} ticks (1/65536 s), got {floor}")
        self.shard = shard
        self.domain = domain
        self.domain_hash = domain_hash(domain)
        self._clock = clock
        self._floor = floor
        self._last_tick = -1
        """The last tick this generator issued an ID in (-1: none yet)."""
        self._counters: dict[int, tuple[int, int]] = {}
        """qualifier code -> (tick, next counter in that tick)."""
        self._blocked_tick = -1
        """The tick the last call waited for (it came back short), -1 if it was complete."""
        self.stats = GeneratorStats()

    @property
    def high_water(self) -> int:
        return max(self._floor, self._last_tick)

    def wait_ns(self) -> int:
        """Nanoseconds until the qualifier the last call ran out of can issue again (0 = now)."""
        if self._blocked_tick < 0:
            return 0
        return max(0, ns_from_tick(self._blocked_tick) - self._clock())

    def generate(self, count: int, qualifier: object = "user", **options: Any) -> SiqBatch:
        """Issue up to ``count`` SIQs of one ``qualifier`` (option, default ``"user"``).

        May return fewer (even 0) when the qualifier's counter is exhausted and the clock is not yet in the next
        tick after the spin budget (or is far behind the last tick: clock rollback). Raises InvalidOptionError for a
        count below 1, an unknown qualifier or another option; OverflowError past the last representable tick.
        """
        if options:
            raise InvalidOptionError(f"siq takes only the qualifier option, got {', '.join(sorted(options))}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidOptionError(f"count must be an integer >= 1 for siq, got {count!r}")
        found = QUALIFIERS.get(qualifier) if isinstance(qualifier, str) else None
        if found is None:
            raise InvalidOptionError(f"qualifier must be one of {', '.join(QUALIFIERS)} for siq, got {qualifier!r}")
        code, width = found
        capacity = 1 << (LOW_BITS - width)

        segments: list[Run] = []
        remaining = count
        spin_deadline = -1
        self._blocked_tick = -1
        now_ns = self._clock()
        while True:
            now_tick = tick_from_ns(now_ns)
            self.stats.observe_clock(now_ns)

            tick = max(now_tick, self._last_tick, self._floor + 1)
            counter_tick, next_counter = self._counters.get(code, (-1, 0))
            first = next_counter if counter_tick == tick else 0
            if first < capacity:
                if tick > TICK_MAX:
                    raise OverflowError(f"SIQ timestamp would pass {TICK_MAX} ticks (2**40 seconds)")
                issued = min(remaining, capacity - first)
                segments.append(Run(tick, first, issued))
                self._counters[code] = (tick, first + issued)
                self._last_tick = tick
                remaining -= issued
                if not remaining:
                    break
            # This qualifier's counter is exhausted in `tick`: it needs the clock in tick + 1 or later.
            self.stats.sequence_exhausted += 1
            target = tick + 1
            if ns_from_tick(target) - now_ns > SPIN_BUDGET_NS:
                self._blocked_tick = target
                break
            if spin_deadline < 0:
                spin_deadline = time.perf_counter_ns() + SPIN_BUDGET_NS
            while True:  # read the clock at least once, then until the next tick or the (real-time) budget's end
                now_ns = self._clock()
                if tick_from_ns(now_ns) >= target or time.perf_counter_ns() >= spin_deadline:
                    break
            if tick_from_ns(now_ns) < target:
                self._blocked_tick = target
                break
        return SiqBatch(self.shard, self.domain_hash, code, segments, width)
