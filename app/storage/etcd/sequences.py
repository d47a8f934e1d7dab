"""etcd sequence storage: one key per sequence under the namespace, advanced by compare-mod-revision transactions.

Key and value (JSON)::

    <namespace>idmint/sequences/<name>    {"start": 1, "cache": 1000, "next": 1001001}    on no lease

A reservation is one transaction ``If(ModRevision(key) == seen) Then Put(key, next + count) Else Get(key)``: it
applies only if nobody advanced the sequence since we read it, so two replicas never get the same range; the
value is never written blindly. On a conflict the failure branch returns the current value and revision, and the
reservation is tried again at once, with a short jittered pause every few conflicts in a row (replicas that
collided do not collide again in step), within a time bound (``settings.etcd_request_timeout`` x
``CONFLICT_BUDGET_FACTOR``). The revision last seen per sequence is remembered, so an uncontended reservation is
one round trip.

A hand-back at a clean stop is one transaction ``If(ModRevision(key) == R, Value(key) == V) Then Put(key, V with
next = first)``, where R and V are the revision and value of this process's latest reservation of the sequence
(kept apart from the revision merely seen): it applies only if nobody wrote the key since, and nothing is tried
again after a failed compare.

Creating is ``If(CreateRevision(key) == 0) Then Put(key, value) Else Get(key)``. The ``IDMINT_MAX_SEQUENCES`` cap is
checked by counting the keys first (count-only range read); two replicas creating different names at the same
moment can pass it by one each, which keeps the number of sequences (and metric labels) bounded all the same.

etcd's errors become the project's in one place, :func:`app.storage.etcd.client.map_error`; this module only adds
the overall time bound of one operation.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import random
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from app.errors import BackendUnavailableError
from app.storage.etcd.calls import RETRY_BUDGET_S, open_client
from app.storage.etcd.client import (
    EtcdCallError,
    EtcdClient,
    b64,
    compare,
    get,
    map_error,
    prefix_end,
    put,
    redact,
)
from app.storage.sequences import (
    NAME_PATTERN,
    SequenceRecord,
    SequenceStore,
    conflict,
    handed_back,
    too_many,
    unknown,
)

if TYPE_CHECKING:
    from app.settings import Settings

SEQUENCES_PREFIX = "idmint/sequences/"
CONFLICT_PAUSE_START_S = 0.001
CONFLICT_PAUSE_MAX_S = 0.02
JITTER_EVERY = 4
"""A conflict is retried at once with the value the failed transaction returned (a writer that paused would come
back to a value already stale while the others write back to back, and starve); every JITTER_EVERY-th conflict in
a row pauses for a random 0..pause (growing to CONFLICT_PAUSE_MAX_S) so writers in lockstep fall out of it."""
CONFLICT_BUDGET_FACTOR = 5.0
"""A reservation gives up (503) after this many request timeouts of back-to-back conflicts."""
LOCK_STRIPES = 64
"""Reservations of one sequence from this process go one at a time (locks striped by name), so they never
conflict with each other; only other processes' writes can."""
_NAME = re.compile(NAME_PATTERN)


class EtcdSequenceStore(SequenceStore):
    """Sequences as keys ``<namespace>idmint/sequences/<name>``; any number of replicas."""

    name = "etcd"

    def __init__(self, settings: Settings, client: EtcdClient | None = None) -> None:
        self.max_sequences = settings.max_sequences
        self.prefix = f"{settings.etcd_namespace}{SEQUENCES_PREFIX}"
        self._owns_client = client is None
        self._client = (client or open_client(settings)).limited(
            timeout=settings.etcd_request_timeout, budget=RETRY_BUDGET_S
        )
        self._timeout = settings.etcd_request_timeout
        self._limit = self._timeout * len(settings.etcd_endpoints) + 1.0
        self._seen: dict[str, tuple[SequenceRecord, int]] = {}
        """name -> (record, mod revision) last read or written: the compare of the next reservation."""
        self._wrote: dict[str, tuple[SequenceRecord, int]] = {}
        """name -> (record, mod revision) of this process's latest reservation: the compare of a hand-back."""
        self._rng = random.Random()
        self._locks = [asyncio.Lock() for _ in range(LOCK_STRIPES)]
        self.reservations = 0
        self.conflicts = 0
        """Reservations made, and transactions that found the sequence advanced by another process (status)."""

    def key(self, name: str) -> bytes:
        return f"{self.prefix}{name}".encode()

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

    def _parse(self, name: str, value: bytes) -> SequenceRecord:
        return SequenceRecord.from_json(name, value, self.key(name).decode())

    # -- interface ----------------------------------------------------------------------------------------
    async def create(self, name: str, start: int, cache: int) -> tuple[SequenceRecord, bool]:
        key = self.key(name)
        record = SequenceRecord(name, start, cache, start)
        async with self._etcd(f"creating sequence {name}"):
            existing, _ = await self._client.range(key)
            if not existing:
                counted = await self._client.call(
                    "/v3/kv/range",
                    {
                        "key": b64(self.prefix.encode()),
                        "range_end": b64(prefix_end(self.prefix.encode())),
                        "count_only": True,
                    },
                )
                if int(counted.get("count", 0)) >= self.max_sequences:
                    raise too_many(self.max_sequences)
                result = await self._client.txn([compare(key, "CREATE", 0)], [put(key, record.to_json())], [get(key)])
                if result.succeeded:
                    self._seen[name] = (record, result.revision)
                    return record, True
                existing = result.ranges[0] or []
        if not existing:  # created and deleted between our reads: let the caller try again
            raise BackendUnavailableError(f"sequence {name} changed while being created; try again")
        found = self._parse(name, existing[0].value)
        if not found.same_settings(start, cache):
            raise conflict(found, start, cache)
        return found, False

    async def get(self, name: str) -> SequenceRecord:
        async with self._etcd(f"reading sequence {name}"):
            kvs, _ = await self._client.range(self.key(name))
        if not kvs:
            raise unknown(name)
        record = self._parse(name, kvs[0].value)
        self._seen[name] = (record, kvs[0].mod_revision)
        return record

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
            name = base64.b64decode(kv.get("key", "")).decode(errors="replace")[len(self.prefix) :]
            if _NAME.fullmatch(name):
                out.append(self._parse(name, base64.b64decode(kv.get("value", ""))))
        return out

    async def reserve(self, name: str, count: int, partial: bool = False) -> tuple[int, int]:
        async with self._locks[hash(name) % LOCK_STRIPES]:
            return await self._reserve(name, count, partial)

    async def _reserve(self, name: str, count: int, partial: bool) -> tuple[int, int]:
        key = self.key(name)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self._timeout * CONFLICT_BUDGET_FACTOR
        pause = CONFLICT_PAUSE_START_S
        conflicts = 0
        seen = self._seen.get(name)
        if seen is None:
            await self.get(name)
            seen = self._seen[name]
        while True:
            record, revision = seen
            first, last, after = record.advance(count, partial)
            async with self._etcd(f"reserving {count} integers of sequence {name}"):
                result = await self._client.txn(
                    [compare(key, "MOD", revision)], [put(key, after.to_json())], [get(key)]
                )
            if result.succeeded:
                self._seen[name] = self._wrote[name] = (after, result.revision)
                self.reservations += 1
                return first, last
            self.conflicts += 1
            current = result.ranges[0] or []
            if not current:
                self._seen.pop(name, None)
                raise unknown(name)
            seen = (self._parse(name, current[0].value), current[0].mod_revision)
            self._seen[name] = seen
            conflicts += 1
            if loop.time() >= give_up:
                raise BackendUnavailableError(
                    f"sequence {name}: {conflicts} conflicting reservations in a row (other replicas kept "
                    "advancing it); try again"
                )
            if conflicts % JITTER_EVERY == 0:
                await asyncio.sleep(self._rng.uniform(0, pause))
                pause = min(pause * 2, CONFLICT_PAUSE_MAX_S)

    async def give_back(self, name: str, first: int, last: int, timeout: float) -> bool:
        async with self._locks[hash(name) % LOCK_STRIPES]:
            wrote = self._wrote.pop(name, None)
            if wrote is None or not handed_back(wrote[0], wrote[0], first, last):
                return False
            record, revision = wrote
            key = self.key(name)
            back = dataclasses.replace(record, next=first)
            value_is = {"target": "VALUE", "key": b64(key), "value": b64(record.to_json()), "result": "EQUAL"}
            async with self._etcd(f"handing back {last - first + 1} integers of sequence {name}", timeout):
                result = await self._client.txn(
                    [compare(key, "MOD", revision), value_is], [put(key, back.to_json())], []
                )
            if result.succeeded:
                self._seen[name] = (back, result.revision)
            return result.succeeded

    def status(self) -> dict[str, Any]:
        return {
            "store": self.name,
            "prefix": self.prefix,
            "endpoints": [redact(e) for e in self._client.endpoints],
            "reservations": self.reservations,
            "conflicts": self.conflicts,
        }
