"""The claim ledger in etcd: one key per claim, on no lease, so it outlives its owner.

Keys under ``settings.etcd_namespace``::

    idmint/ledger/since                                   the ledger's first moment (ns), create-if-absent
    idmint/ledger/claims/<scheme>/<identity>/<record ID>  JSON record (app.storage.ledger.ClaimRecord)

Reads after the first are incremental (``min_mod_revision``: only keys written since the last read), so the
periodic refresh costs one small range read. Retention deletes each record that ended before the limit, guarded by
its mod revision. An owner's liveness is its lease's (LeaseTimeToLive): while alive, the time left gives the
expiry etcd would apply; once gone, the last expiry seen is when its claims ended.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from app.errors import NotReadyError
from app.settings import Settings
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
)
from app.storage.ledger import NS_IN_S, ClaimRecord, LedgerStore

LEDGER_PREFIX = "idmint/ledger/"
RANGE_LIMIT = 100_000
"""At most this many records are read in one range request (a fleet restarting hourly writes ~20,000 a month)."""


class EtcdLedgerStore(LedgerStore):
    """Claim records as keys under ``<namespace>idmint/ledger/`` (see the module docstring)."""

    name = "etcd"

    def __init__(self, settings: Settings, clock: Callable[[], int], client: EtcdClient | None = None) -> None:
        self.prefix = f"{settings.etcd_namespace}{LEDGER_PREFIX}".encode()
        self.claims_prefix = self.prefix + b"claims/"
        self.clock = clock
        self._owns_client = client is None
        self._client = (client or open_client(settings)).limited(
            timeout=settings.etcd_request_timeout, budget=RETRY_BUDGET_S
        )
        self._revision = 0
        self._mod: dict[bytes, int] = {}
        """Record key -> mod revision last read (compaction deletes only what it read)."""

    def key(self, record: ClaimRecord) -> bytes:
        return self.claims_prefix + f"{record.scheme}/{record.identity}/{record.record}".encode()

    async def write(self, record: ClaimRecord) -> None:
        try:
            await self._client.put(self.key(record), record.to_json())
        except EtcdCallError as exc:
            raise map_error(exc, "writing a claim ledger record") from exc

    async def read(self, full: bool) -> list[ClaimRecord]:
        start = 0 if full else self._revision + 1 if self._revision else 0
        body = {
            "key": b64(self.claims_prefix),
            "range_end": b64(prefix_end(self.claims_prefix)),
            "limit": str(RANGE_LIMIT),
        }
        if start:
            body["min_mod_revision"] = str(start)
        try:
            data = await self._client.call("/v3/kv/range", body)
        except EtcdCallError as exc:
            raise map_error(exc, "reading the claim ledger") from exc
        out: list[ClaimRecord] = []
        for raw in data.get("kvs", []):
            kv = KeyValue.parse(raw)
            with contextlib.suppress(ValueError):
                out.append(ClaimRecord.from_json(kv.value))
                self._mod[kv.key] = kv.mod_revision
        revision = int(data.get("header", {}).get("revision", 0))
        if revision:
            self._revision = revision
        return out

    async def compact(self, before_ns: int, records: list[ClaimRecord]) -> int:
        dropped = 0
        for record in records:
            if record.ended_at_ns is None or record.ended_at_ns >= before_ns:
                continue
            key = self.key(record)
            mod = self._mod.get(key)
            if mod is None:
                continue
            try:
                result = await self._client.txn([compare(key, "MOD", mod)], [delete(key)], [])
            except EtcdCallError as exc:
                raise map_error(exc, "compacting the claim ledger") from exc
            if result.succeeded:
                dropped += 1
                self._mod.pop(key, None)
        return dropped

    async def since_ns(self, now_ns: int) -> int:
        key = self.prefix + b"since"
        try:
            result = await self._client.txn(
                [compare(key, "CREATE", 0)], [put(key, str(now_ns).encode()), get(key)], [get(key)]
            )
        except EtcdCallError as exc:
            raise map_error(exc, "reading when the claim ledger began") from exc
        found = result.ranges[1] if result.succeeded else result.ranges[0]
        try:
            return int((found or [])[0].value)
        except (IndexError, ValueError) as exc:
            raise NotReadyError(f"claim ledger key {key.decode()} holds no time: {exc}") from exc

    async def owner_alive(self, record: ClaimRecord) -> tuple[bool | None, int | None]:
        """Whether the record's lease is live (LeaseTimeToLive), and when it would expire (ns, generator clock)."""
        if not record.lease:
            return None, None
        try:
            lease_id = int(record.lease, 16)
            left_s = await self._client.time_to_live(lease_id)
        except ValueError:
            return None, None
        except EtcdCallError:
            return None, None
        if left_s > 0:
            return True, self.clock() + left_s * NS_IN_S
        return False, None

    async def close(self) -> None:
        """Close the etcd client when this store opened it (a shared one is closed by its storage)."""
        if self._owns_client:
            await self._client.close()
