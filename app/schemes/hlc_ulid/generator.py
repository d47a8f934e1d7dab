"""HLC-ULID batches: column-wise (numpy) encoding of the ULID and hex forms, and the HLC-ULID generator.

Imports :mod:`app.schemes.hlc_ulid.codec` (layout and text forms); :mod:`app.schemes.hlc_ulid.scheme` (settings and
``SCHEME``) imports this module and builds the generator.
"""

from __future__ import annotations

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
    CHARS_PER_GROUP,
    COUNTER_CHAR,
    COUNTER_CHARS,
    COUNTER_HEX_COLUMN,
    COUNTER_MAX,
    COUNTER_SHIFT,
    COUNTER_SLOTS,
    GROUP_OFFSET_BITS,
    HEX_CHUNK_DIGITS,
    MAX_DRIFT_MS_DEFAULT,
    NANOSECS_IN_MILLISECS,
    PACKED_BITS,
    PACKED_MAX,
    PUBLISHER_ID_MAX,
    PUBLISHER_ID_SHIFT,
    RANDOM_BYTES_PER_ID,
    RANDOM_GROUP_BITS,
    RANDOM_GROUP_CHARS,
    RANDOM_GROUP_MASK,
    RANDOM_HEAD_BITS,
    RANDOM_HEAD_CHAR,
    RANDOM_HEAD_CHARS,
    RANDOM_HEAD_SHIFT,
    RANDOM_HEX_COLUMN,
    RANDOM_SHIFT,
    RANDOM_WORD_BITS,
    RANDOM_WORDS,
    TEXT,
    TIMESTAMP_MS_MAX,
    TIMESTAMP_SHIFT,
    W0_OFFSET_BITS,
    WORD_TOP_SHIFT,
    encode_hex,
    encode_ulid,
    pack,
    unpack,
)

# --- batch encoding -----------------------------------------------------------------------------------------------


def random_chunks(words: npt.NDArray[np.uint16], key: str = "hlc-ulid-random-chunks") -> npt.NDArray[np.uint16]:
    """The random fields of a batch as 16-bit chunks: ``(3, n)`` uint16, rows = bits 47..32, 31..16, 15..0.

    ``words`` is the batch's ``(3, n)`` draw, placed as the module docstring says::

        bits 47..32 = w2 >> 15 << 15 | w1 >> 15 << 14 | w0 >> 2
        bits 31..16 = (w0 & 3) << 14 | (w1 & 0x7FFF) >> 1
        bits 15..0  = (w1 & 1) << 15 | (w2 & 0x7FFF)

    The result lives in a per-thread scratch buffer (see :func:`app.schemes._text.scratch`).
    """
    w0, w1, w2 = words
    count = words.shape[1]
    chunks = _text.scratch(key, RANDOM_WORDS * count, np.uint16).reshape(RANDOM_WORDS, count)
    bits = _text.scratch(key + "-bits", count, np.uint16)
    high, middle, low = chunks
    # uint16 left shifts drop what passes bit 15: w0 << 14 keeps w0 & 3, w1 << 15 keeps w1 & 1.
    np.right_shift(w0, W0_OFFSET_BITS, out=high)
    for word, position in ((w1, RANDOM_WORD_BITS - W0_OFFSET_BITS), (w2, RANDOM_WORD_BITS - W0_OFFSET_BITS + 1)):
        np.right_shift(word, WORD_TOP_SHIFT, out=bits)
        np.left_shift(bits, position, out=bits)
        np.bitwise_or(high, bits, out=high)
    np.bitwise_and(w1, RANDOM_GROUP_MASK, out=middle)
    np.right_shift(middle, GROUP_OFFSET_BITS, out=middle)
    np.left_shift(w0, RANDOM_WORD_BITS - W0_OFFSET_BITS, out=bits)
    np.bitwise_or(middle, bits, out=middle)
    np.left_shift(w1, RANDOM_WORD_BITS - GROUP_OFFSET_BITS, out=low)
    np.bitwise_and(w2, RANDOM_GROUP_MASK, out=bits)
    np.bitwise_or(low, bits, out=low)
    return cast("npt.NDArray[np.uint16]", chunks)


WORD_MASK = (1 << RANDOM_WORD_BITS) - 1


def random_field(words: npt.NDArray[np.uint16]) -> list[int]:
    """The 48-bit random fields of a batch's ``(3, n)`` random words, as ints: :func:`random_chunks`'s placement
    (column-wise; a small batch's :meth:`HlcUlidBatch.values` uses :func:`random_field_of_draw`)."""
    high, middle, low = random_chunks(words).tolist()
    return [h << (2 * RANDOM_WORD_BITS) | m << RANDOM_WORD_BITS | lo for h, m, lo in zip(high, middle, low)]


def random_field_of_draw(drawn: bytes, count: int) -> list[int]:
    """:func:`random_field` of a small batch's draw as it came from the random source (``6 * count`` bytes: three
    planes of ``count`` little-endian 16-bit words), in plain ints: numpy's per-call cost was most of a single ID's
    answer (50 µs)."""
    if count == 1:  # a single ID: its three words from one int, each placed as the loop below places it
        words3 = int.from_bytes(drawn[:RANDOM_BYTES_PER_ID], "little")
        w1, w2 = words3 >> RANDOM_WORD_BITS & WORD_MASK, words3 >> 2 * RANDOM_WORD_BITS
        return [
            (w2 >> WORD_TOP_SHIFT) << (RANDOM_HEAD_SHIFT + RANDOM_WORD_BITS + 1)
            | (w1 >> WORD_TOP_SHIFT) << (RANDOM_HEAD_SHIFT + RANDOM_WORD_BITS)
            | (words3 & WORD_MASK) << RANDOM_HEAD_SHIFT
            | (w1 & RANDOM_GROUP_MASK) << RANDOM_GROUP_BITS
            | w2 & RANDOM_GROUP_MASK
        ]
    words = struct.unpack_from(f"<{RANDOM_WORDS * count}H", drawn)
    out = []
    for w0, w1, w2 in zip(words[:count], words[count : 2 * count], words[2 * count :]):
        high = (
            w0 >> W0_OFFSET_BITS
            | (w1 >> WORD_TOP_SHIFT) << (RANDOM_WORD_BITS - W0_OFFSET_BITS)
            | (w2 >> WORD_TOP_SHIFT) << (RANDOM_WORD_BITS - W0_OFFSET_BITS + 1)
        )
        middle = (w1 & RANDOM_GROUP_MASK) >> GROUP_OFFSET_BITS | (w0 << (RANDOM_WORD_BITS - W0_OFFSET_BITS)) & WORD_MASK
        low = (w1 << (RANDOM_WORD_BITS - GROUP_OFFSET_BITS)) & WORD_MASK | w2 & RANDOM_GROUP_MASK
        out.append(high << (2 * RANDOM_WORD_BITS) | middle << RANDOM_WORD_BITS | low)
    return out


def _counter_table(publisher_id: int) -> npt.NDArray[np.uint32]:
    """ULID characters 10..13 for every counter value (character 13 also holds the publisher ID's top 4 bits)."""
    return _crockford.column_table(publisher_id << PUBLISHER_ID_SHIFT, COUNTER_SHIFT, COUNTER_CHAR, COUNTER_CHARS)


def _random_head_table(publisher_id: int) -> npt.NDArray[np.uint32]:
    """ULID characters 16..19 for every 18-bit value of random bits 47..30 (16 also holds 2 publisher ID bits)."""
    return _crockford.column_table(
        publisher_id << PUBLISHER_ID_SHIFT,
        RANDOM_HEAD_SHIFT,
        RANDOM_HEAD_CHAR,
        RANDOM_HEAD_CHARS,
        index_bits=RANDOM_HEAD_BITS,
    )


def _random_group_table() -> npt.NDArray[np.uint32]:
    """3 characters for the low 15 bits of every 16-bit word, then a newline (overwritten unless last)."""
    return _crockford.column_table(0, RANDOM_SHIFT, RANDOM_GROUP_CHARS[-1], CHARS_PER_GROUP)


class HlcUlidBatch(Batch):
    """HLC-ULIDs of one publisher issued together: consecutive (ms, counter) slots, fresh random per ID.

    ``segments`` lists the slots (usually one logical millisecond; a counter overflow starts another);
    ``drawn`` is the random draw the random fields are made of (6 bytes per ID: three planes of little-endian
    16-bit words, :attr:`random_words`).
    """

    def __init__(self, publisher_id: int, segments: tuple[Run, ...], drawn: bytes) -> None:
        self.publisher_id = publisher_id
        self.segments = segments
        self.drawn = drawn
        self.count = runs_count(segments)

    @property
    def random_words(self) -> npt.NDArray[np.uint16]:
        """The draw as ``(3, count)`` uint16 (a view of :attr:`drawn`)."""
        return np.frombuffer(self.drawn, dtype=_RANDOM_WORD_DTYPE).reshape(RANDOM_WORDS, self.count)

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
        count, words = self.count, self.random_words
        publisher = self.publisher_id << PUBLISHER_ID_SHIFT
        rows = self._lines([encode_ulid(seg.tick << TIMESTAMP_SHIFT | publisher) for seg in self.segments], fresh)
        counters = _counter_table(self.publisher_id)
        _text.write_runs(rows, COUNTER_CHAR, [(counters, seg.first, seg.count) for seg in self.segments])
        # Random bits 47..30 -> characters 16..19; 29..15 -> 20..22; 14..0 -> 23..25. Written left to right, so
        # the 4th byte of the write at 20 is overwritten by the write at 23, whose 4th byte is the newline.
        indices = _text.scratch("hlc-ulid-indices", RANDOM_WORDS * count, np.intp).reshape(RANDOM_WORDS, count)
        np.copyto(indices, words, casting="safe")
        head, top_bits = indices[0], _text.scratch("hlc-ulid-top-bits", count, np.intp)
        for word in (1, 2):
            np.right_shift(indices[word], WORD_TOP_SHIFT, out=top_bits)
            np.left_shift(top_bits, RANDOM_WORD_BITS + word - 1, out=top_bits)
            np.bitwise_or(head, top_bits, out=head)
        looked_up = _text.scratch("hlc-ulid-chars", count, "<u4")
        np.take(_random_head_table(self.publisher_id), head, out=looked_up, mode="wrap")
        _text.char_view(rows, RANDOM_HEAD_CHAR)[...] = looked_up
        groups = _random_group_table()
        for word, column in zip((1, 2), RANDOM_GROUP_CHARS):
            np.take(groups, indices[word], out=looked_up, mode="wrap")
            _text.char_view(rows, column)[...] = looked_up
        return rows

    def _hex_rows(self, fresh: bool = False) -> npt.NDArray[np.uint8]:
        rows = self._lines([encode_hex(pack(seg.tick, 0, self.publisher_id, 0)) for seg in self.segments], fresh)
        hex4 = _text.hex4_table()
        _text.write_runs(rows, COUNTER_HEX_COLUMN, [(hex4, seg.first, seg.count) for seg in self.segments])
        chunks = random_chunks(self.random_words)
        indices = _text.scratch("hlc-ulid-indices", chunks.size, np.intp).reshape(chunks.shape)
        np.copyto(indices, chunks, casting="safe")
        looked_up = _text.scratch("hlc-ulid-chars", self.count, "<u4")
        for chunk in range(RANDOM_WORDS):
            np.take(hex4, indices[chunk], out=looked_up, mode="wrap")
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
        randoms = random_field_of_draw(self.drawn, count) if count <= SMALL_BATCH else random_field(self.random_words)
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
