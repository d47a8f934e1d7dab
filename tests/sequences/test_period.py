"""Periods: rollover at midnight in time zones whose midnight is skipped, repeated or moved by daylight saving (the
clock injected), the invariants over random zones and instants, and the zone names refused."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.errors import InvalidOptionError, TimeRangeError
from app.sequences.period import FOREVER, NOT_ZONES, NS_IN_S, Period, PeriodRule, check_time_zone, time_zones
from tests.helpers import FakeClock

HOUR_NS = 3600 * NS_IN_S


def utc_ns(text: str) -> int:
    """ns since the epoch of a UTC time written ``2018-11-04T03:00``."""
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()) * NS_IN_S


def wall(rule: PeriodRule, ns: int) -> str:
    """The local wall-clock time of ``ns`` in the rule's zone, ``2018-11-04 01:00 -02``."""
    return datetime.fromtimestamp(ns // NS_IN_S, rule.zone).strftime("%Y-%m-%d %H:%M %z")


# (zone, day, the day's length in hours, its first instant in UTC, the wall clock then): each found in the zone's
# tz database rules and checked by hand.
DST_DAYS = [
    # America/Sao_Paulo before 2019: daylight saving began at 00:00 (to 01:00): midnight never happened.
    ("America/Sao_Paulo", "2018-11-04", 23, "2018-11-04T03:00", "2018-11-04 01:00 -0200"),
    # ... and ended at 00:00 (back to 23:00): the day before is 25 hours, the hour 23:00 repeated.
    ("America/Sao_Paulo", "2018-02-17", 25, "2018-02-17T02:00", "2018-02-17 00:00 -0200"),
    ("America/Sao_Paulo", "2018-02-18", 24, "2018-02-18T03:00", "2018-02-18 00:00 -0300"),
    # America/Havana: spring 00:00 -> 01:00 (midnight skipped), autumn 01:00 -> 00:00 (midnight repeated: the day
    # begins at the first 00:00 and the repeated hour is its own).
    ("America/Havana", "2018-03-11", 23, "2018-03-11T05:00", "2018-03-11 01:00 -0400"),
    ("America/Havana", "2018-11-04", 25, "2018-11-04T04:00", "2018-11-04 00:00 -0400"),
    ("America/Havana", "2026-11-01", 25, "2026-11-01T04:00", "2026-11-01 00:00 -0400"),
    # Asia/Beirut: spring 00:00 -> 01:00 (skipped), autumn 00:00 -> 23:00 the day before (that day is 25 hours).
    ("Asia/Beirut", "2026-03-29", 23, "2026-03-28T22:00", "2026-03-29 01:00 +0300"),
    ("Asia/Beirut", "2026-10-24", 25, "2026-10-23T21:00", "2026-10-24 00:00 +0300"),
    ("Asia/Beirut", "2026-10-25", 24, "2026-10-24T22:00", "2026-10-25 00:00 +0200"),
    # Europe: the change at 02:00 / 03:00 leaves midnight alone, but the day is 23 or 25 hours long.
    ("Europe/Paris", "2026-03-29", 23, "2026-03-28T23:00", "2026-03-29 00:00 +0100"),
    ("Europe/Paris", "2026-10-25", 25, "2026-10-24T22:00", "2026-10-25 00:00 +0200"),
    ("Europe/London", "2026-03-29", 23, "2026-03-29T00:00", "2026-03-29 00:00 +0000"),
    # Pacific/Apia moved across the date line: 2011-12-30 was skipped whole (an empty period).
    ("Pacific/Apia", "2011-12-29", 24, "2011-12-29T10:00", "2011-12-29 00:00 -1000"),
    ("Pacific/Apia", "2011-12-30", 0, "2011-12-30T10:00", "2011-12-31 00:00 +1400"),
]


@pytest.mark.parametrize(("zone", "day", "hours", "starts", "local"), DST_DAYS)
def test_days_around_daylight_saving(zone: str, day: str, hours: int, starts: str, local: str) -> None:
    rule = PeriodRule("daily", zone)
    period = rule.period_of_day(date.fromisoformat(day))
    assert period.starts_at_ns == utc_ns(starts)
    assert wall(rule, period.starts_at_ns) == local
    assert period.ends_at_ns is not None and period.ends_at_ns - period.starts_at_ns == hours * HOUR_NS
    if hours:
        assert rule.period_at(period.starts_at_ns) == period
        assert rule.period_at(period.ends_at_ns - 1) == period
        assert rule.period_at(period.starts_at_ns - 1).ends_at_ns == period.starts_at_ns


@pytest.mark.parametrize(
    ("zone", "before", "after"),
    [
        ("America/Sao_Paulo", "2018-11-03", "2018-11-04"),  # 23:59:59 -> 01:00:00
        ("America/Havana", "2018-11-03", "2018-11-04"),  # the first of two midnights
        ("Asia/Beirut", "2026-03-28", "2026-03-29"),
        ("Europe/Paris", "2026-03-28", "2026-03-29"),
        ("Europe/Paris", "2026-03-29", "2026-03-30"),  # the 23-hour day ends at midnight CEST
        ("Pacific/Apia", "2011-12-29", "2011-12-31"),  # the skipped day is never a period
    ],
)
def test_rollover_at_midnight_with_an_injected_clock(zone: str, before: str, after: str) -> None:
    rule = PeriodRule("daily", zone)
    boundary = rule.period_of_day(date.fromisoformat(before)).ends_at_ns
    assert boundary is not None
    clock = FakeClock.from_ns(boundary - NS_IN_S, step=NS_IN_S // 2)  # 0.5 s per reading
    seen = [rule.period_at(clock()).key for _ in range(4)]  # -1 s, -0.5 s, 0, +0.5 s
    assert seen == [before, before, after, after]
    assert rule.period_at(boundary).starts_at_ns == boundary


def test_repeated_hour_belongs_to_the_day_that_began() -> None:
    rule = PeriodRule("daily", "America/Havana")
    # 2018-11-04: 00:00 CDT (04:00Z), 01:00 CDT -> 00:00 CST at 05:00Z; 00:30 CST is 05:30Z
    second_half_hour = utc_ns("2018-11-04T05:30")
    assert wall(rule, second_half_hour) == "2018-11-04 00:30 -0500"
    assert rule.period_at(second_half_hour).key == "2018-11-04"
    assert rule.period_at(utc_ns("2018-11-04T03:59")).key == "2018-11-03"


@pytest.mark.parametrize(
    ("reset", "zone", "instant", "key", "starts", "ends"),
    [
        ("monthly", "Europe/Paris", "2026-03-31T21:59", "2026-03-01", "2026-02-28T23:00", "2026-03-31T22:00"),
        ("monthly", "Europe/Paris", "2026-03-31T22:00", "2026-04-01", "2026-03-31T22:00", "2026-04-30T22:00"),
        ("monthly", "UTC", "2024-02-29T12:00", "2024-02-01", "2024-02-01T00:00", "2024-03-01T00:00"),
        ("monthly", "UTC", "2026-12-31T23:59", "2026-12-01", "2026-12-01T00:00", "2027-01-01T00:00"),
        ("yearly", "Pacific/Kiritimati", "2026-12-31T10:00", "2027-01-01", "2026-12-31T10:00", "2027-12-31T10:00"),
        ("yearly", "America/Havana", "2027-01-01T04:59", "2026-01-01", "2026-01-01T05:00", "2027-01-01T05:00"),
        ("daily", "UTC", "1970-01-01T00:00", "1970-01-01", "1970-01-01T00:00", "1970-01-02T00:00"),
    ],
)
def test_months_and_years(reset: str, zone: str, instant: str, key: str, starts: str, ends: str) -> None:
    period = PeriodRule(reset, zone).period_at(utc_ns(instant))
    assert (period.key, period.starts_at_ns, period.ends_at_ns) == (key, utc_ns(starts), utc_ns(ends))
    assert period.first_day == date.fromisoformat(key)


def test_never_has_one_period() -> None:
    rule = PeriodRule()
    assert (rule.reset, rule.time_zone) == ("never", "UTC")
    assert rule.period_at(0) is FOREVER and rule.period_at(2**63 - 1) is FOREVER
    assert FOREVER.key is None and FOREVER.contains(123)
    assert rule.period_of_day(date(2026, 1, 1)) is FOREVER


def test_the_current_period_is_remembered() -> None:
    rule = PeriodRule("daily", "Europe/Paris")
    a = rule.period_at(utc_ns("2026-11-27T12:00"))
    assert rule.period_at(utc_ns("2026-11-27T22:59")) is a
    assert rule.period_at(utc_ns("2026-11-27T23:00")).key == "2026-11-28"


@pytest.mark.parametrize("ns", [-(2**63) - 1, 2**63])
def test_instants_outside_the_clock_range(ns: int) -> None:
    with pytest.raises(TimeRangeError, match="outside -2\\*\\*63..2\\*\\*63-1"):
        PeriodRule("daily").period_at(ns)


def test_the_first_and_last_instants_have_a_period() -> None:
    assert PeriodRule("yearly", "Asia/Tokyo").period_at(2**63 - 1).key == "2262-01-01"
    assert PeriodRule("daily", "America/Havana").period_at(0).key == "1969-12-31"
    assert PeriodRule("yearly").period_at(-(2**63)).key == "1677-01-01"


def test_period_of_day_needs_a_first_day() -> None:
    with pytest.raises(InvalidOptionError, match="not the first day of a monthly period"):
        PeriodRule("monthly").period_of_day(date(2026, 11, 27))


# -- invariants --------------------------------------------------------------------------------------------------

ZONES = sorted(
    {"America/Sao_Paulo", "America/Havana", "Asia/Beirut", "Europe/Paris", "Pacific/Apia", "Australia/Lord_Howe"}
    | {"America/Santiago", "Asia/Tehran", "Africa/Casablanca", "America/St_Johns", "Asia/Kathmandu", "UTC"}
)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["daily", "monthly", "yearly"]),
    st.one_of(st.sampled_from(ZONES), st.sampled_from(sorted(time_zones()))),
    st.integers(0, utc_ns("2100-01-01T00:00")),
)
def test_periods_are_back_to_back(reset: str, zone: str, ns: int) -> None:
    rule = PeriodRule(reset, zone)
    period = rule.period_at(ns)
    assert period.starts_at_ns is not None and period.ends_at_ns is not None and period.first_day is not None
    assert period.starts_at_ns <= ns < period.ends_at_ns and period.contains(ns)
    following = rule.period_at(period.ends_at_ns)
    assert following.first_day is not None and following.first_day > period.first_day
    assert following.starts_at_ns == period.ends_at_ns
    assert rule.period_at(period.starts_at_ns) == period
    assert period.key == period.first_day.isoformat() and rule.first_day_of(period.first_day) == period.first_day
    # the first instant reads the first day at 00:00 or later; the second before it reads an earlier time
    begins = datetime.fromtimestamp(period.starts_at_ns // NS_IN_S, rule.zone).replace(tzinfo=None)
    before = datetime.fromtimestamp(period.starts_at_ns // NS_IN_S - 1, rule.zone).replace(tzinfo=None)
    midnight = datetime.combine(period.first_day, datetime.min.time())
    assert before < midnight <= begins < midnight + timedelta(hours=3)
    assert rule.period_of_day(period.first_day) == period


# -- names -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("utc", "not one this server's time zone data holds"),
        ("Mars/Olympus_Mons", "not one this server's"),
        ("America", "not one this server's"),  # a directory
        ("localtime", "not one this server's"),  # each machine's own setting: nodes would disagree
        ("Factory", "not one this server's"),
        ("posixrules", "not one this server's"),
        ("../etc/passwd", "must be an IANA time zone name"),
        ("/etc/localtime", "must be an IANA time zone name"),
        ("Europe/Paris\x00", "must be an IANA time zone name"),
        ("Europe//Paris", "must be an IANA time zone name"),
        ("Europe/Paris ", "must be an IANA time zone name"),
        ("", "must be an IANA time zone name"),
        ("A" * 65, "at most 64 characters"),
        ("Europe/" + "x" * 10_000, "at most 64 characters"),
        (5, "must be an IANA time zone name"),
        (None, "must be an IANA time zone name"),
    ],
)
def test_time_zones_refused(name: object, fragment: str) -> None:
    with pytest.raises(InvalidOptionError, match="time_zone") as caught:
        check_time_zone(name)
    assert fragment in str(caught.value)
    with pytest.raises(InvalidOptionError, match="time_zone"):
        PeriodRule("daily", name)


@pytest.mark.parametrize("reset", ["weekly", "Daily", "", None, 1])
def test_resets_refused(reset: object) -> None:
    with pytest.raises(InvalidOptionError, match="reset must be one of never, daily, monthly, yearly"):
        PeriodRule(reset)


def test_zone_names_accepted() -> None:
    for name in ("UTC", "Etc/GMT+5", "America/Argentina/Buenos_Aires", "America/Port-au-Prince"):
        assert check_time_zone(name).key == name
    assert not NOT_ZONES & set(time_zones())
    assert Period(date(2026, 1, 1), 0, 1).key == "2026-01-01"
