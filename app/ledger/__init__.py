"""The claim ledger: who held which identity when, kept beyond every lease, so a decoded ID names its issuer.

:class:`Ledger` is told of every claim made and ended by the identity holders (:meth:`Ledger.claimed`,
:meth:`Ledger.ended`: plain calls that only queue, so issuing never waits for the ledger). Its background task
(:meth:`Ledger.run`) writes the queue to the store (a failed write is retried with backoff and counted in
``idmint_ledger_write_failures_total``), reads the other nodes' records into the in-memory index, closes the
records of owners found gone (etcd: their lease expired, at the expiry etcd measured while it was alive), and drops
records that ended more than ``IDMINT_LEDGER_DAYS`` ago.

Decode asks :meth:`Ledger.verdict` per reading: a bisect in memory, no storage round trip; a request may first
ask for one bounded refresh (:meth:`Ledger.refresh_for`) when a reading is newer than the index.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from app.errors import NotReadyError
from app.ledger.index import FUTURE_TOLERANCE_NS, REASON_BEFORE, REASON_FUTURE, REASON_NO_CLAIM, LedgerIndex, Verdict
from app.schemes.pool import IdentityPool
from app.storage.lease import Claim, Owner
from app.storage.ledger import END_LOST, END_RELEASED, NS_IN_DAY, NS_IN_S, ClaimRecord, LedgerStore
from app.tasks import cancel_and_wait

__all__ = ["ClaimRecord", "Ledger", "LedgerStore", "Verdict"]

log = logging.getLogger("idmint.ledger")

REFRESH_S = 5.0
"""The index reads what other nodes wrote at least this often."""
FULL_READ_S = 600.0
"""Every this many seconds the index is read whole (drops records another node compacted)."""
COMPACT_S = 3600.0
"""Records past retention are dropped this often (and at start)."""
SWEEP_S = 2.0
"""Open records of other owners are checked this often (etcd: is their lease alive, and until when)."""
WRITE_BACKOFF_MAX_S = 5.0
REFRESH_FOR_TIMEOUT_S = 1.0
"""A decode request waits at most this long for the one refresh it may ask for."""
FLUSH_TIMEOUT_S = 2.0
"""How long stopping waits for the last records to be written."""


class Ledger:
    """The claim ledger of one process on ``store``. ``clock``: the generator clock (ns since the epoch), the one
    IDs are stamped with; ``monotonic``: the lease backend's clock (seconds), on which claim expiries are given;
    ``failures``: called once per failed write (the metric). It knows nothing of the node: the identity holders
    tell it of their claims (:class:`~app.storage.lease.ClaimObserver`)."""

    def __init__(
        self,
        store: LedgerStore,
        *,
        retention_days: float,
        clock: Callable[[], int] = time.time_ns,
        monotonic: Callable[[], float] = time.monotonic,
        failures: Callable[[], None] = lambda: None,
    ) -> None:
        self.store = store
        self.retention_ns = int(retention_days * NS_IN_DAY)
        self.clock = clock
        self.monotonic = monotonic
        self.failures = failures
        self.index = LedgerIndex()
        self.since_ns: int | None = None
        self.refreshed_at_ns = 0
        """Generator-clock reading when the last refresh began (records claimed before it are in the index)."""
        self.pending: dict[str, ClaimRecord] = {}
        """Record ID -> latest version not yet written (in the order first queued)."""
        self.write_failures = 0
        self._ours: dict[int, ClaimRecord] = {}
        """id(claim) -> its open record (claims made by this process)."""
        self._wake = asyncio.Event()
        self._refresh_lock = asyncio.Lock()
        self._expiries: dict[str, int] = {}
        """Lease -> when it expires as the store last saw it (ns, generator clock): a dead owner's record ends there."""
        self._last_full = 0.0
        self._last_compact = 0.0
        self._last_sweep = 0.0
        self._task: asyncio.Task[None] | None = None

    # -- hooks (called by the identity holders; never wait, never raise) --------------------------------------
    def claimed(
        self,
        claim: Claim,
        pool: IdentityPool,
        owner: Owner,
        floor_ns: int = -1,
        fleet_id: str | None = None,
        backfill: bool = False,
    ) -> None:
        """``claim`` of ``pool`` was made for ``owner`` in fleet ``fleet_id`` (None: not known yet), its IDs dated
        from ``floor_ns`` on (``backfill``: a backfill claim, its IDs dated in the past): queue its open record."""
        now = self.clock()
        record = ClaimRecord(
            record=ClaimRecord.new_id(now, owner.pid),
            scheme=claim.scheme,
            kind=pool.kind,
            group=pool.group,
            identity=claim.identity,
            region=pool.region if pool.sliced else None,
            fleet_id=fleet_id,
            owner=owner.as_dict(),
            lease=claim.lease_name,
            claimed_at_ns=now,
            floor_ns=max(floor_ns, -1),
            backfill=backfill,
        )
        self._ours[id(claim)] = record
        self._queue(record)

    def ended(self, claim: Claim) -> None:
        """``claim`` is being given up (released, or dropped as lost or late): queue its record's end. Asked before
        the backend releases it, so a lost claim still says so. Claims it was never told of are ignored."""
        record = self._ours.pop(id(claim), None)
        if record is None:
            return
        now = self.clock()
        lost = claim.lost or claim.clock() >= claim.deadline
        if not lost:
            self._queue(record.ended(END_RELEASED, now))
            return
        reason = getattr(claim, "lost_reason", None) or "lease deadline passed"
        expired = claim.expired_at()
        at = now if expired is None else now - int((claim.clock() - expired) * NS_IN_S)
        self._queue(record.ended(END_LOST, min(at, now), str(reason)))

    def _queue(self, record: ClaimRecord) -> None:
        self.pending.pop(record.record, None)
        self.pending[record.record] = record
        self.index.add(record)
        self._wake.set()

    # -- lookups -----------------------------------------------------------------------------------------------
    def reach_ns(self, now_ns: int) -> int:
        """The earliest time the ledger answers for: when it began, or the retention limit, whichever is later."""
        since = self.since_ns if self.since_ns is not None else now_ns
        return max(since, now_ns - self.retention_ns)

    def verdict(
        self, scheme: str, identity: int, t_ns: int, unit_ns: int = 1_000_000, group: str | None = None
    ) -> Verdict:
        """Who held ``identity`` (in ``group``, when the ID carries one) of ``scheme`` at ``t_ns`` (a timestamp of
        precision ``unit_ns``), from memory."""
        now = self.clock()
        record = self.index.covering(scheme, identity, t_ns, unit_ns, now, group)
        if record is not None:
            return Verdict(record, None)
        if t_ns > now + FUTURE_TOLERANCE_NS:
            return Verdict(None, REASON_FUTURE)
        if t_ns + unit_ns <= self.reach_ns(now):
            return Verdict(None, REASON_BEFORE)
        return Verdict(None, REASON_NO_CLAIM)

    def live(self) -> list[ClaimRecord]:
        """Open records (claims held now, as far as the index knows), by scheme and identity."""
        return sorted(self.index.open_records(), key=lambda r: (r.scheme, r.group, r.identity))

    async def refresh_for(self, newest_ns: int) -> None:
        """Read the store once (bounded: :data:`REFRESH_FOR_TIMEOUT_S`) when a reading at ``newest_ns`` is newer
        than the last refresh: another node's claim made since then is then known. Raises nothing."""
        if newest_ns < self.refreshed_at_ns:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(REFRESH_FOR_TIMEOUT_S):
                await self.refresh(full=False, newer_than=newest_ns)

    async def refresh(self, full: bool = False, newer_than: int | None = None) -> None:
        """Read new records (``full``: all) into the index. Raises nothing: a failure is logged."""
        async with self._refresh_lock:
            if newer_than is not None and newer_than < self.refreshed_at_ns:
                return  # another request's refresh covered it
            started = self.clock()
            try:
                records = await self.store.read(full)
                if self.since_ns is None:
                    self.since_ns = await self.store.since_ns(started)
            except (OSError, NotReadyError) as exc:
                log.warning("claim ledger: reading %s failed: %s", self.store.name, _why(exc))
                return
            if full:
                kept = {r.record for r in records} | set(self.pending)
                for stale in [rid for rid in self.index.records if rid not in kept]:
                    self.index.drop(stale)
            for record in records:
                if record.record not in self.pending:
                    self.index.add(record)
            self.refreshed_at_ns = started

    # -- background work ---------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start :meth:`run`, which reads the store whole first. Never waits for the store: a node whose backend
        is unreachable at start starts as before (the ledger catches up in the background)."""
        self._task = asyncio.create_task(self.run(), name="idmint-claim-ledger")

    async def run(self) -> None:
        """Background task: open the store, then write what is queued, read what others wrote, end the claims of
        owners that are gone, and drop what is past retention, until cancelled. Survives any exception."""
        while True:
            try:
                await self.store.start()
                break
            except (OSError, NotReadyError) as exc:
                log.warning("claim ledger: %s cannot be opened: %s; retrying", self.store.name, _why(exc))
                await asyncio.sleep(WRITE_BACKOFF_MAX_S)
        self._last_full = self.monotonic()
        await self.refresh(full=True)
        backoff = 0.1
        while True:
            self._wake.clear()  # before the step: a record queued during it wakes the next one at once
            try:
                wrote = await self.flush()
                backoff = 0.1 if wrote else min(backoff * 2, WRITE_BACKOFF_MAX_S)
                now = self.monotonic()
                if now - self._last_full >= FULL_READ_S or self.since_ns is None:
                    self._last_full = now
                    await self.refresh(full=True)
                else:
                    await self.refresh()
                if now - self._last_sweep >= SWEEP_S:
                    self._last_sweep = now
                    await self.sweep()
                if now - self._last_compact >= COMPACT_S:
                    self._last_compact = now
                    await self.compact()
            except asyncio.CancelledError:
                raise
            except Exception:  # the ledger must outlive any one failure; issuing never waits on it
                log.exception("claim ledger: background step failed")
            delay = backoff if self.pending else REFRESH_S
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(delay, SWEEP_S)):
                    await self._wake.wait()

    async def flush(self) -> bool:
        """Write every pending record, oldest first; False when a write failed (counted; retried later)."""
        for record_id, record in list(self.pending.items()):
            try:
                await self.store.write(record)
            except (OSError, NotReadyError) as exc:
                self.write_failures += 1
                self.failures()
                log.warning("claim ledger: writing %s failed (retried): %s", record_id, _why(exc))
                return False
            if self.pending.get(record_id) is record:
                del self.pending[record_id]
        return True

    async def sweep(self) -> None:
        """End the open records of owners that are gone (their lease expired; their process died): at the lease's
        expiry as the store tells it for a gone lease (PostgreSQL), else as the store last measured it while alive,
        else when first found gone; never after the next claim of the same identity began."""
        ours = {r.record for r in self._ours.values()}
        now = self.clock()
        asked: dict[str, tuple[bool | None, int | None]] = {}  # owner (lease, else host and pid) -> its answer
        for record in self.index.open_records():
            if record.record in ours or record.record in self.pending:
                continue
            key = record.lease or f"pid {record.owner.get('host')} {record.owner.get('pid')}"
            if key not in asked:
                asked[key] = await self.store.owner_alive(record)
            alive, expires_ns = asked[key]
            if alive is None:
                continue
            if alive:
                if expires_ns is not None:
                    self._expiries[key] = expires_ns
                continue
            seen = self._expiries.pop(key, None)
            at = expires_ns or seen or now  # the store's word on a gone lease's expiry first (PostgreSQL keeps it)
            successor = self.index.next_claim_ns(record)  # etcd tells the time left in whole seconds only
            if successor is not None:
                at = min(at, successor)
            ended = record.ended(END_LOST, min(at, now), "owner gone (lease expired or process ended)")
            self._queue(ended)

    async def compact(self) -> None:
        """Drop records that ended more than the retention ago."""
        before = self.clock() - self.retention_ns
        latest = list(self.index.records.values())
        try:
            dropped = await self.store.compact(before, latest)
        except (OSError, NotReadyError) as exc:
            log.warning("claim ledger: compacting %s failed: %s", self.store.name, _why(exc))
            return
        for record in latest:
            if record.ended_at_ns is not None and record.ended_at_ns < before:
                self.index.drop(record.record)
        if dropped:
            log.info("claim ledger: dropped %d record(s) ended before the retention limit", dropped)

    async def stop(self) -> None:
        """Stop the background task, write what is pending (bounded), close the store."""
        task, self._task = self._task, None
        await cancel_and_wait(task)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FLUSH_TIMEOUT_S):
                while self.pending and not await self.flush():  # noqa: ASYNC110 -- retrying a store, not an event
                    await asyncio.sleep(0.1)
        if self.pending:
            log.warning("claim ledger: %d record(s) not written before stopping", len(self.pending))
        await self.store.close()

    def status(self) -> dict[str, Any]:
        return {
            "store": self.store.name,
            "records": len(self.index),
            "pending": len(self.pending),
            "write_failures": self.write_failures,
            "retention_days": self.retention_ns / NS_IN_DAY,
        }


def _why(exc: Exception) -> str:
    return exc.reason if isinstance(exc, NotReadyError) else str(exc)
