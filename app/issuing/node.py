"""The node: one :class:`~app.issuing.issuer.Issuer` per scheme, each given the
:class:`~app.issuing.holder.IdentityHolder` of the claimed identity behind its generator (a scheme that shares
another's generator is given that scheme's holder).

Safety rules enforced here, in the issuers (:mod:`app.issuing.issuer`) and the holders (:mod:`app.issuing.holder`),
above any lease backend:

* **Fail closed.** Every issue asks the holder (:meth:`IdentityHolder.check <app.issuing.holder.IdentityHolder.check>`)
  whether each claim is still valid (not lost, and the backend's monotonic clock before the claim's deadline);
  otherwise it raises :class:`~app.errors.NotReadyError` (HTTP 503 + Retry-After) and the background task
  re-claims, possibly a different identity. A loss (lease, claim key) is pushed to the holder when it happens.
* **High-water marks are reservations.** Before IDs leave the process, the claim's recorded mark must be at or
  above every timestamp issued. The background task keeps the mark ``backend.mark_horizon`` seconds ahead of the
  clock, so the hot path normally finds it already high enough; when not, the issue awaits a new record first.
  After a crash the next holder starts above the mark; a clean stop records the exact final mark.
* **Clock behind a mark.** A claimed identity whose mark is ahead of our clock by more than
  ``settings.max_clock_wait`` is refused (released, excluded, logged, counted) and another is claimed; a smaller
  gap is waited out by the generator (or, for HLC-ULID and Muid, carried by their logical clock). While that wait
  is longer than ``INHERITED_WAIT_READY_S``, the scheme is not ready (503 + Retry-After) rather than hanging.
* **Bounded clock waits.** No request sleeps on the clock for longer than ``settings.max_clock_wait`` at a time:
  past it the answer is 503 + Retry-After, and when the issuer holds a claimed identity (the clock was stepped
  back further than that while running), the identity is refused and another claimed, as at start-up.
* **Fleets.** Regions give every fleet a disjoint slice of each leased identity space (:mod:`app.schemes.pool`); with
  ``IDMINT_PEER_FLEETS`` set, a scheme whose identities overlap a peer fleet's is not ready (:mod:`app.issuing.fleet`).
* **Storage faults.** A high-water mark that cannot be recorded (disk full, read-only state directory, etcd
  refusing) makes the scheme not ready, naming why, until a retry succeeds; the background task survives any
  exception, retrying with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
import time
from datetime import UTC, datetime
from typing import Any

from app import __version__
from app.errors import NotReadyError
from app.issuing.backfill import Backfiller
from app.issuing.fleet import FleetGuard, listens_beyond_loopback
from app.issuing.holder import IdentityHolder, Keeper, fleet_settings, register
from app.issuing.issuer import Issuer, SharedIssuer
from app.ledger import Ledger
from app.metrics import Metrics
from app.schemes import schemes
from app.schemes.base import Clock, Generator, Scheme
from app.schemes.pool import IdentityPool
from app.settings import Settings
from app.storage.base import Storage
from app.storage.lease import LeaseBackend, Owner
from app.tasks import cancel_and_wait

log = logging.getLogger("idmint.node")

FLEET_ID_START_WAIT_S = 2.0
"""How long start-up waits to read the fleet ID (then ``/v1/fleet`` says null until the guard's task reads it)."""
HELD_COUNT_TIMEOUT_S = 1.0
"""How long ``/v1/schemes`` waits for the backend to count the slices' held identities (all schemes together)."""
HELD_COUNT_CACHE_S = 1.0
"""Held counts are read from the backend at most this often (``/v1/schemes`` is a public route)."""


def node_clock(settings: Settings) -> Clock:
    """The clock of a node (ns since the Unix epoch): the system clock, shifted by ``settings.clock_offset_ms`` (a
    test hook)."""
    offset_ns = settings.clock_offset_ms * 1_000_000
    return time.time_ns if not offset_ns else (lambda: time.time_ns() + offset_ns)


class Node:
    """All issuers of this process, the lease backend behind them, and the clock they share."""

    def __init__(
        self,
        settings: Settings,
        storage: Storage,
        metrics: Metrics,
        clock: Clock | None = None,
        only: list[str] | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        self.settings = settings
        self.storage = storage
        self.backend: LeaseBackend = storage.leases
        self.metrics = metrics
        self.clock: Clock = clock or node_clock(settings)
        self.owner = Owner(
            host=socket.gethostname(),
            pid=os.getpid(),
            version=__version__,
            started_at=datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
            address=f"{settings.host}:{settings.port}",
            pod=os.environ.get("POD_NAME", ""),  # the Kubernetes downward API (deploy/kubernetes sets them)
            namespace=os.environ.get("POD_NAMESPACE", ""),
        )
        self.ledger = ledger
        """Who held which identity when (:mod:`app.ledger`): every holder tells it of its claims (the node's one
        listener, given here; it knows nothing of the node), and the node starts and stops it. None: not kept
        (``idmint mint``, tests)."""
        self.schemes: dict[str, Scheme] = {name: s.configured(settings) for name, s in schemes().items()}
        """Every registered scheme as this node uses it (:meth:`Scheme.configured`): decoding and /v1/schemes
        read these."""
        self.issuers: dict[str, Issuer] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._build_issuers()
        if only is not None:
            self.issuers = {name: issuer for name, issuer in self.issuers.items() if name in only}
        self.fleet = FleetGuard(settings, storage, self._guarded_pools(), self._block, metrics)
        self._held_counts: tuple[float, dict[str, int | None]] | None = None
        self.backfiller = Backfiller(self)
        """Back-dated IDs (``POST /v1/ids/{scheme}/backfill``) and this node's backfill claims."""

    def _pools(self) -> dict[str, IdentityPool]:
        """Scheme -> the identity pool it claims from (schemes with their own issuer and a pool)."""
        return {
            name: issuer.holder.pool
            for name, issuer in self.issuers.items()
            if not isinstance(issuer, SharedIssuer) and issuer.holder.pool is not None
        }

    def _guarded_pools(self) -> dict[str, IdentityPool]:
        """The pools peer fleets are checked against: the schemes whose uniqueness rests on a leased identity that
        regions slice, and any static identity (a static Muid medallion is no random draw)."""
        return {name: pool for name, pool in self._pools().items() if pool.sliced or pool.static is not None}

    def _block(self, scheme: str, reason: str | None) -> None:
        self.issuers[scheme].holder.set_blocked(reason)

    def _build_issuers(self) -> None:
        """One issuer per registered scheme, from what the scheme declares: its identity pool, its
        generator factory, or the scheme whose issuer it shares."""
        settings, clock = self.settings, self.clock
        for name, scheme in self.schemes.items():
            if scheme.shares_generator_with is not None:
                continue
            pool = scheme.identity_pool(settings)

            def factory(ids: list[int], floor: int, scheme: Scheme = scheme) -> Generator:
                return scheme.new_generator(settings, ids, floor, clock)

            metrics = self.metrics.scheme(name)
            holder = IdentityHolder(
                scheme,
                factory,
                pool,
                metrics,
                backend=self.backend,
                owner=self.owner,
                clock=clock,
                max_clock_wait=settings.max_clock_wait,
                observer=self.ledger,
                fleet_id=self._fleet_id,
                fleet_settings=fleet_settings(scheme, pool, settings),
                storage_reason=self.storage_reason,
                history=self.storage.history,
            )
            self.issuers[name] = Issuer(scheme, holder, metrics)
        for name, scheme in self.schemes.items():
            base = scheme.shares_generator_with
            if base is not None:
                if base not in self.issuers:
                    raise ValueError(f"{name} shares the generator of {base!r}, which has no issuer of its own")
                self.issuers[name] = SharedIssuer(self.issuers[base], scheme, self.metrics.scheme(name))
                self.issuers[base].holder.share_with(self.metrics.scheme(name))

    def _fleet_id(self) -> str | None:
        """This fleet's ID as the fleet guard last read it (None while not known)."""
        return self.fleet.fleet_id

    def storage_reason(self) -> str | None:
        """Why storage cannot be used now, as its lease backend reports it (``"postgres: connecting to
        PostgreSQL"``), or None when it reports nothing wrong."""
        reason = self.storage.status().get("reason")
        return f"{self.storage.name}: {reason}" if reason else None

    async def start(self) -> None:
        """Start the backend and the issuers' background tasks; first claims are attempted before returning, so
        this waits on storage: for one that does not answer, a first attempt takes the backend's connect and request
        timeouts per scheme. The app runs it in a background task (:func:`app.main.create_app`); cancelling it
        leaves nothing that :meth:`stop` does not end. Raises nothing for unreachable storage (the schemes are not
        ready, naming why, and their background tasks keep trying)."""
        if not self.storage.capabilities.claims_expire:  # file locks never expire; a lease reports its own deadline
            self.metrics.lease_deadline(math.inf)
        self._check_regions()
        for name, scheme in self.schemes.items():
            end_ns = scheme.id_space_end_ns()
            self.metrics.scheme(name).id_space_end(math.inf if end_ns is None else end_ns / 1e9)
        own = [issuer for issuer in self.issuers.values() if not isinstance(issuer, SharedIssuer)]
        for issuer in own:  # a scheme that leases nothing issues at once, whatever storage does
            if issuer.holder.pool is None:
                await self._first_claim(issuer)
        await self.backend.start()
        history = self.storage.history
        history.on_change(self._history_changed)
        with contextlib.suppress(NotReadyError):  # unread: the guard's task keeps trying, nothing is claimed till then
            await history.round()
        self._tasks.append(asyncio.create_task(history.run(), name="idmint-storage-history"))
        with contextlib.suppress(TimeoutError):  # read now when it is quick; else the guard's task keeps trying
            async with asyncio.timeout(FLEET_ID_START_WAIT_S):
                await self.fleet.read_fleet_id()
        self._tasks.append(asyncio.create_task(self.fleet.run(), name="idmint-fleet-guard"))
        if self.ledger is not None:
            await self.ledger.start()
        for issuer in own:
            if issuer.holder.pool is not None:
                await self._first_claim(issuer)
        for issuer in self.issuers.values():
            if isinstance(issuer, SharedIssuer) and issuer.holder.generator is None:  # its base's holder claims
                log.warning("%s: not ready: %s: %s", issuer.name, issuer.name, issuer.holder.reason)
        for issuer in self.issuers.values():
            published = issuer.generator and issuer.scheme.registration(issuer.generator)
            if published:
                await self.register(issuer.name, published)

    async def _first_claim(self, issuer: Issuer) -> None:
        """Claim for ``issuer``'s holder once (a failure is its reason, logged), then start its background task."""
        holder = issuer.holder
        try:
            await holder.acquire()
        except NotReadyError as exc:
            holder.claim_failed(exc.reason, exc.retry_after)
            log.warning("%s: not ready: %s", issuer.name, exc.reason)
        self._tasks.append(asyncio.create_task(Keeper(holder).run(), name=f"idmint-issuer-{issuer.name}"))

    def _history_changed(self, reason: str | None) -> None:
        """The store went back in time (``reason``): every leased identity stops at once (its claims are dropped);
        its history is confirmed or fenced (None): every holder tries to claim at once."""
        for issuer in self.issuers.values():
            if not isinstance(issuer, SharedIssuer):
                issuer.holder.history_changed(reason)

    def _check_regions(self) -> None:
        """Meter whether regions are configured, and warn when an embedded fleet is reachable from other machines
        with one region: a second such fleet (another host, another state directory) claims the same identities."""
        settings = self.settings
        exposed = listens_beyond_loopback(settings.host)
        self.metrics.region_configured(settings.regions > 1, self.storage.name, exposed)
        if self.storage.capabilities.one_host and exposed and settings.regions == 1 and not settings.peer_fleets:
            log.warning(
                "the embedded lease backend serves one state directory (%s) on %s with IDMINT_REGIONS=1: another "
                "idmint with another state directory (another host, another container volume) claims the same "
                "identities and issues the same IDs. Give each such fleet its own IDMINT_REGION of IDMINT_REGIONS "
                "(and list the others in IDMINT_PEER_FLEETS), or share one etcd (IDMINT_ETCD_ENDPOINTS) or PostgreSQL "
                "(IDMINT_POSTGRES_URL)",
                settings.state_dir,
                settings.host,
            )

    async def register(self, scheme: str, published: str) -> None:
        """Publish what ``scheme``'s generator registers (Wiji's random part); a failure is logged, not raised."""
        await register(self.backend, self.owner, scheme, published)

    async def drain(self) -> list[dict[str, Any]]:
        """Stop issuing for good and give every claim back (exact final marks recorded): the holders' background
        tasks end, so nothing is claimed again; the backend, the fleet guard and the ledger keep running (health
        checks, decode). Returns the claims released (``{"scheme", "kind", "identity"}``)."""
        holders = [i.holder for i in self.issuers.values() if not isinstance(i, SharedIssuer)]
        tasks = [t for t in self._tasks if t.get_name().startswith("idmint-issuer-")]
        await cancel_and_wait(*tasks)
        self._tasks = [t for t in self._tasks if t not in tasks]
        released = []
        for holder in holders:
            kind = holder.pool.kind if holder.pool is not None else "identity"
            released += [{"scheme": holder.name, "kind": kind, "identity": c.identity} for c in holder.claims]
            await holder.stop("draining: this node gave its claims back and issues no more")
        return released

    async def stop(self) -> None:
        """Cancel background tasks, record final marks, release claims, close the backend."""
        await cancel_and_wait(*self._tasks)
        self._tasks.clear()
        for issuer in self.issuers.values():
            if not isinstance(issuer, SharedIssuer):
                await issuer.holder.stop()
        await self.backfiller.stop()
        if self.ledger is not None:
            await self.ledger.stop()
        await self.backend.close()

    def issuer(self, name: str) -> Issuer:
        """The issuer of scheme ``name``; raises UnknownSchemeError naming the known schemes."""
        try:
            return self.issuers[name]
        except KeyError:
            from app.schemes import get_scheme

            get_scheme(name)  # raises UnknownSchemeError with the list of known schemes
            raise

    async def held_counts(self) -> dict[str, int | None]:
        """Scheme -> identities of its region's slice the fleet holds now (null when the backend cannot tell within
        :data:`HELD_COUNT_TIMEOUT_S`): counted together, and at most once per :data:`HELD_COUNT_CACHE_S`."""
        now = time.monotonic()
        if self._held_counts is None or now - self._held_counts[0] >= HELD_COUNT_CACHE_S:
            pools = self._pools()
            counts: dict[str, int | None] = dict.fromkeys(pools)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(HELD_COUNT_TIMEOUT_S):
                    found = await asyncio.gather(*(self.backend.count_held(p) for p in pools.values()))
                    counts = dict(zip(pools, found, strict=True))
            self._held_counts = (now, counts)
        return self._held_counts[1]

    def identity_region(self, scheme: str, fields: dict[str, Any]) -> dict[str, Any] | None:
        """The region whose slice holds the identity in a decoded ID's ``fields`` (``{"kind", "identity", "region",
        "regions"}``, ``region`` null outside the space), or None when the scheme's layout carries no identity that
        regions slice."""
        issuer = self.issuers.get(scheme)
        pool = issuer.holder.pool if issuer is not None and not isinstance(issuer, SharedIssuer) else None
        if pool is None or not pool.sliced or not isinstance(fields.get(pool.kind), int):
            return None
        identity = fields[pool.kind]
        return {"kind": pool.kind, "identity": identity, "region": pool.region_of(identity), "regions": pool.regions}

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """(ready, per-scheme state): ready only when every scheme can issue right now."""
        detail: dict[str, dict[str, Any]] = {}
        ready = True
        for name, issuer in self.issuers.items():
            try:
                issuer.check()
                detail[name] = {"ready": True}
            except NotReadyError as exc:
                ready = False
                detail[name] = {"ready": False, "reason": exc.reason}
        return ready, detail
