"""The privileges docs/storage.md names for MySQL are the ones ``idmint storage sql --dialect mysql`` prints, and
they are enough: an account with exactly those grants, on tables made by another account, runs a replica on a real
MariaDB (leased IDs, a sequence range, a gapless reserve and commit)."""

from __future__ import annotations

import secrets
from pathlib import Path

import httpx
import pytest

from app.storage.mysql.sql import ddl, grants
from tests.support.docs import read_blocks
from tests.support.mariadb import MariadbServer
from tests.support.server import REPO, running_server
from tests.support.storage import MARGIN_S, TTL_S
from tests.test_replicas import ids_of

pytestmark = pytest.mark.integration  # a real MariaDB and idmint serve


def doc_grants() -> list[str]:
    blocks = [b for b in read_blocks(REPO / "docs" / "storage.md") if b.language == "sql"]
    found = [b for b in blocks if b.text.lstrip().startswith("GRANT") and "`" in b.text]
    assert len(found) == 1, [b.where for b in found]
    return [line.strip() for line in found[0].text.splitlines() if line.strip()]


def test_the_page_shows_the_printed_grants() -> None:
    assert doc_grants() == grants("ids")


def test_an_account_with_only_the_printed_grants_runs_a_replica(
    tmp_path: Path, mariadb_server: MariadbServer, mariadb_db: str
) -> None:
    mariadb_server.run_script(ddl(mariadb_db))  # the tables, made by root
    account, password = f"app_{secrets.token_hex(4)}", secrets.token_hex(12)
    mariadb_server.execute(f"CREATE USER '{account}'@'127.0.0.1' IDENTIFIED BY '{password}'")
    for grant in grants(mariadb_db, f"'{account}'@'127.0.0.1'"):
        mariadb_server.execute(grant)
    env = {
        "IDMINT_MYSQL_URL": mariadb_server.url(mariadb_db, account, password),
        "IDMINT_LEASE_TTL": str(TTL_S),
        "IDMINT_LEASE_SAFETY_MARGIN": str(MARGIN_S),
    }
    try:
        with running_server(tmp_path, env) as node:
            assert len(set(ids_of(node, "eight-byte", 50, False))) == 50
            node.post_json("/v1/sequences", {"name": "orders"})
            taken = httpx.post(f"{node.url}/v1/sequences/orders/range", params={"count": 10}, timeout=30)
            assert taken.status_code == 200 and taken.json()["count"] == 10, taken.text
            node.post_json("/v1/sequences", {"name": "invoices", "mode": "gapless"})
            held = node.post_json("/v1/sequences/invoices/reserve", {})
            done = node.post_json("/v1/sequences/invoices/commit", {"reservation": held["reservation"]})
            assert done["state"] == "committed" and done["value"] == held["value"] == 1
    finally:
        mariadb_server.execute(f"DROP USER '{account}'@'127.0.0.1'")
