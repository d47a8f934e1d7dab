"""What the PostgreSQL store is now, for :class:`~app.storage.history.HistoryGuard`: the cluster's system
identifier (``pg_control_system()``: a new cluster, initdb, a logical dump restored elsewhere), the timeline of the
WAL being written (from ``pg_walfile_name(pg_current_wal_lsn())``: a point-in-time recovery or a promoted standby
starts a new one), the oids of idmint's tables (``pg_restore --clean`` or a dump restored into another database
makes them anew), and the WAL position (only grows while the cluster keeps its history; a recovery to an earlier
point starts below what nodes saw).

``pg_control_system()`` needs ``EXECUTE`` (granted to superusers and ``pg_monitor`` members only, in some set-ups):
without it the system identifier is left out (logged once) and the other facts still decide."""

from __future__ import annotations

import logging
from typing import Any

from app.storage.lease import Facts
from app.storage.postgres.client import Database

log = logging.getLogger("idmint.storage.postgres")

FACTS_SQL = """\
SELECT CASE WHEN has_function_privilege('pg_control_system()', 'EXECUTE')
            THEN (SELECT system_identifier::text FROM pg_control_system()) END,
       ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint,
       (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint,
       (SELECT coalesce(json_object_agg(c.relname, c.oid::bigint ORDER BY c.relname), '{}'::json)::text
          FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = %(schema)s AND c.relkind = 'r')
"""


class HistoryFacts:
    """Reads the facts through ``db`` (its own statement: one round trip)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._warned = False

    async def read(self) -> Facts:
        """The facts now. Raises NotReadyError when PostgreSQL cannot be used now."""
        import json

        rows = await self.db.run("reading the storage's history", FACTS_SQL, {"schema": self.db.schema})
        system_id, timeline, lsn, tables = rows[0]
        identity: dict[str, Any] = {}
        if system_id is not None:
            identity["system_identifier"] = str(system_id)
        elif not self._warned:
            self._warned = True
            log.warning(
                "postgres: this role may not run pg_control_system(): the cluster's system identifier is not "
                "compared (grant pg_monitor to compare it); the timeline, WAL position and table oids still are"
            )
        identity["timeline"] = int(timeline)
        identity["tables"] = {str(k): int(v) for k, v in json.loads(tables).items()}
        return Facts(identity, int(lsn), "WAL position")
