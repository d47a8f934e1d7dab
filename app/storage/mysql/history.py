"""What the MySQL/MariaDB store is now, for :class:`~app.storage.history.HistoryGuard`: the creation times of
idmint's tables (``information_schema.TABLES.CREATE_TIME``: a logical dump restored, into this server or another,
makes them anew) and, on MySQL, the server's ``server_uuid`` (a new server, a promoted replica). MySQL has no
position readable by every account that only grows with the data (the binary log's is absent where it is off):
the facts carry none, and the history record's generation, raised by every node each round, tells a record put
back from a backup (docs/storage.md)."""

from __future__ import annotations

from typing import Any

from app.storage.lease import Facts
from app.storage.mysql.client import Database


class HistoryFacts:
    """Reads the facts through ``db`` (one statement; ``server_uuid`` by a second one on MySQL)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def read(self) -> Facts:
        """The facts now. Raises NotReadyError when MySQL cannot be used now."""
        rows = await self.db.run("reading the storage's history", self.db.sql.facts, {"schema": self.db.schema})
        identity: dict[str, Any] = {"tables": {str(name): str(created) for _, name, created in rows}}
        if rows and "mariadb" not in str(rows[0][0]).lower():
            found = await self.db.run("reading the server's UUID", "SELECT @@server_uuid", {})
            identity["server_uuid"] = str(found[0][0])
        return Facts(identity, None, "position")
