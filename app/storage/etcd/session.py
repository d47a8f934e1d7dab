"""One etcd lease kept alive: after etcd Go's ``concurrency.Session`` (``Lease``, ``Done``, ``Orphan``, ``Close``).

The session alone owns the lease's health. The keepalive task refreshes every TTL/3. Fail closed:
:attr:`Session.deadline` is the ``clock()`` time (the injected monotonic clock, seconds) at which the last
successful refresh (or the grant) was *sent*, plus the TTL, minus the safety margin; etcd cannot expire the lease
before that, whichever member answered. A refresh answering TTL <= 0, or any call answering "lease not found",
makes the session :attr:`~Session.lost` (final): :meth:`Session.done` is set and every callback given to
:meth:`Session.on_done` is called at once, so nobody has to poll for it. A failed refresh is retried at once on
the next endpoint (the client moves on), then with a short backoff, while the deadline still holds.
:attr:`Session.status` sums it up: ``"alive"``, ``"unconfirmed"`` (past the deadline, not known lost) or
``"lost"``.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

from app.errors import LeaseLostError, NotReadyError
from app.storage.etcd.client import EtcdCallError, EtcdClient, map_error

log = logging.getLogger("idmint.lease.etcd")

RETRY_START_S = 0.05
RETRY_MAX_S = 0.25
"""Failed refreshes are retried at least this often: a leader election must not eat the safety margin."""
LATE_FACTOR = 1.5
"""A refresh sent later than this many refresh intervals after the previous one counts as late."""

Outcome = Callable[["Session", str, "NotReadyError | None"], None]
"""Called after every refresh attempt: (session, "ok" | "late" | "failed" | "lost", the error or None)."""
DoneCallback = Callable[[str], None]
"""Called once when the lease is lost, with the reason."""


class Session:
    """A granted lease and the task keeping it alive. Build with :meth:`grant`; end with :meth:`close`."""

    def __init__(
        self,
        client: EtcdClient,
        lease_id: int,
        ttl: float,
        sent_at: float,
        margin: float,
        clock: Callable[[], float],
        attempt_timeout: float,
        on_outcome: Outcome | None = None,
    ) -> None:
        self.client = client
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
        self._attempt_timeout = attempt_timeout
        self._on_outcome = on_outcome
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def grant(
        cls,
        client: EtcdClient,
        ttl: int,
        margin: float,
        clock: Callable[[], float],
        attempt_timeout: float,
        on_outcome: Outcome | None = None,
    ) -> Session:
        """Grant a lease of ``ttl`` seconds and start keeping it alive. Raises EtcdCallError."""
        sent_at = clock()
        lease_id, granted = await client.grant(ttl)
        if granted <= 0:
            raise EtcdCallError(2, f"granted a lease with TTL {granted}", client.endpoint)
        session = cls(client, lease_id, min(granted, ttl), sent_at, margin, clock, attempt_timeout, on_outcome)
        session._task = asyncio.create_task(session._keep_alive(), name=f"idmint-etcd-lease-{session.hex}")
        return session

    @property
    def lost(self) -> bool:
        """True once etcd said the lease is gone (expired or revoked), or it was closed."""
        return self.lost_reason is not None

    @property
    def status(self) -> str:
        """``"lost"`` (final), ``"unconfirmed"`` (past :attr:`deadline`: no refresh confirmed in time) or
        ``"alive"``."""
        if self.lost:
            return "lost"
        return "alive" if self.clock() < self.deadline else "unconfirmed"

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

    @property
    def hex(self) -> str:
        return f"{self.lease_id:016x}"

    def set_lost(self, reason: str) -> None:
        """Mark the lease lost for ``reason`` (first reason wins) and tell every :meth:`on_done` callback."""
        if self.lost_reason is None:
            self.lost_reason = reason
            self.lost_event.set()
            callbacks, self._done_callbacks = self._done_callbacks, []
            for callback in callbacks:
                callback(reason)

    async def refresh(self) -> None:
        """One keepalive (moving across endpoints as needed). Raises NotReadyError (LeaseLostError: gone)."""
        sent_at = self.clock()
        try:
            ttl = await self.client.keepalive(self.lease_id, self._attempt_timeout)
        except EtcdCallError as exc:
            error = map_error(exc, "refreshing the lease")
            if isinstance(error, LeaseLostError):
                self.set_lost(error.reason)
            raise error from exc
        if ttl <= 0:
            self.set_lost("etcd says the lease expired or was revoked")
            raise LeaseLostError(f"etcd lease {self.hex} expired or was revoked")
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
                log.exception("etcd: keepalive of lease %s failed unexpectedly", self.hex)
                self._report("failed", NotReadyError(f"etcd keepalive error: {exc!r}"))
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
        """Stop keeping alive and revoke the lease, waiting at most ``min(timeout, TTL)`` s. Never raises."""
        await self.stop()
        if self.lost:
            return
        try:
            async with asyncio.timeout(min(timeout, self.ttl)):
                await self.client.revoke(self.lease_id, timeout)
            log.info("etcd: lease %s revoked", self.hex)
        except EtcdCallError as exc:
            error = map_error(exc, "revoking the lease")
            if isinstance(error, LeaseLostError):
                log.info("etcd: lease %s was already gone at shutdown", self.hex)
            else:
                log.warning(
                    "etcd: revoking lease %s failed (it expires within %g s): %s", self.hex, self.ttl, error.reason
                )
        except TimeoutError:
            log.warning("etcd: revoking lease %s timed out (it expires within %g s)", self.hex, self.ttl)
        self.set_lost("lease revoked at shutdown")
