"""One identity held as a key on this process's etcd lease: its revisions, its watch, its mark writes.

An :class:`EtcdClaim` is made by :meth:`~app.storage.etcd.claimer.Claimer.claim` once the claiming transaction
succeeded. It knows the claim key's create and mod revisions and the mark key's mod revision, and writes marks
with one transaction guarded by both mod revisions (:meth:`EtcdClaim.record_mark`), so only the current holder
of the key ever raises the mark. Its loss is pushed, never polled: the lease's :meth:`Session.on_done
<app.storage.etcd.session.Session.on_done>`, the key's :class:`~app.storage.etcd.watch.ClaimWatch` and a refused mark
write all end in :meth:`EtcdClaim.set_lost`, which calls every :meth:`~app.storage.lease.Claim.on_lost` callback at
once.
"""

from __future__ import annotations

import asyncio
import logging
import math

from app.errors import BackendUnavailableError, LeaseLostError, NotReadyError
from app.schemes.pool import IdentityPool
from app.storage.etcd import keys
from app.storage.etcd.calls import Calls
from app.storage.etcd.client import compare, get, put, redact
from app.storage.etcd.session import Session
from app.storage.etcd.watch import ClaimWatch, loss_of
from app.storage.expiring import ExpiringClaim
from app.storage.lease import Owner

log = logging.getLogger("idmint.lease.etcd")


class EtcdClaim(ExpiringClaim):
    """One identity of ``pool`` held as ``key`` on ``session``'s lease since ``create_revision``.

    ``mod_revision`` / ``marks_mod_revision``: the claim key's and the mark key's mod revisions as last written or
    read by this claim (0: no mark key yet); ``high_water_mark``: the mark found when claiming (native units);
    ``owner``/``claimed_at``: written into the claim value."""

    store = "etcd"
    log = log

    def __init__(
        self,
        calls: Calls,
        pool: IdentityPool,
        identity: int,
        key: str,
        mark_key: str,
        high_water_mark: int,
        session: Session,
        create_revision: int,
        mod_revision: int,
        marks_mod_revision: int,
        owner: Owner,
        claimed_at: str,
    ) -> None:
        super().__init__(pool, identity, key, session)
        self.session: Session = session
        self.high_water_mark = high_water_mark
        self.mark_key = mark_key
        self.owner = owner
        self.claimed_at = claimed_at
        self.create_revision = create_revision
        self.watch = ClaimWatch(calls.client, key, session.lease_id, create_revision, self.set_lost, self._broken)
        self._calls = calls
        self._mod_revision = mod_revision
        self._marks_mod_revision = marks_mod_revision
        self._stored_mark = high_water_mark
        self._watch_deadline = math.inf
        """While the watch is broken: the lease deadline at the break (not extended until it is re-armed)."""
        self._lock = asyncio.Lock()

    @property
    def deadline(self) -> float:
        return min(self.session.deadline, self._watch_deadline)

    @property
    def key_lost(self) -> bool:
        """True when the claim key itself was seen deleted or overwritten (the lease may still be alive)."""
        return self._lost_reason is not None

    # -- the watch ---------------------------------------------------------------------------------------------
    def needs_rearm(self, endpoint: str) -> bool:
        """True when the claim, still held on a live lease, is not watched on ``endpoint`` (the client's member)."""
        return not self.lost and not self.watch.follows(endpoint)

    def _broken(self) -> None:
        if self._watch_deadline == math.inf:
            self._watch_deadline = self.session.deadline

    async def watch_from(self, start_revision: int, timeout: float) -> bool:
        """Watch the claim key from ``start_revision``; True once etcd confirmed it. Until then (and on False)
        the claim's deadline stays at the lease deadline of the moment the watch was not running."""
        if await self.watch.start(start_revision, timeout):
            self._watch_deadline = math.inf
            return True
        log.warning(
            "etcd: watching %s on %s not confirmed; the claim is unusable past the lease deadline until it is watched",
            self.key,
            redact(self.watch.endpoint),
        )
        self._broken()
        return False

    async def rearm(self, timeout: float) -> None:
        """Verify the claim key (same lease, same create revision, else the claim is lost) and watch it again
        from the verified revision. Raises NotReadyError when etcd cannot be used now."""
        await self.watch.stop()
        self._broken()
        async with self._calls.bounded(f"verifying {self.key}") as client:
            found, revision = await client.range(self.key.encode())
        reason = loss_of(found[0] if found else None, self.lease_id, self.create_revision)
        if reason is not None:
            self.set_lost(reason)
            return
        if not await self.watch_from(revision + 1, timeout):
            raise BackendUnavailableError(f"etcd: watching {self.key} failed")

    async def stop_watch(self) -> None:
        await self.watch.stop()

    # -- marks -------------------------------------------------------------------------------------------------
    async def record_mark(self, mark: int, exact: bool = False) -> None:
        """Store ``mark`` in the claim key and the mark key, guarded by both keys' mod revisions.

        Only ever raises the stored mark, except ``exact`` (release) which stores the final mark as given (never
        below the mark inherited at claim time). Raises LeaseLostError when the claim is lost (and makes it so
        when the write shows it), BackendUnavailableError when etcd cannot be used.
        """
        if self.lost:
            raise LeaseLostError(f"{self.scheme} {self.pool.kind} {self.identity} lost: {self.lost_reason}")
        if exact:
            mark = max(mark, self.high_water_mark)
            if mark == self._stored_mark:
                return
        elif mark <= self._stored_mark:
            return
        key, mkey = self.key.encode(), self.mark_key.encode()
        value = keys.mark_value(self.owner, self.session.hex, mark)
        async with self._lock:
            for _ in range(2):
                try:
                    async with self._calls.bounded(f"recording the high-water mark of {self.key}") as client:
                        result = await client.txn(
                            [compare(key, "MOD", self._mod_revision), compare(mkey, "MOD", self._marks_mod_revision)],
                            [put(key, self._value(mark), self.lease_id), put(mkey, value), get(key), get(mkey)],
                            [get(key), get(mkey)],
                        )
                except LeaseLostError as exc:
                    self.session.set_lost(exc.reason)
                    raise
                if result.succeeded:
                    self._mod_revision = (result.ranges[2] or [])[0].mod_revision
                    self._marks_mod_revision = (result.ranges[3] or [])[0].mod_revision
                    self._stored_mark = mark
                    return
                now_key, now_mark = result.ranges[0] or [], result.ranges[1] or []
                reason = loss_of(now_key[0] if now_key else None, self.lease_id, self.create_revision)
                if reason is not None:
                    self.set_lost(reason)
                if self.lost:
                    raise LeaseLostError(f"{self.scheme} {self.pool.kind} {self.identity} lost: {self.lost_reason}")
                # Our key is intact; the mark key was written by someone else (an operator?), or by our own
                # write whose answer was lost: re-read and retry.
                self._mod_revision = now_key[0].mod_revision
                self._marks_mod_revision = now_mark[0].mod_revision if now_mark else 0
                stored = keys.read_mark(now_mark[0].value if now_mark else None, self.mark_key)
                if not exact and stored >= mark:
                    self._stored_mark = stored
                    return
        raise BackendUnavailableError(
            f"high-water mark of {self.key} keeps changing under us; not recorded", retry_after=self._calls.retry_after
        )

    def _value(self, mark: int) -> bytes:
        return keys.claim_value(self.owner, self.pool, self.identity, self.session.hex, self.claimed_at, mark)

    async def release(self, final_mark: int | None) -> bool:
        """Record ``final_mark`` exactly (when given and still held), stop the watch and mark the claim released.
        True when the claim key is still ours to delete (neither the key nor the lease was lost). Never raises."""
        if self.released:
            return False
        if not self.lost and final_mark is not None:
            try:
                await self.record_mark(final_mark, exact=True)
            except NotReadyError as exc:
                log.warning("etcd: final high-water mark of %s not recorded: %s", self.key, exc.reason)
        still_ours = self._mark_released()
        await self.watch.stop()
        return still_ours
