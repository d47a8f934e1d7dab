"""Tests of app/schemes/snowflake/ against docs/schemes/snowflake.md, Discord's
documented vector, and the peers snowflake-id and sonyflake."""

from __future__ import annotations

import datetime
import random
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from snowflake import Snowflake as PeerSnowflake
from snowflake import SnowflakeGenerator as PeerSnowflakeGenerator
from sonyflake import Sonyflake

from app.errors import InvalidIdError, InvalidOptionError, TimeRangeError
from app.schemes import snowflake
from app.schemes.base import Batch, Generator, Scheme
from app.schemes.pool import IdentityPool
from app.schemes.snowflake import (
    DISCORD,
    INSTAGRAM,
    JS53,
    NAMED_LAYOUTS,
    SCHEME,
    SONYFLAKE,
    TWITTER,
    Layout,
    SnowflakeBatch,
    SnowflakeGenerator,
    SnowflakeScheme,
    SnowflakeSettings,
)
from app.settings import Settings
from tests.helpers import FakeClock


def unspread(*args: Any, **kwargs: Any) -> SnowflakeGenerator:
    """A generator whose units all start at slot 0 (zero random bytes): the slot arithmetic tests below."""
    return SnowflakeGenerator(*args, random=bytes, **kwargs)


MS = 1_000_000  # ns per ms
NOW_MS = 1_763_888_400_000  # 2025-11-23T09:00:00Z
packed = st.integers(min_value=0, max_value=snowflake.PACKED_MAX)


@st.composite
def custom_layouts(draw: st.DrawFn) -> Layout:
    """Random valid custom layouts: T+W+S = 63 and every timestamp below 2**53 ms."""
    unit_ms = draw(st.integers(min_value=1, max_value=10_000))
    time_bits = draw(st.integers(min_value=1, max_value=(snowflake.TIMESTAMP_MS_LIMIT // unit_ms).bit_length() - 1))
    worker_bits = draw(st.integers(min_value=0, max_value=63 - time_bits))
    last_offset_ms = ((1 << time_bits) - 1) * unit_ms
    epoch_ms = draw(st.integers(min_value=0, max_value=snowflake.TIMESTAMP_MS_LIMIT - 1 - last_offset_ms))
    return Layout.parse(f"custom:{epoch_ms}:{unit_ms}:{time_bits}/{worker_bits}/{63 - time_bits - worker_bits}")


layouts = st.one_of(st.sampled_from(list(NAMED_LAYOUTS.values())), custom_layouts())


# --- vectors and layouts -----------------------------------------------------------------------------------------


def test_discord_vector() -> None:
    """Discord's API reference: 175928847299117063 = 2016-04-30T11:18:25.796Z, worker 1 process 0, increment 7."""
    scheme = SCHEME.with_decode_options(layout="discord")
    value = scheme.parse("175928847299117063")
    made = datetime.datetime(2016, 4, 30, 11, 18, 25, 796000, tzinfo=datetime.UTC)
    assert scheme.fields(value) == {
        "layout": "discord",
        "timestamp_ms": int(made.timestamp() * 1000),
        "worker_id": 32,
        "sequence": 7,
    }
    assert scheme.timestamp_ns(value) == int(made.timestamp() * 1000) * MS
    assert DISCORD.pack(int(made.timestamp() * 1000) - DISCORD.epoch_ms, 32, 7) == value
    assert scheme.canonical(value) == "175928847299117063"
    assert scheme.format(value, "hex") == f"{175928847299117063:016x}"


def test_layout_table() -> None:
    """docs/schemes/snowflake.md's layouts table: epochs, units, widths and order (most significant first)."""
    rows = {
        "twitter": (1288834974657, 1, {"time": 41, "worker": 10, "sequence": 12}, ("time", "worker", "sequence")),
        "discord": (1420070400000, 1, {"time": 41, "worker": 10, "sequence": 12}, ("time", "worker", "sequence")),
        "instagram": (1314220021721, 1, {"time": 41, "worker": 13, "sequence": 10}, ("time", "worker", "sequence")),
        "sonyflake": (1409529600000, 10, {"time": 39, "worker": 16, "sequence": 8}, ("time", "sequence", "worker")),
    }
    for name, (epoch_ms, unit_ms, widths, order) in rows.items():
        layout = Layout.parse(name)
        assert (layout.name, layout.epoch_ms, layout.unit_ms, layout.widths, layout.order) == (
            name,
            epoch_ms,
            unit_ms,
            widths,
            order,
        )
        assert layout.key_name == name
    assert SONYFLAKE.shifts == {"time": 24, "sequence": 16, "worker": 0}
    assert TWITTER.shifts == {"time": 22, "worker": 12, "sequence": 0}
    # Instagram's widths add up to 64: bit 63 (its time field's top bit) stays 0, leaving 40 usable time bits.
    assert INSTAGRAM.shifts == {"time": 23, "worker": 10, "sequence": 0}
    assert INSTAGRAM.time_max == 2**40 - 1


def test_custom_layout_name_and_key_name() -> None:
    layout = Layout.parse("custom:0001288834974657:5:40/11/12")
    assert layout.name == "custom:1288834974657:5:40/11/12"
    assert layout.key_name == "custom-1288834974657-5-40-11-12"
    assert (layout.epoch_ms, layout.unit_ms, layout.time_bits, layout.worker_bits, layout.sequence_bits) == (
        1288834974657,
        5,
        40,
        11,
        12,
    )
    assert layout.shifts == {"time": 23, "worker": 12, "sequence": 0}


LAYOUT_REJECTS = [
    (
        "",
        "snowflake layout must be twitter, discord, instagram, sonyflake, js53 or custom:EPOCH_MS:UNIT_MS:T/W/S "
        "with T+W+S <= 63, got ''",
    ),
    ("Twitter", "snowflake layout must be twitter, discord"),
    ("custom:1:1:41/10", "custom snowflake layout must be custom:EPOCH_MS:UNIT_MS:T/W/S with ASCII decimal numbers"),
    ("custom:1:1:41/10/12/0", "ASCII decimal numbers"),
    ("custom:-1:1:41/10/12", "ASCII decimal numbers"),
    ("custom:1:1:41/10/\u0661\u0662", "ASCII decimal numbers"),  # Arabic-Indic digits
    ("custom:1:1:41/11/12", "T+W+S must be at most 63, got 41+11+12 = 64"),
    ("custom:1:0:41/10/12", "UNIT_MS must be >= 1, got 0"),
    ("custom:1:1:0/31/32", "T must be >= 1 and W, S >= 0, got 0/31/32"),
    ("custom:0:1:63/0/0", "EPOCH_MS + (2**T - 1) x UNIT_MS must be below 2**53 ms"),
    ("custom:" + "9" * 70 + ":1:41/10/12", "snowflake layout must be twitter"),  # too long to be a layout
]


@pytest.mark.parametrize(("text", "message"), LAYOUT_REJECTS)
def test_layout_rejects(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        Layout.parse(text)


@given(layouts, st.data())
def test_pack_unpack_round_trip_every_layout(layout: Layout, data: st.DataObject) -> None:
    time_units = data.draw(st.integers(min_value=0, max_value=layout.time_max))
    worker_id = data.draw(st.integers(min_value=0, max_value=layout.worker_max))
    sequence = data.draw(st.integers(min_value=0, max_value=layout.sequence_max))
    value = layout.pack(time_units, worker_id, sequence)
    assert 0 <= value <= snowflake.PACKED_MAX
    assert layout.unpack(value) == (time_units, worker_id, sequence)
    fields = SnowflakeScheme(layout).fields(value)
    assert fields == {
        "layout": layout.name,
        "timestamp_ms": layout.epoch_ms + time_units * layout.unit_ms,
        "worker_id": worker_id,
        "sequence": sequence,
    }
    assert fields["timestamp_ms"] < 2**53


@given(layouts, packed)
def test_every_value_decodes_and_repacks_in_every_layout(layout: Layout, value: int) -> None:
    value &= layout.value_max  # every value the layout holds (js53: below 2**53)
    assert layout.pack(*layout.unpack(value)) == value


@given(packed)
def test_text_round_trip(value: int) -> None:
    assert SCHEME.parse(SCHEME.format(value, "decimal")) == value
    hex_text = SCHEME.format(value, "hex")
    assert len(hex_text) == 16 and hex_text == hex_text.lower()
    if any(char in "abcdef" for char in hex_text):
        assert SCHEME.parse(hex_text) == SCHEME.parse(hex_text.upper()) == value
    assert SCHEME.parse("0x" + hex_text) == SCHEME.parse(f"0X{value:X}") == value


def test_pack_rejects_out_of_range_fields() -> None:
    with pytest.raises(ValueError, match=r"snowflake worker must be in 0\.\.1023 in layout twitter, got 1024"):
        TWITTER.pack(0, 1024, 0)
    with pytest.raises(ValueError, match=r"snowflake time must be in 0\.\.1099511627775 in layout instagram"):
        INSTAGRAM.pack(2**40, 0, 0)
    with pytest.raises(ValueError, match=r"snowflake sequence must be in 0\.\.255 in layout sonyflake, got 256"):
        SONYFLAKE.pack(0, 0, 256)
    with pytest.raises(ValueError, match=r"a snowflake must be in 0\.\.2\*\*63-1"):
        TWITTER.unpack(1 << 63)


# --- text: accepted and rejected --------------------------------------------------------------------------------

ACCEPTS = [
    ("0", 0),
    ("175928847299117063", 175928847299117063),
    ("9223372036854775807", 2**63 - 1),
    ("1234567890123456", 1234567890123456),  # 16 digits: all-digit input is always decimal
    ("8000000000000000", 8 * 10**15),  # ... not hex 0x8000000000000000 (bit 63)
    ("0000000000000000", None),  # ... so 16 zeros is a decimal with leading zeros (rejected below)
    ("00000000000000ab", 0xAB),
    ("7FFFFFFFFFFFFFFF", 2**63 - 1),
    ("0x1", 1),
    ("0X00FF", 0xFF),
    ("0x7fffffffffffffff", 2**63 - 1),
    ("0x00000000000000000001", 1),  # any hex digits after 0x
]


@pytest.mark.parametrize(("text", "value"), [row for row in ACCEPTS if row[1] is not None])
def test_accepts(text: str, value: int) -> None:
    assert SCHEME.parse(text) == value


REJECTS = [
    ("", "snowflake ID must be a decimal integer, 16 hex digits or 0x and hex digits, got 0 characters"),
    ("-1", "snowflake ID must not be negative, got -1"),
    ("-0x5", "snowflake ID must not be negative"),
    (
        "9223372036854775808",
        "snowflake ID must not have bit 63 set (it fits a signed 64-bit integer), got 9223372036854775808",
    ),
    ("18446744073709551615", "snowflake ID must not have bit 63 set"),
    ("18446744073709551616", "snowflake ID is too wide: it must fit in 63 bits (at most 9223372036854775807)"),
    ("1" * 25, "snowflake ID is too wide: at most 19 decimal digits, got 25"),
    ("800000000000000a", "snowflake ID must not have bit 63 set"),
    ("ffffffffffffffff", "snowflake ID must not have bit 63 set"),
    ("0x8000000000000000", "snowflake ID must not have bit 63 set"),
    ("0x10000000000000000", "snowflake ID is too wide: at most 16 significant hex digits, got 17"),
    ("0x", "snowflake hex ID must have hex digits after 0x"),
    ("0xg1", "snowflake hex ID must contain only hex digits 0-9 a-f, got 'g' at position 2"),
    ("0000000000000000", "snowflake decimal ID must not have leading zeros"),
    ("0175928847299117063", "snowflake decimal ID must not have leading zeros"),
    ("abc", "snowflake hex ID must be exactly 16 hex digits (or 0x and hex digits), got 3"),
    ("00000000000000abc", "snowflake hex ID must be exactly 16 hex digits (or 0x and hex digits), got 17"),
    (
        "12g",
        "snowflake ID must be a decimal integer, 16 hex digits or 0x and hex digits, got 3 characters including 'g'",
    ),
    ("+12", "including '+'"),
    ("1 2", "including ' '"),
    ("\uff11\uff12\uff13", "including '\uff11'"),  # fullwidth digits are not ASCII digits
    ("\u0661\u0662", "including '\u0661'"),
    ("00000000000000a\u0661", "snowflake hex ID must contain only hex digits 0-9 a-f, got '\u0661' at position 15"),
]


@pytest.mark.parametrize(("text", "message"), REJECTS)
def test_rejects(text: str, message: str) -> None:
    with pytest.raises(InvalidIdError, match=re.escape(message)):
        SCHEME.parse(text)


# --- scheme contract members -------------------------------------------------------------------------------------


def node_settings(**overrides: object) -> SnowflakeSettings:
    return SnowflakeSettings(**overrides)


def test_scheme_metadata_and_contract_members() -> None:
    assert isinstance(SCHEME, Scheme)
    assert SCHEME.name == "snowflake" and SCHEME.snowflake_layout == TWITTER
    assert SCHEME.formats == ("decimal", "hex")
    example = SCHEME.parse(SCHEME.example)
    assert set(SCHEME.captions) == set(SCHEME.fields(example))
    assert SCHEME.token_pattern is not None
    line = f"order {SCHEME.example} by 0x1f and ffffffffffff0000 at port 8080"
    assert re.findall(SCHEME.token_pattern, line) == [SCHEME.example, "0x1f", "ffffffffffff0000"]
    assert [option.name for option in SCHEME.decode_options] == ["layout"]
    assert SCHEME.settings_model is SnowflakeSettings
    assert [field.name for field in SONYFLAKE.fields()] == ["reserved", "timestamp_ms", "sequence", "worker_id"]
    assert SnowflakeScheme(SONYFLAKE).native_unit_ns == 10 * MS
    assert SnowflakeScheme(SONYFLAKE).snowflake_layout.worker_max == 65535


def test_configured_and_decode_options() -> None:
    assert SCHEME.configured(node_settings()) is SCHEME
    discord = SCHEME.configured(node_settings(snowflake_layout="discord"))
    assert discord.snowflake_layout == DISCORD and SCHEME.snowflake_layout == TWITTER
    assert SCHEME.with_decode_options() is SCHEME
    assert SCHEME.with_decode_options(layout="sonyflake").fields(1 << 24)["layout"] == "sonyflake"
    custom = SCHEME.with_decode_options(layout="custom:0:1:41/10/12")
    assert custom.fields(1 << 22)["timestamp_ms"] == 1
    with pytest.raises(
        InvalidOptionError,
        match=r"layout must be twitter, discord, instagram, sonyflake, js53 or "
        r"custom:EPOCH_MS:UNIT_MS:T/W/S with T\+W\+S <= 63, got 'foo'",
    ):
        SCHEME.with_decode_options(layout="foo")
    with pytest.raises(InvalidOptionError, match=r"T\+W\+S must be at most 63, got 41\+10\+13 = 64"):
        SCHEME.with_decode_options(layout="custom:0:1:41/10/13")
    with pytest.raises(InvalidOptionError, match="snowflake takes only the layout decode option, got mode"):
        SCHEME.with_decode_options(mode="spread")


def test_native_timestamp_counts_layout_units_from_the_unix_epoch() -> None:
    sony = SnowflakeScheme(SONYFLAKE)
    assert sony.native_from_ns(NOW_MS * MS) == NOW_MS // 10
    custom = SnowflakeScheme(Layout.parse("custom:5:10:41/10/12"))  # epoch not a whole number of units
    assert custom.native_from_ns(5 * MS) == 0 + 0 and custom.native_from_ns(15 * MS) == 1
    generator = unspread(SONYFLAKE, [1], clock=FakeClock(NOW_MS))
    batch = generator.generate(3)
    assert batch.high_water == generator.high_water == sony.native_from_ns(NOW_MS * MS)


def test_identity_pool() -> None:
    plan = SCHEME.identity_pool(Settings())
    assert plan == IdentityPool(
        scheme="snowflake",
        kind="worker_id",
        space=(0, 1023),
        minimum=0,
        maximum=1023,
        key_prefix="idmint/snowflake/twitter/",
        mark_prefix="idmint/marks/snowflake/twitter/",
        static=None,
        group="twitter",
        claims=1,
    )
    plan = SCHEME.identity_pool(Settings(snowflake_layout="sonyflake", snowflake_pool="100-199", snowflake_workers=4))
    assert (plan.minimum, plan.maximum, plan.claims, plan.group) == (100, 199, 4, "sonyflake")
    assert plan.key_prefix == "idmint/snowflake/sonyflake/"
    plan = SCHEME.identity_pool(Settings(snowflake_layout="custom:0:1:45/8/10", snowflake_worker_id=7))
    assert (plan.static, plan.maximum, plan.claims) == (7, 255, 1)
    assert plan.key_prefix == "idmint/snowflake/custom-0-1-45-8-10/"
    assert plan.mark_prefix == "idmint/marks/snowflake/custom-0-1-45-8-10/"


def test_describe_and_new_generator() -> None:
    settings_ = node_settings(snowflake_layout="sonyflake", snowflake_workers=3)
    described = SCHEME.describe(settings_)
    assert described["limits"] == {
        "ids_per_unit_per_worker_id": 256,
        "unit_ms": 10,
        "worker_ids": 3,
        "ids_per_second": 76800,
    }
    assert described["snowflake_layout"]["name"] == "sonyflake"
    generator = SCHEME.new_generator(settings_, [9, 4, 6], -1, FakeClock(NOW_MS))
    assert isinstance(generator, Generator) and generator.layout == SONYFLAKE
    assert generator.worker_ids == (4, 6, 9)


SETTINGS_REJECTS = [
    (
        {"snowflake_layout": "foo"},
        "snowflake_layout must be twitter, discord, instagram, sonyflake, js53 or "
        "custom:EPOCH_MS:UNIT_MS:T/W/S with T+W+S <= 63, got 'foo'",
    ),
    (
        {"snowflake_layout": "custom:0:1:41/11/12"},
        "got 'custom:0:1:41/11/12': T+W+S must be at most 63, got 41+11+12 = 64",
    ),
    ({"snowflake_pool": "5"}, "snowflake_pool must be LOW-HIGH with 0 <= LOW <= HIGH, got '5'"),
    ({"snowflake_pool": "9-3"}, "snowflake_pool must be LOW-HIGH with 0 <= LOW <= HIGH, got '9-3'"),
    ({"snowflake_pool": "0-1024"}, "snowflake_pool must lie within 0..1023 (layout twitter), got '0-1024'"),
    ({"snowflake_worker_id": 1024}, "snowflake_worker_id must be in 0..1023 (layout twitter), got 1024"),
    ({"snowflake_worker_id": -1}, "greater than or equal to 0"),
    (
        {"snowflake_worker_id": 3, "snowflake_workers": 2},
        "snowflake_workers must be 1 when snowflake_worker_id is set statically, got 2",
    ),
    ({"snowflake_workers": 0}, "greater than or equal to 1"),
    (
        {"snowflake_pool": "10-11", "snowflake_workers": 3},
        "snowflake_workers must be at most the pool's size (2), got 3",
    ),
]


@pytest.mark.parametrize(("overrides", "message"), SETTINGS_REJECTS)
def test_settings_rejects(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        node_settings(**overrides)


def test_settings_defaults_and_descriptions() -> None:
    settings_ = node_settings()
    assert (
        settings_.snowflake_layout,
        settings_.snowflake_worker_id,
        settings_.snowflake_workers,
        settings_.snowflake_pool_bounds,
    ) == ("twitter", None, 1, (0, 1023))
    assert node_settings(snowflake_layout="sonyflake").snowflake_pool_bounds == (0, 65535)
    assert node_settings(snowflake_pool=" 3 - 7 ").snowflake_pool == "3-7"
    assert all(field.description for field in SnowflakeSettings.model_fields.values())


# --- peer interop ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", [TWITTER, DISCORD])
def test_snowflake_id_peer_ids_decode_here(layout: Layout) -> None:
    scheme = SnowflakeScheme(layout)
    peer = PeerSnowflakeGenerator(421, epoch=layout.epoch_ms)
    for _ in range(5000):
        value = next(peer)
        parsed = PeerSnowflake.parse(value, layout.epoch_ms)
        assert scheme.fields(scheme.parse(str(value))) == {
            "layout": layout.name,
            "timestamp_ms": parsed.milliseconds,
            "worker_id": 421,
            "sequence": parsed.seq,
        }
        assert scheme.parse(f"{value:016x}") == scheme.parse(hex(value)) == value


@pytest.mark.parametrize("layout", [TWITTER, DISCORD])
def test_ids_issued_here_are_accepted_by_snowflake_id(layout: Layout) -> None:
    generator = unspread(layout, [5, 1000], clock=FakeClock(NOW_MS))
    batch = generator.generate(8192)
    for value in map(int, batch.encode("decimal").split()):
        parsed = PeerSnowflake.parse(value, layout.epoch_ms)
        assert parsed.milliseconds == NOW_MS
        assert parsed.instance in (5, 1000)
        assert parsed.value == value


def test_sonyflake_peer_ids_decode_here() -> None:
    start = datetime.datetime(2014, 9, 1, tzinfo=datetime.UTC)
    peer = Sonyflake(machine_id=4242, start_time=start)
    scheme = SnowflakeScheme(SONYFLAKE)
    for _ in range(2000):
        value = peer.next_id()
        time_units, sequence, machine_id = peer.decompose(value)
        assert scheme.fields(scheme.parse(str(value))) == {
            "layout": "sonyflake",
            "timestamp_ms": SONYFLAKE.epoch_ms + time_units * 10,
            "worker_id": machine_id,
            "sequence": sequence,
        }
        assert machine_id == 4242
        assert scheme.timestamp_ns(value) // MS == int(peer.to_time(value).timestamp() * 1000)


def test_ids_issued_here_are_accepted_by_sonyflake() -> None:
    start = datetime.datetime(2014, 9, 1, tzinfo=datetime.UTC)
    peer = Sonyflake(machine_id=1, start_time=start)
    generator = unspread(SONYFLAKE, [7, 300], clock=FakeClock(NOW_MS))
    batch = generator.generate(512)
    for value in batch.values():
        time_units, sequence, machine_id = peer.decompose(value)
        assert machine_id in (7, 300)
        assert SONYFLAKE.epoch_ms + time_units * 10 == NOW_MS
        assert int(peer.to_time(value).timestamp() * 1000) == NOW_MS
        assert peer.compose(peer.to_time(value), sequence, machine_id) == value


# --- generator ---------------------------------------------------------------------------------------------------


def test_one_unit_holds_two_to_the_s_per_worker_id_then_a_partial_batch() -> None:
    clock = FakeClock(NOW_MS)
    generator = unspread(TWITTER, [3], clock=clock)
    batch = generator.generate(5000)
    assert batch.count == 4096
    assert [TWITTER.unpack(v) for v in batch.values()] == [
        (NOW_MS - TWITTER.epoch_ms, 3, sequence) for sequence in range(4096)
    ]
    assert generator.wait_ns() == MS
    assert generator.generate(1).count == 0
    assert generator.stats.sequence_exhausted == 2
    clock.ns += 400_000  # still the same ms
    assert generator.wait_ns() == 600_000
    clock.set_ms(NOW_MS + 1)
    assert generator.wait_ns() == 0
    assert TWITTER.unpack(generator.generate(1).values()[0]) == (NOW_MS + 1 - TWITTER.epoch_ms, 3, 0)


def test_partial_batches_continue_the_sequence() -> None:
    generator = unspread(DISCORD, [1], clock=FakeClock(NOW_MS))
    first = generator.generate(10).values()
    second = generator.generate(10).values()
    assert [DISCORD.unpack(v)[2] for v in first + second] == list(range(20))


def test_several_worker_ids_multiply_the_cap_in_increasing_order() -> None:
    for layout in (TWITTER, SONYFLAKE):
        generator = unspread(layout, [9, 2, 5], clock=FakeClock(NOW_MS))
        batch = generator.generate(10**6)
        assert batch.count == 3 * layout.ids_per_unit
        values = batch.values()
        assert values == sorted(set(values))
        assert {layout.unpack(v)[1] for v in values} == {2, 5, 9}
        assert {layout.unpack(v)[0] for v in values} == {(NOW_MS - layout.epoch_ms) // layout.unit_ms}


def test_sonyflake_unit_is_ten_ms() -> None:
    clock = FakeClock(NOW_MS)
    generator = unspread(SONYFLAKE, [1], clock=clock)
    assert generator.generate(300).count == 256
    assert generator.wait_ns() == 10 * MS
    clock.set_ms(NOW_MS + 9)
    assert generator.generate(1).count == 0 and generator.wait_ns() == MS
    clock.set_ms(NOW_MS + 10)
    assert SONYFLAKE.unpack(generator.generate(1).values()[0])[0] == (NOW_MS + 10 - SONYFLAKE.epoch_ms) // 10


def test_clock_rollback_keeps_the_last_unit_and_continues() -> None:
    clock = FakeClock(NOW_MS)
    generator = unspread(TWITTER, [1], clock=clock)
    generator.generate(100)
    clock.set_ms(NOW_MS - 20)
    batch = generator.generate(5000)
    assert [TWITTER.unpack(v)[2] for v in batch.values()] == list(range(100, 4096))
    assert {TWITTER.unpack(v)[0] for v in batch.values()} == {NOW_MS - TWITTER.epoch_ms}
    assert generator.stats.clock_rollbacks == 1 and generator.stats.max_rollback_ns == 20 * MS
    assert generator.generate(1).count == 0
    assert generator.wait_ns() == 21 * MS


def test_floor_is_respected() -> None:
    clock = FakeClock(NOW_MS)
    floor = NOW_MS + 5  # native units of twitter = Unix ms
    generator = unspread(TWITTER, [1], clock=clock, floor=floor)
    assert generator.generate(10).count == 0
    assert generator.wait_ns() == 6 * MS
    assert generator.high_water == floor
    clock.set_ms(NOW_MS + 6)
    batch = generator.generate(10)
    assert {TWITTER.timestamp_ms(TWITTER.unpack(v)[0]) for v in batch.values()} == {NOW_MS + 6}
    assert generator.high_water == batch.high_water == NOW_MS + 6


def test_lookback_fills_never_used_units_only_above_the_floor() -> None:
    clock = FakeClock(NOW_MS)
    generator = unspread(TWITTER, [1], clock=clock, floor=NOW_MS - 3, lookback_units=10)
    batch = generator.generate(4096 * 3 + 1)
    units = [TWITTER.timestamp_ms(TWITTER.unpack(v)[0]) for v in batch.values()]
    assert units[0] == NOW_MS - 2 and units[-1] == NOW_MS and batch.count == 3 * 4096


def test_timestamp_limits() -> None:
    early = SnowflakeGenerator(TWITTER, [1], clock=FakeClock(TWITTER.epoch_ms - 1))
    with pytest.raises(TimeRangeError, match="snowflake layout twitter has not begun: its epoch 2010-11-04T01:42:54"):
        early.generate(1)
    with pytest.raises(TimeRangeError, match="has not begun"):
        early.check_time()
    late_ms = TWITTER.timestamp_ms(TWITTER.time_max + 1)
    late = SnowflakeGenerator(TWITTER, [1], clock=FakeClock(late_ms))
    with pytest.raises(TimeRangeError, match="twitter ran out of time: its 41-bit time field of 1 ms units ended at"):
        late.generate(1)
    with pytest.raises(TimeRangeError, match="ran out of time"):
        late.check_time()
    SnowflakeGenerator(TWITTER, [1], clock=FakeClock(late_ms - 1)).check_time()  # its last ms still issues


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ([], {}, "worker_ids must hold at least one worker ID"),
        ([1024], {}, "worker ID must be in 0..1023 (layout twitter), got 1024"),
        ([-1], {}, "worker ID must be in 0..1023"),
        ([3, 3, 4], {}, "worker IDs must be distinct, got 3 more than once"),
        ([1], {"floor": -2}, "floor must be >= -1 (1 ms units), got -2"),
        ([1], {"lookback_units": -1}, "lookback_units must be >= 0, got -1"),
    ],
)
def test_generator_configuration_validated(args: list[int], kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        unspread(TWITTER, args, **kwargs)


@pytest.mark.parametrize(
    ("count", "options", "message"),
    [
        (0, {}, "count must be in 1..16777216 for snowflake, got 0"),
        (False, {}, "count must be in 1..16777216 for snowflake, got False"),
        (1, {"layout": "discord"}, "snowflake takes no options, got layout"),
    ],
)
def test_generate_arguments_validated(count: int, options: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidOptionError, match=re.escape(message)):
        unspread(TWITTER, [1], clock=FakeClock(NOW_MS)).generate(count, **options)


@pytest.mark.parametrize("layout", [TWITTER, SONYFLAKE, INSTAGRAM, Layout.parse("custom:0:3:44/4/15")])
def test_a_million_ids_monotonic_with_rollback_and_exhaustion_no_duplicate(layout: Layout) -> None:
    clock = FakeClock(NOW_MS)
    generator = unspread(layout, [6, 1, 3], clock=clock, lookback_units=2)
    issued: list[int] = []
    steps = [1, 0, 0, -7, 1, 1, 2, 0, -1, 3, 50, -40, 0]
    step = 0
    while len(issued) < 1_000_000:
        batch = generator.generate(20_000)
        issued.extend(batch.values())
        if batch.count < 20_000:
            clock.ns += generator.wait_ns()
        clock.ns += steps[step % len(steps)] * layout.unit_ms * MS
        step += 1
    assert all(a < b for a, b in zip(issued, issued[1:]))
    assert generator.stats.clock_rollbacks > 0 and generator.stats.sequence_exhausted > 0


# --- batches -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 8, 9, 1000, 65536])
@pytest.mark.parametrize(
    ("layout", "worker_ids"),
    [
        (TWITTER, [1]),
        (TWITTER, list(range(0, 1024, 64))),
        (SONYFLAKE, [65535, 0, 77]),
        (INSTAGRAM, [8191]),
        (Layout.parse(f"custom:{NOW_MS - 1000}:1:22/1/40"), [1]),
        (Layout.parse("custom:1000:250:42/21/0"), list(range(20))),
    ],
)
def test_batch_encode_equals_scalar_format(layout: Layout, worker_ids: list[int], size: int) -> None:
    clock = FakeClock(NOW_MS)
    generator = unspread(layout, worker_ids, clock=clock, lookback_units=1000)
    batch = generator.generate(size) if size else SnowflakeBatch(layout, worker_ids, [])
    assert isinstance(batch, Batch) and batch.count == min(size, batch.count)
    values = batch.values()
    assert len(values) == batch.count and values == sorted(set(values))
    scheme = SnowflakeScheme(layout)
    for fmt in ("decimal", "hex", "canonical"):
        expected = "".join(scheme.format(value, fmt) + "\n" for value in values).encode("ascii")
        assert batch.encode(fmt) == expected


def test_batch_crossing_a_power_of_ten_and_tiny_values() -> None:
    """Decimal widths change inside these batches (10**12, and values below 10**4): the text is still exact."""
    layout = Layout.parse("custom:0:1:41/0/22")
    unit = 10**12 >> 22  # its sequences cross 10**12
    for runs in ([(unit, 2_700_000, 20_000)], [(0, 0, 20_000)], [(0, 9_990, 5), (1, 0, 100)]):
        batch = SnowflakeBatch(layout, [0], runs)
        for fmt in ("decimal", "hex"):
            expected = "".join(SnowflakeScheme(layout).format(v, fmt) + "\n" for v in batch.values()).encode()
            assert batch.encode(fmt) == expected


@settings(max_examples=40)
@given(st.lists(packed, max_size=400))
def test_column_encoders_equal_scalar_for_any_values(values: list[int]) -> None:
    import numpy as np

    from app.schemes.snowflake import generator as snowflake_batch

    column = np.array(values, dtype=np.uint64)
    assert snowflake_batch.decimal_text(column) == "".join(f"{v}\n" for v in values).encode()
    assert snowflake_batch.hex_text(column) == "".join(f"{v:016x}\n" for v in values).encode()
    ascending = np.sort(column)
    assert snowflake_batch.decimal_text_sorted(ascending) == "".join(f"{v}\n" for v in sorted(values)).encode()
    assert snowflake_batch.hex_text_sorted(ascending) == "".join(f"{v:016x}\n" for v in sorted(values)).encode()


def test_batch_rejects_unknown_format() -> None:
    with pytest.raises(InvalidOptionError, match="format must be one of canonical, decimal, hex for snowflake"):
        SnowflakeBatch(TWITTER, [1], [(5, 0, 3)]).encode("base62")


def test_settings_mixin_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """As app.settings.Settings will use it: a BaseSettings with env prefix IDMINT_ mixing SnowflakeSettings in."""
    from pydantic_settings import BaseSettings, SettingsConfigDict

    class NodeSettings(SnowflakeSettings, BaseSettings):
        model_config = SettingsConfigDict(env_prefix="IDMINT_", extra="ignore", validate_default=True)

    monkeypatch.setenv("IDMINT_SNOWFLAKE_LAYOUT", "custom:1420070400000:1:42/9/12")
    monkeypatch.setenv("IDMINT_SNOWFLAKE_WORKERS", "4")
    monkeypatch.setenv("IDMINT_SNOWFLAKE_POOL", "100-511")
    node = NodeSettings()
    assert (node.snowflake_layout, node.snowflake_workers, node.snowflake_pool_bounds) == (
        "custom:1420070400000:1:42/9/12",
        4,
        (100, 511),
    )
    assert SCHEME.identity_pool(Settings()).key_prefix == "idmint/snowflake/custom-1420070400000-1-42-9-12/"
    monkeypatch.setenv("IDMINT_SNOWFLAKE_POOL", "100-512")
    with pytest.raises(ValidationError, match=re.escape("snowflake_pool must lie within 0..511")):
        NodeSettings()


@pytest.mark.parametrize("layout", [TWITTER, SONYFLAKE])
def test_a_caller_waking_every_half_lookback_still_gets_the_full_cap(layout: Layout) -> None:
    """What streams rely on (app.issuing.issuer.STREAM_SLICE_S): sleeping half of ``lookback_ns`` between calls loses no
    unit's slots (sonyflake: 5 units of 10 ms = 50 ms)."""
    clock = FakeClock(NOW_MS - NOW_MS % layout.unit_ms)
    generator = unspread(layout, [1], clock=clock, lookback_units=-(-50 // layout.unit_ms))
    assert generator.lookback_ns == 50 * MS
    generator.generate(1 << 20)  # everything up to now (a fresh generator reaches back over the lookback)
    issued = 0
    for _ in range(40):
        clock.ns += generator.lookback_ns // 2
        issued += generator.generate(1 << 20).count
    per_unit = 1 << layout.sequence_bits
    assert issued == 40 * 25 // layout.unit_ms * per_unit


# -- even shards: a new unit starts at a random slot (Meituan Leaf's rule) ----------------------------------------
CHI2_CRITICAL_P001 = {3: 16.266, 9: 27.877}
"""Chi-square values a uniform sample exceeds with probability 0.001, by degrees of freedom (3: mod 4, 9: mod 10)."""


def chi_square(values: list[int], modulus: int) -> float:
    expected = len(values) / modulus
    counts = [0] * modulus
    for value in values:
        counts[value % modulus] += 1
    return sum((c - expected) ** 2 / expected for c in counts)


def test_start_spread_per_layout() -> None:
    assert TWITTER.start_spread == 100 and DISCORD.start_spread == 100
    assert INSTAGRAM.start_spread == 60  # 1,024 per unit: 60 first slots, 2.9 % of the cap on average
    assert SONYFLAKE.start_spread == 0  # its low bits are the worker ID: a sequence offset cannot spread them
    assert Layout.parse("custom:0:1:53/6/4").start_spread == 0  # 16 per unit: nothing to spare


@pytest.mark.parametrize("layout", [TWITTER, INSTAGRAM])
def test_the_first_id_of_each_unit_spreads_over_id_mod_4_and_mod_10(layout: Layout) -> None:
    clock = FakeClock(NOW_MS)
    generator = SnowflakeGenerator(layout, [5], clock=clock, lookback_units=2, random=random.Random(7).randbytes)
    first_ids = []
    for _ in range(1000):  # one ID per unit, as single requests at low traffic get
        clock.advance_s(0.010)
        first_ids.append(generator.generate(1).values()[0])
    assert chi_square(first_ids, 4) < CHI2_CRITICAL_P001[3]
    assert chi_square(first_ids, 10) < CHI2_CRITICAL_P001[9]
    assert len(set(first_ids)) == 1000 and first_ids == sorted(first_ids)
    sequences = {snowflake.SCHEME.with_decode_options(layout=layout.name).fields(v)["sequence"] for v in first_ids}
    assert sequences <= set(range(layout.start_spread))


def test_a_unit_started_at_an_offset_holds_the_rest_of_its_sequence() -> None:
    clock = FakeClock(NOW_MS)
    generator = SnowflakeGenerator(TWITTER, [3], clock=clock, random=lambda n: bytes([37]) * n)
    assert generator.generate(5000).count == 4096 - 37  # the skipped slots are the cost
    clock.advance_s(0.001)
    batch = generator.generate(5000)
    assert batch.count == 4096 - 37 and SCHEME.fields(batch.values()[0])["sequence"] == 37


# -- layouts below 63 bits: JavaScript-safe IDs ---------------------------------------------------------------------
def test_js53_keeps_every_id_below_2_to_the_53_for_69_years_with_32_workers_at_128k_per_second() -> None:
    assert JS53.total_bits == 53 and JS53.value_max == 2**53 - 1
    assert JS53.worker_max + 1 == 32 and JS53.ids_per_unit * 1000 // JS53.unit_ms == 128_000
    end_ms = JS53.timestamp_ms(JS53.time_max)
    assert (end_ms - JS53.epoch_ms) / (365.25 * 86_400_000) > 69
    generator = SnowflakeGenerator(JS53, [31], clock=FakeClock(end_ms))
    values = generator.generate(128).values()
    assert max(values) <= 2**53 - 1
    assert [float(v) == v for v in values] == [True] * 128  # a double holds each exactly


def test_a_custom_layout_of_fewer_bits_round_trips_and_refuses_wider_ids() -> None:
    layout = Layout.parse("custom:1735689600000:1:40/6/6")
    scheme = SnowflakeScheme(layout)
    generator = SnowflakeGenerator(layout, [9], clock=FakeClock(1_764_000_000_000))
    for value in generator.generate(50).values():
        assert value < 2**52 and scheme.parse(scheme.format(value, "decimal")) == value
        assert scheme.fields(value)["worker_id"] == 9
    assert [f.bits for f in scheme.layout][0] == "63..52"
    with pytest.raises(InvalidIdError, match=r"below 2\*\*52 \(T\+W\+S = 52 bits\), got 4503599627370496"):
        scheme.parse(str(2**52))
    with pytest.raises(InvalidIdError, match=r"below 2\*\*53"):
        SnowflakeScheme(JS53).parse(SCHEME.example)  # a twitter snowflake is wider than js53


def test_the_decimal_digit_table_is_built_once() -> None:
    """The 10,000-entry table of 4-digit groups is made on first use and kept (built per batch, it cost about
    20 ms of every count=1000 answer)."""
    from app.schemes.snowflake import generator as snowflake_batch

    assert snowflake_batch._dec4() is snowflake_batch._dec4()
