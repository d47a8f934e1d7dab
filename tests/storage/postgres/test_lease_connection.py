"""The lease on a connection of its own: a real ``idmint serve`` on a real PostgreSQL, whose gapless sequence's lock
another session holds (mid-transaction) for longer than the lease's TTL while the replica serves sequence requests
that wait on it. Its lease renewals never queue behind them: /readyz stays 200 and leased IDs keep issuing
throughout; and the replica keeps two connections (the lease's and the stores')."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.support.postgres import PostgresServer
from tests.support.server import Server, running_server
from tests.support.storage import MARGIN_S, TTL_S

pytestmark = pytest.mark.integration  # a real PostgreSQL and idmint serve

log = logging.getLogger(__name__)

HOLD_S = 3 * TTL_S
"""How long the other session holds the sequence's lock: three TTLs (a lease renewed on the stores' connection
would fail closed within the first)."""
WAITERS = 4
"""Concurrent sequence requests kept waiting on the lock."""


def until(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.05)


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
            stop = threading.Event()
            answers: list[int] = []

            def reserve() -> None:
                while not stop.is_set():
                    r = httpx.post(f"{node.url}/v1/sequences/invoices/reserve", json={"ttl_s": 60}, timeout=30)
                    answers.append(r.status_code)

            waiters = [threading.Thread(target=reserve, daemon=True) for _ in range(WAITERS)]
            for waiter in waiters:
                waiter.start()
            try:
                until(lambda: 503 in answers, 30, "a sequence request waited on the lock and gave up")
                gaps = watch(node, HOLD_S)
                while_held = list(answers)
            finally:
                stop.set()
                holder.rollback()
            for waiter in waiters:
                waiter.join(60)
            assert 200 not in while_held  # every one waited on the lock held above
        log.warning("lock held %.1f s (TTL %d s): %s", HOLD_S, TTL_S, gaps)
        assert gaps["not_ready"] == 0 and gaps["ids_refused"] == 0, gaps
        assert node.post_json("/v1/sequences/invoices/reserve", {})["value"] >= 1  # the lock is free again


def watch(node: Server, seconds: float) -> dict[str, float]:
    """Poll /readyz and GET /v1/ids/eight-byte for ``seconds``: how many answers were not 200, and the longest
    stretch (s) between two 200s of /readyz."""
    not_ready = refused = polls = 0
    longest = 0.0
    end = time.monotonic() + seconds
    last_ready = time.monotonic()
    while time.monotonic() < end:
        polls += 1
        ready = node.get("/readyz").status_code
        now = time.monotonic()
        if ready == 200:
            longest = max(longest, now - last_ready)
            last_ready = now
        else:
            not_ready += 1
        if node.get("/v1/ids/eight-byte").status_code != 200:
            refused += 1
        time.sleep(0.05)
    longest = max(longest, time.monotonic() - last_ready)
    return {"polls": polls, "not_ready": not_ready, "ids_refused": refused, "longest_ready_gap_s": round(longest, 2)}
