"""The grants ``idmint storage sql`` prints, on a real PostgreSQL: a role holding only them (its database's CONNECT
taken from PUBLIC, so that the printed one is what lets it in) can run every statement of the backend and runs a
replica: leased IDs, Wiji's registration, sequences (gapless ones and their audit too), a revoke, a clean stop. A
role holding only CONNECT and CREATE on the database makes the tables at its first start. The SQL blocks of
docs/storage.md run against the backend's tables."""

from __future__ import annotations

import re
import secrets
from pathlib import Path

import httpx
import psycopg
import pytest

from app.storage.postgres.sql import GRANTEE, Statements, ddl
from tests.support.docs import read_blocks
from tests.support.postgres import PostgresServer
from tests.support.server import REPO, Server
from tests.support.storage import MARGIN_S, TTL_S
from tests.test_replicas import ids_of

pytestmark = pytest.mark.integration  # a real PostgreSQL, a real idmint serve

PRINTED_GRANT = re.compile(r"^--\s+(GRANT .+;)$", re.M)
NOT_STATEMENTS = {"schema", "ddl", "ddl_lock", "seq_lock_space", "backfill_lock_space"}
"""Attributes of :class:`Statements` that are no statement a replica runs (the DDL is the first start's)."""
TYPED = {"mark": 0, "floor": 0}
"""Parameters whose NULL would leave an expression untyped (``greatest(NULL, NULL)``): planned with an integer."""
LEASED = ("eight-byte", "muid", "hlc-ulid", "siq", "snowflake")


def printed_grants(schema: str, role: str, database: str) -> list[str]:
    """The grants the DDL prints (as comments) for ``schema``, made out to ``role`` on ``database``."""
    found = PRINTED_GRANT.findall(ddl(schema))
    assert found, "idmint storage sql prints no grants"
    return [g.replace(f" TO {GRANTEE};", f" TO {role};").replace("<database>", database) for g in found]


@pytest.fixture
def replica_role(postgres_server: PostgresServer, postgres_db: str) -> str:
    """A login role holding only the printed grants on this test's database, whose tables the superuser made."""
    dbname = postgres_db.rsplit("/", 1)[1]
    role = f"idmint_app_{secrets.token_hex(4)}"
    postgres_server.execute(f"CREATE ROLE {role} LOGIN")
    postgres_server.execute(ddl("idmint"), dbname)
    postgres_server.execute(f"REVOKE ALL ON DATABASE {dbname} FROM PUBLIC", dbname)
    for grant in printed_grants("idmint", role, dbname):
        postgres_server.execute(grant, dbname)
    return role


def test_the_ddl_prints_grants_for_the_database_the_schema_and_each_table() -> None:
    printed = printed_grants("ids", "app", "orders")
    assert printed[:2] == ["GRANT CONNECT ON DATABASE orders TO app;", 'GRANT USAGE ON SCHEMA "ids" TO app;']
    tables = re.findall(r'CREATE TABLE IF NOT EXISTS "ids"\.(\w+)', ddl("ids"))
    assert sorted(re.findall(r' ON "ids"\.(\w+) TO', "\n".join(printed))) == sorted(tables)
    assert not any(word in "\n".join(printed) for word in ("ALL", "TRUNCATE", "CREATE", "SEQUENCE"))


def test_every_statement_of_the_backend_is_permitted_by_the_printed_grants(
    postgres_server: PostgresServer, postgres_db: str, replica_role: str
) -> None:
    dbname = postgres_db.rsplit("/", 1)[1]
    statements = {k: v for k, v in vars(Statements("idmint")).items() if k not in NOT_STATEMENTS}
    refused = []
    # EXPLAIN plans a statement and checks its privileges without running it.
    dsn = postgres_server.url(dbname, replica_role)
    with psycopg.connect(dsn, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
        for name, sql in statements.items():
            params = {p: TYPED.get(p) for p in re.findall(r"%\((\w+)\)s", sql)}
            try:
                conn.execute(f"EXPLAIN {sql}", params or None)
            except psycopg.Error as exc:
                refused.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # and no more: no DDL
            conn.execute("CREATE TABLE idmint.extra (x int)")
    assert len(statements) > 30 and not refused, "\n".join(refused)


def test_a_role_with_only_the_printed_grants_runs_a_replica(
    tmp_path: Path, postgres_server: PostgresServer, postgres_db: str, replica_role: str
) -> None:
    dbname = postgres_db.rsplit("/", 1)[1]
    env = {
        "IDMINT_POSTGRES_URL": postgres_server.url(dbname, replica_role),
        "IDMINT_LEASE_TTL": str(TTL_S),
        "IDMINT_LEASE_SAFETY_MARGIN": str(MARGIN_S),
    }
    node = Server(tmp_path, env)
    try:
        node.wait_ready()
        for scheme in (*LEASED, "wiji"):
            assert len(set(ids_of(node, scheme, 100, False))) == 100
        node.post_json("/v1/sequences", {"name": "orders", "start": 1})
        assert node.get_json("/v1/sequences/orders/next", count=3)["ids"] == [1, 2, 3]
        node.post_json("/v1/sequences", {"name": "receipts", "mode": "gapless"})
        held = node.post_json("/v1/sequences/receipts/reserve", {})
        node.post_json("/v1/sequences/receipts/commit", {"reservation": held["reservation"]})
        assert [e["event"] for e in node.get_json("/v1/sequences/receipts/audit")["events"]] == ["reserve", "commit"]
        claim = next(c for c in node.get_json("/v1/admin/claims")["claims"] if c["scheme"] == "eight-byte")
        r = httpx.post(f"{node.url}/v1/admin/claims/eight-byte/{claim['identity']}/revoke", timeout=30)
        assert r.status_code == 200, r.text
        node.stop()
        assert "permission denied" not in node.log(), node.log_tail()
        rows = postgres_server.execute("SELECT count(*) FROM idmint.claims WHERE lease_id IS NOT NULL", dbname)
        assert rows == [(0,)]  # every claim given back at the stop
    finally:
        node.stop()


def test_a_role_with_create_on_the_database_makes_the_tables_at_its_first_start(
    tmp_path: Path, postgres_server: PostgresServer, postgres_db: str
) -> None:
    dbname = postgres_db.rsplit("/", 1)[1]
    role = f"idmint_owner_{secrets.token_hex(4)}"
    postgres_server.execute(f"CREATE ROLE {role} LOGIN")
    postgres_server.execute(f"REVOKE ALL ON DATABASE {dbname} FROM PUBLIC", dbname)
    postgres_server.execute(f"GRANT CONNECT, CREATE ON DATABASE {dbname} TO {role}", dbname)
    env = {
        "IDMINT_POSTGRES_URL": postgres_server.url(dbname, role),
        "IDMINT_LEASE_TTL": str(TTL_S),
        "IDMINT_LEASE_SAFETY_MARGIN": str(MARGIN_S),
    }
    node = Server(tmp_path, env)
    try:
        node.wait_ready()
        assert len(ids_of(node, "eight-byte", 10, False)) == 10
    finally:
        node.stop()
    owner = postgres_server.execute("SELECT tableowner FROM pg_tables WHERE tablename = 'claims'", dbname)
    assert owner == [(role,)]


def test_the_sql_blocks_of_the_storage_page_are_the_printed_grants_or_run_on_the_backends_tables(
    tmp_path: Path, postgres_server: PostgresServer, postgres_db: str
) -> None:
    dbname = postgres_db.rsplit("/", 1)[1]
    blocks = [b for b in read_blocks(REPO / "docs" / "storage.md") if b.language == "sql"]
    grant_blocks = [b for b in blocks if b.text.lstrip().startswith("GRANT")]
    ours = [b for b in grant_blocks if "`" not in b.text]  # MySQL's quote with backticks (tests/storage/mysql)
    assert len(ours) == 1, [b.where for b in ours]
    shown = [line.split("--")[0].strip() for line in ours[0].text.splitlines() if line.strip()]
    assert shown == printed_grants("idmint", "idmint_app", "ids"), ours[0].where
    node = Server(
        tmp_path,
        {
            "IDMINT_POSTGRES_URL": postgres_db,
            "IDMINT_LEASE_TTL": str(TTL_S),
            "IDMINT_LEASE_SAFETY_MARGIN": str(MARGIN_S),
        },
    )
    try:
        node.wait_ready()
        for scheme in LEASED:
            ids_of(node, scheme, 1, False)
        for block in blocks:
            if block not in grant_blocks:
                rows = postgres_server.execute(block.text, dbname)
                if "idmint.claims" in block.text:  # the live claims: the node's, one per leased scheme
                    assert len(rows) == len(LEASED), (block.where, rows)
    finally:
        node.stop()
