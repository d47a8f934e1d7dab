"""One etcd lease kept alive: the :class:`~app.storage.expiring.ExpiringSession` on etcd's own lease (after etcd
Go's ``concurrency.Session``).

The keepalive is etcd's ``LeaseKeepAlive``; a refresh answering TTL <= 0, or any call answering "lease not found",
makes the session lost. A refresh not answered within a quarter of its attempt's timeout is sent to the next member
as well (:meth:`~app.storage.etcd.client.EtcdClient.call_hedged`: a stalled member must not eat the safety
margin); a failed one is retried at once on the next endpoint (the client moves on), then with the shared short
backoff, while the deadline still holds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from app.errors import LeaseLostError
from app.storage.etcd.client import EtcdCallError, EtcdClient, map_error
from app.storage.expiring import ExpiringSession, Outcome

log = logging.getLogger("idmint.lease.etcd")

HEDGE_SHARE = 0.25
"""A keepalive not answered within this share of its attempt's timeout is sent to the next member as well."""


class Session(ExpiringSession):
    """A granted etcd lease and the task keeping it alive. Build with :meth:`grant`; end with :meth:`close`."""

    store = "etcd"
    log = log
    closed_reason = "lease revoked at shutdown"

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
        super().__init__(lease_id, ttl, sent_at, margin, clock, on_outcome)
        self.client = client
        self._attempt_timeout = attempt_timeout

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
        session.start(f"idmint-etcd-lease-{session.hex}")
        return session

    async def _renew(self, sent_at: float) -> float:
        try:
            ttl = await self.client.keepalive(self.lease_id, self._attempt_timeout, self._attempt_timeout * HEDGE_SHARE)
        except EtcdCallError as exc:
            error = map_error(exc, "refreshing the lease")
            if isinstance(error, LeaseLostError):
                self.set_lost(error.reason)
            raise error from exc
        if ttl <= 0:
            self.set_lost("etcd says the lease expired or was revoked")
            raise LeaseLostError(f"etcd lease {self.hex} expired or was revoked")
        return float(ttl)

    async def _end(self, timeout: float) -> None:
        try:
            async with asyncio.timeout(timeout):
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
