"""Tests of app/schemes/muid.py against docs/schemes/muid.md."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.errors import InvalidIdError, InvalidOptionError
from app.schemes import muid
from app.schemes.base import Batch, Generator, Scheme
from app.schemes.muid import SCHEME, MuidBatch, MuidGenerator
from app.settings import Settings
from tests.helpers import FakeClock

MEDALLION = 0x1BFC71B112D
US = 1_000  # ns per µs

timestamps = st.integers(min_value=-1, max_value=muid.TIMESTAMP_US_MAX)
medallions = st.integers(min_value=-1, max_value=muid.MEDALLION_MAX)
offsets = st.integers(min_value=muid.OFFSET_MIN, max_value=muid.OFFSET_MAX)
packed = st.integers(min_value=0, max_value=(1 << 128) - 1)
new_medallions = st.integers(min_value=muid.NEW_MEDALLION_MIN, max_value=muid.NEW_MEDALLION_MAX)


# --- vectors (docs/schemes/muid.md "Vectors") ----------------------------------------------------------------------

VECTORS = [
    # (timestamp_us, medallion, offset), canonical text, packed bytes
    ((0x5D5EAC793E61F, 1923190821165, 11), "5D5EAC793E61F-1BFC71B112D-0000000B", "5d5eac793e61f1bfc71b112d0000000b"),
    ((0x5D5EAC793E61F, 1923190821165, -1), "5D5EAC793E61F-1BFC71B112D-FFFFFFFF", "5d5eac793e61f1bfc71b112dffffffff"),
    ((0x5D5EAC793E61F, 0, 0), "5D5EAC793E61F-00000000000-00000000", "5d5eac793e61f0000000000000000000"),
    ((-1, -1, -1), "FFFFFFFFFFFFF-FFFFFFFFFFF-FFFFFFFF", "ff" * 16),
    ((0, 0, 0), "0000000000000-00000000000-00000000", "00" * 16),
    ((0, 0, muid.OFFSET_MIN), "0000000000000-00000000000-80000000", "00" * 12 + "80000000"),
    (
        (muid.TIMESTAMP_US_MAX, muid.MEDALLION_MAX, muid.OFFSET_MAX),
        "FFFFFFFFFFFFE-FFFFFFFFFFE-7FFFFFFF",
        "ffffffffffffeffffffffffe7fffffff",
    ),
]


@pytest.mark.parametrize(("fields", "text", "hex_bytes"), VECTORS)
def test_vectors_encode(fields: tuple[int, int, int], text: str, hex_bytes: str) -> None:
    value = muid.pack(*fields)
    assert muid.to_bytes(value).hex() == hex_bytes
    assert SCHEME.format(value, "canonical") == text
    assert SCHEME.canonical(value) == text


@pytest.mark.parametrize(("fields", "text", "hex_bytes"), VECTORS)
def test_vectors_decode(fields: tuple[int, int, int], text: str, hex_bytes: str) -> None:
    value = SCHEME.parse(text)
    assert value == muid.from_bytes(bytes.fromhex(hex_bytes))
    assert muid.unpack(value) == fields
    assert SCHEME.parse(text.lower()) == value
    assert SCHEME.fields(value) == {"timestamp_us": fields[0], "medallion": fields[1], "offset": fields[2]}


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        ("5D5EAC793E61F", (0x5D5EAC793E61F, 0, 0)),
        ("5d5eac793e61f", (0x5D5EAC793E61F, 0, 0)),
        ("5D5EAC793E61F-1BFC71B112D", (0x5D5EAC793E61F, 1923190821165, 0)),
        ("5d5eAC793e61f-1bFC71b112d-0000000b", (0x5D5EAC793E61F, 1923190821165, 11)),
        ("FFFFFFFFFFFFF", (-1, 0, 0)),
        ("FFFFFFFFFFFFF-FFFFFFFFFFF", (-1, -1, 0)),
    ],
)
def test_shorthands_and_case(text: str, fields: tuple[int, int, int]) -> None:
    assert muid.unpack(SCHEME.parse(text)) == fields


def test_fields_and_timestamp() -> None:
    value = muid.pack(0x5D5EAC793E61F, MEDALLION, 11)
    fields = SCHEME.fields(value)
    assert list(fields) == ["timestamp_us", "medallion", "offset"]
    assert all(type(v) is int for v in fields.values())
    assert SCHEME.timestamp_ns(value) == 0x5D5EAC793E61F * US
    assert SCHEME.timestamp_ns(muid.pack(-1, MEDALLION, 1)) is None
    assert SCHEME.timestamp_ns(muid.pack(0, -1, -1)) == 0


def test_scheme_metadata() -> None:
    assert isinstance(SCHEME, Scheme)
    assert SCHEME.name == "muid"
    assert SCHEME.packed_bytes == 16
    assert SCHEME.formats == ("canonical",)
    assert SCHEME.text_width == {"canonical": 34}
    assert SCHEME.timestamp_digits == 6
    assert SCHEME.native_unit_ns == 1_000
    pool = SCHEME.identity_pool(Settings())
    assert pool is not None
    assert (pool.kind, pool.space[0], pool.space[1], pool.draw) == (
        "medallion",
        0x10000000000,
        0x1FFFFFFFFFF,
        "random",
    )
    assert [f.bits for f in SCHEME.layout] == ["127..76", "75..32", "31..0"]
    assert SCHEME.resolve_format(None) == "canonical"
    with pytest.raises(InvalidOptionError, match="format must be one of canonical"):
        SCHEME.format(0, "hex")
    assert SCHEME.native_from_ns(1_999) == 1


# --- round trips over the full field ranges -----------------------------------------------------------------------


@given(timestamps, medallions, offsets)
def test_pack_unpack_round_trip(timestamp_us: int, medallion: int, offset: int) -> None:
    value = muid.pack(timestamp_us, medallion, offset)
    assert 0 <= value < 1 << 128
    assert muid.unpack(value) == (timestamp_us, medallion, offset)
    assert muid.from_bytes(muid.to_bytes(value)) == value


@given(packed)
def test_every_128_bit_value_unpacks_and_repacks(value: int) -> None:
    assert muid.pack(*muid.unpack(value)) == value


@given(packed)
def test_format_parse_round_trip(value: int) -> None:
    text = SCHEME.format(value, "canonical")
    assert len(text) == 34
    assert text == text.upper()
    assert SCHEME.parse(text) == value
    assert SCHEME.parse(text.lower()) == value
    assert SCHEME.parse(text.swapcase()) == value


@given(timestamps, medallions)
def test_shorthand_round_trip(timestamp_us: int, medallion: int) -> None:
    text = SCHEME.format(muid.pack(timestamp_us, medallion, 0), "canonical")
    assert SCHEME.parse(text[:25]) == muid.pack(timestamp_us, medallion, 0)
    assert SCHEME.parse(text[:13]) == muid.pack(timestamp_us, 0, 0)


@given(
    timestamp_us=st.integers(min_value=0, max_value=muid.TIMESTAMP_US_MAX),
    medallion=new_medallions,
    count=st.integers(min_value=1, max_value=3000),
)
def test_batch_encode_equals_format_of_values(timestamp_us: int, medallion: int, count: int) -> None:
    batch = MuidBatch(timestamp_us, medallion, count)
    expected = "".join(SCHEME.format(v, "canonical") + "\n" for v in batch.values()).encode()
    assert batch.encode("canonical") == expected


@settings(max_examples=40, deadline=None)
@given(
    medallion=new_medallions,
    start_us=st.integers(min_value=0, max_value=muid.TIMESTAMP_US_MAX - 10**9),
    steps=st.lists(
        st.tuples(st.integers(min_value=-5000, max_value=1 << 40), st.integers(min_value=1, max_value=9000)),
        min_size=1,
        max_size=12,
    ),
)
def test_generator_batches_encode_equals_format(medallion: int, start_us: int, steps: list[tuple[int, int]]) -> None:
    """Consecutive bundles of one generator (which reuses its text rows) encode exactly as format()."""
    clock = FakeClock.from_ns(start_us * US)
    generator = MuidGenerator(medallion, clock=clock)
    for advance_us, count in steps:
        clock.ns = min(max(0, clock.ns + advance_us * US), muid.TIMESTAMP_US_MAX * US // 2)
        batch = generator.generate(count)
        expected = "".join(SCHEME.format(v, "canonical") + "\n" for v in batch.values()).encode()
        assert batch.encode("canonical") == expected
        assert batch.encode(None) == expected


@pytest.mark.parametrize("count", [65535, 65536, 65537, 131072, 131073, 200_000])
@pytest.mark.parametrize("cached", [False, True])
def test_large_batch_encode(count: int, cached: bool) -> None:
    """Past 65536 offsets the high four offset digits change per run of 65536."""
    timestamp_us = 0x5D5EAC793E61F
    if cached:
        generator = MuidGenerator(0x1FFFFFFFFFF, clock=FakeClock.from_ns(timestamp_us * US))
        generator.generate(10).encode("canonical")
        batch = generator.generate(count)
    else:
        batch = MuidBatch(timestamp_us, 0x1FFFFFFFFFF, count)
    text = batch.encode("canonical")
    assert len(text) == count * 35
    lines = text.split(b"\n")[:-1]
    assert lines[-1].decode() == SCHEME.format(muid.pack(batch.timestamp_us, 0x1FFFFFFFFFF, count), "canonical")
    assert lines == [SCHEME.format(v, "canonical").encode() for v in batch.values()]


def test_batch_extra_and_high_water() -> None:
    batch = MuidBatch(0x5D5EAC793E61F, MEDALLION, 3)
    assert isinstance(batch, Batch)
    assert batch.extra("canonical") == {"bundle": "5D5EAC793E61F-1BFC71B112D-00000000"}
    assert batch.high_water == 0x5D5EAC793E61F
    assert batch.count == 3
    assert [muid.unpack(v)[2] for v in batch.values()] == [1, 2, 3]
    with pytest.raises(InvalidOptionError):
        batch.encode("decimal")


# --- ordering -----------------------------------------------------------------------------------------------------


@given(st.lists(packed, min_size=2, max_size=20))
def test_packed_order_equals_canonical_text_order(values: list[int]) -> None:
    by_value = sorted(values)
    by_text = sorted(values, key=lambda v: SCHEME.format(v, "canonical"))
    by_bytes = sorted(values, key=muid.to_bytes)
    assert by_value == by_text == by_bytes


@given(
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=muid.TIMESTAMP_US_MAX),
            st.integers(min_value=0, max_value=muid.MEDALLION_MAX),
            st.integers(min_value=0, max_value=muid.OFFSET_MAX),
        ),
        min_size=2,
        max_size=20,
    )
)
def test_field_tuple_order_for_non_negative_fields(rows: list[tuple[int, int, int]]) -> None:
    assert sorted(rows) == [muid.unpack(v) for v in sorted(muid.pack(*r) for r in rows)]


# --- strict parsing -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "characters long, got 0"),
        ("5D5EAC793E61F-1BFC71B112D-0000000", "characters long, got 33"),
        ("5D5EAC793E61F-1BFC71B112D-0000000BB", "characters long, got 35"),
        ("5D5EAC793E61F-0000000000000-00000", "characters long, got 33"),  # the document's stale 13/13/5 example
        ("05D5EAC793E61F-1F8CB77AE1EAA-0000B", "expected '-' at position 13"),  # old 14/13/5 Gink format
        ("5D5EAC793E61F1BFC71B112D0000000B", "characters long, got 32"),
        ("5D5EAC793E61F_1BFC71B112D_0000000B", "expected '-' at position 13, got '_'"),
        ("5D5EAC793E61F-1BFC71B112D_0000000B", "expected '-' at position 25, got '_'"),
        ("5D5EAC793E61F-1BFC71B112D00000000B", "expected '-' at position 25"),
        ("5D5EAC793E61F-1BFC71B112D-", "characters long, got 26"),
        ("5D5EAC793E61F-", "characters long, got 14"),
        ("5D5EAC793E61", "characters long, got 12"),
        (" 5D5EAC793E61F", "characters long, got 14"),
        (
            "5D5EAC793E61G-1BFC71B112D-0000000B",
            "only hex digits 0-9 A-F besides the '-' separators, got 'G' at position 12",
        ),
        ("5D5EAC793E61F-1BFC71B112D-0x00000B", "got 'x' at position 27"),
        ("5D5EAC793E61F-1BFC71B112D-+000000B", "got '+' at position 26"),
        ("5D5EAC793E61F-1BFC71B112D--000000B", "got '-' at position 26"),
        ("-D5EAC793E61F", "got '-' at position 0"),
        ("5D5EAC_93E61F", "got '_' at position 6"),
        ("5D5EAC793E61F-1BFC71B 12D", "got ' ' at position 21"),
        ("\uff15D5EAC793E61F", "got '\uff15' at position 0"),  # full-width digit 5
        ("5D5EAC793E61\u0660", "got '\u0660' at position 12"),  # Arabic-Indic zero
    ],
)
def test_rejects(text: str, message: str) -> None:
    with pytest.raises(InvalidIdError) as excinfo:
        SCHEME.parse(text)
    assert message in str(excinfo.value)
    assert str(excinfo.value).startswith("Muid must")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ((-2, 0, 0), "timestamp_us must be in -1..4503599627370494"),
        ((muid.TIMESTAMP_US_MAX + 1, 0, 0), "timestamp_us must be in"),
        ((0, -2, 0), "medallion must be in -1..17592186044414"),
        ((0, muid.MEDALLION_MAX + 1, 0), "medallion must be in"),
        ((0, 0, muid.OFFSET_MAX + 1), "offset must be in -2147483648..2147483647"),
        ((0, 0, muid.OFFSET_MIN - 1), "offset must be in"),
    ],
)
def test_pack_rejects_out_of_range_fields(fields: tuple[int, int, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        muid.pack(*fields)


def test_codec_rejects_bad_packed_values() -> None:
    with pytest.raises(ValueError, match="must be in 0..2\\*\\*128-1"):
        muid.unpack(1 << 128)
    with pytest.raises(ValueError, match="must be in 0..2\\*\\*128-1"):
        SCHEME.format(-1, "canonical")
    with pytest.raises(ValueError, match="exactly 16 bytes long, got 15"):
        muid.from_bytes(b"\0" * 15)


# --- generator ----------------------------------------------------------------------------------------------------


def test_generator_issues_one_bundle_per_call() -> None:
    clock = FakeClock.from_ns(1_700_000_000_000_000 * US)
    generator = MuidGenerator(MEDALLION, clock=clock)
    assert isinstance(generator, Generator)
    batch = generator.generate(5)
    assert batch.count == 5
    assert [muid.unpack(v) for v in batch.values()] == [(1_700_000_000_000_000, MEDALLION, o) for o in range(1, 6)]
    bundle = SCHEME.format(muid.pack(1_700_000_000_000_000, MEDALLION, 0), "canonical")
    assert batch.extra("canonical") == {"bundle": bundle}
    assert generator.high_water == batch.high_water == 1_700_000_000_000_000
    assert generator.wait_ns() == 0


def test_generator_is_monotonic_on_a_stopped_clock() -> None:
    clock = FakeClock.from_ns(5_000 * US)
    generator = MuidGenerator(MEDALLION, clock=clock)
    stamps = [muid.unpack(generator.generate(1).values()[0])[0] for _ in range(100)]
    assert stamps == list(range(5_000, 5_100))
    # Timestamps run ahead of a clock that does not move: that is not a clock rollback.
    assert generator.stats.clock_rollbacks == 0
    assert generator.high_water == 5_099


def test_generator_follows_the_clock_when_it_moves_on() -> None:
    clock = FakeClock.from_ns(5_000 * US, step=7 * US)
    generator = MuidGenerator(MEDALLION, clock=clock)
    stamps = [generator.generate(3).timestamp_us for _ in range(4)]
    assert stamps == [5_000, 5_007, 5_014, 5_021]
    assert generator.stats.clock_rollbacks == 0


def test_clock_rollback_never_repeats() -> None:
    clock = FakeClock.from_ns(10_000 * US + 123)
    generator = MuidGenerator(MEDALLION, clock=clock)
    first = generator.generate(10)
    clock.ns = 9_000 * US  # steps back 1 ms
    second = generator.generate(10)
    assert second.timestamp_us == 10_001
    assert not set(first.values()) & set(second.values())
    assert generator.stats.clock_rollbacks == 1
    assert generator.stats.max_rollback_ns == 1_000 * US + 123
    clock.ns = 12_000 * US
    assert generator.generate(1).timestamp_us == 12_000
    assert generator.stats.clock_rollbacks == 1


def test_floor_is_respected() -> None:
    clock = FakeClock.from_ns(1_000 * US)
    generator = MuidGenerator(MEDALLION, clock=clock, floor=50_000)
    assert generator.high_water == 50_000
    assert generator.generate(1).timestamp_us == 50_001
    assert generator.generate(1).timestamp_us == 50_002
    assert generator.stats.clock_rollbacks == 0  # a floor above the clock is not a rollback
    clock.ns = 60_000 * US
    assert generator.generate(1).timestamp_us == 60_000
    assert generator.high_water == 60_000


def test_bundle_count_limits() -> None:
    generator = MuidGenerator(MEDALLION, clock=FakeClock.from_ns(1_000 * US))
    with pytest.raises(InvalidOptionError, match="count must be in 1..2147483647 for muid, got 0"):
        generator.generate(0)
    with pytest.raises(InvalidOptionError, match="got 2147483648"):
        generator.generate(1 << 31)
    with pytest.raises(InvalidOptionError, match="got 1.0"):
        generator.generate(1.0)
    with pytest.raises(InvalidOptionError, match="muid takes no options, got mode"):
        generator.generate(1, mode="spread")
    batch = generator.generate(muid.BUNDLE_COUNT_MAX)  # the offset field's limit; not encoded here
    assert batch.count == muid.BUNDLE_COUNT_MAX
    assert muid.unpack(muid.pack(batch.timestamp_us, MEDALLION, batch.count))[2] == muid.OFFSET_MAX


def test_timestamp_overflow_is_refused() -> None:
    generator = MuidGenerator(MEDALLION, clock=FakeClock.from_ns(0), floor=muid.TIMESTAMP_US_MAX)
    with pytest.raises(OverflowError):
        generator.generate(1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"medallion": 0x10000000000 - 1}, "medallion must be in 0x10000000000..0x1ffffffffff, got 0xffffffffff"),
        ({"medallion": 0x20000000000}, "medallion must be in 0x10000000000..0x1ffffffffff"),
        ({"medallion": -1}, "medallion must be in"),
        ({"medallion": MEDALLION, "floor": -2}, "floor must be in -1.."),
    ],
)
def test_generator_options_validated(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MuidGenerator(**kwargs)


def test_default_clock_is_wall_time() -> None:
    import time

    generator = MuidGenerator(MEDALLION)
    before = time.time_ns() // US
    stamp = generator.generate(1).timestamp_us
    assert before <= stamp <= time.time_ns() // US + 1


def test_no_duplicate_in_a_million_ids() -> None:
    clock = FakeClock.from_ns(1_700_000_000_000_000 * US, step=3 * US)
    generator = MuidGenerator(MEDALLION, clock=clock)
    seen: set[int] = set()
    issued = 0
    for call in range(1_000):
        if call % 97 == 0:
            clock.ns -= 50 * US  # an occasional clock rollback
        batch = generator.generate(1_000)
        seen.update(batch.values())
        issued += batch.count
    assert issued == len(seen) == 1_000_000
    assert generator.stats.clock_rollbacks > 0
