"""No ID or sequence integer handed out twice by one client, whatever a server or a proxy on the way sends, shared
by both clients (no I/O). docs/clients.md states the rules and their memory bounds.

Every answer (a batch whole, a stream chunk by chunk of complete lines) is checked before any of it is handed out;
an answer that breaks a rule fails its server (moved on from, like a dead one), and nothing of it is remembered:

* **within one answer, nothing twice**;
* **within one answer, rising, in a rising form** (``/v1/schemes``' ``rising``): each ID above the one before as a
  string, across a stream's chunks too;
* **across answers, no end again**: no answer may hold the first or last ID of one of the last
  :data:`ANSWERS_REMEMBERED` answers (or stream chunks) of the same scheme, form and options;
* **per issuing identity, rising across answers**, in the forms ``/v1/schemes`` lists in ``rising_per_identity``
  (snowflake, eight-byte ``time_sequential``, Muid, HLC-ULID, SIQ): each ID is read as an integer and its identity
  (the layout's bits naming the generator: worker ID, medallion, publisher...) taken from it. One identity's
  generator never goes back, also across restarts and takeovers (a successor starts above the recorded high-water
  mark), and one URL fronting several generators gives IDs of several identities: so an ID at or below an ID of
  its identity received before is refused. Concurrent answers may arrive out of issue order, so an identity keeps
  the spans (lowest to highest ID) of its last :data:`SPANS_PER_IDENTITY` answers: an ID inside one, or at or below
  the floor the forgotten spans leave, is refused; one in a gap between them passes (a late concurrent answer).
  :data:`IDENTITIES_REMEMBERED` identities per scheme are kept, the least recently seen forgotten first;
* **other forms** (random schemes, forms that do not rise): at least the last :data:`RECENT_IDS` IDs handed out
  per scheme, form and options (up to twice as many: two generations of sets, the older dropped whole); an ID among
  them is refused;
* **sequence integers**: every ``next`` integer and ``range`` handed out, as merged intervals, at most
  :data:`INTERVALS_REMEMBERED` per sequence, the lowest forgotten first; an integer inside one is refused.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from idmint_client._replicas import Failed

ANSWERS_REMEMBERED = 1024
"""Answers (and stream chunks) whose first and last IDs are kept per key, the oldest forgotten first."""
SPANS_PER_IDENTITY = 64
"""Spans of answers kept per issuing identity; past it the lowest span joins the floor (refused from then on)."""
IDENTITIES_REMEMBERED = 4096
"""Issuing identities kept per scheme, the least recently seen forgotten first."""
RECENT_IDS = 1 << 16
"""IDs kept at least per scheme, form and options when no identity order applies (up to twice as many)."""
INTERVALS_REMEMBERED = 4096
"""Merged intervals of integers kept per sequence, the lowest forgotten first."""
SHOWN_CHARS = 80
RADIX_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"

V = TypeVar("V", bound=Hashable)


@dataclass(frozen=True)
class IdentityOrder:
    """How one form's text reads as an integer and which of its bits name the issuing identity (one
    ``rising_per_identity`` entry of ``/v1/schemes``). Raises ValueError for an entry it cannot use."""

    digits: str
    strip: str
    mask: int
    fields: str
    table: Mapping[int, Any] = field(repr=False)

    @classmethod
    def from_json(cls, data: object) -> IdentityOrder | None:
        """The entry, or None when it is not one this client can read (then the form has the recent-ID rule)."""
        if not isinstance(data, dict):
            return None
        digits, strip, pieces = data.get("digits"), data.get("strip", ""), data.get("identity")
        if not isinstance(digits, str) or not 2 <= len(digits) <= len(RADIX_DIGITS) or len(set(digits)) != len(digits):
            return None
        if not isinstance(strip, str) or not isinstance(pieces, list) or not pieces:
            return None
        mask = 0
        names: list[str] = []
        for piece in pieces:
            shift, bits = (piece.get("shift"), piece.get("bits")) if isinstance(piece, dict) else (None, None)
            if not isinstance(shift, int) or not isinstance(bits, int) or shift < 0 or not 0 < bits <= 256:
                return None
            mask |= ((1 << bits) - 1) << shift
            name = str(piece.get("field", "identity"))
            if name not in names:
                names.append(name)
        table: dict[int, Any] = dict.fromkeys(range(128), "!")  # "!": no digit, so int() refuses the text
        table.update({ord(c): None for c in strip})
        table.update({ord(c): RADIX_DIGITS[i] for i, c in enumerate(digits)})
        return cls(digits, strip, mask, "/".join(names), table)

    def integers(self, texts: Sequence[str]) -> list[int] | None:
        """The integer each of ``texts`` holds; None when one has a character outside the digits."""
        if not all(map(str.isascii, texts)):
            return None
        table, radix = self.table, len(self.digits)
        try:
            return [int(text.translate(table), radix) for text in texts]
        except ValueError:
            return None


@dataclass(frozen=True)
class Rule:
    """What an answer of one scheme, form and options is checked for: ``rising`` (within one answer, as strings)
    and ``order`` (rising per issuing identity across answers; None: the recent-ID rule)."""

    scheme: str
    rising: bool = False
    order: IdentityOrder | None = None

    def __bool__(self) -> bool:
        return self.rising


@dataclass
class _Spans:
    """One identity's memory: ``floor`` (IDs at or below it are refused) and disjoint ``[low, high]`` spans."""

    floor: int = -1
    lows: list[int] = field(default_factory=list)
    highs: list[int] = field(default_factory=list)

    def below(self, value: int) -> bool:
        """Whether ``value`` is above the floor and every span."""
        return value > self.floor and (not self.highs or value > self.highs[-1])

    def holds(self, value: int) -> bool:
        if value <= self.floor:
            return True
        if not self.highs or value > self.highs[-1]:
            return False
        at = bisect.bisect_left(self.highs, value)
        return self.lows[at] <= value

    def add(self, low: int, high: int) -> None:
        start = bisect.bisect_left(self.highs, low)
        end = bisect.bisect_right(self.lows, high)
        if start < end:  # spans this one covers (a stream chunk around a concurrent answer): merged
            low, high = min(low, self.lows[start]), max(high, self.highs[end - 1])
        self.lows[start:end] = [low]
        self.highs[start:end] = [high]
        if len(self.lows) > SPANS_PER_IDENTITY:
            self.floor = self.highs[0]
            del self.lows[0], self.highs[0]


class _Recent:
    """The last ``limit`` values at least (up to ``2 * limit``): two generations of sets, the older dropped whole
    when the newer one fills."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.newer: set[Hashable] = set()
        self.older: set[Hashable] = set()

    def isdisjoint(self, items: set[Any]) -> bool:
        return self.newer.isdisjoint(items) and self.older.isdisjoint(items)

    def __contains__(self, item: object) -> bool:
        return item in self.newer or item in self.older

    def add(self, items: Sequence[Hashable]) -> None:
        self.newer.update(items)
        if len(self.newer) >= self.limit:
            self.older, self.newer = self.newer, set()


class Intervals:
    """Integers as disjoint merged ``[low, high]`` intervals, at most ``limit`` (the lowest forgotten first)."""

    def __init__(self, limit: int = INTERVALS_REMEMBERED) -> None:
        self.limit = limit
        self.lows: list[int] = []
        self.highs: list[int] = []

    def overlap(self, low: int, high: int) -> tuple[int, int] | None:
        """The first interval holding an integer of ``low..high``, or None."""
        at = bisect.bisect_left(self.highs, low)
        if at < len(self.lows) and self.lows[at] <= high:
            return self.lows[at], self.highs[at]
        return None

    def add(self, low: int, high: int) -> None:
        """Add ``low..high`` (no overlap with what is held), merging it with adjacent intervals."""
        start = bisect.bisect_left(self.highs, low - 1)
        end = bisect.bisect_right(self.lows, high + 1)
        if start < end:
            low, high = min(low, self.lows[start]), max(high, self.highs[end - 1])
        self.lows[start:end] = [low]
        self.highs[start:end] = [high]
        if len(self.lows) > self.limit:
            del self.lows[0], self.highs[0]


class Repeats:
    """What one client handed out (see the module docstring): ends of recent answers per key (a buffer key),
    per-identity spans, recent IDs, and sequence intervals."""

    def __init__(self, answers: int = ANSWERS_REMEMBERED, recent: int = RECENT_IDS) -> None:
        self._limit = 2 * answers
        self._ends: dict[Hashable, dict[Hashable, None]] = {}
        self._identities: dict[str, dict[int, _Spans]] = {}
        self._recent: dict[Hashable, _Recent] = {}
        self._recent_limit = recent
        self._sequences: dict[str, Intervals] = {}

    def check(
        self,
        key: Hashable,
        items: Sequence[V],
        what: str = "ID",
        first_number: int = 1,
        rising: bool | Rule = False,
        after: V | None = None,
    ) -> None:
        """``items`` when they break no rule for ``key`` (``rising``: a :class:`Rule`, or True for strings that
        rise within the answer, the first above ``after``: the last line of the same stream's previous chunk),
        then remembered; Failed naming the first repeat or fall otherwise. ``what`` and ``first_number`` name items
        in the reason (``line 7``)."""
        if not items:
            return
        rule = rising if isinstance(rising, Rule) else None
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
            _first_held(items, ends, what, first_number)
        if rising:
            check_rising(items, after, what, first_number)
        if rule is not None and rule.order is not None:
            commit = self._check_identities(rule.scheme, rule.order, items, what, first_number)
            commit()
        else:
            recent = self._recent.get(key)
            if recent is None:
                recent = self._recent[key] = _Recent(self._recent_limit)
            elif not recent.isdisjoint(distinct):
                _first_held(items, recent, what, first_number)
            recent.add(items)
        ends[items[0]] = None
        ends[items[-1]] = None
        while len(ends) > self._limit:
            del ends[next(iter(ends))]

    def _check_identities(
        self, scheme: str, order: IdentityOrder, items: Sequence[Any], what: str, first_number: int
    ) -> Any:
        """Failed when an item is at or below an ID of its identity received before (inside a span or at or below
        the floor); else a function that remembers the answer's spans."""
        known = self._identities.setdefault(scheme, {})
        mask = order.mask
        values = order.integers(items)
        if values is None:
            for number, item in enumerate(items, first_number):
                if order.integers([item]) is None:
                    raise Failed(f"{what} {number} is {_shown(item)}, not an integer in {order.digits!r}")
            raise Failed(f"an {what} is not an integer in {order.digits!r}")  # pragma: no cover -- found above
        seen: dict[int, list[int]] = {}
        for value in values:
            identity = value & mask
            span = seen.get(identity)
            if span is None:
                seen[identity] = [value, value]
            elif value < span[0]:
                span[0] = value
            elif value > span[1]:
                span[1] = value
        for identity, (low, _) in seen.items():
            spans = known.get(identity)
            if spans is None or spans.below(low):
                continue  # the answer's IDs of this identity are all above what it gave before (the usual case)
            for number, (item, value) in enumerate(zip(items, values, strict=True), first_number):
                if value & mask == identity and spans.holds(value):
                    raise Failed(
                        f"{what} {number} is {_shown(item)}, not above an ID of its issuer ({order.fields} bits "
                        f"{identity:#x}) received before: a replayed or spliced answer"
                    )

        def commit() -> None:
            for identity, (low, high) in seen.items():
                spans = known.pop(identity, None)
                known[identity] = spans = spans if spans is not None else _Spans()  # most recently seen last
                spans.add(low, high)
            while len(known) > IDENTITIES_REMEMBERED:
                del known[next(iter(known))]

        return commit

    def check_next(self, name: str, values: list[int]) -> list[int]:
        """The rising integers of a ``next`` answer of sequence ``name``, when none was handed out before (then
        remembered); Failed otherwise."""
        held = self._sequences.get(name)
        if held is None:
            held = self._sequences[name] = Intervals()
        elif values:
            for number, value in enumerate(values, 1):
                found = held.overlap(value, value)
                if found is not None:
                    raise Failed(
                        f"integer {number} is {value}, inside {found[0]}..{found[1]} received before: a replayed, "
                        "spliced or repeating answer"
                    )
        for low, high in _runs(values):
            held.add(low, high)
        return values

    def check_range(self, name: str, first: int, last: int) -> None:
        """Failed when ``first..last`` holds an integer of sequence ``name`` handed out before; else remembered."""
        held = self._sequences.setdefault(name, Intervals())
        found = held.overlap(first, last)
        if found is not None:
            raise Failed(
                f"range {first}..{last} overlaps {found[0]}..{found[1]}, received before: a replayed, spliced or "
                "repeating answer"
            )
        held.add(first, last)


def _runs(values: Sequence[int]) -> list[tuple[int, int]]:
    """Rising ``values`` as runs of consecutive integers."""
    runs: list[tuple[int, int]] = []
    for value in values:
        if runs and value == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], value)
        else:
            runs.append((value, value))
    return runs


def _first_held(items: Sequence[Any], held: Any, what: str, first_number: int) -> None:
    for number, item in enumerate(items, first_number):
        if item in held:
            raise Failed(f"{what} {number} is {_shown(item)}, received before: a replayed or repeating answer")


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
