"""Shared fixtures. Plugins under tests/support start the real parts tests need (etcd, Prometheus, browsers).

Async tests are anyio tests (``pytestmark = pytest.mark.anyio``) on asyncio, the loop the app runs on; never
``asyncio.run()`` inside a sync test.
"""

from pathlib import Path

import pytest
from hypothesis import settings

# No per-example deadline: Hypothesis's default (200 ms an example) is a time budget, and on a busy machine an
# example of the codec or generator properties took 342 to 374 ms; the properties are about values, not speed
# (speed lives in bench/).
settings.register_profile("idmint", deadline=None)
settings.load_profile("idmint")

pytest_plugins = ["tests.support.etcd", "tests.support.prometheus", "tests.support.podman", "tests.support.postgres"]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """asyncio only; module scope so that a module may keep one event loop (a module-scoped async fixture)."""
    return "asyncio"


TESTS = Path(__file__).parent
REAL_PART_FIXTURES = frozenset(
    {
        "etcd_server",
        "etcd_namespace",
        "etcd_cluster",
        "etcd_factory",
        "server",
        "replica_on",
        "idmint_server",
        "prometheus_server",
        "postgres_server",
    }
)
"""Fixtures that start a real process (etcd, ``idmint serve``, Prometheus): a test using one is ``integration``."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The lanes (markers registered in pyproject.toml): ``ops`` for tests/ops, ``e2e`` for tests/e2e (its
    conftest), ``integration`` for any test using a fixture of :data:`REAL_PART_FIXTURES`; modules that start
    processes themselves mark themselves. ``scripts/check.sh`` runs the rest, the fast lane."""
    for item in items:
        if (TESTS / "ops") in item.path.parents:
            item.add_marker(pytest.mark.ops)
        if REAL_PART_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
