"""A sequence's business settings: ``increment``, ``reset``, ``time_zone``, ``template``, ``check_digit``
and ``mode``, beside ``start`` and ``cache`` (:mod:`app.storage.sequences`).

Every setting is optional, and the defaults are today's sequences exactly::

    setting       default   rule (each broken rule is an InvalidOptionError, HTTP 422, naming it)
    increment     1         1..2**31 (2,147,483,648); integers go start, start+increment, ...
    reset         never     never | daily | monthly | yearly: each period counts from start again
    time_zone     UTC       an IANA name (Europe/Paris); only with a reset other than never
    template      none      see app.sequences.template; checked against reset and check_digit
    check_digit   none      luhn | damm | mod97; only with a template holding {check}
    mode          cached    cached (a node's Leaf buffer, gaps allowed) | gapless (reserve, commit, void)
    period_grace_s  604800  0..2,678,400 (31 days); only for a gapless sequence that resets: how long after a
                            period ends its voided integers can still be reserved again in it (``reserve`` with
                            ``period``), and so how long its holes may still close

:class:`SequenceSpec` holds them, validated once (:meth:`SequenceSpec.build`); :class:`SequenceOptions` is the
pydantic model of the same members in a request body (``POST /v1/sequences`` adds them to ``name``, ``start``,
``cache``), whose :meth:`~SequenceOptions.spec` builds the spec.

Stored records. A record keeps only the settings that differ from their default (:meth:`SequenceSpec.stored`), so
a sequence created without them is stored byte for byte as today (``{"start", "cache", "next"}``), and every record
stored before this module reads back as the default spec (:meth:`SequenceSpec.from_stored`: a member absent is its
default; a member out of rule is a ValueError, which the stores report as an unreadable record, never as a default).

Runs of integers with an increment. A reservation of ``count`` integers at allocation point ``p`` with increment
``k`` is the run ``(first, count, step) = (p, count, k)``: its i-th integer is ``first + i * step`` (i in
0..count-1), its last ``first + (count - 1) * step``, and the allocation point moves to ``p + count * k`` (the first
integer not reserved): :func:`advance`. So:

- storage keeps the allocation point as an integer (the next value itself, not a slot number), so ``setval``'s
  ``{"next": N}`` and a record read by eye mean what they say, and a change of increment (PATCH) applies from the
  point on: the next integers are ``p, p + k', ...``, all above every integer reserved before (as PostgreSQL's
  ``ALTER SEQUENCE ... INCREMENT``);
- a node's Leaf buffer holds runs ``(first, count, step)`` (its segments gain a ``step``: ``pos`` advances by it);
  ``take(count)`` cuts runs as today, in integers, not in value span; the reservation size rule (cache .. 100 x
  cache) counts integers too;
- handing back the unused top ``(pos, m, step)`` of the latest run is valid when the stored point is still
  ``last + step``: the point goes back to ``pos`` (the same compare-and-set as today, with ``last + 1`` read as
  ``last + step``);
- the overflow rule becomes: a run fits when ``first + (count - 1) * step <= 2**63-1``; cut short (``partial``),
  ``count = (2**63-1 - first) // step + 1``;
- ``next`` answers ``ids`` (and ``text``, with a template) for every integer of every run; ``range`` answers
  ``first``, ``last``, ``count`` and the sequence's ``increment`` (the integers of the range are
  ``first, first+increment, ..., last``).

May import: :mod:`app.errors`, :mod:`app.sequences.period`, :mod:`app.sequences.template`,
:mod:`app.sequences.checkdigit` and the runs of :mod:`app.storage.sequences` (:func:`~app.storage.sequences.advance`,
defined there beside the points it moves, and re-exported here).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from app.errors import InvalidOptionError
from app.sequences.checkdigit import CHECK_DIGIT_NAMES, CheckDigitName
from app.sequences.period import (
    DEFAULT_RESET,
    DEFAULT_TIME_ZONE,
    RESETS,
    PeriodRule,
    Reset,
    check_reset,
    check_time_zone,
)
from app.sequences.template import FIELDS_TEXT, SEQ_WIDTH_MAX, TEMPLATE_CHARS_MAX, YY_FIRST_YEAR, YY_LAST_YEAR, Template
from app.storage.sequences import Run, advance, run_last

Mode = Literal["cached", "gapless"]
MODES: tuple[Mode, ...] = ("cached", "gapless")
INCREMENT_MIN = 1
INCREMENT_MAX = 2**31
"""Bounds of ``increment`` (2**31: as the issue states, and far below the 64-bit range a run must fit in)."""
PERIOD_GRACE_DEFAULT_S = 7 * 86_400
PERIOD_GRACE_MAX_S = 31 * 86_400
"""Bounds of ``period_grace_s`` (seconds): a week by default, at most 31 days (a step that checks every period of
the window reads one document per period in it)."""


def _bool_safe_int(value: object) -> bool:
    return type(value) is int  # True is an int to isinstance; never an increment


@dataclass(frozen=True)
class SequenceSpec:
    """The business settings of one sequence, validated (see the module's table). Build with :meth:`build` or
    :meth:`from_stored`; equality is "same settings" (a create with other settings is a 409)."""

    increment: int = INCREMENT_MIN
    reset: Reset = DEFAULT_RESET
    time_zone: str = DEFAULT_TIME_ZONE
    template: str | None = None
    check_digit: CheckDigitName | None = None
    mode: Mode = "cached"
    period_grace_s: int = PERIOD_GRACE_DEFAULT_S

    @classmethod
    def build(
        cls,
        *,
        increment: object = INCREMENT_MIN,
        reset: object = DEFAULT_RESET,
        time_zone: object = DEFAULT_TIME_ZONE,
        template: object = None,
        check_digit: object = None,
        mode: object = "cached",
        period_grace_s: object = PERIOD_GRACE_DEFAULT_S,
    ) -> SequenceSpec:
        """The spec of these settings. Raises InvalidOptionError naming the first rule broken."""
        if not _bool_safe_int(increment) or not INCREMENT_MIN <= increment <= INCREMENT_MAX:  # type: ignore[operator]
            raise InvalidOptionError(
                f"increment must be an integer in {INCREMENT_MIN}..{INCREMENT_MAX} (2**31), got {str(increment)[:40]}"
            )
        checked_reset = check_reset(reset)
        if time_zone is None:
            time_zone = DEFAULT_TIME_ZONE
        check_time_zone(time_zone)
        if checked_reset == "never" and time_zone != DEFAULT_TIME_ZONE:
            raise InvalidOptionError(
                f"time_zone applies to a sequence that resets (reset daily, monthly or yearly); this one never "
                f"resets, so time_zone must be left out (or {DEFAULT_TIME_ZONE})"
            )
        if check_digit is not None and check_digit not in CHECK_DIGIT_NAMES:
            raise InvalidOptionError(
                f"check_digit must be one of {', '.join(CHECK_DIGIT_NAMES)}, got {str(check_digit)[:40]!r}"
            )
        if template is None:
            if check_digit is not None:
                raise InvalidOptionError(
                    "check_digit needs a template with a {check} field: the check digit is part of the number's text"
                )
        else:
            Template.compile(template, checked_reset, check_digit)
        if mode not in MODES or not isinstance(mode, str):
            raise InvalidOptionError(f"mode must be one of {', '.join(MODES)}, got {str(mode)[:40]!r}")
        if not _bool_safe_int(period_grace_s) or not 0 <= period_grace_s <= PERIOD_GRACE_MAX_S:  # type: ignore[operator]
            raise InvalidOptionError(
                f"period_grace_s must be an integer in 0..{PERIOD_GRACE_MAX_S} (seconds, at most 31 days), got "
                f"{str(period_grace_s)[:40]}"
            )
        if period_grace_s != PERIOD_GRACE_DEFAULT_S and (mode != "gapless" or checked_reset == "never"):
            raise InvalidOptionError(
                "period_grace_s applies to a gapless sequence that resets (mode gapless, reset daily, monthly or "
                "yearly): it is how long after a period ends its voided integers can still be reserved in it; leave "
                "it out otherwise"
            )
        return cls(increment, checked_reset, time_zone, template, check_digit, mode, period_grace_s)  # type: ignore[arg-type]

    # -- derived --------------------------------------------------------------------------------------------------
    @functools.cached_property
    def compiled(self) -> Template | None:
        """The template, compiled (None without one)."""
        return None if self.template is None else Template.compile(self.template, self.reset, self.check_digit)

    @functools.cached_property
    def periods(self) -> PeriodRule:
        """The rule that places an instant in its period (``reset`` in ``time_zone``)."""
        return PeriodRule(self.reset, self.time_zone)

    # -- storage and answers --------------------------------------------------------------------------------------
    def stored(self) -> dict[str, Any]:
        """The members that differ from their default, for the stored record (nothing for today's sequences)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != f.default}

    @property
    def has_periods_to_close(self) -> bool:
        """A gapless sequence that resets: its periods end with their holes, closed after ``period_grace_s``."""
        return self.mode == "gapless" and self.reset != "never"

    def as_dict(self) -> dict[str, Any]:
        """Every member, defaults included (a sequence's description in the API); ``period_grace_s`` only where it
        applies (:attr:`has_periods_to_close`)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if not self.has_periods_to_close:
            del out["period_grace_s"]
        return out

    @classmethod
    def from_stored(cls, record: Mapping[str, Any]) -> SequenceSpec:
        """The spec of a stored record (its other members, as ``start``, are ignored); a member absent is its
        default. Raises InvalidOptionError (a ValueError) when a member breaks its rule."""
        names = {f.name for f in fields(cls)}
        return cls.build(**{k: v for k, v in record.items() if k in names})


class SequenceOptions(BaseModel):
    """The business settings in a request body (``POST /v1/sequences``); all optional. :meth:`spec` validates them
    together (:meth:`SequenceSpec.build`)."""

    model_config = ConfigDict(extra="forbid")
    increment: StrictInt = Field(
        INCREMENT_MIN, description=f"Integers go start, start+increment, ... ({INCREMENT_MIN}..2**31)."
    )
    reset: Reset = Field(
        DEFAULT_RESET,
        description="never, or daily / monthly / yearly: each period (in time_zone) counts from start again.",
    )
    time_zone: str = Field(
        DEFAULT_TIME_ZONE,
        description="IANA time zone name whose calendar the periods follow, daylight saving included (reset only).",
        examples=["Europe/Paris"],
    )
    template: str | None = Field(
        None,
        description=f"How numbers read, such as INV-{{yyyy}}{{mm}}{{dd}}-{{seq:06}}{{check}}: fields {FIELDS_TEXT}; at "
        f"most {TEMPLATE_CHARS_MAX} characters, no literal braces, no digits but ASCII 0-9; a resetting sequence's "
        f"template shows its period; {{yy}} means {YY_FIRST_YEAR}..{YY_LAST_YEAR}.",
        examples=["INV-{yyyy}{mm}{dd}-{seq:06}{check}"],
    )
    check_digit: CheckDigitName | None = Field(
        None, description="luhn, damm or mod97 (two digits, ISO 7064 MOD 97-10): what {check} renders."
    )
    mode: Mode = Field("cached", description="cached (a node's buffer, gaps allowed) or gapless (reserve/commit/void).")
    period_grace_s: StrictInt = Field(
        PERIOD_GRACE_DEFAULT_S,
        description=f"A gapless sequence that resets: seconds after a period ends during which its voided integers "
        f"can still be reserved in it (reserve with period); 0..{PERIOD_GRACE_MAX_S} (31 days), default a week.",
    )

    def spec(self) -> SequenceSpec:
        """The validated spec. Raises InvalidOptionError naming the rule broken."""
        return SequenceSpec.build(**self.model_dump())


def limits() -> dict[str, Any]:
    """What ``GET /v1/sequences`` may describe about these settings' rules."""
    return {
        "increment": [INCREMENT_MIN, INCREMENT_MAX],
        "reset": list(RESETS),
        "check_digit": list(CHECK_DIGIT_NAMES),
        "mode": list(MODES),
        "period_grace_s": [0, PERIOD_GRACE_MAX_S],
        "period_grace_s_default": PERIOD_GRACE_DEFAULT_S,
        "template_fields": FIELDS_TEXT.split(),
        "template_chars_max": TEMPLATE_CHARS_MAX,
        "seq_width_max": SEQ_WIDTH_MAX,
        "yy_years": [YY_FIRST_YEAR, YY_LAST_YEAR],
    }


__all__ = ["MODES", "Mode", "Run", "SequenceOptions", "SequenceSpec", "advance", "limits", "run_last"]
