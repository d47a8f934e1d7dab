"""etcd sequence storage: a key per document under the namespace, changed by compare-mod-revision transactions.

Keys (values JSON; documents and events: :mod:`app.storage.sequences`), all on no lease::

    <namespace>idmint/sequences/<name>                  the record   {"start": 1, "cache": 1000, "next": 1001001}
    <namespace>idmint/sequence-tombstones/<name>        the tombstone of a deleted sequence
    <namespace>idmint/sequence-periods/<name>/<key>     the allocation point of one period (keys sort by date)
    <namespace>idmint/sequence-audit/<name>/<event id>  one audit event (ids sort by time)

An update (:meth:`~app.storage.sequences.SequenceStore.update`) is one transaction ``If(ModRevision(k) == seen, for
every document k) Then (Put or Delete each document written, Put each event) Else (Get every document)``: it applies
only if nobody wrote those documents since we read them, so two replicas never reserve the same integers; no value
is written blindly. A missing document compares as revision 0. On a conflict the failure branch returns the current
values and revisions, and the change is applied to them at once, with a short jittered pause every few conflicts in
a row (replicas that collided do not collide again in step), within a time bound (``settings.etcd_request_timeout``
x ``CONFLICT_BUDGET_FACTOR``). The revisions last seen per key are remembered, so an uncontended update is one round
trip; a document never seen is read first (one transaction of gets for all of them). A change that refuses (raises)
on remembered values is confirmed by a transaction of the compares alone before the refusal is believed: a node
that saw a sequence deleted must not answer "unknown" once another node created it again. A transaction whose answer is
lost may have applied: it is retried as a conflict, and the change, applied to the values it wrote, sees that
(a reservation then counts as a gap; a gapless one finds its own token).

Listing reads the record prefix (tombstones and periods live under other prefixes, so the ``IDMINT_MAX_SEQUENCES``
cap and ``list`` never see them). Pruning deletes, per name (records and tombstones listed keys-only), the audit
keys before the cutoff's id and the period keys before the cutoff's key: two DeleteRange calls a name.

etcd's errors become the project's in one place, :func:`app.storage.etcd.client.map_error`; this module only adds
the overall time bound of one operation.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from app.errors import BackendUnavailableError, IdmintError
from app.storage.etcd.calls import RETRY_BUDGET_S, open_client
from app.storage.etcd.client import (
    EtcdCallError,
    EtcdClient,
    KeyValue,
    b64,
    compare,
    delete,
    get,
    map_error,
    prefix_end,
    put,
    redact,
)
from app.storage.sequences import (
    AUDIT_SCAN_MAX,
    NAME_PATTERN,
    PERIOD_PREFIX,
    RECORD,
    TOMBSTONE,
    AuditPage,
    Change,
    SequenceRecord,
    SequenceStore,
    T,
    check_doc,
    check_outcome,
    dumps,
    loads,
    unknown,
)

if TYPE_CHECKING:
    from app.settings import Settings

SEQUENCES_PREFIX = "idmint/sequences/"
TOMBSTONES_PREFIX = "idmint/sequence-tombstones/"
PERIODS_PREFIX = "idmint/sequence-periods/"
AUDIT_PREFIX = "idmint/sequence-audit/"
CONFLICT_PAUSE_START_S = 0.001
CONFLICT_PAUSE_MAX_S = 0.02
JITTER_EVERY = 4
"""A conflict is retried at once with the value the failed transaction returned (a writer that paused would come
back to a value already stale while the others write back to back, and starve); every JITTER_EVERY-th conflict in
a row pauses for a random 0..pause (growing to CONFLICT_PAUSE_MAX_S) so writers in lockstep fall out of it."""
CONFLICT_BUDGET_FACTOR = 5.0
"""An update gives up (503) after this many request timeouts of back-to-back conflicts."""
LOCK_STRIPES = 64
"""Updates of one sequence from this process go one at a time (locks striped by name), so they never conflict with
each other; only other processes' writes can."""
AUDIT_PAGE_READ = 1000
"""Audit keys read per range request while filling a page."""
_NAME = re.compile(NAME_PATTERN)


class EtcdSequenceStore(SequenceStore):
    """Sequences as keys under ``<namespace>idmint/``; any number of replicas."""

    name = "etcd"

    def __init__(self, settings: Settings, client: EtcdClient | None = None) -> None:
        super().__init__(settings.max_sequences)
        namespace = settings.etcd_namespace
        self.prefix = f"{namespace}{SEQUENCES_PREFIX}"
        self.tombstones = f"{namespace}{TOMBSTONES_PREFIX}"
        self.periods = f"{namespace}{PERIODS_PREFIX}"
        self.audits = f"{namespace}{AUDIT_PREFIX}"
        self._owns_client = client is None
        self._client = (client or open_client(settings)).limited(
            timeout=settings.etcd_request_timeout, budget=RETRY_BUDGET_S
        )
        self._timeout = settings.etcd_request_timeout
        self._limit = self._timeout * len(settings.etcd_endpoints) + 1.0
        self._seen: dict[bytes, tuple[dict[str, Any] | None, int]] = {}
        """key -> (value, mod revision) last read or written: the compare of the next update (0: absent)."""
        self._rng = random.Random()
        self._locks = [asyncio.Lock() for _ in range(LOCK_STRIPES)]
        self.conflicts = 0
        """Transactions that found a document changed by another process (status)."""

    def key(self, name: str, doc: str = RECORD) -> bytes:
        if doc == RECORD:
            return f"{self.prefix}{name}".encode()
        if doc == TOMBSTONE:
            return f"{self.tombstones}{name}".encode()
        return f"{self.periods}{name}/{check_doc(doc)[len(PERIOD_PREFIX) :]}".encode()

    def event_key(self, name: str, event_id: str) -> bytes:
        return f"{self.audits}{name}/{event_id}".encode()

    async def close(self) -> None:
        """Close the etcd client when this store opened it (a shared one is closed by its storage)."""
        if self._owns_client:
            await self._client.close()

    @asynccontextmanager
    async def _etcd(self, doing: str, limit: float | None = None) -> AsyncIterator[None]:
        try:
            async with asyncio.timeout(limit or self._limit):
                yield
        except EtcdCallError as exc:
            raise map_error(exc, doing) from exc
        except TimeoutError:
            raise BackendUnavailableError(
                f"etcd at {redact(self._client.endpoint)} did not answer in time (while {doing})"
            ) from None

    def _remember(self, key: bytes, kvs: list[KeyValue] | None) -> tuple[dict[str, Any] | None, int]:
        seen = (loads(kvs[0].value, key.decode()), kvs[0].mod_revision) if kvs else (None, 0)
        self._seen[key] = seen
        return seen

    # -- interface ----------------------------------------------------------------------------------------
    async def get(self, name: str) -> SequenceRecord:
        key = self.key(name)
        async with self._etcd(f"reading sequence {name}"):
            kvs, _ = await self._client.range(key)
        obj, _ = self._remember(key, kvs)
        if obj is None:
            raise unknown(name)
        return SequenceRecord.from_obj(name, obj, key.decode())

    async def list(self) -> list[SequenceRecord]:
        prefix = self.prefix.encode()
        async with self._etcd("listing sequences"):
            data = await self._client.call(
                "/v3/kv/range",
                {
                    "key": b64(prefix),
                    "range_end": b64(prefix_end(prefix)),
                    "limit": str(self.max_sequences),
                    "sort_order": "ASCEND",
                    "sort_target": "KEY",
                },
            )
        out = []
        for kv in data.get("kvs", []):
            key = base64.b64decode(kv.get("key", "")).decode(errors="replace")
            name = key[len(self.prefix) :]
            if _NAME.fullmatch(name):
                out.append(SequenceRecord.from_obj(name, loads(base64.b64decode(kv.get("value", "")), key), key))
        return out

    async def update(self, name: str, docs: Sequence[str], change: Change[T], timeout: float | None = None) -> T:
        keys = {doc: self.key(name, check_doc(doc)) for doc in docs}
        if timeout is None:
            async with self._locks[hash(name) % LOCK_STRIPES]:
                return await self._update(name, keys, change)
        async with self._etcd(f"updating sequence {name}", timeout), self._locks[hash(name) % LOCK_STRIPES]:
            return await self._update(name, keys, change)

    async def _update(self, name: str, keys: dict[str, bytes], change: Change[T]) -> T:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self._timeout * CONFLICT_BUDGET_FACTOR
        pause = CONFLICT_PAUSE_START_S
        conflicts = 0
        missing = [key for key in keys.values() if key not in self._seen]
        if missing:
            async with self._etcd(f"reading sequence {name}"):
                result = await self._client.txn([], [get(key) for key in missing], [])
            for key, kvs in zip(missing, result.ranges, strict=True):
                self._remember(key, kvs)
        while True:
            seen = {doc: self._seen[key] for doc, key in keys.items()}
            compares = [compare(key, "MOD", seen[doc][1]) for doc, key in keys.items()]
            try:
                outcome = change({doc: _copy(value) for doc, (value, _) in seen.items()})
            except IdmintError:
                # A refusal decided on remembered values (a sequence this process saw deleted, since created
                # again) stands only if they are still current: confirmed like an outcome that writes nothing.
                async with self._etcd(f"reading sequence {name}"):
                    result = await self._client.txn(compares, [], [get(key) for key in keys.values()])
                if result.succeeded:
                    raise
                for key, kvs in zip(keys.values(), result.ranges, strict=True):
                    self._remember(key, kvs)
                continue
            check_outcome(list(keys), outcome)
            ops = [
                put(keys[doc], dumps(value)) if value is not None else delete(keys[doc])
                for doc, value in outcome.writes.items()
            ]
            ops += [put(self.event_key(name, event["id"]), dumps(event)) for event in outcome.events]
            async with self._etcd(f"updating sequence {name}"):
                result = await self._client.txn(compares, ops, [get(key) for key in keys.values()])
            if result.succeeded:
                for doc, value in outcome.writes.items():
                    self._seen[keys[doc]] = (_copy(value), result.revision if value is not None else 0)
                if outcome.error is not None:
                    raise outcome.error
                return outcome.result
            self.conflicts += 1
            for key, kvs in zip(keys.values(), result.ranges, strict=True):
                self._remember(key, kvs)
            conflicts += 1
            if loop.time() >= give_up:
                raise BackendUnavailableError(
                    f"sequence {name}: {conflicts} conflicting updates in a row (other replicas kept changing it); "
                    "try again"
                )
            if conflicts % JITTER_EVERY == 0:
                await asyncio.sleep(self._rng.uniform(0, pause))
                pause = min(pause * 2, CONFLICT_PAUSE_MAX_S)

    async def audit(self, name: str, after: str | None, limit: int, period: str | None = None) -> AuditPage:
        prefix = f"{self.audits}{name}/".encode()
        start = prefix + after.encode() + b"\0" if after else prefix
        end = prefix_end(prefix)
        page: list[dict[str, Any]] = []
        scanned = 0
        last = None
        async with self._etcd(f"reading the audit log of sequence {name}"):
            while scanned < AUDIT_SCAN_MAX:
                data = await self._client.call(
                    "/v3/kv/range",
                    {"key": b64(start), "range_end": b64(end), "limit": str(AUDIT_PAGE_READ)},
                )
                kvs = [KeyValue.parse(kv) for kv in data.get("kvs", [])]
                for kv in kvs:
                    scanned += 1
                    last = kv.key[len(prefix) :].decode()
                    event = loads(kv.value, kv.key.decode())
                    if period is None or (event.get("period") or "never") == period:
                        page.append(event)
                    if len(page) >= limit or scanned >= AUDIT_SCAN_MAX:
                        more = kv is not kvs[-1] or bool(data.get("more"))
                        return page, (last if more else None)
                if not data.get("more") or not kvs:
                    return page, None
                start = kvs[-1].key + b"\0"
        return page, last

    async def prune(self, events_before_ns: int, periods_before: str) -> int:
        names: set[str] = set()
        removed = 0
        async with self._etcd("pruning sequence audit logs and periods", self._limit * 4):
            for prefix in (self.prefix, self.tombstones):
                found, _ = await self._client.range(prefix.encode(), prefix_end(prefix.encode()), keys_only=True)
                names.update(kv.key.decode(errors="replace")[len(prefix) :] for kv in found)
        for name in sorted(n for n in names if _NAME.fullmatch(n)):
            audit = f"{self.audits}{name}/".encode()
            periods = f"{self.periods}{name}/".encode()
            async with self._etcd(f"pruning sequence {name}"):
                removed += await self._client.delete_range(audit, audit + f"{events_before_ns:020d}".encode())
                removed += await self._client.delete_range(periods, periods + periods_before.encode())
        return removed

    def status(self) -> dict[str, Any]:
        return {
            **super().status(),
            "prefix": self.prefix,
            "endpoints": [redact(e) for e in self._client.endpoints],
            "conflicts": self.conflicts,
        }


def _copy(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    """A deep copy (a change must not alter the cached value it was handed)."""
    return None if obj is None else json.loads(json.dumps(obj))
