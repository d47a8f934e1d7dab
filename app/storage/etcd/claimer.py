"""Claiming one identity on the lease: read the pool, give back what an unfinished claim left on our lease, draw
(:mod:`app.storage.draw`), and take the first free key with one transaction ``If(CreateRevision(key) == 0) Then
Put(key, value, lease)``. Released keys etcd could not be told of wait in :class:`Leftovers`."""

from __future__ import annotations

import logging

from app.errors import LeaseLostError, NotReadyError, PoolExhaustedError
from app.schemes.pool import IdentityPool
from app.storage.draw import draw
from app.storage.etcd import keys
from app.storage.etcd.calls import Calls
from app.storage.etcd.claim import EtcdClaim
from app.storage.etcd.client import compare, delete, get, prefix_end, put
from app.storage.etcd.session import Session
from app.storage.lease import LossCallback, Owner

log = logging.getLogger("idmint.lease.etcd")


class Leftovers:
    """Deletes our incarnation of a claim key (same create revision); one etcd cannot be told of now is kept as
    ``pending`` (key -> (create revision, lease ID)) and deleted by :meth:`retry` once etcd answers: it sits on our
    live lease and would otherwise stay held for as long as this process runs."""

    def __init__(self, calls: Calls) -> None:
        self.calls = calls
        self.pending: dict[bytes, tuple[int, int]] = {}

    async def delete(self, key: bytes, create_revision: int, lease_id: int) -> bool:
        """Delete ``key``. Never raises; False when it has to wait for etcd (kept in ``pending``)."""
        try:
            async with self.calls.bounded(f"deleting {key.decode()}") as client:
                await client.txn([compare(key, "CREATE", create_revision)], [delete(key)], [])
            self.pending.pop(key, None)
        except LeaseLostError:
            self.pending.pop(key, None)  # gone with the lease
        except NotReadyError as exc:
            self.pending[key] = (create_revision, lease_id)
            log.warning("etcd: deleting %s failed; retrying once etcd answers: %s", key.decode(), exc.reason)
            return False
        return True

    async def retry(self, session: Session) -> None:
        """Delete every pending key still on ``session``'s lease. Raises NotReadyError when etcd cannot be used."""
        for key, (create_revision, lease_id) in list(self.pending.items()):
            if lease_id != session.lease_id:
                del self.pending[key]  # its lease is gone, and the key with it
                continue
            async with self.calls.bounded(f"deleting {key.decode()}") as client:
                await client.txn([compare(key, "CREATE", create_revision)], [delete(key)], [])
            del self.pending[key]
            log.info("etcd: released %s (deferred while etcd was unreachable)", key.decode())


class Claimer:
    """Claims identities under ``namespace`` and keeps the :class:`EtcdClaim` it made (``claims``) until the
    backend forgets one. ``on_lost`` is registered on every claim; ``watch_timeout`` (seconds) bounds the first
    watch; ``ttl`` is the Retry-After of an exhausted pool."""

    def __init__(
        self, calls: Calls, namespace: str, ttl: int, leftovers: Leftovers, on_lost: LossCallback, watch_timeout: float
    ) -> None:
        self.calls = calls
        self.namespace = namespace
        self.ttl = ttl
        self.leftovers = leftovers
        self.on_lost = on_lost
        self.watch_timeout = watch_timeout
        self.claims: set[EtcdClaim] = set()
        self.inflight: set[bytes] = set()
        """Claim keys whose claiming transaction is under way (not to be mistaken for leftovers)."""
        self.held_before: dict[bytes, list[int]] = {}
        """Pool key prefix -> identities this process claimed there, oldest first (re-claims prefer the newest)."""

    async def claim(self, session: Session, pool: IdentityPool, exclude: frozenset[int], owner: Owner) -> EtcdClaim:
        """Claim one free identity of ``pool`` on ``session``'s lease. Raises NotReadyError (the pool's group not
        allowed), PoolExhaustedError, BackendUnavailableError or LeaseLostError."""
        ns = self.namespace
        prefix = keys.pool_prefix(ns, pool).encode()
        reads = [get(prefix, prefix_end(prefix))]
        if pool.allowed_groups_key:
            reads.append(get((ns + pool.allowed_groups_key).encode()))
        async with self.calls.bounded(f"reading the {pool.scheme} pool") as client:
            found = await client.txn([], reads, [])
        held: dict[int, bytes] = {}
        ours = {c.key.encode() for c in self.claims}
        for kv in found.ranges[0] or []:
            identity = keys.decode_identity(pool, kv.key[len(prefix) :].decode(errors="replace"))
            if identity is None:
                continue
            held[identity] = kv.value
            if (
                kv.lease == session.lease_id
                and kv.key not in ours
                and kv.key not in self.inflight
                and kv.key not in self.leftovers.pending
            ):
                # Ours, from a claim whose answer was lost (timeout): give it back rather than hold it unused.
                log.info("etcd: releasing %s, left on our lease by an unfinished claim", kv.key.decode())
                if await self.leftovers.delete(kv.key, kv.create_revision, session.lease_id):
                    del held[identity]
        if pool.allowed_groups_key:
            allowed = found.ranges[1] or []
            keys.check_allowed_groups(ns, pool, allowed[0].value if allowed else None, self.ttl)

        claimed_at = keys.now_rfc3339()
        tries = 0
        before = self.held_before.setdefault(prefix, [])
        for identity in draw(pool, held, prefer=reversed(before), exclude=exclude):
            tries += 1
            key = keys.claim_key(ns, pool, identity).encode()
            mkey = keys.mark_key(ns, pool, identity).encode()
            value = keys.claim_value(owner, pool, identity, session.hex, claimed_at)
            self.inflight.add(key)
            try:
                async with self.calls.bounded(f"claiming {key.decode()}") as client:
                    result = await client.txn(
                        [compare(key, "CREATE", 0)],
                        [put(key, value, session.lease_id), get(key), get(mkey)],
                        [get(key)],
                    )
            finally:
                self.inflight.discard(key)
            if not result.succeeded:
                now_held = result.ranges[0] or []
                held[identity] = now_held[0].value if now_held else b""
                if (
                    now_held
                    and now_held[0].lease == session.lease_id
                    and key not in ours
                    and key not in self.inflight
                    and key not in {c.key.encode() for c in self.claims}
                ):
                    # Our own put, committed by an attempt whose answer was lost: give it back, try the next.
                    await self.leftovers.delete(key, now_held[0].create_revision, session.lease_id)
                continue
            kv = (result.ranges[1] or [])[0]
            marks = result.ranges[2] or []
            try:
                mark = keys.read_mark(marks[0].value if marks else None, mkey.decode())
            except NotReadyError:
                await self.leftovers.delete(key, kv.create_revision, session.lease_id)
                raise
            claim = EtcdClaim(
                self.calls,
                pool,
                identity,
                key.decode(),
                mkey.decode(),
                mark,
                session,
                kv.create_revision,
                kv.mod_revision,
                marks[0].mod_revision if marks else 0,
                owner,
                claimed_at,
            )
            self.claims.add(claim)
            if identity in before:
                before.remove(identity)
            before.append(identity)  # tried first next time: a lost lease re-claims the same identity if free
            claim.on_lost(self.on_lost)
            await claim.watch_from(kv.mod_revision + 1, self.watch_timeout)
            log.info(
                "etcd: claimed %s %s %d (key %s, lease %s, high-water mark %d)",
                pool.scheme,
                pool.kind,
                identity,
                claim.key,
                session.hex,
                mark,
            )
            return claim
        raise PoolExhaustedError(keys.exhausted_reason(pool, exclude, held, tries), retry_after=self.ttl)
