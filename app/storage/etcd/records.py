"""What the backend keeps in etcd beside the claims: registrations on the lease that need no exclusivity (Wiji's
random part, with its owner), and the fleet's keys (the fleet ID, a peer's lease, the held counts)."""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from app.errors import NotReadyError
from app.schemes.pool import IdentityPool
from app.storage.etcd import keys
from app.storage.etcd.calls import Calls
from app.storage.etcd.client import b64, compare, get, prefix_end, put
from app.storage.etcd.session import Session
from app.storage.lease import check_record_name, parse_record, record_bytes

log = logging.getLogger("idmint.lease.etcd")


class Registrations:
    """``idmint/<scheme>/<name>`` keys under ``namespace``, each put on the current lease and again on every new
    one (key -> (JSON value, the lease it was last put on, None before the first put))."""

    def __init__(self, calls: Calls, namespace: str) -> None:
        self.calls = calls
        self.namespace = namespace
        self.values: dict[str, tuple[bytes, int | None]] = {}

    def add(self, scheme: str, name: str, value: dict[str, Any]) -> None:
        """Remember ``value`` for ``idmint/<scheme>/<name>``, to be put by the next :meth:`publish`."""
        self.values[keys.register_key(self.namespace, scheme, name)] = (keys.to_json(value), None)

    async def publish(self, session: Session) -> None:
        """Put every value not yet on ``session``'s lease. Raises NotReadyError when etcd cannot be used now."""
        for key, (data, lease_id) in list(self.values.items()):
            if lease_id == session.lease_id:
                continue
            payload = {**json.loads(data), "lease": session.hex}
            async with self.calls.bounded(f"registering {key}") as client:
                await client.put(key.encode(), keys.to_json(payload), session.lease_id)
            self.values[key] = (data, session.lease_id)
            log.info("etcd: registered %s on lease %s", key, session.hex)


class FleetReads:
    """Reads (and writes once: the fleet ID) the fleet's keys under ``namespace``, through ``calls``."""

    def __init__(self, calls: Calls, namespace: str) -> None:
        self.calls = calls
        self.namespace = namespace
        self.fleet_id: str | None = None
        """The fleet ID once read (it never changes)."""

    async def read_fleet_id(self) -> str:
        """The fleet ID at ``<namespace>idmint/fleet`` (on no lease: it outlives every node), written by the first
        node to ask in one create-if-absent transaction. Raises NotReadyError when etcd cannot be used now, or when
        the key holds no fleet ID."""
        if self.fleet_id is not None:
            return self.fleet_id
        key = keys.fleet_key(self.namespace).encode()
        value = keys.to_json({"fleet_id": str(uuid.uuid4()), "created_at": keys.now_rfc3339()})
        async with self.calls.bounded("reading the fleet ID") as client:
            result = await client.txn([compare(key, "CREATE", 0)], [put(key, value), get(key)], [get(key)])
        found = result.ranges[1] if result.succeeded else result.ranges[0]
        self.fleet_id = keys.read_fleet_id(found[0].value if found else b"", key.decode())
        return self.fleet_id

    async def read_record(self, name: str) -> dict[str, Any] | None:
        """The fleet record at ``<namespace>idmint/records/<name>`` (on no lease), None when absent. Raises
        NotReadyError when etcd cannot be used now or the value is not a JSON object."""
        key = keys.record_key(self.namespace, check_record_name(name))
        async with self.calls.bounded(f"reading fleet record {name}") as client:
            found, _ = await client.range(key.encode())
        return parse_record(found[0].value, key) if found else None

    async def swap_record(self, name: str, expected: dict[str, Any] | None, value: dict[str, Any]) -> bool:
        """One transaction: ``If(Value(key) == expected) Then Put(key, value)`` (``If(CreateRevision(key) == 0)``
        for ``expected`` None); records are compared as :func:`~app.storage.lease.record_bytes`."""
        key = keys.record_key(self.namespace, check_record_name(name)).encode()
        guard = (
            compare(key, "CREATE", 0)
            if expected is None
            else {"target": "VALUE", "key": b64(key), "value": b64(record_bytes(expected)), "result": "EQUAL"}
        )
        async with self.calls.bounded(f"writing fleet record {name}") as client:
            result = await client.txn([guard], [put(key, record_bytes(value))], [])
        return result.succeeded

    async def has_member(self, token: str) -> bool | None:
        """Whether lease ``token`` (16 hex digits) is live in this etcd (LeaseTimeToLive); None when etcd cannot
        answer now."""
        try:
            lease_id = int(token, 16) if len(token) == 16 else -1
        except ValueError:
            return False
        if lease_id <= 0:
            return False
        try:
            async with self.calls.bounded("looking up a peer's lease") as client:
                return await client.time_to_live(lease_id) > 0
        except NotReadyError:
            return None

    async def count_held(self, pool: IdentityPool) -> int | None:
        """Claim keys of the region's slice, read in one range request (keys only); None when etcd cannot answer."""
        prefix = keys.pool_prefix(self.namespace, pool).encode()
        first, last = pool.slice
        try:
            async with self.calls.bounded(f"counting the {pool.scheme} claims") as client:
                found, _ = await client.range(prefix, prefix_end(prefix), keys_only=True)
        except NotReadyError:
            return None
        held = (keys.decode_identity(pool, kv.key[len(prefix) :].decode(errors="replace")) for kv in found)
        return sum(1 for identity in held if identity is not None and first <= identity <= last)
