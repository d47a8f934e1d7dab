"""Tests of app/schemes/ksuid/ against docs/schemes/ksuid.md, segmentio/ksuid's README and
tests (vectors), and svix-ksuid (peer interop)."""

from __future__ import annotations

import datetime
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ksuid import Ksuid  # svix-ksuid

from app.errors import InvalidIdError, InvalidOptionError
from app.schemes import ksuid
from app.schemes.base import Batch, Generator, Scheme
from app.schemes.ksuid import SCHEME, KsuidBatch, KsuidGenerator
from app.schemes.ksuid import generator as ksuid_batch
from tests.helpers import FakeClock, assert_json_members

S = 1_000_000_000  # ns per s
NOW_S = 1_763_888_400  # 2025-11-23T09:00:00Z
packed = st.integers(min_value=0, max_value=ksuid.PACKED_MAX)
timestamps = st.integers(min_value=ksuid.TIMESTAMP_S_MIN, max_value=ksuid.TIMESTAMP_S_MAX)
payloads = st.integers(min_value=0, max_value=ksuid.PAYLOAD_MAX)


def fixed_random(payload: int):
    """A random source returning ``payload`` as 16 bytes every time."""
    return lambda n: payload.to_bytes(n, "big")


# --- vectors (segmentio/ksuid README "Inspect the components of a KSUID" and ksuid_test.go) -------------------

VECTORS = [
    # (base62, raw hex, stored timestamp, payload) -- README's `ksuid -f inspect` and template examples
    (
        "0ujtsYcgvSTl8PAuAdqWYSMnLOv",
        "0669F7EFB5A1CD34B5F99D1154FB6853345C9735",
        107608047,
        "B5A1CD34B5F99D1154FB6853345C9735",
    ),
    (
        "0ujzPyRiIAffKhBux4PvQdDqMHY",
        "066A029C73FC1AA3B2446246D6E89FCD909E8FE8",
        107610780,
        "73FC1AA3B2446246D6E89FCD909E8FE8",
    ),
    ("0uk1Hbc9dQ9pxyTqJ93IUrfhdGq", None, 107611700, "9850EEEC191BF4FF26F99315CE43B0C8"),
    ("0uk1HdCJ6hUZKDgcxhpJwUl5ZEI", None, 107611700, "CC55072555316F45B8CA2D2979D3ED0A"),
    ("0uk1HcdvF0p8C20KtTfdRSB9XIm", None, 107611700, "BA1C205D6177F0992D15EE606AE32238"),
    ("0uk1Ha7hGJ1Q9Xbnkt0yZgNwg3g", None, 107611700, "67517BA309EA62AE7991B27BB6F2FCAC"),
    # ksuid_test.go: Nil (all zero bytes) and Max (all 0xff bytes)
    ("0" * 27, "00" * 20, 0, "00" * 16),
    ("aWgEPTl1tmebfsQzFP4bxwgy80V", "FF" * 20, 2**32 - 1, "FF" * 16),
]


@pytest.mark.parametrize(("text", "raw", "stored", "payload"), VECTORS)
def test_vectors(text: str, raw: str | None, stored: int, payload: str) -> None:
    value = SCHEME.parse(text)
    assert SCHEME.fields(value) == {"timestamp_s": stored + ksuid.EPOCH_S, "payload": payload.lower()}
    assert SCHEME.canonical(value) == text
    assert ksuid.pack(stored + ksuid.EPOCH_S, int(payload, 16)) == value
    if raw is not None:
        assert ksuid.to_bytes(value).hex() == raw.lower()
        assert SCHEME.format(value, "hex") == raw.lower()
        assert SCHEME.parse(raw) == SCHEME.parse(raw.lower()) == value


def test_readme_example_time() -> None:
    """README: 0ujtsYcgvSTl8PAuAdqWYSMnLOv was made at 2017-10-09 21:00:47 -0700 PDT."""
    value = SCHEME.parse("0ujtsYcgvSTl8PAuAdqWYSMnLOv")
    pdt = datetime.timezone(datetime.timedelta(hours=-7))
    made = datetime.datetime(2017, 10, 9, 21, 0, 47, tzinfo=pdt)
    assert SCHEME.timestamp_ns(value) == int(made.timestamp()) * S


def test_append_vectors_round_trip() -> None:
    """ksuid_test.go TestAppend: both strings parse and print back unchanged."""
    for text in ("0pN1Own7255s7jwpwy495bAZeEa", "aWgEPTl1tmebfsQzFP4bxwgy80V"):
        assert SCHEME.canonical(SCHEME.parse(text)) == text


def test_scheme_metadata_and_contract_members() -> None:
    assert isinstance(SCHEME, Scheme)
    assert SCHEME.name == "ksuid"
    assert SCHEME.formats == ("base62", "hex")
    assert SCHEME.text_width == {"base62": 27, "hex": 40}
    assert SCHEME.resolve_format("canonical") == "base62"
    example = SCHEME.parse(SCHEME.example)
    assert set(SCHEME.captions) == set(SCHEME.fields(example))
    assert SCHEME.token_pattern is not None
    found = re.findall(SCHEME.token_pattern, f"user {SCHEME.example} logged in, raw {'ab' * 20}.")
    assert found == [SCHEME.example, "ab" * 20]
    assert SCHEME.identity_pool(object()) is None
    assert SCHEME.configured(object()) is SCHEME
    assert SCHEME.with_decode_options() is SCHEME
    with pytest.raises(InvalidOptionError, match="ksuid takes no decode options, got layout"):
        SCHEME.with_decode_options(layout="twitter")
    generator = SCHEME.new_generator(object(), [], -1, FakeClock.from_s(NOW_S), fixed_random(5))
    assert isinstance(generator, Generator)
    assert SCHEME.fields(generator.generate(1).values()[0]) == {"timestamp_s": NOW_S, "payload": f"{5:032x}"}
    with pytest.raises(InvalidOptionError, match="format must be one of canonical, base62, hex for ksuid"):
        SCHEME.format(0, "uuid")


# --- round trips over the full range -----------------------------------------------------------------------------


@given(timestamps, payloads)
def test_pack_unpack_round_trip(timestamp_s: int, payload: int) -> None:
    assert ksuid.unpack(ksuid.pack(timestamp_s, payload)) == (timestamp_s, payload)


@given(packed)
def test_text_and_bytes_round_trip(value: int) -> None:
    text = ksuid.encode_base62(value)
    assert len(text) == 27 and SCHEME.parse(text) == value
    hex_text = ksuid.encode_hex(value)
    assert len(hex_text) == 40 and SCHEME.parse(hex_text) == SCHEME.parse(hex_text.upper()) == value
    assert ksuid.from_bytes(ksuid.to_bytes(value)) == value


@given(packed)
def test_base62_is_27_divisions_by_62(value: int) -> None:
    """The pair-table encoder against the reference's digit-by-digit division (``base62.go``)."""
    digits, rest = [], value
    for _ in range(27):
        rest, digit = divmod(rest, 62)
        digits.append("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"[digit])
    assert ksuid.encode_base62(value) == "".join(reversed(digits))


@given(packed, packed)
def test_text_order_is_packed_order(a: int, b: int) -> None:
    assert (ksuid.encode_base62(a) < ksuid.encode_base62(b)) == (a < b)


@settings(max_examples=50)
@given(st.lists(packed, max_size=300))
def test_general_column_encoders_equal_scalar(values: list[int]) -> None:
    columns = ksuid_batch.limbs(values)
    assert ksuid_batch.base62_rows(columns).tobytes() == "".join(ksuid.encode_base62(v) + "\n" for v in values).encode()
    assert ksuid_batch.hex_rows(columns).tobytes() == "".join(ksuid.encode_hex(v) + "\n" for v in values).encode()


# --- rejected inputs ---------------------------------------------------------------------------------------------

REJECTS = [
    ("", "KSUID must be 27 base62 characters or 40 hex digits, got 0 characters"),
    ("123", "KSUID must be 27 base62 characters or 40 hex digits, got 3 characters"),
    ("0ujtsYcgvSTl8PAuAdqWYSMnLOvX", "got 28 characters"),
    ("aaaaaaaaaaaaaaaaaaaaaaaaaaa", "KSUID base62 overflows 160 bits: the largest is aWgEPTl1tmebfsQzFP4bxwgy80V"),
    ("aWgEPTl1tmebfsQzFP4bxwgy80W", "KSUID base62 overflows 160 bits"),  # the largest + 1
    ("zzzzzzzzzzzzzzzzzzzzzzzzzzz", "KSUID base62 overflows 160 bits"),
    (
        "aWgEPTl1tmebfsQzFP4bxwgy80!",
        "KSUID base62 must contain only 0-9 A-Z a-z (case-sensitive), got '!' at position 26",
    ),
    ("0" + "?" * 26, "got '?' at position 1"),
    ("0ujtsYcgvSTl8PAuAdqWYSMnLO-", "got '-' at position 26"),
    ("0ujtsYcgvSTl8PAuAdqWYSMnLO\u0661", "got '\u0661' at position 26"),  # an Arabic-Indic digit one
    ("0ujtsYcgvSTl8PAuAdqWYSMnLO\u00e9", "got '\u00e9' at position 26"),
    (
        "0669F7EFB5A1CD34B5F99D1154FB6853345C973G",
        "KSUID hex must contain only hex digits 0-9 a-f, got 'G' at position 39",
    ),
    ("0669f7efb5a1cd34b5f99d1154fb6853345c973", "KSUID must be 27 base62 characters or 40 hex digits, got 39"),
]


@pytest.mark.parametrize(("text", "message"), REJECTS)
def test_rejects(text: str, message: str) -> None:
    with pytest.raises(InvalidIdError, match=re.escape(message)):
        SCHEME.parse(text)


def test_codec_rejects_bad_fields() -> None:
    with pytest.raises(ValueError, match=r"KSUID timestamp_s must be in 1400000000\.\.5694967295, got 1399999999"):
        ksuid.pack(ksuid.EPOCH_S - 1, 0)
    with pytest.raises(ValueError, match=r"KSUID payload must be in 0\.\.2\*\*128-1"):
        ksuid.pack(ksuid.EPOCH_S, 1 << 128)
    with pytest.raises(ValueError, match=r"a packed KSUID must be in 0\.\.2\*\*160-1"):
        ksuid.encode_base62(1 << 160)
    with pytest.raises(ValueError, match="a KSUID has to be exactly 20 bytes long, got 19"):
        ksuid.from_bytes(b"\0" * 19)


# --- peer interop: svix-ksuid ------------------------------------------------------------------------------------


def test_peer_ids_decode_here() -> None:
    for _ in range(200):
        peer = Ksuid()
        value = SCHEME.parse(str(peer))
        assert SCHEME.fields(value) == {"timestamp_s": int(peer.timestamp), "payload": peer.payload.hex()}
        assert ksuid.to_bytes(value) == bytes(peer)
        assert SCHEME.parse(bytes(peer).hex()) == value


def test_peer_made_with_time_and_payload_decodes_here() -> None:
    made = datetime.datetime(2025, 11, 23, 9, 0, 0, tzinfo=datetime.UTC)
    peer = Ksuid(datetime=made, payload=bytes(range(16)))
    assert SCHEME.fields(SCHEME.parse(str(peer))) == {
        "timestamp_s": int(made.timestamp()),
        "payload": bytes(range(16)).hex(),
    }


def test_ids_issued_here_are_accepted_by_the_peer() -> None:
    generator = KsuidGenerator(clock=FakeClock.from_s(NOW_S))
    batch = generator.generate(1000)
    for value, text in zip(batch.values(), batch.encode("base62").decode().split()):
        peer = Ksuid.from_base62(text)
        assert bytes(peer) == ksuid.to_bytes(value)
        assert peer.timestamp == NOW_S
        assert str(peer) == text


@given(packed)
def test_peer_text_equals_ours(value: int) -> None:
    assert str(Ksuid.from_bytes(ksuid.to_bytes(value))) == ksuid.encode_base62(value)


# --- generator ---------------------------------------------------------------------------------------------------


def test_new_second_draws_a_fresh_payload_same_second_adds_one() -> None:
    clock = FakeClock.from_s(NOW_S)
    draws = iter([7, 1000])
    generator = KsuidGenerator(clock=clock, random=lambda n: next(draws).to_bytes(n, "big"))
    assert [ksuid.unpack(v) for v in generator.generate(3).values()] == [(NOW_S, 7), (NOW_S, 8), (NOW_S, 9)]
    clock.set_s(NOW_S + 0.9)
    assert [ksuid.unpack(v) for v in generator.generate(1).values()] == [(NOW_S, 10)]
    clock.set_s(NOW_S + 1)
    assert [ksuid.unpack(v) for v in generator.generate(2).values()] == [(NOW_S + 1, 1000), (NOW_S + 1, 1001)]
    assert generator.high_water == NOW_S + 1


def test_clock_rollback_keeps_the_last_second() -> None:
    clock = FakeClock.from_s(NOW_S)
    generator = KsuidGenerator(clock=clock, random=fixed_random(50))
    generator.generate(2)
    clock.set_s(NOW_S - 30)
    assert [ksuid.unpack(v) for v in generator.generate(2).values()] == [(NOW_S, 52), (NOW_S, 53)]
    assert generator.stats.clock_rollbacks == 1
    assert generator.stats.max_rollback_ns == 30 * S
    assert generator.high_water == NOW_S


def test_payload_overflow_advances_the_second_and_never_fails() -> None:
    clock = FakeClock.from_s(NOW_S)
    generator = KsuidGenerator(clock=clock, random=fixed_random(ksuid.PAYLOAD_MAX - 1))
    values = generator.generate(4).values()
    assert [ksuid.unpack(v) for v in values] == [
        (NOW_S, ksuid.PAYLOAD_MAX - 1),
        (NOW_S, ksuid.PAYLOAD_MAX),
        (NOW_S + 1, 0),
        (NOW_S + 1, 1),
    ]
    assert generator.stats.sequence_exhausted == 1
    assert generator.high_water == NOW_S + 1
    clock.set_s(NOW_S + 1)  # now the same second as the carried one: +1 continues
    assert ksuid.unpack(generator.generate(1).values()[0]) == (NOW_S + 1, 2)


def test_floor_is_respected() -> None:
    clock = FakeClock.from_s(NOW_S)
    generator = KsuidGenerator(clock=clock, floor=NOW_S + 2)
    batch = generator.generate(5)
    assert batch.count == 0 and batch.encode("base62") == b"" and batch.high_water == -1
    assert generator.wait_ns() == 3 * S
    assert generator.high_water == NOW_S + 2
    clock.set_s(NOW_S + 3)
    assert generator.wait_ns() == 0
    assert {ksuid.unpack(v)[0] for v in generator.generate(5).values()} == {NOW_S + 3}
    assert generator.wait_ns() == 0


def test_timestamp_limits() -> None:
    with pytest.raises(OverflowError, match="before the KSUID epoch"):
        KsuidGenerator(clock=FakeClock.from_s(ksuid.EPOCH_S - 1)).generate(1)
    with pytest.raises(OverflowError, match="KSUID timestamp would pass 5694967295 s"):
        KsuidGenerator(clock=FakeClock.from_s(ksuid.TIMESTAMP_S_MAX + 1)).generate(1)
    last = KsuidGenerator(clock=FakeClock.from_s(ksuid.TIMESTAMP_S_MAX), random=fixed_random(ksuid.PAYLOAD_MAX - 1))
    assert last.generate(2).values()[-1] == ksuid.PACKED_MAX
    with pytest.raises(OverflowError):
        last.generate(1)


@pytest.mark.parametrize(
    ("count", "options", "message"),
    [
        (0, {}, "count must be in 1..16777216 for ksuid, got 0"),
        (True, {}, "count must be in 1..16777216 for ksuid, got True"),
        (1 << 25, {}, "count must be in 1..16777216"),
        (1, {"mode": "spread"}, "ksuid takes no options, got mode"),
    ],
)
def test_generate_arguments_validated(count: int, options: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidOptionError, match=re.escape(message)):
        KsuidGenerator(clock=FakeClock.from_s(NOW_S)).generate(count, **options)


def test_generator_configuration_validated() -> None:
    with pytest.raises(ValueError, match="floor must be -1 or in"):
        KsuidGenerator(floor=5)
    with pytest.raises(ValueError, match="random returned 3 bytes, asked for 16"):
        KsuidGenerator(clock=FakeClock.from_s(NOW_S), random=lambda n: b"abc").generate(1)


def test_a_million_ids_monotonic_with_overflow_and_rollback_no_duplicate() -> None:
    clock = FakeClock.from_s(NOW_S)
    draws = iter([ksuid.PAYLOAD_MAX - 300_000, 5, ksuid.PAYLOAD_MAX - 10])
    generator = KsuidGenerator(clock=clock, random=lambda n: next(draws).to_bytes(n, "big"))
    issued: list[int] = []
    steps = [0, 0, 0, -5, -5, 2, 0, -1, 0, 1, 1, 1, -10] * 3 + [4, 0]
    per_batch = 1_000_000 // len(steps) + 1
    for step in steps:
        clock.ns += step * S // 2
        issued.extend(generator.generate(per_batch).values())
    assert len(issued) >= 1_000_000
    assert all(a < b for a, b in zip(issued, issued[1:]))
    assert generator.stats.clock_rollbacks > 0 and generator.stats.sequence_exhausted >= 1


# --- batches -----------------------------------------------------------------------------------------------------

FIRSTS = [
    0,
    ksuid.pack(NOW_S, 12345),
    ksuid.pack(NOW_S, ksuid.PAYLOAD_MAX - 4),  # carries into the next second
    ksuid.pack(NOW_S, (1 << 64) - 3),  # carries across the low 64 bits (hex heads)
    ksuid_batch.TAIL_RADIX * 1000 - 2,  # crosses a 62**3 run boundary at once
    ksuid.PACKED_MAX - 65535,  # ends at the largest KSUID
]


@pytest.mark.parametrize("size", [0, 1, 8, 9, 1000, 65536])
@pytest.mark.parametrize("first", FIRSTS)
def test_batch_encode_equals_scalar_format(first: int, size: int) -> None:
    batch = KsuidBatch(first, size)
    assert isinstance(batch, Batch) and batch.count == size
    assert batch.values() == list(range(first, first + size))
    for fmt in ("base62", "hex", "canonical"):
        expected = "".join(SCHEME.format(value, fmt) + "\n" for value in batch.values()).encode("ascii")
        assert batch.encode(fmt) == expected
        assert_json_members(batch, SCHEME, fmt, ksuid_batch.SCALAR_COUNT_MAX)


def test_batch_rejects_unknown_format() -> None:
    with pytest.raises(InvalidOptionError, match="format must be one of canonical, base62, hex for ksuid"):
        KsuidBatch(0, 10).encode("decimal")
