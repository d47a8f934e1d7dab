"""The fleet's admin routes (scope ``admin``) and the drain of every route that hands out IDs.

* ``GET /v1/admin/claims``: every live claim of the fleet the claim ledger knows (scheme, identity, owner, seconds
  left on its lease).
* ``POST /v1/admin/drain``: this node stops taking requests for IDs (the front,
  :class:`~app.api.front.Front`, answers 503 + Retry-After to every route that declares it hands out IDs, hot
  routes included), lets the requests in flight finish (at most
  ``IDMINT_DRAIN_TIMEOUT`` s), then gives every claim back (:meth:`Node.drain <app.issuing.node.Node.drain>`); it keeps
  answering health checks, ``/readyz`` (503, ``"status": "draining"``) and decode. A ``preStop`` hook calls it.
* ``POST /v1/admin/claims/{scheme}/{identity}/revoke``: frees a stuck claim (:meth:`LeaseBackend.revoke
  <app.storage.lease.LeaseBackend.revoke>`).
* ``POST /v1/admin/fleet/settings/{scheme}``: makes this node's settings of a scheme the fleet's record (the
  deliberate step of a change of layout or regions, after the old replicas were drained).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from fastapi import APIRouter, Request

from app.api.access import declare
from app.api.deps import NodeDep, SettingsDep
from app.errors import FleetConflictError, InvalidOptionError, UnknownSchemeError
from app.issuing.node import Node
from app.storage.ledger import ClaimRecord

router = APIRouter(tags=["admin"])

DRAINING = "this node is draining: it issues no more IDs; ask another replica"
DRAIN_RETRY_AFTER_S = 5
"""Retry-After of a request refused by a draining node (another replica answers it; this one never will)."""
LIVE_CLAIMS_TIMEOUT_S = 2.0
"""How long ``GET /v1/admin/claims`` waits for the ledger and the backend."""


class Drain:
    """Whether this process is draining, and the ID requests in flight (counted by :class:`~app.api.front.Front`)."""

    def __init__(self) -> None:
        self.draining = False
        self.in_flight = 0
        self.released: list[dict[str, Any]] | None = None
        """The claims given back once drained (None before)."""
        self._idle = asyncio.Event()
        self._idle.set()
        self._lock = asyncio.Lock()

    def enter(self) -> None:
        self.in_flight += 1
        self._idle.clear()

    def leave(self) -> None:
        self.in_flight -= 1
        if not self.in_flight:
            self._idle.set()

    async def run(self, node: Node, timeout: float) -> dict[str, Any]:
        """Refuse new ID requests, wait (at most ``timeout`` s) for those in flight, release every claim. A second
        call answers what the first did."""
        async with self._lock:
            started = time.monotonic()
            if self.released is None:
                self.draining = True
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._idle.wait()
                self.released = await node.drain()
            return {
                "status": "drained",
                "released": self.released,
                "in_flight": self.in_flight,
                "seconds": round(time.monotonic() - started, 3),
            }


def parse_identity(node: Node, scheme: str, text: str) -> int:
    """The identity named in a revoke path: a decimal integer inside ``scheme``'s identity space on this node.
    Raises UnknownSchemeError, or InvalidOptionError naming the rule."""
    if scheme not in node.schemes:
        raise UnknownSchemeError(f"unknown scheme {scheme!r}; known schemes: {', '.join(node.schemes)}")
    issuer = node.issuers.get(scheme)
    pool = issuer.holder.pool if issuer is not None else None
    if pool is None:
        raise InvalidOptionError(
            f"{scheme} leases no identity (its uniqueness rests on random bits): nothing to revoke"
        )
    low, high = pool.space
    if not text.isascii() or not text.isdigit() or len(text) > 20:
        raise InvalidOptionError(f"identity must be a decimal {pool.kind} in {low}..{high}, got {text[:40]!r}")
    identity = int(text)
    if not low <= identity <= high:
        raise InvalidOptionError(f"identity must be a {pool.kind} in {low}..{high}, got {identity}")
    return identity


@router.get(
    "/v1/admin/claims",
    openapi_extra=declare("admin"),
    responses={503: {"description": "the backend cannot be read now (Retry-After)"}},
)
async def live_claims(node: NodeDep) -> dict[str, Any]:
    """Every live claim of the fleet: ``{"claims": [{"scheme", "kind", "group", "identity", "owner", "lease",
    "claimed_at", "lease_left_s"}]}`` (``lease_left_s`` null on the embedded backend, whose locks never expire), from
    the claim ledger checked against the backend (a claim whose owner is gone is left out)."""
    out = []
    for record, expires_ns, now in await _live_records(node):
        entry = {
            key: value
            for key, value in record.as_dict().items()
            if key in ("scheme", "kind", "group", "identity", "region", "owner", "lease", "claimed_at", "fleet_id")
        }
        entry["lease_left_s"] = None if expires_ns is None else round((expires_ns - now) / 1e9, 1)
        out.append(entry)
    return {"claims": out}


async def _live_records(node: Node) -> list[tuple[ClaimRecord, int | None, int]]:
    """(record, its lease's expiry in ns or None, now in ns) of every live claim the claim ledger knows, after one
    bounded refresh, each checked against the backend (an owner found gone is left out; one the backend cannot
    tell about in time is kept)."""
    ledger = node.ledger
    if ledger is None:
        return []
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(LIVE_CLAIMS_TIMEOUT_S):
            await ledger.refresh()
    now = ledger.clock()
    out = []
    for record in ledger.live():
        alive, expires_ns = None, None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(LIVE_CLAIMS_TIMEOUT_S):
                alive, expires_ns = await ledger.store.owner_alive(record)
        if alive is not False:
            out.append((record, expires_ns, now))
    return out


@router.post(
    "/v1/admin/drain",
    openapi_extra=declare("admin"),
    responses={503: {"description": "the backend cannot be written now (Retry-After)"}},
)
async def drain(request: Request, node: NodeDep, settings: SettingsDep) -> dict[str, Any]:
    """Drain this node (see the module docstring): ``{"status": "drained", "released": [{"scheme", "kind",
    "identity"}], "in_flight": <requests still running past the timeout>, "seconds"}``."""
    state: Drain = request.app.state.drain
    return await state.run(node, settings.drain_timeout)


@router.post(
    "/v1/admin/claims/{scheme}/{identity}/revoke",
    openapi_extra=declare("admin"),
    responses={
        404: {"description": "unknown scheme, or no node holds that identity now"},
        409: {"description": "the embedded backend cannot revoke (file locks), or a revoke of it is under way"},
        422: {"description": "the scheme leases no identity, or the identity breaks its rule (detail names it)"},
        503: {"description": "etcd cannot be used now (Retry-After)"},
    },
)
async def revoke(scheme: str, identity: str, node: NodeDep) -> Any:
    """Free a stuck claim: the owner, if alive, sees the loss (its claim key is overwritten, which its watch
    reports at once) and stops issuing with that identity before any other node can claim it; the key is freed
    once the owner's ledger record says it stopped, else when the owner's lease TTL has passed. High-water marks
    still hold: the owner can no longer raise the mark, and the next holder issues above it."""
    number = parse_identity(node, scheme, identity)
    pool = node.issuers[scheme].holder.pool
    assert pool is not None
    return await node.backend.revoke(pool, number, node.owner.as_dict())


@router.post(
    "/v1/admin/fleet/settings/{scheme}",
    openapi_extra=declare("admin"),
    responses={
        404: {"description": "unknown scheme"},
        409: {"description": "a node still holds claims of the scheme (drain it first); the detail names them"},
        422: {"description": "the scheme keeps no fleet settings"},
        503: {"description": "the backend cannot be used now (Retry-After)"},
    },
)
async def adopt_settings(scheme: str, node: NodeDep) -> dict[str, Any]:
    """Make this node's settings of ``scheme`` (snowflake's layout; the region and region count of a sliced pool)
    the fleet's record, so that nodes with them may claim: the deliberate step of a change, once every replica on
    the old settings is drained or stopped. Refused (409, naming them) while any node holds a live claim of the
    scheme. Answers ``{"scheme", "before", "after"}`` (``before`` null: nothing was recorded)."""
    if scheme not in node.schemes:
        raise UnknownSchemeError(f"unknown scheme {scheme!r}; known schemes: {', '.join(node.schemes)}")
    holder = node.issuers[scheme].holder
    recorded = await holder.fleet_record()
    if recorded == holder.fleet_settings:
        return {"scheme": scheme, "before": recorded, "after": recorded}
    # This node holds nothing of the scheme (its settings differ from the record): every live claim is another's.
    held = [record for record, _, _ in await _live_records(node) if record.scheme == holder.name]
    if held:
        owners = "; ".join(f"{r.kind} {r.identity} held by {r.words}" for r in held[:5])
        raise FleetConflictError(
            f"{scheme}: {len(held)} claim(s) are live under the fleet's recorded settings ({owners}): drain or "
            "stop those replicas first (POST /v1/admin/drain)"
        )
    before = await holder.adopt_fleet_settings()
    return {"scheme": scheme, "before": before, "after": holder.fleet_settings}
