"""What a table backend keeps beside the claims: registrations on the lease that need no exclusivity
(Wiji's random part, with its owner), and the fleet's rows (the fleet ID, fleet records, a peer's lease, the held
counts)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from app.errors import BackendUnavailableError, NotReadyError
from app.schemes.pool import IdentityPool
from app.storage.lease import check_record_name, parse_record, record_bytes
from app.storage.tables.db import Database
from app.storage.tables.session import Session

FLEET_ID_KEY = "fleet_id"
"""The ``meta`` row holding the fleet ID."""
LEASE_HEX_DIGITS = 16


def lease_of(token: str) -> int | None:
    """The lease ID a member token (16 hex digits) names; None for anything else."""
    if len(token) != LEASE_HEX_DIGITS:
        return None
    try:
        lease_id = int(token, 16)
    except ValueError:
        return None
    return lease_id if 0 < lease_id < 2**63 else None


class Registrations:
    """``idmint/<scheme>/<name>`` rows, each written with the current lease and again with every new one (key ->
    (value, the lease it was last written with, None before the first write))."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.values: dict[str, tuple[dict[str, Any], int | None]] = {}

    def add(self, scheme: str, name: str, value: dict[str, Any]) -> None:
        self.values[f"idmint/{scheme}/{name}"] = (value, None)

    async def publish(self, session: Session) -> None:
        """Write every value not yet written with ``session``'s lease. Raises NotReadyError."""
        for key, (value, lease_id) in list(self.values.items()):
            if lease_id == session.lease_id:
                continue
            payload = json.dumps({**value, "lease": session.hex})
            await self.db.run(
                f"registering {key}", self.db.sql.register, {"key": key, "value": payload, "lease": session.lease_id}
            )
            self.values[key] = (value, session.lease_id)
            self.db.log.info("%s: registered %s on lease %s", self.db.store, key, session.hex)


class FleetRows:
    """Reads (and writes once: the fleet ID) the fleet's rows."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.fleet_id: str | None = None

    async def read_fleet_id(self) -> str:
        """The fleet ID in ``meta`` (written by the first node to ask, ``ON CONFLICT DO NOTHING``). Raises
        NotReadyError when the database cannot be used now, or the row holds no fleet ID."""
        if self.fleet_id is not None:
            return self.fleet_id
        value = json.dumps(
            {
                "fleet_id": str(uuid.uuid4()),
                "created_at": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            }
        )
        await self.db.run("writing the fleet ID", self.db.sql.meta_put, {"key": FLEET_ID_KEY, "value": value})
        rows = await self.db.run("reading the fleet ID", self.db.sql.meta_get, {"key": FLEET_ID_KEY})
        try:
            self.fleet_id = str(uuid.UUID(str(json.loads(rows[0][0])["fleet_id"])))
        except (IndexError, ValueError, KeyError, TypeError) as exc:
            raise BackendUnavailableError(f"{self.db.title} meta row {FLEET_ID_KEY} holds no fleet ID: {exc}") from exc
        return self.fleet_id

    async def read_record(self, name: str) -> dict[str, Any] | None:
        """Fleet record ``name``, None when absent. Raises NotReadyError (also for a value that is not a JSON
        object)."""
        rows = await self.db.run(
            f"reading fleet record {name}", self.db.sql.record_get, {"name": check_record_name(name)}
        )
        return parse_record(rows[0][0], f"{self.db.schema}.records/{name}") if rows else None

    async def swap_record(self, name: str, expected: dict[str, Any] | None, value: dict[str, Any]) -> bool:
        """One statement: create when absent (``expected`` None), else replace when the stored bytes are still
        ``expected`` (as :func:`~app.storage.lease.record_bytes`)."""
        params = {"name": check_record_name(name), "value": record_bytes(value).decode()}
        if expected is None:
            rows = await self.db.run(f"creating fleet record {name}", self.db.sql.record_create, params)
        else:
            params["expected"] = record_bytes(expected).decode()
            rows = await self.db.run(f"writing fleet record {name}", self.db.sql.record_swap, params)
        return bool(rows)

    async def has_member(self, token: str) -> bool | None:
        """Whether lease ``token`` (16 hex digits) is alive in this database; None when it cannot answer now."""
        lease_id = lease_of(token)
        if lease_id is None:
            return False
        try:
            rows = await self.db.run("looking up a peer's lease", self.db.sql.lease_alive, {"lease": lease_id})
        except NotReadyError:
            return None
        return bool(rows and rows[0][0])

    async def count_held(self, pool: IdentityPool) -> int | None:
        """Rows of the region's slice on a live lease; None when the database cannot answer now."""
        first, last = pool.slice
        try:
            rows = await self.db.run(
                f"counting the {pool.scheme} claims",
                self.db.sql.count_held,
                {"pool": pool.key_prefix, "low": first, "high": last},
            )
        except NotReadyError:
            return None
        return int(rows[0][0]) if rows else 0
