"""Tests for app.schemes.wiji: codec pairs, the corrected spec vectors, batches, the Wiji v1 generator."""

from __future__ import annotations

import random as stdlib_random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.errors import InvalidIdError, InvalidOptionError
from app.schemes import wiji
from app.schemes.base import SMALL_BATCH
from app.schemes.wiji import SCHEME, WijiGenerator, pack, unpack
from app.settings import Settings
from tests.helpers import FakeClock, assert_json_members

US = 1_000  # ns per µs
NOW_US = 1_774_397_000_000_000  # 2026-03-25T00:03:20Z, the date vector 2 meant

TIMESTAMPS = st.integers(0, wiji.TIMESTAMP_US_MAX)
SEQUENCES = st.integers(0, wiji.SEQUENCE_MAX)
RANDOMS = st.integers(0, wiji.RANDOM_MAX)
FIELDS = st.tuples(TIMESTAMPS, SEQUENCES, RANDOMS)


RANDOM_BYTES = bytes.fromhex("f123456789abcd")  # top nibble dropped: random part 0x123456789ABCD


def make(clock: FakeClock | None = None, floor: int = -1) -> WijiGenerator:
    return WijiGenerator(clock=clock or FakeClock.from_us(NOW_US), rng=lambda n: RANDOM_BYTES[:n], floor=floor)


def sequences(values: list[int]) -> list[tuple[int, int]]:
    return [unpack(v)[:2] for v in values]


# --- metadata -----------------------------------------------------------------------------------------------------


def test_scheme_metadata() -> None:
    assert SCHEME.name == "wiji"
    assert SCHEME.packed_bytes == 16
    assert SCHEME.formats == ("base32", "uuid", "hex")
    assert SCHEME.text_width == {"base32": 26, "uuid": 36, "hex": 32}
    assert SCHEME.timestamp_digits == 6
    assert SCHEME.native_unit_ns == 1_000
    assert SCHEME.identity_pool(Settings()) is None and SCHEME.uniqueness == "random"
    assert [f.name for f in SCHEME.layout] == ["timestamp_us", "sequence", "version", "random"]
    assert SCHEME.resolve_format("canonical") == "base32"


# --- spec vectors (WIJI_SPEC section 11, corrected by docs/schemes/wiji.md "Errata") ----------------------------------

VECTORS = [
    pytest.param(
        "00000000000000000010000000000000",
        "00000000000000040000000000",
        "00000000-0000-0000-0010-000000000000",
        {"timestamp_us": 0, "sequence": 0, "version": 1, "random": 0},
        id="vector-1-minimum",
    ),
    pytest.param(
        "0006524de00000002a1abcdef0123450",
        "000S94VR000002M6NWVVR14D2G",
        "0006524d-e000-0000-2a1a-bcdef0123450",
        {"timestamp_us": 6950563610624, "sequence": 42, "version": 1, "random": 0xABCDEF0123450},
        id="vector-2-printed-bytes",
    ),
]


@pytest.mark.parametrize(("hex_text", "base32", "uuid", "fields"), VECTORS)
def test_spec_vectors(hex_text: str, base32: str, uuid: str, fields: dict[str, int]) -> None:
    value = int(hex_text, 16)
    assert wiji.to_bytes(value) == bytes.fromhex(hex_text)
    assert wiji.from_bytes(bytes.fromhex(hex_text)) == value
    assert SCHEME.format(value, "base32") == base32
    assert SCHEME.format(value, "canonical") == base32
    assert SCHEME.format(value, "uuid") == uuid
    assert SCHEME.format(value, "hex") == hex_text
    for text in (base32, uuid, hex_text, base32.lower(), uuid.upper(), hex_text.upper()):
        assert SCHEME.parse(text) == value
    assert SCHEME.fields(value) == fields
    assert pack(fields["timestamp_us"], fields["sequence"], fields["random"]) == value
    assert SCHEME.timestamp_ns(value) == fields["timestamp_us"] * US


def test_document_examples_are_not_wiji_v1() -> None:
    # The specification's section 5 examples carry version nibbles 8 and 14 (docs/schemes/wiji.md "Errata").
    with pytest.raises(InvalidIdError, match="version nibble .* must be 1, got 8"):
        SCHEME.parse("01JKM5WXR9P003K1F4Q8XTBZN2")
    with pytest.raises(InvalidIdError, match="must be 1, got 14"):
        SCHEME.parse("019d2257-972f-1a4e-36ea-81d64ed08dfc")
    with pytest.raises(InvalidIdError, match="must be 1, got 14"):
        SCHEME.parse("019d2257972f1a4e36ea81d64ed08dfc")


def test_base32_substitutions() -> None:
    value = SCHEME.parse("000S94VR000002M6NWVVR14D2G")
    assert SCHEME.parse("oooS94uR0000o2M6NWuVRi4D2G") == value
    assert SCHEME.parse("OOOS94UR000002M6NWVURL4D2G") == value


# --- parsing ------------------------------------------------------------------------------------------------------

V2_BASE32 = "000S94VR000002M6NWVVR14D2G"
V2_UUID = "0006524d-e000-0000-2a1a-bcdef0123450"
V2_HEX = "0006524de00000002a1abcdef0123450"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "Wiji ID must be 26, 32 or 36 characters long, got 0"),
        (V2_BASE32[:-1], "Wiji ID must be 26, 32 or 36 characters long, got 25"),
        (V2_BASE32 + "0", "got 27"),
        (V2_HEX[:-1], "got 31"),
        (V2_HEX + "0", "got 33"),
        (V2_UUID[:-1], "got 35"),
        (V2_UUID + "0", "got 37"),
        ("2" + V2_BASE32[1:], "Wiji base32 must start with 0 or 1"),
        ("7ZZZZZZZZZZZZZ4ZZZZZZZZZZZ", "must start with 0 or 1"),
        (V2_BASE32[:7] + "*" + V2_BASE32[8:], "Crockford base32 alphabet"),
        (V2_BASE32[:7] + " " + V2_BASE32[8:], "got ' ' at position 7"),
        ("00000000000000000000000000", "version nibble (bits 55..52) must be 1, got 0"),
        ("00000000000000080000000000", "must be 1, got 2"),
        ("00000000000000000020000000000000", "must be 1, got 2"),
        ("000000000000000000f0000000000000", "must be 1, got 15"),
        ("00000000-0000-0000-0000-000000000000", "must be 1, got 0"),
        ("c0000000000000000010000000000000", "Wiji timestamp must be below 2**54 µs"),
        ("40000000-0000-0000-0010-000000000000", "below 2**54"),
        (V2_HEX[:10] + "g" + V2_HEX[11:], "Wiji hex must contain only hex digits 0-9 a-f (any case), got 'g'"),
        (V2_HEX[:10] + "_" + V2_HEX[11:], "got '_' at position 10"),
        ("+" + V2_HEX[1:], "got '+' at position 0"),
        (V2_HEX[:31] + "\u0661", "at position 31"),
        (V2_HEX[:12] + " " + V2_HEX[13:], "got ' ' at position 12"),
        ("0006524de-000-0000-2a1a-bcdef0123450", "expected '-' at position 8, got 'e'"),
        ("0006524d-e000-00002-a1a-bcdef0123450", "expected '-' at position 18"),
        ("0006524d_e000-0000-2a1a-bcdef0123450", "got '_'"),
        ("0006524d-e000-0000-2a1a-bcdef012345-", "besides the '-' separators, got '-' at position 35"),
        ("0006524d-e00g-0000-2a1a-bcdef0123450", "got 'g' at position 12"),
        ("0006524d-e000-0000-2a1a-+bcdef012345", "got '+'"),
    ],
)
def test_parse_rejects(text: str, fragment: str) -> None:
    with pytest.raises(InvalidIdError) as excinfo:
        SCHEME.parse(text)
    assert fragment in str(excinfo.value)


def test_unknown_format_is_an_option_error() -> None:
    value = SCHEME.parse(V2_HEX)
    with pytest.raises(InvalidOptionError, match="format must be one of canonical, base32, uuid, hex"):
        SCHEME.format(value, "ulid")
    with pytest.raises(InvalidOptionError, match="format must be one of"):
        make().generate(1).encode("decimal")


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ((-1, 0, 0), "timestamp_us must be in 0..18014398509481983, got -1"),
        ((1 << 54, 0, 0), "timestamp_us must be in 0..18014398509481983"),
        ((0, 1 << 16, 0), "sequence must be in 0..65535, got 65536"),
        ((0, -1, 0), "sequence"),
        ((0, 0, 1 << 52), "random must be in 0..4503599627370495"),
    ],
)
def test_pack_rejects(fields: tuple[int, int, int], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        pack(*fields)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (-1, "packed Wiji"),
        (1 << 128, "packed Wiji"),
        (0, "version nibble"),
        (1 << 127 | 1 << 52, "timestamp must be below 2\\*\\*54"),
    ],
)
def test_unpack_and_format_reject_invalid_values(value: int, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        unpack(value)
    for fmt in SCHEME.formats:
        with pytest.raises(ValueError, match=fragment):
            SCHEME.format(value, fmt)


def test_from_bytes_rejects() -> None:
    with pytest.raises(ValueError, match="exactly 16 bytes long, got 17"):
        wiji.from_bytes(bytes(17))
    with pytest.raises(ValueError, match="version nibble"):
        wiji.from_bytes(bytes(16))


# --- round trips over the full field ranges ---------------------------------------------------------------------


@given(FIELDS)
def test_pack_unpack_round_trip(fields: tuple[int, int, int]) -> None:
    value = pack(*fields)
    assert unpack(value) == fields
    assert wiji.from_bytes(wiji.to_bytes(value)) == value
    timestamp_us, sequence, random = fields
    assert SCHEME.fields(value) == {
        "timestamp_us": timestamp_us,
        "sequence": sequence,
        "version": 1,
        "random": random,
    }


@given(FIELDS, st.sampled_from(["base32", "uuid", "hex"]), st.booleans())
def test_format_parse_round_trip(fields: tuple[int, int, int], fmt: str, lower: bool) -> None:
    value = pack(*fields)
    text = SCHEME.format(value, fmt)
    assert len(text) == SCHEME.text_width[fmt]
    assert text == (text.upper() if fmt == "base32" else text.lower())
    assert text[0] in "01" if fmt == "base32" else True
    assert SCHEME.parse(text.lower() if lower else text.upper()) == value


@given(FIELDS, FIELDS)
def test_orders_agree(a: tuple[int, int, int], b: tuple[int, int, int]) -> None:
    va, vb = pack(*a), pack(*b)
    expected = a < b
    assert (wiji.to_bytes(va) < wiji.to_bytes(vb)) == expected
    for fmt in SCHEME.formats:
        assert (SCHEME.format(va, fmt) < SCHEME.format(vb, fmt)) == expected


@settings(max_examples=60, deadline=None)
@given(
    start_us=st.integers(0, wiji.TIMESTAMP_US_MAX - 10),
    warmup=st.integers(0, wiji.SEQUENCE_SLOTS),
    count=st.integers(1, 600),
    random_bytes=st.binary(min_size=7, max_size=7),
)
def test_batch_encode_equals_format_of_values(start_us: int, warmup: int, count: int, random_bytes: bytes) -> None:
    # The clock moves 300 ns per reading, so a warm-up leaves the sequence anywhere and batches may span 2 µs.
    generator = WijiGenerator(clock=FakeClock.from_us(start_us, step=300), rng=lambda n: random_bytes)
    if warmup:
        generator.generate(warmup)
    batch = generator.generate(count)
    values = batch.values()
    assert len(values) == batch.count
    assert 1 <= batch.count <= count
    for fmt in SCHEME.formats:
        expected = "".join(SCHEME.format(v, fmt) + "\n" for v in values).encode()
        assert batch.encode(fmt) == expected
        assert_json_members(batch, SCHEME, fmt, SMALL_BATCH)
    assert batch.encode("canonical") == batch.encode("base32")


def test_batch_spanning_microseconds_encodes_like_format() -> None:
    generator = WijiGenerator(clock=FakeClock.from_us(NOW_US, step=100), rng=lambda n: b"\xff" * n)
    generator.generate(100)
    batch = generator.generate(2 * wiji.SEQUENCE_SLOTS)
    assert len(batch.segments) == 3
    values = batch.values()
    for fmt in SCHEME.formats:
        assert batch.encode(fmt) == "".join(SCHEME.format(v, fmt) + "\n" for v in values).encode()
        assert_json_members(batch, SCHEME, fmt, SMALL_BATCH)


def test_empty_batch() -> None:
    generator = make()
    generator.generate(wiji.SEQUENCE_SLOTS)
    batch = generator.generate(5)
    assert batch.count == 0
    assert batch.values() == []
    assert batch.high_water == -1
    for fmt in SCHEME.formats:
        assert batch.encode(fmt) == b""


# --- generator ----------------------------------------------------------------------------------------------------


def test_random_part_is_drawn_once_from_rng() -> None:
    asked: list[int] = []

    def rng(n: int) -> bytes:
        asked.append(n)
        return RANDOM_BYTES[:n]

    generator = WijiGenerator(clock=FakeClock.from_us(NOW_US), rng=rng)
    assert generator.random_part == 0x123456789ABCD
    values = generator.generate(10).values() + generator.generate(10).values()
    assert asked == [7]
    assert {unpack(v)[2] for v in values} == {0x123456789ABCD}
    with pytest.raises(ValueError, match="rng returned 6 bytes, asked for 7"):
        WijiGenerator(rng=lambda n: bytes(6))


def test_sequence_per_microsecond() -> None:
    clock = FakeClock.from_us(NOW_US)
    generator = make(clock=clock)
    assert sequences(generator.generate(3).values()) == [(NOW_US, 0), (NOW_US, 1), (NOW_US, 2)]
    clock.ns += 999  # same microsecond: sequence + 1
    assert sequences(generator.generate(2).values()) == [(NOW_US, 3), (NOW_US, 4)]
    clock.ns += 1  # new microsecond: sequence 0
    assert sequences(generator.generate(2).values()) == [(NOW_US + 1, 0), (NOW_US + 1, 1)]
    assert generator.high_water == NOW_US + 1
    assert generator.wait_ns() == 0
    assert generator.stats.clock_rollbacks == 0
    assert generator.stats.sequence_exhausted == 0


def test_clock_rollback_keeps_last_microsecond() -> None:
    clock = FakeClock.from_us(NOW_US)
    generator = make(clock=clock)
    first = generator.generate(3).values()
    clock.ns -= 250 * US
    second = generator.generate(3).values()
    assert sequences(second) == [(NOW_US, 3), (NOW_US, 4), (NOW_US, 5)]
    assert generator.stats.clock_rollbacks == 1
    assert generator.stats.max_rollback_ns == 250 * US
    values = first + second
    assert values == sorted(values) and len(set(values)) == len(values)


def test_overflow_with_a_stuck_clock_returns_a_partial_batch_and_a_wait() -> None:
    clock = FakeClock.from_us(NOW_US)
    clock.ns += 400  # 400 ns into the microsecond
    generator = make(clock=clock)
    assert generator.generate(wiji.SEQUENCE_SLOTS - 4).count == wiji.SEQUENCE_SLOTS - 4
    started = time.perf_counter()
    partial = generator.generate(10)
    # The spin's budget is SPIN_LIMIT_NS of real time (time.perf_counter_ns in WijiGenerator, not the injected
    # clock), so only a real-time bound can show it ended: a spin that did not end would never return on this
    # frozen clock, so 5 s (100,000 times the budget) tells the two apart on however loaded a machine.
    assert time.perf_counter() - started < 5.0
    assert sequences(partial.values()) == [(NOW_US, s) for s in range(65532, 65536)]
    assert generator.stats.sequence_exhausted == 1
    assert generator.wait_ns() == 600
    assert generator.generate(1).count == 0
    assert generator.stats.sequence_exhausted == 1  # counted once per microsecond
    clock.ns += 600
    assert sequences(generator.generate(2).values()) == [(NOW_US + 1, 0), (NOW_US + 1, 1)]
    assert generator.wait_ns() == 0


def test_overflow_spins_for_a_real_clock() -> None:
    clock = FakeClock.from_us(NOW_US, step=50)  # 20 readings per microsecond
    generator = make(clock=clock)
    batch = generator.generate(wiji.SEQUENCE_SLOTS + 5)
    assert batch.count == wiji.SEQUENCE_SLOTS + 5
    assert [tuple(s) for s in batch.segments] == [(NOW_US, 0, 65536), (NOW_US + 1, 0, 5)]
    assert generator.stats.sequence_exhausted == 1
    assert batch.high_water == NOW_US + 1


def test_overflow_during_a_rollback_waits_instead_of_repeating() -> None:
    clock = FakeClock.from_us(NOW_US)
    generator = make(clock=clock)
    generator.generate(wiji.SEQUENCE_SLOTS)
    clock.ns -= 2_000_000_000  # 2 s back: too far to spin
    readings = clock.readings
    assert generator.generate(5).count == 0
    assert clock.readings == readings + 1  # no spinning at all: read once, the wait is far beyond the limit
    assert generator.wait_ns() == 2_000_000_000 + US
    assert generator.stats.clock_rollbacks == 1


@pytest.mark.parametrize("floor", [-1, NOW_US - 100, NOW_US - 1])
def test_floor_below_the_clock(floor: int) -> None:
    generator = make(floor=floor)
    assert generator.high_water == floor
    assert sequences(generator.generate(2).values()) == [(NOW_US, 0), (NOW_US, 1)]


@pytest.mark.parametrize("floor", [NOW_US, NOW_US + 3])
def test_floor_at_or_above_the_clock_waits(floor: int) -> None:
    clock = FakeClock.from_us(NOW_US)
    generator = make(clock=clock, floor=floor)
    assert generator.generate(5).count == 0
    assert generator.wait_ns() == (floor + 1 - NOW_US) * US
    assert generator.high_water == floor
    assert generator.stats.sequence_exhausted == 0  # the floor is not a sequence running out
    assert generator.stats.clock_rollbacks == 0
    clock.ns = (floor + 1) * US
    assert sequences(generator.generate(1).values()) == [(floor + 1, 0)]


@pytest.mark.parametrize(
    ("count", "options", "fragment"),
    [
        (0, {}, "count must be in 1..16777216 for wiji, got 0"),
        (-1, {}, "got -1"),
        (False, {}, "got False"),
        (2.0, {}, "got 2.0"),
        (wiji.BATCH_COUNT_MAX + 1, {}, "got 16777217"),
        (1, {"after": 5}, "wiji takes no options, got after"),
    ],
)
def test_generate_validates_options(count: object, options: dict[str, object], fragment: str) -> None:
    generator = make()
    with pytest.raises(InvalidOptionError) as excinfo:
        generator.generate(count, **options)
    assert fragment in str(excinfo.value)


@pytest.mark.parametrize("floor", [-2, wiji.TIMESTAMP_US_MAX])
def test_constructor_validates_floor(floor: int) -> None:
    with pytest.raises(ValueError, match="floor must be in -1..18014398509481982 microseconds"):
        make(floor=floor)


# --- uniqueness and monotonicity at volume --------------------------------------------------------------------------


def test_no_duplicate_in_a_million_ids_with_a_fake_clock_and_rollbacks() -> None:
    clock = FakeClock.from_us(NOW_US, step=7)
    generator = make(clock=clock)
    lines: list[bytes] = []
    for round_ in range(1_000):
        if len(lines) >= 1_000_000:
            break
        if round_ % 5 == 3:
            clock.ns -= 40 * US  # rollback
        batch = generator.generate(50_000)
        lines.extend(batch.encode("base32").splitlines())
        if batch.count < 50_000:
            clock.ns += generator.wait_ns()
    assert len(lines) >= 1_000_000
    assert len(set(lines)) == len(lines)
    assert lines == sorted(lines)  # monotonic: canonical text order is issue order
    assert generator.stats.clock_rollbacks > 0


def test_no_duplicate_in_a_million_ids_with_the_real_clock() -> None:
    generator = WijiGenerator()
    lines: list[bytes] = []
    while len(lines) < 1_000_000:
        lines.extend(generator.generate(65_536).encode("base32").splitlines())
    assert len(set(lines)) == len(lines)
    assert lines == sorted(lines)


def test_two_generators_in_the_same_microsecond_differ_by_random_part() -> None:
    seeded = stdlib_random.Random(1)
    a = WijiGenerator(clock=FakeClock.from_us(NOW_US), rng=seeded.randbytes)
    b = WijiGenerator(clock=FakeClock.from_us(NOW_US), rng=seeded.randbytes)
    assert a.random_part != b.random_part
    assert not set(a.generate(1000).values()) & set(b.generate(1000).values())
