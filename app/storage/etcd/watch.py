"""The watch on one claim key: how a deleted or overwritten claim key is pushed to its claim.

A :class:`ClaimWatch` streams the key's events from a revision on, on the client's current endpoint, and calls
``on_loss(reason)`` for the first event that shows the key deleted or written by anyone else (another lease,
another create revision); our own mark writes keep the lease and the create revision and are not a loss. When
the stream ends (its member died or stalled) it calls ``on_broken()`` and the claim is re-armed by the backend
on the member the client moved to (:meth:`~app.storage.etcd.claim.EtcdClaim.rearm`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import aclosing

from app.storage.etcd import keys
from app.storage.etcd.client import EtcdCallError, EtcdClient, KeyValue
from app.storage.expiring import wait_event
from app.storage.lease import REVOKED_REASON
from app.tasks import cancel_and_wait

log = logging.getLogger("idmint.lease.etcd")

WATCH_CREATE_TIMEOUT_S = 2.0
"""The longest a new watch waits for etcd to confirm it (bounded further by the request timeout)."""


def loss_of(found: KeyValue | None, lease_id: int, create_revision: int) -> str | None:
    """Why a claim key read as ``found`` (None: deleted) no longer belongs to the claim made on lease
    ``lease_id`` at ``create_revision``; None while it still does."""
    if found is None:
        return "claim key deleted"
    if found.value.startswith(keys.REVOKED_MARK):
        return REVOKED_REASON
    if found.lease != lease_id or found.create_revision != create_revision:
        return f"claim key overwritten (now on lease {found.lease:016x})"
    return None


class ClaimWatch:
    """Watches ``key`` (held on ``lease_id`` since ``create_revision``) for the claim that owns it.

    ``on_loss(reason)`` is called once, from the watch task, when the key is deleted or overwritten;
    ``on_broken()`` when the stream ends without a loss (the claim then needs :meth:`start` again)."""

    def __init__(
        self,
        client: EtcdClient,
        key: str,
        lease_id: int,
        create_revision: int,
        on_loss: Callable[[str], None],
        on_broken: Callable[[], None],
    ) -> None:
        self.client = client
        self.key = key
        self.lease_id = lease_id
        self.create_revision = create_revision
        self.endpoint = ""
        """The member the watch was started on (redact before logging)."""
        self.task: asyncio.Task[None] | None = None
        self._on_loss = on_loss
        self._on_broken = on_broken

    def follows(self, endpoint: str) -> bool:
        """True while the watch runs on ``endpoint`` (the client's current member)."""
        return self.task is not None and self.endpoint == endpoint

    async def start(self, start_revision: int, timeout: float) -> bool:
        """Watch from ``start_revision`` on the client's current endpoint; True once etcd confirmed it within
        ``min(timeout, WATCH_CREATE_TIMEOUT_S)`` seconds, else the watch is stopped and False returned."""
        created = asyncio.Event()
        self.endpoint = self.client.endpoint
        self.task = asyncio.create_task(self._follow(start_revision, created), name=f"idmint-etcd-watch-{self.key}")
        if await wait_event(created, min(WATCH_CREATE_TIMEOUT_S, timeout)) and self.task is not None:
            return True
        await self.stop()
        return False

    async def stop(self) -> None:
        """Cancel the watch task (when called from it, only forget it)."""
        task, self.task = self.task, None
        if task is not asyncio.current_task():
            await cancel_and_wait(task)

    async def _follow(self, start_revision: int, created: asyncio.Event) -> None:
        endpoint = self.client.endpoint
        try:
            async with aclosing(self.client.watch(self.key.encode(), start_revision, created)) as stream:
                async for events in stream:
                    for event in events:
                        kv = None if event.type == "DELETE" else event.kv
                        reason = loss_of(kv, self.lease_id, self.create_revision)
                        if reason is not None:
                            self.task = None
                            self._on_loss(reason)
                            return
        except EtcdCallError as exc:
            log.info("etcd: watch of %s on %s ended: %s", self.key, exc.endpoint, exc.detail)
            if exc.code is None:
                self.client.failed(endpoint)
        if self.task is asyncio.current_task():
            self.task = None
            self._on_broken()
