"""Periods of a resetting sequence: which day, month or year an instant falls in, in the sequence's time zone.

A sequence created with ``reset`` ``daily``, ``monthly`` or ``yearly`` counts from ``start`` again in every period;
``never`` (the default) has one period that never ends. Periods follow the civil calendar of an IANA time zone
(``time_zone``, default ``UTC``, read through :mod:`zoneinfo`), daylight saving included.

When a period begins. The period of the day (month, year) D begins at the **first instant whose local wall-clock
time reads D 00:00 or later**, and ends where the next one begins, so periods are back to back, never overlap and
never go backwards, whatever the zone does at midnight:

- midnight skipped (a daylight-saving change at 00:00, as in America/Sao_Paulo before 2019, Asia/Beirut, or
  America/Havana in spring): the day begins at the change (the wall clock jumps from 23:59:59 to 01:00:00), so that
  day is 23 hours long;
- midnight repeated (a change at 01:00 back to 00:00, as in America/Havana in autumn): the day begins at the first
  00:00; the repeated hour belongs to it (it is 25 hours long);
- a change back across midnight (the wall clock reads the previous date again for a while): those instants still
  belong to the new day, since it has begun;
- a day skipped whole (Pacific/Apia skipped 2011-12-30): that period is empty; the one before ends where the next
  existing one begins.

Instants are nanoseconds since the Unix epoch, as the one clock reads them (:data:`app.schemes.base.Clock`); the
instants this module returns are whole seconds (every time zone change and every midnight is). Instants outside a
signed 64-bit nanosecond clock (1677-09-21..2262-04-11) are :class:`~app.errors.TimeRangeError`.

Shapes: :meth:`PeriodRule.period_at` ``(ns) -> Period``; a :class:`Period` has ``first_day`` (a ``date``; None for
``never``), ``key`` (``"2026-11-27"``, the first day in ISO 8601: what the API answers as ``"period"`` and storage
keys its allocation point by; None for ``never``), ``starts_at_ns`` and ``ends_at_ns`` (the instant the next period
begins). Pure: no I/O beyond reading the time zone data once per rule.

May import: :mod:`app.errors` only.
"""

from __future__ import annotations

import functools
import re
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import Literal

from app.errors import InvalidOptionError, TimeRangeError

Reset = Literal["never", "daily", "monthly", "yearly"]
RESETS: tuple[Reset, ...] = ("never", "daily", "monthly", "yearly")
DEFAULT_RESET: Reset = "never"
DEFAULT_TIME_ZONE = "UTC"

NS_IN_S = 1_000_000_000
INSTANT_NS_MIN = -(2**63)
INSTANT_NS_MAX = 2**63 - 1
"""The instants a period is computed for: a signed 64-bit ns clock's (1677-09-21..2262-04-11)."""
TIME_ZONE_CHARS_MAX = 64
_TIME_ZONE = re.compile(r"[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*")
NOT_ZONES = frozenset({"localtime", "posixrules", "Factory"})
"""Names :func:`zoneinfo.available_timezones` may list that are no civil time zone: ``localtime`` is each
machine's own setting (nodes would disagree), ``posixrules`` a compiler default, ``Factory`` a placeholder."""


@functools.cache
def time_zones() -> frozenset[str]:
    """Every name :func:`check_time_zone` accepts: this machine's IANA time zone data, less :data:`NOT_ZONES`
    (read once: the walk over the data's files takes tens of milliseconds)."""
    return frozenset(zoneinfo.available_timezones()) - NOT_ZONES


def check_time_zone(name: object) -> zoneinfo.ZoneInfo:
    """The :class:`zoneinfo.ZoneInfo` of an IANA time zone name (``Europe/Paris``, ``UTC``; exact case).

    Raises InvalidOptionError naming the rule for anything else: not a string, too long, not a zone name, or a name
    this machine's time zone data does not hold (as ``localtime``, which would differ between nodes).
    """
    if not isinstance(name, str) or len(name) > TIME_ZONE_CHARS_MAX or _TIME_ZONE.fullmatch(name) is None:
        shown = repr(name) if not isinstance(name, str) or len(name) <= 80 else repr(name[:80]) + "..."
        raise InvalidOptionError(
            f"time_zone must be an IANA time zone name such as Europe/Paris or UTC (ASCII letters, digits, '_', '+', "
            f"'-' and '/', at most {TIME_ZONE_CHARS_MAX} characters), got {shown}"
        )
    if name not in time_zones():
        raise InvalidOptionError(
            f"time_zone must be an IANA time zone name such as Europe/Paris or UTC (case matters); "
            f"{name!r} is not one this server's time zone data holds"
        )
    return zoneinfo.ZoneInfo(name)


def check_reset(reset: object) -> Reset:
    """``reset`` if it is one of never, daily, monthly, yearly; else InvalidOptionError naming the rule."""
    for known in RESETS:
        if reset == known and isinstance(reset, str):
            return known
    shown = repr(reset)[:80]
    raise InvalidOptionError(f"reset must be one of {', '.join(RESETS)}, got {shown}")


@dataclass(frozen=True)
class Period:
    """One period of a sequence: ``[starts_at_ns, ends_at_ns)``; all None for a sequence that never resets."""

    first_day: date | None
    starts_at_ns: int | None
    ends_at_ns: int | None

    @property
    def key(self) -> str | None:
        """The first day in ISO 8601 (``"2026-11-27"``; ``"2026-11-01"`` for November of a monthly sequence): the
        ``"period"`` of the API's answers and the key storage keeps the period's allocation point under. None for
        ``never``. Stable: it depends on the period alone, never on the zone's offset."""
        return None if self.first_day is None else self.first_day.isoformat()

    def contains(self, ns: int) -> bool:
        if self.starts_at_ns is None or self.ends_at_ns is None:
            return True
        return self.starts_at_ns <= ns < self.ends_at_ns


FOREVER = Period(None, None, None)
"""The one period of a sequence that never resets."""


class PeriodRule:
    """The periods of one sequence: ``reset`` in ``time_zone``. Raises InvalidOptionError for either out of rule.

    :meth:`period_at` remembers the last period it found, so the common case (the clock still inside it) is one
    comparison; it is safe to share between threads (the memory is one reference, replaced whole).
    """

    def __init__(self, reset: str = DEFAULT_RESET, time_zone: str = DEFAULT_TIME_ZONE) -> None:
        self.reset: Reset = check_reset(reset)
        self.time_zone = time_zone
        self.zone = check_time_zone(time_zone)
        self._last: tuple[int, int, Period] = (0, 0, FOREVER)
        """(start ns, end ns, period) of the period last found: one reference, replaced whole."""

    def __repr__(self) -> str:
        return f"PeriodRule({self.reset!r}, {self.time_zone!r})"

    # -- calendar -------------------------------------------------------------------------------------------------
    def first_day_of(self, day: date) -> date:
        """The first day of the period ``day`` lies in (the day itself, the 1st of its month, or January 1st)."""
        if self.reset == "monthly":
            return day.replace(day=1)
        if self.reset == "yearly":
            return day.replace(month=1, day=1)
        return day

    def following(self, first_day: date) -> date:
        """The first day of the period after the one beginning ``first_day``."""
        if self.reset == "daily":
            return date.fromordinal(first_day.toordinal() + 1)
        if self.reset == "monthly":
            return date(first_day.year + first_day.month // 12, first_day.month % 12 + 1, 1)
        return date(first_day.year + 1, 1, 1)

    def _local(self, s: int) -> datetime:
        return datetime.fromtimestamp(s, UTC).astimezone(self.zone).replace(tzinfo=None)

    def starts_at(self, day: date) -> int:
        """The first instant (seconds since the epoch) whose local wall-clock time in this zone reads ``day``
        00:00 or later; see the module for skipped and repeated midnights."""
        wall = datetime.combine(day, time(0))
        earlier = int(wall.replace(tzinfo=self.zone, fold=0).timestamp())  # the first of a repeated midnight
        if self._local(earlier) == wall:
            return earlier
        # midnight falls in a gap: the first instant past it is the change itself, between the two readings of
        # the skipped wall time (fold=1 uses the offset after the change, so it maps before it)
        low = int(wall.replace(tzinfo=self.zone, fold=1).timestamp())
        high = earlier
        if low >= high or self._local(low) >= wall or self._local(high) < wall:  # no zone does this; never guess
            raise TimeRangeError(f"time zone {self.time_zone}: cannot place the start of {day} (low {low}, {high})")
        while high - low > 1:  # invariant: local(low) < wall <= local(high)
            mid = (low + high) // 2
            if self._local(mid) >= wall:
                high = mid
            else:
                low = mid
        return high

    # -- periods --------------------------------------------------------------------------------------------------
    def period_at(self, ns: int) -> Period:
        """The period containing the instant ``ns`` (nanoseconds since the epoch). Raises TimeRangeError outside
        -2**63..2**63-1 ns."""
        start_ns, end_ns, last = self._last
        if start_ns <= ns < end_ns:
            return last
        if self.reset == "never":
            return FOREVER
        if not INSTANT_NS_MIN <= ns <= INSTANT_NS_MAX:
            raise TimeRangeError(
                f"the clock reads {ns} ns since the epoch, outside -2**63..2**63-1 (1677..2262): no period can be found"
            )
        s = ns // NS_IN_S
        first_day = self.first_day_of(self._local(s).date())
        start = self.starts_at(first_day)
        following = self.following(first_day)
        end = self.starts_at(following)
        while end <= s:  # the wall clock went back across midnight: the later period has begun all the same
            first_day, start, following = following, end, self.following(following)
            end = self.starts_at(following)
        period = Period(first_day, start * NS_IN_S, end * NS_IN_S)
        self._last = (start * NS_IN_S, end * NS_IN_S, period)
        return period

    def period_of_day(self, first_day: date) -> Period:
        """The period beginning ``first_day`` (which must be a period's first day: InvalidOptionError otherwise);
        FOREVER for ``never``. Its instants may be empty (a skipped day)."""
        if self.reset == "never":
            return FOREVER
        if self.first_day_of(first_day) != first_day:
            raise InvalidOptionError(f"{first_day} is not the first day of a {self.reset} period")
        start = self.starts_at(first_day)
        return Period(first_day, start * NS_IN_S, self.starts_at(self.following(first_day)) * NS_IN_S)
