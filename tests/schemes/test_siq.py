"""Tests for app.schemes.siq (docs/schemes/siq.md; reference yusurko/suou iding.py)."""

from __future__ import annotations

import base64
import re
import threading
import time
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.errors import InvalidIdError, InvalidOptionError
from app.schemes import siq
from app.schemes.base import Batch, Generator, Run
from app.schemes.siq import (
    QUALIFIERS,
    SCHEME,
    TICK_MAX,
    SiqBatch,
    SiqGenerator,
    decode_did,
    decode_low,
    domain_hash,
    encode_did,
    encode_low,
    from_bytes,
    from_storage,
    pack,
    qualifier_name,
    qualifier_width,
    to_bytes,
    to_storage,
    unpack,
)
from app.settings import Settings
from tests.helpers import FakeClock

NS = 1_000_000_000
TICKS = 65536
NEW_YEAR_2025 = 1_735_689_600  # 2025-01-01T00:00:00Z
EXAMPLE_COM_HASH = 2_261_653_831
VECTOR_USER_0 = 8196562391705423471646507204608
VECTOR_USER_0_DID = "did:siq:gm24tg4ago5efqaaaab4gzymuoaaa"
VECTOR_USER_1_DID = "did:siq:f2bnt74ago5efqaaaab4gzymuoaba"
REFERENCE_TEST_INT = 7451106619238957490390643507207
REFERENCE_TEST_DID = "did:siq:iuxvojaaf4c6s6aaaaaaaaaaaaaah"
USER = QUALIFIERS["user"][0]
VALID_CODES = sorted([code for code, _width in QUALIFIERS.values()] + [50, 58, 60])
MAX_VALUE = (1 << 112) - 1


def reference_did(value: int) -> str:
    """The reference ``Siq.to_did``, written out from the spec: crc32 in a 6-byte field, base32, drop 3 chars."""
    packed = value.to_bytes(14, "big")
    block = zlib.crc32(packed).to_bytes(6, "big") + packed
    return "did:siq:" + base64.b32encode(block).decode().lower()[3:]


def expected_text(batch: Batch, fmt: str) -> bytes:
    return "".join(SCHEME.format(value, fmt) + "\n" for value in batch.values()).encode("ascii")


# --- spec vectors -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("domain", "expected"),
    [("example.com", EXAMPLE_COM_HASH), ("example.com", 0x86CE1947), ("", 0), ("0", 0)],
)
def test_domain_hash_vectors(domain: str, expected: int) -> None:
    assert domain_hash(domain) == expected


def test_domain_hash_rejects_non_ascii() -> None:
    with pytest.raises(ValueError, match="ASCII"):
        domain_hash("bücher.example")


@pytest.mark.parametrize(
    ("counter", "value", "did"),
    [
        (0, VECTOR_USER_0, VECTOR_USER_0_DID),
        (1, VECTOR_USER_0 | 1 << 5, VECTOR_USER_1_DID),
    ],
)
def test_new_year_2025_vectors(counter: int, value: int, did: str) -> None:
    packed = pack(NEW_YEAR_2025 * TICKS, 7, domain_hash("example.com"), counter, USER)
    assert packed == value
    assert SCHEME.format(packed, "did") == did
    assert SCHEME.canonical(packed) == did
    assert SCHEME.parse(did) == value
    assert SCHEME.fields(value) == {
        "seconds": NEW_YEAR_2025,
        "fraction": 0,
        "shard": 7,
        "domain_hash": EXAMPLE_COM_HASH,
        "serial": counter,
        "qualifier": "user",
    }
    assert SCHEME.timestamp_ns(value) == NEW_YEAR_2025 * NS


def test_reference_test_vector() -> None:
    assert SCHEME.format(REFERENCE_TEST_INT, "did") == REFERENCE_TEST_DID
    assert SCHEME.parse(REFERENCE_TEST_DID) == REFERENCE_TEST_INT
    assert SCHEME.fields(REFERENCE_TEST_INT)["qualifier"] == "content"


def test_generator_reproduces_the_2025_vectors() -> None:
    generator = SiqGenerator(7, "example.com", clock=FakeClock.from_ns(NEW_YEAR_2025 * NS))
    batch = generator.generate(2)
    assert batch.values() == [VECTOR_USER_0, VECTOR_USER_0 | 1 << 5]
    assert batch.encode("did") == f"{VECTOR_USER_0_DID}\n{VECTOR_USER_1_DID}\n".encode()
    assert batch.encode("canonical") == batch.encode("did")


def test_vector_hex_and_decimal_forms() -> None:
    assert SCHEME.format(VECTOR_USER_0, "hex") == "006774858000000786ce19470000"
    assert SCHEME.format(VECTOR_USER_0, "decimal") == str(VECTOR_USER_0)
    assert SCHEME.parse("006774858000000786CE19470000") == VECTOR_USER_0
    assert SCHEME.parse(str(VECTOR_USER_0)) == VECTOR_USER_0
    assert SCHEME.parse(VECTOR_USER_0_DID.upper()) == VECTOR_USER_0


def test_storage_form_is_left_padded() -> None:
    assert to_storage(VECTOR_USER_0) == b"\0\0" + to_bytes(VECTOR_USER_0)
    assert from_storage(to_storage(VECTOR_USER_0)) == VECTOR_USER_0
    with pytest.raises(ValueError, match="16 bytes"):
        from_storage(to_bytes(VECTOR_USER_0))
    with pytest.raises(ValueError, match="zero bytes"):
        from_storage(b"\0\1" + to_bytes(VECTOR_USER_0))
    with pytest.raises(ValueError, match="14 bytes"):
        from_bytes(b"\0" * 13)


# --- qualifiers ---------------------------------------------------------------------------------------------------

SPEC_QUALIFIERS = {
    "content": (15, 3), "multi": (11, 3), "manytomany": (13, 3), "ternary": (9, 3),
    "thread": (22, 4), "message": (30, 4),
    "user": (32, 5), "tag": (34, 5), "group": (36, 5), "event": (40, 5), "channel": (42, 5), "invite": (44, 5),
    "application": (48, 5), "collection": (52, 5), "premium": (56, 5),
}  # fmt: skip


def test_qualifier_table_is_the_spec_table() -> None:
    assert QUALIFIERS == SPEC_QUALIFIERS


@pytest.mark.parametrize(("name", "code", "width"), [(n, c, w) for n, (c, w) in SPEC_QUALIFIERS.items()])
def test_every_named_qualifier_decodes(name: str, code: int, width: int) -> None:
    assert qualifier_width(code) == width
    assert qualifier_name(code) == name
    counter_max = (1 << (16 - width)) - 1
    for counter in (0, 1, counter_max):
        low = encode_low(counter, code)
        assert low == counter << width | code % (1 << width)
        assert decode_low(low) == (counter, code)
        value = pack(123, 4, 5, counter, code)
        assert SCHEME.fields(value)["qualifier"] == name
        assert SCHEME.fields(value)["serial"] == counter
    with pytest.raises(ValueError, match=re.escape(f"0..{counter_max}")):
        encode_low(counter_max + 1, code)


@pytest.mark.parametrize("code", [50, 58, 60])
def test_unassigned_codes_decode(code: int) -> None:
    assert qualifier_width(code) == 5
    assert qualifier_name(code) == "unassigned"
    value = pack(NEW_YEAR_2025 * TICKS, 1, 2, 77, code)
    assert SCHEME.fields(value)["qualifier"] == "unassigned"
    assert SCHEME.fields(value)["serial"] == 77
    assert SCHEME.parse(SCHEME.format(value, "did")) == value


@pytest.mark.parametrize(
    ("code", "fragment"),
    [
        (-9, "8..63"),
        (0, "8..63"),
        (1, "8..63"),
        (7, "8..63"),
        (64, "8..63"),
        (100, "8..63"),
        (8, "structurally invalid"),  # marker says 3 bits, suffix 000 is 5-bit
        (14, "structurally invalid"),  # suffix 110 is 4-bit
        (16, "structurally invalid"),
        (17, "structurally invalid"),  # marker says 4 bits, suffix 0001 is 3-bit
        (23, "structurally invalid"),
        (33, "structurally invalid"),  # marker says 5 bits, suffix 00001 is 3-bit
        (38, "structurally invalid"),  # suffix 00110 is 4-bit
        (62, "structurally invalid"),
    ],
)
def test_structurally_invalid_codes_are_rejected(code: int, fragment: str) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)):
        qualifier_width(code)
    with pytest.raises(ValueError, match=re.escape(fragment)):
        pack(0, 0, 0, 0, code)


def test_every_serial_field_decodes_to_a_valid_code() -> None:
    """The decoding rule is a complete prefix code: no 16-bit pattern is structurally invalid."""
    seen = set()
    for low in range(1 << 16):
        counter, code = decode_low(low)
        assert encode_low(counter, code) == low
        seen.add(code)
    assert seen == set(VALID_CODES)


# --- parsing: rejected inputs -------------------------------------------------------------------------------------

_GOOD = VECTOR_USER_0_DID
_BODY = _GOOD[len("did:siq:") :]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "SIQ must be"),
        ("did:siq:", "29 base32 characters"),
        (_GOOD[:-1], "29 base32 characters after 'did:siq:', got 28"),
        (_GOOD + "a", "29 base32 characters after 'did:siq:', got 30"),
        ("did:siq:aaa" + _BODY, "29 base32 characters after 'did:siq:', got 32"),
        ("did:siq:" + _BODY[:-1] + "1", "base32 alphabet"),
        ("did:siq:" + _BODY[:-1] + "0", "base32 alphabet"),
        ("did:siq:" + _BODY[:-1] + "8", "base32 alphabet"),
        ("did:siq:" + _BODY[:-1] + "=", "base32 alphabet"),
        ("did:siq:" + _BODY[:-1] + "é", "base32 alphabet"),
        ("did:siq:" + _BODY[:-2] + " a", "base32 alphabet"),
        ("did:siq:q" + _BODY[1:], "must start with a..p"),
        ("did:siq:z" + _BODY[1:], "must start with a..p"),
        ("did:siq:2" + _BODY[1:], "must start with a..p"),
        ("did:siq:7" + _BODY[1:], "must start with a..p"),
        ("did:siq:" + _BODY[:-1] + "b", "checksum mismatch"),
        ("did:siq:h" + _BODY[1:], "checksum mismatch"),
        ("did:siq:" + _BODY[:10] + "b" + _BODY[11:], "checksum mismatch"),
        ("did:sik:" + _BODY, "SIQ must be"),
        ("did:siq" + _BODY, "SIQ must be"),
        (" " + _GOOD, "SIQ must be"),
        (_BODY, "SIQ must be"),
        ("006774858000000786ce1947000", "SIQ must be"),  # 27 hex digits (with letters)
        ("006774858000000786ce19470000a", "SIQ must be"),  # 29
        ("006774858000000786ce1947000g", "hex digits"),
        ("0x6774858000000786ce19470000", "hex digits"),
        ("006774858000000786ce1947 000", "hex digits"),
        ("+06774858000000786ce19470000", "hex digits"),
        ("006774858000000786ce1947000０", "hex digits"),  # fullwidth zero
        ("0123", "leading zeros"),
        ("00", "leading zeros"),
        (str(1 << 112), "at most 2**112-1"),
        ("9" * 34, "at most 2**112-1"),
        ("1" * 35, "at most 2**112-1"),
        ("-5", "SIQ must be"),
        ("1_000", "SIQ must be"),
        ("12 ", "SIQ must be"),
        ("١٢٣", "SIQ must be"),  # Arabic-Indic digits
    ],
)
def test_rejected_inputs(text: str, fragment: str) -> None:
    with pytest.raises(InvalidIdError, match=re.escape(fragment)):
        SCHEME.parse(text)


def test_a_28_digit_string_is_the_hex_form() -> None:
    """Documented ambiguity: 28 decimal digits are read as hex (the fixed-width form wins)."""
    text = "1" * 28
    assert SCHEME.parse(text) == int(text, 16)
    assert siq.decode_decimal(text) == int(text)


def test_prefix_is_case_insensitive() -> None:
    assert SCHEME.parse("DID:SIQ:" + _BODY) == VECTOR_USER_0
    assert SCHEME.parse("Did:Siq:" + _BODY.upper()) == VECTOR_USER_0
    with pytest.raises(InvalidIdError, match="must start with 'did:siq:'"):
        decode_did("did:xyz:" + _BODY)


def test_format_rejects_out_of_range_values_and_unknown_formats() -> None:
    with pytest.raises(ValueError, match="2\\*\\*112"):
        SCHEME.format(1 << 112, "did")
    with pytest.raises(ValueError, match="2\\*\\*112"):
        SCHEME.format(-1, "hex")
    with pytest.raises(InvalidOptionError, match="format must be one of"):
        SCHEME.format(0, "base64")
    batch = SiqGenerator(0, "", clock=FakeClock.from_ns(NEW_YEAR_2025 * NS)).generate(3)
    with pytest.raises(InvalidOptionError, match="format must be one of"):
        batch.encode("uri")


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"tick": -1}, "tick must be in"),
        ({"tick": TICK_MAX + 1}, "tick must be in"),
        ({"shard": 256}, "shard must be in 0..255"),
        ({"shard": -1}, "shard must be in 0..255"),
        ({"domain_hash": 1 << 32}, "domain hash must be in"),
        ({"counter": 2048}, "counter must be in 0..2047"),
        ({"counter": -1}, "counter must be in 0..2047"),
    ],
)
def test_pack_rejects_out_of_range_fields(kwargs: dict[str, int], fragment: str) -> None:
    fields = {"tick": 0, "shard": 0, "domain_hash": 0, "counter": 0, "code": USER} | kwargs
    with pytest.raises(ValueError, match=re.escape(fragment)):
        pack(**fields)


# --- round trips (hypothesis) -------------------------------------------------------------------------------------

values = st.integers(0, MAX_VALUE)


@st.composite
def field_tuples(draw: st.DrawFn) -> tuple[int, int, int, int, int]:
    code = draw(st.sampled_from(VALID_CODES))
    counter = draw(st.integers(0, (1 << (16 - qualifier_width(code))) - 1))
    return (
        draw(st.integers(0, TICK_MAX)),
        draw(st.integers(0, 255)),
        draw(st.integers(0, (1 << 32) - 1)),
        counter,
        code,
    )


@given(field_tuples())
def test_pack_unpack_round_trip(fields: tuple[int, int, int, int, int]) -> None:
    value = pack(*fields)
    assert unpack(value) == fields
    assert 0 <= value <= MAX_VALUE


@given(values)
def test_unpack_pack_round_trip(value: int) -> None:
    assert pack(*unpack(value)) == value
    assert from_bytes(to_bytes(value)) == value
    assert from_storage(to_storage(value)) == value


@given(values)
def test_did_round_trip_and_matches_the_reference(value: int) -> None:
    text = encode_did(value)
    assert text == reference_did(value)
    assert len(text) == SCHEME.text_width["did"] == 37
    assert text[8] <= "p"
    assert SCHEME.parse(text) == value
    assert SCHEME.parse(text.upper()) == value


@given(values)
def test_hex_round_trip(value: int) -> None:
    text = SCHEME.format(value, "hex")
    assert len(text) == SCHEME.text_width["hex"] == 28
    assert text == text.lower()
    assert SCHEME.parse(text) == value
    assert SCHEME.parse(text.upper()) == value


@given(values)
def test_decimal_round_trip(value: int) -> None:
    text = SCHEME.format(value, "decimal")
    assert text == str(value)
    assert siq.decode_decimal(text) == value
    # the parser reads every length but 28 as decimal (28 characters are the hex form)
    assert SCHEME.parse(text) == (int(text, 16) if len(text) == 28 else value)


@given(values)
def test_fields_cover_every_bit(value: int) -> None:
    fields = SCHEME.fields(value)
    assert set(fields) == {"seconds", "fraction", "shard", "domain_hash", "serial", "qualifier"}
    code = decode_low(value & 0xFFFF)[1]
    assert fields["qualifier"] == qualifier_name(code)
    tick = fields["seconds"] << 16 | fields["fraction"]
    assert pack(tick, fields["shard"], fields["domain_hash"], fields["serial"], code) == value
    assert SCHEME.timestamp_ns(value) == tick * NS // TICKS


@given(st.lists(st.binary(min_size=14, max_size=14), min_size=1, max_size=50))
def test_column_crc_matches_zlib(messages: list[bytes]) -> None:
    rows = np.frombuffer(b"".join(messages), dtype=np.uint8).reshape(len(messages), 14)
    assert siq.crc32_rows(rows).tolist() == [zlib.crc32(message) for message in messages]


@given(st.integers(0, TICK_MAX))
def test_tick_ns_conversions(tick: int) -> None:
    ns = siq.ns_from_tick(tick)
    assert siq.tick_from_ns(ns) == tick
    assert SCHEME.native_from_ns(ns) == tick
    assert SCHEME.native_from_ns(ns - 1) == tick - 1
    assert (ns - 1) * TICKS < tick * NS <= ns * TICKS


# --- batch encoding vs the single-ID path -------------------------------------------------------------------------


@st.composite
def batches(draw: st.DrawFn) -> SiqBatch:
    """Batches over the full field ranges: any tick, shard, domain hash, valid code; 1..6 consecutive ticks."""
    code = draw(st.sampled_from(VALID_CODES))
    capacity = 1 << (16 - qualifier_width(code))
    segment_count = draw(st.integers(1, 6))
    tick = draw(st.integers(0, TICK_MAX - segment_count))
    segments = []
    for index in range(segment_count):
        first = draw(st.integers(0, capacity - 1)) if index == 0 else 0
        count = draw(st.integers(1, min(capacity - first, 3000)))
        segments.append((tick + index, first, count))
    return SiqBatch(draw(st.integers(0, 255)), draw(st.integers(0, (1 << 32) - 1)), code, segments)


@settings(deadline=None, max_examples=60)
@given(batches(), st.sampled_from(SCHEME.formats))
def test_batch_encode_equals_single_id_format(batch: SiqBatch, fmt: str) -> None:
    assert batch.encode(fmt) == expected_text(batch, fmt)


@settings(deadline=None, max_examples=40)
@given(
    st.integers(0, 255),
    st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=30),
    st.integers(0, siq.ns_from_tick(TICK_MAX - 64)),
    st.sampled_from(sorted(QUALIFIERS)),
    st.integers(1, 20_000),
    st.integers(0, 40_000),
)
def test_generated_batches_encode_like_the_single_id_path(
    shard: int, domain: str, start_ns: int, qualifier: str, count: int, step_ns: int
) -> None:
    generator = SiqGenerator(shard, domain, clock=FakeClock.from_ns(start_ns, step_ns))
    batch = generator.generate(count, qualifier=qualifier)
    assert batch.count >= 1
    for fmt in SCHEME.formats:
        assert batch.encode(fmt) == expected_text(batch, fmt)
    assert batch.encode("canonical") == batch.encode("did")


def _segments(tick: int, counts: list[int]) -> list[tuple[int, int, int]]:
    return [(tick + index, 0, count) for index, count in enumerate(counts)]


@pytest.mark.parametrize("fmt", SCHEME.formats)
def test_large_multi_chunk_batch(fmt: str) -> None:
    """More rows than one encoding pass (CHUNK_ROWS), segments split across passes."""
    batch = SiqBatch(9, domain_hash("example.com"), USER, [(NEW_YEAR_2025 * TICKS, 5, 2043)]
                     + _segments(NEW_YEAR_2025 * TICKS + 1, [2048] * 20 + [17]))  # fmt: skip
    assert batch.count > 5 * siq.CHUNK_ROWS
    assert batch.count > 2 * siq.DID_CHUNK_ROWS
    assert batch.encode(fmt) == expected_text(batch, fmt)


@pytest.mark.parametrize("boundary", [1 << 4, 1 << 9, 1 << 14, 1 << 19, 1 << 39, 1 << 44, 1 << 49, 1 << 54, 3 << 54])
@pytest.mark.parametrize("fmt", SCHEME.formats)
def test_batch_across_tick_bit_boundaries(boundary: int, fmt: str) -> None:
    """A batch whose segments differ in the tick bits of one did character: k20 (tick bits 3..0), k19, k18, k17, k12
    and k11 (tick bits 48..39, kept in the reused rows unless a batch's segments differ there), k10 and k9 (tick
    bits 55..49, in the checksum word)."""
    batch = SiqBatch(200, 12345, QUALIFIERS["content"][0], _segments(boundary - 2, [8192, 8192, 100, 7]))
    assert batch.encode(fmt) == expected_text(batch, fmt)


@pytest.mark.parametrize("code", [QUALIFIERS["content"][0], QUALIFIERS["message"][0], USER])
def test_every_checksum_character_at_every_position(code: int) -> None:
    """Whole ticks of every counter (the last one included): each did checksum character k3..k9 takes every value
    its bits allow (k3: a..p, k9: 8 values per tick bits 55..54), so every base32 index goes through the batch
    encoder's byte-wise index-to-character step, and the text equals the single-ID path's."""
    capacity = 1 << (16 - qualifier_width(code))
    batch = SiqBatch(77, domain_hash("example.com"), code, _segments(NEW_YEAR_2025 * TICKS, [capacity] * 3))
    text = batch.encode("did")
    assert text == expected_text(batch, "did")
    rows = text.splitlines()
    columns = [{row[column] for row in rows} for column in range(len(b"did:siq:"), len(b"did:siq:") + 7)]
    assert columns[0] == set(b"abcdefghijklmnop")
    assert all(len(column) == 32 for column in columns[1:6])
    assert len(columns[6]) == 8


def test_did_rows_follow_the_shard_domain_and_tick_of_each_batch() -> None:
    """The did rows are reused per thread with the characters fixed by tick bits 48..39, the shard and the domain
    hash kept in them: batches that change those, or span them, in any order, still encode like the single-ID
    path."""
    tick = NEW_YEAR_2025 * TICKS
    spanning = _segments((tick >> 39 << 39) + (1 << 39) - 2, [2048, 2048, 2048])
    order = [(1, 5, tick), (2, 5, tick), (2, 6, tick), (1, 5, tick + (1 << 39)), (1, 5, None), (1, 5, tick)]
    for shard, dh, start in order * 2:
        batch = SiqBatch(shard, dh, USER, spanning if start is None else _segments(start, [2048, 2048, 100]))
        assert batch.encode("did") == expected_text(batch, "did")
    big = SiqBatch(3, 4, QUALIFIERS["content"][0], _segments(tick, [8192] * 9))  # past the reused rows
    assert big.count > siq.generator.SCRATCH_ROWS
    assert big.encode("did") == expected_text(big, "did")
    small = SiqBatch(3, 4, USER, _segments(tick, [2048]))
    assert small.encode("did") == expected_text(small, "did")


def test_did_rows_are_per_thread() -> None:
    """Two threads encoding did batches of different shards and domains in turn, each right after the other's
    encode: every batch still encodes like the single-ID path, and each thread reuses rows of its own."""
    tick = NEW_YEAR_2025 * TICKS
    turns = [threading.Event() for _ in range(2)]
    failures: list[str] = []
    rows: list[set[int]] = [set(), set()]

    def encode(thread: int, shard: int, dh: int) -> None:
        for step in range(6):
            if not turns[thread].wait(60):
                failures.append(f"thread {thread} was not given its turn {step}")
                return
            turns[thread].clear()
            batch = SiqBatch(shard, dh, USER, _segments(tick + step, [2048, 100]))
            if batch.encode("did") != expected_text(batch, "did"):
                failures.append(f"thread {thread}, step {step}: did text differs from the single-ID path")
            rows[thread].add(id(siq.generator._did_rows_state.array))
            turns[1 - thread].set()

    threads = [threading.Thread(target=encode, args=args) for args in ((0, 1, 5), (1, 200, 6))]
    for thread in threads:
        thread.start()
    turns[0].set()
    for thread in threads:
        thread.join()
    assert not failures
    assert len(rows[0]) == len(rows[1]) == 1 and rows[0] != rows[1]  # one array per thread, kept across batches


def test_decimal_slow_paths() -> None:
    """Small values, a digit-count change inside a batch, and a carry across 10**12 fall back to str()."""
    small = SiqBatch(0, 0, USER, _segments(0, [2048, 3]))
    assert small.encode("decimal") == expected_text(small, "decimal")
    boundary_tick = 10**31 >> 56  # values at this tick have 31 digits, at the next one 32
    widening = SiqBatch(0, 0, USER, _segments(boundary_tick, [2048, 2048]))
    texts = widening.encode("decimal").split()
    assert {len(text) for text in texts} == {31, 32}
    assert widening.encode("decimal") == expected_text(widening, "decimal")
    # choose the domain hash so that the prefix's low 12 decimal digits are within 65536 of 10**12
    tick, shard = NEW_YEAR_2025 * TICKS, 3
    base = (tick << 56 | shard << 48) % 10**12
    target = 10**12 - 40_000
    target += (base - target) % 4096
    dh = ((target - base) % 10**12 // 4096 * pow(16, -1, 5**12)) % 5**12
    carrying = SiqBatch(shard, dh, USER, [Run(tick, 0, 2048)])
    assert carrying.values()[0] % 10**12 >= 10**12 - 40_000
    assert carrying.values()[-1] % 10**12 < 65536
    assert carrying.encode("decimal") == expected_text(carrying, "decimal")


def test_empty_batch() -> None:
    batch = SiqBatch(1, 2, USER, [])
    assert batch.count == 0
    assert batch.values() == []
    assert batch.high_water == -1
    for fmt in SCHEME.formats:
        assert batch.encode(fmt) == b""


# --- ordering -----------------------------------------------------------------------------------------------------


@given(field_tuples(), field_tuples())
def test_byte_order_equals_field_order_and_hex_order(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    """Packed bytes, hex text and (tick, shard, domain hash, serial field) all sort alike."""
    va, vb = pack(*a), pack(*b)
    key_a = (a[0], a[1], a[2], encode_low(a[3], a[4]))
    key_b = (b[0], b[1], b[2], encode_low(b[3], b[4]))
    assert (va < vb) == (to_bytes(va) < to_bytes(vb)) == (key_a < key_b)
    assert (va < vb) == (SCHEME.format(va, "hex") < SCHEME.format(vb, "hex"))


def test_did_form_does_not_sort_like_the_ids() -> None:
    """The did form starts with the checksum: the scheme promises no text order for it."""
    assert VECTOR_USER_0 < VECTOR_USER_0 | 1 << 5
    assert VECTOR_USER_0_DID > VECTOR_USER_1_DID


# --- scheme metadata ----------------------------------------------------------------------------------------------


def test_scheme_metadata() -> None:
    assert SCHEME.name == "siq"
    assert SCHEME.packed_bytes == 14
    assert SCHEME.formats == ("did", "hex", "decimal")
    assert SCHEME.text_width == {"did": 37, "hex": 28}
    assert SCHEME.timestamp_digits == 6
    assert SCHEME.native_unit_ns == 1e9 / 65536
    pool = SCHEME.identity_pool(Settings())
    assert pool is not None and (pool.kind, pool.space, pool.draw) == ("shard", (0, 255), "scan")
    assert [field.name for field in SCHEME.layout] == list(SCHEME.fields(VECTOR_USER_0))
    assert SCHEME.resolve_format("canonical") == "did"
    assert SCHEME.resolve_format(None) == "did"
    assert "yusurko/suou" in SCHEME.reference


# --- generator ----------------------------------------------------------------------------------------------------

START = NEW_YEAR_2025 * NS + 123_456_789
START_TICK = siq.tick_from_ns(START)


def make(clock: FakeClock, shard: int = 3, floor: int = -1) -> SiqGenerator:
    return SiqGenerator(shard, "example.com", clock=clock, floor=floor)


def ticks_and_counters(batch: SiqBatch) -> list[tuple[int, int]]:
    return [(unpack(value).tick, unpack(value).counter) for value in batch.values()]


def test_generator_is_a_generator() -> None:
    generator = make(FakeClock.from_ns(START))
    assert isinstance(generator, Generator)
    assert generator.high_water == -1
    assert generator.wait_ns() == 0


def test_same_tick_continues_and_new_tick_resets() -> None:
    clock = FakeClock.from_ns(START)
    generator = make(clock)
    assert ticks_and_counters(generator.generate(3)) == [(START_TICK, 0), (START_TICK, 1), (START_TICK, 2)]
    assert ticks_and_counters(generator.generate(2)) == [(START_TICK, 3), (START_TICK, 4)]
    clock.ns = siq.ns_from_tick(START_TICK + 5)
    assert ticks_and_counters(generator.generate(2)) == [(START_TICK + 5, 0), (START_TICK + 5, 1)]
    assert generator.high_water == START_TICK + 5
    assert generator.stats.clock_rollbacks == 0


def test_every_value_carries_shard_domain_and_qualifier() -> None:
    generator = make(FakeClock.from_ns(START), shard=0)
    for name in QUALIFIERS:
        for value in generator.generate(5, qualifier=name).values():
            fields = SCHEME.fields(value)
            assert (fields["shard"], fields["domain_hash"], fields["qualifier"]) == (0, EXAMPLE_COM_HASH, name)


def test_counters_are_per_qualifier_and_share_ticks() -> None:
    clock = FakeClock.from_ns(START)
    generator = make(clock)
    user_a = generator.generate(3, qualifier="user")
    content = generator.generate(4, qualifier="content")
    user_b = generator.generate(2, qualifier="user")
    assert ticks_and_counters(user_a) + ticks_and_counters(user_b) == [(START_TICK, c) for c in range(5)]
    assert ticks_and_counters(content) == [(START_TICK, c) for c in range(4)]
    everything = user_a.values() + content.values() + user_b.values()
    assert len(set(everything)) == len(everything)


def test_a_counter_of_an_older_tick_restarts_in_the_shared_last_tick() -> None:
    """user counts in tick T, content moves the shared last tick to T+1, the clock steps back to T: user must
    issue in T+1 (never at or below another ID's tick for the same counter), starting at 0, with no duplicate."""
    clock = FakeClock.from_ns(START)
    generator = make(clock)
    first = generator.generate(5, qualifier="user")
    clock.ns = siq.ns_from_tick(START_TICK + 1)
    content = generator.generate(3, qualifier="content")
    clock.ns = siq.ns_from_tick(START_TICK)
    second = generator.generate(3, qualifier="user")
    third = generator.generate(2, qualifier="content")
    assert ticks_and_counters(second) == [(START_TICK + 1, 0), (START_TICK + 1, 1), (START_TICK + 1, 2)]
    assert ticks_and_counters(third) == [(START_TICK + 1, 3), (START_TICK + 1, 4)]
    everything = first.values() + content.values() + second.values() + third.values()
    assert len(set(everything)) == len(everything)
    assert generator.stats.clock_rollbacks == 2


def test_clock_rollback_keeps_the_last_tick_and_continues() -> None:
    clock = FakeClock.from_ns(START)
    generator = make(clock)
    before = generator.generate(10)
    clock.ns = START - NS  # one second back
    during = generator.generate(10)
    assert ticks_and_counters(during) == [(START_TICK, c) for c in range(10, 20)]
    assert generator.stats.clock_rollbacks == 1
    assert NS - 20_000 <= generator.stats.max_rollback_ns <= NS
    assert generator.high_water == START_TICK
    assert not set(before.values()) & set(during.values())


def test_rollback_with_exhausted_counter_returns_partial_and_reports_wait() -> None:
    clock = FakeClock.from_ns(START)
    generator = make(clock)
    generator.generate(2000)
    clock.ns = START - NS
    partial = generator.generate(100)
    assert partial.count == 48  # the rest of the 2048 user counters of the last tick
    assert generator.stats.sequence_exhausted >= 1
    assert NS < generator.wait_ns() <= NS + NS // TICKS + 1
    empty = generator.generate(100)
    assert empty.count == 0 and empty.encode("did") == b""
    assert generator.stats.clock_rollbacks == 2
    clock.ns = siq.ns_from_tick(START_TICK + 1)
    assert generator.wait_ns() == 0
    assert ticks_and_counters(generator.generate(2)) == [(START_TICK + 1, 0), (START_TICK + 1, 1)]


def test_overflow_on_a_frozen_clock_returns_a_partial_batch_quickly() -> None:
    clock = FakeClock.from_ns(START)
    generator = make(clock)
    began = time.perf_counter()
    batch = generator.generate(5000)
    assert clock.readings >= 2  # it spun: re-read the frozen clock, less than a tick short of the next one
    # The spin's budget is SPIN_BUDGET_NS of real time (time.perf_counter_ns in SiqGenerator, not the injected
    # clock), so only a real-time bound can show it ended: a spin that did not end would never return on this
    # frozen clock, so 5 s (100,000 times the budget) tells the two apart on however loaded a machine.
    assert time.perf_counter() - began < 5.0
    assert batch.count == 2048
    assert generator.stats.sequence_exhausted == 1
    assert 0 < generator.wait_ns() <= NS // TICKS + 1
    assert generator.generate(5, qualifier="thread").count == 5  # other qualifiers still have room
    assert generator.generate(1).count == 0
    clock.ns = siq.ns_from_tick(START_TICK + 1)
    assert ticks_and_counters(generator.generate(3)) == [(START_TICK + 1, c) for c in range(3)]


def test_overflow_waits_for_the_next_tick_when_the_clock_moves() -> None:
    clock = FakeClock.from_ns(START, step=16_000)  # each reading passes a tick boundary: the spin reaches the next tick
    generator = make(clock)
    batch = generator.generate(10_000, qualifier="user")
    assert batch.count == 10_000
    pairs = ticks_and_counters(batch)
    assert pairs == sorted(pairs)
    assert len({tick for tick, _ in pairs}) == 5  # 2048 per tick
    assert generator.stats.sequence_exhausted == 4
    assert generator.wait_ns() == 0


def test_real_clock_smoke() -> None:
    generator = SiqGenerator(0, "example.com")
    began = time.perf_counter()
    batch = generator.generate(50_000)
    # The real clock, so real time: the spin is bounded (50 µs budget a tick, 25 ticks here); 5 s, for a loaded
    # machine.
    assert time.perf_counter() - began < 5.0
    assert 2048 <= batch.count <= 50_000
    now_tick = siq.tick_from_ns(time.time_ns())
    assert now_tick - 65536 <= batch.high_water <= now_tick
    assert batch.encode("did").count(b"\n") == batch.count


@pytest.mark.parametrize("offset", [0, 1, 1000])
def test_floor_is_never_reached(offset: int) -> None:
    floor = START_TICK + offset
    clock = FakeClock.from_ns(START)
    generator = make(clock, floor=floor)
    assert generator.high_water == floor
    batch = generator.generate(10)
    assert min(tick for tick, _ in ticks_and_counters(batch)) == floor + 1
    assert generator.high_water == floor + 1
    assert generator.stats.clock_rollbacks == 0  # a floor alone is not a rollback


def test_floor_below_the_clock_is_harmless() -> None:
    generator = make(FakeClock.from_ns(START), floor=START_TICK - 100)
    assert ticks_and_counters(generator.generate(1)) == [(START_TICK, 0)]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ((-1, "example.com"), "shard must be an integer in 0..255"),
        ((256, "example.com"), "shard must be an integer in 0..255"),
        ((True, "example.com"), "shard must be an integer in 0..255"),
        (("1", "example.com"), "shard must be an integer in 0..255"),
        ((1, "bücher.example"), "ASCII"),
        ((1, None), "domain must be a string"),
    ],
)
def test_generator_validates_its_configuration(args: tuple[object, object], fragment: str) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)):
        SiqGenerator(*args)


@pytest.mark.parametrize("floor", [-2, TICK_MAX])
def test_generator_validates_the_floor(floor: int) -> None:
    with pytest.raises(ValueError, match="floor must be in"):
        SiqGenerator(0, "", floor=floor)


def test_shard_zero_is_allowed() -> None:
    value = SiqGenerator(0, "", clock=FakeClock.from_ns(START)).generate(1).values()[0]
    assert SCHEME.fields(value)["shard"] == 0
    assert SCHEME.fields(value)["domain_hash"] == 0


@pytest.mark.parametrize(
    ("count", "options", "fragment"),
    [
        (0, {}, "count must be an integer >= 1"),
        (-5, {}, "count must be an integer >= 1"),
        (1.5, {}, "count must be an integer >= 1"),
        (1, {"qualifier": "bogus"}, "qualifier must be one of content, multi"),
        (1, {"qualifier": "USER"}, "qualifier must be one of"),
        (1, {"qualifier": "unassigned"}, "qualifier must be one of"),
        (1, {"qualifier": 32}, "qualifier must be one of"),
        (1, {"mode": "spread"}, "siq takes only the qualifier option, got mode"),
    ],
)
def test_generate_validates_options(count: object, options: dict[str, object], fragment: str) -> None:
    generator = make(FakeClock.from_ns(START))
    with pytest.raises(InvalidOptionError, match=re.escape(fragment)):
        generator.generate(count, **options)


def test_tick_overflow_is_an_error() -> None:
    generator = make(FakeClock.from_ns(siq.ns_from_tick(TICK_MAX)))
    assert generator.generate(1).high_water == TICK_MAX
    with pytest.raises(OverflowError, match="2\\*\\*40 seconds"):
        make(FakeClock.from_ns(siq.ns_from_tick(TICK_MAX + 1))).generate(1)


def test_monotonic_per_qualifier_and_a_million_without_duplicates() -> None:
    """1,000,000+ IDs, several qualifiers, a clock that drifts forward and sometimes jumps back."""
    rng = np.random.default_rng(7)
    clock = FakeClock.from_ns(START, step=3_000)
    generator = make(clock)
    last: dict[str, int] = {}
    last_tick = -1
    seen: set[int] = set()
    total = 0
    rollbacks = 0
    while total < 1_000_000:
        qualifier = ("user", "content", "thread", "premium")[int(rng.integers(4))]
        if rng.random() < 0.05:
            clock.ns -= int(rng.integers(1, 2_000_000))  # step back up to 2 ms
            rollbacks += 1
        batch = generator.generate(int(rng.integers(1, 40_000)), qualifier=qualifier)
        values = batch.values()
        if not values:
            clock.ns += generator.wait_ns()
            continue
        assert values == sorted(values)  # one qualifier: (tick, counter) increase
        assert values[0] > last.get(qualifier, -1)
        last[qualifier] = values[-1]
        assert batch.segments[0][0] >= last_tick  # the shared last tick never goes back
        last_tick = batch.high_water
        seen.update(values)
        total += len(values)
        assert len(seen) == total
        assert batch.high_water <= generator.high_water
    assert rollbacks >= 1
    assert generator.stats.clock_rollbacks >= 1  # counted once per call that sees the clock behind
