"""Leases that expire unless renewed, written once for every networked backend (etcd, PostgreSQL, MySQL).

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
import math
import random
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

from app.errors import BackendUnavailableError, LeaseLostError, NotReadyError
from app.metrics import Metrics
from app.schemes.pool import IdentityPool
from app.settings import Settings
from app.storage.lease import Claim, LeaseBackend, LossCallback
from app.tasks import cancel_and_wait

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

    store: str
    """The store's name in logs ("etcd", "postgres", "mysql")."""
    log: logging.Logger
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
        await cancel_and_wait(task)

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

    store: str
    """The store's name in logs ("etcd", "postgres", "mysql")."""
    log: logging.Logger

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


class FleetStore(Protocol):
    """A backend's fleet records and members (:meth:`LeaseBackend.read_record` and the rest, on its store)."""

    async def read_fleet_id(self) -> str: ...

    async def read_record(self, name: str) -> dict[str, Any] | None: ...

    async def swap_record(self, name: str, expected: dict[str, Any] | None, value: dict[str, Any]) -> bool: ...

    async def has_member(self, token: str) -> bool | None: ...

    async def count_held(self, pool: IdentityPool) -> int | None: ...


BACKOFF_START_S = 0.1
BACKOFF_MAX_S = 5.0
"""The backend's background step (granting a lease, publishing registrations, retrying deferred releases) is
retried from BACKOFF_START_S, doubling, capped at TTL/3 and this."""


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait for ``event`` at most ``timeout`` seconds; True when it was set."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True


class ExpiringBackend(LeaseBackend):
    """The upkeep and health of one process's lease on a store whose claims expire, written once: the background
    task (grant a lease when there is none, then the backend's :meth:`_step`), the health each renewal reports
    (:meth:`_outcome`, :meth:`_failed`, metrics, logs), the lease's loss, and :meth:`_usable`: a lease valid now or
    a refusal naming why. A backend supplies :meth:`_new_session`, :meth:`_step` and :attr:`claims`.

    ``settings``: the lease TTL and safety margin; ``metrics``: optional; ``clock``: monotonic seconds (every
    deadline of the lease and its claims is on it)."""

    store: str
    """The store's name in logs ("etcd", "postgres", "mysql")."""
    _fleet: FleetStore
    title: str
    """The store's name in reasons ("etcd", "PostgreSQL")."""
    log: logging.Logger

    def __init__(self, settings: Settings, metrics: Metrics | None, clock: Callable[[], float]) -> None:
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self._ttl = int(settings.lease_ttl)
        self._margin = float(settings.lease_safety_margin)
        self.mark_interval = self._ttl / 3
        # Marks reach at most max_clock_wait ahead (at least one interval), so a node that re-claims the
        # identity it just dropped waits for its own mark instead of refusing it.
        self.mark_horizon = max(self.mark_interval, min(2 * self.mark_interval, settings.max_clock_wait))
        self._refresh_interval = self._ttl / 3
        self._retry_after = max(1, math.ceil(self._refresh_interval))
        self._session: Any = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._attempted = asyncio.Event()
        self._ready = asyncio.Event()
        self._healthy: bool | None = None
        self._failures = 0
        self._failing_since: float | None = None
        self._deadline_logged = False
        self._reason = f"{self.store} backend not started"
        self._closed = False

    # -- the backend's primitives ----------------------------------------------------------------------------
    @property
    @abstractmethod
    def claims(self) -> set[Any]:
        """The claims this process holds (each with its ``session``)."""

    @abstractmethod
    async def _new_session(self) -> Any:
        """Grant a new lease and start keeping it alive (an :class:`ExpiringSession` reporting to
        :meth:`_outcome`). Raises NotReadyError."""

    @abstractmethod
    async def _step(self, session: Any) -> None:
        """The backend's background work on a live lease (registrations, deferred releases...). Raises
        NotReadyError."""

    @property
    @abstractmethod
    def _wait_s(self) -> float:
        """How long :meth:`_usable` waits for a lease being granted (seconds)."""

    def _renewed(self, session: Any) -> None:
        """Called after every confirmed renewal (etcd: the watches follow the client's member)."""

    # -- the background task ---------------------------------------------------------------------------------
    async def _begin(self, first_try: float) -> None:
        """Start the background task; wait at most ``first_try`` seconds for its first attempt."""
        if self._task is not None:
            return
        self._reason = f"connecting to {self.title}"
        self._task = asyncio.create_task(self._run(), name=f"idmint-{self.store}-backend")
        await wait_event(self._attempted, first_try)

    async def _end_task(self) -> None:
        """Mark the backend closed and stop its background task."""
        self._closed = True
        self._reason = f"{self.store} backend closed"
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _run(self) -> None:
        backoff = BACKOFF_START_S
        while not self._closed:
            self._wake.clear()
            delay = self._refresh_interval
            try:
                session = self._session
                if session is None or session.lost:
                    session = await self._grant()
                await self._step(session)
                backoff = BACKOFF_START_S
            except NotReadyError as exc:
                self._failed(exc)
                delay = backoff * random.uniform(0.5, 1.0)
                backoff = min(backoff * 2, self._refresh_interval, BACKOFF_MAX_S)
            except Exception as exc:  # the background task must outlive any one failure
                self.log.exception("%s: background step failed unexpectedly", self.store)
                self._failed(BackendUnavailableError(f"{self.store} backend error: {exc!r}"))
                delay = backoff
            self._attempted.set()
            await wait_event(self._wake, delay)

    async def _grant(self) -> Any:
        session = await self._new_session()
        session.on_done(lambda reason: self._lease_lost(session, reason))
        old, self._session = self._session, session
        if old is not None:
            await old.stop()  # the lost lease's keepalive task ends here, not whenever it next wakes
        self.log.info(
            "%s: lease %s granted by %s (TTL %g s, renewed every %.1f s, fail closed %.1f s after a renewal)",
            self.store,
            session.hex,
            self._where(),
            session.ttl,
            session.interval,
            session.ttl - self._margin,
        )
        await self._granted()
        self._outcome(session, "ok", None)
        return session

    def _where(self) -> str:
        """Where the lease was granted, for logs (no secret)."""
        return self.title

    async def _granted(self) -> None:
        """Called once a new lease is granted, before it counts as healthy (PostgreSQL: forget old leases)."""

    # -- health ----------------------------------------------------------------------------------------------
    def _outcome(self, session: Any, outcome: str, error: NotReadyError | None) -> None:
        """Called by the session after each renewal: health, reason, metrics, logs."""
        if session is not self._session and self._session is not None:
            return
        if self.metrics is not None:
            self.metrics.lease_renewal(outcome)
        if outcome == "lost":
            session.set_lost(error.reason if error else "lease lost")
        elif error is not None:
            self._failed(error)
        else:
            if self._healthy is False:
                self.log.info(
                    "%s: recovered: lease %s renewed after %d failed attempt(s) over %.1f s",
                    self.store,
                    session.hex,
                    self._failures,
                    self.clock() - (self._failing_since or self.clock()),
                )
            elif outcome == "late":
                self.log.warning("%s: lease %s renewal was late", self.store, session.hex)
            self._failures = 0
            self._failing_since = None
            self._healthy = True
            self._deadline_logged = False
            self._reason = ""
            if self.metrics is not None:
                self.metrics.lease_deadline(session.deadline - self.clock())
            self._ready.set()
            self._renewed(session)

    def _lease_lost(self, session: Any, reason: str) -> None:
        """Called once by ``session`` when its lease is lost: log, stop answering as ready, grant a new lease."""
        if self._closed:
            return
        held = [c for c in self.claims if c.session is session]
        self.log.error(
            "%s: lease %s lost: %s; %d claim(s) on it are void, granting a new lease",
            self.store,
            session.hex,
            reason,
            len(held),
        )
        if session is self._session:
            self._ready.clear()
        self._wake.set()

    def _failed(self, exc: NotReadyError) -> None:
        now = self.clock()
        self._failures += 1
        self._reason = exc.reason
        session = self._session
        if isinstance(exc, LeaseLostError) and session is not None:
            session.set_lost(exc.reason)
        if self._healthy is not False:
            self._failing_since = now
            if session is None or session.lost:
                self.log.warning("%s: no lease: %s; retrying with backoff", self.store, exc.reason)
            else:
                self.log.warning(
                    "%s: %s; lease %s fails closed in %.1f s unless a renewal succeeds",
                    self.store,
                    exc.reason,
                    session.hex,
                    max(0.0, session.deadline - now),
                )
            self._healthy = False
        if session is not None and not session.lost and now >= session.deadline and not self._deadline_logged:
            self._deadline_logged = True
            self.log.error(
                "%s: lease %s deadline passed without a confirmed renewal: claims fail closed until %s answers",
                self.store,
                session.hex,
                self.title,
            )

    async def _usable(self) -> Any:
        """A lease valid now; waits briefly for a lease being granted. Raises NotReadyError."""
        if self._closed:
            raise BackendUnavailableError(f"{self.store} backend is closed")
        if self._task is None:
            raise BackendUnavailableError(f"{self.store} backend not started")
        for attempt in range(2):
            session = self._session
            if session is not None and not session.lost and self.clock() < session.deadline:
                return session
            if attempt or self._healthy is False:
                break
            self._wake.set()
            if not await wait_event(self._ready, self._wait_s):
                break
        session = self._session
        if self._reason:
            reason = self._reason
        elif session is not None and not session.lost:
            reason = f"{self.title} lease {session.hex} not renewed in time (deadline passed)"
        else:
            reason = f"no {self.title} lease yet"
        raise BackendUnavailableError(reason, retry_after=self._retry_after)

    # -- the fleet: the backend's ``_fleet`` reads and writes its records -----------------------------------------
    async def fleet_id(self) -> str:
        return await self._fleet.read_fleet_id()

    async def read_record(self, name: str) -> dict[str, Any] | None:
        return await self._fleet.read_record(name)

    async def swap_record(self, name: str, expected: dict[str, Any] | None, value: dict[str, Any]) -> bool:
        return await self._fleet.swap_record(name, expected, value)

    async def has_member(self, token: str) -> bool | None:
        return await self._fleet.has_member(token)

    async def count_held(self, pool: IdentityPool) -> int | None:
        return await self._fleet.count_held(pool)

    def member_token(self) -> str | None:
        """This process's lease ID (hex): a node on the same store sees it alive, one on a restored copy does not."""
        session = self._session
        return session.hex if session is not None and not session.lost else None

    def _lease_status(self) -> dict[str, Any]:
        """The lease's part of :meth:`status`."""
        session = self._session
        out: dict[str, Any] = {}
        if session is not None:
            out["lease"] = session.hex
            out["lease_lost"] = session.lost
            out["lease_status"] = session.status
            out["deadline_in_s"] = round(session.deadline - self.clock(), 3)
        if self._reason:
            out["reason"] = self._reason
        out["claims"] = sorted(c.key for c in self.claims)
        return out
