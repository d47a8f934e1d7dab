"""Tests for app.schemes.hlc_ulid: codec pairs, the document's vector and sort order, batches, the HLC generator."""

from __future__ import annotations

import os
import random as stdlib_random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.errors import InvalidIdError, InvalidOptionError
from app.schemes import hlc_ulid
from app.schemes.hlc_ulid import SCHEME, HlcUlidGenerator, pack, unpack
from app.schemes.hlc_ulid.generator import ENCODE_BLOCK
from app.settings import Settings
from tests.helpers import FakeClock, assert_not_scratch

MS = 1_000_000  # ns per ms
NOW_MS = 1_648_229_113_466  # the document's A1 millisecond (2022-03-25)

TIMESTAMPS = st.integers(0, hlc_ulid.TIMESTAMP_MS_MAX)
COUNTERS = st.integers(0, hlc_ulid.COUNTER_MAX)
PUBLISHERS = st.integers(0, hlc_ulid.PUBLISHER_ID_MAX)
RANDOMS = st.integers(0, hlc_ulid.RANDOM_MAX)
FIELDS = st.tuples(TIMESTAMPS, COUNTERS, PUBLISHERS, RANDOMS)


def seeded_rng(seed: int = 0) -> stdlib_random.Random:
    return stdlib_random.Random(seed)


def make(publisher_id: int = 10, clock: FakeClock | None = None, **kwargs: int) -> HlcUlidGenerator:
    return HlcUlidGenerator(publisher_id, clock=clock or FakeClock(NOW_MS), rng=seeded_rng().randbytes, **kwargs)


def slots(values: list[int]) -> list[tuple[int, int]]:
    return [unpack(v)[:2] for v in values]


# --- metadata -----------------------------------------------------------------------------------------------------


def test_scheme_metadata() -> None:
    assert SCHEME.name == "hlc-ulid"
    assert SCHEME.packed_bytes == 16
    assert SCHEME.formats == ("ulid", "hex")
    assert SCHEME.text_width == {"ulid": 26, "hex": 35}
    assert SCHEME.timestamp_digits == 3
    assert SCHEME.native_unit_ns == 1_000_000
    pool = SCHEME.identity_pool(Settings())
    assert pool is not None and (pool.kind, pool.space, pool.draw) == ("publisher_id", (0, 65535), "scan")
    assert [f.name for f in SCHEME.layout] == ["timestamp_ms", "counter", "publisher_id", "random"]
    assert SCHEME.resolve_format("canonical") == "ulid"


# --- the spec vector and the document's rows ------------------------------------------------------------------------

VECTOR_HEX = "017FC21C5E7A-0000-000A-AAA111111111"
VECTOR_ULID = "01FZ11RQKT000002NAM48H248H"
VECTOR_BYTES = bytes.fromhex("017fc21c5e7a0000000aaaa111111111")


def test_spec_vector_both_forms_and_bytes() -> None:
    value = SCHEME.parse(VECTOR_HEX)
    assert SCHEME.parse(VECTOR_ULID) == value
    assert SCHEME.parse(VECTOR_HEX.lower()) == value
    assert SCHEME.parse(VECTOR_ULID.lower()) == value
    assert hlc_ulid.to_bytes(value) == VECTOR_BYTES
    assert hlc_ulid.from_bytes(VECTOR_BYTES) == value
    assert SCHEME.format(value, "ulid") == VECTOR_ULID
    assert SCHEME.format(value, "canonical") == VECTOR_ULID
    assert SCHEME.format(value, "hex") == VECTOR_HEX.lower()
    assert SCHEME.fields(value) == {
        "timestamp_ms": 0x017FC21C5E7A,
        "counter": 0,
        "publisher_id": 0x000A,
        "random": 0xAAA111111111,
    }
    assert pack(0x017FC21C5E7A, 0, 0x000A, 0xAAA111111111) == value
    # The document's example millisecond is 2022-03-25 (its "2025-07-22" is an erratum).
    assert SCHEME.timestamp_ns(value) == 1_648_229_113_466 * MS
    assert time.strftime("%Y-%m-%d", time.gmtime(SCHEME.timestamp_ns(value) / 1e9)) == "2022-03-25"


# The HLC-ULID document, "Out of Order Arrival (Annotated with HLC-ULID)": the queue's order.
DOCUMENT_ROWS_ARRIVAL = [
    ("A3", "017FC21C5E7B-0001-000A-AAA333333333"),
    ("B1", "017FC21C5E7B-0000-000B-BBB444444444"),
    ("A1", "017FC21C5E7A-0000-000A-AAA111111111"),
    ("A2", "017FC21C5E7B-0000-000A-AAA222222222"),
    ("B2", "017FC21C5E7C-0000-000B-BBB555555555"),
    ("A4", "017FC21C5E7D-0000-000A-AAA666666666"),
]
DOCUMENT_SORTED = ["A1", "A2", "B1", "A3", "B2", "A4"]


@pytest.mark.parametrize(
    "key",
    [
        pytest.param(lambda v: hlc_ulid.to_bytes(v), id="bytes"),
        pytest.param(lambda v: SCHEME.format(v, "ulid"), id="ulid-text"),
        pytest.param(lambda v: SCHEME.format(v, "hex"), id="hex-text"),
        pytest.param(lambda v: unpack(v), id="fields"),
        pytest.param(lambda v: v, id="packed-int"),
    ],
)
def test_document_rows_sort_a1_a2_b1_a3_b2_a4(key: object) -> None:
    parsed = [(name, SCHEME.parse(text)) for name, text in DOCUMENT_ROWS_ARRIVAL]
    ordered = sorted(parsed, key=lambda item: key(item[1]))  # type: ignore[operator]
    assert [name for name, _ in ordered] == DOCUMENT_SORTED


def test_document_rows_as_typed_sort_the_same() -> None:
    # The document's own strings (uppercase hex) also sort into the same order as plain strings.
    assert [name for name, _ in sorted(DOCUMENT_ROWS_ARRIVAL, key=lambda item: item[1])] == DOCUMENT_SORTED


# --- parsing ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "HLC-ULID must be 26 (ULID) or 35 (12-4-4-12 hex) characters long, got 0"),
        (VECTOR_ULID[:-1], "characters long, got 25"),
        (VECTOR_ULID + "0", "characters long, got 27"),
        ("017FC21C5E7A0000000AAAA111111111", "characters long, got 32"),
        (VECTOR_HEX + "0", "got 36"),
        ("8" + VECTOR_ULID[1:], "ULID overflow: the first character must be 0..7"),
        ("Z" + VECTOR_ULID[1:], "ULID overflow"),
        (VECTOR_ULID[:10] + "U" + VECTOR_ULID[11:], "got 'U' at position 10"),
        (VECTOR_ULID[:5] + "!" + VECTOR_ULID[6:], "Crockford base32 alphabet"),
        (VECTOR_ULID[:5] + " " + VECTOR_ULID[6:], "got ' ' at position 5"),
        ("\u0660" + VECTOR_ULID[1:], "got '\u0660' at position 0"),
        ("017FC21C5E7A00000-000A-AAA111111111", "expected '-' at position 12, got '0'"),
        ("017FC21C5E7A-0000-000AAAAA111111111", "expected '-' at position 22"),
        ("017FC21C5E7A_0000-000A-AAA111111111", "expected '-' at position 12, got '_'"),
        ("017FC21C5E7G-0000-000A-AAA111111111", "only hex digits 0-9 a-f (any case) besides the '-' separators"),
        ("017FC21C5E7G-0000-000A-AAA111111111", "got 'G' at position 11"),
        ("017FC21C5E7A-0000-000A-AAA11111111-", "got '-' at position 34"),
        ("+17FC21C5E7A-0000-000A-AAA111111111", "got '+' at position 0"),
        ("017FC21C5E7A-00_0-000A-AAA111111111", "got '_' at position 15"),
        ("017FC21C5E7A-0000-000A-AAA11111111\u0661", "at position 34"),
    ],
)
def test_parse_rejects(text: str, fragment: str) -> None:
    with pytest.raises(InvalidIdError) as excinfo:
        SCHEME.parse(text)
    assert fragment in str(excinfo.value)


def test_parse_ulid_rules() -> None:
    value = SCHEME.parse(VECTOR_ULID)
    assert SCHEME.parse("O1FZ11RQKTOOOOO2NAM48H248H") == value
    assert SCHEME.parse("0IFZiLRQKT000002NAM48H248H") == value
    assert SCHEME.parse("7ZZZZZZZZZZZZZZZZZZZZZZZZZ") == hlc_ulid.PACKED_MAX


def test_unknown_format_is_an_option_error() -> None:
    with pytest.raises(InvalidOptionError, match="format must be one of canonical, ulid, hex"):
        SCHEME.format(1, "uuid")
    with pytest.raises(InvalidOptionError, match="format must be one of"):
        make().generate(1).encode("base32")


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ((-1, 0, 0, 0), "timestamp_ms must be in 0..281474976710655"),
        ((1 << 48, 0, 0, 0), "timestamp_ms"),
        ((0, 1 << 16, 0, 0), "counter must be in 0..65535, got 65536"),
        ((0, 0, -1, 0), "publisher_id must be in 0..65535"),
        ((0, 0, 0, 1 << 48), "random must be in 0..281474976710655"),
    ],
)
def test_pack_rejects(fields: tuple[int, int, int, int], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        pack(*fields)


@pytest.mark.parametrize("value", [-1, 1 << 128])
def test_unpack_and_format_reject_out_of_range(value: int) -> None:
    with pytest.raises(ValueError, match="packed HLC-ULID"):
        unpack(value)
    for fmt in SCHEME.formats:
        with pytest.raises(ValueError, match="packed HLC-ULID"):
            SCHEME.format(value, fmt)


def test_from_bytes_rejects_other_lengths() -> None:
    with pytest.raises(ValueError, match="exactly 16 bytes long, got 15"):
        hlc_ulid.from_bytes(bytes(15))


# --- round trips over the full field ranges ---------------------------------------------------------------------


@given(FIELDS)
def test_pack_unpack_round_trip(fields: tuple[int, int, int, int]) -> None:
    value = pack(*fields)
    assert unpack(value) == fields
    assert hlc_ulid.from_bytes(hlc_ulid.to_bytes(value)) == value
    assert SCHEME.fields(value) == dict(zip(("timestamp_ms", "counter", "publisher_id", "random"), fields))


@given(FIELDS, st.sampled_from(["ulid", "hex"]), st.booleans())
def test_format_parse_round_trip(fields: tuple[int, int, int, int], fmt: str, lower: bool) -> None:
    value = pack(*fields)
    text = SCHEME.format(value, fmt)
    assert len(text) == SCHEME.text_width[fmt]
    assert text == (text.upper() if fmt == "ulid" else text.lower())
    assert SCHEME.parse(text.lower() if lower else text.upper()) == value


@given(FIELDS, FIELDS)
def test_orders_agree(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> None:
    va, vb = pack(*a), pack(*b)
    expected = a < b
    assert (hlc_ulid.to_bytes(va) < hlc_ulid.to_bytes(vb)) == expected
    assert (SCHEME.format(va, "ulid") < SCHEME.format(vb, "ulid")) == expected
    assert (SCHEME.format(va, "hex") < SCHEME.format(vb, "hex")) == expected


@settings(max_examples=60, deadline=None)
@given(
    publisher_id=PUBLISHERS,
    start_ms=st.integers(0, hlc_ulid.TIMESTAMP_MS_MAX - 10),
    warmup=st.integers(0, hlc_ulid.COUNTER_SLOTS + 5),
    count=st.integers(1, 600),
    seed=st.integers(0, 2**32),
)
def test_batch_encode_equals_format_of_values(
    publisher_id: int, start_ms: int, warmup: int, count: int, seed: int
) -> None:
    # A warm-up batch in the same ms puts the counter anywhere, so batches also span a counter overflow.
    generator = HlcUlidGenerator(publisher_id, clock=FakeClock(start_ms), rng=seeded_rng(seed).randbytes)
    if warmup:
        generator.generate(warmup)
    batch = generator.generate(count)
    values = batch.values()
    assert len(values) == batch.count == count
    for fmt in SCHEME.formats:
        expected = "".join(SCHEME.format(v, fmt) + "\n" for v in values).encode()
        assert batch.encode(fmt) == expected
        lines = batch.encode_lines(fmt)  # a stream's form: the same bytes over a fresh buffer
        assert bytes(lines) == expected
        assert_not_scratch(lines)
    assert batch.encode("canonical") == batch.encode("ulid")


def test_batch_spanning_many_milliseconds_encodes_like_format() -> None:
    generator = make(publisher_id=0xFFFF)
    generator.generate(100)
    batch = generator.generate(3 * hlc_ulid.COUNTER_SLOTS)
    assert len(batch.segments) == 4
    values = batch.values()
    for fmt in SCHEME.formats:
        expected = "".join(SCHEME.format(v, fmt) + "\n" for v in values).encode()
        assert batch.encode(fmt) == expected
        lines = batch.encode_lines(fmt)
        assert bytes(lines) == expected
        assert_not_scratch(lines)


@pytest.mark.parametrize("count", [ENCODE_BLOCK - 1, ENCODE_BLOCK, ENCODE_BLOCK + 1, 2 * ENCODE_BLOCK + 3])
@pytest.mark.parametrize(
    "warmup",
    [1, hlc_ulid.COUNTER_SLOTS - ENCODE_BLOCK, hlc_ulid.COUNTER_SLOTS - ENCODE_BLOCK // 2, hlc_ulid.COUNTER_SLOTS - 2],
)
def test_batch_around_the_encode_block_encodes_like_format(count: int, warmup: int) -> None:
    # The warm-up puts a counter overflow (a new logical millisecond) at the first block's end, inside it, near its
    # start, or nowhere in the batch.
    generator = make(publisher_id=0xBEEF)
    generator.generate(warmup)
    batch = generator.generate(count)
    values = batch.values()
    for fmt in SCHEME.formats:
        expected = "".join(SCHEME.format(v, fmt) + "\n" for v in values).encode()
        assert batch.encode(fmt) == expected
        assert bytes(batch.encode_lines(fmt)) == expected


def test_random_field_layout_of_the_drawn_words() -> None:
    # A 1-ID batch's planes: w0 = 0xFFFF, w1 = 0x8001, w2 = 0xFC01 (little-endian), then b = 0x80.
    drawn = b"".join(w.to_bytes(2, "little") for w in (0xFFFF, 0x8001, 0xFC01)) + bytes([0x80])
    generator = HlcUlidGenerator(3, clock=FakeClock(NOW_MS), rng=lambda n: drawn)
    (value,) = generator.generate(1).values()
    # b is bits 47..40, w0's low 15 bits 39..25, w1's 24..10, w2's low 10 bits 9..0; the other drawn bits unused.
    assert unpack(value)[3] == 1 << 47 | 0x7FFF << 25 | 1 << 10 | 1
    assert hlc_ulid.random_field(drawn, 1) == [unpack(value)[3]]


def draw_of(quads: list[tuple[int, int, int, int]]) -> bytes:
    """A batch's draw from ``(w0, w1, w2, b)`` per ID: the three word planes (little-endian), then the bytes."""
    planes = [b"".join(q[plane].to_bytes(2, "little") for q in quads) for plane in range(3)]
    return b"".join(planes) + bytes(q[3] for q in quads)


@given(st.lists(st.tuples(*[st.integers(0, 0xFFFF)] * 3, st.integers(0, 0xFF)), min_size=1, max_size=40))
def test_random_field_is_the_documented_placement(quads: list[tuple[int, int, int, int]]) -> None:
    expected = [b << 40 | (w0 & 0x7FFF) << 25 | (w1 & 0x7FFF) << 10 | (w2 & 0x3FF) for w0, w1, w2, b in quads]
    drawn = draw_of(quads)
    assert hlc_ulid.random_field(drawn, len(quads)) == expected
    generator = HlcUlidGenerator(0xFFFF, clock=FakeClock(NOW_MS), rng=lambda n: drawn)
    batch = generator.generate(len(quads))
    assert [unpack(v)[3] for v in batch.values()] == expected
    for fmt in SCHEME.formats:
        assert batch.encode(fmt) == "".join(SCHEME.format(v, fmt) + "\n" for v in batch.values()).encode()


# --- generator ----------------------------------------------------------------------------------------------------


def test_counter_per_millisecond() -> None:
    clock = FakeClock(NOW_MS)
    generator = make(clock=clock)
    assert slots(generator.generate(3).values()) == [(NOW_MS, 0), (NOW_MS, 1), (NOW_MS, 2)]
    assert slots(generator.generate(2).values()) == [(NOW_MS, 3), (NOW_MS, 4)]  # now == last: counter + 1
    clock.ns += MS
    assert slots(generator.generate(2).values()) == [(NOW_MS + 1, 0), (NOW_MS + 1, 1)]  # now > last: counter 0
    assert generator.high_water == NOW_MS + 1
    assert generator.stats.clock_rollbacks == 0
    assert all(unpack(v)[2] == 10 for v in generator.generate(5).values())


def test_clock_rollback_keeps_last_millisecond() -> None:
    clock = FakeClock(NOW_MS)
    generator = make(clock=clock)
    first = generator.generate(4).values()
    clock.ns -= 5 * MS + 123
    second = generator.generate(4).values()
    assert slots(second) == [(NOW_MS, 4), (NOW_MS, 5), (NOW_MS, 6), (NOW_MS, 7)]
    assert generator.stats.clock_rollbacks == 1
    assert generator.stats.max_rollback_ns == 5 * MS + 123
    clock.ns -= MS
    generator.generate(1)
    assert generator.stats.clock_rollbacks == 2
    assert generator.stats.max_rollback_ns == 6 * MS + 123
    values = first + second
    assert values == sorted(values) and len(set(values)) == len(values)


def test_counter_overflow_moves_to_the_next_millisecond() -> None:
    generator = make()
    batch = generator.generate(hlc_ulid.COUNTER_SLOTS + 10)
    assert [tuple(s) for s in batch.segments] == [(NOW_MS, 0, 65536), (NOW_MS + 1, 0, 10)]
    assert generator.stats.sequence_exhausted == 1
    assert batch.high_water == NOW_MS + 1
    # The clock is still in NOW_MS: logical time stays ahead and continues (no wrap, no duplicate).
    assert slots(generator.generate(1).values()) == [(NOW_MS + 1, 10)]
    assert generator.stats.clock_rollbacks == 0


def test_counter_overflow_at_a_batch_boundary() -> None:
    generator = make()
    generator.generate(hlc_ulid.COUNTER_SLOTS)
    assert generator.stats.sequence_exhausted == 0
    assert slots(generator.generate(1).values()) == [(NOW_MS + 1, 0)]
    assert generator.stats.sequence_exhausted == 1


@pytest.mark.parametrize(
    ("floor", "first_slot"),
    [
        (-1, (NOW_MS, 0)),
        (NOW_MS - 100, (NOW_MS, 0)),
        (NOW_MS - 1, (NOW_MS, 0)),
        (NOW_MS, (NOW_MS + 1, 0)),
        (NOW_MS + 100, (NOW_MS + 101, 0)),
    ],
)
def test_floor_starts_logical_time_above_it(floor: int, first_slot: tuple[int, int]) -> None:
    generator = make(floor=floor)
    assert generator.high_water == floor
    assert slots(generator.generate(2).values()) == [first_slot, (first_slot[0], 1)]
    assert generator.high_water == first_slot[0]
    assert generator.stats.sequence_exhausted == 0
    assert generator.stats.clock_rollbacks == 0


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"publisher_id": -1}, "publisher_id must be in 0..65535, got -1"),
        ({"publisher_id": 65536}, "publisher_id must be in 0..65535, got 65536"),
        ({"floor": -2}, "floor must be in -1..281474976710654 milliseconds, got -2"),
        ({"floor": hlc_ulid.TIMESTAMP_MS_MAX}, "floor must be in"),
        ({"max_drift_ms": -1}, "max_drift_ms must be >= 0, got -1"),
    ],
)
def test_constructor_validates(kwargs: dict[str, int], fragment: str) -> None:
    args = {"publisher_id": 1, **kwargs}
    with pytest.raises(ValueError, match=fragment):
        HlcUlidGenerator(args.pop("publisher_id"), **args)


@pytest.mark.parametrize(
    ("count", "options", "fragment"),
    [
        (0, {}, "count must be in 1..16777216 for hlc-ulid, got 0"),
        (-5, {}, "got -5"),
        (True, {}, "got True"),
        ("5", {}, "got '5'"),
        (hlc_ulid.BATCH_COUNT_MAX + 1, {}, "got 16777217"),
        (1, {"mode": "x"}, "hlc-ulid takes only the option 'after', got mode"),
        (1, {"after": "01FZ11RQKT000002NAM48H248H"}, "after must be a packed HLC-ULID"),
        (1, {"after": -1}, "after must be a packed HLC-ULID"),
        (1, {"after": 1 << 128}, "integer in 0..2**128-1"),
        (1, {"after": True}, "after must be a packed HLC-ULID"),
    ],
)
def test_generate_validates_options(count: object, options: dict[str, object], fragment: str) -> None:
    generator = make()
    with pytest.raises(InvalidOptionError) as excinfo:
        generator.generate(count, **options)
    assert fragment in str(excinfo.value)
    assert generator.high_water == -1  # nothing was issued


def test_rng_is_asked_for_seven_fresh_bytes_per_id() -> None:
    asked: list[int] = []

    def rng(n: int) -> bytes:
        asked.append(n)
        return os.urandom(n)

    generator = HlcUlidGenerator(1, clock=FakeClock(NOW_MS), rng=rng)
    generator.generate(1)
    generator.generate(1000)
    assert asked == [7, 7000]
    with pytest.raises(ValueError, match="rng returned 6 bytes, asked for 7"):
        HlcUlidGenerator(1, clock=FakeClock(NOW_MS), rng=lambda n: bytes(n - 1)).generate(1)


# --- after: the HLC receive rule ----------------------------------------------------------------------------------


def test_after_in_the_past_changes_nothing() -> None:
    generator = make()
    after = pack(NOW_MS - 50, 999, 3, 0xFFFFFFFFFFFF)
    values = generator.generate(3, after=after).values()
    assert slots(values) == [(NOW_MS, 0), (NOW_MS, 1), (NOW_MS, 2)]
    assert min(values) > after


def test_after_in_the_same_millisecond_continues_its_counter() -> None:
    generator = make()
    generator.generate(2)  # local counter at 1
    after = pack(NOW_MS, 7, 0xFFFF, 0xFFFFFFFFFFFF)
    values = generator.generate(2, after=after).values()
    assert slots(values) == [(NOW_MS, 8), (NOW_MS, 9)]
    assert min(values) > after
    # Local counter ahead of the remote one: max(local, remote) + 1.
    values = generator.generate(1, after=pack(NOW_MS, 3, 0, 0)).values()
    assert slots(values) == [(NOW_MS, 10)]


def test_after_ahead_of_the_clock_pulls_logical_time_forward() -> None:
    clock = FakeClock(NOW_MS)
    generator = make(clock=clock)
    after = pack(NOW_MS + 1_000, 41, 0xFFFF, 0xFFFFFFFFFFFF)
    values = generator.generate(3, after=after).values()
    assert slots(values) == [(NOW_MS + 1_000, 42), (NOW_MS + 1_000, 43), (NOW_MS + 1_000, 44)]
    assert min(values) > after
    assert generator.high_water == NOW_MS + 1_000
    # Later IDs without after stay after it (the clock is behind the merged logical time).
    clock.ns += MS
    later = generator.generate(2).values()
    assert slots(later) == [(NOW_MS + 1_000, 45), (NOW_MS + 1_000, 46)]
    assert generator.stats.clock_rollbacks == 0  # logical time ahead is not a clock rollback


def test_after_with_a_full_counter_moves_to_the_next_millisecond() -> None:
    generator = make()
    after = pack(NOW_MS + 5, hlc_ulid.COUNTER_MAX, 0, 0)
    assert slots(generator.generate(1, after=after).values()) == [(NOW_MS + 6, 0)]


@pytest.mark.parametrize(("ahead_ms", "limit"), [(60_001, 60_000), (10**9, 60_000), (11, 10), (1, 0)])
def test_after_too_far_ahead_is_refused(ahead_ms: int, limit: int) -> None:
    generator = make(max_drift_ms=limit)
    generator.generate(1)
    with pytest.raises(InvalidOptionError) as excinfo:
        generator.generate(1, after=pack(NOW_MS + ahead_ms, 0, 0, 0))
    assert f"after is {ahead_ms} ms ahead of this node's clock; the limit is max_drift_ms={limit}" in str(excinfo.value)
    assert generator.high_water == NOW_MS  # refused before anything moved
    assert slots(generator.generate(1).values()) == [(NOW_MS, 1)]


def test_after_exactly_at_the_drift_limit_is_accepted() -> None:
    generator = make(max_drift_ms=60_000)
    values = generator.generate(1, after=pack(NOW_MS + 60_000, 0, 0, 0)).values()
    assert slots(values) == [(NOW_MS + 60_000, 1)]


@settings(max_examples=150, deadline=None)
@given(
    warmup=st.integers(0, 70_000),
    clock_offset_ms=st.integers(-20, 20),
    after_offset_ms=st.integers(-30, 60_000),
    after_counter=COUNTERS,
    after_rest=st.tuples(PUBLISHERS, RANDOMS),
    count=st.integers(1, 50),
)
def test_every_id_sorts_after_after(
    warmup: int,
    clock_offset_ms: int,
    after_offset_ms: int,
    after_counter: int,
    after_rest: tuple[int, int],
    count: int,
) -> None:
    clock = FakeClock(NOW_MS)
    generator = make(clock=clock, publisher_id=0)
    if warmup:
        generator.generate(warmup)
    clock.ns += clock_offset_ms * MS
    after = pack(NOW_MS + clock_offset_ms + after_offset_ms, after_counter, *after_rest)
    values = generator.generate(count, after=after).values()
    assert all(v > after for v in values)
    assert all(hlc_ulid.to_bytes(v) > hlc_ulid.to_bytes(after) for v in values)
    assert all(SCHEME.format(v, "ulid") > SCHEME.format(after, "ulid") for v in values)
    assert all(SCHEME.format(v, "hex") > SCHEME.format(after, "hex") for v in values)
    assert values == sorted(values)


# --- uniqueness and monotonicity at volume --------------------------------------------------------------------------


def test_no_duplicate_in_a_million_ids_with_a_stuck_clock_and_rollbacks() -> None:
    clock = FakeClock(NOW_MS)
    generator = make(clock=clock)
    lines: list[bytes] = []
    readings_below_earlier_ones = 0
    highest_ms = 0
    for i in range(16):
        if i % 5 == 4:
            clock.ns -= 3 * MS  # rollback
        elif i % 3 == 0:
            clock.ns += MS // 3
        readings_below_earlier_ones += clock.ns // MS < highest_ms
        highest_ms = max(highest_ms, clock.ns // MS)
        lines.extend(generator.generate(65_536).encode("ulid").splitlines())
    assert len(lines) == 16 * 65_536
    assert len(set(lines)) == len(lines)
    assert lines == sorted(lines)  # monotonic: canonical text order is issue order
    assert generator.stats.clock_rollbacks == readings_below_earlier_ones > 0


def test_no_duplicate_in_a_million_ids_with_the_real_clock() -> None:
    generator = HlcUlidGenerator(1)
    lines: list[bytes] = []
    for _ in range(16):
        lines.extend(generator.generate(65_536).encode("ulid").splitlines())
    assert len(set(lines)) == len(lines) == 16 * 65_536
    assert lines == sorted(lines)


def test_two_publishers_in_the_same_millisecond_never_collide() -> None:
    a = HlcUlidGenerator(1, clock=FakeClock(NOW_MS), rng=lambda n: bytes(n))
    b = HlcUlidGenerator(2, clock=FakeClock(NOW_MS), rng=lambda n: bytes(n))
    assert not set(a.generate(1000).values()) & set(b.generate(1000).values())
