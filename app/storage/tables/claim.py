"""One identity held as a ``claims`` row on this process's lease in a SQL database: its generation, its loss, its marks.

A :class:`TableClaim` is made by :meth:`~app.storage.tables.claimer.Claimer.claim` once the claiming ``UPDATE``
returned the row. Every later write is guarded by (lease ID, generation): the generation rises at every claim, so a
row claimed again by anyone (after our lease expired, or a revoke ran out) refuses our writes. Its loss is pushed,
never polled: the lease's :meth:`Session.on_done <app.storage.tables.session.Session.on_done>`, a renewal that no
longer finds the row on the lease (:meth:`TableClaim.check`), and a refused mark write all end in
:meth:`TableClaim.set_lost`, which calls every :meth:`~app.storage.lease.Claim.on_lost` callback at once.
"""

from __future__ import annotations

import asyncio

from app.errors import LeaseLostError, NotReadyError
from app.schemes.pool import IdentityPool
from app.storage.expiring import ExpiringClaim
from app.storage.lease import REVOKED_REASON, Owner
from app.storage.tables.db import Database
from app.storage.tables.session import Session

ROW_GONE = "claim row no longer on our lease (deleted, lost in a failover, or claimed by another node)"


class TableClaim(ExpiringClaim):
    """One identity of ``pool`` held as row (``pool_key``, ``identity``) at ``generation`` on ``session``'s lease.

    ``high_water_mark``: the mark found when claiming (native units, -1: none); ``confirmed_at``: the ``clock()``
    reading when the claim's answer came back (a renewal sent before it cannot have seen the row)."""

    def __init__(
        self,
        db: Database,
        pool: IdentityPool,
        identity: int,
        generation: int,
        high_water_mark: int,
        session: Session,
        owner: Owner,
        confirmed_at: float,
    ) -> None:
        super().__init__(pool, identity, f"{pool.key_prefix}{pool.key_format.format(identity)}", session)
        self.session: Session = session
        self.pool_key = pool.key_prefix
        self.high_water_mark = high_water_mark
        self.generation = generation
        self.owner = owner
        self.confirmed_at = confirmed_at
        self._db = db
        self.store = db.store
        self.log = db.log
        self._stored_mark = high_water_mark
        self._lock = asyncio.Lock()

    @property
    def row_lost(self) -> bool:
        """True when the row itself was found not ours (the lease may still be alive)."""
        return self._lost_reason is not None

    def suspect(self, sent_at: float, held: dict[tuple[str, int], tuple[int, bool]]) -> str | None:
        """Judge this claim by a renewal's snapshot ``held`` (sent at ``sent_at``): None while it holds there, else
        why not (a revoke pending, or the row not on the lease at its generation). A claim confirmed after the
        renewal was sent is not judged by it (the snapshot may predate the claim)."""
        if self.lost or self.confirmed_at >= sent_at:
            return None
        found = held.get((self.pool_key, self.identity))
        if found is None or found[0] != self.generation:
            return ROW_GONE
        return REVOKED_REASON if found[1] else None

    async def confirm_loss(self, reason: str) -> None:
        """Read the row itself once before acting on a renewal's word that it is gone (the row decides: another
        lease or generation, a revoke, or no row at all make the claim lost; so does a failed read: fail closed)."""
        if reason == ROW_GONE:
            reason = await self._why_refused(keep=True)
        if reason:
            self.set_lost(reason)

    def _params(self, **more: int) -> dict[str, int | str]:
        return {
            "pool": self.pool_key,
            "identity": self.identity,
            "lease": self.lease_id,
            "generation": self.generation,
            **more,
        }

    async def _why_refused(self, keep: bool = False) -> str:
        """Why a guarded write found no row: read the row once (a revoke, another holder, or gone). ``keep``: ""
        when the row is still ours (lease, generation, no revoke)."""
        try:
            rows = await self._db.run(f"reading {self.key}", self._db.sql.row_of, self._params())
        except NotReadyError:
            return ROW_GONE
        ours = bool(rows) and rows[0][0] == self.lease_id and rows[0][1] == self.generation
        if ours and rows[0][2]:
            return REVOKED_REASON
        if ours and keep:
            self.log.warning("%s: %s is still ours though a renewal did not list it; kept", self.store, self.key)
            return ""
        return ROW_GONE

    async def record_mark(self, mark: int) -> None:
        """Raise the row's high-water mark to ``mark`` (never lowers it). Raises LeaseLostError when the claim is
        lost (and makes it so when the write shows it), BackendUnavailableError when the database cannot be used."""
        if self.lost:
            raise LeaseLostError(f"{self.scheme} {self.pool.kind} {self.identity} lost: {self.lost_reason}")
        if mark <= self._stored_mark:
            return
        async with self._lock:
            rows = await self._db.run(
                f"recording the high-water mark of {self.key}", self._db.sql.raise_mark, self._params(mark=mark)
            )
            if not rows:
                self.set_lost(await self._why_refused())
                raise LeaseLostError(f"{self.scheme} {self.pool.kind} {self.identity} lost: {self.lost_reason}")
            self._stored_mark = max(self._stored_mark, int(rows[0][0]))

    async def release(self, final_mark: int | None) -> bool:
        """Write ``final_mark`` exactly (never below the mark inherited at claim time) and free the row, when still
        held; the claim is released from then on either way. True when the row was ours to free. Raises
        NotReadyError when the database cannot be used (the caller frees the row later: :meth:`free`)."""
        if self.released:
            return False
        if not self._mark_released():
            return False
        if final_mark is None:
            await self.free()
            return True
        async with self._lock:
            await self._db.run(
                f"releasing {self.key}", self._db.sql.release, self._params(mark=final_mark, floor=self.high_water_mark)
            )
        return True

    async def free(self) -> None:
        """Free the row when still ours (lease and generation). Raises NotReadyError."""
        await self._db.run(f"releasing {self.key}", self._db.sql.free, self._params())
