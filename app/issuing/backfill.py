"""Backfill: IDs at given past times (``POST /v1/ids/{scheme}/backfill``), for migrations and imports.

Rules, above any scheme and any backend (the schemes say how to build an ID at a tick, :meth:`Scheme.backfill_value
<app.schemes.base.Scheme.backfill_value>`; storage keeps the marks, :mod:`app.storage.backfill`):

* **Refusals** (422 naming the rule, nothing issued): a time in the future; a time newer than
  ``IDMINT_BACKFILL_MIN_AGE`` seconds (live issue's window); a time before the scheme's epoch or past the end of its
  ID space (:meth:`Scheme.backfill_tick <app.schemes.base.Scheme.backfill_tick>`); a scheme that cannot back-date.
* **Random bits** (UUIDv7, ULID, KSUID, TypeID): every back-dated ID draws all its random bits fresh from the
  CSPRNG, so it is as unique as a live one.
* **A node identity and a sequence** (snowflake, eight-byte): IDs take identities of the region's backfill reserve
  (``IDMINT_BACKFILL_IDENTITIES``: the top of the slice, which live issue never draws), leased through the storage
  backend as any identity is and released when the node stops, and sequences above the stored mark of each
  (identity, tick), raised in storage before the IDs leave the process. A node holds one backfill identity per
  scheme and leases another when a tick is full on those it holds; when every backfill identity it can lease is
  full in a tick, the answer is 409 naming the limit (:class:`~app.errors.BackfillCapacityError`) and nothing is
  handed out (sequences taken for it stay unused).
* **Storage history** (:mod:`app.storage.history`): while the store's history is unchecked or known changed (a
  restored backup, a copied state directory), backfill of those schemes is refused (503 + Retry-After naming the
  change and the fence command) and takes no mark. After ``idmint storage fence --apply``, the marks read are those
  of the restored store, lower than what the lost history may have used at any past tick; so every tick up to the
  fence's high-water-mark floor (its clock plus its margin, past every clock the lost history ran on) counts as
  full: a time there is a 409 naming the fence (:class:`~app.errors.BackfillCapacityError`), nothing issued.
  Times after the floor backfill as before (the lost history could back-date no time past its own clock). Random-bit
  schemes take no mark and back-date any time.

Every backfill claim is told to the claim ledger like a live one, marked ``backfill`` (decode says so).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from app.errors import BackfillCapacityError, InvalidOptionError, NotReadyError, PoolExhaustedError
from app.issuing.fleet import FleetGuard
from app.issuing.holder import IdentityHolder
from app.issuing.issuer import Issuer
from app.ledger import Ledger
from app.schemes.base import Clock, RandomSource, Scheme, csprng
from app.schemes.pool import IdentityPool
from app.settings import Settings
from app.storage.base import Storage
from app.storage.history import fence_of
from app.storage.lease import Claim, LeaseBackend, Owner
from app.times import rfc3339

log = logging.getLogger("idmint.backfill")

TIMES_MAX = 10_000
"""Most times one backfill request may carry."""
NANOSECS_IN_SECS = 1_000_000_000


class BackfillHost(Protocol):
    """What a backfiller reads of its node (:class:`app.issuing.node.Node`)."""

    settings: Settings
    storage: Storage
    backend: LeaseBackend
    owner: Owner
    clock: Clock
    ledger: Ledger | None
    fleet: FleetGuard

    def issuer(self, name: str) -> Issuer: ...


class Backfiller:
    """Back-dated IDs for one node: its backfill claims per scheme and the rules above (see the module).

    ``node``: the node whose settings, storage, owner, clock, issuers (the configured schemes and their live pools)
    and ledger it uses. ``random``: the source of random bits (tests inject one)."""

    def __init__(self, node: BackfillHost, random: RandomSource = csprng) -> None:
        self.node = node
        self.random = random
        self.claims: dict[str, list[Claim]] = {}
        """Scheme -> the backfill identities this node holds, in the order leased."""
        self._locks: dict[str, asyncio.Lock] = {}

    def scheme(self, name: str) -> Scheme:
        """The node's scheme ``name`` (UnknownSchemeError), InvalidOptionError when it cannot back-date."""
        scheme = self.node.issuer(name).scheme
        if not scheme.backfills:
            raise InvalidOptionError(f"{scheme.name} does not issue IDs at past times (backfill)")
        return scheme

    def ticks(self, scheme: Scheme, times_ns: Sequence[int]) -> list[int]:
        """Each time's native tick, in order. Raises InvalidOptionError naming the rule and the first time that
        breaks one (``times[i]``): in the future, newer than IDMINT_BACKFILL_MIN_AGE, outside the scheme's times."""
        if not 1 <= len(times_ns) <= TIMES_MAX:
            raise InvalidOptionError(f"times must hold 1..{TIMES_MAX} RFC 3339 times, got {len(times_ns)}")
        now = self.node.clock()
        min_age = self.node.settings.backfill_min_age
        newest = now - min_age * NANOSECS_IN_SECS
        out = []
        for index, ns in enumerate(times_ns):
            if ns > now:
                raise InvalidOptionError(f"times[{index}] is in the future: backfill issues IDs at past times only")
            if ns > newest:
                raise InvalidOptionError(
                    f"times[{index}] is newer than IDMINT_BACKFILL_MIN_AGE ({min_age} s ago): that is live issue's "
                    f"window; issue those IDs from GET /v1/ids/{scheme.name}"
                )
            try:
                out.append(scheme.backfill_tick(ns))
            except InvalidOptionError as exc:
                raise InvalidOptionError(f"times[{index}]: {exc}") from None
        return out

    async def backfill(self, name: str, times_ns: Sequence[int], options: Mapping[str, Any]) -> list[int]:
        """One ID of scheme ``name`` per time of ``times_ns`` (ns since the Unix epoch), in order, each at its
        time's tick; ``options`` as the issue routes parse them. Raises InvalidOptionError (422) as
        :meth:`ticks`, BackfillCapacityError (409) when a tick is full on every backfill identity this node can
        lease, NotReadyError (503) when storage cannot be used or the fleet's settings differ."""
        scheme = self.scheme(name)
        ticks = self.ticks(scheme, times_ns)
        settings = self.node.settings
        if not scheme.backfill_identity:
            random = self.random
            values = [scheme.backfill_value(settings, tick, 0, 0, random, options) for tick in ticks]
        else:
            values = await self._with_identities(scheme, ticks, options)
        return values

    async def _with_identities(self, scheme: Scheme, ticks: list[int], options: Mapping[str, Any]) -> list[int]:
        issuer = self.node.issuer(scheme.name)
        holder = issuer.holder
        pool = holder.pool
        bpool = pool.backfill_pool() if pool is not None else None
        if pool is None or bpool is None:
            raise BackfillCapacityError(
                f"backfill of {scheme.name} is off: IDMINT_BACKFILL_IDENTITIES is 0, so no identity is kept for it "
                "(every replica of the fleet must set the same number)"
            )
        marks = self.node.storage.backfill
        if marks is None:
            raise BackfillCapacityError(
                f"backfill of {scheme.name} needs backfill marks in storage, and the {self.node.storage.name} backend "
                "keeps none"
            )
        await holder.check_history()
        self._check_fence(scheme, ticks)
        settings = self.node.settings
        sequences = scheme.backfill_sequences(settings)
        space = f"{scheme.name}/{pool.group}" if pool.group else scheme.name
        wants = Counter(ticks)
        taken: dict[int, list[tuple[int, int, int]]] = {}
        """tick -> [(identity, first sequence, count)]."""
        lock = self._locks.setdefault(scheme.name, asyncio.Lock())
        async with lock:
            held = []
            for kept in self.claims.get(scheme.name, []):
                if kept.valid():
                    held.append(kept)
                else:
                    await self._end(kept)
            self.claims[scheme.name] = held
            tried = 0
            while wants:
                if tried == len(held):
                    leased = await self._lease(holder, bpool, held)
                    if leased is None:
                        break
                    held.append(leased)
                claim = held[tried]
                tried += 1
                granted = await marks.take(space, claim.identity, wants, sequences)
                for tick, (first, count) in granted.items():
                    taken.setdefault(tick, []).append((claim.identity, first, count))
                    wants[tick] -= count
                    if not wants[tick]:
                        del wants[tick]
            if wants:
                tick, asked = next(iter(wants.items()))
                raise BackfillCapacityError(
                    f"backfill capacity of one tick is spent: {scheme.name} holds {sequences} IDs per tick "
                    f"({scheme.native_unit_ns / 1e6:g} ms) per backfill identity, and this node could lease "
                    f"{len(held)} of the {bpool.maximum - bpool.minimum + 1} kept for backfill "
                    f"(IDMINT_BACKFILL_IDENTITIES); tick {tick} lacked {asked} more. Nothing was issued: ask for "
                    "fewer IDs in one tick, or keep more identities for backfill"
                )
            if not all(claim.valid() for claim in held[:tried]):
                raise NotReadyError(f"{scheme.name}: a backfill identity was lost while issuing; try again", 1)
            await holder.check_history()  # the store changed while taking: nothing taken is handed out
        values = []
        for tick in ticks:
            runs = taken[tick]
            identity, first, count = runs[0]
            values.append(scheme.backfill_value(settings, tick, identity, first, self.random, options))
            if count == 1:
                runs.pop(0)
            else:
                runs[0] = (identity, first + 1, count - 1)
        return values

    def _check_fence(self, scheme: Scheme, ticks: Sequence[int]) -> None:
        """Raise BackfillCapacityError (409) naming the storage fence when a tick of ``ticks`` is at or before the
        last fence's high-water-mark floor (see the module); nothing when the store was never fenced."""
        floor_ns = self.node.storage.history.mark_floor_ns
        if floor_ns < 0:
            return
        try:
            floor_tick = scheme.backfill_tick(floor_ns)
        except InvalidOptionError:  # the floor is past the scheme's times: every tick is at or before it
            floor_tick = max(ticks)
        retired = [index for index, tick in enumerate(ticks) if tick <= floor_tick]
        if not retired:
            return
        fence = fence_of(self.node.storage.history.record)
        raise BackfillCapacityError(
            f"times[{retired[0]}] is at or before the storage fence of {fence.get('at')} (ID {fence.get('id')}), "
            f"whose high-water-mark floor is {rfc3339(floor_ns, 3)}: the store went back in time, and the backfill "
            f"marks it holds are older than what the lost history may have back-dated on {scheme.name}'s backfill "
            f"identities, so every tick up to that floor counts as full ({len(retired)} of {len(ticks)} times). "
            f"Nothing was issued. Back-date only times after {rfc3339(floor_ns, 3)}, or take IDs of earlier times "
            "from a scheme with random bits (uuidv7, ulid, ksuid, typeid); see docs/backfill.md"
        )

    async def _lease(self, holder: IdentityHolder, pool: IdentityPool, held: list[Claim]) -> Claim | None:
        """Lease one more backfill identity (None when every one is held elsewhere). NotReadyError when the fleet's
        settings differ from ours or the backend cannot be used."""
        await holder.check_fleet_settings()
        node = self.node
        try:
            claim = await node.backend.claim(pool, node.owner, frozenset(c.identity for c in held))
        except PoolExhaustedError:
            return None
        log.info("%s: leased backfill identity %d (%s)", pool.scheme, claim.identity, claim.key)
        if node.ledger is not None:
            node.ledger.claimed(claim, pool, node.owner, -1, node.fleet.fleet_id, backfill=True)
        return claim

    async def _end(self, claim: Claim) -> None:
        """Tell the ledger ``claim`` ended and release it (best effort: a lease expires anyway)."""
        node = self.node
        if node.ledger is not None:
            node.ledger.ended(claim)
        try:
            await node.backend.release(claim, None)
        except Exception as exc:
            log.warning("releasing backfill claim %s failed: %s", claim.key, exc)

    async def stop(self) -> None:
        """Release every backfill claim."""
        for claims in self.claims.values():
            for claim in claims:
                await self._end(claim)
        self.claims.clear()
