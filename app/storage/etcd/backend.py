"""The etcd lease backend: the lease's upkeep and health, claims, release (see :mod:`app.storage.etcd`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from app.errors import ConfigError, LeaseLostError
from app.metrics import Metrics
from app.schemes.pool import IdentityPool
from app.settings import Settings
from app.storage.etcd.calls import RETRY_BUDGET_S, Calls, open_client
from app.storage.etcd.claim import EtcdClaim
from app.storage.etcd.claimer import Claimer, Leftovers
from app.storage.etcd.client import LEASE_LANE, EtcdClient, redact
from app.storage.etcd.history import read_facts
from app.storage.etcd.records import FleetReads, Registrations
from app.storage.etcd.revoke import revoke_claim
from app.storage.etcd.session import Session
from app.storage.expiring import ExpiringBackend
from app.storage.lease import Claim, Facts, Owner

log = logging.getLogger("idmint.lease.etcd")

MIN_ATTEMPT_TIMEOUT_S = 0.2

__all__ = ["EtcdBackend", "EtcdClaim"]


class EtcdBackend(ExpiringBackend):
    """etcd leases for node identities (see :mod:`app.storage.etcd` for the key layout and the safety argument).

    ``settings``: the ``etcd_*`` settings (endpoints, namespace, TTL, safety margin, timeouts, TLS, auth);
    ``metrics``: optional :class:`~app.metrics.Metrics`; ``clock``: monotonic seconds (deadlines use it).
    Raises :class:`~app.errors.ConfigError` for unusable settings (no endpoints, unreadable TLS files).
    """

    name = "etcd"
    store = "etcd"
    title = "etcd"
    log = log

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        client: EtcdClient | None = None,
    ) -> None:
        if not settings.etcd_endpoints:
            raise ConfigError("etcd backend needs etcd_endpoints (IDMINT_ETCD_ENDPOINTS), got none")
        super().__init__(settings, metrics, clock)
        self._namespace = settings.etcd_namespace
        # One endpoint gets this long before the next is asked: a stalled member must not outlast the margin.
        self._attempt_timeout = max(
            MIN_ATTEMPT_TIMEOUT_S, min(settings.etcd_request_timeout, self._refresh_interval / 2)
        )
        self._owns_client = client is None
        shared = client or open_client(settings)
        # The lease's calls on connections of their own: no store call waiting for a connection delays a keepalive.
        self._calls = Calls.on(shared, settings, self._attempt_timeout, self._retry_after, lane=LEASE_LANE)
        self._client = self._calls.client
        self._revoking = shared.limited(timeout=settings.etcd_request_timeout, budget=RETRY_BUDGET_S, lane=LEASE_LANE)
        self._session: Session | None = None
        self._leftovers = Leftovers(self._calls)
        self._claimer = Claimer(
            self._calls, self._namespace, self._ttl, self._leftovers, self._claim_lost, settings.etcd_request_timeout
        )
        self._registrations = Registrations(self._calls, self._namespace)
        self._fleet = FleetReads(self._calls, self._namespace)

    # -- lifecycle -------------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the background task; wait (bounded) for its first attempt. Never raises for an unreachable etcd."""
        await self._begin(self.settings.etcd_connect_timeout + 2 * self.settings.etcd_request_timeout)

    async def close(self) -> None:
        """Stop background work, give every claim back and revoke the lease (timeout <= TTL). Never raises."""
        if self._closed:
            return
        await self._end_task()
        claims, self._claimer.claims = list(self._claimer.claims), set()
        for claim in claims:
            await claim.release(None)
        session, self._session = self._session, None
        if session is not None:
            await session.close(min(float(self._ttl), self.settings.etcd_request_timeout))
        if self._owns_client:
            await self._client.close()

    # -- the background task: a lease, watches, registrations, deferred deletes -------------------------------
    @property
    def claims(self) -> set[EtcdClaim]:
        return self._claimer.claims

    @property
    def _wait_s(self) -> float:
        return self.settings.etcd_request_timeout

    def _where(self) -> str:
        return redact(self._client.endpoint)

    async def _new_session(self) -> Session:
        async with self._calls.bounded("granting a lease"):
            return await Session.grant(
                self._client, self._ttl, self._margin, self.clock, self._attempt_timeout, self._outcome
            )

    async def _step(self, session: Session) -> None:
        await self._rearm_watches(session)
        await self._registrations.publish(session)
        await self._leftovers.retry(session)

    def _renewed(self, session: Session) -> None:
        if any(c.needs_rearm(self._client.endpoint) for c in self._claimer.claims):
            self._wake.set()  # the client moved to another member: watches follow it

    # -- claims ----------------------------------------------------------------------------------------------
    async def claim(self, pool: IdentityPool, owner: Owner, exclude: frozenset[int] = frozenset()) -> EtcdClaim:
        """Claim one free identity of ``pool`` on this process's lease (one transaction per attempt).

        Raises NotReadyError when the pool's group is not listed in its ``allowed_groups_key``,
        PoolExhaustedError when every candidate is held, BackendUnavailableError when etcd cannot be used.
        A lease found gone while claiming is replaced (once) and the claim retried on the new one.
        """
        for attempt in range(2):
            session = await self._usable()
            try:
                return await self._claimer.claim(session, pool, exclude, owner)
            except LeaseLostError as exc:
                session.set_lost(exc.reason)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    # -- watches ---------------------------------------------------------------------------------------------
    async def _rearm_watches(self, session: Session) -> None:
        """Verify and watch again every claim whose watch broke or sits on another member than the client's."""
        for claim in list(self._claimer.claims):
            if claim.session is session and claim.needs_rearm(self._client.endpoint):
                await claim.rearm(self.settings.etcd_request_timeout)

    # -- release / register ----------------------------------------------------------------------------------
    async def release(self, claim: Claim, final_mark: int | None) -> None:
        """Record ``final_mark`` exactly (never below the inherited mark) and delete the claim key.

        Never raises: a lost claim is only forgotten; an unreachable etcd is logged (the lease expires anyway).
        """
        if not isinstance(claim, EtcdClaim) or claim.released:
            return
        self._claimer.claims.discard(claim)
        if not await claim.release(final_mark):
            return
        if await self._leftovers.delete(claim.key.encode(), claim.create_revision, claim.lease_id):
            log.info("etcd: released %s %s %d", claim.scheme, claim.pool.kind, claim.identity)

    def _claim_lost(self, claim: Claim, reason: str) -> None:
        self._wake.set()

    async def register(self, scheme: str, name: str, value: dict[str, Any]) -> None:
        """Put ``idmint/<scheme>/<name>`` = JSON ``value`` on the lease; re-published on every new lease.

        Raises BackendUnavailableError when it cannot be published now (it is published once etcd answers).
        """
        self._registrations.add(scheme, name, value)
        session = await self._usable()
        await self._registrations.publish(session)

    async def revoke(self, pool: IdentityPool, identity: int, by: dict[str, Any]) -> dict[str, Any]:
        """Revoke another node's claim of ``identity`` of ``pool`` (:func:`~app.storage.etcd.revoke.revoke_claim`:
        the owner stops first, then the identity is freed)."""
        return await revoke_claim(self._revoking, self._namespace, self._ttl, pool, identity, by)

    # -- the fleet ---------------------------------------------------------------------------------------------
    async def history_facts(self) -> Facts:
        return await read_facts(self._calls, self._namespace)

    # -- helpers ---------------------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "backend": self.name,
            "endpoints": [redact(url) for url in self.settings.etcd_endpoints],
            "endpoint": redact(self._client.endpoint),
            "namespace": self._namespace,
            "lease_ttl_s": self._ttl,
            "connected": bool(self._healthy),
            "healthy": bool(self._healthy),
        }
        out.update(self._lease_status())
        return out
