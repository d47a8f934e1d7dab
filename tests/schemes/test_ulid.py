"""Tests for app.schemes.ulid: codec pairs, rejected inputs, python-ulid interop, batches, the monotonic generator."""

from __future__ import annotations

import os
import random as stdlib_random
import re
import uuid

import pytest
import ulid as python_ulid
from hypothesis import given
from hypothesis import strategies as st

from app.errors import InvalidIdError, InvalidOptionError
from app.schemes import ulid
from app.schemes.ulid import SCHEME, UlidBatch, UlidGenerator, pack, unpack
from app.settings import Settings
from tests.helpers import FakeClock, assert_json_members

MS = FakeClock.NS_IN_MS
NOW_MS = 1_469_922_850_259  # the millisecond of the spec's example 01ARZ3NDEKTSV4RRFFQ69G5FAV

TIMESTAMPS = st.integers(0, ulid.TIMESTAMP_MS_MAX)
RANDOMS = st.integers(0, ulid.RANDOM_MAX)
VALUES = st.integers(0, (1 << 128) - 1)


def make(clock: FakeClock | None = None, floor: int = -1, seed: int = 0) -> UlidGenerator:
    return UlidGenerator(clock=clock or FakeClock(NOW_MS), rng=stdlib_random.Random(seed).randbytes, floor=floor)


def spellings(value: int) -> list[str]:
    """Every accepted spelling of one ULID."""
    text, as_uuid, as_hex = (SCHEME.format(value, fmt) for fmt in SCHEME.formats)
    return [text, text.lower(), as_uuid, as_uuid.upper(), as_hex, as_hex.upper()]


# --- metadata and contract members --------------------------------------------------------------------------------


def test_scheme_metadata() -> None:
    assert SCHEME.name == "ulid"
    assert SCHEME.packed_bytes == 16
    assert SCHEME.formats == ("ulid", "uuid", "hex")
    assert SCHEME.text_width == {"ulid": 26, "uuid": 36, "hex": 32}
    assert SCHEME.timestamp_digits == 3
    assert SCHEME.native_unit_ns == 1_000_000
    assert SCHEME.identity_pool(Settings()) is None and SCHEME.uniqueness == "random"
    assert [f.name for f in SCHEME.layout] == ["timestamp_ms", "random"]
    assert SCHEME.resolve_format("canonical") == "ulid"


def test_contract_members() -> None:
    assert SCHEME.title == "ULID"
    assert SCHEME.canonical(SCHEME.parse(SCHEME.example)) == SCHEME.example
    assert set(SCHEME.captions) == set(SCHEME.fields(SCHEME.parse(SCHEME.example)))
    assert SCHEME.options == () and SCHEME.shares_generator_with is None
    assert SCHEME.token_pattern is not None and re.fullmatch(SCHEME.token_pattern, SCHEME.example)
    with pytest.raises(InvalidOptionError, match="ulid takes no options"):
        SCHEME.parse_option("type", "x")
    generator = SCHEME.new_generator(None, [], 7, FakeClock(3), random=os.urandom)
    assert isinstance(generator, UlidGenerator) and generator.high_water == 7
    with pytest.raises(ValueError, match="leases no identity"):
        SCHEME.new_generator(None, [0], -1, FakeClock())


# --- the spec's example -------------------------------------------------------------------------------------------

EXAMPLE = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
EXAMPLE_HEX = "01563e3ab5d3d6764c61efb99302bd5b"


def test_spec_example_every_spelling() -> None:
    value = int(EXAMPLE_HEX, 16)
    for text in spellings(value):
        assert SCHEME.parse(text) == value
    assert SCHEME.canonical(value) == EXAMPLE
    assert SCHEME.format(value, "uuid") == "01563e3a-b5d3-d676-4c61-efb99302bd5b"
    assert SCHEME.format(value, "hex") == EXAMPLE_HEX
    assert SCHEME.fields(value) == {"timestamp_ms": NOW_MS, "random": "d6764c61efb99302bd5b"}
    assert SCHEME.timestamp_ns(value) == NOW_MS * MS
    assert ulid.to_bytes(value) == bytes.fromhex(EXAMPLE_HEX) and ulid.from_bytes(bytes.fromhex(EXAMPLE_HEX)) == value


def test_largest_ulid() -> None:
    assert SCHEME.parse("7ZZZZZZZZZZZZZZZZZZZZZZZZZ") == (1 << 128) - 1
    assert SCHEME.fields((1 << 128) - 1) == {"timestamp_ms": ulid.TIMESTAMP_MS_MAX, "random": "f" * 20}


# --- codec pairs over the full field ranges -------------------------------------------------------------------------


@given(TIMESTAMPS, RANDOMS)
def test_pack_unpack_round_trip(timestamp_ms: int, randomness: int) -> None:
    assert unpack(pack(timestamp_ms, randomness)) == (timestamp_ms, randomness)


@given(VALUES)
def test_every_text_form_round_trips(value: int) -> None:
    for text in spellings(value):
        assert SCHEME.parse(text) == value
    assert ulid.from_bytes(ulid.to_bytes(value)) == value
    assert SCHEME.format(value, "uuid") == str(uuid.UUID(int=value))


@pytest.mark.parametrize(
    ("fields", "rule"),
    [((-1, 0), "timestamp_ms must be in"), ((1 << 48, 0), "timestamp_ms must be in"), ((0, 1 << 80), "randomness")],
)
def test_pack_refuses_out_of_range(fields: tuple[int, int], rule: str) -> None:
    with pytest.raises(ValueError, match=rule):
        pack(*fields)


# --- rejected inputs: one row per rule --------------------------------------------------------------------------

ALPHABET_RULE = (
    r"ULID must use the Crockford base32 alphabet 0123456789ABCDEFGHJKMNPQRSTVWXYZ \(any case; no I, L, O or U\)"
)
REJECTED = [
    (EXAMPLE[:-1], "ULID must be 26 base32 characters, 36 .* or 32 hex digits long, got 25"),
    (EXAMPLE + "0", "got 27"),
    ("", "got 0"),
    ("8" + EXAMPLE[1:], r"ULID overflow: the first character must be 0..7 .* got '8'"),
    ("Z" + EXAMPLE[1:], "ULID overflow"),
    ("0I" + EXAMPLE[2:], ALPHABET_RULE + ", got 'I' at position 1"),
    ("0l" + EXAMPLE[2:], ALPHABET_RULE + ", got 'l' at position 1"),
    ("O1" + EXAMPLE[2:], ALPHABET_RULE + ", got 'O' at position 0"),
    (EXAMPLE[:-1] + "U", ALPHABET_RULE + ", got 'U' at position 25"),
    (EXAMPLE[:10] + "-" + EXAMPLE[11:], ALPHABET_RULE + ", got '-' at position 10"),
    (EXAMPLE[:-1] + "\u0663", ALPHABET_RULE),
    ("01563e3a-b5d3-d676-4c61efb99302bd5b0", r"ULID in uuid/hex form must be 8-4-4-4-12 .* '-' at position 23"),
    ("01563e3a-b5d3-d676-4c61-efb99302bd5g", "only hex digits 0-9 a-f .* got 'g'"),
    (EXAMPLE_HEX[:-1] + "x", "only hex digits .* got 'x'"),
    (EXAMPLE_HEX + "0", "got 33"),
    ("{01563e3a-b5d3-d676-4c61-efb99302bd5b}", "got 38"),
]


@pytest.mark.parametrize(("text", "rule"), REJECTED)
def test_rejected_inputs_name_the_rule(text: str, rule: str) -> None:
    with pytest.raises(InvalidIdError, match=rule):
        SCHEME.parse(text)


# --- peer library: python-ulid ------------------------------------------------------------------------------------


def test_python_ulid_ids_parse_to_their_fields_in_every_spelling() -> None:
    for _ in range(100):
        theirs = python_ulid.ULID()
        value = int(theirs)
        for text in (str(theirs), str(theirs).lower(), str(theirs.to_uuid()), theirs.hex, theirs.hex.upper()):
            assert SCHEME.parse(text) == value
        assert SCHEME.fields(value) == {"timestamp_ms": theirs.milliseconds, "random": theirs.hex[12:]}


def test_ids_issued_here_are_accepted_by_python_ulid_with_the_same_timestamp() -> None:
    batch = UlidGenerator().generate(300)
    values = batch.values()
    ulid_lines, uuid_lines, hex_lines = (batch.encode(fmt).decode().splitlines() for fmt in SCHEME.formats)
    for value, text, as_uuid, as_hex in zip(values, ulid_lines, uuid_lines, hex_lines):
        timestamp_ms = SCHEME.fields(value)["timestamp_ms"]
        for theirs in (
            python_ulid.ULID.from_str(text),
            python_ulid.ULID.from_uuid(uuid.UUID(as_uuid)),
            python_ulid.ULID.from_hex(as_hex),
        ):
            assert int(theirs) == value and theirs.milliseconds == timestamp_ms
            assert str(theirs) == text


# --- batches: column-wise text equals the scalar text ---------------------------------------------------------------


def scalar_text(batch: UlidBatch, fmt: str) -> bytes:
    return "".join(SCHEME.format(value, fmt) + "\n" for value in batch.values()).encode()


@pytest.mark.parametrize("count", [1, 8, 9, 1000, 65536])
def test_batch_encode_equals_scalar_format(count: int) -> None:
    batch = make(seed=count).generate(count)
    for fmt in SCHEME.formats:
        text = batch.encode(fmt)
        assert text == scalar_text(batch, fmt)
        assert len(text) == count * (SCHEME.text_width[fmt] + 1)
        assert_json_members(batch, SCHEME, fmt, ulid.SCALAR_COUNT_MAX)


def test_empty_batch_encodes_to_nothing() -> None:
    batch = UlidBatch(())
    assert batch.count == 0 and batch.values() == [] and batch.high_water == -1
    for fmt in SCHEME.formats:
        assert batch.encode(fmt) == b""


def test_batch_across_carries_and_an_overflow() -> None:
    # Randomness just below 2**64 and 2**80: the text's carries and the 80-bit overflow inside one batch.
    for start in ((1 << 64) - 40_000, ulid.RANDOM_MAX - 40_000):
        generator = make()
        generator.generate(1)
        generator._last_random = start  # injected state
        batch = generator.generate(100_000)
        for fmt in SCHEME.formats:
            assert batch.encode(fmt) == scalar_text(batch, fmt)
            assert_json_members(batch, SCHEME, fmt, ulid.SCALAR_COUNT_MAX)
        values = batch.values()
        assert values == sorted(values)


# --- the generator ------------------------------------------------------------------------------------------------


def test_same_millisecond_increments_the_randomness() -> None:
    generator = make()
    values = generator.generate(10).values() + generator.generate(10).values()
    randoms = [unpack(v)[1] for v in values]
    assert randoms == list(range(randoms[0], randoms[0] + 20))
    assert {unpack(v)[0] for v in values} == {NOW_MS}


def test_new_millisecond_draws_fresh_randomness() -> None:
    clock = FakeClock(NOW_MS)
    draws = iter([b"\x00" * 9 + b"\x05", b"\x12" * 10])
    generator = UlidGenerator(clock=clock, rng=lambda n: next(draws))
    assert generator.generate(2).values() == [pack(NOW_MS, 5), pack(NOW_MS, 6)]
    clock.set_ms(NOW_MS + 1)
    assert generator.generate(1).values() == [pack(NOW_MS + 1, int.from_bytes(b"\x12" * 10, "big"))]


def test_randomness_overflow_advances_the_millisecond() -> None:
    generator = UlidGenerator(clock=FakeClock(NOW_MS), rng=lambda n: b"\xff" * n)
    values = generator.generate(3).values()
    assert values == [pack(NOW_MS + step, ulid.RANDOM_MAX) for step in range(3)]
    assert generator.stats.sequence_exhausted == 2
    assert generator.high_water == NOW_MS + 2


def test_clock_rollback_keeps_the_last_millisecond() -> None:
    clock = FakeClock(NOW_MS)
    generator = make(clock)
    before = generator.generate(5).values()
    clock.set_ms(NOW_MS - 10_000)
    after = generator.generate(5).values()
    assert {unpack(v)[0] for v in after} == {NOW_MS} and after[0] == before[-1] + 1
    assert generator.stats.clock_rollbacks == 1


def test_floor_is_respected() -> None:
    clock = FakeClock(NOW_MS)
    generator = make(clock, floor=NOW_MS + 9)
    assert {unpack(v)[0] for v in generator.generate(50).values()} == {NOW_MS + 10}
    clock.set_ms(NOW_MS + 11)
    assert unpack(generator.generate(1).values()[0])[0] == NOW_MS + 11
    with pytest.raises(ValueError, match="floor must be in"):
        make(floor=ulid.TIMESTAMP_MS_MAX)


def test_monotonic_over_a_million_ids_with_overflow_and_rollback() -> None:
    clock = FakeClock(NOW_MS)
    generator = make(clock)
    previous, seen, issued = -1, set(), 0
    for step in range(200):
        if step == 77:
            generator._last_random = ulid.RANDOM_MAX - 777  # an 80-bit overflow mid-run
        if step % 50 == 49:
            clock.ns -= 2 * MS
        elif step % 4 == 0:
            clock.ns += MS
        values = generator.generate(5000).values()
        issued += len(values)
        assert values[0] > previous and all(a < b for a, b in zip(values, values[1:]))
        previous = values[-1]
        seen.update(values)
    assert issued == 1_000_000 and len(seen) == issued
    assert generator.stats.sequence_exhausted == 1 and generator.stats.clock_rollbacks >= 3


@pytest.mark.parametrize("count", [0, -1, 1 << 25, True])
def test_generate_refuses_a_bad_count(count: object) -> None:
    with pytest.raises(InvalidOptionError, match="count must be in 1..16777216 for ulid"):
        make().generate(count)


def test_generate_refuses_options_and_a_bad_rng() -> None:
    with pytest.raises(InvalidOptionError, match="ulid takes no options, got mode"):
        make().generate(1, mode="x")
    with pytest.raises(ValueError, match="rng returned 2 bytes, asked for 10"):
        UlidGenerator(clock=FakeClock(NOW_MS), rng=lambda n: b"ab").generate(1)
