"""Business settings: defaults that leave today's sequences (and their stored records) as they are, one table of
settings refused with the rule each breaks, the request body model, and runs with an increment."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.api.params import parse_body
from app.errors import InvalidOptionError, SequenceOverflowError
from app.sequences.spec import (
    INCREMENT_MAX,
    SequenceOptions,
    SequenceSpec,
    advance,
    limits,
    run_last,
)
from app.storage.sequences import MAX_VALUE, Point, SequenceRecord


def test_defaults_are_todays_sequences() -> None:
    spec = SequenceSpec.build()
    assert spec == SequenceSpec() == SequenceOptions().spec()
    assert spec.as_dict() == {
        "increment": 1,
        "reset": "never",
        "time_zone": "UTC",
        "template": None,
        "check_digit": None,
        "mode": "cached",
    }
    assert spec.stored() == {} and spec.compiled is None and spec.periods.reset == "never"


def test_todays_records_read_as_the_default() -> None:
    stored = SequenceRecord("orders", 1, 1000, Point(5)).to_json()
    assert stored == b'{"start":1,"cache":1000,"next":5}'
    assert SequenceSpec.from_stored(json.loads(stored)) == SequenceSpec()


SPECS = st.builds(
    lambda increment, reset_template, mode: SequenceSpec.build(increment=increment, mode=mode, **reset_template),
    st.integers(1, INCREMENT_MAX),
    st.sampled_from(
        [
            {},
            {
                "reset": "daily",
                "time_zone": "Europe/Paris",
                "template": "INV-{yyyy}{mm}{dd}-{seq:06}{check}",
                "check_digit": "luhn",
            },
            {"reset": "monthly", "template": "FV/{yy}/{mm}/{seq}"},
            {"reset": "yearly", "time_zone": "America/Havana"},
            {"template": "ORD-{seq:08}{check}", "check_digit": "mod97"},
        ]
    ),
    st.sampled_from(["cached", "gapless"]),
)


@given(SPECS)
def test_stored_settings_round_trip(spec: SequenceSpec) -> None:
    record = {"start": 1, "cache": 1000, "next": 1, **spec.stored()}
    assert SequenceSpec.from_stored(json.loads(json.dumps(record))) == spec
    assert all(spec.as_dict()[k] == v for k, v in spec.stored().items())


def test_a_full_spec() -> None:
    spec = SequenceSpec.build(
        increment=5,
        reset="daily",
        time_zone="Europe/Paris",
        template="INV-{yyyy}{mm}{dd}-{seq:06}{check}",
        check_digit="damm",
        mode="gapless",
    )
    assert spec.stored() == {
        "increment": 5,
        "reset": "daily",
        "time_zone": "Europe/Paris",
        "template": "INV-{yyyy}{mm}{dd}-{seq:06}{check}",
        "check_digit": "damm",
        "mode": "gapless",
    }
    assert spec.compiled is not None and spec.compiled.check is not None and spec.compiled.check.name == "damm"
    assert spec.periods.time_zone == "Europe/Paris" and spec.compiled is spec.compiled
    assert SequenceSpec.build(reset="daily", time_zone=None).time_zone == "UTC"


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"increment": 0}, "increment must be an integer in 1..2147483648 (2**31), got 0"),
        ({"increment": INCREMENT_MAX + 1}, "increment must be an integer in 1..2147483648"),
        ({"increment": -1}, "increment must be an integer"),
        ({"increment": True}, "increment must be an integer"),
        ({"increment": "2"}, "increment must be an integer"),
        ({"increment": 2.0}, "increment must be an integer"),
        ({"reset": "weekly"}, "reset must be one of never, daily, monthly, yearly, got 'weekly'"),
        ({"reset": None}, "reset must be one of"),
        ({"reset": "daily", "time_zone": "Mars/Base"}, "time_zone must be an IANA time zone name"),
        ({"reset": "daily", "time_zone": "localtime"}, "time_zone must be an IANA time zone name"),
        ({"time_zone": "Europe/Paris"}, "time_zone applies to a sequence that resets"),
        ({"check_digit": "verhoeff"}, "check_digit must be one of luhn, damm, mod97"),
        ({"check_digit": "luhn"}, "check_digit needs a template with a {check} field"),
        ({"template": "INV-{seq}", "reset": "daily"}, "a daily template must contain its period's"),
        ({"template": "INV-{seq}{check}"}, "{check} needs the check_digit setting"),
        ({"template": "{seq:099}"}, "N in 1..19"),
        ({"template": "x" * 10_000}, "at most 128 characters"),
        ({"template": 5}, "template must be a string"),
        ({"mode": "strict"}, "mode must be one of cached, gapless, got 'strict'"),
        ({"mode": None}, "mode must be one of cached, gapless"),
    ],
)
def test_settings_refused(settings: dict[str, object], fragment: str) -> None:
    with pytest.raises(InvalidOptionError) as caught:
        SequenceSpec.build(**settings)
    assert fragment in str(caught.value)


def test_an_unreadable_stored_record_is_an_error_never_a_default() -> None:
    with pytest.raises(ValueError, match="increment must be"):
        SequenceSpec.from_stored({"start": 1, "cache": 1000, "next": 1, "increment": -3})


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b'{"increment": "5"}', "increment: Input should be a valid integer"),
        (b'{"increment": 0}', "increment must be an integer in 1..2147483648"),
        (b'{"reset": "weekly"}', "reset: Input should be 'never', 'daily', 'monthly' or 'yearly'"),
        (b'{"check_digit": "crc"}', "check_digit: Input should be 'luhn', 'damm' or 'mod97'"),
        (b'{"mode": "fast"}', "mode: Input should be 'cached' or 'gapless'"),
        (b'{"step": 2}', "unknown member 'step'"),
        (b'{"template": "{yyyy}-{seq}"}', "has no period"),
        (b'{"template": "INV-{seq}", "reset": "monthly", "time_zone": "Europe/Paris"}', "a monthly template must"),
    ],
)
def test_request_bodies_refused(body: bytes, fragment: str) -> None:
    with pytest.raises(InvalidOptionError) as caught:
        parse_body(body, SequenceOptions, "{...}").spec()
    assert fragment in str(caught.value)


def test_request_body_accepted() -> None:
    body = b'{"reset": "monthly", "time_zone": "Europe/Paris", "template": "FV/{yy}/{mm}/{seq:04}", "increment": 2}'
    spec = parse_body(body, SequenceOptions, "{...}").spec()
    assert spec.stored() == {
        "increment": 2,
        "reset": "monthly",
        "time_zone": "Europe/Paris",
        "template": "FV/{yy}/{mm}/{seq:04}",
    }
    schema = SequenceOptions.model_json_schema()["properties"]
    assert schema["reset"]["enum"] == ["never", "daily", "monthly", "yearly"]
    assert set(limits()) >= {"increment", "reset", "check_digit", "mode", "template_fields", "yy_years"}


# -- runs with an increment ------------------------------------------------------------------------------------------


def test_advance() -> None:
    assert advance(1, 10, 1) == ((1, 10, 1), 11)
    assert advance(100, 3, 5) == ((100, 3, 5), 115)
    assert run_last((100, 3, 5)) == 110
    assert advance(MAX_VALUE - 10, 3, 5) == ((MAX_VALUE - 10, 3, 5), MAX_VALUE + 5)
    assert advance(MAX_VALUE - 10, 5, 5, partial=True) == ((MAX_VALUE - 10, 3, 5), MAX_VALUE + 5)
    assert advance(MAX_VALUE, 5, INCREMENT_MAX, partial=True) == (
        (MAX_VALUE, 1, INCREMENT_MAX),
        MAX_VALUE + INCREMENT_MAX,
    )
    with pytest.raises(SequenceOverflowError, match="4 more integers by 5 .* 3 remain"):
        advance(MAX_VALUE - 10, 4, 5)
    with pytest.raises(SequenceOverflowError, match="0 remain"):
        advance(MAX_VALUE + 1, 1, 1, partial=True)
    with pytest.raises(ValueError, match="count >= 1 and step >= 1"):
        advance(1, 0, 1)


@given(st.integers(0, MAX_VALUE), st.integers(1, 2**40), st.integers(1, INCREMENT_MAX))
def test_advance_never_passes_the_maximum_and_runs_meet(point: int, count: int, step: int) -> None:
    run, after = advance(point, count, step, partial=True)  # at or below the maximum, one integer always fits
    first, taken, taken_step = run
    assert first == point and taken_step == step and 1 <= taken <= count
    assert run_last(run) <= MAX_VALUE and after == run_last(run) + step
    assert taken == count or run_last(run) + step > MAX_VALUE  # cut only at the maximum
