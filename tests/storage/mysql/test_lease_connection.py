"""The lease on a connection of its own, on MySQL/MariaDB: a real ``idmint serve`` whose gapless sequence's lock row
another session holds (``SELECT ... FOR UPDATE``, mid-transaction) for longer than the lease's TTL while the
replica serves sequence requests that wait on it. Its lease renewals never queue behind them: /readyz stays 200 and
leased IDs keep issuing throughout; and the replica keeps two connections (the lease's and the stores')."""

from __future__ import annotations

import logging
from pathlib import Path

import pymysql
import pytest

from tests.support.lanes import HOLD_S, MARGIN_S, TTL_S, until, watch_while_locked
from tests.support.mariadb import APP_PASSWORD, APP_USER, MysqlDatabase
from tests.support.server import running_server

pytestmark = pytest.mark.integration  # a real MariaDB and idmint serve

log = logging.getLogger(__name__)


def connections(own: MysqlDatabase) -> int:
    rows = own.server.execute(
        f"SELECT count(*) FROM information_schema.PROCESSLIST WHERE USER = '{APP_USER}' AND DB = '{own.name}'"
    )
    return int(str(rows[0][0]))


def test_a_sequence_lock_held_past_the_ttl_never_delays_a_renewal(
    tmp_path: Path, mysql_database: MysqlDatabase
) -> None:
    env = {**mysql_database.env(), "IDMINT_LEASE_TTL": str(TTL_S), "IDMINT_LEASE_SAFETY_MARGIN": str(MARGIN_S)}
    with running_server(tmp_path, env) as node:
        node.post_json("/v1/sequences", {"name": "invoices", "mode": "gapless"})
        assert node.get("/v1/ids/eight-byte").status_code == 200
        until(lambda: connections(mysql_database) == 2, 30, "one connection for the lease, one for the stores")
        holder = pymysql.connect(
            host="127.0.0.1",
            port=mysql_database.server.port,
            user=APP_USER,
            password=APP_PASSWORD,
            database=mysql_database.name,
        )
        try:
            with holder.cursor() as cur:  # a transaction, left open: the row lock is held until rollback
                cur.execute("BEGIN")
                cur.execute("SELECT name FROM sequence_locks WHERE name = 'invoices' FOR UPDATE")
                assert cur.fetchall() == (("invoices",),)
            gaps, while_held = watch_while_locked(node, holder.rollback)
            assert 200 not in while_held  # every one waited on the lock held above
        finally:
            holder.close()
        log.warning("lock held %.1f s (TTL %d s): %s", HOLD_S, TTL_S, gaps)
        assert gaps["not_ready"] == 0 and gaps["ids_refused"] == 0, gaps
        assert node.post_json("/v1/sequences/invoices/reserve", {})["value"] >= 1  # the lock is free again
        assert connections(mysql_database) <= 2
