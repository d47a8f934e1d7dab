"""pytest plugin: one test body, every networked storage backend. The fixture ``store`` is parametrized over
``etcd`` (the session's etcd, a namespace of the test's own) and ``postgres`` (the session's PostgreSQL, a schema of
the test's own); ``mysql`` (the session's MariaDB, a database of the test's own) where a test names it
(:data:`EVERY_BACKEND`): a :class:`Store` that gives the environment of an ``idmint serve`` replica on it
(:meth:`Store.env`) and stops, starts, pauses (SIGSTOP) and resumes the server behind it. A test that stops or
pauses it need not undo it: the per-test fixtures behind it do (``etcd_namespace``, ``postgres_schema``,
``mysql_database``).

Every replica gets a short lease (:data:`TTL_S` s, :data:`MARGIN_S` s margin) so faults play out in seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tests.support.mariadb import MysqlDatabase
from tests.support.postgres import PostgresSchema

TTL_S = 3
MARGIN_S = 1.0
BACKENDS = ("etcd", "postgres")
"""The backends every replica test runs on (the ``store`` fixture's parameters)."""
EVERY_BACKEND = (*BACKENDS, "mysql")
"""With MySQL/MariaDB: for the tests about a backend's own behaviour (faults of its server, its claims and
sequences), which name it with ``@pytest.mark.parametrize("store", EVERY_BACKEND, indirect=True)``; the rest run on
the two above, to keep the suite's time."""


@dataclass
class Store:
    """The backend a test's replicas share: ``name`` ("etcd" or "postgres"), ``settings`` (its IDMINT_* values),
    the server's ``stop``, ``start``, ``pause`` and ``resume``, and ``held()``: the claims held now, each named as
    its etcd key without the namespace (``pool/0:17``, ``idmint/hlc-ulid/3``), read from the store itself."""

    name: str
    settings: dict[str, str]
    stop: Callable[[], None]
    start: Callable[[], None]
    pause: Callable[[], None]
    resume: Callable[[], None]
    held: Callable[[], list[str]]

    def env(self, **extra: str) -> dict[str, str]:
        """A replica's environment on this store (short lease, a SIQ domain), with ``extra`` on top."""
        return {
            **self.settings,
            "IDMINT_LEASE_TTL": str(TTL_S),
            "IDMINT_LEASE_SAFETY_MARGIN": str(MARGIN_S),
            "IDMINT_SIQ_DOMAIN": "example.com",
            **extra,
        }


def store_for(request: pytest.FixtureRequest, name: str) -> Store:
    """The :class:`Store` ``name`` for the test asking (its per-test fixtures taken from ``request``)."""
    if name == "etcd":
        server = request.getfixturevalue("etcd_server")
        namespace = request.getfixturevalue("etcd_namespace")
        settings = {"IDMINT_ETCD_ENDPOINTS": server.endpoint, "IDMINT_ETCD_NAMESPACE": namespace}

        def keys() -> list[str]:
            found = server.etcdctl("get", namespace, "--prefix", "--keys-only").split()
            held = (k[len(namespace) :] for k in found)
            return [k for k in held if not k.startswith(("idmint/marks/", "idmint/ledger/", "idmint/fleet"))]

        return Store(name, settings, server.stop, server.start, server.pause, server.resume, keys)
    if name == "mysql":
        database: MysqlDatabase = request.getfixturevalue("mysql_database")
        maria = database.server
        mysql_settings = {**database.env(), "IDMINT_MYSQL_STATEMENT_TIMEOUT": "1"}

        def mysql_rows() -> list[str]:
            found = maria.execute(
                "SELECT CONCAT(c.pool_key, c.identity) FROM claims c JOIN leases l ON l.lease_id = c.lease_id "
                "WHERE l.expires_at > UTC_TIMESTAMP(6)",
                database.name,
            )
            return [str(r[0]) for r in found]

        return Store(name, mysql_settings, maria.stop, maria.start, maria.pause, maria.resume, mysql_rows)
    server = request.getfixturevalue("postgres_server")
    own: PostgresSchema = request.getfixturevalue("postgres_schema")
    settings = {**own.env(), "IDMINT_POSTGRES_STATEMENT_TIMEOUT": "1"}

    def rows() -> list[str]:
        found = server.execute(
            f"SELECT c.pool_key || c.identity FROM {own.schema}.claims c JOIN {own.schema}.leases l USING (lease_id) "
            "WHERE l.expires_at > clock_timestamp()",
            own.dbname,
        )
        return [str(r[0]) for r in found]

    return Store(name, settings, server.stop, server.start, server.pause, server.resume, rows)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest) -> Store:
    """The test's store, once per networked backend."""
    return store_for(request, request.param)
