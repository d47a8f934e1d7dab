"""``idmint serve`` on PostgreSQL, as an operator sees it: the backend named in /v1/fleet, /readyz, /v1/schemes and the
metrics; the password never shown (logs, answers); a wrong password or an unreachable host at start is a not-ready
reason, not a crash; ``idmint storage sql`` prints what the backend creates; a claim row deleted under a running owner
(the lost-row case) stops the owner and is claimed by another node only one TTL later, with no ID issued twice."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.postgres import PASSWORD, PASSWORD_ROLE, PostgresSchema, PostgresServer
from tests.support.server import Server, free_port, run_idmint, running_server
from tests.support.storage import MARGIN_S, TTL_S, Store, store_for
from tests.test_replicas import ids_of

pytestmark = pytest.mark.integration  # a real PostgreSQL and idmint serve


@pytest.fixture
def store(request: pytest.FixtureRequest) -> Store:
    return store_for(request, "postgres")


def test_the_backend_is_named_and_the_password_never_shown(
    tmp_path: Path, postgres_server: PostgresServer, postgres_db: str
) -> None:
    dbname = postgres_db.rsplit("/", 1)[1]
    url = postgres_server.url(dbname, PASSWORD_ROLE, PASSWORD)
    env = {"IDMINT_POSTGRES_URL": url, "IDMINT_LEASE_TTL": str(TTL_S), "IDMINT_LEASE_SAFETY_MARGIN": str(MARGIN_S)}
    with running_server(tmp_path, env) as node:
        fleet = node.get_json("/v1/fleet")
        assert fleet["backend"] == "postgres"
        ready = node.get_json("/readyz")["backend"]
        assert ready["backend"] == "postgres" and ready["capabilities"]["can_revoke"] is True
        assert ready["database"] == f"postgresql://{PASSWORD_ROLE}@127.0.0.1:{postgres_server.port}/{dbname}"
        assert 'backend="postgres"' in node.metrics_text()
        shown = [node.get(p).text for p in ("/readyz", "/v1/schemes", "/v1/fleet", "/metrics")]
        ids_of(node, "eight-byte", 10, False)
        node.stop()
        for text in [*shown, node.log()]:
            assert PASSWORD not in text


@pytest.mark.parametrize("fault", ["wrong password", "unreachable host"])
def test_a_bad_database_at_start_is_not_ready_naming_why(
    tmp_path: Path, postgres_server: PostgresServer, fault: str
) -> None:
    url = (
        postgres_server.url("postgres", PASSWORD_ROLE, "not-" + PASSWORD)
        if fault == "wrong password"
        else f"postgresql://idmint:{PASSWORD}@127.0.0.1:{free_port()}/idmint"
    )
    words = 'password authentication failed for user "idmint_pw"' if fault == "wrong password" else "refused"
    with running_server(tmp_path, {"IDMINT_POSTGRES_URL": url}, ready=False) as node:
        deadline = time.monotonic() + 60
        while True:  # the port opens at once: "connecting to PostgreSQL" first, then why it cannot
            r = node.wait("/readyz", 503)
            reason = r.json()["schemes"]["eight-byte"]["reason"]
            if words in reason:
                break
            assert time.monotonic() < deadline, reason
            time.sleep(0.05)
        assert node.get("/v1/ids/eight-byte").status_code == 503
        assert node.get("/v1/ids/uuidv7").status_code == 200  # nothing leased: still issuing
        assert node.running
        node.stop()
        assert PASSWORD not in node.log() and PASSWORD not in r.text


def test_storage_sql_prints_the_tables_the_backend_creates(postgres_server: PostgresServer, postgres_db: str) -> None:
    dbname = postgres_db.rsplit("/", 1)[1]
    sql = run_idmint(["storage", "sql", "--schema", "reviewed"], timeout=120, check=True).stdout
    assert 'CREATE TABLE IF NOT EXISTS "reviewed".claims' in sql
    postgres_server.execute(sql, dbname)
    postgres_server.execute(sql, dbname)  # idempotent
    tables = postgres_server.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'reviewed' ORDER BY 1", dbname
    )
    assert [t[0] for t in tables] == [
        "backfill_marks", "claims", "leases", "ledger", "meta", "records", "registrations", "schema_version",
        "sequence_documents", "sequence_events",
    ]  # fmt: skip
    assert postgres_server.execute("SELECT version FROM reviewed.schema_version", dbname) == [(2,)]


def test_a_claim_row_deleted_under_its_owner_stops_it_and_is_claimed_again_only_one_ttl_later(
    tmp_path: Path, store: Store, postgres_server: PostgresServer, postgres_schema: PostgresSchema
) -> None:
    env = store.env(IDMINT_EIGHT_BYTE_POOL="0-0")  # one generator ID: the other node waits for that very row
    owner = Server(tmp_path, env)
    other: Server | None = None
    try:
        owner.wait_ready()
        other = Server(tmp_path, env)
        other.wait("/healthz")
        before = ids_of(owner, "eight-byte", 5000, False)
        assert other.get("/v1/ids/eight-byte").status_code == 503  # held by the owner
        # The row goes, as a failover that lost it would have it (an operator's DELETE here).
        postgres_server.execute(
            f"DELETE FROM {postgres_schema.schema}.claims WHERE pool_key = 'pool/0:' AND identity = 0",
            postgres_schema.dbname,
        )
        deleted = time.monotonic()
        while True:
            # Judged by when the request was sent: one answered 200 in time may reach a loaded test late.
            sent = time.monotonic()
            if owner.get("/v1/ids/eight-byte").status_code != 200:
                break
            assert sent - deleted < TTL_S, "the owner kept issuing from a row it no longer has"
            time.sleep(0.02)
        stopped = time.monotonic() - deleted
        # Either node may take the row made anew (the owner re-claims too): neither before one TTL.
        heir = None
        while heir is None:
            heir = next((n for n in (other, owner) if n.get("/v1/ids/eight-byte").status_code == 200), None)
            assert time.monotonic() - deleted < 30, other.log_tail()
            time.sleep(0.02)
        claimed = time.monotonic() - deleted
        assert claimed >= TTL_S - 0.5, f"the row was claimed {claimed:.2f} s after the DELETE: before one TTL"
        compared = before + ids_of(heir, "eight-byte", 5000, False)
        duplicates = len(compared) - len(set(compared))
        print(
            f"lost row: the owner stopped {stopped:.2f} s after the DELETE; the row was claimed again "
            f"{claimed:.2f} s after it (TTL {TTL_S} s); {len(compared)} IDs compared, {duplicates} duplicates"
        )
        assert duplicates == 0
        assert "claim row no longer on our lease" in owner.log()
    finally:
        for node in (owner, other):
            if node is not None:
                node.stop()
