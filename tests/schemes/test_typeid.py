"""Tests for app.schemes.typeid: the spec's valid/invalid vectors, prefix rules, typeid-python interop, batches and
the generator shared with uuidv7."""

from __future__ import annotations

import json
import os
import random as stdlib_random
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
import typeid as typeid_python
from hypothesis import given
from hypothesis import strategies as st

from app.errors import InvalidIdError, InvalidOptionError
from app.schemes import typeid, uuidv7
from app.schemes.base import Run
from app.schemes.typeid import SCHEME, TypeId, TypeIdBatch, TypeIdGenerator
from app.schemes.uuidv7 import Uuidv7Generator
from app.settings import Settings
from tests.helpers import FakeClock

VECTORS = Path(__file__).parent / "vectors" / "typeid"
VALID: list[dict[str, str]] = json.loads((VECTORS / "valid.json").read_text())
INVALID: list[dict[str, str]] = json.loads((VECTORS / "invalid.json").read_text())
MS = FakeClock.NS_IN_MS
NOW_MS = 0x01890A5DAC96  # the millisecond of the spec's valid-uuidv7 vector

PREFIXES = st.from_regex(r"\A([a-z]([a-z_]{0,61}[a-z])?)?\Z")
VALUES = st.integers(0, (1 << 128) - 1)


def make(clock: FakeClock | None = None, floor: int = -1, seed: int = 0) -> TypeIdGenerator:
    rng = stdlib_random.Random(seed).randbytes
    return TypeIdGenerator(Uuidv7Generator(clock=clock or FakeClock(NOW_MS), rng=rng, floor=floor))


# --- metadata and contract members --------------------------------------------------------------------------------


def test_scheme_metadata() -> None:
    assert SCHEME.name == "typeid"
    assert SCHEME.packed_bytes == 16
    assert SCHEME.formats == ("typeid", "uuid")
    assert SCHEME.text_width == {"uuid": 36}
    assert SCHEME.timestamp_digits == 3 and SCHEME.native_unit_ns == 1_000_000
    assert SCHEME.identity_pool(Settings()) is None and SCHEME.uniqueness == "random"
    assert SCHEME.resolve_format("canonical") == "typeid"


def test_contract_members() -> None:
    assert SCHEME.title.startswith("TypeID")
    assert SCHEME.canonical(SCHEME.parse(SCHEME.example)) == SCHEME.example
    assert set(SCHEME.captions) == set(SCHEME.fields(SCHEME.parse(SCHEME.example)))
    assert SCHEME.shares_generator_with == "uuidv7"
    assert SCHEME.token_pattern is not None and re.fullmatch(SCHEME.token_pattern, SCHEME.example)
    (option,) = SCHEME.options
    assert (option.name, option.kwarg, option.choices) == ("type", "prefix", ())
    assert SCHEME.parse_option("type", "user_account") == "user_account"
    assert SCHEME.parse_option("type", "") == ""
    with pytest.raises(InvalidOptionError, match="type: TypeID prefix must not end with '_'"):
        SCHEME.parse_option("type", "user_")
    with pytest.raises(InvalidOptionError, match="takes only the option 'type'"):
        SCHEME.parse_option("mode", "x")
    generator = SCHEME.new_generator(None, [], 5, FakeClock(3), random=os.urandom)
    assert isinstance(generator, TypeIdGenerator) and generator.high_water == 5
    shared = Uuidv7Generator(clock=FakeClock(NOW_MS))
    assert SCHEME.generator_around(shared).uuids is shared
    with pytest.raises(TypeError, match="shares a uuidv7 generator"):
        SCHEME.generator_around(object())


# --- the spec's vectors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", VALID, ids=[case["name"] for case in VALID])
def test_valid_vectors_both_ways(case: dict[str, str]) -> None:
    value = SCHEME.parse(case["typeid"])
    assert isinstance(value, TypeId) and value.prefix == case["prefix"]
    assert value == uuid.UUID(case["uuid"]).int
    fields = SCHEME.fields(value)
    assert fields["prefix"] == case["prefix"] and fields["uuid"] == case["uuid"]
    assert SCHEME.canonical(value) == case["typeid"]
    assert typeid.encode_typeid(uuid.UUID(case["uuid"]).int, case["prefix"]) == case["typeid"]
    assert SCHEME.format(value, "uuid") == case["uuid"]


@pytest.mark.parametrize("case", INVALID, ids=[case["name"] for case in INVALID])
def test_invalid_vectors_are_refused(case: dict[str, str]) -> None:
    with pytest.raises(InvalidIdError, match="TypeID"):
        SCHEME.parse(case["typeid"])


def test_uuidv7_vector_fields() -> None:
    value = SCHEME.parse("prefix_01h455vb4pex5vsknk084sn02q")
    assert SCHEME.fields(value) == {
        "prefix": "prefix",
        "uuid": "01890a5d-ac96-774b-bcce-b302099a8057",
        "version": 7,
        "timestamp_ms": NOW_MS,
    }
    assert SCHEME.timestamp_ns(value) == NOW_MS * MS
    assert f"{value:032x}" == "01890a5dac96774bbcceb302099a8057"  # the decode object's hex: the UUID's digits


def test_other_uuid_versions_decode_without_a_timestamp() -> None:
    value = SCHEME.parse("prefix_0123456789abcdefghjkmnpqrs")  # the spec's valid-alphabet vector: a UUIDv5
    assert SCHEME.fields(value) == {
        "prefix": "prefix",
        "uuid": "0110c853-1d09-52d8-d73e-1194e95b5f19",
        "version": 5,
        "timestamp_ms": None,
    }
    assert SCHEME.timestamp_ns(value) is None


# --- rejected inputs: one row per rule --------------------------------------------------------------------------

SUFFIX = "01h455vb4pex5vsknk084sn02q"
ALPHABET_RULE = (
    r"TypeID suffix must use the lowercase base32 alphabet 0123456789abcdefghjkmnpqrstvwxyz "
    r"\(no uppercase, no substitutions\)"
)
REJECTED = [
    ("", "TypeID must not be empty"),
    ("_" + SUFFIX, "TypeID with an empty prefix must omit the '_' separator"),
    ("User_" + SUFFIX, "TypeID prefix must contain only lowercase ASCII letters a-z and '_', got 'U' at position 0"),
    ("us3r_" + SUFFIX, "got '3' at position 2"),
    ("us-er_" + SUFFIX, "got '-' at position 2"),
    ("us\u00e9r_" + SUFFIX, "got '\u00e9' at position 2"),
    ("a" * 64 + "_" + SUFFIX, "TypeID prefix must be at most 63 characters, got 64"),
    ("_user_" + SUFFIX, "TypeID prefix must not start with '_'"),
    ("user__" + SUFFIX, "TypeID prefix must not end with '_'"),
    ("user_" + SUFFIX[:-1], "TypeID suffix must be exactly 26 characters long, got 25"),
    ("user_" + SUFFIX + "0", "got 27"),
    ("user_", "got 0"),
    ("user_" + SUFFIX.upper(), ALPHABET_RULE + ", got 'H' at position 2"),
    ("user_" + SUFFIX[:-1] + "i", ALPHABET_RULE + ", got 'i' at position 25"),
    ("user_" + SUFFIX[:-1] + "l", ALPHABET_RULE + ", got 'l'"),
    ("user_" + SUFFIX[:-1] + "o", ALPHABET_RULE + ", got 'o'"),
    ("user_" + SUFFIX[:-1] + "u", ALPHABET_RULE + ", got 'u'"),
    ("user_" + SUFFIX[:-1] + "\u0663", ALPHABET_RULE),
    ("user_8" + SUFFIX[1:], r"TypeID suffix overflow: the first character must be 0..7 .* got '8'"),
    ("01890a5d-ac96-774b-bcce-b302099a8057", "TypeID suffix must be exactly 26 characters long, got 36"),
    ("user_" + SUFFIX + " ", "got 27"),
]


@pytest.mark.parametrize(("text", "rule"), REJECTED)
def test_rejected_inputs_name_the_rule(text: str, rule: str) -> None:
    with pytest.raises(InvalidIdError, match=rule):
        SCHEME.parse(text)


# --- codec pairs over the full ranges -----------------------------------------------------------------------------


@given(VALUES, PREFIXES)
def test_text_round_trips(value: int, prefix: str) -> None:
    text = typeid.encode_typeid(value, prefix)
    parsed = SCHEME.parse(text)
    assert parsed == value and parsed.prefix == prefix
    assert SCHEME.canonical(parsed) == text
    assert SCHEME.format(parsed, "uuid") == str(uuid.UUID(int=value))
    assert SCHEME.fields(parsed)["version"] == (value >> 76) & 0xF


def test_plain_int_values_format_without_a_prefix() -> None:
    value = uuid.UUID("01890a5d-ac96-774b-bcce-b302099a8057").int
    assert SCHEME.canonical(value) == SUFFIX
    assert SCHEME.fields(value)["prefix"] == ""
    with pytest.raises(ValueError, match="must not start with '_'"):
        typeid.encode_typeid(value, "_x")


# --- peer library: typeid-python ----------------------------------------------------------------------------------


def test_typeid_python_ids_parse_to_their_fields() -> None:
    for prefix in ("", "user", "my_type", "a" * 63):
        for _ in range(20):
            theirs = typeid_python.TypeID(prefix=prefix or None)
            value = SCHEME.parse(str(theirs))
            their_uuid = uuid.UUID(str(theirs.uuid))
            assert value == their_uuid.int and value.prefix == (theirs.prefix or "")
            fields = SCHEME.fields(value)
            assert fields["uuid"] == str(their_uuid) and fields["version"] == 7
            assert fields["timestamp_ms"] == their_uuid.int >> 80


def test_ids_issued_here_are_accepted_by_typeid_python_with_the_same_timestamp() -> None:
    generator = TypeIdGenerator(Uuidv7Generator())
    for prefix in ("", "user", "a_b_c"):
        batch = generator.generate(100, prefix=prefix)
        for line, value in zip(batch.encode("typeid").decode().splitlines(), batch.values()):
            theirs = typeid_python.TypeID.from_string(line)
            assert (theirs.prefix or "") == prefix
            assert uuid.UUID(str(theirs.uuid)).int == value
            assert uuid.UUID(str(theirs.uuid)).int >> 80 == SCHEME.fields(SCHEME.parse(line))["timestamp_ms"]


# --- batches: column-wise text equals the scalar text ---------------------------------------------------------------


def scalar_text(batch: TypeIdBatch, fmt: str) -> bytes:
    values = [TypeId(value, batch.prefix) for value in batch.values()]
    return "".join(SCHEME.format(value, fmt) + "\n" for value in values).encode()


def assert_json_members(batch: TypeIdBatch, fmt: str) -> None:
    """The batch's own JSON members are the scalar texts as ``json.dumps`` writes them (None up to the scalar
    path's count: the caller frames the lines)."""
    members = batch.json_members(fmt)
    if batch.count <= typeid.SCALAR_COUNT_MAX:
        assert members is None
        return
    assert members is not None
    lines = scalar_text(batch, fmt).decode().splitlines()
    assert bytes(members) == json.dumps(lines, separators=(",", ":"))[1:-1].encode()
    text = batch.encode_lines(fmt)  # the stream's form: the same bytes, in a fresh bytearray
    assert isinstance(text, bytearray) and text == scalar_text(batch, fmt)


@pytest.mark.parametrize("prefix", ["", "user", "a" * 63])
@pytest.mark.parametrize("count", [1, 8, 9, 1000, 65536])
def test_batch_encode_equals_scalar_format(count: int, prefix: str) -> None:
    batch = make(seed=count).generate(count, prefix=prefix)
    for fmt in SCHEME.formats:
        assert batch.encode(fmt) == scalar_text(batch, fmt)
        assert_json_members(batch, fmt)
    width = 26 + (len(prefix) + 1 if prefix else 0)
    assert len(batch.encode("typeid")) == count * (width + 1)


def test_empty_batch_encodes_to_nothing() -> None:
    batch = TypeIdBatch(uuidv7.Uuidv7Batch((), b""), "user")
    assert batch.count == 0 and batch.values() == [] and batch.high_water == -1
    for fmt in SCHEME.formats:
        assert batch.encode(fmt) == b""


def test_batch_across_a_counter_overflow() -> None:
    generator = make()
    generator.generate(1)
    generator.uuids._counter = uuidv7.COUNTER_MAX - 30_000
    batch = generator.generate(70_000, prefix="order")
    assert len(batch.uuids.segments) == 2
    for fmt in SCHEME.formats:
        assert batch.encode(fmt) == scalar_text(batch, fmt)
        assert_json_members(batch, fmt)


# Tails whose bits are all set, all clear, or cycle through every byte: character 19 (counter bits 2..0 and tail
# bits 31..30) and the two triples of the tail word take their end values.
EXTREME_TAILS = [b"\xff" * 4000, b"\x00" * 4000, bytes(range(256)) * 16, b"\xc0\x00\x7f\xff" * 1000]


@pytest.mark.parametrize("tails", EXTREME_TAILS, ids=["ones", "zeros", "every-byte", "edges"])
@pytest.mark.parametrize(
    "first",
    [0, 5, (1 << typeid.COUNTER_RUN_BITS) - 500, (1 << typeid.COUNTER_RUN_BITS) - 3, uuidv7.COUNTER_MAX - 999],
)
@pytest.mark.parametrize("prefix", ["", "x", "a_b", "a" * 63])
def test_tail_word_at_counter_runs_and_extreme_tails(first: int, tails: bytes, prefix: str) -> None:
    # 1000 IDs from counter `first` (inside one 2**18 run, or across into the next, or up to the counter's end)
    batch = TypeIdBatch(uuidv7.Uuidv7Batch((Run(1_700_000_000_000, first, 1000),), tails), prefix)
    for fmt in SCHEME.formats:
        assert batch.encode(fmt) == scalar_text(batch, fmt)
        assert_json_members(batch, fmt)


def test_batch_across_milliseconds_and_a_clock_rollback() -> None:
    # One batch made of three issued in turn: at a millisecond, at the next, then after the clock stepped back (the
    # last millisecond kept, the counter continuing): its runs cross a millisecond and carry on after the rollback.
    clock = FakeClock(NOW_MS)
    generator = make(clock)
    parts = [generator.generate(3000, prefix="job")]
    clock.ns += MS
    parts.append(generator.generate(3000, prefix="job"))
    clock.ns -= 7 * MS
    parts.append(generator.generate(3000, prefix="job"))
    assert [part.uuids.segments[0].tick for part in parts] == [NOW_MS, NOW_MS + 1, NOW_MS + 1]
    segments = tuple(seg for part in parts for seg in part.uuids.segments)
    tails = b"".join(part.uuids.tails[: 4 * part.count] for part in parts)
    batch = TypeIdBatch(uuidv7.Uuidv7Batch(segments, tails), "job")
    for fmt in SCHEME.formats:
        assert batch.encode(fmt) == scalar_text(batch, fmt)
        assert_json_members(batch, fmt)
    lines = batch.encode("typeid").decode().splitlines()
    assert lines == sorted(lines) and len(set(lines)) == len(lines)


# --- the generator (a wrapper around uuidv7's) ----------------------------------------------------------------------


def test_typeid_and_uuidv7_share_one_monotonic_sequence() -> None:
    shared = Uuidv7Generator(clock=FakeClock(NOW_MS), rng=stdlib_random.Random(1).randbytes)
    typeids = SCHEME.generator_around(shared)
    values: list[int] = []
    for _ in range(50):
        values += shared.generate(7).values()
        values += typeids.generate(5, prefix="user").values()
    assert values == sorted(values) and len(set(values)) == len(values)
    assert typeids.stats is shared.stats and typeids.high_water == shared.high_water


def test_monotonic_over_a_million_ids_with_overflow_and_rollback() -> None:
    clock = FakeClock(NOW_MS)
    generator = make(clock)
    previous, seen, issued = -1, set(), 0
    for step in range(100):
        if step == 30:
            generator.uuids._counter = uuidv7.COUNTER_MAX - 4321
        if step % 25 == 24:
            clock.ns -= 5 * MS
        elif step % 2 == 0:
            clock.ns += MS
        batch = generator.generate(10_000, prefix="job")
        values = batch.values()
        issued += len(values)
        assert values[0] > previous and all(a < b for a, b in zip(values, values[1:]))
        previous = values[-1]
        seen.update(values)
    assert issued == 1_000_000 and len(seen) == issued
    assert generator.stats.sequence_exhausted == 1 and generator.stats.clock_rollbacks >= 3
    lines = batch.encode("typeid").decode().splitlines()
    assert lines == sorted(lines)  # same prefix: text order is issue order


def test_no_prefix_is_the_bare_suffix() -> None:
    generator = make()
    for prefix in ("", None):
        (line,) = generator.generate(1, prefix=prefix).encode("typeid").decode().splitlines()
        assert len(line) == 26 and SCHEME.parse(line).prefix == ""


def test_floor_is_the_uuidv7_floor() -> None:
    generator = make(FakeClock(NOW_MS), floor=NOW_MS + 3)
    assert {v >> 80 for v in generator.generate(10).values()} == {NOW_MS + 4}


@pytest.mark.parametrize(
    ("options", "rule"),
    [
        ({"prefix": "User"}, "type: TypeID prefix must contain only lowercase ASCII letters"),
        ({"prefix": "_user"}, "type: TypeID prefix must not start with '_'"),
        ({"prefix": "a" * 64}, "type: TypeID prefix must be at most 63 characters"),
        ({"prefix": 5}, "type must be a string"),
        ({"mode": "x"}, "typeid takes only the option 'type', got mode"),
    ],
)
def test_generate_refuses_bad_options(options: dict[str, Any], rule: str) -> None:
    with pytest.raises(InvalidOptionError, match=rule):
        make().generate(1, **options)


def test_generate_refuses_a_bad_count() -> None:
    with pytest.raises(InvalidOptionError, match="count must be in 1..16777216 for typeid"):
        make().generate(0)
