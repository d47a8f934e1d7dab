"""Each scheme's "ID at a past time" (:meth:`Scheme.backfill_tick`, :meth:`Scheme.backfill_value`): the value decodes
to the tick asked at the scheme's precision, in every snowflake layout and eight-byte mode; random schemes draw fresh
bits per ID; times outside a scheme's range are refused naming the rule; the identity pool keeps the backfill
reserve out of live draws."""

from __future__ import annotations

import os

import pytest

from app.errors import ConfigError, InvalidOptionError
from app.schemes import get_scheme
from app.schemes.eight_byte import Mode
from app.schemes.snowflake.codec import NAMED_LAYOUTS, Layout
from app.schemes.snowflake.scheme import SnowflakeScheme
from app.schemes.typeid import TypeId
from app.settings import Settings

T_NS = 1_614_834_367_890_123_456  # 2021-03-04T05:06:07.890123456Z


@pytest.mark.parametrize("layout", [*NAMED_LAYOUTS, "custom:1600000000000:4:40/11/12"])
def test_snowflake_backfill_decodes_to_its_unit_in_every_layout(layout: str) -> None:
    settings = Settings(snowflake_layout=layout, backfill_identities=1)
    scheme = SnowflakeScheme(Layout.parse(layout))
    spec = scheme.snowflake_layout
    t_ns = max(T_NS, (spec.epoch_ms + 86_400_000) * 1_000_000 + 123_456)  # js53 begins in 2025
    t_ms = t_ns // 1_000_000
    tick = scheme.backfill_tick(t_ns)
    seq_top = spec.sequence_max
    for identity, sequence in ((0, 0), (spec.worker_max, seq_top)):
        value = scheme.backfill_value(settings, tick, identity, sequence, os.urandom, {})
        fields = scheme.fields(value)
        assert fields["timestamp_ms"] == spec.epoch_ms + (t_ms - spec.epoch_ms) // spec.unit_ms * spec.unit_ms
        assert (fields["worker_id"], fields["sequence"]) == (identity, sequence)
    assert scheme.backfill_sequences(settings) == spec.ids_per_unit


def test_snowflake_refuses_times_outside_its_layout() -> None:
    scheme = SnowflakeScheme(Layout.parse("custom:0:1:20/20/20"))
    with pytest.raises(InvalidOptionError, match="past the end of the scheme's ID space"):
        scheme.backfill_tick(T_NS)
    with pytest.raises(InvalidOptionError, match="before the scheme's epoch"):
        SnowflakeScheme().backfill_tick(0)


@pytest.mark.parametrize("mode", list(Mode))
def test_eight_byte_backfill_in_both_modes(mode: Mode) -> None:
    scheme = get_scheme("eight-byte")
    settings = Settings(cluster_id=5, backfill_identities=1)
    tick = scheme.backfill_tick(T_NS)
    value = scheme.backfill_value(settings, tick, 2047, 63, os.urandom, {"mode": mode})
    assert scheme.fields(value) == {
        "timestamp_ms": T_NS // 1_000_000,
        "sequence": 63,
        "generator_id": 2047,
        "cluster_id": 5,
        "mode": mode.label,
    }


@pytest.mark.parametrize(("name", "unit_ns"), [("uuidv7", 10**6), ("ulid", 10**6), ("ksuid", 10**9), ("typeid", 10**6)])
def test_random_schemes_draw_fresh_bits_for_every_id(name: str, unit_ns: int) -> None:
    scheme = get_scheme(name)
    tick = scheme.backfill_tick(T_NS)
    options = {"prefix": "user"} if name == "typeid" else {}
    settings = Settings()
    values = [scheme.backfill_value(settings, tick, 0, 0, os.urandom, options) for _ in range(2000)]
    assert len(set(map(int, values))) == len(values)
    for value in values[:10]:
        assert scheme.timestamp_ns(value) == T_NS // unit_ns * unit_ns
    if name == "typeid":
        assert isinstance(values[0], TypeId) and scheme.format(values[0], "typeid").startswith("user_")


@pytest.mark.parametrize(
    ("name", "ns", "rule"),
    [
        ("uuidv7", -1, "before the scheme's epoch"),
        ("ulid", -(10**6), "before the scheme's epoch"),
        ("ksuid", 1_399_999_999 * 10**9, r"before the scheme's epoch \(2014-05-13T16:53:20\.000Z\)"),
        (
            "ksuid",
            (1_400_000_000 + 2**32) * 10**9,
            r"past the end of the scheme's ID space \(it ends at 2150-06-19T23:21:36\.000Z\)",
        ),
        ("uuidv7", 2**48 * 10**6, "past the end of the scheme's ID space"),
        ("eight-byte", 2**42 * 10**6, "past the end of the scheme's ID space"),
    ],
)
def test_times_outside_a_scheme_are_refused(name: str, ns: int, rule: str) -> None:
    with pytest.raises(InvalidOptionError, match=rule):
        get_scheme(name).backfill_tick(ns)


def test_schemes_that_do_not_back_date_say_so() -> None:
    for name in ("muid", "hlc-ulid", "siq", "wiji"):
        scheme = get_scheme(name)
        assert not scheme.backfills
        with pytest.raises(InvalidOptionError, match="does not issue IDs at past times"):
            scheme.backfill_value(Settings(siq_domain="example.com"), 0, 0, 0, os.urandom, {})


def test_the_reserve_is_the_top_of_each_region_slice_and_live_issue_never_draws_it() -> None:
    pool = get_scheme("snowflake").identity_pool(Settings(backfill_identities=8, regions=2, region=1))
    assert pool is not None
    assert pool.slice == (512, 1023)
    assert (pool.minimum, pool.maximum) == (512, 1015)
    assert pool.backfill_range == (1016, 1023)
    backfill = pool.backfill_pool()
    assert backfill is not None and (backfill.minimum, backfill.maximum, backfill.claims) == (1016, 1023, 1)
    assert backfill.key_prefix == pool.key_prefix  # one key space: a live claim and a backfill claim cannot meet
    eight_byte = get_scheme("eight-byte").identity_pool(Settings())
    assert eight_byte is not None and eight_byte.backfill_pool() is None


@pytest.mark.parametrize(
    ("settings", "rule"),
    [
        ({"snowflake_worker_id": 1020, "backfill_identities": 4}, "lies in the backfill reserve 1020..1023"),
        ({"snowflake_pool": "1000-1021", "backfill_identities": 4}, "overlaps the backfill reserve 1020..1023"),
        ({"snowflake_layout": "custom:0:1:41/1/21", "backfill_identities": 2}, "leaves live issue 0 worker_id(s)"),
    ],
)
def test_reserve_conflicts_are_config_errors(settings: dict, rule: str) -> None:
    with pytest.raises(ConfigError, match=rule.replace("(", r"\(").replace(")", r"\)")):
        get_scheme("snowflake").identity_pool(Settings(**settings))
