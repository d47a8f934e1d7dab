"""Backfill marks on etcd (:mod:`app.storage.backfill`): a key per mark, changed by compare-mod-revision
transactions.

``<namespace>idmint/backfill/<space>/<identity>/<tick>`` holds the highest sequence used, as ASCII decimal. An
update is one transaction: ``If(ModRevision(k) == seen, for every tick) Then Put(each mark raised) Else Get(every
tick)``; an update that writes nothing sends none (marks only rise). The first try assumes every tick unmarked
(revision 0: a backfill mostly writes ticks no one used); a failure returns the marks as they are and the change
runs again on them, so an uncontended update of fresh ticks is one round trip.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TypeVar

from app.errors import BackendUnavailableError
from app.settings import Settings
from app.storage.backfill import BackfillStore, MarkChange, Marks
from app.storage.etcd.calls import RETRY_BUDGET_S
from app.storage.etcd.client import EtcdCallError, EtcdClient, compare, get, map_error, prefix_end, put, redact

T = TypeVar("T")

BACKFILL_PREFIX = "idmint/backfill/"
MAX_TICKS = 120
"""Ticks per transaction: etcd's default ``--max-txn-ops`` is 128 (compares and each branch counted apart)."""
CONFLICTS_MAX = 50
"""Conflicting transactions in a row before an update gives up (503)."""


class EtcdBackfillStore(BackfillStore):
    """Marks as keys under ``<namespace>idmint/backfill/``."""

    max_ticks = MAX_TICKS

    def __init__(self, settings: Settings, client: EtcdClient) -> None:
        self.prefix = f"{settings.etcd_namespace}{BACKFILL_PREFIX}"
        self._client = client.limited(timeout=settings.etcd_request_timeout, budget=RETRY_BUDGET_S)
        self._limit = settings.etcd_request_timeout * len(settings.etcd_endpoints) + 1.0

    def key(self, space: str, identity: int, tick: int) -> bytes:
        return f"{self.prefix}{space}/{identity}/{tick}".encode()

    async def update(self, space: str, identity: int, ticks: Sequence[int], change: MarkChange[T]) -> T:
        keys = {tick: self.key(space, identity, tick) for tick in ticks}
        seen: dict[int, tuple[int, int]] = {tick: (-1, 0) for tick in ticks}
        """tick -> (mark, mod revision) as last read (0: absent)."""
        for _ in range(CONFLICTS_MAX):
            writes, result = change({tick: mark for tick, (mark, revision) in seen.items() if revision})
            if not writes:
                # Marks only rise: nothing to write, decided on marks read from etcd (or on none, for no ticks),
                # stands without a transaction, which would be a read-only one (etcd 3.5.1 panics when one of those
                # is cancelled).
                return result
            compares = [compare(keys[tick], "MOD", revision) for tick, (_, revision) in seen.items()]
            ops = [put(keys[tick], str(high).encode()) for tick, high in writes.items()]
            try:
                async with asyncio.timeout(self._limit):
                    answer = await self._client.txn(compares, ops, [get(key) for key in keys.values()])
            except EtcdCallError as exc:
                raise map_error(exc, "raising backfill marks") from exc
            except TimeoutError:
                raise BackendUnavailableError(
                    f"etcd at {redact(self._client.endpoint)} did not answer in time (while raising backfill marks)"
                ) from None
            if answer.succeeded:
                return result
            for tick, kvs in zip(keys, answer.ranges, strict=True):
                seen[tick] = (int(kvs[0].value), kvs[0].mod_revision) if kvs else (-1, 0)
        raise BackendUnavailableError(
            f"backfill marks of {space}/{identity}: {CONFLICTS_MAX} conflicting updates in a row; try again"
        )

    async def marks(self, space: str, identity: int, ticks: Sequence[int]) -> Marks:
        """The stored marks of ``ticks``: one range read of the identity's keys (not a transaction)."""
        prefix = f"{self.prefix}{space}/{identity}/".encode()
        try:
            async with asyncio.timeout(self._limit):
                kvs, _ = await self._client.range(prefix, prefix_end(prefix))
        except EtcdCallError as exc:
            raise map_error(exc, "reading backfill marks") from exc
        except TimeoutError:
            raise BackendUnavailableError(
                f"etcd at {redact(self._client.endpoint)} did not answer in time (while reading backfill marks)"
            ) from None
        wanted = set(ticks)
        found = {int(kv.key[len(prefix) :]): int(kv.value) for kv in kvs}
        return {tick: high for tick, high in found.items() if tick in wanted}
