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

pytest_plugins = [
    "tests.support.http",
    "tests.support.etcd",
    "tests.support.prometheus",
    "tests.support.podman",
    "tests.support.postgres",
    "tests.support.mariadb",
    "tests.support.storage",
    "tests.support.order",
    "tests.support.bytecode",
]


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
        "postgres_db",
        "postgres_schema",
        "mariadb_server",
        "mariadb_db",
        "mysql_database",
        "store",
        "conformance_run",
    }
)
"""Fixtures that start a real process (etcd, ``idmint serve``, Prometheus, the conformance driver's fleet): a test
using one is ``integration``; one of module scope keeps the module's tests on one worker."""


XDIST_GROUPS = {
    TESTS / "ops" / "test_podman.py": "podman",
    TESTS / "e2e": "e2e",
}
"""Tests that run on one pytest-xdist worker together (``--dist loadgroup``, scripts/test.sh): the podman tests
share one image built per session (built once, not once per worker); the browser tests share one Chromium and one
server (and write test-artifacts/e2e-server.log)."""


def _group_of(path: Path) -> str | None:
    for where, group in XDIST_GROUPS.items():
        if path == where or where in path.parents:
            return group
    return None


def _shared_process_group(item: pytest.Item) -> str | None:
    """The module's own group when the test uses a real part shared at module scope or wider (a module's one
    ``idmint serve``): its tests run on one worker, so the part starts once, not once per worker."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for name in REAL_PART_FIXTURES & set(info.name2fixturedefs):
        if info.name2fixturedefs[name][-1].scope in ("module", "package"):
            return str(item.path.relative_to(TESTS.parent))
    return None


def _suffix_group(item: pytest.Item, group: str) -> None:
    """What pytest-xdist's worker does for ``--dist loadgroup`` (the scheduler reads the group from a node ID's
    ``@<group>`` suffix), done on pytest >= 9.2's structured node IDs, where xdist 3.8's write to ``item._nodeid``
    no longer takes effect (pytest-dev/pytest-xdist#1386: every test would be handed out alone). A later xdist
    that does it again adds a second ``@<group>``; the scheduler reads the last one, the same group."""
    try:
        from _pytest.nodeid import coerce_node_id
    except ImportError:  # an older pytest: xdist's own suffix works
        return
    if not item.nodeid.endswith(f"@{group}"):
        item._id = coerce_node_id(f"{item.nodeid}@{group}")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group markers (--dist loadgroup)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The lanes (markers registered in pyproject.toml): ``ops`` for tests/ops, ``e2e`` for tests/e2e (its
    conftest), ``integration`` for any test using a fixture of :data:`REAL_PART_FIXTURES`; modules that start
    processes themselves mark themselves. ``scripts/check.sh`` runs the rest, the fast lane.

    Then the order (:func:`tests.support.order.longest_first`): the units pytest-xdist hands out (a group whole,
    else one test) by their durations stored in tests/durations.json, longest first, so that the long ones start
    first and the many short ones fill the workers up at the end. The groups of :data:`XDIST_GROUPS`, and the tests
    sharing a module's real part, get their ``xdist_group`` marker."""
    groups: dict[int, str] = {}
    for item in items:
        if (TESTS / "ops") in item.path.parents:
            item.add_marker(pytest.mark.ops)
        if REAL_PART_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
        group = _group_of(item.path) or _shared_process_group(item)
        if group is not None:
            groups[id(item)] = group
            item.add_marker(pytest.mark.xdist_group(group))
            if config.getoption("loadgroup", False):  # set on a pytest-xdist worker under --dist loadgroup
                _suffix_group(item, group)
    from tests.support.order import longest_first  # a plugin of pytest_plugins: imported by pytest first

    longest_first(items, lambda item: groups.get(id(item)))


# The harness's report of servers whose shutdown hung (imported here, after the plugins above are registered, so
# that their modules are assertion-rewritten as plugins).
def pytest_configure(config: pytest.Config) -> None:
    from tests.support.server import start_hung_stops

    start_hung_stops(config)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.support.server import report_hung_stops

    report_hung_stops(terminalreporter)
