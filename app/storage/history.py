"""The history of a fleet's storage: an identity of the store recorded in the fleet, checked before anything that
guards uniqueness is trusted, and the fence that accepts a store that went back in time.

Storage can go back in time: a backup restored (``pg_restore``, an etcd snapshot, a copied state directory put
back), a point-in-time recovery, a promoted standby that had not received the last commits. Then the high-water
marks, the claim rows and the sequences' allocation points read are older than what the fleet already issued, and
trusting them issues the same IDs and integers again. So every backend tells what its store *is* now
(:meth:`~app.storage.lease.LeaseBackend.history_facts`, a :class:`Facts`), the first node records it in the fleet
record ``history`` (:data:`HISTORY_RECORD`), and every node compares, at start and every
``IDMINT_HISTORY_CHECK_INTERVAL`` seconds (:data:`~app.settings.HISTORY_CHECK_INTERVAL_S` by default)::

    identity    facts that a copy or restore changes and nothing else does (PostgreSQL: the cluster's system
                identifier, its timeline, the oids of idmint's tables; etcd: the cluster ID; embedded: the state
                directory's device and inode); each must equal the record's
    position    a number that only grows while the store keeps its history (PostgreSQL: the WAL position; etcd:
                the store revision); it must not be below the highest this node saw or the record holds
    generation  a counter every node raises in the record each round; the record's must not be below the highest
                this node saw, nor the one the backend keeps elsewhere (:meth:`~app.storage.lease.LeaseBackend.
                read_witness`: the embedded backend's file beside the state directory)

A node that finds any of them changed does not issue leased schemes nor allocate sequences: :class:`HistoryGuard`
holds the refusal (its :attr:`~HistoryGuard.refusal` names what changed and the fence command) and tells its
listeners once (the node drops its claims, the sequence service its buffers). Nothing is written to the store
then. ``idmint storage fence --apply`` (:mod:`app.storage.fence`) accepts the store: it raises what the old history
may have issued past, and records the new identity with a fence (``fence``: its ID, time, high-water-mark floor and
the gapless sequences still to be set), after which every node resumes without a restart.

Record, as stored (compact JSON, :func:`~app.storage.lease.record_bytes`)::

    {"backend": "postgres", "identity": {...}, "position": 123 | null, "generation": 7,
     "checked_at_ns": <the last round's wall clock, ns: when a backup of the record was taken, roughly>,
     "fence": null | {"id": "<uuid>", "at": "<RFC 3339>", "at_ns": ..., "mark_floor_ns": ...,
                      "sequence_gap": 1000000, "gapless": [["invoices", null], ["receipts", "2026-11-28"]],
                      "changed": ["..."]}}

May import: :mod:`app.errors`, :mod:`app.storage.lease`, :mod:`app.storage.sequences`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from app.errors import BackendUnavailableError, NotReadyError
from app.settings import HISTORY_CHECK_INTERVAL_S
from app.storage.lease import Facts
from app.storage.sequences import AuditPage, Change, Run, SequenceRecord, SequenceStore

if TYPE_CHECKING:
    from app.storage.lease import LeaseBackend

log = logging.getLogger("idmint.storage.history")
T = TypeVar("T")

HISTORY_RECORD = "history"
"""The fleet record holding the storage's history (see the module)."""
CHECK_TIMEOUT_S = 5.0
"""The longest one round may take."""
RETRY_AFTER_S = 30
"""Retry-After (s) of what a changed history refuses (an operator must fence)."""
PENDING_RETRY_AFTER_S = 2
"""Retry-After (s) while the history has not been read yet."""
FENCE_COMMAND = "idmint storage fence"
ACCEPT_TIMELINE_SETTING = "IDMINT_STORAGE_ACCEPT_TIMELINE_CHANGE"
TIMELINE = "timeline"
"""The identity fact a promoted PostgreSQL standby changes (accepted with :data:`ACCEPT_TIMELINE_SETTING`)."""
PENDING = "storage history not checked yet: the store's identity has not been compared with the fleet's record"


@dataclass
class Verdict:
    """One comparison: what changed (words, empty: nothing) and which identity facts changed."""

    changed: list[str] = field(default_factory=list)
    facts: set[str] = field(default_factory=set)


def compare(record: dict[str, Any], facts: Facts, seen_position: int, seen_generation: int, witness: int) -> Verdict:
    """How the store (``facts``) differs from the fleet's ``record`` and from what was seen before: the highest
    position and generation this node saw, the generation the backend's witness holds (0: none)."""
    verdict = Verdict()
    recorded = record.get("identity") or {}
    for name, value in facts.identity.items():
        if name in recorded and recorded[name] != value:
            verdict.changed.append(f"{name} is {value}, the fleet recorded {recorded[name]}")
            verdict.facts.add(name)
    position = facts.position
    floor = max(seen_position, _int(record.get("position")))
    if position is not None and position < floor:
        verdict.changed.append(f"{facts.position_name} {position} is below {floor}, which this fleet already saw")
        verdict.facts.add("position")
    generation = _int(record.get("generation"))
    highest = max(seen_generation, witness)
    if generation < highest:
        verdict.changed.append(f"the history record's generation {generation} is below {highest}, already seen")
        verdict.facts.add("generation")
    return verdict


def _int(value: object) -> int:
    return value if type(value) is int else -1


def pending_of(record: dict[str, Any] | None) -> frozenset[tuple[str, str | None]]:
    """The (gapless sequence, period key or None) pairs the record's fence still refuses."""
    out = set()
    for item in fence_of(record).get("gapless") or []:
        if isinstance(item, list) and len(item) == 2 and isinstance(item[0], str):
            out.add((item[0], item[1] if isinstance(item[1], str) else None))
    return frozenset(out)


def fence_of(record: dict[str, Any] | None) -> dict[str, Any]:
    """The record's last fence ({} when none)."""
    fence = (record or {}).get("fence")
    return fence if isinstance(fence, dict) else {}


class HistoryGuard:
    """The one owner of "has this fleet's storage gone back in time?" for one process, on ``backend``.

    :attr:`refusal` is None only while the store's identity was read and matches the fleet's record; before the
    first successful round it names the pending check, after a change it names what changed and the fence
    command. ``accept``: identity facts that may change without a fence (:data:`TIMELINE`, by
    :data:`ACCEPT_TIMELINE_SETTING`; the position and generation must still hold). ``interval``: seconds between
    rounds of :meth:`run` (> 0)."""

    def __init__(
        self,
        backend: LeaseBackend,
        accept: frozenset[str] = frozenset(),
        *,
        enabled: bool = True,
        interval: float = HISTORY_CHECK_INTERVAL_S,
    ) -> None:
        self.backend = backend
        self.accept = accept
        self.interval = interval
        self.enabled = enabled
        self.refusal: str | None = PENDING if enabled else None
        self.retry_after = PENDING_RETRY_AFTER_S
        self.record: dict[str, Any] | None = None
        """The fleet's history record as last read or written."""
        self.seen_position = -1
        self.seen_generation = -1
        self.fence_id: str | None = None
        self.changed_at: float | None = None
        """``time.monotonic()`` when a change was first seen (None: none)."""
        self._listeners: list[Callable[[str | None], None]] = []
        self._lock = asyncio.Lock()

    # -- what the others ask ------------------------------------------------------------------------------------
    def check(self) -> None:
        """Raise NotReadyError (503 + Retry-After) unless the store's history is confirmed unchanged."""
        if self.refusal is not None:
            raise NotReadyError(self.refusal, self.retry_after)

    @property
    def changed(self) -> bool:
        """True while a change of history is known (not merely unchecked)."""
        return self.changed_at is not None

    @property
    def mark_floor_ns(self) -> int:
        """The last fence's high-water-mark floor (ns since the epoch; -1: none): every claim's mark is at least
        this, whatever its own record holds."""
        floor = fence_of(self.record).get("mark_floor_ns")
        return floor if type(floor) is int else -1

    def gapless_pending(self) -> frozenset[tuple[str, str | None]]:
        """(gapless sequence, period key or None) the last fence left refused until ``idmint sequence setval``
        sets each."""
        return pending_of(self.record)

    def on_change(self, callback: Callable[[str | None], None]) -> None:
        """Call ``callback(reason)`` the moment a change of history is found, and ``callback(None)`` when the
        refusal ends (checked, or fenced). Plain calls: must not wait or raise."""
        self._listeners.append(callback)

    def _tell(self, reason: str | None) -> None:
        for callback in list(self._listeners):
            try:
                callback(reason)
            except Exception:  # a listener must not stop the others
                log.exception("storage history: a listener failed")

    def status(self) -> dict[str, Any]:
        """``{"history": "unchanged" | "changed" | "unchecked", "reason"?}`` for ``/readyz``."""
        if not self.enabled:
            return {}
        state = "unchanged" if self.refusal is None else "changed" if self.changed else "unchecked"
        out: dict[str, Any] = {"history": state}
        if self.refusal is not None:
            out["history_reason"] = self.refusal
        return out

    # -- rounds ------------------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Background task: a round every :attr:`interval` seconds (sooner while the first has not succeeded)."""
        while True:
            with contextlib.suppress(NotReadyError):
                await self.round()
            await asyncio.sleep(self.interval if self.refusal != PENDING else min(self.interval, 0.5))

    async def round(self) -> None:
        """Read the store's facts and the fleet's record and compare (writing the record when it is absent, raising
        its generation when it matches). Raises NotReadyError when the store cannot be read now (the refusal
        stays as it was: pending before the first round)."""
        if not self.enabled:
            return
        async with self._lock:
            try:
                async with asyncio.timeout(CHECK_TIMEOUT_S):
                    await self._round()
            except TimeoutError:
                raise BackendUnavailableError("storage history: the store did not answer in time", 2) from None

    async def _round(self) -> None:
        backend = self.backend
        # The witness first, then the record, then the store's facts. Every node writes the record before the
        # witness, and both only rise, so a witness read before the record is at or below the record's generation
        # (read after it, another node's round in between made this record look older than the witness, or a
        # record created in between look gone). A position only grows, so one read after the record is at or above
        # every position recorded in it (read the other way round, another node's newer record would look ahead of
        # this store).
        witness = await backend.read_witness()
        record = await backend.read_record(HISTORY_RECORD)
        facts = await backend.history_facts()
        if facts is None:
            self.refusal = None
            return
        fence = fence_of(record)
        if record is not None and fence.get("id") != self.fence_id:
            # A fence accepted the store as it is: what this node saw before it no longer binds.
            if self.fence_id is not None or self.changed:
                log.warning("storage history: fenced (%s); issuing again", fence.get("at"))
            self.fence_id = fence.get("id")
            self.seen_position = self.seen_generation = -1
            self.changed_at = None
        if record is None:
            if self.seen_generation >= 0 or witness > 0:
                seen = max(self.seen_generation, witness)
                self._changed(
                    [f"the fleet's history record is gone, though generation {seen} of it was seen"], facts, record
                )
                return
            value: dict[str, Any] = {"backend": backend.name, "identity": facts.identity, "position": facts.position,
                     "generation": 1, "checked_at_ns": time.time_ns(), "fence": None}  # fmt: skip
            if await backend.swap_record(HISTORY_RECORD, None, value):
                log.info("storage history: recorded %s", words(facts))
                await self._accepted(value)
            return
        verdict = compare(record, facts, self.seen_position, self.seen_generation, witness)
        if verdict.facts and verdict.facts <= self.accept:
            log.warning("storage history: %s: accepted (%s)", "; ".join(verdict.changed), ACCEPT_TIMELINE_SETTING)
            verdict = Verdict()
        if verdict.changed:
            self._changed(verdict.changed, facts, record)
            return
        if self.changed:  # known changed: only a fence (a new fence ID, above) clears it
            return
        position = max(_int(record.get("position")), facts.position if facts.position is not None else -1)
        value = {
            **record,
            "identity": {**record.get("identity", {}), **facts.identity},
            "position": position if position >= 0 else None,
            "generation": _int(record.get("generation")) + 1,
            "checked_at_ns": time.time_ns(),
        }
        if await backend.swap_record(HISTORY_RECORD, record, value):
            await self._accepted(value)
        else:  # another node raised it meanwhile: what was read matched, and the next round compares again
            self.record = record
            self.seen_generation = max(self.seen_generation, _int(record.get("generation")))
            if self.refusal is not None:
                self.refusal = None
                self._tell(None)

    async def _accepted(self, value: dict[str, Any]) -> None:
        self.record = value
        self.seen_generation = max(self.seen_generation, value["generation"])
        if value.get("position") is not None:
            self.seen_position = max(self.seen_position, value["position"])
        try:
            await self.backend.write_witness(value["generation"])
        except NotReadyError as exc:
            log.warning("storage history: the witness could not be written: %s", exc.reason)
        if self.refusal is not None:
            if self.refusal != PENDING:
                log.warning("storage history: unchanged; issuing")
            self.refusal = None
            self._tell(None)

    def _changed(self, changed: list[str], facts: Facts, record: dict[str, Any] | None) -> None:
        reason = (
            f"storage went back in time or was replaced ({'; '.join(changed)}): a restored backup, a point-in-time "
            "recovery, a promoted standby or a copied state directory may hold high-water marks and sequence points "
            f"older than what this fleet already issued. Not issuing leased schemes nor allocating sequences until "
            f"an operator runs `{FENCE_COMMAND}` (see docs/safety.md#restoring-a-backup)"
        )
        self.record = record
        first = not self.changed
        self.refusal = reason
        self.retry_after = RETRY_AFTER_S
        if first:
            self.changed_at = time.monotonic()
            log.error("%s", reason)
            self._tell(reason)


def words(facts: Facts) -> str:
    """The facts in words: ``"system_identifier 73..., timeline 1, WAL position 123"``."""
    parts = [f"{name} {value}" for name, value in facts.identity.items()]
    if facts.position is not None:
        parts.append(f"{facts.position_name} {facts.position}")
    return ", ".join(parts)


class GuardedSequenceStore(SequenceStore):
    """``inner`` (a backend's sequence store) behind ``guard``: every write (a reservation, a hand-back, create,
    setval, PATCH, delete, gapless steps, prune) raises BackendUnavailableError (503 + Retry-After) naming the
    change while the store's history is changed or unchecked (an unchecked one is checked first, once); reads
    pass. The fence itself writes through :attr:`inner`."""

    def __init__(self, inner: SequenceStore, guard: HistoryGuard) -> None:
        super().__init__(inner.max_sequences)
        self.inner = inner
        self.guard = guard
        self.name = inner.name

    async def _gate(self, name: str | None = None, docs: Sequence[str] = ()) -> None:
        guard = self.guard
        if guard.refusal == PENDING:
            await guard.round()  # raises the store's own error when it cannot be read now
        if guard.refusal is not None:
            raise BackendUnavailableError(guard.refusal, guard.retry_after)
        pending = guard.gapless_pending()
        if name is not None and pending and _refused(pending, name, docs):
            raise BackendUnavailableError(
                f"gapless sequence {name} was fenced after its storage went back in time: its committed integers "
                "are known only to your own records. Find the first integer they have not used, N, and run "
                f"`idmint sequence setval {name} N` (see docs/safety.md#restoring-a-backup)",
                RETRY_AFTER_S,
            )

    def on_fenced(self, callback: Callable[[str], None]) -> None:
        self.guard.on_change(lambda reason: None if reason is None else callback(reason))

    async def start(self) -> None:
        await self.inner.start()

    async def close(self) -> None:
        await self.inner.close()

    async def get(self, name: str) -> SequenceRecord:
        return await self.inner.get(name)

    async def list(self) -> list[SequenceRecord]:
        return await self.inner.list()

    async def update(self, name: str, docs: Sequence[str], change: Change[T], timeout: float | None = None) -> T:
        await self._gate(name, docs)
        return await self.inner.update(name, docs, change, timeout)

    async def audit(self, name: str, after: str | None, limit: int, period: str | None = None) -> AuditPage:
        return await self.inner.audit(name, after, limit, period)

    async def prune(self, events_before_ns: int, periods_before: str) -> int:
        await self._gate()
        return await self.inner.prune(events_before_ns, periods_before)

    def status(self) -> dict[str, Any]:
        return self.inner.status()

    async def create(
        self,
        name: str,
        start: int,
        cache: int,
        settings: Mapping[str, Any] | None = None,
        compatible: Callable[[SequenceRecord], None] | None = None,
    ) -> tuple[SequenceRecord, bool]:
        await self._gate()
        return await self.inner.create(name, start, cache, settings, compatible)

    async def reserve(self, name: str, count: int, partial: bool = False, period: str | None = None) -> Run:
        await self._gate(name, (f"period/{period}",) if period else ())
        return await self.inner.reserve(name, count, partial, period)

    async def give_back(
        self, name: str, first: int, last: int, timeout: float, *, step: int = 1, period: str | None = None
    ) -> bool:
        if self.guard.refusal is not None:  # a hand-back into a store of another history could repeat integers
            return False
        return await self.inner.give_back(name, first, last, timeout, step=step, period=period)


def _refused(pending: frozenset[tuple[str, str | None]], name: str, docs: Sequence[str]) -> bool:
    """Whether an update of ``docs`` of ``name`` touches a gapless point a fence left to be set."""
    if (name, None) in pending:
        return True
    return any(doc.startswith("period/") and (name, doc[len("period/") :]) in pending for doc in docs)
