"""HLC-ULID batches: column-wise (numpy) encoding of the ULID and hex forms, and the HLC-ULID generator.

Imports :mod:`app.schemes.hlc_ulid.codec` (layout and text forms); :mod:`app.schemes.hlc_ulid.scheme` (settings and
``SCHEME``) imports this module and builds the generator.
"""

from __future__ import annotations

import functools
import struct
import time
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from app.errors import InvalidOptionError
from app.schemes import _crockford, _text
from app.schemes.base import (
    SMALL_BATCH,
    Batch,
    Clock,
    Generator,
    GeneratorStats,
    RandomSource,
    Run,
    csprng,
    runs_count,
    scalar_lines,
)
from app.schemes.hlc_ulid.codec import (
    _RANDOM_WORD_DTYPE,
    BATCH_COUNT_MAX,
    CHARS_PER_TRIPLE,
    COUNTER_CHAR,
    COUNTER_CHARS,
    COUNTER_HEX_COLUMN,
    COUNTER_MAX,
    COUNTER_SHIFT,
    COUNTER_SLOTS,
    HEX_CHUNK_DIGITS,
    MAX_DRIFT_MS_DEFAULT,
    NANOSECS_IN_MILLISECS,
    PACKED_BITS,
    PACKED_MAX,
    PUBLISHER_CHAR,
    PUBLISHER_CHARS,
    PUBLISHER_ID_MAX,
    PUBLISHER_ID_SHIFT,
    RANDOM_BYTES_PER_ID,
    RANDOM_HEAD_BITS,
    RANDOM_HEAD_CHAR,
    RANDOM_HEAD_CHARS,
    RANDOM_HEAD_SHIFT,
    RANDOM_HEX_COLUMN,
    RANDOM_TAIL_BITS,
    RANDOM_TAIL_CHAR,
    RANDOM_TAIL_CHARS,
    RANDOM_TAIL_MASK,
    RANDOM_TRIPLE_BITS,
    RANDOM_TRIPLE_CHARS,
    RANDOM_TRIPLE_MASK,
    RANDOM_W0_SHIFT,
    RANDOM_W1_SHIFT,
    RANDOM_WORD_BITS,
    RANDOM_WORD_BYTES,
    RANDOM_WORDS,
    TEXT,
    TIMESTAMP_MS_MAX,
    TIMESTAMP_SHIFT,
    WORD_CHARS,
    WORD_COLUMNS,
    encode_hex,
    encode_ulid,
    pack,
    unpack,
)

# --- batch encoding -----------------------------------------------------------------------------------------------


def random_planes(drawn: bytes, count: int) -> tuple[npt.NDArray[np.uint16], npt.NDArray[np.uint8]]:
    """A batch's draw (``7 * count`` bytes) as its ``(3, count)`` uint16 words ``w0, w1, w2`` and its ``(count,)``
    uint8 bytes ``b`` (views of ``drawn``; placement: the module docstring of :mod:`app.schemes.hlc_ulid.codec`)."""
    words = np.frombuffer(drawn, dtype=_RANDOM_WORD_DTYPE, count=RANDOM_WORDS * count).reshape(RANDOM_WORDS, count)
    heads = np.frombuffer(drawn, dtype=np.uint8, count=count, offset=RANDOM_WORDS * RANDOM_WORD_BYTES * count)
    return words, heads


# With a word's top bit dropped (``<< 1``), its 15 bits sit at bits 15..1 of a uint16.
_HIGH_W0_SHIFT = RANDOM_WORD_BITS - RANDOM_HEAD_BITS  # 8: w0's bits 14..7 are random bits 39..32
_MIDDLE_W0_SHIFT = RANDOM_W0_SHIFT - RANDOM_WORD_BITS  # 9: w0's bits 6..0 are random bits 31..25
_MIDDLE_W1_SHIFT = 2 * RANDOM_WORD_BITS - RANDOM_W0_SHIFT  # 7: w1's bits 14..6 are random bits 24..16
_LOW_W1_SHIFT = RANDOM_W1_SHIFT  # 10: w1's bits 5..0 are random bits 15..10


def random_chunks(drawn: bytes, count: int, key: str = "hlc-ulid-random-chunks") -> npt.NDArray[np.uint16]:
    """The random fields of a batch as 16-bit chunks: ``(3, count)`` uint16, rows = bits 47..32, 31..16, 15..0.

    ``drawn`` is the batch's draw (:func:`random_planes`), placed as the codec's module docstring says::

        bits 47..32 = b << 8 | (w0 & 0x7FFF) >> 7
        bits 31..16 = (w0 & 0x7F) << 9 | (w1 & 0x7FFF) >> 6
        bits 15..0  = (w1 & 0x3F) << 10 | (w2 & 0x3FF)

    The result lives in a per-thread scratch buffer (see :func:`app.schemes._text.scratch`).
    """
    (w0, w1, w2), heads = random_planes(drawn, count)
    chunks = _text.scratch(key, RANDOM_WORDS * count, np.uint16).reshape(RANDOM_WORDS, count)
    bits = _text.scratch(key + "-bits", count, np.uint16)
    high, middle, low = chunks
    # uint16 left shifts drop what passes bit 15: w0 << 1 drops w0's top bit, w0 << 9 keeps w0 & 0x7F.
    np.left_shift(heads, RANDOM_HEAD_BITS, out=high, dtype=np.uint16)
    np.left_shift(w0, 1, out=bits)
    np.right_shift(bits, _HIGH_W0_SHIFT, out=bits)
    np.bitwise_or(high, bits, out=high)
    np.left_shift(w0, _MIDDLE_W0_SHIFT, out=middle)
    np.left_shift(w1, 1, out=bits)
    np.right_shift(bits, _MIDDLE_W1_SHIFT, out=bits)
    np.bitwise_or(middle, bits, out=middle)
    np.left_shift(w1, _LOW_W1_SHIFT, out=low)
    np.bitwise_and(w2, RANDOM_TAIL_MASK, out=bits)
    np.bitwise_or(low, bits, out=low)
    return cast("npt.NDArray[np.uint16]", chunks)


def random_field(drawn: bytes, count: int) -> list[int]:
    """The 48-bit random fields of a batch's draw, as ints: :func:`random_chunks`'s placement (column-wise; a small
    batch's :meth:`HlcUlidBatch.values` uses :func:`random_field_of_draw`)."""
    high, middle, low = random_chunks(drawn, count).tolist()
    return [h << (2 * RANDOM_WORD_BITS) | m << RANDOM_WORD_BITS | lo for h, m, lo in zip(high, middle, low)]


_ONE_W1_SHIFT = RANDOM_WORD_BITS - RANDOM_W1_SHIFT  # 6: w1 read at bit 16 of an ID's words, placed at bit 10
_ONE_W2_SHIFT = 2 * RANDOM_WORD_BITS  # 32


def random_field_of_draw(drawn: bytes, count: int) -> list[int]:
    """:func:`random_field` of a small batch's draw as it came from the random source (``7 * count`` bytes: three
    planes of ``count`` little-endian 16-bit words, then ``count`` bytes), in plain ints: numpy's per-call cost was
    most of a single ID's answer (50 µs)."""
    if count == 1:  # a single ID: its three words as one int w0 | w1 << 16 | w2 << 32, each part moved in place
        words3 = int.from_bytes(drawn[: RANDOM_WORDS * RANDOM_WORD_BYTES], "little")
        return [
            drawn[RANDOM_WORDS * RANDOM_WORD_BYTES] << RANDOM_HEAD_SHIFT
            | (words3 & RANDOM_TRIPLE_MASK) << RANDOM_W0_SHIFT
            | (words3 >> _ONE_W1_SHIFT) & (RANDOM_TRIPLE_MASK << RANDOM_W1_SHIFT)
            | (words3 >> _ONE_W2_SHIFT) & RANDOM_TAIL_MASK
        ]
    words = struct.unpack_from(f"<{RANDOM_WORDS * count}H", drawn)
    heads = drawn[RANDOM_WORDS * RANDOM_WORD_BYTES * count : RANDOM_BYTES_PER_ID * count]
    return [
        b << RANDOM_HEAD_SHIFT
        | (w0 & RANDOM_TRIPLE_MASK) << RANDOM_W0_SHIFT
        | (w1 & RANDOM_TRIPLE_MASK) << RANDOM_W1_SHIFT
        | w2 & RANDOM_TAIL_MASK
        for b, w0, w1, w2 in zip(heads, words[:count], words[count : 2 * count], words[2 * count :])
    ]


def _word_table(base: int, shift: int, first: int, chars: int, index_bits: int) -> npt.NDArray[np.uint64]:
    """``<u8`` entries for every ``index_bits``-bit ``v``: characters ``first .. first + chars - 1`` of
    ``encode_ulid(base | v << shift)`` at their bytes of the 8-byte word they belong to (characters 10..17 or
    18..25, see :data:`WORD_COLUMNS`); the word's other bytes 0, so the lookups of one word are ORed together."""
    entries = _crockford.column_table(base, shift, first, chars, index_bits=index_bits).view(np.uint8)
    table = np.zeros((1 << index_bits, WORD_CHARS), dtype=np.uint8)
    at = first - max(column for column in WORD_COLUMNS if column <= first)
    table[:, at : at + chars] = entries.reshape(-1, _text.TABLE_ENTRY_CHARS)[:, :chars]
    table.flags.writeable = False
    return cast("npt.NDArray[np.uint64]", table.view("<u8").reshape(-1))


@functools.lru_cache(maxsize=8)
def _counter_words(publisher_id: int) -> npt.NDArray[np.uint64]:
    """Characters 10..15 for every counter value (13 also holds the publisher ID's top 4 bits; 14..15 are the
    publisher ID's), in the word of characters 10..17."""
    publisher = publisher_id << PUBLISHER_ID_SHIFT
    table = _word_table(publisher, COUNTER_SHIFT, COUNTER_CHAR, COUNTER_CHARS, RANDOM_WORD_BITS)
    at = PUBLISHER_CHAR - COUNTER_CHAR
    text = encode_ulid(publisher)[PUBLISHER_CHAR : PUBLISHER_CHAR + PUBLISHER_CHARS].encode("ascii")
    words = table | np.uint64(int.from_bytes(bytes(at) + text, "little"))
    words.flags.writeable = False
    return words


@functools.lru_cache(maxsize=8)
def _head_words(publisher_id: int) -> npt.NDArray[np.uint64]:
    """Characters 16..17 (the publisher ID's low 2 bits, random bits 47..40) for every byte ``b``, in the word of
    characters 10..17."""
    return _word_table(
        publisher_id << PUBLISHER_ID_SHIFT, RANDOM_HEAD_SHIFT, RANDOM_HEAD_CHAR, RANDOM_HEAD_CHARS, RANDOM_HEAD_BITS
    )


@functools.lru_cache(maxsize=1)
def _random_words() -> tuple[npt.NDArray[np.uint64], ...]:
    """The lookups of the word of characters 18..25: characters 18..20 for every value of w0's low 15 bits (random
    bits 39..25), 21..23 for w1's (bits 24..10), 24..25 for w2's low 10 (bits 9..0)."""
    return (
        _word_table(0, RANDOM_W0_SHIFT, RANDOM_TRIPLE_CHARS[0], CHARS_PER_TRIPLE, RANDOM_TRIPLE_BITS),
        _word_table(0, RANDOM_W1_SHIFT, RANDOM_TRIPLE_CHARS[1], CHARS_PER_TRIPLE, RANDOM_TRIPLE_BITS),
        _word_table(0, 0, RANDOM_TAIL_CHAR, RANDOM_TAIL_CHARS, RANDOM_TAIL_BITS),
    )


ENCODE_BLOCK = 32_768
"""Rows per block of a batch's ULID column passes (a larger batch runs them block by block): a stream's chunk of
65,536 in two blocks took about 1 ns per ID less than in one and as little as in four."""
_WORD_MASKS = np.array([[RANDOM_TRIPLE_MASK], [RANDOM_TRIPLE_MASK], [RANDOM_TAIL_MASK]], np.uint16)
"""Each word's bits of its character group (w0, w1: 15 bits, characters 18..20 and 21..23; w2: 10, 24..25)."""


class HlcUlidBatch(Batch):
    """HLC-ULIDs of one publisher issued together: consecutive (ms, counter) slots, fresh random per ID.

    ``segments`` lists the slots (usually one logical millisecond; a counter overflow starts another);
    ``drawn`` is the random draw the random fields are made of (7 bytes per ID: three planes of little-endian
    16-bit words, then a plane of bytes; :func:`random_planes`).
    """

    def __init__(self, publisher_id: int, segments: tuple[Run, ...], drawn: bytes) -> None:
        self.publisher_id = publisher_id
        self.segments = segments
        self.drawn = drawn
        self.count = runs_count(segments)

    def encode(self, fmt: str) -> bytes:
        """The batch as ``ulid`` or ``hex`` lines (column-wise, numpy); InvalidOptionError for another format."""
        if self.count <= SMALL_BATCH:  # per-ID formatting beats the column-wise encoder's fixed cost
            return scalar_lines(TEXT.format, self.values(), fmt)
        if TEXT.resolve(fmt) == "hex":
            return self._hex_rows().tobytes()
        return self._ulid_rows().tobytes()

    def encode_lines(self, fmt: str) -> bytes | memoryview:
        """:meth:`encode`'s text over a fresh buffer (``bytes`` for a batch small enough for the scalar path): the
        rows are written where the caller gets them, with no copy to ``bytes``."""
        if self.count <= SMALL_BATCH:
            return self.encode(fmt)
        rows = self._hex_rows(fresh=True) if TEXT.resolve(fmt) == "hex" else self._ulid_rows(fresh=True)
        return rows.reshape(-1).data

    def _lines(self, texts: list[str], fresh: bool) -> npt.NDArray[np.uint8]:
        """One row per ID, each segment's row from its text in ``texts`` and a newline: a per-thread scratch array
        (callers copy it out), or with ``fresh`` over a fresh ``bytearray``."""
        lines = [((text + "\n").encode(), seg.count) for text, seg in zip(texts, self.segments)]
        return _text.fresh_rows(lines)[1] if fresh else _text.text_rows(lines)

    def _ulid_rows(self, fresh: bool = False) -> npt.NDArray[np.uint8]:
        count = self.count
        publisher = self.publisher_id << PUBLISHER_ID_SHIFT
        rows = self._lines([encode_ulid(seg.tick << TIMESTAMP_SHIFT | publisher) for seg in self.segments], fresh)
        words, heads = random_planes(self.drawn, count)
        # Characters 10..25 are two 8-byte words per ID, each the OR of its groups' lookups (see _word_table):
        # 18..25 = w0's triple | w1's triple | w2's tail, 10..17 = counter and publisher ID | random head. The
        # words' planes are masked to their groups' bits in one call; each lookup then takes its plane's uint16 (or
        # the heads' uint8) indices as they are (numpy casts them in its buffered loop: as fast as a cast to intp
        # first for a stream's chunk, 2.5% faster for 1,000 IDs). The passes run block by block over the same
        # arrays, so a block's words and rows stay in cache between them (a numpy call costs about 5,000
        # instructions: blocks stay large).
        block = min(count, ENCODE_BLOCK)
        word_block = cast("npt.NDArray[np.uint64]", _text.scratch("hlc-ulid-word", block, "<u8"))
        looked_up_block = cast("npt.NDArray[np.uint64]", _text.scratch("hlc-ulid-looked-up", block, "<u8"))
        random_tables, head_table = _random_words(), _head_words(self.publisher_id)
        counters = _counter_words(self.publisher_id)
        low_words, high_words = (_text.char_view(rows, column, "<u8") for column in reversed(WORD_COLUMNS))
        masked = cast(
            "npt.NDArray[np.uint16]",
            _text.scratch("hlc-ulid-masked", RANDOM_WORDS * count, np.uint16).reshape(RANDOM_WORDS, count),
        )
        np.bitwise_and(words, _WORD_MASKS, out=masked)
        runs = []  # (first row, last row + 1, the first row's counter) per segment
        row = 0
        for seg in self.segments:
            runs.append((row, row + seg.count, seg.first))
            row += seg.count
        for start in range(0, count, block):
            stop = min(count, start + block)
            word, looked_up = word_block[: stop - start], looked_up_block[: stop - start]
            for plane, table in enumerate(random_tables):
                np.take(table, masked[plane, start:stop], out=looked_up if plane else word, mode="wrap")
                if plane:
                    np.bitwise_or(word, looked_up, out=word)
            low_words[start:stop] = word
            np.take(head_table, heads[start:stop], out=word, mode="wrap")
            for first_row, end_row, first in runs:
                lo, hi = max(first_row, start), min(end_row, stop)
                if lo < hi:
                    part = word[lo - start : hi - start]
                    np.bitwise_or(part, counters[first + lo - first_row : first + hi - first_row], out=part)
            high_words[start:stop] = word
        return rows

    def _hex_rows(self, fresh: bool = False) -> npt.NDArray[np.uint8]:
        rows = self._lines([encode_hex(pack(seg.tick, 0, self.publisher_id, 0)) for seg in self.segments], fresh)
        hex4 = _text.hex4_table()
        _text.write_runs(rows, COUNTER_HEX_COLUMN, [(hex4, seg.first, seg.count) for seg in self.segments])
        chunks = random_chunks(self.drawn, self.count)
        looked_up = _text.scratch("hlc-ulid-chars", self.count, "<u4")
        for chunk in range(RANDOM_WORDS):
            np.take(hex4, chunks[chunk], out=looked_up, mode="wrap")
            _text.char_view(rows, RANDOM_HEX_COLUMN + chunk * HEX_CHUNK_DIGITS)[...] = looked_up
        return rows

    def values(self) -> list[int]:
        publisher = self.publisher_id << PUBLISHER_ID_SHIFT
        count = self.count
        if count == 1:  # a single ID
            tick, first, _ = self.segments[0]
            return [
                tick << TIMESTAMP_SHIFT | publisher | first << COUNTER_SHIFT | random_field_of_draw(self.drawn, 1)[0]
            ]
        randoms = random_field_of_draw(self.drawn, count) if count <= SMALL_BATCH else random_field(self.drawn, count)
        out: list[int] = []
        start = 0
        for seg in self.segments:
            base = seg.tick << TIMESTAMP_SHIFT | publisher
            out.extend(
                base | counter << COUNTER_SHIFT | random
                for counter, random in zip(range(seg.first, seg.first + seg.count), randoms[start : start + seg.count])
            )
            start += seg.count
        return out

    @property
    def high_water(self) -> int:
        return self.segments[-1].tick if self.count else -1


# --- generator ----------------------------------------------------------------------------------------------------


class HlcUlidGenerator(Generator):
    """Issues HLC-ULIDs for one publisher ID (docs/schemes/hlc-ulid.md "Generation", the document's "How to Generate").

    For each batch the clock is read once (``now``, ms) and compared with the last logical millisecond used:
    ``now > last`` starts at counter 0 in ``now``; ``now == last`` continues with counter + 1; ``now < last`` (the
    clock stepped back, or logical time ran ahead) keeps ``last`` and continues with counter + 1. A batch of n takes
    n consecutive (ms, counter) slots; a counter passing 0xFFFF moves the logical millisecond to ``last + 1`` with
    counter 0 (the reference wraps; this never does). The generator never waits: it moves logical time instead.

    ``floor`` (ms, the high-water mark restored after a restart) makes logical time start above it. ``after``
    (see :meth:`generate`) is the HLC receive rule. ``max_drift_ms`` bounds how far ahead of this node's clock an
    ``after`` may pull logical time. Constructor arguments are validated here: ValueError naming the rule.

    ``stats.clock_rollbacks`` counts clock readings below the largest earlier reading (the wall clock stepping back),
    not logical time running ahead of the clock after a merge or a counter overflow.
    """

    def __init__(
        self,
        publisher_id: int,
        *,
        clock: Clock = time.time_ns,
        rng: RandomSource = csprng,
        floor: int = -1,
        max_drift_ms: int = MAX_DRIFT_MS_DEFAULT,
    ) -> None:
        if not 0 <= publisher_id <= PUBLISHER_ID_MAX:
            raise ValueError(f"publisher_id must be in 0..{PUBLISHER_ID_MAX}, got {publisher_id}")
        if not -1 <= floor < TIMESTAMP_MS_MAX:
            raise ValueError(f"floor must be in -1..{TIMESTAMP_MS_MAX - 1} milliseconds, got {floor}")
        if max_drift_ms < 0:
            raise ValueError(f"max_drift_ms must be >= 0, got {max_drift_ms}")
        self.publisher_id = publisher_id
        self.max_drift_ms = max_drift_ms
        self._clock = clock
        self._rng = rng
        self._last_ms = floor
        self._last_counter: int | None = None
        """Counter of the last slot issued in ``_last_ms``; None = nothing issued yet (start above the floor)."""
        self.stats = GeneratorStats()

    def generate(self, count: int, after: int | None = None, **options: Any) -> HlcUlidBatch:
        """Issue ``count`` (1 .. 2**24) HLC-ULIDs in consecutive (ms, counter) slots; never partial, never waits.

        ``after``: the packed integer of another HLC-ULID (received from elsewhere). The HLC receive rule merges its
        (ms, counter) into this node's clock, so every returned ID sorts after ``after`` (by bytes and by text).
        Raises InvalidOptionError for a bad count, an unknown option, an ``after`` that is not a packed HLC-ULID or
        whose timestamp is more than ``max_drift_ms`` ahead of this node's clock; OverflowError past the last
        48-bit millisecond (year 10889).
        """
        if options:
            raise InvalidOptionError(f"hlc-ulid takes only the option 'after', got {', '.join(sorted(options))}")
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= BATCH_COUNT_MAX:
            raise InvalidOptionError(f"count must be in 1..{BATCH_COUNT_MAX} for hlc-ulid, got {count!r}")
        now_ns = self._clock()
        now_ms = now_ns // NANOSECS_IN_MILLISECS
        after_slot = None if after is None else self._check_after(after, now_ms)
        self.stats.observe_clock(now_ns, NANOSECS_IN_MILLISECS)

        # The document's local step.
        if now_ms > self._last_ms:
            ms, counter = now_ms, 0
        elif self._last_counter is None:
            ms, counter = self._last_ms + 1, 0  # restored floor: logical time starts above it
        else:
            ms, counter = self._last_ms, self._last_counter + 1
        # The HLC receive rule: l' = max(l, l_m, pt); the counter continues whichever of them l' came from.
        if after_slot is not None:
            after_ms, after_counter = after_slot
            if after_ms > ms:
                ms, counter = after_ms, after_counter + 1
            elif after_ms == ms:
                counter = max(counter, after_counter + 1)

        segments: list[Run] = []
        remaining = count
        while remaining:
            if counter > COUNTER_MAX:
                self.stats.sequence_exhausted += 1
                ms, counter = ms + 1, 0
            taken = min(remaining, COUNTER_SLOTS - counter)
            segments.append(Run(ms, counter, taken))
            remaining -= taken
            counter += taken
        if ms > TIMESTAMP_MS_MAX:
            raise OverflowError(f"HLC-ULID logical time would pass {TIMESTAMP_MS_MAX} ms (48 bits)")

        random_bytes = self._rng(RANDOM_BYTES_PER_ID * count)
        if len(random_bytes) != RANDOM_BYTES_PER_ID * count:
            raise ValueError(f"rng returned {len(random_bytes)} bytes, asked for {RANDOM_BYTES_PER_ID * count}")
        self._last_ms, self._last_counter = ms, counter - 1
        return HlcUlidBatch(self.publisher_id, tuple(segments), random_bytes)

    def _check_after(self, after: object, now_ms: int) -> tuple[int, int]:
        """``(timestamp_ms, counter)`` of a valid ``after``; InvalidOptionError naming the rule otherwise."""
        if isinstance(after, bool) or not isinstance(after, int) or not 0 <= after <= PACKED_MAX:
            raise InvalidOptionError(f"after must be a packed HLC-ULID, an integer in 0..2**{PACKED_BITS}-1")
        after_ms, after_counter, _, _ = unpack(after)
        if after_ms - now_ms > self.max_drift_ms:
            raise InvalidOptionError(
                f"after is {after_ms - now_ms} ms ahead of this node's clock; the limit is "
                f"max_drift_ms={self.max_drift_ms}"
            )
        return after_ms, after_counter

    @property
    def high_water(self) -> int:
        """The last logical millisecond issued (or the floor), in ms."""
        return self._last_ms
