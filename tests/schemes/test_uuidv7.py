"""Tests for app.schemes.uuidv7: codec pairs, the RFC 9562 vector, rejected inputs, peers, batches, the generator."""

from __future__ import annotations

import json
import os
import random as stdlib_random
import uuid

import pytest
import uuid6
import uuid_utils
from hypothesis import given
from hypothesis import strategies as st

from app.errors import InvalidIdError, InvalidOptionError
from app.schemes import uuidv7
from app.schemes.base import Run
from app.schemes.uuidv7 import SCHEME, Uuidv7Batch, Uuidv7Generator, pack, unpack
from app.settings import Settings
from tests.helpers import FakeClock

MS = FakeClock.NS_IN_MS
NOW_MS = 0x017F22E279B0  # the RFC 9562 A.6 vector's millisecond

TIMESTAMPS = st.integers(0, uuidv7.TIMESTAMP_MS_MAX)
RAND_AS = st.integers(0, uuidv7.RAND_A_MAX)
RAND_BS = st.integers(0, uuidv7.RAND_B_MAX)
VALUES = st.builds(pack, TIMESTAMPS, RAND_AS, RAND_BS)


def make(clock: FakeClock | None = None, floor: int = -1, seed: int = 0) -> Uuidv7Generator:
    return Uuidv7Generator(clock=clock or FakeClock(NOW_MS), rng=stdlib_random.Random(seed).randbytes, floor=floor)


def spellings(canonical: str) -> list[str]:
    """Every accepted spelling of one UUID."""
    digits = canonical.replace("-", "")
    return [
        canonical,
        canonical.upper(),
        "{" + canonical + "}",
        "{" + canonical.upper() + "}",
        "urn:uuid:" + canonical,
        "URN:UUID:" + canonical.upper(),
        digits,
        digits.upper(),
    ]


# --- metadata and contract members --------------------------------------------------------------------------------


def test_scheme_metadata() -> None:
    assert SCHEME.name == "uuidv7"
    assert SCHEME.packed_bytes == 16
    assert SCHEME.formats == ("uuid", "hex")
    assert SCHEME.text_width == {"uuid": 36, "hex": 32}
    assert SCHEME.timestamp_digits == 3
    assert SCHEME.native_unit_ns == 1_000_000
    assert SCHEME.identity_pool(Settings()) is None and SCHEME.uniqueness == "random"
    assert [f.name for f in SCHEME.layout] == ["timestamp_ms", "version", "rand_a", "variant", "rand_b"]
    assert SCHEME.resolve_format("canonical") == "uuid"


def test_contract_members() -> None:
    assert SCHEME.title == "UUIDv7 (RFC 9562)"
    assert SCHEME.canonical(SCHEME.parse(SCHEME.example)) == SCHEME.example
    assert set(SCHEME.captions) == set(SCHEME.fields(SCHEME.parse(SCHEME.example)))
    assert SCHEME.options == () and SCHEME.shares_generator_with is None
    assert SCHEME.token_pattern is not None
    import re

    assert re.fullmatch(SCHEME.token_pattern, SCHEME.example)
    with pytest.raises(InvalidOptionError, match="uuidv7 takes no options"):
        SCHEME.parse_option("type", "user")
    generator = SCHEME.new_generator(None, [], 5, FakeClock(3), random=lambda n: bytes(n))
    assert isinstance(generator, Uuidv7Generator) and generator.high_water == 5
    with pytest.raises(ValueError, match="leases no identity"):
        SCHEME.new_generator(None, [1], -1, FakeClock())


# --- the RFC 9562 appendix A.6 vector -------------------------------------------------------------------------------

VECTOR = "017f22e2-79b0-7cc3-98c4-dc0c0c07398f"


@pytest.mark.parametrize("text", spellings(VECTOR))
def test_rfc9562_vector_every_spelling(text: str) -> None:
    value = SCHEME.parse(text)
    assert value == 0x017F22E279B07CC398C4DC0C0C07398F
    assert SCHEME.fields(value) == {"timestamp_ms": 0x017F22E279B0, "rand_a": 0xCC3, "rand_b": "18c4dc0c0c07398f"}
    assert unpack(value) == (0x017F22E279B0, 0xCC3, 0x18C4DC0C0C07398F)
    assert SCHEME.canonical(value) == VECTOR
    assert SCHEME.format(value, "hex") == VECTOR.replace("-", "")
    # Tuesday, February 22, 2022 2:22:22.00 PM GMT-05:00
    assert SCHEME.timestamp_ns(value) == 1_645_557_742_000 * MS


def test_vector_bytes_pair() -> None:
    value = SCHEME.parse(VECTOR)
    assert uuidv7.to_bytes(value) == uuid.UUID(VECTOR).bytes
    assert uuidv7.from_bytes(uuid.UUID(VECTOR).bytes) == value
    with pytest.raises(ValueError, match="exactly 16 bytes"):
        uuidv7.from_bytes(b"\x01" * 15)
    with pytest.raises(ValueError, match="UUID version 4"):
        uuidv7.from_bytes(uuid.uuid4().bytes)


# --- codec pairs over the full field ranges -------------------------------------------------------------------------


@given(TIMESTAMPS, RAND_AS, RAND_BS)
def test_pack_unpack_round_trip(timestamp_ms: int, rand_a: int, rand_b: int) -> None:
    assert unpack(pack(timestamp_ms, rand_a, rand_b)) == (timestamp_ms, rand_a, rand_b)


@given(VALUES)
def test_every_text_form_round_trips(value: int) -> None:
    for fmt in SCHEME.formats:
        assert SCHEME.parse(SCHEME.format(value, fmt)) == value
    for text in spellings(SCHEME.canonical(value)):
        assert SCHEME.parse(text) == value
    assert SCHEME.canonical(value) == str(uuid.UUID(int=value))
    assert uuidv7.from_bytes(uuidv7.to_bytes(value)) == value


@pytest.mark.parametrize(
    ("fields", "rule"),
    [
        ((-1, 0, 0), "timestamp_ms must be in 0..281474976710655"),
        ((1 << 48, 0, 0), "timestamp_ms must be in"),
        ((0, 1 << 12, 0), "rand_a must be in 0..4095"),
        ((0, 0, 1 << 62), "rand_b must be in"),
    ],
)
def test_pack_refuses_out_of_range(fields: tuple[int, int, int], rule: str) -> None:
    with pytest.raises(ValueError, match=rule):
        pack(*fields)


# --- rejected inputs: one row per rule --------------------------------------------------------------------------

V4 = "017f22e2-79b0-4cc3-98c4-dc0c0c07398f"
REJECTED = [
    (V4, "UUID version 4 carries no timestamp; expected 7"),
    (V4.replace("-", ""), "UUID version 4 carries no timestamp; expected 7"),
    ("017f22e2-79b0-1cc3-98c4-dc0c0c07398f", "UUID version 1 carries a Gregorian 100 ns timestamp"),
    ("017f22e2-79b0-6cc3-98c4-dc0c0c07398f", "UUID version 6 carries a Gregorian 100 ns timestamp"),
    ("017f22e2-79b0-8cc3-98c4-dc0c0c07398f", "UUID version 8 carries no timestamp; expected 7"),
    ("00000000-0000-0000-0000-000000000000", "UUID version 0 is the nil UUID's"),
    ("ffffffff-ffff-ffff-ffff-ffffffffffff", "UUID version 15 is the max UUID's"),
    ("017f22e2-79b0-7cc3-18c4-dc0c0c07398f", r"UUID variant \(bits 63..62\) must be 10 \(RFC 9562\), got 00"),
    ("017f22e2-79b0-7cc3-58c4-dc0c0c07398f", "UUID variant .* got 01"),
    ("017f22e2-79b0-7cc3-c8c4-dc0c0c07398f", "UUID variant .* got 11"),
    (VECTOR[:-1], "UUID must be the 8-4-4-4-12 form, .* got 35 characters"),
    (VECTOR + "0", "got 37 characters"),
    ("", "got 0 characters"),
    (VECTOR.replace("-", "")[:-1], "got 31 characters"),
    ("017f22e2079b0-7cc3-98c4-dc0c0c07398f", "expected '-' at position 8, got '0'"),
    ("017f22e2-79b0-7cc3-98c4dc0c0c07398f0", "expected '-' at position 23"),
    ("017f22e2-79b0-7cc3-98c4-dc0c0c07398g", "only hex digits 0-9 a-f .* got 'g'"),
    ("017f22e2-79b0-7cc3-98c4-dc0c0c07398\u0663", "only hex digits 0-9 a-f .* got '\u0663'"),  # Arabic-Indic 3
    ("017f22e279b0_cc398c4dc0c0c07398f", "only hex digits .* got '_'"),
    ("017f22e2-79b0-7cc3-98c4+dc0c0c07398f", "expected '-' at position 23, got '\\+'"),
    ("{" + VECTOR, "braces must enclose the whole"),
    (VECTOR + "}", "braces must enclose the whole"),
    ("{" + VECTOR.replace("-", "") + "}", r"inside \{...\} must be the 36-character 8-4-4-4-12 form, got 32"),
    ("urn:uuid:" + VECTOR.replace("-", ""), "after urn:uuid: must be the 36-character 8-4-4-4-12 form, got 32"),
    ("urn:uuid:{" + VECTOR + "}", "after urn:uuid: must be the 36-character"),
    (" " + VECTOR, "got 37 characters"),
]


@pytest.mark.parametrize(("text", "rule"), REJECTED)
def test_rejected_inputs_name_the_rule(text: str, rule: str) -> None:
    with pytest.raises(InvalidIdError, match=rule):
        SCHEME.parse(text)


def test_unknown_format_is_an_option_error() -> None:
    with pytest.raises(InvalidOptionError, match="format must be one of canonical, uuid, hex"):
        SCHEME.format(SCHEME.parse(VECTOR), "base32")


# --- peer libraries -----------------------------------------------------------------------------------------------


def peer_uuids() -> list[tuple[str, int, int]]:
    """(canonical text, int, timestamp ms) of UUIDv7s made by uuid-utils and uuid6."""
    made = []
    for _ in range(50):
        a = uuid_utils.uuid7()
        made.append((str(a), a.int, a.timestamp))
        b = uuid6.uuid7()
        made.append((str(b), b.int, b.time))
    return made


def test_peer_ids_parse_to_their_fields_in_every_spelling() -> None:
    for text, value, timestamp_ms in peer_uuids():
        for spelling in spellings(text):
            assert SCHEME.parse(spelling) == value
        fields = SCHEME.fields(value)
        assert fields["timestamp_ms"] == timestamp_ms
        assert fields["rand_a"] == (value >> 64) & 0xFFF
        assert int(fields["rand_b"], 16) == value & ((1 << 62) - 1)


def test_ids_issued_here_are_accepted_by_peers_with_the_same_timestamp() -> None:
    generator = Uuidv7Generator()
    batch = generator.generate(200)
    for fmt in SCHEME.formats:
        for line, value in zip(batch.encode(fmt).decode().splitlines(), batch.values()):
            timestamp_ms = SCHEME.fields(value)["timestamp_ms"]
            theirs = uuid_utils.UUID(line)
            assert theirs.version == 7 and theirs.variant == uuid.RFC_4122 and theirs.timestamp == timestamp_ms
            other = uuid6.UUID(line)
            assert other.version == 7 and other.time == timestamp_ms
            assert uuid.UUID(line).int == value


# --- batches: column-wise text equals the scalar text ---------------------------------------------------------------


def scalar_text(batch: Uuidv7Batch, fmt: str) -> bytes:
    return "".join(SCHEME.format(value, fmt) + "\n" for value in batch.values()).encode()


def scalar_members(batch: Uuidv7Batch, fmt: str) -> bytes:
    """The IDs as JSON array members, as json.dumps writes them (no brackets)."""
    return json.dumps([SCHEME.format(value, fmt) for value in batch.values()], separators=(",", ":"))[1:-1].encode()


def assert_json_members(batch: Uuidv7Batch, fmt: str) -> None:
    members = batch.json_members(fmt)
    if batch.count <= uuidv7.SCALAR_COUNT_MAX:
        assert members is None
    else:
        assert members is not None and bytes(members) == scalar_members(batch, fmt)
    lines = batch.encode_lines(fmt)  # the stream's form: the same bytes, in a fresh bytearray past the scalar path
    assert bytes(lines) == scalar_text(batch, fmt)
    assert isinstance(lines, bytes if batch.count <= uuidv7.SCALAR_COUNT_MAX else bytearray)


@pytest.mark.parametrize("count", [1, 8, 9, 1000, 65536])
def test_batch_encode_equals_scalar_format(count: int) -> None:
    batch = make(seed=count).generate(count)
    assert batch.count == count
    for fmt in SCHEME.formats:
        text = batch.encode(fmt)
        assert text == scalar_text(batch, fmt)
        assert len(text) == count * (SCHEME.text_width[fmt] + 1)
        assert_json_members(batch, fmt)
    assert batch.encode("canonical") == batch.encode("uuid")


def test_empty_batch_encodes_to_nothing() -> None:
    batch = Uuidv7Batch((), b"")
    assert batch.count == 0 and batch.values() == [] and batch.high_water == -1
    for fmt in SCHEME.formats:
        assert batch.encode(fmt) == b""


def test_batch_across_16_bit_counter_runs_and_an_overflow() -> None:
    generator = make()
    generator.generate(1)
    generator._counter = uuidv7.COUNTER_MAX - 100_000  # force a counter overflow inside a batch
    batch = generator.generate(150_000)
    assert [seg.tick for seg in batch.segments] == [NOW_MS, NOW_MS + 1]
    assert batch.segments[0].count == 100_000
    assert len(batch.runs16()) >= 3
    for fmt in SCHEME.formats:
        assert batch.encode(fmt) == scalar_text(batch, fmt)
        assert_json_members(batch, fmt)
    values = batch.values()
    assert values == sorted(values) and len(set(values)) == len(values)


def test_batch_encode_refuses_an_unknown_format() -> None:
    with pytest.raises(InvalidOptionError, match="format must be one of"):
        make().generate(3).encode("ulid")
    with pytest.raises(InvalidOptionError, match="format must be one of"):
        make().generate(1000).json_members("ulid")


# --- the generator ------------------------------------------------------------------------------------------------


def test_new_millisecond_seeds_the_counter_with_its_top_bit_clear() -> None:
    generator = Uuidv7Generator(clock=FakeClock(NOW_MS), rng=lambda n: b"\xff" * n)
    batch = generator.generate(3)
    counters = [(v >> 64 & 0xFFF) << 30 | (v >> 32) & ((1 << 30) - 1) for v in batch.values()]
    assert counters == [(1 << 41) - 1, 1 << 41, (1 << 41) + 1]
    assert all(v & 0xFFFFFFFF == 0xFFFFFFFF for v in batch.values())


def test_same_millisecond_increments_and_tails_are_fresh_per_id() -> None:
    generator = make()
    first = generator.generate(1000).values()
    second = generator.generate(1000).values()
    values = first + second
    counters = [(v >> 64 & 0xFFF) << 30 | (v >> 32) & ((1 << 30) - 1) for v in values]
    assert counters == list(range(counters[0], counters[0] + 2000))
    assert {v >> 80 for v in values} == {NOW_MS}
    assert len({v & 0xFFFFFFFF for v in values}) > 1990  # 32 fresh bits per ID
    assert all(unpack(v) for v in values)  # version 7, variant 10


def test_one_random_draw_per_batch() -> None:
    calls: list[int] = []

    def rng(n: int) -> bytes:
        calls.append(n)
        return os.urandom(n)

    generator = Uuidv7Generator(clock=FakeClock(NOW_MS), rng=rng)
    generator.generate(65536)
    generator.generate(10)
    assert calls == [65536 * 4 + 6, 10 * 4 + 6]


def test_counter_overflow_advances_the_millisecond_and_reseeds() -> None:
    generator = make()
    generator.generate(1)
    generator._counter = uuidv7.COUNTER_MAX - 2
    values = generator.generate(5).values()
    assert [v >> 80 for v in values] == [NOW_MS, NOW_MS, NOW_MS + 1, NOW_MS + 1, NOW_MS + 1]
    assert values == sorted(values)
    assert generator.stats.sequence_exhausted == 1
    assert generator.high_water == NOW_MS + 1
    # The clock still reads NOW_MS: the next batch continues in NOW_MS + 1.
    assert generator.generate(1).values()[0] > values[-1]


def test_clock_rollback_keeps_the_last_millisecond_and_counts_on() -> None:
    clock = FakeClock(NOW_MS)
    generator = make(clock)
    before = generator.generate(10).values()
    clock.set_ms(NOW_MS - 5_000)
    after = generator.generate(10).values()
    assert {v >> 80 for v in after} == {NOW_MS}
    assert after[0] > before[-1]
    assert generator.stats.clock_rollbacks == 1
    clock.set_ms(NOW_MS + 1)
    assert generator.generate(1).values()[0] >> 80 == NOW_MS + 1


def test_floor_is_respected() -> None:
    clock = FakeClock(NOW_MS)
    generator = make(clock, floor=NOW_MS + 50)
    assert generator.high_water == NOW_MS + 50
    values = generator.generate(100).values()
    assert {v >> 80 for v in values} == {NOW_MS + 51}
    assert generator.high_water == NOW_MS + 51
    clock.set_ms(NOW_MS + 200)
    assert generator.generate(1).values()[0] >> 80 == NOW_MS + 200
    assert make(FakeClock(NOW_MS), floor=NOW_MS - 1).generate(1).values()[0] >> 80 == NOW_MS
    with pytest.raises(ValueError, match="floor must be in"):
        make(floor=-2)


def test_monotonic_over_a_million_ids_with_overflow_and_rollback() -> None:
    clock = FakeClock(NOW_MS)
    generator = make(clock)
    previous = -1
    seen: set[int] = set()
    rng = stdlib_random.Random(7)
    issued = 0
    for step in range(200):
        if step == 50:
            generator._counter = uuidv7.COUNTER_MAX - 1234  # an overflow mid-run
        if step % 40 == 39:
            clock.ns -= 3 * MS  # clock rollback
        elif step % 3 == 0:
            clock.ns += MS
        values = generator.generate(5000).values()
        issued += len(values)
        assert values[0] > previous
        assert all(a < b for a, b in zip(values, values[1:]))
        previous = values[-1]
        seen.update(values)
        if rng.random() < 0.1:
            generator.generate(rng.randint(1, 9))
    assert issued == 1_000_000 and len(seen) == issued
    assert generator.stats.sequence_exhausted == 1
    assert generator.stats.clock_rollbacks >= 5


@pytest.mark.parametrize("count", [0, -1, 1 << 25, True, 1.5])
def test_generate_refuses_a_bad_count(count: object) -> None:
    with pytest.raises(InvalidOptionError, match="count must be in 1..16777216 for uuidv7"):
        make().generate(count)


def test_generate_refuses_options() -> None:
    with pytest.raises(InvalidOptionError, match="uuidv7 takes no options, got prefix"):
        make().generate(1, prefix="user")


def test_rng_returning_the_wrong_size_is_refused() -> None:
    with pytest.raises(ValueError, match="rng returned 3 bytes"):
        Uuidv7Generator(clock=FakeClock(NOW_MS), rng=lambda n: b"abc").generate(1)


def test_timestamp_overflow_is_refused() -> None:
    generator = Uuidv7Generator(clock=FakeClock(uuidv7.TIMESTAMP_MS_MAX + 1), rng=os.urandom)
    with pytest.raises(OverflowError, match="would pass"):
        generator.generate(1)


@pytest.mark.parametrize("first", [0, uuidv7.COUNTER_CHUNK_SLOTS - 1000, uuidv7.COUNTER_CHUNK_SLOTS - 999, 3 << 40])
def test_json_members_at_the_counter_chunk_boundaries(first: int) -> None:
    # A batch whose counters stay inside one 16-bit chunk (one template row) or cross into the next.
    batch = Uuidv7Batch((Run(1_700_000_000_000, first, 1000),), bytes(range(256)) * 16)
    for fmt in SCHEME.formats:
        assert_json_members(batch, fmt)
        assert batch.encode(fmt) == scalar_text(batch, fmt)
