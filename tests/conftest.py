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
    "tests.support.etcd",
    "tests.support.prometheus",
    "tests.support.podman",
    "tests.support.postgres",
    "tests.support.storage",
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
        "store",
    }
)
"""Fixtures that start a real process (etcd, ``idmint serve``, Prometheus): a test using one is ``integration``."""


XDIST_GROUPS = {
    TESTS / "ops" / "test_podman.py": "podman",
    TESTS / "e2e": "e2e",
}
"""Tests that run on one pytest-xdist worker together (``--dist loadgroup``, scripts/test.sh): the podman tests
share one image built per session (built once, not once per worker); the browser tests share one Chromium and one
server (and write test-artifacts/e2e-server.log)."""


LONGEST_FIRST = tuple(
    TESTS / name
    for name in (
        "sequences/test_gapless_replicas.py",
        "test_fleets.py",
        "ops/test_podman.py",
        "sequences/test_clean_stop.py",
        "test_replicas.py",
        "api/test_contract.py",
        "e2e",
        "sequences/test_etcd_replicas.py",
        "sequences/test_admin_races.py",
        "test_etcd_member_loss.py",
        "ops/test_prometheus.py",
        "storage/etcd/test_cluster.py",
        "test_admin_replicas.py",
        "test_ledger_replicas.py",
        "test_bounds.py",
        "test_tooling.py",
    )
)
"""The modules that took longest in a measured run (``--durations``), longest first: an order only (pytest-xdist
hands the long ones out first, so no worker is left with one at the end); any module not named here still runs."""


def _rank(path: Path, slow_modules: set[Path]) -> int:
    for rank, where in enumerate(LONGEST_FIRST):
        if path == where or where in path.parents:
            return rank
    return len(LONGEST_FIRST) + (path not in slow_modules)


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

    Then the order: the modules of :data:`LONGEST_FIRST`, then the other modules holding real-process tests
    (``integration``, ``ops``, ``e2e``), then the rest, each module kept whole and in its place otherwise, so that
    pytest-xdist hands out the long tests first and the many short ones fill the workers up at the end. The groups
    of :data:`XDIST_GROUPS`, and the tests sharing a module's real part, get their ``xdist_group`` marker."""
    for item in items:
        if (TESTS / "ops") in item.path.parents:
            item.add_marker(pytest.mark.ops)
        if REAL_PART_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
        group = _group_of(item.path) or _shared_process_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
            if config.getoption("loadgroup", False):  # set on a pytest-xdist worker under --dist loadgroup
                _suffix_group(item, group)
    slow_modules = {
        item.path
        for item in items
        if any(item.get_closest_marker(name) for name in ("integration", "ops", "e2e", "xdist_group"))
    }
    items.sort(key=lambda item: _rank(item.path, slow_modules))
