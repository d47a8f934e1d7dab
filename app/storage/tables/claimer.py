"""Claiming one identity on the lease: read the pool's rows, try the free ones (those held before by this process
first, then in :mod:`app.storage.draw`'s order), each by one conditional ``UPDATE``; and the lost-row rule.

The lost-row rule: a row is created once per identity and never deleted, and may be claimed only one TTL after it
was created (by the database's clock). A row that vanished (a failover that lost commits, an operator's DELETE) may
have had an owner who never learnt of it; that owner stops at its deadline, at most one TTL after its last
renewal, so the row created anew is claimable only once no such owner can still issue. So rows that exist and are
free are preferred; only when none is free are new rows created (as many as the pool's ``claims`` still need,
plus :data:`SPARE_ROWS`), and the claim answers not ready, naming when they become claimable. A fresh fleet's
first start waits one TTL; every claim leaves a spare row aging in its pool, so a replica that joins later claims
at once.

Released rows that the database could not be told of wait in :class:`Leftovers` and are freed once it answers.
"""

from __future__ import annotations

import itertools
import json
import math
import secrets
from collections.abc import Container, Iterator
from dataclasses import dataclass
from typing import Any

from app.errors import NotReadyError, PoolExhaustedError
from app.schemes.pool import IdentityPool
from app.storage.draw import draw
from app.storage.lease import LossCallback, Owner
from app.storage.tables.claim import TableClaim
from app.storage.tables.db import Database, as_json
from app.storage.tables.session import Session

SPARE_ROWS = 1
"""Unheld rows a claim leaves in its pool (created when there are fewer, aging from then on): a replica that
joins later finds a row older than one TTL and claims it at once, instead of making one and waiting."""


@dataclass(frozen=True)
class Row:
    """One ``claims`` row of a pool as read: whether it is ``held`` (a live lease, no revoke run out),
    ``revoking`` (a revoke pending), ``wait_s`` (seconds until the lost-row rule lets it be claimed)."""

    identity: int
    generation: int
    lease_id: int | None
    owner: Any
    held: bool
    revoking: bool
    wait_s: float

    @property
    def claimable(self) -> bool:
        return not self.held and not self.revoking and self.wait_s <= 0

    def holder(self) -> str:
        owner = as_json(self.owner)
        owner = owner if isinstance(owner, dict) else {}
        if not owner:
            return "a node"
        return f"{owner.get('host', '?')} pid {owner.get('pid', '?')}" + (
            f" ({owner['address']})" if owner.get("address") else ""
        )


class _Without(Container[int]):
    """Every identity but those in ``keep`` (draw's ``held``: only ``keep`` may be drawn)."""

    def __init__(self, keep: set[int]) -> None:
        self.keep = keep

    def __contains__(self, identity: object) -> bool:
        return identity not in self.keep


class Leftovers:
    """Released claims whose row could not be freed (the database unreachable), freed by :meth:`retry` while their
    lease lives: they sit on our live lease and would otherwise stay held for as long as this process runs."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.pending: list[TableClaim] = []

    def add(self, claim: TableClaim) -> None:
        self.pending.append(claim)

    async def retry(self, session: Session) -> None:
        """Free every pending row still on ``session``'s lease. Raises NotReadyError when the database cannot be
        used."""
        for claim in list(self.pending):
            if claim.session is session:
                await claim.free()
                db = self.db
                db.log.info("%s: released %s (deferred while %s was unreachable)", db.store, claim.key, db.title)
            self.pending.remove(claim)


class Claimer:
    """Claims identities of pools and keeps the :class:`TableClaim` it made (``claims``) until the backend
    forgets one. ``on_lost`` is registered on every claim; ``ttl`` (seconds) is the lost-row wait and the
    Retry-After of an exhausted pool."""

    def __init__(self, db: Database, ttl: int, on_lost: LossCallback) -> None:
        self.db = db
        self.ttl = ttl
        self.on_lost = on_lost
        self.claims: set[TableClaim] = set()
        self.held_before: dict[str, list[int]] = {}
        """Pool key -> identities this process claimed there, oldest first (re-claims prefer the newest)."""
        self.made: dict[str, set[int]] = {}
        """Pool key -> rows this process created and waits for (the lost-row rule), until claimed or taken."""

    async def read(self, pool: IdentityPool) -> dict[int, Row]:
        """The pool's rows in ``minimum..maximum`` (or its static identity). Raises NotReadyError."""
        low, high = pool.drawn_from
        rows = await self.db.run(
            f"reading the {pool.scheme} pool",
            self.db.sql.pool_rows,
            {"pool": pool.key_prefix, "low": low, "high": high, "ttl": self.ttl},
        )
        return {int(r[0]): Row(int(r[0]), int(r[1]), r[2], r[3], bool(r[4]), bool(r[5]), float(r[6])) for r in rows}

    def _order(self, pool: IdentityPool, claimable: set[int], exclude: frozenset[int]) -> Iterator[int]:
        """The claimable rows to try: this process's earlier identities (newest first), then the pool's draw order
        (a large pool: from a random one upwards, wrapping)."""
        before = self.held_before.get(pool.key_prefix, [])
        size = pool.maximum - pool.minimum + 1
        if pool.candidates is not None or size <= 65_536:
            yield from draw(pool, _Without(claimable), prefer=reversed(before), exclude=exclude)
            return
        tried = set()
        for identity in reversed(before):
            if identity in claimable and identity not in exclude:
                tried.add(identity)
                yield identity
        rest = sorted(claimable - tried - exclude)
        if rest:
            start = secrets.randbelow(len(rest))
            yield from rest[start:] + rest[:start]

    async def claim(self, session: Session, pool: IdentityPool, exclude: frozenset[int], owner: Owner) -> TableClaim:
        """Claim one claimable row of ``pool`` on ``session``'s lease. Raises NotReadyError (rows created or
        waiting under the lost-row rule), PoolExhaustedError, BackendUnavailableError."""
        if not pool.key_prefix:
            raise ValueError(f"{pool.scheme}: IdentityPool.key_prefix is needed for {self.db.title} claims")
        rows = await self.read(pool)
        claimable = {i for i, row in rows.items() if row.claimable}
        owner_json = json.dumps(owner.as_dict())
        for identity in self._order(pool, claimable, exclude):
            row = rows[identity]
            found = await self.db.run(
                f"claiming {pool.scheme} {pool.kind} {identity}",
                self.db.sql.claim,
                {
                    "pool": pool.key_prefix,
                    "identity": identity,
                    "generation": row.generation,
                    "holder": row.lease_id,
                    "lease": session.lease_id,
                    "owner": owner_json,
                    "ttl": self.ttl,
                },
            )
            if not found:
                continue  # taken (or changed) since the read: the next
            generation, mark = int(found[0][0]), int(found[0][1])
            claim = TableClaim(self.db, pool, identity, generation, mark, session, owner, session.clock())
            self.claims.add(claim)
            before = self.held_before.setdefault(pool.key_prefix, [])
            if identity in before:
                before.remove(identity)
            before.append(identity)
            self.made.get(pool.key_prefix, set()).discard(identity)
            claim.on_lost(self.on_lost)
            if not any(not r.held and not r.revoking for i, r in rows.items() if i != identity and i not in exclude):
                await self._spare(pool, rows, exclude | {identity})
            self.db.log.info(
                "%s: claimed %s %s %d (row %s, generation %d, lease %s, high-water mark %d)",
                self.db.store,
                pool.scheme,
                pool.kind,
                identity,
                claim.key,
                generation,
                session.hex,
                mark,
            )
            return claim
        await self._make_rows(pool, rows, exclude)
        raise AssertionError("unreachable")

    async def _spare(self, pool: IdentityPool, rows: dict[int, Row], exclude: frozenset[int]) -> None:
        """Create :data:`SPARE_ROWS` rows (none when the pool has no identity without one). Never raises: a spare
        is a convenience."""
        new = list(itertools.islice(draw(pool, rows, exclude=exclude), SPARE_ROWS))
        if not new:
            return
        try:
            await self.db.run(
                f"creating spare {pool.scheme} rows",
                self.db.sql.create_rows,
                {"pool": pool.key_prefix, "identities": new},
            )
        except NotReadyError as exc:
            self.db.log.info("%s: no spare %s row created now: %s", self.db.store, pool.scheme, exc.reason)

    async def _make_rows(self, pool: IdentityPool, rows: dict[int, Row], exclude: frozenset[int]) -> None:
        """No row could be claimed: wait for the rows this process made that the lost-row rule still holds back,
        or make new ones (the pool's ``claims`` plus :data:`SPARE_ROWS`, less those waiting). Always raises:
        NotReadyError (naming when a row becomes claimable), PoolExhaustedError (every identity held)."""
        made = self.made.setdefault(pool.key_prefix, set())
        waiting = sorted(
            (rows[i].wait_s, i)
            for i in made
            if i in rows and not rows[i].held and not rows[i].revoking and i not in exclude
        )
        made.intersection_update(i for _, i in waiting)  # those taken by others meanwhile are not awaited
        new: list[int] = []
        if len(waiting) < pool.claims:
            needed = pool.claims + SPARE_ROWS - len(waiting)
            new = list(itertools.islice(draw(pool, rows, exclude=exclude), needed))
        if new:
            await self.db.run(
                f"creating {pool.scheme} rows",
                self.db.sql.create_rows,
                {"pool": pool.key_prefix, "identities": new},
            )
            self.db.log.info(
                "%s: created %s %s row(s) %s: claimable in %d s (the lost-row rule: a row created now may "
                "have been lost with an owner, who fails closed within one TTL)",
                self.db.store,
                pool.scheme,
                pool.kind,
                ", ".join(map(str, new)),
                self.ttl,
            )
            made.update(new)
            raise NotReadyError(
                f"{pool.scheme}: {pool.kind} {', '.join(map(str, new))} had no row in {self.db.title}; created now, "
                f"claimable in {self.ttl} s (one lease TTL: a row lost in a failover may have had an owner)",
                retry_after=self.ttl,
            )
        waiting = waiting or sorted(  # none of ours: rows others made, when the pool has no identity left
            (row.wait_s, i) for i, row in rows.items() if not row.held and not row.revoking and i not in exclude
        )
        if waiting:
            wait_s, identity = waiting[0]
            raise NotReadyError(
                f"{pool.scheme}: {pool.kind} {identity} is claimable in {wait_s:.1f} s (its row is younger than one "
                "lease TTL: a row lost in a failover may have had an owner)",
                retry_after=max(1, math.ceil(wait_s)),
            )
        raise PoolExhaustedError(self._exhausted(pool, rows, exclude), retry_after=self.ttl)

    @staticmethod
    def _exhausted(pool: IdentityPool, rows: dict[int, Row], exclude: frozenset[int]) -> str:
        where = f" in group {pool.group}" if pool.group else ""
        if pool.candidates is not None:
            parts = []
            for identity in pool.candidates:
                row = rows.get(identity)
                if identity in exclude:
                    parts.append(f"{identity} was refused (high-water mark ahead of our clock)")
                elif row is not None and row.revoking:
                    parts.append(f"{identity} is being revoked")
                elif row is not None:
                    parts.append(f"{identity} is held by {row.holder()}")
            what = "static " if pool.static is not None else ""
            return f"{pool.scheme}: {what}{pool.kind}{where} unavailable: " + "; ".join(parts or ["no candidates"])
        size = pool.maximum - pool.minimum + 1
        held = sum(1 for row in rows.values() if row.held or row.revoking)
        refused = f", {len(exclude)} refused" if exclude else ""
        span = f"{pool.minimum}..{pool.maximum}"
        return f"{pool.scheme}: no free {pool.kind}{where}: {held} of {size} held ({span}){refused}"
