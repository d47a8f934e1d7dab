"""pytest plugin: one test body, every networked storage backend. The fixture ``store`` is parametrized over
``etcd`` (the session's etcd, a namespace of the test's own) and ``postgres`` (the session's PostgreSQL, a database of
the test's own): a :class:`Store` that gives the environment of an ``idmint serve`` replica on it (:meth:`Store.env`)
and stops, starts, pauses (SIGSTOP) and resumes the server behind it. A test that stops or pauses it need not undo
it: the per-test fixtures behind it do (``etcd_namespace``, ``postgres_db``).

Every replica gets a short lease (:data:`TTL_S` s, :data:`MARGIN_S` s margin) so faults play out in seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

TTL_S = 3
MARGIN_S = 1.0
BACKENDS = ("etcd", "postgres")


@dataclass
class Store:
    """The backend a test's replicas share: ``name`` ("etcd" or "postgres"), ``settings`` (its IDMINT_* values),
    and the server's ``stop``, ``start``, ``pause`` and ``resume``."""

    name: str
    settings: dict[str, str]
    stop: Callable[[], None]
    start: Callable[[], None]
    pause: Callable[[], None]
    resume: Callable[[], None]

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
        return Store(name, settings, server.stop, server.start, server.pause, server.resume)
    server = request.getfixturevalue("postgres_server")
    url = request.getfixturevalue("postgres_db")
    settings = {"IDMINT_POSTGRES_URL": url, "IDMINT_POSTGRES_STATEMENT_TIMEOUT": "1"}
    return Store(name, settings, server.stop, server.start, server.pause, server.resume)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest) -> Store:
    """The test's store, once per networked backend."""
    return store_for(request, request.param)
