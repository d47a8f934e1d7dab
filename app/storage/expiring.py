"""Leases that expire unless renewed, written once for every networked backend (etcd, PostgreSQL).

A backend whose claims expire holds them on one lease of its process: etcd's own lease, or PostgreSQL's ``leases``
row. What keeps such a lease, and what its claims do when it goes, is the same on every store and lives here; each
backend supplies only its primitives (:meth:`ExpiringSession._renew`, :meth:`ExpiringSession._end`).

:class:`ExpiringSession`: the keepalive task renews every TTL/3. Fail closed: :attr:`~ExpiringSession.deadline` is
the ``clock()`` time (the injected monotonic clock, seconds) at which the last successful renewal (or the grant) was
*sent*, plus the TTL, minus the safety margin; the store computed the expiry at a later instant, so it cannot expire
the lease before that. A failed renewal is retried with a short backoff (:data:`RETRY_START_S` doubling to
:data:`RETRY_MAX_S`, at most a quarter of the interval) while the deadline holds. A lease the store says is gone
makes the session :attr:`~ExpiringSession.lost` (final): :meth:`~ExpiringSession.done` is set and every callback
given to :meth:`~ExpiringSession.on_done` is called at once, so nobody polls for it. After etcd Go's
``concurrency.Session`` (``Lease``, ``Done``, ``Orphan``, ``Close``).

:class:`ExpiringClaim`: one identity held on a session's lease. Its loss is pushed, never polled: the lease's
loss, or the backend finding the claim itself gone (:meth:`~ExpiringClaim.set_lost`), calls every
:meth:`~app.storage.lease.Claim.on_lost` callback once.
"""

from __future__ import annotations

import asyncio
import logging
import random
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

from app.errors import NotReadyError
from app.pool import IdentityPool
from app.storage.lease import Claim, LossCallback

RETRY_START_S = 0.05
RETRY_MAX_S = 0.25
"""Failed renewals are retried at least this often: a leader election or a failover must not eat the safety
margin."""
LATE_FACTOR = 1.5
"""A renewal sent later than this many renewal intervals after the previous one counts as late."""

Outcome = Callable[[Any, str, "NotReadyError | None"], None]
"""Called after every renewal attempt: (the session, "ok" | "late" | "failed" | "lost", the error or None)."""
DoneCallback = Callable[[str], None]
"""Called once when the lease is lost, with the reason."""


class ExpiringSession(ABC):
    """A granted lease and the task keeping it alive (see the module's docstring). A backend's subclass grants
    it, then calls :meth:`start`; end it with :meth:`close`.

    ``lease_id``: the store's lease ID; ``ttl``: seconds; ``sent_at``: the ``clock()`` time the grant was sent;
    ``margin``: the safety margin (seconds) the deadline keeps before the store could expire the lease."""

    store: ClassVar[str]
    """The store's name in logs ("etcd", "postgres")."""
    log: ClassVar[logging.Logger]
    closed_reason: ClassVar[str]
    """The lost reason of a session ended by :meth:`close`."""

    def __init__(
        self,
        lease_id: int,
        ttl: float,
        sent_at: float,
        margin: float,
        clock: Callable[[], float],
        on_outcome: Outcome | None = None,
    ) -> None:
        self.lease_id = lease_id
        self.ttl = ttl
        self.margin = margin
        self.interval = ttl / 3
        self.last_sent = sent_at
        self.deadline = sent_at + ttl - margin
        self.lost_reason: str | None = None
        self.lost_event = asyncio.Event()
        """Set once the lease is lost (:meth:`done`)."""
        self.clock = clock
        """The monotonic clock (seconds) :attr:`deadline` is on."""
        self._done_callbacks: list[DoneCallback] = []
        self._on_outcome = on_outcome
        self._task: asyncio.Task[None] | None = None

    # -- the store's primitives ------------------------------------------------------------------------------
    @abstractmethod
    async def _renew(self, sent_at: float) -> float:
        """Renew the lease once (the renewal was sent at ``sent_at``); the TTL (seconds) the store confirmed.
        Raises NotReadyError; for a lease the store says is gone, calls :meth:`set_lost` and raises
        LeaseLostError."""

    @abstractmethod
    async def _end(self, timeout: float) -> None:
        """Give the lease back to the store, waiting at most ``timeout`` s. Never raises (it expires anyway)."""

    # -- state -----------------------------------------------------------------------------------------------
    @property
    def lost(self) -> bool:
        """True once the store said the lease is gone (expired, revoked, deleted), or it was closed."""
        return self.lost_reason is not None

    @property
    def status(self) -> str:
        """``"lost"`` (final), ``"unconfirmed"`` (past :attr:`deadline`: no renewal confirmed in time) or
        ``"alive"``."""
        if self.lost:
            return "lost"
        return "alive" if self.clock() < self.deadline else "unconfirmed"

    @property
    def hex(self) -> str:
        return f"{self.lease_id:016x}"

    def done(self) -> asyncio.Event:
        """Set once the lease is lost: expired, revoked, found missing, or closed (etcd's ``Session.Done()``)."""
        return self.lost_event

    def on_done(self, callback: DoneCallback) -> None:
        """Call ``callback(reason)`` once, the moment the lease is lost (at once when it already is)."""
        if self.lost_reason is not None:
            callback(self.lost_reason)
        else:
            self._done_callbacks.append(callback)

    def off_done(self, callback: DoneCallback) -> None:
        """Forget ``callback`` (its claim was released): a long-lived lease does not collect them."""
        if callback in self._done_callbacks:
            self._done_callbacks.remove(callback)

    def set_lost(self, reason: str) -> None:
        """Mark the lease lost for ``reason`` (first reason wins) and tell every :meth:`on_done` callback."""
        if self.lost_reason is None:
            self.lost_reason = reason
            self.lost_event.set()
            callbacks, self._done_callbacks = self._done_callbacks, []
            for callback in callbacks:
                callback(reason)

    # -- keeping it alive ------------------------------------------------------------------------------------
    def start(self, name: str) -> None:
        """Start the keepalive task (named ``name``)."""
        self._task = asyncio.create_task(self._keep_alive(), name=name)

    async def refresh(self) -> None:
        """One renewal; the deadline moves only once the store confirmed it. Raises NotReadyError
        (LeaseLostError: the lease is gone)."""
        sent_at = self.clock()
        ttl = await self._renew(sent_at)
        late = sent_at - self.last_sent > self.interval * LATE_FACTOR
        self.last_sent = sent_at
        self.deadline = max(self.deadline, sent_at + min(ttl, self.ttl) - self.margin)
        self._report("late" if late else "ok", None)

    async def _keep_alive(self) -> None:
        retry = RETRY_START_S
        while not self.lost:
            delay = max(0.0, self.last_sent + self.interval - self.clock())
            if delay:
                await asyncio.sleep(delay)
                if self.lost:  # lost while asleep (a watch or a claim saw it first): nothing to keep alive
                    return
            try:
                await self.refresh()
                retry = RETRY_START_S
            except NotReadyError as exc:
                self._report("lost" if self.lost else "failed", exc)
                if self.lost:
                    return
                await asyncio.sleep(retry * random.uniform(0.5, 1.0))
                retry = min(retry * 2, self.interval / 4, RETRY_MAX_S)
            except Exception as exc:  # the keepalive must outlive any one failure
                self.log.exception("%s: renewing lease %s failed unexpectedly", self.store, self.hex)
                self._report("failed", NotReadyError(f"{self.store} renewal error: {exc!r}"))
                await asyncio.sleep(retry)

    def _report(self, outcome: str, error: NotReadyError | None) -> None:
        if self._on_outcome is not None:
            self._on_outcome(self, outcome, error)

    async def stop(self) -> None:
        """Stop the keepalive task (the lease runs out by itself)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def close(self, timeout: float) -> None:
        """Stop keeping alive and give the lease back, waiting at most ``min(timeout, TTL)`` s. Never raises."""
        await self.stop()
        if self.lost:
            return
        await self._end(min(timeout, self.ttl))
        self.set_lost(self.closed_reason)


class ExpiringClaim(Claim):
    """The loss bookkeeping of one identity of ``pool`` held on ``session``'s lease: lost when the lease is, or when
    the backend finds the claim itself gone (:meth:`set_lost`); released once given back. A backend's subclass
    adds its mark writes and release."""

    store: ClassVar[str]
    """The store's name in logs ("etcd", "postgres")."""
    log: ClassVar[logging.Logger]

    def __init__(self, pool: IdentityPool, identity: int, key: str, session: ExpiringSession) -> None:
        self.scheme = pool.scheme
        self.identity = identity
        self.pool = pool
        self.key = key
        self.session = session
        self.clock = session.clock
        self.released = False
        self._lost_reason: str | None = None
        self._loss_callbacks: list[LossCallback] = []
        session.on_done(self._lease_lost)

    @property
    def lease_id(self) -> int:
        return self.session.lease_id

    @property
    def deadline(self) -> float:
        return self.session.deadline

    @property
    def lease_name(self) -> str | None:
        return self.session.hex

    def expired_at(self) -> float | None:
        session = self.session
        return session.last_sent + session.ttl if session.lost else None

    @property
    def lost_reason(self) -> str | None:
        if self.released:
            return "released"
        return self._lost_reason or self.session.lost_reason

    @property
    def lost(self) -> bool:
        return self.released or self._lost_reason is not None or self.session.lost

    def on_lost(self, callback: LossCallback) -> None:
        if self.lost_reason is not None and not self.released:
            callback(self, self.lost_reason)
        elif not self.released:
            self._loss_callbacks.append(callback)

    def set_lost(self, reason: str) -> None:
        """The claim itself is no longer ours (its key or row went to another holder, was deleted, or a revoke is
        pending): lost for ``reason`` (final); tells every loss callback."""
        if self._lost_reason is not None or self.released:
            return
        self._lost_reason = reason
        self.log.error(
            "%s: %s %s %d lost: %s (%s)", self.store, self.scheme, self.pool.kind, self.identity, reason, self.key
        )
        self._announce(reason)

    def _lease_lost(self, reason: str) -> None:
        if self._lost_reason is None and not self.released:
            self._announce(reason)

    def _announce(self, reason: str) -> None:
        callbacks, self._loss_callbacks = self._loss_callbacks, []
        for callback in callbacks:
            callback(self, reason)

    def _mark_released(self) -> bool:
        """Mark the claim released (no loss callback runs from now on); True when it was still held (neither the
        claim nor its lease lost)."""
        still_ours = self._lost_reason is None and not self.session.lost
        self.released = True
        self._loss_callbacks.clear()
        self.session.off_done(self._lease_lost)
        return still_ours
