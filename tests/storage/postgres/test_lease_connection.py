"""The lease on a connection of its own: a real ``idmint serve`` on a real PostgreSQL, whose gapless sequence's lock
another session holds (mid-transaction) for longer than the lease's TTL while the replica serves sequence requests
that wait on it. Its lease renewals never queue behind them: /readyz stays 200 and leased IDs keep issuing
throughout; and the replica keeps two connections (the lease's and the stores')."""

from __future__ import annotations

import logging
from pathlib import Path

import psycopg
import pytest

from tests.support.lanes import HOLD_S, MARGIN_S, TTL_S, until, watch_while_locked
from tests.support.postgres import PostgresServer
from tests.support.server import running_server

pytestmark = pytest.mark.integration  # a real PostgreSQL and idmint serve

log = logging.getLogger(__name__)


def connections(server: PostgresServer, dbname: str) -> dict[str, int]:
    rows = server.execute(
        f"SELECT application_name, count(*) FROM pg_stat_activity WHERE datname = '{dbname}' "
        "AND application_name LIKE 'idmint%' GROUP BY 1"
    )
    return {str(name): int(str(count)) for name, count in rows}


def test_a_sequence_lock_held_past_the_ttl_never_delays_a_renewal(
    tmp_path: Path, postgres_server: PostgresServer, postgres_db: str
) -> None:
    dbname = postgres_db.rsplit("/", 1)[1]
    env = {
        "IDMINT_POSTGRES_URL": postgres_db,
        "IDMINT_LEASE_TTL": str(TTL_S),
        "IDMINT_LEASE_SAFETY_MARGIN": str(MARGIN_S),
    }
    with running_server(tmp_path, env) as node:
        node.post_json("/v1/sequences", {"name": "invoices", "mode": "gapless"})
        assert node.get("/v1/ids/eight-byte").status_code == 200
        until(
            lambda: connections(postgres_server, dbname) == {"idmint": 1, "idmint-lease": 1},
            30,
            "one connection for the lease, one for the stores",
        )

        with psycopg.connect(postgres_db) as holder:  # a transaction, left open: the lock is held until rollback
            holder.execute(
                "SELECT pg_advisory_xact_lock(hashtext('idmint/sequences'), hashtext('invoices'))"
            ).fetchall()
            gaps, while_held = watch_while_locked(node, holder.rollback)
            assert 200 not in while_held  # every one waited on the lock held above
        log.warning("lock held %.1f s (TTL %d s): %s", HOLD_S, TTL_S, gaps)
        assert gaps["not_ready"] == 0 and gaps["ids_refused"] == 0, gaps
        assert node.post_json("/v1/sequences/invoices/reserve", {})["value"] >= 1  # the lock is free again
