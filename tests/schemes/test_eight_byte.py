"""Tests of app/schemes/eight_byte.py against docs/schemes/eight-byte.md and LableOrg/java-uniqueid."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.errors import InvalidIdError, InvalidOptionError
from app.schemes import eight_byte
from app.schemes.base import Batch, Generator, Scheme
from app.schemes.eight_byte import SCHEME, EightByteGenerator, Mode
from app.settings import Settings
from tests.helpers import FakeClock

MS = 1_000_000  # ns per ms
SPREAD, TIME_SEQUENTIAL = Mode.SPREAD, Mode.TIME_SEQUENTIAL

timestamps = st.integers(min_value=0, max_value=eight_byte.TIMESTAMP_MS_MAX)
sequences = st.integers(min_value=0, max_value=eight_byte.SEQUENCE_MAX)
generator_ids = st.integers(min_value=0, max_value=eight_byte.GENERATOR_ID_MAX)
cluster_ids = st.integers(min_value=0, max_value=eight_byte.CLUSTER_ID_MAX)
modes = st.sampled_from(list(Mode))
packed = st.integers(min_value=0, max_value=(1 << 64) - 1)


def decoded(batch: eight_byte.EightByteBatch) -> list[tuple[int, int, int, int, Mode]]:
    return [eight_byte.unpack(v) for v in batch.values()]


# --- vectors (docs/schemes/eight-byte.md "Vectors": the reference's own tests) ---------------------------------

VECTORS = [
    ((0, 0, 0, 0, SPREAD), "0000000000000000"),
    ((0x3FFFFFFFFFF, 63, 2047, 15, SPREAD), "ffffffffffffefff"),
    ((143062936275, 0, 0, 0, SPREAD), "cb54ecf284000000"),
    ((0x3FFFFFFFD, 0, 0, 0, SPREAD), "bfffffffc0000000"),
    ((143062936275, 10, 1, 5, SPREAD), "cb54ecf2840a0015"),
    ((143062936275, 10, 2, 5, TIME_SEQUENTIAL), "0853cdcab4ca1025"),
    # IDBuilderTest's single-field checks: sequence 0x22 in byte 5, generator 0x27 -> 0x0270, cluster 5, mode bit.
    ((0, 0x22, 0, 0, SPREAD), "0000000000220000"),
    ((0, 0, 0x27, 0, SPREAD), "0000000000000270"),
    ((0, 0, 0, 5, SPREAD), "0000000000000005"),
    ((0, 0, 0, 0, TIME_SEQUENTIAL), "0000000000001000"),
    ((0, 0, 255, 0, SPREAD), "0000000000000ff0"),  # parseGeneratorIdTest: bytes 6/7 = 0x0f, 0xf0 -> 255
    ((0, 0, 0x700, 0, SPREAD), "000000000000e000"),  # generator ID bits 10..8 sit above the mode bit
]


@pytest.mark.parametrize(("fields", "text"), VECTORS)
def test_vectors_encode(fields: tuple[int, int, int, int, Mode], text: str) -> None:
    value = eight_byte.pack(*fields)
    assert SCHEME.format(value, "hex") == text
    assert SCHEME.canonical(value) == text
    assert eight_byte.to_bytes(value).hex() == text
    assert SCHEME.format(value, "decimal") == str(int(text, 16))


@pytest.mark.parametrize(("fields", "text"), VECTORS)
def test_vectors_decode(fields: tuple[int, int, int, int, Mode], text: str) -> None:
    value = SCHEME.parse(text)
    assert eight_byte.unpack(value) == fields
    assert SCHEME.parse(text.upper()) == value
    assert eight_byte.from_bytes(bytes.fromhex(text)) == value
    timestamp_ms, sequence, generator_id, cluster_id, mode = fields
    assert SCHEME.fields(value) == {
        "timestamp_ms": timestamp_ms,
        "sequence": sequence,
        "generator_id": generator_id,
        "cluster_id": cluster_id,
        "mode": mode.name.lower(),
    }
    assert SCHEME.timestamp_ns(value) == timestamp_ms * MS


def test_decimal_vector() -> None:
    value = eight_byte.pack(143062936275, 10, 1, 5, SPREAD)
    assert SCHEME.format(value, "decimal") == "14651596014084554773"
    assert SCHEME.parse("14651596014084554773") == value


def test_spread_is_bit_reversal_not_byte_reversal() -> None:
    timestamp_ms = 143062936275
    assert eight_byte.reverse_bits(timestamp_ms) == int(f"{timestamp_ms:064b}"[::-1], 2)
    byte_reversed = int.from_bytes(timestamp_ms.to_bytes(8, "big")[::-1], "big")
    assert eight_byte.pack(timestamp_ms, 0, 0, 0, SPREAD) != byte_reversed
    assert eight_byte.pack(timestamp_ms, 0, 0, 0, SPREAD) == eight_byte.reverse_bits(timestamp_ms)


def test_scheme_metadata() -> None:
    assert isinstance(SCHEME, Scheme)
    assert SCHEME.name == "eight-byte"
    assert SCHEME.packed_bytes == 8
    assert SCHEME.formats == ("hex", "decimal", "signed")
    assert SCHEME.text_width == {"hex": 16}
    assert SCHEME.timestamp_digits == 3
    assert SCHEME.native_unit_ns == 1_000_000
    pool = SCHEME.identity_pool(Settings())
    assert pool is not None
    assert (pool.kind, pool.space[0], pool.space[1], pool.draw) == (
        "generator_id",
        0,
        2047,
        "scan",
    )
    assert SCHEME.resolve_format("canonical") == "hex"
    with pytest.raises(InvalidOptionError, match="format must be one of canonical, hex, decimal"):
        SCHEME.format(0, "base32")
    assert list(SCHEME.fields(0)) == ["timestamp_ms", "sequence", "generator_id", "cluster_id", "mode"]


# --- round trips over the full field ranges -----------------------------------------------------------------------


@given(timestamps, sequences, generator_ids, cluster_ids, modes)
def test_pack_unpack_round_trip(
    timestamp_ms: int, sequence: int, generator_id: int, cluster_id: int, mode: Mode
) -> None:
    value = eight_byte.pack(timestamp_ms, sequence, generator_id, cluster_id, mode)
    assert 0 <= value < 1 << 64
    assert eight_byte.unpack(value) == (timestamp_ms, sequence, generator_id, cluster_id, mode)
    assert eight_byte.from_bytes(eight_byte.to_bytes(value)) == value


@given(packed)
def test_every_64_bit_value_unpacks_and_repacks(value: int) -> None:
    assert eight_byte.pack(*eight_byte.unpack(value)) == value


@given(packed)
def test_hex_round_trip(value: int) -> None:
    text = SCHEME.format(value, "hex")
    assert len(text) == 16
    assert text == text.lower()
    assert SCHEME.parse(text) == value
    assert SCHEME.parse(text.upper()) == value


@given(st.one_of(packed, st.integers(min_value=0, max_value=10**17)))
def test_decimal_round_trip(value: int) -> None:
    text = SCHEME.format(value, "decimal")
    if len(text) == 16:
        # Documented ambiguity: 16 digits are read as hex (the canonical form).
        assert SCHEME.parse(text) == int(text, 16)
    else:
        assert SCHEME.parse(text) == value


@given(packed)
def test_reverse_bits_is_the_bit_string_reversed(value: int) -> None:
    """The byte-table reversal against Java ``Long.reverse`` written as a 64-character bit string reversed."""
    assert eight_byte.reverse_bits(value) == int(f"{value:064b}"[::-1], 2)
    assert eight_byte.reverse_bits(eight_byte.reverse_bits(value)) == value


@pytest.mark.parametrize("value", [-1, 1 << 64])
def test_reverse_bits_refuses_values_outside_64_bits(value: int) -> None:
    with pytest.raises(OverflowError):
        eight_byte.reverse_bits(value)


@pytest.mark.parametrize("mode", list(Mode))
def test_mode_option_is_parsed_once_to_its_mode(mode: Mode) -> None:
    """The query's text becomes the Mode itself, and the generator takes the Mode as it takes its name."""
    assert SCHEME.parse_option("mode", mode.label) is mode
    assert Mode.from_option(mode.label) is Mode.from_option(mode) is mode
    generator = EightByteGenerator([9], 3, clock=FakeClock(1_700_000_000_000))
    by_mode = generator.generate(1, mode=mode).values()[0]
    by_name = generator.generate(1, mode=mode.label).values()[0]
    assert eight_byte.unpack(by_mode)[4] is eight_byte.unpack(by_name)[4] is mode


@pytest.mark.parametrize("option", ["SPREAD", "", 0, 1, b"spread", None])
def test_mode_option_refuses_other_values(option: object) -> None:
    if option is None:
        assert Mode.from_option(option) is Mode.SPREAD  # absent: the default
        return
    with pytest.raises(InvalidOptionError, match="mode must be one of spread, time_sequential"):
        Mode.from_option(option)


@given(st.lists(packed, max_size=50))
def test_reverse_bits_array_matches_reverse_bits(values: list[int]) -> None:
    array = np.array(values, dtype=np.uint64)
    reversed_array = eight_byte.reverse_bits_array(array)
    assert reversed_array.tolist() == [eight_byte.reverse_bits(v) for v in values]
    assert eight_byte.reverse_bits_array(reversed_array).tolist() == values


@settings(max_examples=60, deadline=None)
@given(
    ids=st.lists(generator_ids, min_size=1, max_size=5, unique=True),
    cluster_id=cluster_ids,
    lookback_ms=st.integers(min_value=0, max_value=40),
    start_ms=st.integers(min_value=0, max_value=eight_byte.TIMESTAMP_MS_MAX - 10_000),
    steps=st.lists(
        st.tuples(
            st.integers(min_value=-3, max_value=50),
            st.integers(min_value=1, max_value=3000),
            st.sampled_from(["spread", "time_sequential"]),
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_batch_encode_equals_format_of_values(
    ids: list[int], cluster_id: int, lookback_ms: int, start_ms: int, steps: list[tuple[int, int, str]]
) -> None:
    clock = FakeClock(start_ms)
    generator = EightByteGenerator(ids, cluster_id, clock=clock, lookback_ms=lookback_ms)
    for advance_ms, count, mode in steps:
        clock.set_ms(max(0, clock.ns // MS + advance_ms))
        batch = generator.generate(count, mode=mode)
        values = batch.values()
        assert len(values) == batch.count <= count
        for fmt in SCHEME.formats:
            expected = "".join(SCHEME.format(v, fmt) + "\n" for v in values).encode()
            assert batch.encode(fmt) == expected
        assert batch.encode("canonical") == batch.encode("hex")
        for timestamp_ms, _sequence, generator_id, got_cluster, got_mode in map(eight_byte.unpack, values):
            assert got_cluster == cluster_id and got_mode.name.lower() == mode and generator_id in ids
            assert timestamp_ms <= max(clock.ns // MS, generator.high_water)


# --- ordering -----------------------------------------------------------------------------------------------------


@given(st.lists(st.tuples(timestamps, sequences, generator_ids, cluster_ids), min_size=2, max_size=20))
def test_time_sequential_orders_by_timestamp_then_sequence(rows: list[tuple[int, int, int, int]]) -> None:
    values = [eight_byte.pack(*row, TIME_SEQUENTIAL) for row in rows]
    by_value = sorted(values)
    assert by_value == sorted(values, key=lambda v: SCHEME.format(v, "hex")) == sorted(values, key=eight_byte.to_bytes)
    keys = [eight_byte.unpack(v)[:2] for v in by_value]
    assert keys == sorted(keys)


@given(st.lists(packed, min_size=2, max_size=20))
def test_hex_text_order_equals_packed_order(values: list[int]) -> None:
    assert sorted(values) == sorted(values, key=lambda v: SCHEME.format(v, "hex"))


# --- strict parsing -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "16 hex digits or an unsigned decimal integer, got 0 characters"),
        ("cb54ecf2840a001", "hex ID must be exactly 16 hex digits long, got 15"),
        ("cb54ecf2840a00155", "hex ID must be exactly 16 hex digits long, got 17"),
        ("cb54ecf2840a001g", "only hex digits 0-9 a-f, got 'g' at position 15"),
        ("cb54ecf2-840a0015", "got 17 characters including '-'"),
        ("0xcb54ecf2840a00", "only hex digits 0-9 a-f, got 'x' at position 1"),
        ("cb54ecf2 840a001", "got ' ' at position 8"),
        ("+123", "got 4 characters including '+'"),
        ("+1", "got 2 characters including '+'"),
        ("1_000", "including '_'"),
        ("12.5", "including '.'"),
        ("18446744073709551616", "must fit in 64 bits (at most 18446744073709551615)"),
        ("99999999999999999999", "must fit in 64 bits"),
        ("184467440737095516150", "1 to 20 digits long, got 21"),
        ("0123", "must not have leading zeros"),
        ("00", "must not have leading zeros"),
        ("\u0661\u0662\u0663", "including '\u0661'"),  # Arabic-Indic digits are not ASCII digits
        (
            "\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18",
            "got '\uff11' at position 0",
        ),  # 16 full-width digits
    ],
)
def test_rejects(text: str, message: str) -> None:
    with pytest.raises(InvalidIdError) as excinfo:
        SCHEME.parse(text)
    assert message in str(excinfo.value)
    assert str(excinfo.value).startswith("eight-byte")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("7", 7),
        ("18446744073709551615", (1 << 64) - 1),
        ("1234567890123456", 0x1234567890123456),  # 16 digits: hex wins
        ("0000000000000000", 0),
        ("123456789012345", 123456789012345),  # 15 digits: decimal
        ("12345678901234567", 12345678901234567),  # 17 digits: decimal
        ("FFFFFFFFFFFFEFFF", 0xFFFFFFFFFFFFEFFF),
    ],
)
def test_accepts(text: str, value: int) -> None:
    assert SCHEME.parse(text) == value


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ((eight_byte.TIMESTAMP_MS_MAX + 1, 0, 0, 0), "timestamp_ms must be in 0..4398046511103"),
        ((-1, 0, 0, 0), "timestamp_ms must be in"),
        ((0, 64, 0, 0), "sequence must be in 0..63, got 64"),
        ((0, 0, 2048, 0), "generator ID must be in 0..2047, got 2048"),
        ((0, 0, 0, 16), "cluster ID must be in 0..15, got 16"),
    ],
)
def test_pack_rejects_out_of_range_fields(fields: tuple[int, int, int, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        eight_byte.pack(*fields)


def test_codec_rejects_bad_packed_values() -> None:
    with pytest.raises(ValueError, match=r"must be in 0..2\*\*64-1"):
        eight_byte.unpack(1 << 64)
    with pytest.raises(ValueError, match=r"must be in 0..2\*\*64-1"):
        SCHEME.format(-1, "decimal")
    with pytest.raises(ValueError, match="exactly 8 bytes long, got 9"):
        eight_byte.from_bytes(bytes(9))


# --- generator ----------------------------------------------------------------------------------------------------


def test_one_millisecond_holds_64_per_generator_id() -> None:
    clock = FakeClock(1_000_000)
    generator = EightByteGenerator([9, 4, 2047], 3, clock=clock)
    assert isinstance(generator, Generator)
    batch = generator.generate(1_000)
    assert isinstance(batch, Batch)
    assert batch.count == 3 * 64
    assert decoded(batch) == [
        (1_000_000, sequence, generator_id, 3, SPREAD) for generator_id in (9, 4, 2047) for sequence in range(64)
    ]
    assert generator.stats.sequence_exhausted == 1
    assert generator.wait_ns() == MS
    clock.ns += 250_000
    empty = generator.generate(5)
    assert empty.count == 0 and empty.values() == [] and empty.high_water == -1
    assert empty.encode("hex") == b"" and empty.encode("decimal") == b""
    assert generator.wait_ns() == 750_000
    assert generator.stats.sequence_exhausted == 2
    assert generator.stats.clock_rollbacks == 0
    clock.set_ms(1_000_001)
    assert generator.wait_ns() == 0
    assert generator.generate(1).high_water == 1_000_001


def test_partial_batches_continue_the_sequence() -> None:
    clock = FakeClock(500)
    generator = EightByteGenerator([1], 0, clock=clock)
    first, second, third = (generator.generate(40) for _ in range(3))
    assert (first.count, second.count, third.count) == (40, 24, 0)
    assert [d[1] for d in decoded(first) + decoded(second)] == list(range(64))
    assert generator.wait_ns() > 0
    assert generator.stats.sequence_exhausted == 2


def test_clock_moving_on_resets_the_sequence() -> None:
    clock = FakeClock(500)
    generator = EightByteGenerator([1], 0, clock=clock)
    generator.generate(10)
    clock.set_ms(501)
    assert [d[:2] for d in decoded(generator.generate(3))] == [(501, 0), (501, 1), (501, 2)]


def test_clock_rollback_keeps_the_last_millisecond_and_continues() -> None:
    clock = FakeClock(10_000)
    generator = EightByteGenerator([5], 1, clock=clock)
    first = generator.generate(10)
    clock.ns = 9_990 * MS + 400_000  # 9.6 ms back
    second = generator.generate(100)
    assert [d[:2] for d in decoded(second)] == [(10_000, s) for s in range(10, 64)]
    assert not set(first.values()) & set(second.values())
    assert generator.stats.clock_rollbacks == 1
    assert generator.stats.max_rollback_ns == 9_600_000
    assert generator.generate(1).count == 0  # 10_000 is full and the clock is behind it
    assert generator.stats.clock_rollbacks == 2
    assert generator.wait_ns() == 10_001 * MS - clock.ns
    assert generator.high_water == 10_000
    clock.set_ms(10_001)
    assert [d[:2] for d in decoded(generator.generate(2))] == [(10_001, 0), (10_001, 1)]


def test_modes_share_state() -> None:
    clock = FakeClock(77)
    generator = EightByteGenerator([300], 15, clock=clock)
    spread = generator.generate(30, mode="spread")
    sequential = generator.generate(50, mode="time_sequential")
    assert [d[1] for d in decoded(spread)] == list(range(30))
    assert [d[1] for d in decoded(sequential)] == list(range(30, 64))
    assert {d[4] for d in decoded(spread)} == {SPREAD} and {d[4] for d in decoded(sequential)} == {TIME_SEQUENTIAL}
    assert generator.generate(1, mode=TIME_SEQUENTIAL).count == 0
    assert SCHEME.fields(sequential.values()[0])["mode"] == "time_sequential"
    assert generator.generate(1, mode=None).count == 0  # None = the default mode


def test_lookback_fills_never_used_milliseconds_only() -> None:
    clock = FakeClock(1_000)
    generator = EightByteGenerator([2], 0, clock=clock, lookback_ms=5, floor=999)
    assert generator.generate(64).count == 64  # 1_000 full
    clock.set_ms(1_003)
    batch = generator.generate(1_000)
    stamps = [d[0] for d in decoded(batch)]
    assert stamps == [1_001] * 64 + [1_002] * 64 + [1_003] * 64  # never 1_000 again, never 1_004 (future)
    assert generator.generate(1).count == 0
    clock.set_ms(1_020)  # woke up late: the window is 1_015..1_020
    stamps = [d[0] for d in decoded(generator.generate(10_000))]
    assert stamps == [ms for ms in range(1_015, 1_021) for _ in range(64)]
    assert generator.high_water == 1_020


def test_lookback_uses_the_rest_of_the_last_millisecond_in_the_window() -> None:
    clock = FakeClock(1_000)
    generator = EightByteGenerator([2], 0, clock=clock, lookback_ms=1, floor=999)
    generator.generate(10)
    clock.set_ms(1_001)
    batch = generator.generate(1_000)
    assert [d[:2] for d in decoded(batch)] == [(1_000, s) for s in range(10, 64)] + [(1_001, s) for s in range(64)]


def test_lookback_zero_abandons_the_rest_of_the_last_millisecond() -> None:
    clock = FakeClock(1_000)
    generator = EightByteGenerator([2], 0, clock=clock)
    generator.generate(10)
    clock.set_ms(1_002)
    assert [d[:2] for d in decoded(generator.generate(1_000))] == [(1_002, s) for s in range(64)]


def test_lookback_on_a_fresh_generator_reaches_back_from_now() -> None:
    """With nothing issued and no floor, the window is simply now - lookback_ms .. now."""
    clock = FakeClock(2_000)
    generator = EightByteGenerator([2], 0, clock=clock, lookback_ms=2)
    assert [d[0] for d in decoded(generator.generate(1_000))] == [ms for ms in (1_998, 1_999, 2_000) for _ in range(64)]


def test_lookback_never_reaches_at_or_below_the_floor() -> None:
    clock = FakeClock(2_000)
    generator = EightByteGenerator([2], 0, clock=clock, lookback_ms=100, floor=1_998)
    assert {d[0] for d in decoded(generator.generate(1_000))} == {1_999, 2_000}


def test_floor_is_respected() -> None:
    clock = FakeClock(4_000)
    generator = EightByteGenerator([2], 0, clock=clock, floor=5_000)
    assert generator.high_water == 5_000
    assert generator.generate(10).count == 0
    assert generator.wait_ns() == 1_001 * MS
    clock.set_ms(5_000)
    assert generator.generate(10).count == 0
    assert generator.stats.clock_rollbacks == 0  # behind the floor, not behind an issued ID
    clock.set_ms(5_001)
    assert {d[0] for d in decoded(generator.generate(10))} == {5_001}
    assert generator.high_water == 5_001


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (([], 0), {}, "generator_ids must hold at least one generator ID"),
        (([2048], 0), {}, "generator ID must be in 0..2047, got 2048"),
        (([-1], 0), {}, "generator ID must be in 0..2047, got -1"),
        (([1, 2, 1, 3, 3], 0), {}, "generator IDs must be distinct, got 1, 3 more than once"),
        (([1], 16), {}, "cluster_id must be in 0..15, got 16"),
        (([1], -1), {}, "cluster_id must be in 0..15, got -1"),
        (([1], 0), {"lookback_ms": -1}, "lookback_ms must be >= 0, got -1"),
        (([1], 0), {"floor": -2}, "floor must be in -1..4398046511103 milliseconds, got -2"),
    ],
)
def test_generator_configuration_validated(args: tuple[list[int], int], kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EightByteGenerator(*args, **kwargs)


@pytest.mark.parametrize(
    ("count", "options", "message"),
    [
        (1, {"mode": "SPREAD"}, "mode must be one of spread, time_sequential for eight-byte, got 'SPREAD'"),
        (1, {"mode": "reverse"}, "mode must be one of spread, time_sequential"),
        (1, {"mode": 1}, "mode must be one of spread, time_sequential"),
        (1, {"qualifier": "user"}, "eight-byte takes only the mode option, got qualifier"),
        (0, {}, "count must be >= 1 for eight-byte, got 0"),
        (2.0, {}, "count must be >= 1 for eight-byte, got 2.0"),
        (True, {}, "count must be >= 1 for eight-byte, got True"),
    ],
)
def test_generate_options_validated(count: int, options: dict[str, object], message: str) -> None:
    generator = EightByteGenerator([1], 0, clock=FakeClock(1))
    with pytest.raises(InvalidOptionError, match=message):
        generator.generate(count, **options)


def test_timestamp_overflow_is_refused() -> None:
    generator = EightByteGenerator([1], 0, clock=FakeClock(eight_byte.TIMESTAMP_MS_MAX + 1))
    with pytest.raises(OverflowError):
        generator.generate(1)


def test_default_clock_is_wall_time() -> None:
    import time

    generator = EightByteGenerator([1], 0)
    before = time.time_ns() // MS
    batch = generator.generate(1)
    assert batch.count == 1
    assert before <= batch.high_water <= time.time_ns() // MS


def test_many_ids_with_several_generator_ids() -> None:
    ids = [0, 255, 256, 1024, 2047]
    clock = FakeClock(1_700_000_000_000)
    generator = EightByteGenerator(ids, 7, clock=clock, lookback_ms=9)
    seen: set[int] = set()
    per_id: dict[int, list[tuple[int, int]]] = {g: [] for g in ids}
    for _ in range(50):
        clock.ns += 10 * MS
        batch = generator.generate(100_000, mode="time_sequential")
        assert batch.count == 10 * 64 * len(ids)
        values = batch.values()
        seen.update(values)
        for timestamp_ms, sequence, generator_id, cluster_id, _mode in map(eight_byte.unpack, values[::37]):
            per_id[generator_id].append((timestamp_ms, sequence))
            assert cluster_id == 7
    assert len(seen) == 50 * 10 * 64 * len(ids)
    for stamps in per_id.values():
        assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)  # monotonic per generator ID


def test_no_duplicate_in_a_million_ids() -> None:
    clock = FakeClock(1_700_000_000_000)
    generator = EightByteGenerator([3, 1000], 2, clock=clock, lookback_ms=40)
    chunks = []
    issued = 0
    last_position = (-1, -1)
    for call in range(400):
        clock.ns += 39 * MS + 123_457
        if call % 23 == 0:
            clock.ns -= 80 * MS  # clock rollback
        batch = generator.generate(4_000, mode="spread" if call % 2 else "time_sequential")
        for timestamp_ms, first, count in batch.runs:  # slots strictly after every slot issued before
            assert (timestamp_ms, first) > last_position
            last_position = (timestamp_ms, first + count - 1)
        chunks.append(batch.array())
        issued += batch.count
    assert issued >= 1_000_000
    assert len(np.unique(np.concatenate(chunks))) == issued
    assert generator.stats.clock_rollbacks > 0


def test_a_caller_waking_every_half_lookback_still_gets_the_full_cap() -> None:
    """What streams rely on (app.issuing.issuer.STREAM_SLICE_S): sleeping up to half of ``lookback_ns`` between calls
    loses no millisecond's 64 slots."""
    clock = FakeClock(5_000)
    generator = EightByteGenerator([2, 9], 0, clock=clock, lookback_ms=50, floor=4_999)
    assert generator.lookback_ns == 50_000_000
    issued = generator.generate(10**9).count  # ms 5_000
    for _ in range(40):
        clock.ns += generator.lookback_ns // 2
        issued += generator.generate(10**9).count
    assert issued == (1 + 40 * 25) * 128


# --- the signed form (Java's long view of the 8 bytes) ------------------------------------------------------------
@given(packed)
def test_signed_form_is_javas_long_and_round_trips(value: int) -> None:
    text = SCHEME.format(value, "signed")
    assert int(text) == struct.unpack(">q", value.to_bytes(8, "big"))[0]  # what java.nio reads as a long
    assert -(2**63) <= int(text) < 2**63
    if len(text) != 16:  # 16 digits read as hex, as with the unsigned decimal (module docstring)
        assert SCHEME.parse(text) == value
    if value < 2**63:
        assert text == SCHEME.format(value, "decimal")  # the non-negative half is the unsigned decimal


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("-0", "must not have leading zeros"),
        ("-012", "must not have leading zeros"),
        ("-", "'-' and 1 to 19 digits"),
        ("-9223372036854775809", r"at least -9223372036854775808"),
        ("-12345678901234567890", "'-' and 1 to 19 digits"),
        ("-12a4", "only digits after '-'"),
        ("-١٢٣", "only digits after '-'"),  # Arabic-Indic digits: not ASCII
        ("--5", "only digits after '-'"),
    ],
)
def test_signed_form_errors_name_the_rule(text: str, rule: str) -> None:
    with pytest.raises(InvalidIdError, match=rule):
        SCHEME.parse(text)


def test_signed_batches_encode_like_the_scalar_form() -> None:
    generator = EightByteGenerator([7], 3, clock=FakeClock(1_645_557_742_001))  # an odd ms: SPREAD's top bit set
    batch = generator.generate(64)
    lines = batch.encode("signed").decode().split("\n")[:-1]
    assert lines == [SCHEME.format(v, "signed") for v in batch.values()]
    assert all(line.startswith("-") for line in lines)
