"""Sequence storage: the allocation point of every sequence, advanced only by reserving a range.

A sequence (SQL's ``CREATE SEQUENCE name START s CACHE c``, increment 1) is one record per name::

    {"start": <first integer ever issued>, "cache": <smallest range a node reserves>, "next": <allocation point>}

``next`` is the first integer that no node has reserved yet. Reserving ``count`` integers returns
``(next, next + count - 1)`` and stores ``next + count`` in one atomic step (an etcd compare-mod-revision
transaction, or a file rewritten under an flock and fsync'd), so two reservations never overlap, whichever
replica or process makes them, and a range is durable before any of it is used. Integers never pass
``MAX_VALUE`` (2**63-1, a signed 64-bit integer): a reservation that would is refused (or, for a node's own
buffer, cut short at ``MAX_VALUE``).

Handing back (a clean stop): a node that stops holding ``first..last`` unused, where ``last`` ends its own latest
reservation, may set ``next`` back from ``last + 1`` to ``first``, in one compare-and-set that applies only when the
record is still exactly what this process wrote with that reservation (etcd: its mod revision and value; files:
its value, under the sequence's lock). Why that never issues an integer twice: every integer at or above ``next``
is neither issued nor held by a live node (a reservation moves ``next`` past what it takes; a hand-back lowers it
only over integers its node held, still unissued, and gives up). A node never hands back twice, and issues nothing
once it has decided what to hand back; when the answer is lost or late, the range counts as a gap.

Why an interface beside :class:`~app.storage.lease.LeaseBackend` rather than methods on it: a sequence needs no
lease, no claim and no deadline (its safety is the atomic advance, not an exclusive identity), so the lease
interface stays small and its doubles untouched; the two are chosen by the same settings (``IDMINT_ETCD_*`` or
``IDMINT_STATE_DIR``) through :func:`app.storage.make_store`, beside :func:`app.storage.make_backend`.

Implementations: :class:`app.storage.embedded.sequences.EmbeddedSequenceStore` (a file per sequence under the state
directory), :class:`app.storage.etcd.sequences.EtcdSequenceStore` (one key per sequence under the namespace), and
:class:`MemorySequenceStore` (the test double: one process, optional injected outage).
"""

from __future__ import annotations

import abc
import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any

from app.errors import (
    BackendUnavailableError,
    InvalidOptionError,
    SequenceConflictError,
    SequenceOverflowError,
    UnknownSequenceError,
)

MAX_VALUE = 2**63 - 1
"""The largest integer a sequence issues (signed 64-bit)."""
MAX_RANGE_COUNT = 2**40
"""The largest ``count`` of one ``range`` reservation."""
MIN_START = 0
CACHE_MIN = 1
CACHE_MAX = 1_000_000
"""Bounds of a sequence's ``cache`` (a node's buffer reserves between cache and 100 x cache at once)."""
DEFAULT_START = 1
DEFAULT_CACHE = 1000
NAME_PATTERN = "[a-z0-9_-]{1,64}"
_NAME = re.compile(NAME_PATTERN)


def check_name(name: str) -> str:
    """``name`` if it matches ``[a-z0-9_-]{1,64}``; else InvalidOptionError naming the rule."""
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        shown = name if isinstance(name, str) and len(name) <= 80 else f"{str(name)[:80]}..."
        raise InvalidOptionError(
            f"sequence name must match {NAME_PATTERN} (lowercase ASCII letters, digits, "
            f"'_' and '-', 1 to 64 characters), got {shown!r}"
        )
    return name


def check_settings(start: int, cache: int) -> None:
    """Raise InvalidOptionError unless ``start`` is in 0..2**63-1 and ``cache`` in 1..1,000,000."""
    if not MIN_START <= start <= MAX_VALUE:
        raise InvalidOptionError(f"start must be in {MIN_START}..{MAX_VALUE} (2**63-1), got {start}")
    if not CACHE_MIN <= cache <= CACHE_MAX:
        raise InvalidOptionError(f"cache must be in {CACHE_MIN}..{CACHE_MAX}, got {cache}")


@dataclass(frozen=True)
class SequenceRecord:
    """One stored sequence: its settings and its allocation point ``next`` (first integer not yet reserved)."""

    name: str
    start: int
    cache: int
    next: int

    @property
    def remaining(self) -> int:
        """Integers left before MAX_VALUE is passed (0 when exhausted)."""
        return MAX_VALUE - self.next + 1

    def same_settings(self, start: int, cache: int) -> bool:
        return self.start == start and self.cache == cache

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "start": self.start, "cache": self.cache, "next": self.next}

    def to_json(self) -> bytes:
        """The stored value: ``{"start", "cache", "next"}`` (the name is the key)."""
        return json.dumps({"start": self.start, "cache": self.cache, "next": self.next}, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, name: str, data: bytes | str, where: str) -> SequenceRecord:
        """Parse a stored value. An unreadable record is BackendUnavailableError (never read as "empty": that
        could issue integers twice)."""
        try:
            obj = json.loads(data)
            start, cache, nxt = obj["start"], obj["cache"], obj["next"]
            if not all(type(v) is int for v in (start, cache, nxt)) or not (
                MIN_START <= start <= nxt <= MAX_VALUE + 1 and cache >= CACHE_MIN
            ):
                raise ValueError(f"values out of rule: {obj!r}")
        except (ValueError, KeyError, TypeError) as exc:
            raise BackendUnavailableError(f"sequence record {where} is unreadable: {exc}", retry_after=5) from exc
        return cls(name, start, cache, nxt)

    def advance(self, count: int, partial: bool = False) -> tuple[int, int, SequenceRecord]:
        """(first, last, record after the reservation) for ``count`` integers.

        Raises SequenceOverflowError when the range would pass MAX_VALUE; with ``partial`` the range is cut at
        MAX_VALUE instead, and the error is raised only when nothing at all is left.
        """
        remaining = self.remaining
        if count > remaining:
            if not partial or remaining <= 0:
                raise SequenceOverflowError(
                    f"sequence {self.name}: {count} more integers would pass the maximum value 2**63-1 "
                    f"({MAX_VALUE}); {max(remaining, 0)} remain (allocation point {self.next})"
                )
            count = remaining
        first = self.next
        last = first + count - 1
        return first, last, SequenceRecord(self.name, self.start, self.cache, last + 1)


class SequenceStore(abc.ABC):
    """Where sequences live. One instance per process, owned by the app's lifespan.

    Every method may raise :class:`~app.errors.BackendUnavailableError` (storage unreachable or unreadable: HTTP
    503 + Retry-After); none blocks the event loop for longer than one fsync'd write.
    """

    name: str
    max_sequences: int

    async def start(self) -> None:
        """Connect / open state. Must not raise for unreachable storage: calls report it instead."""

    async def close(self) -> None:
        """Release connections."""

    @abc.abstractmethod
    async def create(self, name: str, start: int, cache: int) -> tuple[SequenceRecord, bool]:
        """Create ``name`` (not yet validated here: callers check name and settings first).

        Returns (record, True) when created, (existing record, False) when it existed with the same settings.
        Raises SequenceConflictError when it exists with other settings or ``max_sequences`` exist.
        """

    @abc.abstractmethod
    async def get(self, name: str) -> SequenceRecord:
        """The stored record. Raises UnknownSequenceError."""

    @abc.abstractmethod
    async def list(self) -> list[SequenceRecord]:
        """Every sequence, sorted by name (at most ``max_sequences``)."""

    @abc.abstractmethod
    async def reserve(self, name: str, count: int, partial: bool = False) -> tuple[int, int]:
        """Reserve ``count`` integers (1..MAX_RANGE_COUNT): (first, last), durable before returning.

        Raises UnknownSequenceError, SequenceOverflowError (see :meth:`SequenceRecord.advance` for ``partial``).
        """

    async def give_back(self, name: str, first: int, last: int, timeout: float) -> bool:
        """Hand back ``first..last``, the unused top of this process's latest reservation of ``name`` (see the
        module): ``next`` goes from ``last + 1`` back to ``first`` when nobody wrote the sequence since. True when
        storage confirmed it; False when it did not apply (another reservation since, or this process's latest write
        is not the one that ended at ``last``). ``timeout`` bounds the call (seconds). Raises BackendUnavailableError
        when storage cannot be reached: the caller counts the range as a gap, as for False.

        This default hands nothing back (a store without a compare-and-set must not guess)."""
        return False

    def status(self) -> dict[str, Any]:
        return {"store": self.name}


def handed_back(wrote: SequenceRecord | None, found: SequenceRecord | None, first: int, last: int) -> bool:
    """Whether ``first..last`` may go back: the stored record ``found`` is still what this process wrote last
    (``wrote``), ending its reservation at ``last``, and ``first..last`` lies inside the sequence."""
    return wrote is not None and found == wrote and wrote.next == last + 1 and wrote.start <= first <= last <= MAX_VALUE


def conflict(existing: SequenceRecord, start: int, cache: int) -> SequenceConflictError:
    return SequenceConflictError(
        f"sequence {existing.name} exists with other settings (start {existing.start}, cache {existing.cache}); "
        f"asked for start {start}, cache {cache}: a sequence's settings never change"
    )


def too_many(limit: int) -> SequenceConflictError:
    return SequenceConflictError(f"at most {limit} sequences may exist (IDMINT_MAX_SEQUENCES); none was created")


def unknown(name: str) -> UnknownSequenceError:
    return UnknownSequenceError(
        f"no sequence named {name!r}; create it first (POST /v1/sequences, or idmint sequence create)"
    )


class MemorySequenceStore(SequenceStore):
    """The test double: sequences in a dict. Set ``unavailable`` to a reason to act like unreachable storage."""

    name = "memory"

    def __init__(self, max_sequences: int = 1000) -> None:
        self.max_sequences = max_sequences
        self.records: dict[str, SequenceRecord] = {}
        self.unavailable: str | None = None
        self.reservations = 0
        self.wrote: dict[str, SequenceRecord] = {}
        """name -> the record as this store's latest reservation left it (what a hand-back compares)."""

    def _check(self) -> None:
        if self.unavailable is not None:
            raise BackendUnavailableError(self.unavailable)

    async def create(self, name: str, start: int, cache: int) -> tuple[SequenceRecord, bool]:
        self._check()
        existing = self.records.get(name)
        if existing is not None:
            if not existing.same_settings(start, cache):
                raise conflict(existing, start, cache)
            return existing, False
        if len(self.records) >= self.max_sequences:
            raise too_many(self.max_sequences)
        record = self.records[name] = SequenceRecord(name, start, cache, start)
        return record, True

    async def get(self, name: str) -> SequenceRecord:
        self._check()
        try:
            return self.records[name]
        except KeyError:
            raise unknown(name) from None

    async def list(self) -> list[SequenceRecord]:
        self._check()
        return [self.records[k] for k in sorted(self.records)]

    async def reserve(self, name: str, count: int, partial: bool = False) -> tuple[int, int]:
        record = await self.get(name)
        first, last, self.records[name] = record.advance(count, partial)
        self.wrote[name] = self.records[name]
        self.reservations += 1
        return first, last

    async def give_back(self, name: str, first: int, last: int, timeout: float) -> bool:
        self._check()
        found = self.records.get(name)
        if not handed_back(self.wrote.pop(name, None), found, first, last) or found is None:
            return False
        self.records[name] = dataclasses.replace(found, next=first)
        return True
