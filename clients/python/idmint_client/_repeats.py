"""No ID or sequence integer handed out twice, whatever a server or a proxy on the way sends, shared by
both clients (no I/O).

Three rules, checked before any of an answer is handed out; an answer that breaks one fails its server (moved on
from, like a dead one):

* **within one answer, nothing twice**: a batch as a whole, a stream chunk by chunk of complete lines (a sequence
  ``next`` answer must rise, which implies it);
* **within one answer, rising, in a rising form**: when ``GET /v1/schemes`` declares the form rising (``rising``:
  form -> the options it needs, from each scheme's ``rising_formats``), each ID is above the one before as a string,
  across a stream's chunks too. A proxy keeping an old answer's middle IDs between fresh first and last ones (which
  the ends rule below does not see) breaks that order;
* **across answers, no end again**: no answer may hold the first or last ID of an earlier answer (or stream chunk)
  of the same scheme, form and options. A cache replaying a batch, a proxy splicing an old answer into a new one or
  resending a stream, all repeat those. The client keeps the ends of the last :data:`ANSWERS_REMEMBERED` answers per
  key: memory that does not grow with the IDs received. A ``range`` answer may not overlap a range received before.

Why the order is checked within one answer and not "each answer rises past the last IDs that server gave": one
answer (a batch, or one stream request) comes from one generator, but one URL often reaches several: a load balancer
in front of replicas, or ``idmint serve --workers N`` (each worker holds its own identity). Their IDs do not rise
among themselves (KSUIDs of one second, eight-byte and snowflake IDs filled in up to the lookback before the last
ones another worker gave), so a per-URL rising rule would fail healthy servers; a stream carried on elsewhere starts
its order afresh. The ends are exact: a repeat is a repeat, whoever issued it. Forms not declared rising (SIQ's
``did``, decimal forms, eight-byte ``spread``) have the repeat rules only.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Sequence
from typing import TypeVar

from idmint_client._replicas import Failed

ANSWERS_REMEMBERED = 1024
"""Answers (and stream chunks) whose first and last IDs are kept per key, the oldest forgotten first."""
SHOWN_CHARS = 80

V = TypeVar("V", bound=Hashable)


class Repeats:
    """The ends of recent answers, per key (a buffer key for IDs, ``("sequence", name)`` for integers)."""

    def __init__(self, answers: int = ANSWERS_REMEMBERED) -> None:
        self._limit = 2 * answers
        self._ends: dict[Hashable, dict[Hashable, None]] = {}
        self._ranges: dict[str, list[tuple[int, int]]] = {}
        self._answers = answers

    def check(
        self,
        key: Hashable,
        items: Sequence[V],
        what: str = "ID",
        first_number: int = 1,
        rising: bool = False,
        after: V | None = None,
    ) -> None:
        """``items`` when they hold nothing twice, no end of an earlier answer for ``key`` and, when ``rising``,
        strictly rise (the first above ``after``: the last line of the same stream's previous chunk) (then their
        ends are remembered); Failed naming the first repeat or fall otherwise. ``what`` and ``first_number`` name
        items in the reason (``line 7``)."""
        if not items:
            return
        distinct = set(items)
        if len(distinct) != len(items):
            first: dict[V, int] = {}
            for number, item in enumerate(items, first_number):
                if item in first:
                    raise Failed(
                        f"answer holds {_shown(item)} twice ({what}s {first[item]} and {number}): an ID is never "
                        "issued twice"
                    )
                first[item] = number
        ends = self._ends.get(key)
        if ends is None:
            ends = self._ends[key] = {}
        elif not ends.keys().isdisjoint(distinct):
            for number, item in enumerate(items, first_number):
                if item in ends:
                    raise Failed(f"{what} {number} is {_shown(item)}, received before: a replayed or repeating answer")
        if rising:
            check_rising(items, after, what, first_number)
        ends[items[0]] = None
        ends[items[-1]] = None
        while len(ends) > self._limit:
            del ends[next(iter(ends))]

    def check_next(self, name: str, values: list[int]) -> list[int]:
        """The rising integers of a ``next`` answer of sequence ``name``, when none is an end of an earlier ``next``
        answer or inside a range received before; Failed otherwise."""
        for low, high in self._ranges.get(name, ()):
            if values and low <= values[-1] and values[0] <= high:
                at = bisect.bisect_left(values, low)
                if at < len(values) and values[at] <= high:
                    raise Failed(
                        f"integer {at + 1} is {values[at]}, inside the range {low}..{high} received before: a "
                        "replayed or repeating answer"
                    )
        self.check(("sequence", name), values, "integer")
        return values

    def check_range(self, name: str, first: int, last: int) -> None:
        """Failed when ``first..last`` overlaps a range of sequence ``name`` received before or holds an end of an
        earlier ``next`` answer; else remembered."""
        ranges = self._ranges.setdefault(name, [])
        for low, high in ranges:
            if first <= high and low <= last:
                raise Failed(
                    f"range {first}..{last} overlaps {low}..{high}, received before: a replayed or repeating answer"
                )
        for end in self._ends.get(("sequence", name), ()):
            if isinstance(end, int) and first <= end <= last:
                raise Failed(f"range {first}..{last} holds {end}, received before: a replayed or repeating answer")
        ranges.append((first, last))
        if len(ranges) > self._answers:
            del ranges[0]


def check_rising(items: Sequence[V], after: V | None = None, what: str = "ID", first_number: int = 1) -> None:
    """Failed unless ``items`` strictly rise as strings, the first above ``after`` (the last line of the same
    stream's previous chunk; None: the answer's start). ``what`` and ``first_number`` name items in the reason."""
    previous = after
    for number, item in enumerate(items, first_number):
        if previous is not None and not previous < item:  # type: ignore[operator]
            raise Failed(
                f"{what} {number} is {_shown(item)}, not above {_shown(previous)}: one answer of this form rises, "
                "so this one was spliced or replayed"
            )
        previous = item


def _shown(item: object) -> str:
    return repr(item[:SHOWN_CHARS]) if isinstance(item, str) else str(item)
