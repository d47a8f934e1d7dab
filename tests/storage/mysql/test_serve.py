"""``idmint serve`` on MySQL/MariaDB, as an operator sees it: the backend named in /v1/fleet, /readyz and the metrics;
the password never shown (logs, answers); a wrong password or an unreachable host at start is a not-ready reason at
once while the server listens; ``idmint storage sql --dialect mysql`` prints what the backend creates."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.mariadb import APP_PASSWORD, APP_USER, MariadbServer, MysqlDatabase
from tests.support.server import free_port, run_idmint, running_server
from tests.support.storage import MARGIN_S, TTL_S
from tests.test_replicas import ids_of

pytestmark = pytest.mark.integration  # a real MariaDB and idmint serve


def test_the_backend_is_named_and_the_password_never_shown(tmp_path: Path, mysql_database: MysqlDatabase) -> None:
    env = {**mysql_database.env(), "IDMINT_LEASE_TTL": str(TTL_S), "IDMINT_LEASE_SAFETY_MARGIN": str(MARGIN_S)}
    with running_server(tmp_path, env) as node:
        assert node.get_json("/v1/fleet")["backend"] == "mysql"
        ready = node.get_json("/readyz")["backend"]
        assert ready["backend"] == "mysql" and ready["capabilities"]["can_revoke"] is True
        port = mysql_database.server.port
        assert ready["database"] == f"mysql://{APP_USER}@127.0.0.1:{port}/{mysql_database.name}"
        assert 'backend="mysql"' in node.metrics_text()
        shown = [node.get(p).text for p in ("/readyz", "/v1/schemes", "/v1/fleet", "/metrics")]
        assert len(set(ids_of(node, "eight-byte", 10, False))) == 10
        node.stop()
        for text in [*shown, node.log()]:
            assert APP_PASSWORD not in text


@pytest.mark.parametrize("fault", ["wrong password", "unreachable host"])
def test_a_bad_database_at_start_is_not_ready_naming_why(
    tmp_path: Path, mariadb_server: MariadbServer, mysql_database: MysqlDatabase, fault: str
) -> None:
    if fault == "wrong password":
        url = mariadb_server.url(mysql_database.name, password="not-" + APP_PASSWORD)
        words = "rejected our credentials"
    else:
        url = f"mysql://{APP_USER}:{APP_PASSWORD}@127.0.0.1:{free_port()}/{mysql_database.name}"
        words = "is unreachable or refused the connection"
    with running_server(tmp_path, {"IDMINT_MYSQL_URL": url}, ready=False) as node:
        started = time.monotonic()
        while True:  # the port opens at once: "connecting to MySQL" first, then why it cannot
            r = node.wait("/readyz", 503)
            reason = r.json()["schemes"]["eight-byte"]["reason"]
            if words in reason:
                break
            assert time.monotonic() < started + 60, reason
            time.sleep(0.05)
        assert node.get("/v1/ids/eight-byte").status_code == 503
        assert node.get("/v1/ids/uuidv7").status_code == 200  # nothing leased: still issuing
        assert node.running
        node.stop()
        assert APP_PASSWORD not in node.log() and APP_PASSWORD not in r.text


def test_storage_sql_prints_the_tables_the_backend_creates(mariadb_server: MariadbServer, mariadb_db: str) -> None:
    sql = run_idmint(["storage", "sql", "--dialect", "mysql", "--schema", mariadb_db], timeout=120, check=True).stdout
    assert f"CREATE TABLE IF NOT EXISTS `{mariadb_db}`.claims" in sql
    mariadb_server.run_script(sql)
    mariadb_server.run_script(sql)  # idempotent
    tables = mariadb_server.execute(
        f"SELECT table_name FROM information_schema.tables WHERE table_schema = '{mariadb_db}' ORDER BY 1"
    )
    assert [t[0] for t in tables] == [
        "backfill_marks", "claims", "leases", "ledger", "meta", "records", "registrations", "schema_version",
        "sequence_documents", "sequence_events", "sequence_locks",
    ]  # fmt: skip
    assert mariadb_server.execute(f"SELECT version FROM `{mariadb_db}`.schema_version") == [["2"]]
